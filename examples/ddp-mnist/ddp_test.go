package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/examples/internal/mnist"

	"github.com/goccl/goccl"
	tracedoc "github.com/goccl/goccl/doctor/trace"
	gocclconfig "github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/progress/ptytest"
	"github.com/goccl/goccl/internal/ranktest"
)

// runRanks runs fn on n goroutine ranks of one communicator (ranktest.Run).
func runRanks(t *testing.T, n int, fn func(ctx context.Context, c *goccl.Comm) error) {
	t.Helper()
	ranktest.Run(t, n, 2*time.Minute, fn)
}

func loadForTest(t *testing.T) (train, test *mnist.Dataset) {
	t.Helper()
	train, test, err := mnist.Load()
	if err != nil {
		t.Fatal(err)
	}
	return train, test
}

// relDiff is ||a-b|| / ||b||.
func relDiff(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / den)
}

// stepResult is a replica's state after some steps on the same batch.
type stepResult struct {
	init, params []float32
	grads        [][]float32 // the reduced gradient of each step
}

func doSteps(ctx context.Context, c *goccl.Comm, seed uint64, d *mnist.Dataset, idx []int, steps int, o trainerOptions) (stepResult, error) {
	tr, err := newTrainer(ctx, c, []int{mnist.Features, 64, 32, mnist.Classes}, seed, 1e-3, o)
	if err != nil {
		return stepResult{}, err
	}
	res := stepResult{init: slices.Clone(tr.model.Params)}
	for range steps {
		if _, _, err := tr.Step(ctx, d, idx); err != nil {
			return res, err
		}
		res.grads = append(res.grads, tr.flatGrad())
	}
	res.params = slices.Clone(tr.model.Params)
	return res, nil
}

// TestDDPStepMatchesSingleRank: steps of 2 goroutine ranks, each on its half
// of a batch, give every rank the reduced gradient and the parameters that one
// rank gets on the whole batch (to float32 rounding), for an even split and an
// odd one, with the buckets reduced during the backward pass (overlap) or
// after it, and with one bucket or several. Rank 1 starts from other random parameters, so this also checks
// that rank 0's initialisation is broadcast. Adam's first step hardly depends
// on the gradient's size, so the gradients are compared directly.
func TestDDPStepMatchesSingleRank(t *testing.T) {
	train, _ := loadForTest(t)
	for _, tc := range []struct {
		batch, steps int
		o            trainerOptions
	}{
		{2 * 32, 3, trainerOptions{}},
		{37, 2, trainerOptions{}},
		{37, 2, trainerOptions{noOverlap: true}},
		{2 * 32, 2, trainerOptions{bucketMB: 0.01}},            // a bucket per tensor but the first (3 tensors)
		{37, 2, trainerOptions{bucketMB: 0.01, chunkRows: 3}},  // weight gradients in blocks, a bucket each
		{37, 2, trainerOptions{chunkRows: 5, noOverlap: true}}, // blocks, marked after the backward
	} {
		t.Run(fmt.Sprintf("batch%d/overlap=%v/bucketMB=%g/chunk=%d", tc.batch, !tc.o.noOverlap, tc.o.bucketMB, tc.o.chunkRows), func(t *testing.T) {
			idx := make([]int, tc.batch)
			for i := range idx {
				idx[i] = 7 * i
			}
			ref, err := doSteps(context.Background(), nil, 11, train, idx, tc.steps, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]stepResult, 2)
			runRanks(t, 2, func(ctx context.Context, c *goccl.Comm) (err error) {
				got[c.Rank()], err = doSteps(ctx, c, 11+uint64(100*c.Rank()), train, idx, tc.steps, tc.o)
				return err
			})
			for r, g := range got {
				if !slices.Equal(g.init, ref.init) {
					t.Errorf("rank %d: initial parameters differ from rank 0's after the broadcast", r)
				}
				for s := range g.grads {
					if d := relDiff(g.grads[s], ref.grads[s]); d > 1e-5 {
						t.Errorf("rank %d step %d: reduced gradient differs from the 1-rank gradient by %.3g (relative)", r, s, d)
					}
				}
				if d := relDiff(g.params, ref.params); d > 1e-5 {
					t.Errorf("rank %d: parameters differ from the 1-rank steps by %.3g (relative)", r, d)
				}
				if !slices.Equal(g.params, got[0].params) {
					t.Errorf("rank %d: parameters not bit-identical to rank 0's", r)
				}
			}
			t.Logf("gradient rel diff %.3g, params rel diff %.3g",
				relDiff(got[0].grads[0], ref.grads[0]), relDiff(got[0].params, ref.params))
		})
	}
}

// TestParamsIdentical: the collective check says yes for identical replicas
// and no, on every rank, when one rank differs in one bit.
func TestParamsIdentical(t *testing.T) {
	const world = 3
	for _, perturb := range []bool{false, true} {
		answers := make([]bool, world)
		runRanks(t, world, func(ctx context.Context, c *goccl.Comm) error {
			tr, err := newTrainer(ctx, c, []int{mnist.Features, 16, mnist.Classes}, 5, 1e-3, trainerOptions{})
			if err != nil {
				return err
			}
			if perturb && c.Rank() == 2 {
				p := tr.model.Params
				p[len(p)/2] = math.Float32frombits(math.Float32bits(p[len(p)/2]) ^ 1)
			}
			answers[c.Rank()], err = tr.ParamsIdentical(ctx)
			return err
		})
		for r, a := range answers {
			if a == perturb {
				t.Errorf("perturbed=%v: rank %d says identical=%v", perturb, r, a)
			}
		}
	}
}

// checkOutput checks the lines rank 0 prints and returns the summary line's
// fields.
func checkOutput(t *testing.T, out string, epochs, world int) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// With -overlap=ab (the default) a line compares the two settings.
	if len(lines) == epochs+5 {
		if l := lines[epochs+3]; !strings.HasPrefix(l, "exposed communication per step: with overlap ") || !strings.Contains(l, ", without ") {
			t.Errorf("line %q", l)
		}
		lines = append(lines[:epochs+3], lines[epochs+4])
	}
	if len(lines) != epochs+4 {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), epochs+4, out)
	}
	for e := 1; e <= epochs; e++ {
		if l := lines[e]; !strings.HasPrefix(l, fmt.Sprintf("epoch %d loss ", e)) || !strings.Contains(l, " ms allreduce ") {
			t.Errorf("line %q", l)
		}
	}
	if !strings.HasPrefix(lines[epochs+1], "final test accuracy: ") {
		t.Errorf("line %q", lines[epochs+1])
	}
	if want := fmt.Sprintf("parameters identical on all %d ranks: yes", world); lines[epochs+2] != want {
		t.Errorf("line %q, want %q", lines[epochs+2], want)
	}
	rest, ok := strings.CutPrefix(lines[epochs+3], "summary: ")
	if !ok {
		t.Fatalf("last line %q, want the summary", lines[epochs+3])
	}
	kv := map[string]string{}
	for _, f := range strings.Fields(rest) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("summary field %q is not KEY=VALUE", f)
		}
		kv[k] = v
	}
	for _, k := range []string{"ranks", "batch", "steps", "warmup", "step_ms", "compute_ms", "wait_ms", "bytes_per_step", "accuracy", "loss", "overlap", "bucket_mb", "compress"} {
		if _, ok := kv[k]; !ok {
			t.Errorf("summary %q lacks %s=", lines[epochs+3], k)
		}
	}
	if kv["ranks"] != fmt.Sprint(world) {
		t.Errorf("summary %q: want ranks=%d", lines[epochs+3], world)
	}
	return kv
}

// TestTrainTwoRanks trains a small model for two epochs on 20,000 training
// images with 2 goroutine ranks; it must reach 93% on the 10,000 test images.
func TestTrainTwoRanks(t *testing.T) {
	const world = 2
	train0, test0 := loadForTest(t)
	train0 = train0.Subset(20000)
	cfg := config{epochs: 2, batch: 64, hidden: []int{128}, lr: 2e-3, seed: 1}
	var out bytes.Buffer
	results := make([]result, world)
	runRanks(t, world, func(ctx context.Context, c *goccl.Comm) (err error) {
		w := io.Discard
		if c.Rank() == 0 {
			w = &out
		}
		results[c.Rank()], err = train(ctx, c, cfg, train0, test0, w)
		return err
	})
	t.Logf("\n%s", out.String())
	kv := checkOutput(t, out.String(), cfg.epochs, world)
	if want := fmt.Sprint(cfg.epochs * (20000 + 63) / 64); kv["steps"] != want {
		t.Errorf("summary: steps=%s, want %s", kv["steps"], want)
	}
	if results[1] != results[0] {
		t.Errorf("rank 1 ended with %+v, rank 0 with %+v", results[1], results[0])
	}
	if acc := results[0].testAccuracy; acc < 0.93 {
		t.Errorf("test accuracy %.4f, want >= 0.93", acc)
	}
}

// TestRunWorldSizeOne runs the command's entry point as `go run` would with no
// launcher environment: goccl.Init makes a world of size 1.
func TestRunWorldSizeOne(t *testing.T) {
	for _, k := range os.Environ() {
		if name, _, _ := strings.Cut(k, "="); strings.HasPrefix(name, "GOCCL_") {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rank, err := run(ctx, []string{"-epochs", "1", "-hidden", "16", "-batch", "256"}, &out)
	if err != nil {
		t.Fatalf("rank %d: %v", rank, err)
	}
	kv := checkOutput(t, out.String(), 1, 1)
	if kv["steps"] != "235" || kv["compress"] != "none" {
		t.Errorf("summary %v: want steps=235 compress=none", kv)
	}
	if _, err := parseFlags([]string{"-hidden", "64,x"}); err == nil {
		t.Error("-hidden 64,x accepted")
	}
	if _, err := parseFlags([]string{"-bucket-mb", "0"}); err == nil {
		t.Error("-bucket-mb 0 accepted")
	}
	if cfg, err := parseFlags([]string{"-overlap=false", "-bucket-mb", "2"}); err != nil || !cfg.tr.noOverlap || cfg.tr.bucketMB != 2 {
		t.Errorf("-overlap=false -bucket-mb 2: %+v, %v", cfg.tr, err)
	}
	for args, want := range map[string]overlapMode{"": overlapAB, "-overlap": overlapOn, "-overlap=ab": overlapAB, "-overlap=off": overlapOff, "-overlap=true": overlapOn} {
		if cfg, err := parseFlags(strings.Fields(args)); err != nil || cfg.overlap != want || cfg.tr.noOverlap != (want == overlapOff) {
			t.Errorf("%q: overlap %v (noOverlap %v), %v; want %v", args, cfg.overlap.String(), cfg.tr.noOverlap, err, want.String())
		}
	}
	for _, bad := range [][]string{{"-steps", "-1"}, {"-compress", "fp8"}, {"-overlap=maybe"}, {"-chunk-rows", "-2"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestStepsAndCompress: -steps stops after that many steps (the last epoch
// partial), and the summary reports the gradient bytes per step, halved by
// -compress fp16 and bf16.
func TestStepsAndCompress(t *testing.T) {
	const world = 2
	train0, test0 := loadForTest(t)
	train0, test0 = train0.Subset(1000), test0.Subset(500)
	for _, compress := range []string{"none", "fp16", "bf16"} {
		t.Run(compress, func(t *testing.T) {
			args := []string{"-steps", "20", "-batch", "64", "-hidden", "32", "-compress", compress}
			cfg, err := parseFlags(args)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			results := make([]result, world)
			runRanks(t, world, func(ctx context.Context, c *goccl.Comm) (err error) {
				w := io.Discard
				if c.Rank() == 0 {
					w = &out
				}
				results[c.Rank()], err = train(ctx, c, cfg, train0, test0, w)
				return err
			})
			// 1000 images in batches of 64: 16 steps per epoch, so 2 epochs.
			kv := checkOutput(t, out.String(), 2, world)
			elem := map[string]int{"none": 4, "fp16": 2, "bf16": 2}[compress]
			want := map[string]string{"steps": "20", "warmup": "10", "compress": compress,
				"bytes_per_step": fmt.Sprint(elem * results[0].numParams)}
			for k, v := range want {
				if kv[k] != v {
					t.Errorf("summary: %s=%s, want %s", k, kv[k], v)
				}
			}
			if results[0].steps != 20 || !results[0].identical {
				t.Errorf("result %+v", results[0])
			}
		})
	}
}

// TestEpochBars: on a terminal (GOCCL_PROGRESS unset: auto), rank 0 draws
// a bar per epoch over its steps, each drawn to its end and erased; the
// output lines are untouched.
func TestEpochBars(t *testing.T) {
	train0, test0 := loadForTest(t)
	train0, test0 = train0.Subset(1000), test0.Subset(500)
	pty := ptytest.Open(t)
	stderr := os.Stderr
	os.Stderr = pty.TTY
	defer func() { os.Stderr = stderr }()
	t.Setenv(gocclconfig.Progress.Name, "")
	t.Setenv(gocclconfig.ProgressFD.Name, "")
	cfg, err := parseFlags([]string{"-steps", "20", "-batch", "64", "-hidden", "16"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := train(context.Background(), nil, cfg, train0, test0, &out); err != nil {
		t.Fatal(err)
	}
	os.Stderr = stderr
	last, rest := ptytest.LastFrames(pty.Output())
	if rest != "" {
		t.Errorf("the terminal got more than bars: %q", rest)
	}
	// 1000 images in batches of 64: 16 steps, then the 4 left of -steps 20.
	for name, count := range map[string]string{"epoch 1/2": " 16/16 ", "epoch 2/2": " 4/4 "} {
		if !strings.Contains(last[name], count) {
			t.Errorf("last frame of %q: %q, want %q in it (bars %q)", name, last[name], count, last)
		}
	}
	if len(last) != 2 || strings.Contains(out.String(), "\x1b") {
		t.Errorf("bars %q; output %q", last, out.String())
	}
}

// TestTraceOverlapAgrees is issue 31's check of goccl doctor trace: on the
// GOCCL_TRACE_FILE traces of a 4-rank run, rank 0's overlap over the steps
// after the warm-up (doctor/trace, Options.Skip) is the comm_overlap_pct
// the example prints, within 1 percentage point, and its communication
// per step the comm_ms, within 2 %.
func TestTraceOverlapAgrees(t *testing.T) {
	const world = 4
	dir := t.TempDir()
	t.Setenv(gocclconfig.TraceFile.Name, filepath.Join(dir, "trace-%r.json"))
	train0, test0 := loadForTest(t)
	test0 = test0.Subset(500)
	cfg, err := parseFlags([]string{"-steps", "24", "-batch", "64"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	runRanks(t, world, func(ctx context.Context, c *goccl.Comm) (err error) {
		w := io.Discard
		if c.Rank() == 0 {
			w = &out
		}
		_, err = train(ctx, c, cfg, train0, test0, w)
		return err
	})
	kv := checkOutput(t, out.String(), 1, world)
	printed, err1 := strconv.ParseFloat(kv["comm_overlap_pct"], 64)
	commMS, err2 := strconv.ParseFloat(kv["comm_ms"], 64)
	warmup, err3 := strconv.Atoi(kv["warmup"])
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatalf("summary %v: %v", kv, err)
	}
	rks, err := tracedoc.ReadPaths([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	rep := tracedoc.Analyze(rks, tracedoc.Options{Skip: warmup})
	if len(rep.Ranks) != world {
		t.Fatalf("%d ranks in the traces, want %d", len(rep.Ranks), world)
	}
	s := rep.Ranks[0].Summary
	if s == nil || s.Steps != 24-warmup {
		t.Fatalf("rank 0's step summary %+v, want %d steps", s, 24-warmup)
	}
	t.Logf("printed: comm_ms=%.3f comm_overlap_pct=%.2f; doctor trace: %.3f ms, %.2f %%", commMS, printed, s.Comm/1e3, s.OverlapPct)
	if math.Abs(s.OverlapPct-printed) > 1 || math.Abs(s.Comm/1e3-commMS) > 0.02*commMS {
		t.Errorf("doctor trace: overlap %.2f %% of %.3f ms per step; the example printed %.2f %% of %.3f ms", s.OverlapPct, s.Comm/1e3, printed, commMS)
	}
}
