package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/ranktest"
)

// TestPipelineGradients runs both schedules at 2 and 4 stages (goroutine
// ranks) with a small model and checks on every stage that the gradient
// accumulated over the micro-batches equals the single-process gradient of
// the whole batch, that each micro-batch was forwarded and backwarded once,
// and the activations held at once: m for GPipe, at most p - stage for 1F1B.
func TestPipelineGradients(t *testing.T) {
	const batch, hidden, classes, seed = 24, 16, 5, 7
	for _, p := range []int{2, 4} {
		t.Run(fmt.Sprintf("p=%d", p), func(t *testing.T) {
			sizes := modelSizes(p, hidden, classes)
			x, y := syntheticBatch(seed, 0, batch, hidden, classes)
			ref, _ := reference(sizes, p, seed, x, y)
			ranktest.Run(t, p, 30*time.Second, func(ctx context.Context, c *goccl.Comm) error {
				s := c.Rank()
				lo, hi := stageLayers(p, s)
				st := newStage(sizes, lo, hi, seed)
				for _, sch := range []Schedule{GPipe, OneFOneB} {
					for _, m := range []int{1, 3, 4, 6} {
						ps, err := pipelinePass(ctx, c, st, pipeConfig{sch: sch, m: m, compute: computeGemm, hidden: hidden}, batch, x, y)
						if err != nil {
							return err
						}
						if d := relDiff(st.grad, ref[s]); !(d <= maxTol) {
							return fmt.Errorf("%v m=%d: gradient relative difference %.3g > %g", sch, m, d, maxTol)
						}
						if ps.forwards != m || ps.backwards != m {
							return fmt.Errorf("%v m=%d: %d forwards and %d backwards", sch, m, ps.forwards, ps.backwards)
						}
						if sch == GPipe && ps.maxInFlight != m {
							return fmt.Errorf("GPipe m=%d: %d micro-batches in flight, want %d", m, ps.maxInFlight, m)
						}
						if sch == OneFOneB && ps.maxInFlight > p-s {
							return fmt.Errorf("1F1B m=%d: %d micro-batches in flight, want <= %d", m, ps.maxInFlight, p-s)
						}
						if s == p-1 && ps.lossSum <= 0 {
							return fmt.Errorf("%v m=%d: last stage's loss %g", sch, m, ps.lossSum)
						}
					}
				}
				return nil
			})
		})
	}
}

// TestPipelineFixedCompute runs the sleeping model of compute at 4 stages:
// the counts hold as with the real products (no timing asserted).
func TestPipelineFixedCompute(t *testing.T) {
	const p, batch, hidden = 4, 8, 4
	ranktest.Run(t, p, 30*time.Second, func(ctx context.Context, c *goccl.Comm) error {
		s := c.Rank()
		lo, hi := stageLayers(p, s)
		st := newStage(modelSizes(p, hidden, 3), lo, hi, 1)
		for _, sch := range []Schedule{GPipe, OneFOneB} {
			ps, err := pipelinePass(ctx, c, st, pipeConfig{sch: sch, m: 8, compute: computeFixed, unit: 50 * time.Microsecond, hidden: hidden}, batch, nil, nil)
			if err != nil {
				return err
			}
			want := 8
			if sch == OneFOneB {
				want = p - s
			}
			if ps.forwards != 8 || ps.backwards != 8 || ps.maxInFlight != want {
				return fmt.Errorf("%v: %d forwards, %d backwards, %d in flight (want 8, 8, %d)", sch, ps.forwards, ps.backwards, ps.maxInFlight, want)
			}
			if ps.wall <= 0 || ps.busy <= 0 {
				return fmt.Errorf("%v: wall %v busy %v", sch, ps.wall, ps.busy)
			}
		}
		return nil
	})
}

// TestLab runs the whole example at 4 stages with a small configuration and
// checks rank 0's report.
func TestLab(t *testing.T) {
	cfg, err := parseFlags([]string{"-batch=16", "-hidden=16", "-m=2,4", "-steps=1", "-train=2", "-unit=100us"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ranktest.Run(t, 4, 30*time.Second, func(ctx context.Context, c *goccl.Comm) error {
		w := io.Discard
		if c.Rank() == 0 {
			w = &out
		}
		return lab(ctx, c, cfg, w)
	})
	text := out.String()
	for _, want := range []string{
		"gradients equal single-rank: yes",
		"train step 2 (1F1B, m=4",
		"gemm    GPipe       2",
		"fixed   1F1B        4",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	// In-flight column: GPipe m on every stage, 1F1B p - stage.
	for _, want := range []string{"  4 4 4 4\n", "  4 3 2 1\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks in-flight column %q:\n%s", want, text)
		}
	}
}

// TestLabOneRank: world size 1 runs a one-stage pipeline.
func TestLabOneRank(t *testing.T) {
	cfg, err := parseFlags([]string{"-batch=8", "-hidden=8", "-m=2", "-steps=1", "-train=1", "-unit=50us"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ranktest.Run(t, 1, 30*time.Second, func(ctx context.Context, c *goccl.Comm) error {
		return lab(ctx, c, cfg, &out)
	})
	if text := out.String(); !strings.Contains(text, "one-stage pipeline") || !strings.Contains(text, "gradients equal single-rank: yes") {
		t.Errorf("output:\n%s", text)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-compute=gpu"},
		{"-m=3"}, // does not divide -batch 256
		{"-m=0"},
		{"-m=x"},
		{"-batch=0"},
		{"-hidden=-1"},
		{"-classes=300"},
		{"-steps=0"},
		{"-train=-1"},
		{"-lr=0"},
		{"-unit=0s"},
		{"-nosuchflag"},
		{"extra"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	if _, err := parseFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.computes) != 2 || len(cfg.ms) != 3 {
		t.Errorf("defaults: %+v", cfg)
	}
}
