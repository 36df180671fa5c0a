package goccl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ddp"
	"github.com/goccl/goccl/internal/ranktest"
	"github.com/goccl/goccl/internal/trace"
	"github.com/goccl/goccl/internal/trace/tracetest"
)

type traceEvent struct {
	Name string         `json:"name"`
	Ph   string         `json:"ph"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	Args map[string]any `json:"args"`
}

func readTrace(t *testing.T, path string) []traceEvent {
	t.Helper()
	raw, err := trace.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var evs []traceEvent
	for _, r := range raw {
		var e traceEvent
		if err := json.Unmarshal(r, &e); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if e.Ph == "X" {
			evs = append(evs, e)
		}
	}
	return evs
}

// TestTraceFile: with GOCCL_TRACE_FILE each rank writes valid trace-event
// JSON (tracetest.CheckFile) with its operations (blocking, non-blocking,
// grouped) with sequence numbers, bytes and schedules, ddp's compute and
// wait spans on a second track, and a failed operation with its error;
// goccl trace merge's Merge joins the ranks.
func TestTraceFile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("GOCCL_TRACE_FILE", filepath.Join(dir, "trace-%r.json"))
	ranktest.Run(t, 2, 30*time.Second, func(ctx context.Context, c *goccl.Comm) error {
		x := make([]float32, 1024)
		if err := goccl.AllReduce(ctx, c, x, x, len(x), goccl.Sum); err != nil {
			return err
		}
		r, err := goccl.IAllReduce(ctx, c, x, x, len(x), goccl.Sum)
		if err != nil {
			return err
		}
		if err := r.Wait(ctx); err != nil {
			return err
		}
		peer := 1 - c.Rank()
		if err := c.Group(ctx, func(g *goccl.Group) error {
			if err := goccl.GroupSend(g, x, 16, peer); err != nil {
				return err
			}
			return goccl.GroupRecv(g, x[16:], 16, peer)
		}); err != nil {
			return err
		}
		params := [][]float32{make([]float32, 8)}
		d, err := ddp.New(ctx, c, params, ddp.Options{})
		if err != nil {
			return err
		}
		if err := d.MarkReady(0); err != nil {
			return err
		}
		if err := d.Wait(ctx); err != nil {
			return err
		}
		// A count mismatch fails on both ranks.
		y := make([]float32, 4+c.Rank())
		if err := goccl.AllReduce(ctx, c, y, y, len(y), goccl.Sum); !errors.Is(err, goccl.ErrMismatch) && !errors.Is(err, goccl.ErrClosed) {
			return fmt.Errorf("mismatched AllReduce: %v", err)
		}
		return nil
	})
	var files []string
	for r := 0; r < 2; r++ {
		path := filepath.Join(dir, fmt.Sprintf("trace-%d.json", r))
		files = append(files, path)
		tracetest.CheckFile(t, path)
		evs := readTrace(t, path)
		names := map[string]int{}
		var lastSeq float64
		failed := false
		for _, e := range evs {
			names[e.Name]++
			if e.Pid != r || e.Ts <= 0 || e.Dur < 0 {
				t.Errorf("rank %d: event %+v", r, e)
			}
			if e.Tid == 0 && e.Name != "Group" {
				seq, _ := e.Args["seq"].(float64)
				if seq <= lastSeq {
					t.Errorf("rank %d: %s has seq %v after %v", r, e.Name, seq, lastSeq)
				}
				lastSeq = seq
			}
			if e.Name == "AllReduce" && e.Args["bytes"] == 4096.0 && e.Args["algorithm"] == nil {
				t.Errorf("rank %d: AllReduce without its schedule: %+v", r, e)
			}
			if _, ok := e.Args["error"]; ok {
				failed = true
			}
		}
		// Init's Barrier and direct-schedule agreement, the 2 AllReduces, the
		// Group, ddp's Broadcast and bucket AllReduce, the failed one.
		if names["AllReduce"] < 4 || names["Group"] != 1 || names["ddp compute"] != 1 || names["ddp wait"] != 1 || names["Broadcast"] < 1 {
			t.Errorf("rank %d: events by name %v", r, names)
		}
		if !failed {
			t.Errorf("rank %d: the failed AllReduce has no error in the trace", r)
		}
	}
	var merged bytes.Buffer
	n, err := trace.Merge(&merged, files...)
	if err != nil {
		t.Fatal(err)
	}
	var all []traceEvent
	if err := json.Unmarshal(merged.Bytes(), &all); err != nil || len(all) != n {
		t.Fatalf("merged trace: %d events, %v", len(all), err)
	}
	pids := map[int]bool{}
	for _, e := range all {
		pids[e.Pid] = true
	}
	if len(pids) != 2 {
		t.Errorf("merged trace has pids %v, want 0 and 1", pids)
	}
}
