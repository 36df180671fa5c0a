package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	tracedoc "github.com/goccl/goccl/doctor/trace"
	gocclconfig "github.com/goccl/goccl/internal/config"
)

// TestMain makes the test binary the example's prefill process when the
// decode side (a test) starts it.
func TestMain(m *testing.M) {
	if os.Getenv("KV_HANDOFF_CHILD") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestHandoff runs the example on a small model over each path: every
// block of every request arrives with its signature (wrong 0), the table
// has a row per mode with the 4096-token column filled, and the temporary
// directory of the FILE tier is gone afterwards.
func TestHandoff(t *testing.T) {
	for _, net := range []string{"shm", "tcp", "roce"} {
		t.Run(net, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp) // for both processes
			defer func() {
				if left, _ := filepath.Glob(filepath.Join(tmp, "kv-handoff-*")); len(left) > 0 {
					t.Errorf("left behind: %q", left)
				}
			}()
			if net == "tcp" { // the serving spans: goccl doctor trace reads them
				t.Setenv(gocclconfig.TraceFile.Name, filepath.Join(tmp, "serving-%p.json"))
			}
			var out, errb bytes.Buffer
			code := run([]string{"-layers", "2", "-kv-heads", "2", "-head-dim", "64", "-requests", "5",
				"-min-tokens", "16", "-max-tokens", "600", "-reps-4096", "2", "-net", net}, &out, &errb)
			if code != 0 {
				t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
			}
			if net == "tcp" {
				checkServing(t, tmp)
			}
			rows := 0
			for _, l := range strings.Split(out.String(), "\n") {
				f := strings.Fields(l)
				if len(f) != 10 || (f[0] != "direct" && f[0] != "staging" && f[0] != "file") {
					continue
				}
				rows++
				if f[1] != "7" || f[9] != "0" || f[8] == "-" || f[7] != "4.2" {
					t.Errorf("row %q: want 7 requests, 0 wrong, 4.2 MB per 4096-token request (2 layers × 512 B per token)", l)
				}
			}
			if rows != 3 {
				t.Fatalf("%d rows, want 3:\n%s", rows, out.String())
			}
		})
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"-net", "ib"}, {"-modes", "direct,zerocopy"}, {"-min-tokens", "100", "-max-tokens", "10"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 || errb.Len() == 0 {
			t.Errorf("%q: exit %d, %q", args, code, errb.String())
		}
	}
}

// checkServing reads the serving spans decode wrote (one trace, decode's)
// with goccl doctor trace: 7 requests per mode, each one's time to first
// token holding its prefill and KV transfer, the transfer a share of it.
func checkServing(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "serving-*.json"))
	if len(files) != 1 {
		t.Fatalf("serving traces %q, want decode's one", files)
	}
	rks, err := tracedoc.ReadPaths(files)
	if err != nil {
		t.Fatal(err)
	}
	rep := tracedoc.Analyze(rks, tracedoc.Options{})
	if len(rep.Serving) != 3 {
		t.Fatalf("serving %+v, want a row per mode", rep.Serving)
	}
	for i, mode := range []string{"direct", "file", "staging"} {
		s := rep.Serving[i]
		if s.Path != mode || s.Requests != 7 || s.ShareP50 <= 0 || s.ShareP99 > 100 || s.ShareP50 > s.ShareP99 ||
			s.TTFTP50 < s.TransferP50 || s.TTFTP99 < s.TTFTP50 || s.PrefillP50 <= 0 {
			t.Errorf("%s: %+v", mode, s)
		}
	}
}
