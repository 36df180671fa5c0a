// Command testsummary reads `go test -json` on stdin and prints what a plain
// `go test` would (the ok/FAIL/? line of every package, the output of failed
// tests), then a list of the tests that skipped, each with its reason.
//
//	go test -json ./... | go run ./scripts/testsummary
//
// It exits with status 1 when a test or a package failed (scripts/test.sh
// also relies on pipefail for go test's own status).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is the part of a test2json event used here.
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output events
	Test       string
	Output     string
}

// skipped is a test that called t.Skip, and the last line it logged.
type skipped struct {
	pkg, test, reason string
}

// filter copies the non-verbose part of the events in r to w and returns the
// skipped tests and whether anything failed.
func filter(r io.Reader, w io.Writer) ([]skipped, bool, error) {
	var (
		skips  []skipped
		failed bool
		held   = map[[2]string][]string{} // output of running tests
		order  [][2]string                // their keys, first output first
	)
	show := func(key [2]string) {
		for _, o := range held[key] {
			if !strings.HasPrefix(o, "=== ") {
				io.WriteString(w, o)
			}
		}
		delete(held, key)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		var e event
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil {
			fmt.Fprintln(w, line) // not an event: go's own messages
			continue
		}
		key := [2]string{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			io.WriteString(w, e.Output)
		case e.Test == "" && e.Action == "output":
			if e.Output != "PASS\n" { // plain go test prints ok, FAIL, ? lines
				io.WriteString(w, e.Output)
			}
		case e.Test == "" && e.Action == "fail":
			// Tests the crash of a test binary left unfinished.
			failed = true
			for _, k := range order {
				if _, ok := held[k]; ok && k[0] == e.Package {
					show(k)
				}
			}
		case e.Test == "":
		case e.Action == "output":
			if _, ok := held[key]; !ok {
				order = append(order, key)
			}
			held[key] = append(held[key], e.Output)
		case e.Action == "fail":
			failed = true
			show(key)
		case e.Action == "skip":
			skips = append(skips, skipped{e.Package, e.Test, skipReason(held[key])})
			delete(held, key)
		case e.Action == "pass":
			delete(held, key)
		}
	}
	return skips, failed, sc.Err()
}

// skipReason is the last line a skipped test logged (its t.Skip message),
// without the "=== RUN" and "--- SKIP" lines.
func skipReason(out []string) string {
	for i := len(out) - 1; i >= 0; i-- {
		s := strings.TrimSpace(out[i])
		if s != "" && !strings.HasPrefix(s, "=== ") && !strings.HasPrefix(s, "--- SKIP") {
			return s
		}
	}
	return "(no reason given)"
}

// summary prints the skipped tests, sorted by package and name.
func summary(w io.Writer, skips []skipped) {
	if len(skips) == 0 {
		fmt.Fprintln(w, "Skipped tests: none")
		return
	}
	sort.Slice(skips, func(i, j int) bool {
		if skips[i].pkg != skips[j].pkg {
			return skips[i].pkg < skips[j].pkg
		}
		return skips[i].test < skips[j].test
	})
	fmt.Fprintf(w, "Skipped tests (%d):\n", len(skips))
	for _, s := range skips {
		fmt.Fprintf(w, "  %s %s: %s\n", s.pkg, s.test, s.reason)
	}
}

func main() {
	skips, failed, err := filter(os.Stdin, os.Stdout)
	summary(os.Stdout, skips)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}
