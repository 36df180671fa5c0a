package main

import (
	"math"
	"math/rand/v2"
)

// Float is the element type of the model: float32 for training (it is what
// goes over the wire), float64 for the gradient check.
type Float interface{ ~float32 | ~float64 }

// MLP is a two-layer perceptron in -> hidden (ReLU) -> out (softmax
// cross-entropy). All parameters live in one flat slice, Params, laid out as
//
//	W1 [hidden][in] | b1 [hidden] | W2 [out][hidden] | b2 [out]
//
// so that a gradient with the same layout can be reduced with one collective.
type MLP[F Float] struct {
	In, Hidden, Out int
	Params          []F
}

// numParams is the length of the flat parameter vector.
func numParams(in, hidden, out int) int { return hidden*in + hidden + out*hidden + out }

// newMLP returns a model with He-normal W1 (it feeds a ReLU), Glorot-normal
// W2 and zero biases, drawn from a PCG generator seeded by seed: the same seed
// gives bit-identical parameters on every rank.
func newMLP[F Float](in, hidden, out int, seed uint64) *MLP[F] {
	m := &MLP[F]{In: in, Hidden: hidden, Out: out, Params: make([]F, numParams(in, hidden, out))}
	rng := rand.New(rand.NewPCG(seed, 0x1417))
	w1, _, w2, _ := m.split(m.Params)
	sd1 := math.Sqrt(2 / float64(in))
	for i := range w1 {
		w1[i] = F(rng.NormFloat64() * sd1)
	}
	sd2 := math.Sqrt(2 / float64(hidden+out))
	for i := range w2 {
		w2[i] = F(rng.NormFloat64() * sd2)
	}
	return m
}

// split views a flat vector with the parameter layout as W1, b1, W2, b2.
func (m *MLP[F]) split(p []F) (w1, b1, w2, b2 []F) {
	o := 0
	next := func(n int) []F { s := p[o : o+n : o+n]; o += n; return s }
	w1 = next(m.Hidden * m.In)
	b1 = next(m.Hidden)
	w2 = next(m.Out * m.Hidden)
	b2 = next(m.Out)
	return
}

// lossGrad runs the samples x (row-major, len(y) rows of m.In) with labels y
// through the model. It returns the summed cross-entropy loss and the number
// of samples classified correctly. If grad is not nil (same layout as Params),
// the gradient of the summed loss is added to it.
func (m *MLP[F]) lossGrad(x []F, y []int, grad []F) (lossSum float64, correct int) {
	w1, b1, w2, b2 := m.split(m.Params)
	var g1, gb1, g2, gb2 []F
	if grad != nil {
		g1, gb1, g2, gb2 = m.split(grad)
	}
	h := make([]F, m.Hidden)  // hidden activations
	z := make([]F, m.Out)     // logits, then dLoss/dlogits
	dh := make([]F, m.Hidden) // dLoss/dhidden
	for s, label := range y {
		xs := x[s*m.In : (s+1)*m.In]
		// Forward: h = relu(W1 x + b1).
		for j := range h {
			row := w1[j*m.In : (j+1)*m.In]
			a := b1[j]
			for k, v := range xs {
				a += row[k] * v
			}
			h[j] = max(a, 0)
		}
		// z = W2 h + b2.
		best := 0
		for c := range z {
			row := w2[c*m.Hidden : (c+1)*m.Hidden]
			a := b2[c]
			for j, v := range h {
				a += row[j] * v
			}
			z[c] = a
			if a > z[best] {
				best = c
			}
		}
		if best == label {
			correct++
		}
		// loss = logsumexp(z) - z[label], computed stably in float64.
		zmax := float64(z[best])
		var sum float64
		for _, v := range z {
			sum += math.Exp(float64(v) - zmax)
		}
		lse := zmax + math.Log(sum)
		lossSum += lse - float64(z[label])
		if grad == nil {
			continue
		}
		// Backward: dz = softmax(z) - onehot(label).
		for c := range z {
			z[c] = F(math.Exp(float64(z[c]) - lse))
		}
		z[label]--
		for j := range dh {
			dh[j] = 0
		}
		for c, d := range z {
			gb2[c] += d
			row := w2[c*m.Hidden : (c+1)*m.Hidden]
			grow := g2[c*m.Hidden : (c+1)*m.Hidden]
			for j, v := range h {
				grow[j] += d * v
				dh[j] += d * row[j]
			}
		}
		// Through the ReLU, then into W1 and b1.
		for j, d := range dh {
			if h[j] <= 0 {
				continue
			}
			gb1[j] += d
			grow := g1[j*m.In : (j+1)*m.In]
			for k, v := range xs {
				grow[k] += d * v
			}
		}
	}
	return lossSum, correct
}

// meanGrad computes the gradient of the mean loss over the samples into grad
// (overwritten) and returns the mean loss. With no samples it leaves grad zero
// and returns 0: an empty shard contributes nothing.
func (m *MLP[F]) meanGrad(x []F, y []int, grad []F) (meanLoss float64) {
	clear(grad)
	if len(y) == 0 {
		return 0
	}
	lossSum, _ := m.lossGrad(x, y, grad)
	inv := 1 / F(len(y))
	for i := range grad {
		grad[i] *= inv
	}
	return lossSum / float64(len(y))
}

// sgdMomentum applies v = momentum*v + g; p -= lr*v (the PyTorch SGD form).
func sgdMomentum[F Float](params, vel, grad []F, lr, momentum F) {
	for i, g := range grad {
		v := momentum*vel[i] + g
		vel[i] = v
		params[i] -= lr * v
	}
}
