package main

import (
	"github.com/goccl/goccl/examples/internal/nn"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// layer is a view of one dense layer's weights W (Out x In, row-major) and
// biases b inside a flat vector.
type layer struct {
	In, Out int
	W       blas32.General
	B       []float32
}

// MLP is a multi-layer perceptron: dense layers with ReLU between them and a
// softmax cross-entropy loss on the last one. All parameters live in one flat
// slice, Params, laid out layer after layer as W [Out][In] | b [Out], so that
// a gradient with the same layout (see views) is reduced with one collective.
type MLP struct {
	Sizes  []int // input, hidden..., classes
	Params []float32
	layers []layer
}

// numParams is the length of the flat parameter vector for the layer sizes.
func numParams(sizes []int) int {
	n := 0
	for l := 1; l < len(sizes); l++ {
		n += sizes[l]*sizes[l-1] + sizes[l]
	}
	return n
}

// views cuts a flat vector with the parameter layout into per-layer views.
func views(sizes []int, p []float32) []layer {
	ls := make([]layer, len(sizes)-1)
	o := 0
	for l := range ls {
		in, out := sizes[l], sizes[l+1]
		w := p[o : o+out*in : o+out*in]
		o += out * in
		ls[l] = layer{In: in, Out: out, W: blas32.General{Rows: out, Cols: in, Stride: in, Data: w}, B: p[o : o+out : o+out]}
		o += out
	}
	return ls
}

// newMLP returns a model with He-normal weights in front of each ReLU,
// Glorot-normal weights in the last layer and zero biases, drawn from a PCG
// generator seeded by seed: the same seed gives the same parameters anywhere.
func newMLP(sizes []int, seed uint64) *MLP {
	m := &MLP{Sizes: sizes, Params: make([]float32, numParams(sizes))}
	m.layers = views(sizes, m.Params)
	rng := rand.New(rand.NewPCG(seed, 0x3157))
	for l, ly := range m.layers {
		sd := math.Sqrt(2 / float64(ly.In))
		if l == len(m.layers)-1 {
			sd = math.Sqrt(2 / float64(ly.In+ly.Out))
		}
		for i := range ly.W.Data {
			ly.W.Data[i] = float32(rng.NormFloat64() * sd)
		}
	}
	return m
}

// forward runs the n x In batch x through the model and returns the
// activations of every layer (acts[0] is x, the last is the logits).
func (m *MLP) forward(x []float32, n int) []blas32.General {
	acts := []blas32.General{{Rows: n, Cols: m.Sizes[0], Stride: m.Sizes[0], Data: x}}
	for l, ly := range m.layers {
		z := blas32.General{Rows: n, Cols: ly.Out, Stride: ly.Out, Data: make([]float32, n*ly.Out)}
		for r := range n {
			copy(z.Data[r*ly.Out:(r+1)*ly.Out], ly.B)
		}
		// Z = A W^T + b.
		blas32.Gemm(blas.NoTrans, blas.Trans, 1, acts[l], ly.W, 1, z)
		if l < len(m.layers)-1 {
			for i, v := range z.Data {
				z.Data[i] = max(v, 0)
			}
		}
		acts = append(acts, z)
	}
	return acts
}

// lossGrad runs the n samples x (row-major, n x Sizes[0]) with labels y through
// the model and returns the summed cross-entropy loss and the number of
// samples classified correctly. If grad is not nil (Params' layout), it is
// overwritten with the gradient of the mean loss over the n samples.
func (m *MLP) lossGrad(x []float32, y []uint8, grad []float32) (lossSum float64, correct int) {
	var gl []gradLayer
	if grad != nil {
		for _, ly := range views(m.Sizes, grad) {
			gl = append(gl, gradLayer{Out: ly.Out, W: [][]float32{ly.W.Data}, B: ly.B})
		}
	}
	lossSum, correct, _ = m.lossGradLayers(x, y, gl, 0, nil)
	return lossSum, correct
}

// gradLayer is where the backward pass writes one layer's gradient: the
// bias, and the weight matrix (Out x In, row-major) in row blocks, in the
// order of rowBlocks (last rows first); the blocks need not be contiguous.
type gradLayer struct {
	Out int
	W   [][]float32
	B   []float32
}

// gradSink follows the backward pass of lossGradLayers: it is told when a
// part of the gradient is final, so that a data-parallel reducer can start
// that part's communication while the rest is computed.
type gradSink interface {
	backward()                // the forward pass and the loss are done: the backward pass starts
	bias(l int) error         // layer l's bias gradient is final
	rows(l, r0, r1 int) error // rows [r0, r1) of layer l's weight gradient are final
}

// lossGradLayers is lossGrad with the gradient in gl (nil: no gradient),
// which it overwrites layer by layer, last layer first. Within a layer it
// computes the bias gradient, then the weight gradient in blocks of at most
// chunkRows rows (0: all at once; gl's blocks must be cut the same way),
// last block first; it tells sink (nil: nobody) when the backward pass
// starts and after each part, and stops at the first error sink returns.
func (m *MLP) lossGradLayers(x []float32, y []uint8, gl []gradLayer, chunkRows int, sink gradSink) (lossSum float64, correct int, err error) {
	n := len(y)
	if n == 0 {
		if sink != nil {
			sink.backward()
		}
		for l := len(gl) - 1; l >= 0; l-- {
			for _, w := range gl[l].W {
				clear(w)
			}
			clear(gl[l].B)
			if err := tell(sink, l, gl[l].Out, chunkRows); err != nil {
				return 0, 0, err
			}
		}
		return 0, 0, nil
	}
	acts := m.forward(x, n)
	// Softmax cross-entropy; the logits become dLoss/dlogits = (softmax -
	// onehot) / n.
	z := acts[len(acts)-1]
	lossSum, correct = nn.SoftmaxCrossEntropy(z.Data, z.Cols, y, 1/float32(n))
	if gl == nil {
		return lossSum, correct, nil
	}
	if sink != nil {
		sink.backward()
	}
	delta := z // dLoss/dZ of layer l
	for l := len(m.layers) - 1; l >= 0; l-- {
		// db = column sums of delta, dW = delta^T A by blocks of rows.
		db := gl[l].B
		clear(db)
		for r := range n {
			for j, v := range delta.Data[r*delta.Stride : r*delta.Stride+delta.Cols] {
				db[j] += v
			}
		}
		if sink != nil {
			if err := sink.bias(l); err != nil {
				return lossSum, correct, err
			}
		}
		in := m.layers[l].In
		for k, b := range rowBlocks(gl[l].Out, chunkRows) {
			d := blas32.General{Rows: n, Cols: b[1] - b[0], Stride: delta.Stride, Data: delta.Data[b[0]:]}
			dw := blas32.General{Rows: b[1] - b[0], Cols: in, Stride: in, Data: gl[l].W[k]}
			blas32.Gemm(blas.Trans, blas.NoTrans, 1, d, acts[l], 0, dw)
			if sink != nil {
				if err := sink.rows(l, b[0], b[1]); err != nil {
					return lossSum, correct, err
				}
			}
		}
		if l == 0 {
			break
		}
		// dA = delta W, then through the ReLU: zero where the unit was off.
		a := acts[l]
		da := blas32.General{Rows: n, Cols: a.Cols, Stride: a.Cols, Data: make([]float32, n*a.Cols)}
		blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, delta, m.layers[l].W, 0, da)
		for i, v := range a.Data {
			if v <= 0 {
				da.Data[i] = 0
			}
		}
		delta = da
	}
	return lossSum, correct, nil
}

// rowBlocks cuts rows into blocks of at most chunk rows (0: one block),
// last block first: the order in which lossGradLayers computes them.
func rowBlocks(rows, chunk int) [][2]int {
	if chunk <= 0 || chunk > rows {
		chunk = max(rows, 1)
	}
	var bs [][2]int
	for r1 := rows; r1 > 0; r1 -= chunk {
		bs = append(bs, [2]int{max(r1-chunk, 0), r1})
	}
	return bs
}

// tell reports all of layer l's gradient final to sink (nil: nobody), in
// the order lossGradLayers does.
func tell(sink gradSink, l, rows, chunk int) error {
	if sink == nil {
		return nil
	}
	if err := sink.bias(l); err != nil {
		return err
	}
	for _, b := range rowBlocks(rows, chunk) {
		if err := sink.rows(l, b[0], b[1]); err != nil {
			return err
		}
	}
	return nil
}

// adam is the Adam optimiser (Kingma & Ba) over a flat parameter vector.
type adam struct {
	lr, beta1, beta2, eps float64
	t                     int
	m, v                  []float32
}

func newAdam(n int, lr float64) *adam {
	return &adam{lr: lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, m: make([]float32, n), v: make([]float32, n)}
}

// step applies one update with gradient g to params.
func (o *adam) step(params, g []float32) {
	o.stepTensors([][]float32{params}, [][]float32{g})
}

// stepTensors applies one update to the parameter tensors params, laid out one
// after the other in the optimiser's state, with the gradients grads.
func (o *adam) stepTensors(params, grads [][]float32) {
	o.t++
	b1, b2 := float32(o.beta1), float32(o.beta2)
	// Fold both bias corrections into the step size.
	lr := float32(o.lr * math.Sqrt(1-math.Pow(o.beta2, float64(o.t))) / (1 - math.Pow(o.beta1, float64(o.t))))
	eps := float32(o.eps)
	off := 0
	for t, p := range params {
		om, ov := o.m[off:off+len(p)], o.v[off:off+len(p)]
		for i, gi := range grads[t][:len(p)] {
			m := b1*om[i] + (1-b1)*gi
			v := b2*ov[i] + (1-b2)*gi*gi
			om[i], ov[i] = m, v
			p[i] -= lr * m / (float32(math.Sqrt(float64(v))) + eps)
		}
		off += len(p)
	}
}
