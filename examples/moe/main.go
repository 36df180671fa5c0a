// Command moe trains a mixture-of-experts network on MNIST with expert
// parallelism over goccl: 784 -> hidden (ReLU) -> hidden + MoE(hidden) ->
// 10, the MoE block -experts FFNs (hidden -> -ffn, ReLU, -> hidden) of
// which a top -k gate picks k per image. The experts are sharded over the
// ranks (E/P each); the rest of the network is replicated and trained
// data-parallel. Each step every rank routes its shard of the global batch
// with package ep: the per-expert token counts are exchanged (AllToAll),
// the tokens dispatched to their experts' ranks and the outputs combined
// back (AllToAllSingle each), and the backward pass makes the same two
// exchanges in reverse; the replicated gradients are then summed with one
// AllReduce. A capacity factor caps the tokens a rank sends one expert
// (GShard); the choices over it are dropped (the token keeps its residual).
// A load-balancing loss (Switch Transformer) keeps the experts used.
//
//	go run ./cmd/goccl run -np 4 ./examples/moe
//	go run ./cmd/goccl run -np 4 ./examples/moe -experts 0   # the dense model
//	go run ./examples/moe                                     # world size 1
//
// Rank 0 prints per epoch the mean loss, the test accuracy, the step time
// and the time blocked in the token exchanges (all-to-all) and in the
// gradient AllReduce with their shares of the step, the load imbalance
// (the busiest expert's tokens over the mean, averaged over the steps) and
// the share of choices dropped, then `final test accuracy: A` and one line
// for scripts:
//
//	summary: ranks=4 experts=8 k=2 batch=128 steps=1407 warmup=10 step_ms=8.592 a2a_ms=3.034 a2a_share=0.353 allreduce_ms=1.326 allreduce_share=0.154 imbalance=1.241 dropped=0.0543 accuracy=0.9757 loss=0.0566
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/examples/internal/exmain"
	"github.com/goccl/goccl/examples/internal/mnist"
)

type config struct {
	epochs, steps, batch int
	s                    shape
	capFactor            float64
	aux                  float64
	lr                   float64
	seed                 uint64
}

func parseFlags(args []string) (config, error) {
	cfg := config{s: shape{in: mnist.Features, classes: mnist.Classes}}
	fs := flag.NewFlagSet("moe", flag.ContinueOnError)
	fs.IntVar(&cfg.epochs, "epochs", 3, "training epochs")
	fs.IntVar(&cfg.steps, "steps", 0, "stop after this many steps in total (0: -epochs full epochs)")
	fs.IntVar(&cfg.batch, "batch", 128, "global batch size (split over the ranks)")
	fs.IntVar(&cfg.s.hidden, "hidden", 128, "width of the hidden layer, the experts' input and output")
	fs.IntVar(&cfg.s.ffn, "ffn", 256, "hidden width inside each expert (and the dense FFN)")
	fs.IntVar(&cfg.s.experts, "experts", 8, "experts in all, a multiple of the world size (0: one dense FFN instead, replicated)")
	fs.IntVar(&cfg.s.k, "k", 2, "experts each image is routed to (top k of the gate)")
	fs.Float64Var(&cfg.capFactor, "capacity-factor", 1.25, "capacity per rank and expert: ceil(factor * tokens*k / experts); choices over it are dropped (0: no limit)")
	fs.Float64Var(&cfg.aux, "aux", 0.1, "weight of the load-balancing loss (Switch Transformer used 0.01 with 64+ experts; here 0.1 holds the busiest expert near 1.25x the mean, 0.01 let it reach 1.43x with 11% of choices dropped)")
	fs.Float64Var(&cfg.lr, "lr", 1e-3, "Adam learning rate at the start (cosine decay towards 0)")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the initialisation and the shuffling")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	switch {
	case fs.NArg() > 0:
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	case cfg.epochs < 1 || cfg.steps < 0 || cfg.batch < 1:
		return cfg, fmt.Errorf("-epochs and -batch must be >= 1, -steps >= 0")
	case cfg.s.hidden < 1 || cfg.s.ffn < 1 || cfg.s.experts < 0:
		return cfg, fmt.Errorf("-hidden and -ffn must be >= 1, -experts >= 0")
	case cfg.s.experts > 0 && (cfg.s.k < 1 || cfg.s.k > cfg.s.experts):
		return cfg, fmt.Errorf("-k %d: want 1 to -experts (%d)", cfg.s.k, cfg.s.experts)
	case cfg.capFactor < 0 || cfg.aux < 0 || !(cfg.lr > 0):
		return cfg, fmt.Errorf("-capacity-factor and -aux must be >= 0, -lr > 0")
	}
	if cfg.s.experts == 0 {
		cfg.s.k = 0
	}
	return cfg, nil
}

// result is what a run ends with, the same on every rank.
type result struct {
	accuracy, loss float64
	steps          int
	step, a2a, ar  float64 // ms per step after the warm-up
	imbalance      float64 // mean over the steps after the warm-up
	dropped        float64 // share of the choices dropped, over the run
}

func train(ctx context.Context, c *goccl.Comm, cfg config, trainSet, testSet *mnist.Dataset, out io.Writer) (result, error) {
	var res result
	m, err := newModel(c, cfg.s, cfg.seed, cfg.capFactor, float32(cfg.aux), cfg.lr)
	if err != nil {
		return res, err
	}
	n := trainSet.Len()
	perEpoch, total, epochs, warmup := exmain.Schedule(n, cfg.batch, cfg.epochs, cfg.steps)
	block := "dense FFN"
	if cfg.s.experts > 0 {
		block = fmt.Sprintf("%d experts (%d per rank), top %d, capacity factor %g", cfg.s.experts, m.local, cfg.s.k, cfg.capFactor)
	}
	fmt.Fprintf(out, "MoE MLP %d-%d-[%s, FFN %d]-%d: %d replicated parameters, %d per expert; %d ranks, global batch %d\n",
		cfg.s.in, cfg.s.hidden, block, cfg.s.ffn, cfg.s.classes, len(m.rep), cfg.s.ffnLen(), m.size, cfg.batch)
	x := make([]float32, (cfg.batch/m.size+1)*cfg.s.in)
	labels := make([]uint8, 0, cfg.batch/m.size+1)
	var timed, a2a, ar time.Duration
	var imbalance float64
	var dropped, choices int
	step := 0
	for epoch := 1; epoch <= epochs; epoch++ {
		perm := rand.New(rand.NewPCG(cfg.seed, uint64(epoch))).Perm(n)
		loss := []float64{0, 0}
		var eStep, eA2A, eAR time.Duration
		var eImb float64
		eSteps, eDropped, eChoices := 0, 0, 0
		bar := exmain.EpochBar(m.rank, epoch, epochs, min(perEpoch, total-step))
		for s := 0; s < n && step < total; s += cfg.batch {
			idx := perm[s:min(s+cfg.batch, n)]
			xs, ys := trainSet.Shard(idx, m.size, m.rank, x, labels)
			lr := exmain.CosineLR(cfg.lr, step, total)
			step++
			t0 := time.Now()
			l, _, err := m.gradient(ctx, xs, ys, len(idx))
			if err != nil {
				bar.Abort()
				return res, fmt.Errorf("epoch %d step %d: %w", epoch, step, err)
			}
			m.update(lr)
			dt := time.Since(t0)
			loss[0] += l
			loss[1] += float64(len(ys))
			eStep, eA2A, eAR, eSteps = eStep+dt, eA2A+m.st.a2a, eAR+m.st.allreduce, eSteps+1
			eDropped, eChoices = eDropped+m.st.dropped, eChoices+m.st.choices
			eImb += m.st.imbalance()
			if step > warmup {
				timed, a2a, ar = timed+dt, a2a+m.st.a2a, ar+m.st.allreduce
				imbalance += m.st.imbalance()
			}
			bar.Increment()
		}
		bar.Done()
		dropped, choices = dropped+eDropped, choices+eChoices
		if err := goccl.AllReduce(ctx, c, loss, loss, 2, goccl.Sum); err != nil {
			return res, fmt.Errorf("epoch %d: loss allreduce: %w", epoch, err)
		}
		acc, err := m.evaluate(ctx, testSet)
		if err != nil {
			return res, fmt.Errorf("epoch %d: %w", epoch, err)
		}
		res.accuracy, res.loss = acc, loss[0]/loss[1]
		ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(max(eSteps, 1)) }
		fmt.Fprintf(out, "epoch %d loss %.4f test-accuracy %.4f step %.2f ms all-to-all %.2f ms (%.1f%%) allreduce %.2f ms (%.1f%%) imbalance %.2f dropped %.2f%%\n",
			epoch, res.loss, acc, ms(eStep), ms(eA2A), pct(eA2A, eStep), ms(eAR), pct(eAR, eStep), eImb/float64(max(eSteps, 1)), 100*share(eDropped, eChoices))
	}
	timedSteps := float64(max(step-warmup, 1))
	res.steps = step
	res.step, res.a2a, res.ar = timed.Seconds()*1e3/timedSteps, a2a.Seconds()*1e3/timedSteps, ar.Seconds()*1e3/timedSteps
	res.imbalance, res.dropped = imbalance/timedSteps, share(dropped, choices)
	fmt.Fprintf(out, "final test accuracy: %.4f\n", res.accuracy)
	fmt.Fprintf(out, "summary: ranks=%d experts=%d k=%d batch=%d steps=%d warmup=%d step_ms=%.3f a2a_ms=%.3f a2a_share=%.3f allreduce_ms=%.3f allreduce_share=%.3f imbalance=%.3f dropped=%.4f accuracy=%.4f loss=%.4f\n",
		m.size, cfg.s.experts, cfg.s.k, cfg.batch, step, warmup, res.step, res.a2a, res.a2a/res.step, res.ar, res.ar/res.step, res.imbalance, res.dropped, res.accuracy, res.loss)
	return res, nil
}

func pct(part, whole time.Duration) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * part.Seconds() / whole.Seconds()
}

func share(part, whole int) float64 {
	if whole == 0 {
		return 0
	}
	return float64(part) / float64(whole)
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

func main() { exmain.Main("moe", run) }
