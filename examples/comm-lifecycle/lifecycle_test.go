package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	gocclconfig "github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rendezvous"
)

// measureRanks runs measure on n goroutine ranks that share one in-memory
// store, as the processes of a job share rank 0's store.
func measureRanks(t *testing.T, n int, cfg config) [][]row {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := rendezvous.NewMemStore()
	defer store.Close()
	rows := make([][]row, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			if rows[r], errs[r] = measure(ctx, store, r, n, cfg); errs[r] != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, errs[r])
				cancel()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return rows
}

// TestModesComplete: at 1 and 2 ranks every mode runs all its steps at both
// sizes, with every AllReduce result checked (runSteps fails on a wrong
// element), and the table names every row.
func TestModesComplete(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprint(n, "ranks"), func(t *testing.T) {
			cfg := config{count: 1000, small: 3, steps: 4, modes: allModes}
			rows := measureRanks(t, n, cfg)
			for r := range n {
				if len(rows[r]) != 2*len(allModes) {
					t.Fatalf("rank %d: %d rows, want %d", r, len(rows[r]), 2*len(allModes))
				}
				for i, row := range rows[r] {
					wantMode, wantCount := allModes[i%len(allModes)], []int{cfg.count, cfg.small}[i/len(allModes)]
					if row.mode != wantMode || row.count != wantCount || row.st.steps != cfg.steps || row.st.rank != r || row.st.size != n {
						t.Errorf("rank %d row %d: %s %d floats, %d steps as rank %d of %d; want %s %d floats, %d steps as rank %d of %d",
							r, i, row.mode, row.count, row.st.steps, row.st.rank, row.st.size, wantMode, wantCount, cfg.steps, r, n)
					}
				}
			}
			var buf bytes.Buffer
			printTable(&buf, rows[0])
			for _, m := range allModes {
				if strings.Count(buf.String(), m) != 2 {
					t.Errorf("table has not 2 rows of %s:\n%s", m, buf.String())
				}
			}
		})
	}
}

// TestCheckCatchesWrongSum: the check that the tests rely on fails on a
// wrong element, naming it.
func TestCheckCatchesWrongSum(t *testing.T) {
	buf := make([]float32, 5)
	fill(buf, 0, 1) // rank 0's input, 2: not the sum over 2 ranks (6)
	err := check(buf, 2, 0, 1)
	if err == nil || !strings.Contains(err.Error(), "element 0 is 2, want 6") {
		t.Fatalf("check: %v", err)
	}
	fill(buf, 2, 1) // 6
	if err := check(buf, 2, 0, 1); err != nil {
		t.Fatal(err)
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-n", "10", "-small", "0", "-steps", "2", "-modes", "reused, init+close"})
	if err != nil || cfg.count != 10 || cfg.small != 0 || cfg.steps != 2 || strings.Join(cfg.modes, ",") != "reused,init+close" {
		t.Fatalf("parseFlags: %+v, %v", cfg, err)
	}
	for _, bad := range [][]string{{"-n", "0"}, {"-small", "-1"}, {"-steps", "0"}, {"-modes", "init"}, {"-timeout", "0s"}, {"extra"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q): no error", bad)
		}
	}
}

// TestRunWorldSizeOne runs the command's entry point as `go run` would with
// no launcher environment: a store served on loopback, a world of one rank.
func TestRunWorldSizeOne(t *testing.T) {
	for _, k := range os.Environ() {
		if name, _, _ := strings.Cut(k, "="); strings.HasPrefix(name, gocclconfig.Prefix) {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	rank, err := run(ctx, []string{"-n", "100", "-small", "2", "-steps", "2"}, &out)
	if err != nil || rank != 0 {
		t.Fatalf("rank %d: %v", rank, err)
	}
	if s := out.String(); !strings.HasPrefix(s, "1 ranks") || strings.Count(s, "\n") != 8 {
		t.Errorf("output:\n%s", s)
	}
	out.Reset()
	if rank, err := run(ctx, []string{"-naive", "-n", "10", "-steps", "2"}, &out); err != nil || rank != 0 || !strings.Contains(out.String(), "naive") {
		t.Errorf("-naive with one rank: rank %d, %v, output:\n%s", rank, err, out.String())
	}
}
