package main

import (
	"context"
	"fmt"
	"github.com/goccl/goccl/examples/internal/mnist"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ddp"
)

// Trainer is one rank's replica of the data-parallel job.
type Trainer struct {
	comm  *goccl.Comm // nil: a single process, no collectives
	rank  int
	size  int
	model *MLP
	opt   *adam
	// dp holds the gradients in its buckets and reduces them. The
	// registered tensors (params, forward order) are, per layer, its
	// weight matrix in blocks of at most chunkRows rows (contiguous in the
	// row-major layout), then its bias; wID[l][k] is the tensor of layer
	// l's k-th block (in rowBlocks order), bID[l] its bias's. gradLayers
	// are dp's gradients as the backward pass writes them.
	dp         *ddp.DDP
	params     [][]float32 // the registered tensors: views of model.Params
	grads      [][]float32 // dp.Grad(i) for each
	wID        [][]int
	bID        []int
	gradLayers []gradLayer
	chunkRows  int
	dpOpts     ddp.Options // how dp was made, for bind
	// elastic: Step stops before the update, which finishStep applies
	// when the ranks agree to commit (elastic.go).
	elastic bool
	overlap bool      // mark each part ready as the backward finishes it (else all at the end)
	x       []float32 // this rank's shard of the batch, as model input
	scale   float32   // the current step's gradient scale (see Step)
	// backwardStart is when the current step's backward pass started.
	backwardStart time.Time
}

// trainerOptions are the data-parallel settings of a Trainer.
type trainerOptions struct {
	noOverlap bool    // mark the gradients ready only after the whole backward pass
	bucketMB  float64 // ddp.Options.BucketCapMB (0: its default)
	chunkRows int     // rows per weight-gradient block (0: whole matrices)
	compress  string  // "", "none", "fp16" or "bf16": ddp.FP16Compress, ddp.BF16Compress
}

// newTrainer builds the model from seed on every rank; ddp.New then
// broadcasts rank 0's parameters so all replicas start bit-identical.
func newTrainer(ctx context.Context, c *goccl.Comm, sizes []int, seed uint64, lr float64, o trainerOptions) (*Trainer, error) {
	m := newMLP(sizes, seed)
	t := &Trainer{model: m, opt: newAdam(len(m.Params), lr), overlap: !o.noOverlap, chunkRows: o.chunkRows}
	for _, ly := range m.layers {
		blocks := rowBlocks(ly.Out, t.chunkRows)
		ids := make([]int, len(blocks))
		for k := len(blocks) - 1; k >= 0; k-- { // registered first rows first
			b := blocks[k]
			ids[k] = len(t.params)
			t.params = append(t.params, ly.W.Data[b[0]*ly.In:b[1]*ly.In])
		}
		t.wID = append(t.wID, ids)
		t.bID = append(t.bID, len(t.params))
		t.params = append(t.params, ly.B)
	}
	t.dpOpts = ddp.Options{BucketCapMB: o.bucketMB}
	switch o.compress {
	case "", "none":
	case "fp16":
		t.dpOpts.Hook = ddp.FP16Compress()
	case "bf16":
		t.dpOpts.Hook = ddp.BF16Compress()
	default:
		return nil, fmt.Errorf("gradient compression %q: want none, fp16 or bf16", o.compress)
	}
	if err := t.bind(ctx, c); err != nil {
		return nil, err
	}
	return t, nil
}

// bind makes the Trainer's DDP on communicator c (nil: one process), which
// broadcasts rank 0's parameters, and points the backward pass at its
// gradient buckets.
func (t *Trainer) bind(ctx context.Context, c *goccl.Comm) error {
	t.comm, t.rank, t.size = c, 0, 1
	if c != nil {
		t.rank, t.size = c.Rank(), c.Size()
	}
	dp, err := ddp.New(ctx, c, t.params, t.dpOpts)
	if err != nil {
		return fmt.Errorf("data-parallel setup: %w", err)
	}
	t.dp, t.grads, t.gradLayers = dp, t.grads[:0], t.gradLayers[:0]
	for i := range t.params {
		t.grads = append(t.grads, dp.Grad(i))
	}
	for l, ly := range t.model.layers {
		gl := gradLayer{Out: ly.Out, B: t.grads[t.bID[l]]}
		for _, id := range t.wID[l] {
			gl.W = append(gl.W, t.grads[id])
		}
		t.gradLayers = append(t.gradLayers, gl)
	}
	return nil
}

// flatGrad returns a copy of the gradient in Params' layout.
func (t *Trainer) flatGrad() []float32 {
	g := make([]float32, 0, len(t.model.Params))
	for _, x := range t.grads {
		g = append(g, x...)
	}
	return g
}

// Step does one synchronous data-parallel Adam step on the global batch idx
// of d (every rank passes the same indices and uses only its shard). Each
// rank computes the gradient g_r of the mean loss over its n_r samples and
// scales it by size*n_r/B; the DDP's AllReduce(Avg) of the buckets then
// gives every rank sum_r n_r*g_r / B, the gradient of the mean loss over the
// whole batch of B samples, however unevenly B splits. With overlap, each
// layer's gradient is scaled and marked ready as soon as the backward pass
// has computed it, so the buckets of the last layers are reduced while the
// first layers' gradients are computed. Every rank applies the same update
// to the same reduced values. Step returns this rank's summed loss and its
// sample count. On the communicator's trace (GOCCL_TRACE_FILE) it adds
// spans "forward" (with the loss), "backward" (up to the end of the
// gradient computation: without overlap, the gradients are marked ready
// after it) and "optimizer", inside ddp's "ddp compute".
func (t *Trainer) Step(ctx context.Context, d *mnist.Dataset, idx []int) (lossSum float64, n int, err error) {
	return t.step(ctx, d, idx, t)
}

// step is Step with the backward pass's parts reported to sink: the
// Trainer, or in tests a sink that wraps it.
func (t *Trainer) step(ctx context.Context, d *mnist.Dataset, idx []int, sink gradSink) (lossSum float64, n int, err error) {
	if len(idx) == 0 {
		return 0, 0, fmt.Errorf("step: empty batch")
	}
	lo, hi := ddp.Shard(len(idx), t.size, t.rank)
	n = hi - lo
	if cap(t.x) < n*mnist.Features {
		t.x = make([]float32, n*mnist.Features)
	}
	x := t.x[:n*mnist.Features]
	d.Input(idx[lo:hi], x)
	y := make([]uint8, n)
	for k, i := range idx[lo:hi] {
		y[k] = d.Labels[i]
	}
	t.scale = float32(t.size*n) / float32(len(idx))
	start := time.Now()
	if t.overlap {
		lossSum, _, err = t.model.lossGradLayers(x, y, t.gradLayers, t.chunkRows, sink)
	} else {
		lossSum, _, err = t.model.lossGradLayers(x, y, t.gradLayers, t.chunkRows, startOnly{sink})
	}
	if err == nil {
		end := time.Now()
		t.comm.TraceSpan("forward", start, t.backwardStart)
		t.comm.TraceSpan("backward", t.backwardStart, end)
	}
	if !t.overlap {
		for l := len(t.gradLayers) - 1; l >= 0 && err == nil; l-- {
			err = tell(sink, l, t.gradLayers[l].Out, t.chunkRows)
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("backward: %w", err)
	}
	if err := t.dp.Wait(ctx); err != nil {
		return 0, 0, fmt.Errorf("gradient allreduce: %w", err)
	}
	if !t.elastic {
		t.update()
	}
	return lossSum, n, nil
}

// update applies the optimizer step to the reduced gradients.
func (t *Trainer) update() {
	start := time.Now()
	t.opt.stepTensors(t.params, t.grads)
	t.comm.TraceSpan("optimizer", start, time.Now())
}

// startOnly passes on the start of the backward pass only: the sink of a
// step without overlap, whose gradients are marked after the backward pass.
type startOnly struct{ gradSink }

func (startOnly) bias(int) error           { return nil }
func (startOnly) rows(int, int, int) error { return nil }

// backward notes the start of the backward pass, for the trace.
func (t *Trainer) backward() { t.backwardStart = time.Now() }

// bias and rows make the Trainer the backward pass's gradSink: each part of
// the gradient is scaled (see Step) and marked ready, which issues its
// bucket's AllReduce once the bucket is complete.
func (t *Trainer) bias(l int) error {
	scaleBy(t.gradLayers[l].B, t.scale)
	return t.dp.MarkReady(t.bID[l])
}

func (t *Trainer) rows(l, r0, r1 int) error {
	// Blocks are cut from the last row: block k ends at Out - k*chunk.
	k := 0
	if t.chunkRows > 0 {
		k = (t.gradLayers[l].Out - r1) / t.chunkRows
	}
	scaleBy(t.gradLayers[l].W[k], t.scale)
	return t.dp.MarkReady(t.wID[l][k])
}

func scaleBy(g []float32, w float32) {
	if w == 1 {
		return
	}
	for i := range g {
		g[i] *= w
	}
}

// sumAll adds v over the ranks (in place) with one AllReduce(Sum).
func (t *Trainer) sumAll(ctx context.Context, v []float64) error {
	if t.comm == nil {
		return nil
	}
	return goccl.AllReduce(ctx, t.comm, v, v, len(v), goccl.Sum)
}

// Evaluate returns the accuracy of the model on d, each rank scoring its
// shard in chunks and one AllReduce(Sum) adding up the counts.
func (t *Trainer) Evaluate(ctx context.Context, d *mnist.Dataset) (float64, error) {
	const chunk = 500
	lo, hi := ddp.Shard(d.Len(), t.size, t.rank)
	x := make([]float32, chunk*mnist.Features)
	idx := make([]int, 0, chunk)
	correct := 0
	for s := lo; s < hi; s += chunk {
		idx = idx[:0]
		for i := s; i < min(s+chunk, hi); i++ {
			idx = append(idx, i)
		}
		d.Input(idx, x)
		_, c := t.model.lossGrad(x[:len(idx)*mnist.Features], d.Labels[s:s+len(idx)], nil)
		correct += c
	}
	counts := []float64{float64(correct), float64(hi - lo)}
	if err := t.sumAll(ctx, counts); err != nil {
		return 0, fmt.Errorf("evaluation allreduce: %w", err)
	}
	if counts[1] != float64(d.Len()) {
		return 0, fmt.Errorf("evaluation allreduce: ranks scored %v samples, want %d", counts[1], d.Len())
	}
	return counts[0] / counts[1], nil
}

// ParamsIdentical decides through collectives, not by assumption, whether
// every rank holds bit-identical parameters: it reduces the parameters' bit
// patterns with Max and with Min; they are identical everywhere exactly when
// the two results agree in every element. All ranks get the same answer.
func (t *Trainer) ParamsIdentical(ctx context.Context) (bool, error) {
	return ddp.Identical(ctx, t.comm, t.model.Params)
}
