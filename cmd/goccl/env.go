package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/goccl/goccl/internal/config"
)

func init() {
	register(&command{
		name:    "env",
		summary: "list the " + config.Prefix + "* variables with their current values and sources",
		usage:   "goccl env [--json]",
		run:     runEnv,
	})
}

var envHelp = `usage: goccl env [--json]

Lists every ` + config.Prefix + `* environment variable goccl reads (internal/config), with
the value that applies in this environment and where it comes from: "env"
(set), "default" (goccl's default) or "unset" (no value, the feature is off
or chosen at run time). A set value that Init would refuse is marked
"INVALID" with the reason, and the exit status is then 1.

  --json  one JSON object per variable: name, value, source, kind, group,
          doc, and error when invalid
`

type envRow struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
	Kind   string `json:"kind"`
	Group  string `json:"group"`
	Doc    string `json:"doc"`
	Error  string `json:"error,omitempty"`
}

func runEnv(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("goccl env", stderr, func(fs *cliFlags) { fmt.Fprint(fs.Output(), envHelp) })
	asJSON := fs.Bool("json", false, "")
	if status, exit := fs.parseOrExit(args); exit {
		return status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "goccl env: unexpected arguments %q\n", fs.Args())
		return 2
	}
	status := 0
	var rows []envRow
	for _, v := range config.All() {
		value, source := v.Source()
		r := envRow{Name: v.Name, Value: value, Source: source, Kind: v.Kind.String(), Group: v.Group, Doc: v.Doc}
		if source == "env" {
			if err := v.Check(value); err != nil {
				r.Error, status = err.Error(), 1
			}
		}
		rows = append(rows, r)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, r := range rows {
			enc.Encode(r)
		}
		return status
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tVALUE\tSOURCE\tMEANING")
	for _, r := range rows {
		value, source := r.Value, r.Source
		if value == "" {
			value = "-"
		}
		if r.Error != "" {
			source = "INVALID (" + r.Error + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, value, source, r.Doc)
	}
	tw.Flush()
	return status
}
