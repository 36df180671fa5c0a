package main

import (
	"bytes"
	"context"
	"fmt"
	"github.com/goccl/goccl/examples/internal/mnist"
	"path/filepath"
	"testing"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/trace"
	"github.com/goccl/goccl/internal/trace/tracetest"
)

// barrierSink is the Trainer as the backward pass's sink, made to wait in a
// Barrier right after the step's first bucket is issued. A blocking
// operation runs after the non-blocking ones issued before it, so the
// Barrier returns only once that bucket's AllReduce has run: the backward
// pass certainly overlaps it, however the goroutines are scheduled
// (GOMAXPROCS=1 included). It waits only after an issue, so it creates no
// overlap where the DDP issues nothing during the backward pass.
type barrierSink struct {
	*Trainer
	ctx    context.Context
	waited bool
}

func (s *barrierSink) backward() {
	s.waited = false
	s.Trainer.backward()
}

func (s *barrierSink) bias(l int) error {
	if err := s.Trainer.bias(l); err != nil {
		return err
	}
	return s.sync()
}

func (s *barrierSink) rows(l, r0, r1 int) error {
	if err := s.Trainer.rows(l, r0, r1); err != nil {
		return err
	}
	return s.sync()
}

func (s *barrierSink) sync() error {
	if s.waited || s.dp.Issued() == 0 {
		return nil
	}
	s.waited = true
	return s.comm.Barrier(s.ctx)
}

// TestTraceShowsOverlap: steps of 2 goroutine ranks with GOCCL_TRACE_FILE
// write trace files that, merged as `goccl trace merge` does, are valid
// trace-event JSON (tracetest.Check: fields, phases, nesting per thread),
// with each step's forward, backward and optimizer spans inside ddp's
// compute span. With overlap, every step's backward span contains the start
// of at least one bucket's AllReduce (the overlap a viewer shows); without
// overlap, the gradients are marked ready after the backward pass, and no
// bucket's AllReduce starts inside a backward span. Both follow from the
// order of events, not from their durations.
func TestTraceShowsOverlap(t *testing.T) {
	train, _ := loadForTest(t)
	const world, steps = 2, 3
	idx := make([]int, 32)
	for i := range idx {
		idx[i] = 5 * i
	}
	// 784-512-10 in blocks of 64 rows: a 1 MiB first bucket (the last
	// layer, the first layer's bias and its last 5 blocks), then one
	// bucket per block. Bucket 0 is issued with 3 blocks of the backward
	// pass to go.
	sizes := []int{mnist.Features, 512, mnist.Classes}
	opts := trainerOptions{bucketMB: 0.25, chunkRows: 64}
	for _, overlap := range []bool{true, false} {
		t.Run(fmt.Sprintf("overlap=%v", overlap), func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("GOCCL_TRACE_FILE", filepath.Join(dir, "trace-%r.json"))
			o := opts
			o.noOverlap = !overlap
			bucketBytes := make([]map[float64]bool, world) // the buckets' sizes (3 of them are alike)
			runRanks(t, world, func(ctx context.Context, c *goccl.Comm) error {
				tr, err := newTrainer(ctx, c, sizes, 3, 1e-3, o)
				if err != nil {
					return err
				}
				bs := tr.dp.Buckets()
				if len(bs) != 4 {
					return fmt.Errorf("%d buckets, want 4", len(bs))
				}
				bucketBytes[c.Rank()] = map[float64]bool{}
				for _, b := range bs {
					bucketBytes[c.Rank()][float64(4*b.Len)] = true
				}
				sink := &barrierSink{Trainer: tr, ctx: ctx}
				for s := range steps {
					if _, _, err := tr.step(ctx, train, idx, sink); err != nil {
						return fmt.Errorf("step %d: %w", s, err)
					}
				}
				return nil
			})
			var files []string
			for r := range world {
				files = append(files, filepath.Join(dir, fmt.Sprintf("trace-%d.json", r)))
				tracetest.CheckFile(t, files[r])
			}
			var merged bytes.Buffer
			if _, err := trace.Merge(&merged, files...); err != nil {
				t.Fatal(err)
			}
			evs := tracetest.Check(t, "merged trace", merged.Bytes())
			for r := range world {
				var backward, buckets []tracetest.Event
				spans := map[string]int{}
				for _, e := range evs {
					switch {
					case e.Pid != r:
					case e.Tid == 1:
						spans[e.Name]++
						if e.Name == "backward" {
							backward = append(backward, e)
						}
					case e.Name == "AllReduce" && bucketBytes[r][e.Args["bytes"].(float64)]:
						buckets = append(buckets, e)
					}
				}
				for _, name := range []string{"forward", "backward", "optimizer", "ddp compute", "ddp wait"} {
					if spans[name] != steps {
						t.Errorf("rank %d: %d %q spans, want %d (spans: %v)", r, spans[name], name, steps, spans)
					}
				}
				if len(buckets) != steps*4 {
					t.Errorf("rank %d: %d bucket AllReduces, want %d", r, len(buckets), steps*4)
				}
				for s, b := range backward {
					inside := 0
					for _, a := range buckets {
						if b.Start <= a.Start && a.Start < b.End {
							inside++
						}
					}
					if overlap && inside == 0 {
						t.Errorf("rank %d step %d: no bucket AllReduce starts in the backward span [%d, %d] ns", r, s, b.Start, b.End)
					}
					if !overlap && inside != 0 {
						t.Errorf("rank %d step %d: %d bucket AllReduces start in the backward span without overlap", r, s, inside)
					}
					if r == 0 && s == 0 {
						t.Logf("rank 0 step 0: %d of 4 bucket AllReduces start during the backward pass", inside)
					}
				}
			}
		})
	}
}
