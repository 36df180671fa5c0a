package main

import (
	"fmt"
	"io"
	"os"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/trace"
)

var traceUsage = `usage: goccl trace merge [-o OUT] FILE...

merge joins the trace files of a job's ranks (written by ` + config.TraceFile.Name + `,
e.g. ` + config.TraceFile.Name + `=trace-%r.json) into one Chrome trace-event JSON file
that Perfetto (https://ui.perfetto.dev) or chrome://tracing opens with every
rank on one timeline (each rank is a process; its operations and the
program's spans, such as ddp's compute and wait, are two tracks). Files of
ranks that died before closing their communicator are read up to their last
complete event.
`

func init() {
	register(&command{
		name:    "trace",
		summary: "merge the per-rank trace files of " + config.TraceFile.Name + " into one (Perfetto)",
		usage:   "goccl trace merge [-o OUT] FILE...",
		run:     runTrace,
	})
}

func runTrace(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "merge" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, traceUsage)
			return 0
		}
		fmt.Fprint(stderr, traceUsage)
		return 2
	}
	fs := newFlags("goccl trace merge", stderr, func(fs *cliFlags) {
		fmt.Fprint(fs.Output(), traceUsage+"\nFlags:\n")
		fs.PrintDefaults()
	})
	out := fs.StringP("output", "o", "", "output file (default: standard output)")
	if status, exit := fs.parseOrExit(args[1:]); exit {
		return status
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "goccl trace merge: no trace files given")
		return 2
	}
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintf(stderr, "goccl trace merge: %v\n", err)
			return 1
		}
		defer f.Close()
		w = f
	}
	n, err := trace.Merge(w, fs.Args()...)
	if err != nil {
		fmt.Fprintf(stderr, "goccl trace merge: %v\n", err)
		return 1
	}
	if *out != "" {
		fmt.Fprintf(stderr, "goccl trace merge: %d events from %d files in %s\n", n, fs.NArg(), *out)
	}
	return 0
}
