// Command torch-gloo is the Go rank of a job that mixes PyTorch and Go in
// one torch.distributed process group (package gloo): this program, rank 0,
// is the data service and keeper of the model; ranks 1.. run train.py, a
// PyTorch trainer. Every step, the Go rank sends each trainer its share of
// the batch (send/recv), the trainers average their gradients with
// all_reduce, in which the Go rank takes part with zeros to keep its own
// copy of the model up to date, and after training the Go rank evaluates
// that copy on the test set.
//
//	go run ./cmd/goccl run -n 1 ./examples/torch-gloo : -n 2 /usr/bin/python3 examples/torch-gloo/train.py
//
// The data set is the UCI digits (examples/internal/digits); the model a
// 64-hidden-10 MLP with ReLU, torch's nn.Sequential(nn.Linear(64, hidden),
// nn.ReLU(), nn.Linear(hidden, 10)), parameters laid out as torch's
// parameters_to_vector flattens them.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/examples/internal/digits"
	"github.com/goccl/goccl/gloo"
)

type config struct {
	epochs, batch, hidden int
	lr                    float64
	seed                  uint64
	timeout               time.Duration
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("torch-gloo", flag.ContinueOnError)
	fs.IntVar(&c.epochs, "epochs", 20, "training epochs")
	fs.IntVar(&c.batch, "batch", 32, "samples per trainer per step")
	fs.IntVar(&c.hidden, "hidden", 32, "hidden layer width")
	fs.Float64Var(&c.lr, "lr", 0.2, "SGD learning rate")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the split, the initialisation and the shuffling")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "bound on the whole job")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.epochs < 1 || c.batch < 1 || c.hidden < 1 || !(c.lr > 0) || c.timeout <= 0 {
		return c, fmt.Errorf("-epochs, -batch, -hidden, -lr and -timeout must be positive")
	}
	return c, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "torch-gloo:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "torch-gloo:", err)
		os.Exit(1)
	}
}

// mlp holds the parameters in parameters_to_vector's order: W1 (hidden×64,
// row-major as nn.Linear's weight), b1, W2 (10×hidden), b2.
type mlp struct {
	hidden         int
	p              []float32
	w1, b1, w2, b2 []float32
}

func newMLP(hidden int, seed uint64) *mlp {
	n1, n2 := hidden*digits.Features, digits.Classes*hidden
	m := &mlp{hidden: hidden, p: make([]float32, n1+hidden+n2+digits.Classes)}
	m.w1, m.b1 = m.p[:n1], m.p[n1:n1+hidden]
	m.w2, m.b2 = m.p[n1+hidden:n1+hidden+n2], m.p[n1+hidden+n2:]
	// nn.Linear's default: uniform in ±1/sqrt(fan_in).
	r := rand.New(rand.NewPCG(seed, 0x70c4))
	fill := func(s []float32, fanIn int) {
		b := 1 / math.Sqrt(float64(fanIn))
		for i := range s {
			s[i] = float32((2*r.Float64() - 1) * b)
		}
	}
	fill(m.w1, digits.Features)
	fill(m.b1, digits.Features)
	fill(m.w2, hidden)
	fill(m.b2, hidden)
	return m
}

// predict returns the class with the largest logit for one sample.
func (m *mlp) predict(x []float32, h []float32) int {
	for j := 0; j < m.hidden; j++ {
		s := m.b1[j]
		for i, v := range x {
			s += m.w1[j*digits.Features+i] * v
		}
		h[j] = max(s, 0)
	}
	best, bestV := 0, float32(math.Inf(-1))
	for c := 0; c < digits.Classes; c++ {
		s := m.b2[c]
		for j, v := range h {
			s += m.w2[c*m.hidden+j] * v
		}
		if s > bestV {
			best, bestV = c, s
		}
	}
	return best
}

func (m *mlp) accuracy(d *digits.Dataset) float64 {
	h := make([]float32, m.hidden)
	correct := 0
	for i := 0; i < d.Len(); i++ {
		if m.predict(d.Row(i), h) == d.Y[i] {
			correct++
		}
	}
	return float64(correct) / float64(d.Len())
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	g, err := gloo.JoinEnv(ctx)
	if err != nil {
		return err
	}
	defer g.Close()
	if g.Rank() != 0 {
		return fmt.Errorf("this Go program must be rank 0 (the data service); it is rank %d", g.Rank())
	}
	trainers := g.Size() - 1
	if trainers < 1 {
		return fmt.Errorf("world size %d: start at least one train.py rank beside this one", g.Size())
	}
	all, err := digits.Load()
	if err != nil {
		return err
	}
	train, test := digits.SplitTrainTest(all, cfg.seed)
	steps := train.Len() / (cfg.batch * trainers)
	if steps < 1 {
		return fmt.Errorf("%d training samples make no step of %d trainers × %d", train.Len(), trainers, cfg.batch)
	}
	fmt.Fprintf(out, "Go data service: %d PyTorch trainers, %d training samples, %d steps of %d × %d per epoch\n",
		trainers, train.Len(), steps, trainers, cfg.batch)

	settings := []float64{float64(cfg.epochs), float64(steps), float64(cfg.batch), float64(cfg.hidden), cfg.lr}
	if err := gloo.Broadcast(ctx, g, settings, 0); err != nil {
		return err
	}
	m := newMLP(cfg.hidden, cfg.seed)
	if err := gloo.Broadcast(ctx, g, m.p, 0); err != nil {
		return err
	}
	x := make([]float32, cfg.batch*digits.Features)
	y := make([]int64, cfg.batch)
	grad := make([]float32, len(m.p))
	lr := float32(cfg.lr)
	start := time.Now()
	var commTime time.Duration
	for epoch := 1; epoch <= cfg.epochs; epoch++ {
		perm := rand.New(rand.NewPCG(cfg.seed, uint64(epoch))).Perm(train.Len())
		for s := 0; s < steps; s++ {
			t0 := time.Now()
			for t := 1; t <= trainers; t++ {
				idx := perm[((s*trainers)+t-1)*cfg.batch:][:cfg.batch]
				for k, i := range idx {
					copy(x[k*digits.Features:], train.Row(i))
					y[k] = int64(train.Y[i])
				}
				if err := gloo.Send(ctx, g, x, t, 0); err != nil {
					return err
				}
				if err := gloo.Send(ctx, g, y, t, 1); err != nil {
					return err
				}
			}
			// The trainers' gradients, summed; this rank adds zeros.
			clear(grad)
			if err := gloo.AllReduce(ctx, g, grad, goccl.Sum); err != nil {
				return err
			}
			commTime += time.Since(t0)
			// The same update as train.py, rounded as torch rounds it: g /=
			// trainers; p -= lr * g, the product rounded before the
			// subtraction (the conversion keeps Go from fusing the two).
			for i := range grad {
				grad[i] /= float32(trainers)
				m.p[i] -= float32(lr * grad[i])
			}
		}
		stats := make([]float64, 3) // loss sum, correct, samples
		if err := gloo.AllReduce(ctx, g, stats, goccl.Sum); err != nil {
			return err
		}
		fmt.Fprintf(out, "epoch %d loss %.4f train-accuracy %.4f (trainers' figures)\n", epoch, stats[0]/stats[2], stats[1]/stats[2])
	}
	elapsed := time.Since(start)
	theirs := make([]float32, len(m.p))
	if err := gloo.Broadcast(ctx, g, theirs, 1); err != nil {
		return err
	}
	maxDiff := 0.0
	for i := range theirs {
		maxDiff = max(maxDiff, math.Abs(float64(theirs[i]-m.p[i])))
	}
	fmt.Fprintf(out, "test accuracy (the Go rank's copy of the model): %.4f\n", m.accuracy(test))
	fmt.Fprintf(out, "largest difference between the Go copy and trainer rank 1's parameters: %g\n", maxDiff)
	fmt.Fprintf(out, "%d steps in %.2f s, %.2f ms per step in send/recv and all_reduce on the Go rank\n",
		cfg.epochs*steps, elapsed.Seconds(), float64(commTime.Microseconds())/1e3/float64(cfg.epochs*steps))
	return nil
}
