// Command goccl is the goccl command-line tool.
//
//	goccl run -np N [-env K=V]... PROG [ARGS...]   start N local ranks of PROG
//	goccl perf COLL [flags]                        nccl-tests-style benchmark
//	goccl roce check-pcap FILE                     decode RoCE frames, verify ICRCs
//	goccl doctor host [--json]                     check this host (RDMA, MTUs, /dev/shm, env)
//	goccl version                                  print the version
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
)

// command is one subcommand.
type command struct {
	name    string
	summary string // one line for the usage listing
	usage   string // "goccl NAME ..." synopsis line(s)
	// run executes the subcommand with the arguments after its name and
	// returns the process exit status.
	run func(args []string, stdout, stderr io.Writer) int
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
			fmt.Fprintf(stderr, "goccl help: unknown command %q\n", args[1])
			return 2
		}
		usage(stdout)
		return 0
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "goccl: unknown command %q\n\n", name)
		usage(stderr)
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("goccl is the command-line tool of the goccl collective communication library.\n\nUsage:\n\n\tgoccl <command> [arguments]\n\nCommands:\n\n")
	for _, n := range names {
		fmt.Fprintf(&b, "\t%-10s %s\n", n, commands[n].summary)
	}
	b.WriteString("\nRun 'goccl help <command>' or 'goccl <command> -h' for details.\n")
	io.WriteString(w, b.String())
}
