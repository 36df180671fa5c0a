package main

import (
	"context"
	"fmt"
	"github.com/goccl/goccl/examples/internal/digits"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ddp"
)

// Trainer is one rank's replica of the data-parallel job.
type Trainer struct {
	comm     *goccl.Comm // nil: a single process, no collectives
	rank     int
	size     int
	model    *MLP[float32]
	vel      []float32 // momentum buffer
	grad     []float32 // this rank's mean-loss gradient
	buf      []float32 // AllReduce buffer: weighted gradient | loss | sample count
	lr, mom  float32
	numParam int
}

// newTrainer builds the model from seed on every rank and then, to be safe,
// broadcasts rank 0's parameters so all replicas start bit-identical.
func newTrainer(ctx context.Context, c *goccl.Comm, hidden int, seed uint64, lr, momentum float32) (*Trainer, error) {
	m := newMLP[float32](digits.Features, hidden, digits.Classes, seed)
	p := len(m.Params)
	t := &Trainer{
		comm: c, size: 1, model: m,
		vel: make([]float32, p), grad: make([]float32, p), buf: make([]float32, p+2),
		lr: lr, mom: momentum, numParam: p,
	}
	if c != nil {
		t.rank, t.size = c.Rank(), c.Size()
		if err := goccl.Broadcast(ctx, c, m.Params, m.Params, p, 0); err != nil {
			return nil, fmt.Errorf("broadcast of initial parameters: %w", err)
		}
	}
	return t, nil
}

// Step does one synchronous data-parallel SGD step on a global batch (x is
// row-major len(y) x digits.Features; every rank passes the same global batch and
// uses only its shard). Each rank computes the gradient of the mean loss over
// its shard of n_r samples, scales it by n_r, and ONE AllReduce(Sum) adds the
// weighted gradients together with the loss sums and the n_r; dividing by the
// global batch size B = sum n_r gives exactly (in real arithmetic) the gradient
// of the mean loss over the whole batch, however unevenly B splits. Every rank
// then applies the same momentum update to the same reduced values.
// It returns the summed loss of the global batch.
func (t *Trainer) Step(ctx context.Context, x []float32, y []int) (float64, error) {
	if len(y) == 0 || len(x) != len(y)*digits.Features {
		return 0, fmt.Errorf("step: %d features for %d samples", len(x), len(y))
	}
	lo, hi := ddp.Shard(len(y), t.size, t.rank)
	n := hi - lo
	meanLoss := t.model.meanGrad(x[lo*digits.Features:hi*digits.Features], y[lo:hi], t.grad)
	p := t.numParam
	w := float32(n)
	for i, g := range t.grad {
		t.buf[i] = g * w
	}
	t.buf[p] = float32(meanLoss * float64(n))
	t.buf[p+1] = w
	if t.comm != nil {
		if err := goccl.AllReduce(ctx, t.comm, t.buf, t.buf, p+2, goccl.Sum); err != nil {
			return 0, fmt.Errorf("gradient allreduce: %w", err)
		}
	}
	if got := t.buf[p+1]; got != float32(len(y)) {
		return 0, fmt.Errorf("gradient allreduce: ranks hold %v samples in all, want the batch size %d (ranks disagree on the batch)", got, len(y))
	}
	inv := 1 / float32(len(y))
	g := t.buf[:p]
	for i := range g {
		g[i] *= inv
	}
	sgdMomentum(t.model.Params, t.vel, g, t.lr, t.mom)
	return float64(t.buf[p]), nil
}

// Evaluate returns the accuracy of the model on d, each rank scoring its
// shard and one AllReduce(Sum) adding up the counts.
func (t *Trainer) Evaluate(ctx context.Context, d *digits.Dataset) (float64, error) {
	lo, hi := ddp.Shard(d.Len(), t.size, t.rank)
	_, correct := t.model.lossGrad(d.X[lo*digits.Features:hi*digits.Features], d.Y[lo:hi], nil)
	counts := []int64{int64(correct), int64(hi - lo)}
	if t.comm != nil {
		if err := goccl.AllReduce(ctx, t.comm, counts, counts, 2, goccl.Sum); err != nil {
			return 0, fmt.Errorf("evaluation allreduce: %w", err)
		}
	}
	if counts[1] != int64(d.Len()) {
		return 0, fmt.Errorf("evaluation allreduce: ranks scored %d samples, want %d", counts[1], d.Len())
	}
	return float64(counts[0]) / float64(counts[1]), nil
}

// ParamsIdentical decides through collectives, not by assumption, whether
// every rank holds bit-identical parameters: it reduces the parameters' bit
// patterns with Max and with Min; they are identical everywhere exactly when
// the two results agree in every element. All ranks get the same answer.
func (t *Trainer) ParamsIdentical(ctx context.Context) (bool, error) {
	return ddp.Identical(ctx, t.comm, t.model.Params)
}
