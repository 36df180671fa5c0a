// Package nn is what the training examples' models are made of: dense
// layers over gonum's float32 BLAS, ReLU and softmax cross-entropy, on
// row-major float32 matrices (a batch of n rows).
package nn

import (
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

func mat(rows, cols int, d []float32) blas32.General {
	return blas32.General{Rows: rows, Cols: cols, Stride: cols, Data: d[:rows*cols]}
}

// Linear computes y = x W^T + b for the n x in batch x, w being out x in
// (out = len(b)) and y n x out.
func Linear(x []float32, n int, w, b, y []float32) {
	out := len(b)
	if n == 0 {
		return
	}
	in := len(w) / out
	for r := range n {
		copy(y[r*out:(r+1)*out], b)
	}
	blas32.Gemm(blas.NoTrans, blas.Trans, 1, mat(n, in, x), mat(out, in, w), 1, mat(n, out, y))
}

// LinearBackward is Linear's backward for the gradient dy (n x out): it
// writes dw = dy^T x and db = the column sums of dy, and, when dx is not
// nil, dx = dy W (n x in).
func LinearBackward(x []float32, n int, w, dy, dw, db, dx []float32) {
	out := len(db)
	in := len(w) / out
	clear(db)
	if n == 0 {
		clear(dw)
		return
	}
	for r := range n {
		for j, v := range dy[r*out : (r+1)*out] {
			db[j] += v
		}
	}
	blas32.Gemm(blas.Trans, blas.NoTrans, 1, mat(n, out, dy), mat(n, in, x), 0, mat(out, in, dw))
	if dx != nil {
		blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, mat(n, out, dy), mat(out, in, w), 0, mat(n, in, dx))
	}
}

// ReLU applies max(v, 0) in place.
func ReLU(y []float32) {
	for i, v := range y {
		y[i] = max(v, 0)
	}
}

// ReLUBackward zeroes the gradient dy where the ReLU's output y is 0.
func ReLUBackward(y, dy []float32) {
	for i, v := range y {
		if v <= 0 {
			dy[i] = 0
		}
	}
}

// SoftmaxCrossEntropy scores the n x classes logits (n = len(labels))
// against labels: it returns the summed cross-entropy loss (computed
// stably in float64) and the rows whose largest logit is the label, and
// overwrites the logits with the loss's gradient times scale, scale *
// (softmax - onehot) (scale 1/B for the mean over a batch of B).
func SoftmaxCrossEntropy(logits []float32, classes int, labels []uint8, scale float32) (lossSum float64, correct int) {
	for r, label := range labels {
		row := logits[r*classes : (r+1)*classes]
		best := Argmax(row)
		if best == int(label) {
			correct++
		}
		zmax, sum := float64(row[best]), 0.0
		for _, v := range row {
			sum += math.Exp(float64(v) - zmax)
		}
		lse := zmax + math.Log(sum)
		lossSum += lse - float64(row[label])
		for c, v := range row {
			row[c] = float32(math.Exp(float64(v)-lse) * float64(scale))
		}
		row[label] -= scale
	}
	return lossSum, correct
}

// InitLinear fills w (out x in) with He-normal weights (sd sqrt(2/in), for
// a layer in front of a ReLU) drawn from rng, and zeroes b.
func InitLinear(rng *rand.Rand, w, b []float32) {
	in := len(w) / len(b)
	sd := math.Sqrt(2 / float64(in))
	for i := range w {
		w[i] = float32(rng.NormFloat64() * sd)
	}
	clear(b)
}

// Argmax is the index of row's largest value, the first of equal ones.
func Argmax(row []float32) int {
	best := 0
	for c, v := range row {
		if v > row[best] {
			best = c
		}
	}
	return best
}

// Grow returns s with length n, reusing its array when it is large enough
// (the contents are not kept): a layer's activations from step to step.
func Grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}
