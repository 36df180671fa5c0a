// Command tensor-parallel runs the MLP block of a transformer with Megatron-
// LM's tensor parallelism (Shoeybi et al. 2019, "Megatron-LM", section 3),
// Y = GeLU(X·A + a)·B + b with A (h x 4h) split by columns over the ranks and
// B (4h x h) split by rows: each rank computes GeLU(X·A_i + a_i)·B_i with no
// communication, and one AllReduce(Sum) of those partial outputs per block
// makes Y on every rank (Megatron's g operator; its conjugate f is the
// identity). The backward pass mirrors it: the gradients of A_i, a_i and B_i
// are local, and dX takes one AllReduce (f's backward; g's is the identity).
//
//	go run ./cmd/goccl run -np 4 ./examples/tensor-parallel
//	go run ./examples/tensor-parallel          # world size 1: the whole block
//
// Every rank draws the whole A and B from -seed, keeps its shard, runs
// forward and backward passes on a batch, and checks its output Y, dX and
// its shard's gradients against the whole block computed on one rank (each
// rank computes it). Rank 0 prints the largest relative differences over
// the ranks, whether they are within float32 tolerance, and the time per
// block with the AllReduce bytes.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/examples/internal/exmain"
	"gonum.org/v1/gonum/blas/blas32"
)

// tolerance is the largest relative difference (max|tp - full| / max|full|,
// per quantity) accepted between the tensor-parallel block and the whole
// block on one rank, for hidden size h: 4·√(4h)·2⁻²⁴, at least 1e-5
// (1.1e-5 at h = 512, 1.5e-5 at h = 1024). The two compute the same sums in
// float32 in another order: each element of Y and of dX is a sum over the 4h
// columns of A (rows of B), which the ranks split into size partial sums
// that the AllReduce then adds, where one rank sums them in one sequence. Reordering a
// float32 sum of n terms changes it by at most about n·2⁻²⁴ times the sum of
// the terms' magnitudes (n = 2048: 1.2e-4), typically by √n·2⁻²⁴ times their
// size (2.7e-6): measured at h = 512, seeds 1 to 6, 2 and 4 ranks: Y 1.2e-6
// to 2.6e-6, dX 1.6e-7 to 3e-7 (h = 1024: Y 2.8e-6). The gradients of A_i,
// a_i, B_i and b come out of the same operations in the same order as the
// single-rank ones and match exactly. A real error (a partial sum missing
// or counted twice, the bias b added on every rank) is of order 1.
func tolerance(h int) float64 {
	return max(1e-5, 4*math.Sqrt(float64(4*h))*0x1p-24)
}

// config holds the command-line settings.
type config struct {
	hidden, batch, iters int
	seed                 uint64
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("tensor-parallel", flag.ContinueOnError)
	fs.IntVar(&cfg.hidden, "hidden", 512, "hidden size h (A is h x 4h, B is 4h x h; the world size must divide 4h)")
	fs.IntVar(&cfg.batch, "batch", 64, "rows of the input X (tokens of the batch)")
	fs.IntVar(&cfg.iters, "iters", 10, "timed forward and backward passes (after one untimed)")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the parameters, the input and the output gradient")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case cfg.hidden < 1:
		return cfg, fmt.Errorf("-hidden must be >= 1, have %d", cfg.hidden)
	case cfg.batch < 1:
		return cfg, fmt.Errorf("-batch must be >= 1, have %d", cfg.batch)
	case cfg.iters < 1:
		return cfg, fmt.Errorf("-iters must be >= 1, have %d", cfg.iters)
	}
	return cfg, nil
}

// Indices of the compared quantities.
const (
	qY = iota
	qDX
	qDA
	qDa
	qDB
	qDb
	numQ
)

var qNames = [numQ]string{"Y", "dX", "dA_i", "da_i", "dB_i", "db"}

// result is what a run ends with (the same on every rank).
type result struct {
	size   int
	maxRel [numQ]float64 // per quantity, the largest over the ranks
	equal  bool          // every maxRel within tolerance
	t      timing        // rank 0's, summed over the timed iterations
	iters  int
}

// randMatrix is a rows x cols matrix of standard normal values from seed.
func randMatrix(rows, cols int, seed, stream uint64) blas32.General {
	m := matrix(rows, cols)
	rng := rand.New(rand.NewPCG(seed, stream))
	for i := range m.Data {
		m.Data[i] = float32(rng.NormFloat64())
	}
	return m
}

// relDiff is max|a - b| / max|b| (0 when both are zero).
func relDiff(a, b []float32) float64 {
	var num, den float64
	for i := range b {
		num = max(num, math.Abs(float64(a[i])-float64(b[i])))
		den = max(den, math.Abs(float64(b[i])))
	}
	if num == 0 {
		return 0
	}
	return num / den
}

// columns returns the columns [off, off+n) of m as a contiguous slice.
func columns(m blas32.General, off, n int) []float32 {
	out := make([]float32, 0, m.Rows*n)
	for r := range m.Rows {
		out = append(out, m.Data[r*m.Stride+off:r*m.Stride+off+n]...)
	}
	return out
}

// runTP runs the block on this rank of c, checks it against the whole block,
// and writes the report to out (pass io.Discard on ranks other than 0).
func runTP(ctx context.Context, c *goccl.Comm, cfg config, out io.Writer) (result, error) {
	rank, size := c.Rank(), c.Size()
	res := result{size: size, iters: cfg.iters}
	h, n := cfg.hidden, cfg.batch
	if (4*h)%size != 0 {
		return res, errShards(h, size)
	}
	full := newParams(h, cfg.seed)
	s, err := full.shardOf(rank, size)
	if err != nil {
		return res, err
	}
	X := randMatrix(n, h, cfg.seed, 1)
	dY := randMatrix(n, h, cfg.seed, 2)
	tp := &block{s: s, c: c}
	fmt.Fprintf(out, "MLP block Y = GeLU(X·A + a)·B + b: hidden %d, 4h %d, batch %d; %d ranks, each A_i %dx%d (columns of A), B_i %dx%d (rows of B)\n",
		h, 4*h, n, size, h, s.f, s.f, h)

	// One untimed pass, then the timed ones (the results are the same).
	var y, dx []float32
	var g grads
	var t timing
	for it := range cfg.iters + 1 {
		if it == 1 {
			if err := c.Barrier(ctx); err != nil {
				return res, err
			}
			t = timing{}
		}
		var cch cache
		if y, cch, err = tp.forward(ctx, X, &t); err != nil {
			return res, err
		}
		if dx, g, err = tp.backward(ctx, cch, dY, &t); err != nil {
			return res, err
		}
	}
	res.t = t

	// The whole block on one rank, and this rank's parts of its gradients.
	whole, err := full.shardOf(0, 1)
	if err != nil {
		return res, err
	}
	ref := &block{s: whole}
	var rt timing
	ry, rc, err := ref.forward(ctx, X, &rt)
	if err != nil {
		return res, err
	}
	rdx, rg, err := ref.backward(ctx, rc, dY, &rt)
	if err != nil {
		return res, err
	}
	diffs := []float64{
		qY:  relDiff(y, ry),
		qDX: relDiff(dx, rdx),
		qDA: relDiff(g.A.Data, columns(rg.A, s.off, s.f)),
		qDa: relDiff(g.a, rg.a[s.off:s.off+s.f]),
		qDB: relDiff(g.B.Data, rg.B.Data[s.off*h:(s.off+s.f)*h]),
		qDb: relDiff(g.b, rg.b),
	}
	if size > 1 {
		if err := goccl.AllReduce(ctx, c, diffs, diffs, numQ, goccl.Max); err != nil {
			return res, fmt.Errorf("AllReduce(Max) of the differences: %w", err)
		}
	}
	copy(res.maxRel[:], diffs)
	res.equal = slices.Max(diffs) <= tolerance(h)

	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 / float64(cfg.iters) }
	fmt.Fprintf(out, "per block (rank 0, mean of %d): forward %.3f ms (AllReduce %.3f ms), backward %.3f ms (AllReduce %.3f ms)\n",
		cfg.iters, ms(t.fwd), ms(t.fwdAR), ms(t.bwd), ms(t.bwdAR))
	ar := 0
	if size > 1 {
		ar = n * h * 4
	}
	fmt.Fprintf(out, "AllReduce bytes per block: %d forward + %d backward (batch x h x 4 each)\n", ar, ar)
	fmt.Fprintf(out, "max relative difference to the single-rank block (max|tp-full|/max|full|, all ranks):")
	for q, d := range res.maxRel {
		fmt.Fprintf(out, " %s %.2g", qNames[q], d)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "output equals single-rank: %s (tolerance %.2g)\n", map[bool]string{true: "yes", false: "no"}[res.equal], tolerance(h))
	return res, nil
}

func run(ctx context.Context, args []string, stdout io.Writer) (rank int, err error) {
	rank = -1 // not known before Init
	cfg, err := parseFlags(args)
	if err != nil {
		return rank, err
	}
	return exmain.WithComm(ctx, stdout, func(c *goccl.Comm, out io.Writer) error {
		res, err := runTP(ctx, c, cfg, out)
		if err == nil && !res.equal {
			err = fmt.Errorf("the tensor-parallel block differs from the single-rank one by more than %.2g: %v", tolerance(cfg.hidden), res.maxRel)
		}
		return err
	})
}

func main() { exmain.Main("tensor-parallel", run) }
