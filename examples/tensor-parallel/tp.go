package main

import (
	"context"
	"fmt"
	"time"

	"github.com/goccl/goccl"
	"gonum.org/v1/gonum/blas/blas32"
)

// block is one rank's part of a tensor-parallel MLP block (Megatron-LM,
// section 3): c == nil is the whole block on one rank, with no
// communication.
type block struct {
	s *shard
	c *goccl.Comm
}

// timing is the time one forward and backward pass spent, and of it in
// AllReduce.
type timing struct {
	fwd, fwdAR, bwd, bwdAR time.Duration
}

// allReduce sums x (n x h partial sums) over the ranks in place: Megatron's
// g operator in the forward pass (after the row-parallel linear) and the
// backward of its f operator (before the column-parallel linear). With one
// rank it is the identity.
func (b *block) allReduce(ctx context.Context, x []float32, what string) error {
	if b.c == nil || b.c.Size() == 1 {
		return nil
	}
	if err := goccl.AllReduce(ctx, b.c, x, x, len(x), goccl.Sum); err != nil {
		return fmt.Errorf("%s AllReduce of %d float32: %w", what, len(x), err)
	}
	return nil
}

// forward runs the batch X (n x h) through the block: f is the identity, the
// column- and row-parallel linears run locally, g sums their partial
// outputs over the ranks (one AllReduce), then the bias b is added once. It
// returns Y (n x h, the same on every rank) and what the backward pass needs.
func (b *block) forward(ctx context.Context, X blas32.General, t *timing) ([]float32, cache, error) {
	start := time.Now()
	y := make([]float32, X.Rows*b.s.h)
	c := b.s.forwardLocal(X, y)
	ar := time.Now()
	if err := b.allReduce(ctx, y, "forward (g)"); err != nil {
		return nil, c, err
	}
	t.fwdAR += time.Since(ar)
	addBias(y, b.s.b)
	t.fwd += time.Since(start)
	return y, c, nil
}

// backward runs the gradient dY of the output (n x h, the same on every
// rank: g's backward is the identity) back through the block: the local
// gradients of the shard's parameters, and dX, summed over the ranks with
// one AllReduce (f's backward).
func (b *block) backward(ctx context.Context, c cache, dY blas32.General, t *timing) ([]float32, grads, error) {
	start := time.Now()
	dx := make([]float32, dY.Rows*b.s.h)
	g := b.s.backwardLocal(c, dY, dx)
	ar := time.Now()
	if err := b.allReduce(ctx, dx, "backward (f)"); err != nil {
		return nil, g, err
	}
	t.bwdAR += time.Since(ar)
	t.bwd += time.Since(start)
	return dx, g, nil
}
