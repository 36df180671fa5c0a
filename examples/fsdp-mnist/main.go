// Command fsdp-mnist trains examples/ddp-mnist's MLP (784-1024-256-10,
// 1,068,810 float32 parameters, the same initialisation) on MNIST with
// sharded data parallelism, package fsdp: each layer (its weights and bias,
// one flat vector) is a unit, cut in one shard per rank. -stage 1 shards
// Adam's state (ZeRO-1: gradients all-reduced, each rank updates its shard,
// the shards all-gathered), 2 the gradients as well (reduce-scattered), 3
// the parameters too (FSDP: each layer all-gathered before its forward and
// its backward, the next one prefetched). -replicate R makes it HSDP:
// shard over groups of P/R ranks, replicate over R of them (a 2-D mesh,
// "replicate" x "shard").
//
//	go run ./cmd/goccl run -np 4 ./examples/fsdp-mnist
//	go run ./cmd/goccl run -np 4 ./examples/fsdp-mnist -stage 1
//	go run ./cmd/goccl run -np 4 ./examples/fsdp-mnist -replicate 2
//
// Rank 0 prints per epoch the mean loss, the test accuracy, the step time
// and the share of it during which the step was blocked on a collective
// (fsdp.Stats.Exposed: waiting for a gradient reduction or a parameter
// AllGather, slower ranks included), then the bytes this rank holds
// (fsdp.Memory: parameters, gradients, optimizer state, gather buffers,
// against the unsharded sum), `final test accuracy: A` and a line for
// scripts:
//
//	summary: ranks=4 stage=3 replicate=1 batch=128 steps=1407 warmup=10 step_ms=24.114 compute_ms=14.095 wait_ms=10.019 bytes_per_step=11765856 accuracy=0.9822 loss=0.0289 memory_bytes=17136688 unsharded_bytes=17100960
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/examples/internal/exmain"
	"github.com/goccl/goccl/examples/internal/mnist"
	"github.com/goccl/goccl/examples/internal/nn"
	"github.com/goccl/goccl/fsdp"
)

type config struct {
	sizes                []int // input, hidden..., classes
	epochs, steps, batch int
	stage, replicate     int
	lr                   float64
	seed                 uint64
}

func parseFlags(args []string) (config, error) {
	var cfg config
	var hidden string
	fs := flag.NewFlagSet("fsdp-mnist", flag.ContinueOnError)
	fs.StringVar(&hidden, "hidden", "1024,256", "comma-separated hidden layer widths (one unit per layer)")
	fs.IntVar(&cfg.epochs, "epochs", 3, "training epochs")
	fs.IntVar(&cfg.steps, "steps", 0, "stop after this many steps in total (0: -epochs full epochs)")
	fs.IntVar(&cfg.batch, "batch", 128, "global batch size (split over the ranks)")
	fs.IntVar(&cfg.stage, "stage", 3, "ZeRO stage: 1 (optimizer state sharded), 2 (+ gradients), 3 (+ parameters: FSDP)")
	fs.IntVar(&cfg.replicate, "replicate", 1, "HSDP: replicate over this many groups, shard inside each (stage 2 or 3; must divide the world size)")
	fs.Float64Var(&cfg.lr, "lr", 1e-3, "Adam learning rate at the start (cosine decay towards 0)")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the initialisation and the shuffling")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.sizes = []int{mnist.Features}
	for _, f := range strings.Split(hidden, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || w < 1 {
			return cfg, fmt.Errorf("-hidden: %q is not a positive width", f)
		}
		cfg.sizes = append(cfg.sizes, w)
	}
	cfg.sizes = append(cfg.sizes, mnist.Classes)
	switch {
	case fs.NArg() > 0:
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	case cfg.epochs < 1 || cfg.steps < 0 || cfg.batch < 1:
		return cfg, fmt.Errorf("-epochs and -batch must be >= 1, -steps >= 0")
	case cfg.stage < 1 || cfg.stage > 3:
		return cfg, fmt.Errorf("-stage %d: want 1, 2 or 3", cfg.stage)
	case cfg.replicate < 1 || (cfg.replicate > 1 && cfg.stage == 1):
		return cfg, fmt.Errorf("-replicate %d: want >= 1, and > 1 only with -stage 2 or 3", cfg.replicate)
	case !(cfg.lr > 0):
		return cfg, fmt.Errorf("-lr must be > 0")
	}
	return cfg, nil
}

// initUnits is examples/ddp-mnist's initialisation, one unit per layer
// (W, Out x In row-major, then b): He-normal weights in front of each ReLU,
// Glorot-normal in the last layer, zero biases, from one PCG generator.
func initUnits(sizes []int, seed uint64) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 0x3157))
	var units [][]float32
	for l := 1; l < len(sizes); l++ {
		in, out := sizes[l-1], sizes[l]
		u := make([]float32, out*in+out)
		sd := math.Sqrt(2 / float64(in))
		if l == len(sizes)-1 {
			sd = math.Sqrt(2 / float64(in+out))
		}
		for i := range u[:out*in] {
			u[i] = float32(rng.NormFloat64() * sd)
		}
		units = append(units, u)
	}
	return units
}

// split cuts layer l's unit (or its gradient) into its W and b.
func (t *trainer) split(u []float32, l int) (w, b []float32) {
	n := t.sizes[l] * t.sizes[l+1]
	return u[:n], u[n:]
}

// trainer is one rank's sharded job.
type trainer struct {
	c, shard, repl *goccl.Comm // the world; fsdp's shard and replicate groups (repl nil without HSDP)
	mesh           *goccl.Mesh
	sizes          []int
	f              *fsdp.FSDP
	opt            *fsdp.Adam
	acts, deltas   [][]float32 // per layer: its input (acts[0] is the batch) and its output's gradient
}

func newTrainer(ctx context.Context, c *goccl.Comm, cfg config) (*trainer, error) {
	t := &trainer{c: c, shard: c, sizes: cfg.sizes, opt: fsdp.NewAdam(cfg.lr)}
	o := fsdp.Options{Stage: fsdp.Stage(cfg.stage)}
	if cfg.replicate > 1 {
		if c.Size()%cfg.replicate != 0 {
			return nil, fmt.Errorf("-replicate %d does not divide %d ranks", cfg.replicate, c.Size())
		}
		m, err := goccl.NewMesh(ctx, c, []int{cfg.replicate, c.Size() / cfg.replicate}, []string{"replicate", "shard"})
		if err != nil {
			return nil, err
		}
		t.mesh, t.shard, t.repl = m, m.Comm("shard"), m.Comm("replicate")
		o.Replicate = t.repl
	}
	f, err := fsdp.New(ctx, t.shard, initUnits(cfg.sizes, cfg.seed), t.opt, o)
	if err != nil {
		t.close()
		return nil, err
	}
	t.f = f
	t.acts, t.deltas = make([][]float32, len(cfg.sizes)), make([][]float32, len(cfg.sizes))
	return t, nil
}

func (t *trainer) close() error {
	if t.mesh != nil {
		return t.mesh.Close()
	}
	return nil
}

// step trains on this rank's n samples x with labels, of a global batch
// of batch samples, and returns the summed loss.
func (t *trainer) step(ctx context.Context, x []float32, labels []uint8, batch int) (float64, error) {
	n, L := len(labels), len(t.sizes)-1
	t.acts[0] = x
	for l := range L {
		p, err := t.f.Forward(ctx, l)
		if err != nil {
			return 0, err
		}
		w, b := t.split(p, l)
		t.acts[l+1] = nn.Grow(t.acts[l+1], n*t.sizes[l+1])
		nn.Linear(t.acts[l], n, w, b, t.acts[l+1])
		if l < L-1 {
			nn.ReLU(t.acts[l+1])
		}
	}
	// fsdp averages over the ranks: scale this rank's summed loss by
	// P/batch so that the average is the gradient of the batch's mean
	// loss, however the batch splits (P: the data-parallel ranks, shard
	// and replicate groups together).
	loss, _ := nn.SoftmaxCrossEntropy(t.acts[L], t.sizes[L], labels, float32(t.c.Size())/float32(batch))
	t.deltas[L] = t.acts[L]
	for l := L - 1; l >= 0; l-- {
		p, g, err := t.f.Backward(ctx, l)
		if err != nil {
			return 0, err
		}
		w, _ := t.split(p, l)
		dw, db := t.split(g, l)
		var dx []float32
		if l > 0 {
			t.deltas[l] = nn.Grow(t.deltas[l], n*t.sizes[l])
			dx = t.deltas[l]
		}
		nn.LinearBackward(t.acts[l], n, w, t.deltas[l+1], dw, db, dx)
		if l > 0 {
			nn.ReLUBackward(t.acts[l], dx)
		}
		if err := t.f.ReduceGrad(ctx, l); err != nil {
			return 0, err
		}
	}
	return loss, t.f.Step(ctx)
}

// evaluate gathers the whole parameters (a collective) and scores the
// ranks' shards of d (mnist.Accuracy).
func (t *trainer) evaluate(ctx context.Context, d *mnist.Dataset) (float64, error) {
	L := len(t.sizes) - 1
	params := make([][]float32, L)
	for l := range L {
		params[l] = make([]float32, t.f.Len(l))
		if err := t.f.Params(ctx, l, params[l]); err != nil {
			return 0, err
		}
	}
	acts := make([][]float32, L+1)
	return mnist.Accuracy(ctx, t.c, d, func(x []float32, n int) ([]float32, error) {
		acts[0] = x
		for l := range L {
			w, b := t.split(params[l], l)
			acts[l+1] = nn.Grow(acts[l+1], n*t.sizes[l+1])
			nn.Linear(acts[l], n, w, b, acts[l+1])
			if l < L-1 {
				nn.ReLU(acts[l+1])
			}
		}
		return acts[L], nil
	})
}

// result is what a run ends with, the same on every rank.
type result struct {
	accuracy, loss float64
	steps          int
	stepMS, waitMS float64 // after the warm-up, per step
	memory         fsdp.Memory
}

func train(ctx context.Context, c *goccl.Comm, cfg config, trainSet, testSet *mnist.Dataset, out io.Writer) (res result, err error) {
	t, err := newTrainer(ctx, c, cfg)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := t.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	n := trainSet.Len()
	perEpoch, total, epochs, warmup := exmain.Schedule(n, cfg.batch, cfg.epochs, cfg.steps)
	params := 0
	for l := range t.f.Units() {
		params += t.f.Len(l)
	}
	fmt.Fprintf(out, "MLP %v: %d parameters in %d units; ZeRO-%d over %d ranks (shard groups of %d, %d replicas), global batch %d\n",
		cfg.sizes, params, t.f.Units(), cfg.stage, c.Size(), t.shard.Size(), cfg.replicate, cfg.batch)
	per := cfg.batch/c.Size() + 1
	x := make([]float32, per*mnist.Features)
	labels := make([]uint8, 0, per)
	var timed, waited time.Duration
	var bytesPerStep int64
	step := 0
	for epoch := 1; epoch <= epochs; epoch++ {
		perm := rand.New(rand.NewPCG(cfg.seed, uint64(epoch))).Perm(n)
		loss := []float64{0, 0}
		var eStep, eWait time.Duration
		eSteps := 0
		bar := exmain.EpochBar(c.Rank(), epoch, epochs, min(perEpoch, total-step))
		for s := 0; s < n && step < total; s += cfg.batch {
			idx := perm[s:min(s+cfg.batch, n)]
			xs, ys := trainSet.Shard(idx, c.Size(), c.Rank(), x, labels)
			t.opt.LR = exmain.CosineLR(cfg.lr, step, total)
			step++
			t.f.ResetStats()
			t0 := time.Now()
			l, err := t.step(ctx, xs, ys, len(idx))
			if err != nil {
				bar.Abort()
				return res, fmt.Errorf("epoch %d step %d: %w", epoch, step, err)
			}
			dt, st := time.Since(t0), t.f.Stats()
			loss[0] += l
			loss[1] += float64(len(ys))
			eStep, eWait, eSteps = eStep+dt, eWait+st.Exposed, eSteps+1
			if step > warmup {
				timed, waited, bytesPerStep = timed+dt, waited+st.Exposed, st.Bytes
			}
			bar.Increment()
		}
		bar.Done()
		if err := goccl.AllReduce(ctx, c, loss, loss, 2, goccl.Sum); err != nil {
			return res, fmt.Errorf("epoch %d: loss allreduce: %w", epoch, err)
		}
		acc, err := t.evaluate(ctx, testSet)
		if err != nil {
			return res, fmt.Errorf("epoch %d: %w", epoch, err)
		}
		res.accuracy, res.loss = acc, loss[0]/loss[1]
		fmt.Fprintf(out, "epoch %d loss %.4f test-accuracy %.4f step %.1f ms communication exposed %.1f%% of step\n",
			epoch, res.loss, acc, eStep.Seconds()*1e3/float64(max(eSteps, 1)), 100*eWait.Seconds()/max(eStep.Seconds(), 1e-9))
	}
	res.steps, res.memory = step, t.f.Memory()
	timedSteps := float64(max(step-warmup, 1))
	res.stepMS, res.waitMS = timed.Seconds()*1e3/timedSteps, waited.Seconds()*1e3/timedSteps
	// Unsharded, a rank would hold the parameters, their gradient and
	// Adam's two moments: 16 bytes per parameter.
	unsharded := 16 * int64(params)
	m := res.memory
	fmt.Fprintf(out, "memory per rank: %d bytes (parameters %d, gradients %d, optimizer state %d, gather buffers %d) = %.2f of unsharded %d\n",
		m.Total(), m.Params, m.Grads, m.OptState, m.Gather, float64(m.Total())/float64(unsharded), unsharded)
	fmt.Fprintf(out, "final test accuracy: %.4f\n", res.accuracy)
	fmt.Fprintf(out, "summary: ranks=%d stage=%d replicate=%d batch=%d steps=%d warmup=%d step_ms=%.3f compute_ms=%.3f wait_ms=%.3f bytes_per_step=%d accuracy=%.4f loss=%.4f memory_bytes=%d unsharded_bytes=%d\n",
		c.Size(), cfg.stage, cfg.replicate, cfg.batch, step, warmup, res.stepMS, res.stepMS-res.waitMS, res.waitMS, bytesPerStep, res.accuracy, res.loss, m.Total(), unsharded)
	return res, nil
}

func run(ctx context.Context, args []string, stdout io.Writer) (rank int, err error) {
	cfg, err := parseFlags(args)
	if err != nil {
		return -1, err
	}
	return exmain.WithMNIST(ctx, stdout, func(c *goccl.Comm, trainSet, testSet *mnist.Dataset, out io.Writer) error {
		_, err := train(ctx, c, cfg, trainSet, testSet, out)
		return err
	})
}

func main() { exmain.Main("fsdp-mnist", run) }
