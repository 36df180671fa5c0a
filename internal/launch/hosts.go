package launch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Host is one host of a multi-host job and the number of ranks (slots) it runs.
type Host struct {
	// Name is the host as given: a host name, an IPv4 address, an IPv6
	// address without its brackets ("fe80::1"), or user@host as a hostfile
	// may give it.
	Name string
	// Slots is the number of ranks to run on it, at least 1.
	Slots int
}

// MaxSlots is the most slots one host may have, after repeated entries are
// added up; ParseHosts and ParseHostfile refuse more (1,048,576).
const MaxSlots = 1 << 20

// MaxHostlistNames is the most host names ExpandHostlist returns (65,536):
// a longer expansion is an error, found before any name is built, so that a
// bad or hostile expression cannot exhaust memory.
const MaxHostlistNames = 1 << 16

// maxHostName is the longest host name accepted, in bytes (a DNS name has at
// most 253 characters; 255 leaves room for user@).
const maxHostName = 255

// checkHostName accepts a host name given to -H, a hostfile or a Slurm
// hostlist: not empty, at most maxHostName bytes of valid UTF-8, no white
// space, control characters or any of , [ ] # = (the separators of those
// syntaxes), and not starting with '-' (which ssh would take for an option).
func checkHostName(name string) error {
	switch {
	case name == "":
		return errors.New("empty host name")
	case len(name) > maxHostName:
		return fmt.Errorf("host name of %d bytes is longer than %d", len(name), maxHostName)
	case !utf8.ValidString(name):
		return fmt.Errorf("host name %q is not valid UTF-8", name)
	case name[0] == '-':
		return fmt.Errorf("host name %q starts with '-'", name)
	}
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune(",[]#=", r) {
			return fmt.Errorf("host name %q contains %q", name, r)
		}
	}
	return nil
}

// parseCount parses a slot count: decimal digits only (no sign), 1 to
// MaxSlots.
func parseCount(v string) (int, bool) {
	if v == "" || len(v) > 9 {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxSlots {
		return 0, false
	}
	return n, true
}

// hostSet gathers hosts in first-appearance order, adding up the slots of
// repeated names.
type hostSet struct {
	hosts []Host
	index map[string]int
}

func (s *hostSet) add(name string, slots int) error {
	if s.index == nil {
		s.index = make(map[string]int)
	}
	i, ok := s.index[name]
	if !ok {
		s.index[name] = len(s.hosts)
		s.hosts = append(s.hosts, Host{Name: name, Slots: slots})
		return nil
	}
	if s.hosts[i].Slots+slots > MaxSlots {
		return fmt.Errorf("host %s: more than %d slots in all", name, MaxSlots)
	}
	s.hosts[i].Slots += slots
	return nil
}

// ParseHosts parses the value of goccl run -H / --host, in OpenMPI's syntax:
// a comma-separated list of NAME or NAME:SLOTS ("h1:4,h2:4"). SLOTS is a
// decimal integer from 1 to MaxSlots; a name without :SLOTS counts one slot
// each time it appears, and a repeated name adds up its slots ("h1,h1,h2" is
// h1 with 2 slots and h2 with 1; "h1:2,h1" is h1 with 3), as mpirun 4.1 does.
// The hosts come back in the order of their first appearance. An IPv6
// address is written in brackets, "[fe80::1]" or "[fe80::1]:2", and comes
// back without them; an unbracketed name with more than one ':' is an
// error. Blanks around an entry are ignored.
//
// Unlike mpirun, which skips empty entries and takes a bad count for 0,
// ParseHosts refuses them: the error names the entry's position and text
// and why ("launch: host list entry 2 "h1:x": slots "x" is not a positive
// integer"). Empty names, names starting with '-', and names with blanks,
// control characters or any of , [ ] # = are refused too.
//
// See mpirun(1) of Open MPI 4.1, "Specifying Host Nodes", and
// https://docs.open-mpi.org/en/v5.0.x/launching-apps/scheduling.html.
func ParseHosts(s string) ([]Host, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("launch: empty host list")
	}
	var set hostSet
	for i, raw := range strings.Split(s, ",") {
		entry := strings.TrimSpace(raw)
		name, slots, err := parseHostEntry(entry)
		if err == nil {
			err = set.add(name, slots)
		}
		if err != nil {
			return nil, fmt.Errorf("launch: host list entry %d %q: %v", i+1, entry, err)
		}
	}
	return set.hosts, nil
}

// parseHostEntry parses one entry of ParseHosts.
func parseHostEntry(entry string) (name string, slots int, err error) {
	if entry == "" {
		return "", 0, errors.New("empty host name")
	}
	rest := ""
	if entry[0] == '[' {
		end := strings.IndexByte(entry, ']')
		if end < 0 {
			return "", 0, errors.New("'[' without ']'")
		}
		name, rest = entry[1:end], entry[end+1:]
		if a, perr := netip.ParseAddr(name); perr != nil || !a.Is6() {
			return "", 0, fmt.Errorf("%q in brackets is not an IPv6 address", name)
		}
		if rest != "" && rest[0] != ':' {
			return "", 0, fmt.Errorf("%q after ']' (expected :SLOTS)", rest)
		}
	} else {
		switch strings.Count(entry, ":") {
		case 0:
			name = entry
		case 1:
			i := strings.IndexByte(entry, ':')
			name, rest = entry[:i], entry[i:]
		default:
			return "", 0, errors.New("more than one ':' (write an IPv6 address in brackets: [ADDR]:SLOTS)")
		}
	}
	if err := checkHostName(name); err != nil {
		return "", 0, err
	}
	if rest == "" {
		return name, 1, nil
	}
	v := rest[1:]
	n, ok := parseCount(v)
	if !ok {
		return "", 0, fmt.Errorf("slots %q is not a positive integer (at most %d)", v, MaxSlots)
	}
	return name, n, nil
}

// hostfileEquals joins "slots = 4" and "slots= 4" into "slots=4".
var hostfileEquals = regexp.MustCompile(`[ \t]*=[ \t]*`)

// ParseHostfile parses an OpenMPI hostfile from r: one host per line,
//
//	NAME [slots=N] [max_slots=M]
//
// with blanks allowed around '=' ("slots = 4"). A '#' starts a comment,
// on a line of its own or after a host; blank lines are ignored. NAME is as
// for ParseHosts, except that NAME:N is an error (a hostfile writes
// slots=N) and an IPv6 address may be written bare or in brackets; user@host
// is kept whole. N and M are decimal integers from 1 to
// MaxSlots; count=N and cpu=N are read as slots=N, and max-slots,
// slots_max and slots-max as max_slots, as Open MPI's hostfile lexer does.
// max_slots must not be less than slots on its line; a line with max_slots
// but no slots has max_slots slots (as mpirun 4.1 reports it); otherwise
// max_slots is checked and not used, since goccl runs exactly the ranks it
// is asked for. Any other key (boards, sockets, cores, ...) is an error.
//
// A line without slots= counts 1 slot. That is what mpirun 4.1.4 gives a
// remote host listed without slots (checked with --display-allocation; it
// counts the cores only of the host it runs on, and the 5.0 documentation
// says the detected CPUs or the resource manager's count): goccl cannot
// count a remote host's cores before it has reached it. A name on several
// lines adds up its slots: "a" twice is a with 2 slots, like mpirun 4.1;
// "a slots=2" twice is a with 4, which mpirun 4.1 refuses (it rejects a
// node given a count on one line and listed on another).
//
// name names the file in errors, with the line number:
// "launch: hostfile hosts.txt:3: slots=x is not a positive integer". A file
// without any host is an error.
//
// See mpirun(1) of Open MPI 4.1, "Specifying Host Nodes", and
// https://docs.open-mpi.org/en/v5.0.x/launching-apps/scheduling.html.
func ParseHostfile(r io.Reader, name string) ([]Host, error) {
	var set hostSet
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(hostfileEquals.ReplaceAllString(text, "="))
		if len(fields) == 0 {
			continue
		}
		host, slots, err := parseHostfileLine(fields)
		if err == nil {
			err = set.add(host, slots)
		}
		if err != nil {
			return nil, fmt.Errorf("launch: hostfile %s:%d: %v", name, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("launch: hostfile %s:%d: %w", name, line+1, err)
	}
	if len(set.hosts) == 0 {
		return nil, fmt.Errorf("launch: hostfile %s: no hosts", name)
	}
	return set.hosts, nil
}

// parseHostfileLine parses the fields of one hostfile line.
func parseHostfileLine(fields []string) (host string, slots int, err error) {
	host = fields[0]
	if strings.Contains(host, "=") {
		return "", 0, fmt.Errorf("%s where a host name should be", host)
	}
	if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' {
		inner := host[1 : len(host)-1]
		if a, perr := netip.ParseAddr(inner); perr != nil || !a.Is6() {
			return "", 0, fmt.Errorf("%q in brackets is not an IPv6 address", inner)
		}
		host = inner
	} else if strings.Count(host, ":") == 1 {
		return "", 0, fmt.Errorf("%s: a hostfile gives slots as NAME slots=N, not NAME:N", host)
	}
	if err := checkHostName(host); err != nil {
		return "", 0, err
	}
	maxSlots := 0
	for _, f := range fields[1:] {
		key, val, ok := strings.Cut(f, "=")
		if !ok {
			return "", 0, fmt.Errorf("%q after the host name is not KEY=VALUE", f)
		}
		var dst *int
		switch key {
		case "slots", "count", "cpu":
			dst = &slots
		case "max_slots", "max-slots", "slots_max", "slots-max":
			dst = &maxSlots
		default:
			return "", 0, fmt.Errorf("unknown key %q in %s (goccl reads slots=N and max_slots=N)", key, f)
		}
		if *dst != 0 {
			return "", 0, fmt.Errorf("%s given twice", key)
		}
		n, ok := parseCount(val)
		if !ok {
			return "", 0, fmt.Errorf("%s is not a positive integer (at most %d)", f, MaxSlots)
		}
		*dst = n
	}
	switch {
	case slots == 0 && maxSlots == 0:
		slots = 1
	case slots == 0:
		slots = maxSlots
	case maxSlots != 0 && maxSlots < slots:
		return "", 0, fmt.Errorf("max_slots=%d is less than slots=%d", maxSlots, slots)
	}
	return host, slots, nil
}

// hostlistRange is one NUM or LO-HI of a bracket group.
type hostlistRange struct {
	lo, hi uint64
	width  int // digits of LO as written: the zero padding
}

// hostlistPart is a literal piece of a host name, or (when ranges is not
// nil) a bracket group.
type hostlistPart struct {
	lit    string
	ranges []hostlistRange
}

// ExpandHostlist expands a Slurm hostlist expression, the syntax of
// SLURM_JOB_NODELIST and SLURM_STEP_NODELIST (and of scontrol show
// hostnames): comma-separated names, each of which may hold bracket groups
// of comma-separated numbers and ranges LO-HI. A group stands for each of
// its numbers in turn, so
//
//	node[01-04,07],gpu-a[1-2]-ib,login
//
// is node01 node02 node03 node04 node07 gpu-a1-ib gpu-a2-ib login. A
// number is written with at least as many digits as the lower bound of its
// range as written, so "[08-10]" is 08 09 10 and "[8-10]" is 8 9 10 (a
// lone number keeps its own digits: "[007]"). A name with several groups
// stands for every combination, the last group varying fastest, as in
// Slurm's hostlist library: "r[1-2]n[1-2]" is r1n1 r1n2 r2n1 r2n2. Commas
// inside brackets do not separate names. The names come back in the order
// written, duplicates kept; blanks around the whole expression are ignored.
// Slurm's library also takes blanks between names and a 3-D "[123x456]"
// box syntax; Slurm's variables use neither, and ExpandHostlist refuses
// both.
//
// Errors name the expression and the fault: an empty name ("a,,b"),
// unbalanced or nested brackets, an empty group or item, an item that is
// not NUM or LO-HI (numbers are decimal, at most 18 digits), a reversed
// range ("[5-3]"), a name that would be longer than 255 bytes or that
// checkHostName refuses (blanks, '#', '=', a leading '-'), and an
// expansion of more than MaxHostlistNames names, which is found before any
// name is built.
//
// See slurm_hostlist_create(3), `scontrol show hostnames` in scontrol(1),
// and https://slurm.schedmd.com/srun.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES.
func ExpandHostlist(s string) ([]string, error) {
	expr := strings.TrimSpace(s)
	fail := func(format string, args ...any) ([]string, error) {
		return nil, fmt.Errorf("launch: hostlist %q: %s", s, fmt.Sprintf(format, args...))
	}
	if expr == "" {
		return fail("empty")
	}
	// Split at the commas outside brackets, checking the brackets.
	var names []string
	depth, start := 0, 0
	for i := 0; i < len(expr); i++ {
		switch expr[i] {
		case '[':
			if depth > 0 {
				return fail("nested '[' at byte %d", i)
			}
			depth++
		case ']':
			if depth == 0 {
				return fail("']' without '[' at byte %d", i)
			}
			depth--
		case ',':
			if depth == 0 {
				names = append(names, expr[start:i])
				start = i + 1
			}
		}
	}
	if depth > 0 {
		return fail("'[' without ']'")
	}
	names = append(names, expr[start:])

	// Parse every name and count the expansion before building any of it.
	patterns := make([][]hostlistPart, len(names))
	total := 0
	for i, name := range names {
		if name == "" {
			return fail("empty host name (name %d)", i+1)
		}
		parts, count, length, err := parseHostlistName(name)
		if err != nil {
			return fail("%s", err)
		}
		if length > maxHostName {
			return fail("%s: names would be longer than %d bytes", name, maxHostName)
		}
		if count > uint64(MaxHostlistNames-total) {
			return fail("expands to more than %d names", MaxHostlistNames)
		}
		total += int(count)
		patterns[i] = parts
	}

	out := make([]string, 0, total)
	for i, parts := range patterns {
		first := len(out)
		out = expandHostlistName(parts, out)
		if err := checkHostName(out[first]); err != nil {
			return fail("%s: %v", names[i], err)
		}
	}
	return out, nil
}

// parseHostlistName parses one name of a hostlist: literal pieces and
// bracket groups (the brackets are known balanced and not nested). count
// is how many names it stands for, capped just above MaxHostlistNames;
// length is the longest of them in bytes.
func parseHostlistName(name string) (parts []hostlistPart, count uint64, length int, err error) {
	count = 1
	for rest := name; rest != ""; {
		open := strings.IndexByte(rest, '[')
		if open < 0 {
			parts = append(parts, hostlistPart{lit: rest})
			length += len(rest)
			break
		}
		if open > 0 {
			parts = append(parts, hostlistPart{lit: rest[:open]})
			length += open
		}
		end := strings.IndexByte(rest, ']')
		group := rest[open+1 : end]
		rest = rest[end+1:]
		if group == "" {
			return nil, 0, 0, fmt.Errorf("%s: empty brackets", name)
		}
		var ranges []hostlistRange
		var size uint64
		widest := 0
		for _, item := range strings.Split(group, ",") {
			r, err := parseHostlistRange(item)
			if err != nil {
				return nil, 0, 0, fmt.Errorf("%s: %v", name, err)
			}
			ranges = append(ranges, r)
			// Sizes are at most 10^18 each: stop adding once past the cap.
			if size <= MaxHostlistNames {
				size += r.hi - r.lo + 1
			}
			widest = max(widest, r.width, len(strconv.FormatUint(r.hi, 10)))
		}
		parts = append(parts, hostlistPart{ranges: ranges})
		length += widest
		if size > MaxHostlistNames || count*size > MaxHostlistNames {
			count = MaxHostlistNames + 1
		} else {
			count *= size
		}
	}
	return parts, count, length, nil
}

// parseHostlistRange parses NUM or LO-HI.
func parseHostlistRange(item string) (hostlistRange, error) {
	num := func(v string) (uint64, bool) {
		if v == "" || len(v) > 18 {
			return 0, false
		}
		for i := 0; i < len(v); i++ {
			if v[i] < '0' || v[i] > '9' {
				return 0, false
			}
		}
		n, err := strconv.ParseUint(v, 10, 64)
		return n, err == nil
	}
	if item == "" {
		return hostlistRange{}, errors.New("empty item in brackets")
	}
	loS, hiS, isRange := strings.Cut(item, "-")
	lo, ok := num(loS)
	if !ok {
		return hostlistRange{}, fmt.Errorf("%q in brackets is not NUM or LO-HI (decimal, at most 18 digits)", item)
	}
	if !isRange {
		return hostlistRange{lo: lo, hi: lo, width: len(loS)}, nil
	}
	hi, ok := num(hiS)
	if !ok {
		return hostlistRange{}, fmt.Errorf("%q in brackets is not NUM or LO-HI (decimal, at most 18 digits)", item)
	}
	if hi < lo {
		return hostlistRange{}, fmt.Errorf("range %q is reversed", item)
	}
	return hostlistRange{lo: lo, hi: hi, width: len(loS)}, nil
}

// expandHostlistName appends to out every name parts stands for, the last
// group varying fastest.
func expandHostlistName(parts []hostlistPart, out []string) []string {
	var walk func(i int, prefix string)
	walk = func(i int, prefix string) {
		if i == len(parts) {
			out = append(out, prefix)
			return
		}
		p := parts[i]
		if p.ranges == nil {
			walk(i+1, prefix+p.lit)
			return
		}
		for _, r := range p.ranges {
			for n := r.lo; ; n++ {
				d := strconv.FormatUint(n, 10)
				if pad := r.width - len(d); pad > 0 {
					d = strings.Repeat("0", pad) + d
				}
				walk(i+1, prefix+d)
				if n == r.hi {
					break
				}
			}
		}
	}
	walk(0, "")
	return out
}

// NodeEnv is this node's place in a multi-node job as a workload manager
// describes it: goccl run starts its local ranks as node NodeRank of NNodes
// (with nproc ranks a node, ranks NodeRank*nproc to NodeRank*nproc+nproc-1),
// with rank 0's store at MasterAddr:MasterPort.
type NodeEnv struct {
	// Source is the workload manager: "slurm" or "kubernetes".
	Source string
	// NNodes is the number of nodes (one goccl run each), at least 2;
	// NodeRank is this node's index, in [0, NNodes).
	NNodes, NodeRank int
	// MasterAddr is the host (name or address, IPv6 without brackets) of
	// node 0, where rank 0 serves the store; MasterPort its port, in
	// [1, 65535].
	MasterAddr string
	MasterPort int
	// JobID is common to all nodes of the job and never random:
	// "slurm-JOBID.STEPID", or "k8s-MASTERADDR-MASTERPORT".
	JobID string
	// Hosts is every node's name in node order where the workload manager
	// lists them (Slurm), nil otherwise.
	Hosts []string
}

// DetectNodeEnv reads the variables Slurm or Kubernetes set for a
// multi-node job through lookup (os.LookupEnv in production; a variable set
// to blanks counts as unset). ok is false when neither describes a job of
// 2 or more nodes; err is set when one does but its variables are missing
// or inconsistent, and names the variable and value. The caller should not
// call it inside a goccl rank (GOCCL_RANK set), whose environment holds the
// job's variables for its own use (RANK, WORLD_SIZE, MASTER_ADDR, ...).
//
// Slurm, inside an srun step (SLURM_STEP_NODELIST set; a batch script or an
// salloc shell outside srun is not a multi-node job for goccl run, which
// then runs on its own node only): the nodes are SLURM_STEP_NODELIST
// expanded by ExpandHostlist (the step's nodes; SLURM_JOB_NODELIST, the
// allocation's, is not read), which must not repeat a name;
// SLURM_STEP_NUM_NODES, if set, must equal their number. NodeRank is
// SLURM_STEP_NODEID, or SLURM_NODEID on Slurm versions without it (this
// node's index in the step). goccl run runs once per node and starts the
// ranks itself, so SLURM_STEP_NUM_TASKS, if set, must equal the number of
// nodes, even with one node (else the error says to run srun
// --ntasks-per-node=1 goccl run -n N PROG). MasterAddr is the first node of
// the list; MasterPort is MASTER_PORT if set, else 20000 + SLURM_JOB_ID mod
// 10000, which every node of the job computes alike and which lies below
// Linux's ephemeral ports (32768 up) — concurrent steps of one job on the
// same first node must set MASTER_PORT. JobID is
// "slurm-SLURM_JOB_ID.SLURM_STEP_ID" (or SLURM_JOBID, SLURM_STEPID, the
// older names); both must be decimal. Source: srun(1), OUTPUT ENVIRONMENT
// VARIABLES, and env_array_for_step in Slurm's src/common/env.c.
//
// Kubernetes, first Kubeflow's torchrun variables (PET_NNODES set): as the
// training-operator (v1.7 and later, pkg/controller.v1/pytorch/envvar.go
// and master.go) sets them for a PyTorchJob with a Master replica, and
// Kubeflow Trainer (v2, pkg/runtime/framework/plugins/torch/torch.go) for a
// TrainJob: PET_NNODES is the number of pods, "N" or the static range
// "N:N" (an elastic range "MIN:MAX" is an error: goccl needs a fixed
// world), PET_NODE_RANK the pod's index, PET_MASTER_ADDR and
// PET_MASTER_PORT pod 0's address and port; all four are needed once
// PET_NNODES says 2 or more.
//
// Else a PyTorchJob's (training-operator before v1.7) or a hand-written
// JobSet's MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK, read only when
// all of them are set: WORLD_SIZE is the number of pods (one goccl run
// each) and RANK the pod's index. A JobSet may leave RANK out: then
// JOB_COMPLETION_INDEX, which Kubernetes sets in every pod of an Indexed
// Job (https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode),
// is the index. It is the index within its Job, so a JobSet of more than
// one Job (replicas > 1) must set RANK itself.
//
// For both, JobID is "k8s-" + master address + "-" + port, the same in
// every pod and, within a namespace, distinct between jobs running at
// once (Kubeflow's master address holds the job's name); brackets around an
// IPv6 master address are dropped.
//
// NodeRank must be in [0, NNodes), ports in [1, 65535], the master address
// not empty.
func DetectNodeEnv(lookup func(string) (string, bool)) (env NodeEnv, ok bool, err error) {
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	if _, ok := get("SLURM_STEP_NODELIST"); ok {
		return slurmNodeEnv(get)
	}
	if _, ok := get("PET_NNODES"); ok {
		return kubeflowNodeEnv(get)
	}
	return torchNodeEnv(get)
}

// envGetter reads a variable, trimmed; ok is false when unset or blank.
type envGetter func(name string) (string, bool)

// envInt parses variable name's value v as a decimal integer in [lo, hi].
func envInt(name, v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("launch: %s=%q is not an integer from %d to %d", name, v, lo, hi)
	}
	return n, nil
}

// first returns the first of names that is set, and its name.
func (get envGetter) first(names ...string) (name, v string, ok bool) {
	for _, n := range names {
		if v, ok := get(n); ok {
			return n, v, true
		}
	}
	return names[0], "", false
}

// envPort reads variable name as a port.
func envPort(name, v string) (int, error) { return envInt(name, v, 1, 65535) }

// bareHost drops the brackets of "[fe80::1]".
func bareHost(h string) string {
	if len(h) >= 2 && h[0] == '[' && h[len(h)-1] == ']' {
		return h[1 : len(h)-1]
	}
	return h
}

func slurmNodeEnv(get envGetter) (NodeEnv, bool, error) {
	list, _ := get("SLURM_STEP_NODELIST")
	hosts, err := ExpandHostlist(list)
	if err != nil {
		return NodeEnv{}, false, fmt.Errorf("launch: SLURM_STEP_NODELIST: %w", err)
	}
	seen := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		if seen[h] {
			return NodeEnv{}, false, fmt.Errorf("launch: SLURM_STEP_NODELIST=%q lists %s twice", list, h)
		}
		seen[h] = true
	}
	nn := len(hosts)
	if v, ok := get("SLURM_STEP_NUM_NODES"); ok {
		n, err := envInt("SLURM_STEP_NUM_NODES", v, 1, MaxHostlistNames)
		if err != nil {
			return NodeEnv{}, false, err
		}
		if n != nn {
			return NodeEnv{}, false, fmt.Errorf("launch: SLURM_STEP_NUM_NODES=%s but SLURM_STEP_NODELIST=%q lists %d nodes", v, list, nn)
		}
	}
	if v, ok := get("SLURM_STEP_NUM_TASKS"); ok {
		n, err := envInt("SLURM_STEP_NUM_TASKS", v, 1, 1<<30)
		if err != nil {
			return NodeEnv{}, false, err
		}
		if n != nn {
			return NodeEnv{}, false, fmt.Errorf("launch: SLURM_STEP_NUM_TASKS=%s on %d node(s): goccl run must run once per node and starts the ranks itself; run srun --ntasks-per-node=1 goccl run -n N PROG", v, nn)
		}
	}
	if nn < 2 {
		return NodeEnv{}, false, nil
	}
	env := NodeEnv{Source: "slurm", NNodes: nn, Hosts: hosts, MasterAddr: hosts[0]}
	name, v, ok := get.first("SLURM_STEP_NODEID", "SLURM_NODEID")
	if !ok {
		return NodeEnv{}, false, errors.New("launch: SLURM_STEP_NODELIST is set but neither SLURM_STEP_NODEID nor SLURM_NODEID: is this an srun step?")
	}
	if env.NodeRank, err = envInt(name, v, 0, nn-1); err != nil {
		return NodeEnv{}, false, err
	}
	jobName, job, ok := get.first("SLURM_JOB_ID", "SLURM_JOBID")
	if !ok {
		return NodeEnv{}, false, errors.New("launch: SLURM_STEP_NODELIST is set but SLURM_JOB_ID is not")
	}
	jobID, err := strconv.ParseUint(job, 10, 64)
	if err != nil {
		return NodeEnv{}, false, fmt.Errorf("launch: %s=%q is not a decimal job id", jobName, job)
	}
	stepName, step, ok := get.first("SLURM_STEP_ID", "SLURM_STEPID")
	if !ok {
		return NodeEnv{}, false, errors.New("launch: SLURM_STEP_NODELIST is set but SLURM_STEP_ID is not")
	}
	if _, err := strconv.ParseUint(step, 10, 64); err != nil {
		return NodeEnv{}, false, fmt.Errorf("launch: %s=%q is not a decimal step id", stepName, step)
	}
	env.JobID = "slurm-" + job + "." + step
	if v, ok := get("MASTER_PORT"); ok {
		if env.MasterPort, err = envPort("MASTER_PORT", v); err != nil {
			return NodeEnv{}, false, err
		}
	} else {
		env.MasterPort = 20000 + int(jobID%10000)
	}
	return env, true, nil
}

func kubeflowNodeEnv(get envGetter) (NodeEnv, bool, error) {
	v, _ := get("PET_NNODES")
	nnS := v
	if lo, hi, isRange := strings.Cut(v, ":"); isRange {
		if lo != hi {
			return NodeEnv{}, false, fmt.Errorf("launch: PET_NNODES=%q is an elastic range: goccl needs a fixed number of nodes (N or N:N)", v)
		}
		nnS = lo
	}
	nn, err := envInt("PET_NNODES", nnS, 1, 1<<20)
	if err != nil {
		return NodeEnv{}, false, err
	}
	if nn < 2 {
		return NodeEnv{}, false, nil
	}
	env := NodeEnv{Source: "kubernetes", NNodes: nn}
	need := func(name string) (string, error) {
		if v, ok := get(name); ok {
			return v, nil
		}
		return "", fmt.Errorf("launch: PET_NNODES=%s is set but %s is not (Kubeflow's PyTorchJob sets it only with a Master replica, and not for an elastic job)", v, name)
	}
	rank, err := need("PET_NODE_RANK")
	if err != nil {
		return NodeEnv{}, false, err
	}
	if env.NodeRank, err = envInt("PET_NODE_RANK", rank, 0, nn-1); err != nil {
		return NodeEnv{}, false, err
	}
	addr, err := need("PET_MASTER_ADDR")
	if err != nil {
		return NodeEnv{}, false, err
	}
	port, err := need("PET_MASTER_PORT")
	if err != nil {
		return NodeEnv{}, false, err
	}
	return k8sMaster(env, "PET_MASTER_ADDR", addr, "PET_MASTER_PORT", port)
}

func torchNodeEnv(get envGetter) (NodeEnv, bool, error) {
	addr, okA := get("MASTER_ADDR")
	port, okP := get("MASTER_PORT")
	size, okS := get("WORLD_SIZE")
	rankName, rank, okR := get.first("RANK", "JOB_COMPLETION_INDEX")
	if !okA || !okP || !okS || !okR {
		return NodeEnv{}, false, nil
	}
	nn, err := envInt("WORLD_SIZE", size, 1, 1<<20)
	if err != nil {
		return NodeEnv{}, false, err
	}
	if nn < 2 {
		return NodeEnv{}, false, nil
	}
	env := NodeEnv{Source: "kubernetes", NNodes: nn}
	if env.NodeRank, err = envInt(rankName, rank, 0, nn-1); err != nil {
		return NodeEnv{}, false, err
	}
	return k8sMaster(env, "MASTER_ADDR", addr, "MASTER_PORT", port)
}

// k8sMaster sets env's master address and port, read from variables
// addrName and portName, and the JobID made of them.
func k8sMaster(env NodeEnv, addrName, addr, portName, port string) (NodeEnv, bool, error) {
	var err error
	if env.MasterPort, err = envPort(portName, port); err != nil {
		return NodeEnv{}, false, err
	}
	env.MasterAddr = bareHost(addr)
	if env.MasterAddr == "" || strings.ContainsFunc(env.MasterAddr, unicode.IsSpace) {
		return NodeEnv{}, false, fmt.Errorf("launch: %s=%q is not a host", addrName, addr)
	}
	env.JobID = "k8s-" + env.MasterAddr + "-" + strconv.Itoa(env.MasterPort)
	return env, true, nil
}
