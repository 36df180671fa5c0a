// Command pipeline is a pipeline-parallelism lab: an MLP split into as many
// stages as there are ranks (one dense layer with ReLU per stage, and the
// linear output layer on the last) runs a batch split into m micro-batches
// under two schedules, GPipe (every forward pass, then every backward pass;
// Huang et al. 2019) and 1F1B (PipeDream-Flush: warm-up forwards, then one
// forward one backward, then cool-down backwards; Narayanan et al. 2019,
// 2021), with activations sent forward and gradients backward between
// neighbouring stages by goccl point-to-point operations (SendRecv).
//
//	go run ./cmd/goccl run -np 4 ./examples/pipeline
//	go run ./cmd/goccl run -np 4 ./examples/pipeline -compute=fixed -unit=5ms
//
// The data are synthetic: standard normal inputs with the labels of a fixed
// random linear teacher, drawn from generators with a fixed seed (-seed), so
// that every rank can make the same batch without data files.
//
// Rank 0 prints:
//   - whether the gradient of the pipelined model, accumulated over the
//     micro-batches, equals the gradient of the same model run on one process
//     on the whole batch (each rank computes that reference and compares its
//     stage's part; relative difference at most 1e-5), for both schedules and
//     every -m: "gradients equal single-rank: yes";
//   - the loss over a few SGD steps (-train, with 1F1B);
//   - a table with, per compute mode, schedule and m, the measured bubble
//     (a stage's wall time not spent in forward or backward passes, from a
//     barrier before the pass to a barrier after it, over the wall time;
//     mean and max over the stages, averaged over -steps passes) beside the
//     formula (p-1)/(m+p-1), the share of the wall time blocked in SendRecv
//     waiting for a neighbour's activation or gradient (mean over the stages;
//     the rest of the bubble is the wait at the barrier that ends the pass),
//     and each stage's largest number of micro-batches in flight (forwarded,
//     not yet backwarded: the activations it holds).
//
// -compute=gemm does the real matrix products (gonum's float32 BLAS);
// -compute=fixed models compute instead: a forward pass sleeps -unit and a
// backward pass 2*-unit, with no arithmetic, so the schedule alone decides
// the bubble, which processes sharing too few cores would otherwise distort;
// -compute=both (the default) prints both tables.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/examples/internal/exmain"
)

// config holds the command-line settings.
type config struct {
	computes []computeMode
	unit     time.Duration
	ms       []int // micro-batch counts of the table
	batch    int
	hidden   int
	classes  int
	steps    int // timed passes per table row
	train    int // SGD steps
	lr       float64
	seed     uint64
}

// maxTol is the largest relative difference between the pipelined and the
// single-process gradient accepted as equal.
const maxTol = 1e-5

// parseFlags parses the command line; the usage and flag errors go to out.
func parseFlags(args []string, out io.Writer) (config, error) {
	var cfg config
	var compute, ms string
	fs := flag.NewFlagSet("pipeline", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&compute, "compute", "both", "what a pass does: gemm (real matrix products), fixed (sleep -unit per forward, 2*-unit per backward: a model of compute) or both")
	fs.DurationVar(&cfg.unit, "unit", 2*time.Millisecond, "-compute=fixed: duration of a forward pass (a backward pass takes twice as long)")
	fs.StringVar(&ms, "m", "4,8,16", "comma-separated micro-batch counts of the table (each must divide -batch)")
	fs.IntVar(&cfg.batch, "batch", 256, "batch size (rows), split into m micro-batches")
	fs.IntVar(&cfg.hidden, "hidden", 256, "width of the inputs and of every hidden layer")
	fs.IntVar(&cfg.classes, "classes", 10, "number of classes of the synthetic task (at most 256)")
	fs.IntVar(&cfg.steps, "steps", 5, "timed passes per table row (after one untimed)")
	fs.IntVar(&cfg.train, "train", 5, "SGD steps (1F1B, largest m) before the table")
	fs.Float64Var(&cfg.lr, "lr", 0.05, "SGD learning rate")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the initialisation and of the synthetic data")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch compute {
	case "gemm":
		cfg.computes = []computeMode{computeGemm}
	case "fixed":
		cfg.computes = []computeMode{computeFixed}
	case "both":
		cfg.computes = []computeMode{computeGemm, computeFixed}
	default:
		return cfg, fmt.Errorf("-compute: %q is not gemm, fixed or both", compute)
	}
	switch {
	case cfg.batch < 1:
		return cfg, errors.New("-batch must be >= 1")
	case cfg.hidden < 1:
		return cfg, errors.New("-hidden must be >= 1")
	case cfg.classes < 2 || cfg.classes > 256:
		return cfg, errors.New("-classes must be in [2, 256]")
	case cfg.steps < 1:
		return cfg, errors.New("-steps must be >= 1")
	case cfg.train < 0:
		return cfg, errors.New("-train must be >= 0")
	case !(cfg.lr > 0):
		return cfg, errors.New("-lr must be > 0")
	case cfg.unit <= 0:
		return cfg, errors.New("-unit must be > 0")
	}
	for _, f := range strings.Split(ms, ",") {
		m, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || m < 1 {
			return cfg, fmt.Errorf("-m: %q is not a positive micro-batch count", f)
		}
		if cfg.batch%m != 0 {
			return cfg, fmt.Errorf("-m: %d micro-batches do not split -batch %d evenly", m, cfg.batch)
		}
		cfg.ms = append(cfg.ms, m)
	}
	return cfg, nil
}

// relDiff is ||a-b|| / ||b||.
func relDiff(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// checkGradients runs a pipelined pass for each schedule and micro-batch
// count and returns the largest relative difference, over those passes and
// all the stages, between the pipelined gradient and the single-process one.
func checkGradients(ctx context.Context, c *goccl.Comm, st *stage, cfg config, sizes []int) (float64, error) {
	x, y := syntheticBatch(cfg.seed, 0, cfg.batch, cfg.hidden, cfg.classes)
	ref, _ := reference(sizes, c.Size(), cfg.seed, x, y)
	worst := []float64{0}
	for _, sch := range []Schedule{GPipe, OneFOneB} {
		for _, m := range cfg.ms {
			pc := pipeConfig{sch: sch, m: m, compute: computeGemm, hidden: cfg.hidden}
			if _, err := pipelinePass(ctx, c, st, pc, cfg.batch, x, y); err != nil {
				return 0, err
			}
			worst[0] = max(worst[0], relDiff(st.grad, ref[c.Rank()]))
		}
	}
	if err := goccl.AllReduce(ctx, c, worst, worst, 1, goccl.Max); err != nil {
		return 0, fmt.Errorf("gradient check: AllReduce(Max): %w", err)
	}
	return worst[0], nil
}

// row is one line of the table, the same on every rank.
type row struct {
	compute    computeMode
	sch        Schedule
	m          int
	meanBubble float64
	maxBubble  float64
	blocked    float64 // mean over stages of the share of the wall time in SendRecv
	formula    float64
	inFlight   []int // per stage
}

// measure runs one untimed and cfg.steps timed passes and gathers every
// stage's bubble and in-flight maximum.
func measure(ctx context.Context, c *goccl.Comm, st *stage, cfg config, pc pipeConfig, x []float32, y []uint8) (row, error) {
	p := c.Size()
	r := row{compute: pc.compute, sch: pc.sch, m: pc.m, formula: bubbleFormula(p, pc.m)}
	const k = 3 // bubble, blocked share, in flight
	mine := make([]float64, k)
	for i := range cfg.steps + 1 {
		ps, err := pipelinePass(ctx, c, st, pc, cfg.batch, x, y)
		if err != nil {
			return r, err
		}
		if i > 0 {
			mine[0] += ps.bubble() / float64(cfg.steps)
			mine[1] += ps.blocked.Seconds() / ps.wall.Seconds() / float64(cfg.steps)
		}
		mine[2] = float64(ps.maxInFlight)
	}
	all := make([]float64, k*p)
	if err := goccl.AllGather(ctx, c, mine, all, k); err != nil {
		return r, fmt.Errorf("%v m=%d: AllGather of the stages' bubbles: %w", pc.sch, pc.m, err)
	}
	for s := range p {
		b := all[k*s]
		r.meanBubble += b / float64(p)
		r.maxBubble = max(r.maxBubble, b)
		r.blocked += all[k*s+1] / float64(p)
		r.inFlight = append(r.inFlight, int(all[k*s+2]))
	}
	return r, nil
}

func printTable(out io.Writer, rows []row, p int, cfg config) {
	fmt.Fprintf(out, "%-7s %-8s %4s %14s %13s %9s %9s  %s\n", "compute", "schedule", "m", "bubble (mean)", "bubble (max)", "formula", "SendRecv", "max in-flight micro-batches per stage")
	for _, r := range rows {
		fl := make([]string, len(r.inFlight))
		for i, v := range r.inFlight {
			fl[i] = strconv.Itoa(v)
		}
		fmt.Fprintf(out, "%-7v %-8v %4d %14.3f %13.3f %9.3f %9.3f  %s\n", r.compute, r.sch, r.m, r.meanBubble, r.maxBubble, r.formula, r.blocked, strings.Join(fl, " "))
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) (rank int, err error) {
	rank = -1 // not known before Init
	cfg, err := parseFlags(args, os.Stderr)
	if err != nil {
		return rank, err
	}
	return exmain.WithComm(ctx, stdout, func(c *goccl.Comm, out io.Writer) error {
		return lab(ctx, c, cfg, out)
	})
}

// lab is the whole example on one rank; only out (io.Discard but on rank 0)
// sees output.
func lab(ctx context.Context, c *goccl.Comm, cfg config, out io.Writer) error {
	p, s := c.Size(), c.Rank()
	sizes := modelSizes(p, cfg.hidden, cfg.classes)
	lo, hi := stageLayers(p, s)
	st := newStage(sizes, lo, hi, cfg.seed)
	fmt.Fprintf(out, "MLP %v (%d parameters) in %d stages over %d ranks; batch %d, micro-batches %v\n",
		sizes, numParams(sizes), p, p, cfg.batch, cfg.ms)
	if p == 1 {
		fmt.Fprintln(out, "one rank: a one-stage pipeline, no communication and no bubble (run with -np 4 for 4 stages)")
	}

	worst, err := checkGradients(ctx, c, st, cfg, sizes)
	if err != nil {
		return err
	}
	equal := worst <= maxTol
	yesNo := map[bool]string{true: "yes", false: "no"}
	fmt.Fprintf(out, "gradient check (GPipe and 1F1B, m = %v): max relative difference %.2g against one process on the whole batch\n", cfg.ms, worst)
	fmt.Fprintf(out, "gradients equal single-rank: %s\n", yesNo[equal])
	if !equal {
		return fmt.Errorf("pipelined gradient differs from the single-process one: relative difference %.3g > %g", worst, maxTol)
	}

	mTrain := cfg.ms[len(cfg.ms)-1]
	for step := 1; step <= cfg.train; step++ {
		x, y := syntheticBatch(cfg.seed, uint64(step), cfg.batch, cfg.hidden, cfg.classes)
		ps, err := pipelinePass(ctx, c, st, pipeConfig{sch: OneFOneB, m: mTrain, compute: computeGemm, hidden: cfg.hidden}, cfg.batch, x, y)
		if err != nil {
			return fmt.Errorf("train step %d: %w", step, err)
		}
		st.sgd(float32(cfg.lr))
		loss := []float64{ps.lossSum} // non-zero on the last stage only
		if err := goccl.AllReduce(ctx, c, loss, loss, 1, goccl.Sum); err != nil {
			return fmt.Errorf("train step %d: loss AllReduce: %w", step, err)
		}
		fmt.Fprintf(out, "train step %d (1F1B, m=%d, SGD lr %g): loss %.4f\n", step, mTrain, cfg.lr, loss[0]/float64(cfg.batch))
	}

	x, y := syntheticBatch(cfg.seed, 0, cfg.batch, cfg.hidden, cfg.classes)
	var rows []row
	for _, cm := range cfg.computes {
		for _, m := range cfg.ms {
			for _, sch := range []Schedule{GPipe, OneFOneB} {
				r, err := measure(ctx, c, st, cfg, pipeConfig{sch: sch, m: m, compute: cm, unit: cfg.unit, hidden: cfg.hidden}, x, y)
				if err != nil {
					return err
				}
				rows = append(rows, r)
			}
		}
	}
	fmt.Fprintf(out, "bubble: share of a stage's wall time (barrier to barrier) not in forward/backward passes, mean of %d passes; p = %d; formula (p-1)/(m+p-1);\n", cfg.steps, p)
	fmt.Fprintf(out, "SendRecv: share of the wall time blocked in SendRecv (mean over stages; the rest of the bubble is the wait at the closing barrier); fixed: forward %v, backward %v\n", cfg.unit, 2*cfg.unit)
	printTable(out, rows, p, cfg)
	return nil
}

func main() { exmain.Main("pipeline", run) }
