// Command goccl is the goccl command-line tool.
//
//	goccl run -n N [--env K=V]... PROG [ARGS...]   start N local ranks of PROG
//	goccl perf COLL [flags]                        nccl-tests-style benchmark
//	goccl roce check-pcap FILE                     decode RoCE frames, verify ICRCs
//	goccl doctor host [--json]                     check this host (RDMA, MTUs, /dev/shm, env)
//	goccl topo [--json | --xml]                    this host's topology (XML as NCCL_TOPO_DUMP_FILE)
//	goccl status [--addr HOST:PORT] [--json] [-m]  a running job's health (NCCL RAS's protocol)
//	goccl cluster up --hosts N [--bw R] [--delay D] hosts as network namespaces, shaped links
//	goccl version (or goccl --version)             print the version
//
// Flags are GNU style (github.com/spf13/pflag: --name=value, --name value,
// -n4, -n 4); a long flag also takes one dash, as Go's flag package and
// mpirun write it (-np 4, -minbytes=8). See flags.go.
//
// An unknown command or flag is an error that suggests the nearest valid one.
//
// Each subcommand lives in its own file and registers itself in init with
// register, so new ones (roce, doctor, ...) need no change here.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/goccl/goccl/internal/textdist"
	// GOCCL_STORE=etcd:// and etcd:// --store URLs, for this command and the
	// ranks it runs (goccl perf, linktest, xferbench).
	_ "github.com/goccl/goccl/rendezvous/etcd"
)

// command is one subcommand.
type command struct {
	name    string
	summary string // one line for the usage listing
	usage   string // "goccl NAME ..." synopsis line(s)
	// run executes the subcommand with the arguments after its name and
	// returns the process exit status.
	run func(args []string, stdout, stderr io.Writer) int
	// hidden keeps the command out of the usage listing and suggestions
	// (an internal one, as goccl rund).
	hidden bool
}

var commands = map[string]*command{}

// register adds a subcommand; call it from an init function.
func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("goccl: duplicate command " + c.name)
	}
	commands[c.name] = c
}

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// cli dispatches args (without the program name) and returns the exit status.
func cli(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return c.run([]string{"-h"}, stdout, stdout) // help text to stdout
			}
			fmt.Fprintf(stderr, "goccl help: unknown command %q%s\n", args[1], didYouMean(args[1], commandNames()))
			return 2
		}
		usage(stdout)
		return 0
	case "-version", "--version":
		name = "version"
	}
	c, ok := commands[name]
	if !ok {
		if strings.HasPrefix(name, "-") {
			fmt.Fprintf(stderr, "goccl: unknown flag %q%s\nRun 'goccl help' for usage.\n", name, didYouMeanFlag(name, []string{"help", "version"}))
			return 2
		}
		if s := didYouMean(name, commandNames()); s != "" {
			fmt.Fprintf(stderr, "goccl: unknown command %q%s\nRun 'goccl help' for usage.\n", name, s)
			return 2
		}
		fmt.Fprintf(stderr, "goccl: unknown command %q\n\n", name)
		usage(stderr)
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}

func commandNames() []string {
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if c.hidden {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// closest returns the candidate nearest to typed: at edit distance at most 2
// (a transposition counts as one edit) and less than typed's length, or
// differing only in case; "" when there is none.
func closest(typed string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		d := textdist.Distance(strings.ToLower(typed), strings.ToLower(c))
		if d == 0 && typed != c {
			d = 1 // case only: "-N" for "-n"
		} else if d >= len(typed) {
			continue
		}
		if d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// didYouMean is `; did you mean "C"?` for the candidate closest to typed, or "".
func didYouMean(typed string, candidates []string) string {
	if c := closest(typed, candidates); c != "" {
		return fmt.Sprintf("; did you mean %q?", c)
	}
	return ""
}

// didYouMeanFlag is didYouMean for a flag typed with its dashes ("--verison"
// or "-versio=1"), among flag names without dashes; the suggestion keeps the
// typed dashes.
func didYouMeanFlag(typed string, names []string) string {
	name := strings.TrimLeft(typed, "-")
	dashes := typed[:len(typed)-len(name)]
	name, _, _ = strings.Cut(name, "=")
	if c := closest(name, names); c != "" {
		return fmt.Sprintf("; did you mean %q?", dashes+c)
	}
	return ""
}

func usage(w io.Writer) {
	names := commandNames()
	var b strings.Builder
	b.WriteString("goccl is the command-line tool of the goccl collective communication library.\n\nUsage:\n\n\tgoccl <command> [arguments]\n\nCommands:\n\n")
	for _, n := range names {
		fmt.Fprintf(&b, "\t%-10s %s\n", n, commands[n].summary)
	}
	b.WriteString("\nRun 'goccl help <command>' or 'goccl <command> -h' for details, 'goccl --version' for the version.\n")
	io.WriteString(w, b.String())
}
