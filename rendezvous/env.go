package rendezvous

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/goccl/goccl/internal/config"
)

// Env is what the launcher's environment says about this rank.
type Env struct {
	Rank, WorldSize, LocalRank int
	StoreAddr                  string // host:port of the TCP store, "" if the environment gives none
	StoreAddrFrom              string // the setting StoreAddr came from, for messages: "GOCCL_STORE_ADDR", "MASTER_ADDR, MASTER_PORT"
	StoreDir                   string // shared directory for a file store / address file, "" if none
	JobID                      string // identifier common to all ranks of this job, "" if unknown
	Source                     string // "goccl", "torchrun", "openmpi", "slurm"
	Token                      string // GOCCL_JOB_TOKEN: the job's shared secret, "" for none
	// AgentStore is the address of a c10d TCPStore that the launcher already
	// serves for the job (torchrun's agent, TORCHELASTIC_USE_AGENT_STORE=True:
	// MASTER_ADDR:MASTER_PORT), "" if none. While StoreAddr is this address,
	// Connect makes every rank a client of that store (DialC10d) instead of
	// rank 0 serving goccl's TCP store there.
	AgentStore string
	// Attempt is torchrun's TORCHELASTIC_RESTART_COUNT, "" if unset: it keeps
	// the keys of a restarted job apart from the earlier attempts' in the
	// agent's store, which outlives them.
	Attempt string
	// Etcd is GOCCL_STORE when it names an etcd cluster
	// (etcd://host:port[,host:port...]/prefix, see ParseEtcdURL), "" if
	// not: Connect then makes every rank a client of that cluster.
	Etcd string
	// Served is true when the launcher serves goccl's TCP store at
	// StoreAddr (GOCCL_STORE_SERVED=launcher: goccl run --max-restarts), so
	// that it outlives every rank: Connect makes every rank, rank 0
	// included, a client of it.
	Served bool
}

// envSource is one launcher's rank variables.
type envSource struct {
	name              string
	rank, size, local string
	strict            bool // present when either rank or size is set (else: when rank is set)
}

// envSources in order of precedence.
var envSources = []envSource{
	{name: "goccl", rank: config.Rank.Name, size: config.WorldSize.Name, local: config.LocalRank.Name, strict: true},
	{name: "torchrun", rank: "RANK", size: "WORLD_SIZE", local: "LOCAL_RANK"},
	{name: "openmpi", rank: "OMPI_COMM_WORLD_RANK", size: "OMPI_COMM_WORLD_SIZE", local: "OMPI_COMM_WORLD_LOCAL_RANK"},
	{name: "slurm", rank: "SLURM_PROCID", size: "SLURM_NTASKS", local: "SLURM_LOCALID"},
}

// FromEnv reads, in order of precedence: GOCCL_RANK, GOCCL_WORLD_SIZE, GOCCL_LOCAL_RANK, GOCCL_STORE_ADDR (and
// GOCCL_STORE_DIR, GOCCL_JOB_ID); torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR+MASTER_PORT; OpenMPI's
// OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK; Slurm's SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID. ok is false when none is set. A malformed or out-of-range value is an error naming the variable and value.
//
// In detail (a variable set to the empty string counts as unset):
//
//   - Rank and WorldSize come from the first launcher, in the order above,
//     whose rank variable is set (for goccl: GOCCL_RANK or GOCCL_WORLD_SIZE),
//     and both must be set; Source names that launcher. Rank must be in
//     [0, WorldSize).
//   - LocalRank is GOCCL_LOCAL_RANK if set, else the chosen launcher's
//     local-rank variable, else 0; it must be in [0, WorldSize).
//   - StoreAddr is GOCCL_STORE_ADDR, else MASTER_ADDR:MASTER_PORT when both
//     are set (whatever the launcher); it must be host:port with a numeric
//     port in [1, 65535].
//   - AgentStore is MASTER_ADDR:MASTER_PORT when TORCHELASTIC_USE_AGENT_STORE
//     is "True" (any case, or "1") and GOCCL_STORE_ADDR is not set; Attempt is
//     TORCHELASTIC_RESTART_COUNT.
//   - StoreDir is GOCCL_STORE_DIR.
//   - Served is GOCCL_STORE_SERVED=launcher (rank0, the default, or
//     launcher; any case).
//   - GOCCL_STORE, a URL, overrides the store variables above:
//     etcd://host:port[,host:port...]/prefix sets Etcd (and clears
//     StoreAddr and AgentStore), tcp://host:port sets StoreAddr (and clears
//     AgentStore), file:///dir sets StoreDir (and clears StoreAddr and
//     AgentStore).
//   - JobID is the first set of GOCCL_JOB_ID, TORCHELASTIC_RUN_ID,
//     OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE, OMPI_MCA_orte_ess_jobid, and
//     SLURM_JOB_ID (as SLURM_JOB_ID.SLURM_STEP_ID when the step is set).
func FromEnv() (env Env, ok bool, err error) {
	return fromLookup(os.LookupEnv)
}

// fromLookup is FromEnv reading variables through lookup.
func fromLookup(lookup func(string) (string, bool)) (env Env, ok bool, err error) {
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		if !ok || v == "" {
			return "", false
		}
		return v, true
	}
	var src *envSource
	for i := range envSources {
		s := &envSources[i]
		_, hasRank := get(s.rank)
		_, hasSize := get(s.size)
		if hasRank || (s.strict && hasSize) {
			src = s
			break
		}
	}
	if src == nil {
		return Env{}, false, nil
	}
	env.Source = src.name
	fail := func(format string, args ...any) (Env, bool, error) {
		return Env{}, true, fmt.Errorf("rendezvous: "+format, args...)
	}
	intVar := func(name string) (int, bool, error) {
		v, ok := get(name)
		if !ok {
			return 0, false, nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return 0, true, fmt.Errorf("rendezvous: %s=%q is not an integer", name, v)
		}
		return n, true, nil
	}
	size, set, err := intVar(src.size)
	if err != nil {
		return Env{}, true, err
	}
	if !set {
		return fail("%s is set but %s is not", src.rank, src.size)
	}
	if size < 1 {
		return fail("%s=%d: the world size must be at least 1", src.size, size)
	}
	rank, set, err := intVar(src.rank)
	if err != nil {
		return Env{}, true, err
	}
	if !set {
		return fail("%s is set but %s is not", src.size, src.rank)
	}
	if rank < 0 || rank >= size {
		return fail("%s=%d is out of range [0, %d) (%s=%d)", src.rank, rank, size, src.size, size)
	}
	env.Rank, env.WorldSize = rank, size

	for _, name := range []string{config.LocalRank.Name, src.local} {
		lr, set, err := intVar(name)
		if err != nil {
			return Env{}, true, err
		}
		if !set {
			continue
		}
		if lr < 0 || lr >= size {
			return fail("%s=%d is out of range [0, %d) (%s=%d)", name, lr, size, src.size, size)
		}
		env.LocalRank = lr
		break
	}

	if v, ok := get(config.StoreAddr.Name); ok {
		if err := checkHostPort(v); err != nil {
			return fail("%s=%q: %v", config.StoreAddr.Name, v, err)
		}
		env.StoreAddr, env.StoreAddrFrom = v, config.StoreAddr.Name
	} else if host, ok := get("MASTER_ADDR"); ok {
		if port, ok := get("MASTER_PORT"); ok {
			if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
				return fail("MASTER_PORT=%q is not a port number in [1, 65535]", port)
			}
			env.StoreAddr, env.StoreAddrFrom = net.JoinHostPort(host, port), "MASTER_ADDR, MASTER_PORT"
			if v, _ := get("TORCHELASTIC_USE_AGENT_STORE"); strings.EqualFold(v, "true") || v == "1" {
				env.AgentStore = env.StoreAddr
			}
		}
	}
	env.Attempt, _ = get("TORCHELASTIC_RESTART_COUNT")
	env.StoreDir, _ = get(config.StoreDir.Name)
	if v, ok := get(config.StoreServed.Name); ok {
		if err := config.StoreServed.Check(v); err != nil {
			return Env{}, true, fmt.Errorf("rendezvous: %w", err)
		}
		env.Served = strings.EqualFold(strings.TrimSpace(v), "launcher")
	}
	if v, ok := get(config.Store.Name); ok {
		if err := parseStoreURL(strings.TrimSpace(v), &env); err != nil {
			return fail("%s=%q: %v", config.Store.Name, v, err)
		}
		if env.StoreAddr == "" {
			env.StoreAddrFrom = ""
		}
	}
	for _, name := range []string{config.JobID.Name, "TORCHELASTIC_RUN_ID", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid"} {
		if v, ok := get(name); ok {
			env.JobID = v
			break
		}
	}
	if env.JobID == "" {
		if job, ok := get("SLURM_JOB_ID"); ok {
			env.JobID = job
			if step, ok := get("SLURM_STEP_ID"); ok {
				env.JobID += "." + step
			}
		}
	}
	env.Token, _ = get(config.JobToken.Name)
	return env, true, nil
}

// checkHostPort accepts host:port with a numeric port in [1, 65535]; the host
// may be empty (this host).
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q is not a number in [1, 65535]", port)
	}
	return nil
}

// storeURLSyntax is what GOCCL_STORE accepts, for messages.
const storeURLSyntax = "want etcd://host:port[,host:port...]/prefix, tcp://host:port or file:///dir"

// parseStoreURL applies GOCCL_STORE's value to env (see FromEnv).
func parseStoreURL(v string, env *Env) error {
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok {
		return errors.New(storeURLSyntax)
	}
	switch strings.ToLower(scheme) {
	case "etcd":
		if _, _, err := ParseEtcdURL(v); err != nil {
			return err
		}
		env.Etcd, env.StoreAddr, env.AgentStore = v, "", ""
	case "tcp":
		rest = strings.TrimSuffix(rest, "/")
		if err := checkHostPort(rest); err != nil {
			return fmt.Errorf("tcp://host:port: %v", err)
		}
		env.StoreAddr, env.AgentStore = rest, ""
	case "file":
		if !strings.HasPrefix(rest, "/") {
			return errors.New("file:///dir: want an absolute directory (three slashes)")
		}
		env.StoreDir, env.StoreAddr, env.AgentStore = rest, "", ""
	default:
		return fmt.Errorf("unknown scheme %q: %s", scheme, storeURLSyntax)
	}
	return nil
}

// DefaultEtcdPrefix is the prefix of an etcd:// URL that names none.
const DefaultEtcdPrefix = "/goccl/"

// ParseEtcdURL parses etcd://host:port[,host:port...][/prefix] into
// endpoints (host:port each; an IPv6 host in brackets) and a key prefix
// that begins and ends with "/" (DefaultEtcdPrefix when the URL has no
// path): etcd://h1:2379,h2:2379/jobs/a gives [h1:2379 h2:2379] and
// "/jobs/a/". Query strings, fragments and user information are refused.
func ParseEtcdURL(s string) (endpoints []string, prefix string, err error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || !strings.EqualFold(scheme, "etcd") {
		return nil, "", fmt.Errorf("%q is not an etcd:// URL", s)
	}
	if strings.ContainsAny(rest, "?#@") {
		return nil, "", errors.New("etcd://host:port[,host:port...]/prefix takes no query, fragment or user information")
	}
	hosts, path, _ := strings.Cut(rest, "/")
	if hosts == "" {
		return nil, "", errors.New("etcd:// URL names no endpoint (want etcd://host:port[,host:port...]/prefix)")
	}
	for _, h := range strings.Split(hosts, ",") {
		host, _, err := net.SplitHostPort(h)
		if err == nil && host == "" {
			err = errors.New("no host")
		}
		if err == nil {
			err = checkHostPort(h)
		}
		if err != nil {
			return nil, "", fmt.Errorf("etcd endpoint %q: %v (want host:port)", h, err)
		}
		endpoints = append(endpoints, h)
	}
	path = strings.Trim(path, "/")
	if path == "" {
		return endpoints, DefaultEtcdPrefix, nil
	}
	return endpoints, "/" + path + "/", nil
}
