package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/launch"
	"github.com/goccl/goccl/internal/progress"
	"github.com/goccl/goccl/rendezvous"
)

func init() {
	register(&command{
		name:    "run",
		summary: "start N local ranks of a program (a torchrun/mpirun for one host)",
		usage:   "goccl run -n N [--env KEY=VALUE]... [--grace DURATION] PROG [ARGS...]",
		run:     runRun,
	})
}

var runHelp = `usage: goccl run -n N [--env KEY=VALUE]... [--grace DURATION] [--metrics-addr ADDR] [--] PROG [ARGS...]

Starts N ranks of PROG on this host and waits for them. N is given with -n
or -np (as to mpirun) or --nproc-per-node (as to torchrun, which also spells
it --nproc_per_node); given twice, the values must agree. Flags are GNU
style (--env=K=V, --env K=V, -n4, -n 4); long flags also take one dash, as
mpirun and Go programs write them (-np 4, -env K=V). The flags end at PROG
(or at --): everything after PROG is PROG's. PROG is an executable path, a
name on PATH, or a Go main package (a directory such as
./examples/ddp-digits, or an import path), which is built once with go
build in the current module and removed afterwards.

Each rank gets the parent environment plus ` + config.Rank.Name + `, ` + config.WorldSize.Name + `,
` + config.LocalRank.Name + `, ` + config.LocalWorldSize.Name + `, ` + config.StoreAddr.Name + ` (127.0.0.1 and a
free port, where rank 0 serves the rendezvous store), ` + config.JobID.Name + ` and
` + config.JobToken.Name + ` (a fresh random secret unless already set), then
the --env settings. So that PyTorch and MPI programs find their rank, each
rank also gets torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and
GROUP_RANK (0) and OpenMPI's OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
OMPI_COMM_WORLD_LOCAL_RANK and OMPI_COMM_WORLD_LOCAL_SIZE (goccl programs
read goccl's own first). As torchrun's agent does, goccl run also serves a
PyTorch c10d TCPStore and gives every rank MASTER_ADDR, MASTER_PORT (its
address), TORCHELASTIC_USE_AGENT_STORE=True and TORCHELASTIC_RESTART_COUNT=0,
so torch.distributed.init_process_group(init_method="env://") works in the
ranks (goccl's own ranks keep using goccl's store).

Every line a rank prints is prefixed with "[rank] ", on stdout or stderr as
the rank wrote it. Progress bars (goccl perf, the training examples) are
drawn by rank 0 only, on goccl run's stderr when that is a terminal (as
` + config.Progress.Name + ` says: auto, 0 or 1), which rank 0 gets as descriptor 3,
named by ` + config.ProgressFD.Name + `; each line forwarded to a terminal then erases the
bar first.

When a rank exits with a non-zero status or is killed by a signal, goccl run
waits a moment (250ms) for other failures, then the other ranks get SIGTERM,
then SIGKILL after the grace period, and goccl run names the rank that failed
and exits with its status (128+signal when killed). Of the failures in that
moment, a rank killed by a signal (SIGPIPE aside) is named before ranks that
exited with a status: they usually exited because they saw it die. SIGINT and
SIGTERM sent to goccl run are passed on to the ranks. The exit status is 0
only when every rank exits with 0.

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

// runArgs is goccl run's parsed command line.
type runArgs struct {
	np    int
	env   envList // --metrics-addr's variable first, then the --env settings
	grace time.Duration
	prog  string
	args  []string
}

// parseRunArgs parses goccl run's command line. It returns nil and the
// exit status when the command ends there (0 for -h, 2 for a usage error,
// which it has reported).
func parseRunArgs(args []string, stderr io.Writer) (*runArgs, int) {
	fs := newFlags("goccl run", stderr, func(fs *cliFlags) {
		fmt.Fprint(fs.Output(), runHelp)
		fs.PrintDefaults()
	})
	fs.SetInterspersed(false) // PROG's arguments are PROG's
	np := &nprocs{n: 1}
	for _, name := range nprocNames {
		what, short := "same as -n `N`", ""
		if name == "n" {
			what, short = "start `N` ranks on this host", "n" // -n, and mpirun's --n
		}
		fs.VarP(&nprocFlag{p: np, name: name}, name, short, what)
	}
	var env envList
	fs.Var(&env, "env", "set `KEY=VALUE` in every rank's environment (repeatable)")
	grace := fs.Duration("grace", launch.DefaultGrace, "time between SIGTERM and SIGKILL when stopping ranks")
	metricsAddr := fs.String("metrics-addr", "", "serve each rank's Prometheus metrics at `ADDR` (:9400: local rank r on port 9400+r); sets "+config.MetricsAddr.Name)
	if status, exit := fs.parseOrExit(args); exit {
		return nil, status
	}
	if np.conflict != "" {
		fmt.Fprintf(stderr, "goccl run: %s disagree: give the number of ranks once\n", np.conflict)
		return nil, 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "goccl run: no program given")
		fs.Usage()
		return nil, 2
	}
	if *metricsAddr != "" {
		env = append(envList{config.MetricsAddr.Name + "=" + *metricsAddr}, env...) // --env may still override it
	}
	return &runArgs{np: np.n, env: env, grace: *grace, prog: fs.Arg(0), args: fs.Args()[1:]}, 0
}

func runRun(args []string, stdout, stderr io.Writer) int {
	ra, status := parseRunArgs(args, stderr)
	if ra == nil {
		return status
	}
	env := ra.env
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
	env = append(envList{"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port,
		"TORCHELASTIC_USE_AGENT_STORE=True", "TORCHELASTIC_RESTART_COUNT=0"}, env...)
	err = launch.Run(context.Background(), launch.Config{
		NP:             ra.np,
		Prog:           ra.prog,
		Args:           ra.args,
		Env:            env,
		Stdout:         stdout,
		Stderr:         stderr,
		Grace:          ra.grace,
		ForwardSignals: true,
		Progress:       progress.ForRanks(stderr),
	})
	return reportLaunch("goccl run", err, stderr)
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
