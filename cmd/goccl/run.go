package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/launch"
	"github.com/goccl/goccl/internal/progress"
	"github.com/goccl/goccl/rendezvous"
	"github.com/spf13/pflag"
)

func init() {
	register(&command{
		name:    launch.AgentCommand,
		summary: "the agent of goccl run -H on each host (started by goccl run; reads its share of the job on standard input)",
		usage:   "goccl " + launch.AgentCommand,
		hidden:  true,
		run: func(args []string, stdout, stderr io.Writer) int {
			if len(args) > 0 {
				fmt.Fprintf(stderr, "goccl %s takes no arguments: goccl run -H starts it and gives it its job on standard input\n", launch.AgentCommand)
				return 2
			}
			return launch.ServeNode(os.Stdin, stdout, stderr)
		},
	})
	register(&command{
		name:    "run",
		summary: "start the ranks of a program, on this host or several (a torchrun/mpirun)",
		usage:   "goccl run -n N [--env KEY=VALUE]... [--grace DURATION] PROG [ARGS...] [: -n N PROG [ARGS...]]...",
		run:     runRun,
	})
}

var runHelp = `usage: goccl run -n N [--env KEY=VALUE]... [--grace DURATION] [--metrics-addr ADDR] [--] PROG [ARGS...]
       goccl run -H HOST:SLOTS,... | --hostfile FILE [--rsh COMMAND] [-x NAME]... [-n N] PROG [ARGS...]
       goccl run --nnodes N --node-rank R --master-addr HOST [--master-port PORT] -n N PROG [ARGS...]
       goccl run [--grace DURATION] [--metrics-addr ADDR] -n N1 [--env KEY=VALUE]... PROG1 [ARGS1...] : -n N2 [--env KEY=VALUE]... PROG2 [ARGS2...] [: ...]

Starts N ranks of PROG on this host (or on several, see below) and waits
for them. N is given with -n or -np (as to mpirun) or --nproc-per-node (as
to torchrun, which also spells it --nproc_per_node); given twice, the
values must agree. Flags are GNU
style (--env=K=V, --env K=V, -n4, -n 4); long flags also take one dash, as
mpirun and Go programs write them (-np 4, -env K=V). The flags end at PROG
(or at --): everything after PROG is PROG's, up to a standalone ":" (see
below). PROG is an executable path, a name on PATH, or a Go main package (a
directory such as ./examples/ddp-digits, or an import path), which is built
once with go build in the current module and removed afterwards.

Several programs make one job (MPMD), as with mpirun: a standalone ":"
argument separates application contexts, each -n N [--env KEY=VALUE]...
[--] PROG [ARGS...]. A Go service (the main package in ./coordinator) as
rank 0 and two Python trainers:

    goccl run -n 1 ./coordinator : -n 2 /usr/bin/python3 train.py --lr 0.1

The ranks are numbered across the contexts in order (here the Go program
is rank 0, the trainers ranks 1 and 2) and the world size is their total
(3); local ranks and the local world size count across contexts as well
(every rank is on this host). Each context gives its own number of ranks
(-n, -np or --nproc-per-node) and may give --env settings, which apply to
its own ranks only. --grace, --settle, --max-restarts and --metrics-addr are the whole job's: they
go in the first context, before the first PROG. Errors count the contexts
from 1. A Go package named by several contexts is built once. Every
standalone ":" separates contexts, even among a program's arguments (pass
a lone ":" through sh -c '...').

Each rank gets the parent environment plus ` + config.Rank.Name + `, ` + config.WorldSize.Name + `,
` + config.LocalRank.Name + `, ` + config.LocalWorldSize.Name + `, ` + config.StoreAddr.Name + ` (127.0.0.1 and a
free port, where rank 0 serves the rendezvous store), ` + config.JobID.Name + ` and
` + config.JobToken.Name + ` (a fresh random secret unless already set), then
the --env settings (its context's). So that PyTorch and MPI programs find
their rank, each rank also gets torchrun's RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE and GROUP_RANK (0) and OpenMPI's OMPI_COMM_WORLD_RANK,
OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK and
OMPI_COMM_WORLD_LOCAL_SIZE (goccl programs read goccl's own first). As
torchrun's agent does, goccl run also serves a PyTorch c10d TCPStore and
gives every rank MASTER_ADDR, MASTER_PORT (its address),
TORCHELASTIC_USE_AGENT_STORE=True and TORCHELASTIC_RESTART_COUNT=0, so
torch.distributed.init_process_group(init_method="env://") works in the
ranks (goccl's own ranks keep using goccl's store).

Every line a rank prints is prefixed with "[rank] ", on stdout or stderr as
the rank wrote it. Progress bars (goccl perf, the training examples) are
drawn by rank 0 only, on goccl run's stderr when that is a terminal (as
` + config.Progress.Name + ` says: auto, 0 or 1), which rank 0 gets as descriptor 3,
named by ` + config.ProgressFD.Name + `; each line forwarded to a terminal then erases the
bar first.

Several hosts (OpenMPI's -H and --hostfile): with -H h1:4,h2:4 (NAME or
NAME:SLOTS, comma-separated, repeatable; a name listed again adds slots) or
--hostfile FILE (OpenMPI's syntax: one "NAME [slots=N]" per line, # for
comments), goccl run fills each host's slots in order (-n defaults to every
slot) and starts, through the remote shell (--rsh, default ssh; for the
namespace hosts of goccl cluster, --rsh "goccl cluster rsh"), one agent per
host: COMMAND HOST 'goccl rund', where goccl is this executable's path
(--launch-agent PATH for another). A host named localhost (127.0.0.1, ::1)
is started without the remote shell. The agent gets its share of the job on
its standard input (nothing on its command line: the job token stays out
of ps), starts its ranks and reports their exits; their output comes back
through the remote shell, prefixed with the job-wide rank. Ranks are
numbered across the hosts: RANK, LOCAL_RANK (within the host), GROUP_RANK
(the host's index) and goccl's and OpenMPI's forms as above. The agent on rank
0's host picks the store address: the address of the interface
` + config.SocketIfname.Name + ` selects, as the ranks' TCP links do, at a free
port; it also serves PyTorch's c10d store there. The ranks on other hosts
get this host's goccl variables (but the per-rank ones), the --env
settings, a job token, and the variables named by -x NAME (as mpirun -x).
Programs must be at the same path on every host (a shared file system, as
for mpirun); a Go package is built here once, so the hosts must see its
temporary directory too (give an installed executable otherwise). The
ranks run in this directory when the host has it. When a rank fails, goccl
run stops the ranks on every host (the agents pass SIGTERM, then SIGKILL,
on); a host whose remote shell fails is named with what it said; an agent
whose launcher disappears (its input ends) stops its ranks.

One goccl run per node (torchrun's multi-node mode): --nnodes N --node-rank
R --master-addr HOST [--master-port PORT] make this goccl run node R of N,
its -n ranks numbered from R*n, rank 0's store at HOST:PORT (default 29500)
and PyTorch's c10d store, served by node 0, at PORT+1. Without flags this
is what goccl run does under srun (SLURM_STEP_NODELIST, SLURM_NODEID,
SLURM_STEP_NUM_NODES; one task per node: srun --ntasks-per-node=1; the
first node of the step is the master, at MASTER_PORT or a port derived from
SLURM_JOB_ID) and in a Kubernetes pod of a multi-node job (Kubeflow's
PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT; else a
PyTorchJob's or JobSet's MASTER_ADDR, MASTER_PORT, WORLD_SIZE counting
pods, and RANK or JOB_COMPLETION_INDEX), unless ` + config.Rank.Name + ` is set.
It prints the node's place on stderr. Every node must hold the same
` + config.JobToken.Name + ` (export it before srun, or from a Kubernetes
Secret); without one the connections are not authenticated.

When a rank exits with a non-zero status or is killed by a signal, goccl run
waits a moment (--settle DURATION, default 250ms) for other failures, then
the other ranks get SIGTERM, then SIGKILL after the grace period (--grace,
default 3s), and goccl run names the rank that failed
(with several programs, its program too) and exits with its status
(128+signal when killed). Of the failures in that moment, a rank killed by a
signal (SIGPIPE aside) is named before ranks that exited with a status: they
usually exited because they saw it die. SIGINT and SIGTERM sent to goccl run
are passed on to the ranks. The exit status is 0 only when every rank exits
with 0.

With --max-restarts N (torchrun's elastic agent), up to N failed ranks in
all are replaced instead: goccl run serves the job's goccl store itself
(with -H, the agent of rank 0's host; with --nnodes, node 0's goccl run),
so that it outlives rank 0, and tells the ranks so with
` + config.StoreServed.Name + `=launcher (every rank, rank 0 included, is a client).
A rank that fails while restarts remain is named in a line on stderr and
started again, same program, arguments and environment, with
` + config.Join.Name + `=1: the program checks goccl.Joining() and calls goccl.Join
instead of goccl.Init, while the live ranks Shrink and Grow it back in.
Once the restarts are spent, a failure ends the job as above.

Flags:
`

// envList collects repeated -env KEY=VALUE flags.
type envList []string

func (e *envList) String() string { return strings.Join(*e, " ") }
func (e *envList) Type() string   { return "KEY=VALUE" }
func (e *envList) Set(s string) error {
	if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	*e = append(*e, s)
	return nil
}

// nprocs is the number of ranks, given by any of the spellings in
// nprocNames; the first disagreement between two of them is kept.
type nprocs struct {
	n        int
	set      string // the spelling that set n, "" while unset
	conflict string // "-n 2 and --nproc-per-node 3", "" when none
}

// nprocNames are the spellings of the number of ranks: mpirun's -n and -np,
// torchrun's --nproc-per-node and its older --nproc_per_node.
var nprocNames = []string{"n", "np", "nproc-per-node", "nproc_per_node"}

// nprocFlag is one spelling of nprocs on the command line.
type nprocFlag struct {
	p    *nprocs
	name string
}

// flagSpelling is name with the dashes its users write: -n, --nproc-per-node.
func flagSpelling(name string) string {
	if len(name) <= 2 {
		return "-" + name
	}
	return "--" + name
}

func (f *nprocFlag) String() string {
	if f == nil || f.p == nil {
		return "0"
	}
	return strconv.Itoa(f.p.n)
}

func (f *nprocFlag) Type() string { return "int" }

func (f *nprocFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not an integer")
	}
	if n < 1 {
		return errors.New("must be at least 1")
	}
	p := f.p
	if p.set != "" && p.n != n && p.conflict == "" {
		p.conflict = fmt.Sprintf("%s %d and %s %d", flagSpelling(p.set), p.n, flagSpelling(f.name), n)
	}
	if p.set == "" {
		p.n, p.set = n, f.name
	}
	return nil
}

// runArgs is goccl run's parsed command line: the first program (the
// first application context) and, with ":", the others.
type runArgs struct {
	np     int
	npSet  bool    // the first context gave -n (with hosts, the default is every slot)
	env    envList // --metrics-addr's variable first, then the --env settings
	grace  time.Duration
	settle time.Duration
	// maxRestarts is --max-restarts: failed ranks replaced in all
	maxRestarts int
	prog        string
	args        []string
	more        []runApp // the contexts after the first (-n N1 PROG1 : -n N2 PROG2), nil for one program
	hosts
}

// hosts are the multi-host flags of goccl run.
type hosts struct {
	list   []launch.Host   // -H and --hostfile, nil on this host alone
	rsh    []string        // --rsh's words
	agent  string          // --launch-agent
	export []string        // -x
	node   *launch.NodeEnv // --nnodes and the rest: one node of several, each running goccl run; nil if not
}

// runApp is one application context of goccl run's command line.
type runApp struct {
	np   int
	env  envList // --metrics-addr's variable first, then the context's --env settings
	prog string
	args []string
}

// apps are all the contexts of ra, in order.
func (ra *runArgs) apps() []runApp {
	return append([]runApp{{np: ra.np, env: ra.env, prog: ra.prog, args: ra.args}}, ra.more...)
}

// contextSep separates the application contexts of goccl run, as mpirun's.
const contextSep = ":"

// jobFlags are the flags of goccl run that are the launcher's, not a
// context's: only the first context takes them.
var jobFlags = []string{"grace", "settle", "max-restarts", "metrics-addr", "host", "hostfile", "rsh", "launch-agent", "x", "nnodes", "node-rank", "master-addr", "master-port"}

// runFlags are the flags of one context of goccl run.
type runFlags struct {
	np          *nprocs
	env         envList
	grace       *time.Duration
	settle      *time.Duration
	maxRestarts *int
	metricsAddr *string
	hosts       *[]string
	hostfile    *string
	rsh         *string
	agent       *string
	export      *[]string
	nnodes      *int
	nodeRank    *int
	masterAddr  *string
	masterPort  *int
}

// newRunFlags returns goccl run's flag set (of one context).
func newRunFlags(stderr io.Writer) (*cliFlags, *runFlags) {
	fs := newFlags("goccl run", stderr, func(fs *cliFlags) {
		fmt.Fprint(fs.Output(), runHelp)
		fs.PrintDefaults()
	})
	fs.SetInterspersed(false) // PROG's arguments are PROG's
	f := &runFlags{np: &nprocs{n: 1}}
	for _, name := range nprocNames {
		what, short := "same as -n `N`", ""
		if name == "n" {
			what, short = "start `N` ranks of PROG on this host", "n" // -n, and mpirun's --n
		}
		fs.VarP(&nprocFlag{p: f.np, name: name}, name, short, what)
	}
	fs.Var(&f.env, "env", "set `KEY=VALUE` in the environment of PROG's ranks (repeatable)")
	f.grace = fs.Duration("grace", launch.DefaultGrace, "time between SIGTERM and SIGKILL when stopping ranks (first context only)")
	f.settle = fs.Duration("settle", launch.DefaultSettle, "after the first rank fails, how long to wait for other failures before stopping the rest (first context only)")
	f.maxRestarts = fs.Int("max-restarts", 0, "replace up to `N` failed ranks in all with processes that join the running job ("+config.Join.Name+"=1: goccl.Join); goccl run then serves the job's store (first context only)")
	f.metricsAddr = fs.String("metrics-addr", "", "serve each rank's Prometheus metrics at `ADDR` (:9400: local rank r on port 9400+r); sets "+config.MetricsAddr.Name+" (first context only)")
	f.hosts = fs.StringArrayP("host", "H", nil, "run the ranks on `HOSTS` (h1:4,h2:4: NAME[:SLOTS],...; repeatable), filling each host's slots in order (first context only)")
	f.hostfile = fs.String("hostfile", "", "run the ranks on the hosts of `FILE` (OpenMPI's syntax: NAME [slots=N] per line; first context only)")
	fs.StringVar(f.hostfile, "machinefile", "", "same as --hostfile `FILE`")
	f.rsh = fs.String("rsh", "ssh", "remote shell `COMMAND` that starts goccl on the other hosts, as COMMAND HOST 'goccl rund' (OpenMPI's plm_rsh_agent; first context only)")
	f.agent = fs.String("launch-agent", "", "the goccl executable at `PATH` on the hosts (default: this one's path; first context only)")
	f.export = fs.StringArrayP("x", "x", nil, "give the ranks on other hosts this program's variable `NAME` too (as mpirun -x; goccl's own variables always go; first context only)")
	f.nnodes = fs.Int("nnodes", 1, "this goccl run is one of `N` (one per node, as torchrun's): its ranks are those of --node-rank (first context only)")
	f.nodeRank = fs.Int("node-rank", -1, "this node's index `R` in [0, --nnodes): its ranks are R*n to R*n+n-1 (first context only)")
	f.masterAddr = fs.String("master-addr", "", "node 0's address `HOST`, where rank 0 serves the store (first context only)")
	f.masterPort = fs.Int("master-port", 29500, "`PORT` of rank 0's store at --master-addr; PyTorch's c10d store is served at PORT+1 by node 0 (first context only)")
	return fs, f
}

// hostList is the multi-host part of the first context's flags.
func (f *runFlags) hostList(fs *cliFlags) (hosts, error) {
	var h hosts
	for _, v := range *f.hosts {
		list, err := launch.ParseHosts(v)
		if err != nil {
			return h, fmt.Errorf("-H %s: %v", v, err)
		}
		h.list = append(h.list, list...)
	}
	if *f.hostfile != "" {
		if len(h.list) > 0 {
			return h, errors.New("give the hosts with -H or with --hostfile, not both")
		}
		file, err := os.Open(*f.hostfile)
		if err != nil {
			return h, err
		}
		defer file.Close()
		if h.list, err = launch.ParseHostfile(file, *f.hostfile); err != nil {
			return h, err
		}
	}
	for _, name := range []string{"rsh", "launch-agent", "x"} {
		if fs.Changed(name) && h.list == nil {
			return h, fmt.Errorf("--%s is for a job on several hosts: give them with -H or --hostfile", name)
		}
	}
	var err error
	if h.node, err = f.nodeFlags(fs); err != nil || h.list == nil {
		return h, err
	}
	if h.node != nil {
		return h, errors.New("-H or --hostfile start every host's ranks from here; --nnodes is for one goccl run per node: give one or the other")
	}
	h.rsh = strings.Fields(*f.rsh)
	if len(h.rsh) == 0 {
		return h, errors.New("--rsh is empty")
	}
	h.agent = *f.agent
	if len(*f.export) > 0 {
		h.export = *f.export
	}
	return h, nil
}

// nodeFlags are torchrun's multi-node flags (--nnodes N --node-rank R
// --master-addr HOST --master-port PORT), nil when --nnodes is 1 or unset.
func (f *runFlags) nodeFlags(fs *cliFlags) (*launch.NodeEnv, error) {
	if *f.nnodes < 1 {
		return nil, fmt.Errorf("--nnodes %d: must be at least 1", *f.nnodes)
	}
	if *f.nnodes == 1 {
		for _, name := range []string{"node-rank", "master-addr", "master-port"} {
			if fs.Changed(name) {
				return nil, fmt.Errorf("--%s is for a job of several nodes: give --nnodes too", name)
			}
		}
		return nil, nil
	}
	switch {
	case *f.nodeRank < 0 || *f.nodeRank >= *f.nnodes:
		return nil, fmt.Errorf("--node-rank %d: give this node's index in [0, %d) (--nnodes %d)", *f.nodeRank, *f.nnodes, *f.nnodes)
	case *f.masterAddr == "":
		return nil, errors.New("--nnodes needs --master-addr: node 0's address, where rank 0 serves the store")
	case *f.masterPort < 1 || *f.masterPort > 65534:
		return nil, fmt.Errorf("--master-port %d: want a port in [1, 65534] (PyTorch's store takes the next one)", *f.masterPort)
	}
	return &launch.NodeEnv{Source: "flags", NNodes: *f.nnodes, NodeRank: *f.nodeRank, MasterAddr: *f.masterAddr, MasterPort: *f.masterPort,
		JobID: fmt.Sprintf("nodes-%s-%d", *f.masterAddr, *f.masterPort)}, nil
}

// splitContexts splits args at each standalone ":".
func splitContexts(args []string) [][]string {
	var contexts [][]string
	start := 0
	for i, a := range args {
		if a == contextSep {
			contexts = append(contexts, args[start:i])
			start = i + 1
		}
	}
	return append(contexts, args[start:])
}

// parseRunArgs parses goccl run's command line. It returns nil and the
// exit status when the command ends there (0 for -h, 2 for a usage error,
// which it has reported).
//
// As mpirun's, the command line is one or more application contexts
// separated by standalone ":" arguments, each [flags] PROG [ARGS...]. The
// flags before the first PROG are the first context's, the launcher's own
// (--grace, --metrics-addr) among them: a later context may not give those.
// With several contexts each must give its number of ranks.
func parseRunArgs(args []string, stderr io.Writer) (*runArgs, int) {
	contexts := splitContexts(args)
	multi := len(contexts) > 1
	fail := func(format string, a ...any) (*runArgs, int) {
		fmt.Fprintf(stderr, "goccl run: "+format+"\nRun 'goccl run -h' for usage.\n", a...)
		return nil, 2
	}
	var ra *runArgs
	var metricsEnv envList
	for i, cargs := range contexts {
		where := "" // names the context in errors when there are several
		if multi {
			where = fmt.Sprintf("context %d: ", i+1)
			if len(cargs) == 0 {
				switch i {
				case len(contexts) - 1:
					return fail("context %d is empty: nothing follows the last %q (give -n N PROG [ARGS...] after it, or remove it)", i+1, contextSep)
				case 0:
					return fail("context 1 is empty: nothing comes before the first %q (give -n N PROG [ARGS...] there)", contextSep)
				}
				return fail("context %d is empty: nothing between two %q (give -n N PROG [ARGS...] there)", i+1, contextSep)
			}
		}
		fs, f := newRunFlags(stderr)
		if err := fs.parse(cargs); errors.Is(err, pflag.ErrHelp) {
			return nil, 0
		} else if err != nil {
			return fail("%s%v", where, err)
		}
		if f.np.conflict != "" {
			fmt.Fprintf(stderr, "goccl run: %s%s disagree: give the number of ranks once\n", where, f.np.conflict)
			return nil, 2
		}
		if fs.NArg() == 0 {
			if multi {
				return fail("%sno program given: each context is -n N [--env KEY=VALUE]... PROG [ARGS...]", where)
			}
			fmt.Fprintf(stderr, "goccl run: no program given\nusage: %s\nRun 'goccl run -h' for usage.\n", commands["run"].usage)
			return nil, 2
		}
		prog := fs.Arg(0)
		if multi && f.np.set == "" {
			return fail("context %d (%s): no number of ranks: give -n N before %s (each program of a job of several needs its -n)", i+1, prog, prog)
		}
		if i == 0 {
			if *f.metricsAddr != "" {
				metricsEnv = envList{config.MetricsAddr.Name + "=" + *f.metricsAddr} // --env may still override it
			}
			if *f.maxRestarts < 0 {
				return fail("--max-restarts %d: want 0 (no restarts) or more", *f.maxRestarts)
			}
			ra = &runArgs{np: f.np.n, npSet: f.np.set != "", env: append(metricsEnv, f.env...), grace: *f.grace, settle: *f.settle,
				maxRestarts: *f.maxRestarts, prog: prog, args: fs.Args()[1:]}
			var err error
			if ra.hosts, err = f.hostList(fs); err != nil {
				return fail("%v", err)
			}
			continue
		}
		for _, name := range jobFlags {
			if fs.Changed(name) {
				return fail("%s--%s is the whole job's: give it in the first context, before the first PROG", where, name)
			}
		}
		ra.more = append(ra.more, runApp{np: f.np.n, env: append(metricsEnv[:len(metricsEnv):len(metricsEnv)], f.env...), prog: prog, args: fs.Args()[1:]})
	}
	return ra, 0
}

func runRun(args []string, stdout, stderr io.Writer) int {
	ra, status := parseRunArgs(args, stderr)
	if ra == nil {
		return status
	}
	if ra.list == nil && ra.node == nil && os.Getenv(config.Rank.Name) == "" {
		// Under srun or in a Kubernetes job's pod: one goccl run per node.
		node, ok, err := launch.DetectNodeEnv(os.LookupEnv)
		if err != nil {
			fmt.Fprintf(stderr, "goccl run: %v\n", err)
			return 2
		}
		if ok {
			ra.node = &node
		}
	}
	cfg := launch.Config{
		Stdout:         stdout,
		Stderr:         stderr,
		Grace:          ra.grace,
		Settle:         ra.settle,
		MaxRestarts:    ra.maxRestarts,
		ForwardSignals: true,
	}
	switch {
	case ra.list != nil:
		// The agent of rank 0's host serves PyTorch's store.
		cfg.Hosts, cfg.Rsh, cfg.Agent, cfg.Export = ra.list, ra.rsh, ra.agent, ra.export
		if ra.more == nil && !ra.npSet {
			ra.np = 0
			for _, h := range ra.list {
				ra.np += h.Slots
			}
		}
	case ra.node != nil:
		closeTorch, err := nodeConfig(&cfg, ra, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "goccl run: %v\n", err)
			return 1
		}
		defer closeTorch()
	default:
		// A PyTorch c10d store for the PyTorch programs among the ranks, as
		// torchrun's agent serves one (goccl's own ranks use goccl's store).
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintf(stderr, "goccl run: cannot serve a c10d store for PyTorch: %v\n", err)
			return 1
		}
		torchStore := rendezvous.ServeC10d(ln)
		defer torchStore.Close()
		_, port, _ := net.SplitHostPort(torchStore.Addr())
		cfg.Env = launch.TorchEnv("127.0.0.1", port)
		cfg.Progress = progress.ForRanks(stderr)
	}
	if ra.more == nil {
		cfg.NP, cfg.Prog, cfg.Args, cfg.Env = ra.np, ra.prog, ra.args, append(cfg.Env, ra.env...)
	} else {
		for _, a := range ra.apps() {
			cfg.Apps = append(cfg.Apps, launch.App{NP: a.np, Prog: a.prog, Args: a.args, Env: a.env})
		}
	}
	err := launch.Run(context.Background(), cfg)
	return reportLaunch("goccl run", err, stderr)
}

// nodeConfig makes cfg this node's share of a job of one goccl run per
// node (ra.node): its ranks follow the earlier nodes' (each node runs the
// same number), rank 0's store is at the master's address and port, and
// node 0 serves PyTorch's c10d store at the next port. It says so on
// stderr.
func nodeConfig(cfg *launch.Config, ra *runArgs, stderr io.Writer) (closeTorch func(), err error) {
	node := ra.node
	np := ra.np
	for _, a := range ra.more {
		np += a.np
	}
	master := net.JoinHostPort(node.MasterAddr, strconv.Itoa(node.MasterPort))
	torchPort := strconv.Itoa(node.MasterPort + 1)
	cfg.Place = &launch.Place{FirstRank: node.NodeRank * np, WorldSize: node.NNodes * np, Node: node.NodeRank,
		StoreAddr: master, JobID: node.JobID}
	cfg.Env = launch.TorchEnv(node.MasterAddr, torchPort)
	closeTorch = func() {}
	if node.NodeRank == 0 {
		ln, err := net.Listen("tcp", ":"+torchPort)
		if err != nil {
			return nil, fmt.Errorf("node 0 cannot serve PyTorch's c10d store at port %s (the master port + 1): %v", torchPort, err)
		}
		srv := rendezvous.ServeC10d(ln)
		closeTorch = func() { srv.Close() }
	}
	serving := "rank 0's store"
	if ra.maxRestarts > 0 {
		// Elastic: node 0's goccl run serves goccl's store, which then
		// outlives rank 0.
		serving, cfg.Place.Served = "the store node 0's goccl run serves", true
		if node.NodeRank == 0 {
			var opts []rendezvous.Option
			if tok := os.Getenv(config.JobToken.Name); tok != "" {
				opts = append(opts, rendezvous.WithToken([]byte(tok)))
			}
			srv, err := rendezvous.NewTCPServer(":"+strconv.Itoa(node.MasterPort), opts...)
			if err != nil {
				closeTorch()
				return nil, fmt.Errorf("node 0 cannot serve the job's store at port %d (--max-restarts): %v", node.MasterPort, err)
			}
			torch := closeTorch
			closeTorch = func() {
				lingerStore(srv, stderr)
				srv.Close()
				torch()
			}
		}
	}
	token := ""
	if os.Getenv(config.JobToken.Name) == "" {
		token = "; no " + config.JobToken.Name + ": connections are not authenticated (set the same secret on every node)"
	}
	fmt.Fprintf(stderr, "goccl run: node %d of %d (%s): ranks %d-%d of %d, %s at %s%s\n",
		node.NodeRank, node.NNodes, node.Source, cfg.Place.FirstRank, cfg.Place.FirstRank+np-1, cfg.Place.WorldSize, serving, master, token)
	return closeTorch, nil
}

// storeLinger bounds how long node 0's goccl run keeps serving the store
// (--max-restarts) once its own ranks have exited.
const storeLinger = 2 * time.Minute

// lingerStore waits, for at most storeLinger, until no rank is connected
// to srv: the ranks of the other nodes may still use the store after node
// 0's have exited. It says so when that takes more than a moment.
func lingerStore(srv *rendezvous.TCPServer, stderr io.Writer) {
	start := time.Now()
	said := false
	for srv.Clients() > 0 && time.Since(start) < storeLinger {
		if !said && time.Since(start) > 2*time.Second {
			said = true
			fmt.Fprintf(stderr, "goccl run: node 0's ranks have exited; serving the job's store until the other nodes' ranks leave it (at most %v)\n", storeLinger)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reportLaunch prints a launch error and returns the exit status for it.
func reportLaunch(who string, err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", who, err)
	var ee *launch.ExitError
	var se *launch.SignalError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode()
	case errors.As(err, &se):
		return se.ExitCode()
	}
	return 1
}
