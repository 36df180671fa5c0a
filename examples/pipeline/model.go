package main

import (
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// layer is a view of one dense layer's weights W (Out x In, row-major) and
// biases B inside a flat vector.
type layer struct {
	In, Out int
	W       blas32.General
	B       []float32
}

// modelSizes are the layer widths of the pipelined MLP for p stages: p dense
// hidden x hidden layers with ReLU, one per stage, and a linear
// hidden x classes output layer on the last stage (so every stage does about
// the same work and every message between stages is a micro-batch of
// hidden-wide rows).
func modelSizes(p, hidden, classes int) []int {
	sizes := make([]int, 0, p+2)
	for range p + 1 {
		sizes = append(sizes, hidden)
	}
	return append(sizes, classes)
}

// stageLayers is the range [lo, hi) of the layers (of len(sizes)-1) that
// stage s of p holds: layer s, and the output layer too on the last stage.
func stageLayers(p, s int) (lo, hi int) {
	if s == p-1 {
		return s, s + 2
	}
	return s, s + 1
}

// stage is a run of consecutive dense layers of the MLP with its parameters
// and its gradient, each in one flat vector (layer after layer, W then b).
type stage struct {
	sizes  []int // the stage's input width, then each layer's output width
	head   bool  // the last layer is the model's output layer: no ReLU, loss
	params []float32
	grad   []float32
	layers []layer // views into params
	grads  []layer // views into grad
}

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
		ls[l] = layer{In: in, Out: out, W: blas32.General{Rows: out, Cols: in, Stride: in, Data: p[o : o+out*in : o+out*in]}}
		o += out * in
		ls[l].B = p[o : o+out : o+out]
		o += out
	}
	return ls
}

// newStage returns the stage holding layers [lo, hi) of the MLP with the
// widths sizes. Layer l's weights are He-normal (Glorot-normal for the output
// layer), drawn from a PCG generator seeded by (seed, l), and its biases are
// zero: a layer has the same initial values whichever stage holds it, so a
// one-stage model over all layers is the pipelined model's reference.
func newStage(sizes []int, lo, hi int, seed uint64) *stage {
	st := &stage{sizes: sizes[lo : hi+1], head: hi == len(sizes)-1}
	n := numParams(st.sizes)
	st.params, st.grad = make([]float32, n), make([]float32, n)
	st.layers, st.grads = views(st.sizes, st.params), views(st.sizes, st.grad)
	for i, ly := range st.layers {
		l := lo + i
		sd := math.Sqrt(2 / float64(ly.In))
		if l == len(sizes)-2 {
			sd = math.Sqrt(2 / float64(ly.In+ly.Out))
		}
		rng := rand.New(rand.NewPCG(seed, uint64(l)))
		for j := range ly.W.Data {
			ly.W.Data[j] = float32(rng.NormFloat64() * sd)
		}
	}
	return st
}

// relu reports whether layer i of the stage is followed by a ReLU.
func (st *stage) relu(i int) bool { return !st.head || i < len(st.layers)-1 }

// forward runs the n x sizes[0] rows x through the stage and returns the
// activations: acts[0] is x, acts[i+1] the output of layer i (after its
// ReLU; on the head stage the last one is the logits).
func (st *stage) forward(x []float32, n int) []blas32.General {
	acts := []blas32.General{{Rows: n, Cols: st.sizes[0], Stride: st.sizes[0], Data: x}}
	for i, ly := range st.layers {
		z := blas32.General{Rows: n, Cols: ly.Out, Stride: ly.Out, Data: make([]float32, n*ly.Out)}
		for r := range n {
			copy(z.Data[r*ly.Out:(r+1)*ly.Out], ly.B)
		}
		// Z = A W^T + b.
		blas32.Gemm(blas.NoTrans, blas.Trans, 1, acts[i], ly.W, 1, z)
		if st.relu(i) {
			for j, v := range z.Data {
				z.Data[j] = max(v, 0)
			}
		}
		acts = append(acts, z)
	}
	return acts
}

// lossGrad overwrites the logits z (n x classes) with the gradient of the
// loss sum(cross-entropy)/total over their rows with labels y, and returns
// the summed cross-entropy of the rows (computed stably in float64).
func lossGrad(z blas32.General, y []uint8, total int) float64 {
	lossSum := 0.0
	for r, label := range y {
		row := z.Data[r*z.Stride : r*z.Stride+z.Cols]
		zmax := float64(row[0])
		for _, v := range row {
			zmax = max(zmax, float64(v))
		}
		sum := 0.0
		for _, v := range row {
			sum += math.Exp(float64(v) - zmax)
		}
		lse := zmax + math.Log(sum)
		lossSum += lse - float64(row[label])
		for c, v := range row {
			row[c] = float32(math.Exp(float64(v)-lse) / float64(total))
		}
		row[label] -= 1 / float32(total)
	}
	return lossSum
}

// backward adds the stage's gradient for one micro-batch to st.grad, given
// the micro-batch's activations acts (from forward) and dout, the gradient of
// the loss with respect to the stage's output (on the head stage: the
// logits' gradient from lossGrad). dout is overwritten. It returns the
// gradient with respect to the stage's input when wantIn is set.
func (st *stage) backward(acts []blas32.General, dout []float32, wantIn bool) []float32 {
	n := acts[0].Rows
	delta := blas32.General{Rows: n, Cols: st.sizes[len(st.sizes)-1], Stride: st.sizes[len(st.sizes)-1], Data: dout}
	for i := len(st.layers) - 1; i >= 0; i-- {
		if st.relu(i) {
			// Through the ReLU: zero where the unit was off.
			for j, v := range acts[i+1].Data {
				if v <= 0 {
					delta.Data[j] = 0
				}
			}
		}
		// dW += delta^T A, db += column sums of delta.
		g := st.grads[i]
		blas32.Gemm(blas.Trans, blas.NoTrans, 1, delta, acts[i], 1, g.W)
		for r := range n {
			for j, v := range delta.Data[r*delta.Stride : r*delta.Stride+delta.Cols] {
				g.B[j] += v
			}
		}
		if i == 0 && !wantIn {
			return nil
		}
		// dA = delta W.
		a := acts[i]
		da := blas32.General{Rows: n, Cols: a.Cols, Stride: a.Cols, Data: make([]float32, n*a.Cols)}
		blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, delta, st.layers[i].W, 0, da)
		delta = da
	}
	return delta.Data
}

// sgd takes one plain gradient-descent step: params -= lr * grad.
func (st *stage) sgd(lr float32) {
	for i, g := range st.grad {
		st.params[i] -= lr * g
	}
}

// syntheticBatch returns batch random inputs (batch x features, standard
// normal) and their labels, the argmax over classes of a fixed random linear
// teacher (seeded by seed alone), drawn from a generator seeded by (seed,
// step): a learnable task that needs no data files.
func syntheticBatch(seed, step uint64, batch, features, classes int) ([]float32, []uint8) {
	teacher := rand.New(rand.NewPCG(seed, 0x7eac4e7))
	tw := make([]float64, classes*features)
	for i := range tw {
		tw[i] = teacher.NormFloat64()
	}
	rng := rand.New(rand.NewPCG(seed^0x5eed, step))
	x := make([]float32, batch*features)
	y := make([]uint8, batch)
	for r := range batch {
		row := x[r*features : (r+1)*features]
		for j := range row {
			row[j] = float32(rng.NormFloat64())
		}
		best, bestV := 0, math.Inf(-1)
		for c := range classes {
			v := 0.0
			for j, xv := range row {
				v += tw[c*features+j] * float64(xv)
			}
			if v > bestV {
				best, bestV = c, v
			}
		}
		y[r] = uint8(best)
	}
	return x, y
}

// reference computes, on one process, the gradient of the mean loss over the
// whole batch of the MLP whose layers are those of all the stages, and
// returns each stage's part (in the stage's flat layout) and the summed loss.
func reference(sizes []int, p int, seed uint64, x []float32, y []uint8) ([][]float32, float64) {
	whole := newStage(sizes, 0, len(sizes)-1, seed)
	n := len(y)
	acts := whole.forward(x, n)
	loss := lossGrad(acts[len(acts)-1], y, n)
	whole.backward(acts, acts[len(acts)-1].Data, false)
	parts := make([][]float32, p)
	off := 0
	for s := range p {
		lo, hi := stageLayers(p, s)
		k := numParams(sizes[lo : hi+1])
		parts[s] = whole.grad[off : off+k]
		off += k
	}
	return parts, loss
}
