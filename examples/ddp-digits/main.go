// Command ddp-digits trains a small MLP on the UCI handwritten digits data set
// with synchronous data-parallel SGD over goccl: every rank holds a replica of
// the model, takes its shard of each global batch, and one AllReduce per step
// combines the gradients.
//
//	go run ./cmd/goccl run -np 4 ./examples/ddp-digits
//	go run ./examples/ddp-digits          # world size 1
//
// Rank 0 prints one line per epoch, the final test accuracy, and whether the
// parameters ended up bit-identical on all ranks (checked with collectives).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/goccl/goccl/examples/internal/digits"
	"io"
	"math/rand/v2"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/examples/internal/exmain"
	"github.com/goccl/goccl/internal/progress"
)

// config holds the command-line settings.
type config struct {
	epochs   int
	batch    int // global batch size, split over the ranks
	hidden   int
	lr       float64
	momentum float64
	seed     uint64
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("ddp-digits", flag.ContinueOnError)
	fs.IntVar(&cfg.epochs, "epochs", 30, "training epochs")
	fs.IntVar(&cfg.batch, "batch", 64, "global batch size (split over the ranks; need not divide evenly)")
	fs.IntVar(&cfg.hidden, "hidden", 128, "hidden layer width")
	fs.Float64Var(&cfg.lr, "lr", 0.05, "SGD learning rate")
	fs.Float64Var(&cfg.momentum, "momentum", 0.9, "SGD momentum")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the train/test split, the initialisation and the shuffling")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case cfg.epochs < 1:
		return cfg, fmt.Errorf("-epochs must be >= 1")
	case cfg.batch < 1:
		return cfg, fmt.Errorf("-batch must be >= 1")
	case cfg.hidden < 1:
		return cfg, fmt.Errorf("-hidden must be >= 1")
	case !(cfg.lr > 0):
		return cfg, fmt.Errorf("-lr must be > 0")
	case !(cfg.momentum >= 0 && cfg.momentum < 1):
		return cfg, fmt.Errorf("-momentum must be in [0,1)")
	}
	return cfg, nil
}

// result is what a training run ends with (the same on every rank).
type result struct {
	lastLoss      float64
	testAccuracy  float64
	identical     bool
	worldSize     int
	trainSamples  int
	testSamples   int
	stepsPerEpoch int
}

// train runs the whole job on one rank (c == nil: a single process without
// collectives). Only the writer out sees output; pass io.Discard on ranks
// other than 0.
func train(ctx context.Context, c *goccl.Comm, cfg config, trainSet, testSet *digits.Dataset, out io.Writer) (result, error) {
	t, err := newTrainer(ctx, c, cfg.hidden, cfg.seed, float32(cfg.lr), float32(cfg.momentum))
	if err != nil {
		return result{}, err
	}
	n := trainSet.Len()
	res := result{worldSize: t.size, trainSamples: n, testSamples: testSet.Len(), stepsPerEpoch: (n + cfg.batch - 1) / cfg.batch}
	x := make([]float32, cfg.batch*digits.Features)
	y := make([]int, cfg.batch)
	// The epoch's steps on rank 0's terminal, erased if an error ends the run.
	var bar *progress.Bar
	defer func() { bar.Abort() }()
	for epoch := 1; epoch <= cfg.epochs; epoch++ {
		// Every rank draws the same permutation: same seed, same epoch.
		perm := rand.New(rand.NewPCG(cfg.seed, uint64(epoch))).Perm(n)
		var lossSum float64
		bar = exmain.EpochBar(t.rank, epoch, cfg.epochs, res.stepsPerEpoch)
		for start := 0; start < n; start += cfg.batch {
			idx := perm[start:min(start+cfg.batch, n)]
			bx, by := x[:len(idx)*digits.Features], y[:len(idx)]
			for k, i := range idx {
				copy(bx[k*digits.Features:], trainSet.Row(i))
				by[k] = trainSet.Y[i]
			}
			l, err := t.Step(ctx, bx, by)
			if err != nil {
				return res, fmt.Errorf("epoch %d: %w", epoch, err)
			}
			lossSum += l
			bar.Increment()
		}
		bar.Done()
		acc, err := t.Evaluate(ctx, testSet)
		if err != nil {
			return res, fmt.Errorf("epoch %d: %w", epoch, err)
		}
		res.lastLoss, res.testAccuracy = lossSum/float64(n), acc
		fmt.Fprintf(out, "epoch %d loss %.4f test-accuracy %.4f\n", epoch, res.lastLoss, acc)
	}
	if res.identical, err = t.ParamsIdentical(ctx); err != nil {
		return res, err
	}
	yesNo := map[bool]string{true: "yes", false: "no"}
	fmt.Fprintf(out, "final test accuracy: %.4f\n", res.testAccuracy)
	fmt.Fprintf(out, "parameters identical on all %d ranks: %s\n", t.size, yesNo[res.identical])
	return res, nil
}

func run(ctx context.Context, args []string, stdout io.Writer) (rank int, err error) {
	rank = -1 // not known before Init
	cfg, err := parseFlags(args)
	if err != nil {
		return rank, err
	}
	all, err := digits.Load()
	if err != nil {
		return rank, err
	}
	trainSet, testSet := digits.SplitTrainTest(all, cfg.seed)
	return exmain.WithComm(ctx, stdout, func(c *goccl.Comm, out io.Writer) error {
		res, err := train(ctx, c, cfg, trainSet, testSet, out)
		if err == nil && !res.identical {
			err = errors.New("the ranks' parameters diverged")
		}
		return err
	})
}

func main() { exmain.Main("ddp-digits", run) }
