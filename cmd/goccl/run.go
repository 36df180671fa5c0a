package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/launch"
)

func init() {
	register(&command{
		name:    "run",
		summary: "start N local ranks of a program (a torchrun/mpirun for one host)",
		usage:   "goccl run -np N [-env KEY=VALUE]... [-grace DURATION] PROG [ARGS...]",
		run:     runRun,
	})
}

var runHelp = `usage: goccl run -np N [-env KEY=VALUE]... [-grace DURATION] PROG [ARGS...]

Starts N ranks of PROG on this host and waits for them. PROG is an executable
path, a name on PATH, or a Go main package (a directory such as
./examples/ddp-digits, or an import path), which is built once with go build
in the current module and removed afterwards.

Each rank gets the parent environment plus ` + config.Rank.Name + `, ` + config.WorldSize.Name + `,
` + config.LocalRank.Name + `, ` + config.LocalWorldSize.Name + `, ` + config.StoreAddr.Name + ` (127.0.0.1 and a
free port, where rank 0 serves the rendezvous store), ` + config.JobID.Name + ` and
` + config.JobToken.Name + ` (a fresh random secret unless already set), then
the -env settings. Every line a rank prints is prefixed with "[rank] ", on
stdout or stderr as the rank wrote it.

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
func (e *envList) Set(s string) error {
	if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	*e = append(*e, s)
	return nil
}

func runRun(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("goccl run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	np := fs.Int("np", 1, "number of ranks to start")
	var env envList
	fs.Var(&env, "env", "set `KEY=VALUE` in every rank's environment (repeatable)")
	grace := fs.Duration("grace", launch.DefaultGrace, "time between SIGTERM and SIGKILL when stopping ranks")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), runHelp)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "goccl run: no program given")
		fs.Usage()
		return 2
	}
	if *np < 1 {
		fmt.Fprintf(stderr, "goccl run: -np must be at least 1, got %d\n", *np)
		return 2
	}
	err := launch.Run(context.Background(), launch.Config{
		NP:             *np,
		Prog:           fs.Arg(0),
		Args:           fs.Args()[1:],
		Env:            env,
		Stdout:         stdout,
		Stderr:         stderr,
		Grace:          *grace,
		ForwardSignals: true,
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
