package main

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// params are the weights of the MLP block Y = GeLU(X·A + a)·B + b, in the
// paper's layout: A is h x 4h and B is 4h x h, row-major.
type params struct {
	h    int
	A, B blas32.General
	a, b []float32 // biases: a (4h) of the first layer, b (h) of the second
}

// newParams draws the full block's parameters from a PCG generator seeded by
// seed, so that every rank that passes the same seed holds the same values:
// A and B normal with variance 1/fan-in (the activations stay of order 1),
// both biases normal with standard deviation 0.1 (not zero, so that their
// handling is checked too).
func newParams(h int, seed uint64) *params {
	f := 4 * h
	p := &params{h: h,
		A: blas32.General{Rows: h, Cols: f, Stride: f, Data: make([]float32, h*f)},
		B: blas32.General{Rows: f, Cols: h, Stride: h, Data: make([]float32, f*h)},
		a: make([]float32, f), b: make([]float32, h)}
	rng := rand.New(rand.NewPCG(seed, 0x7e45))
	fill := func(x []float32, sd float64) {
		for i := range x {
			x[i] = float32(rng.NormFloat64() * sd)
		}
	}
	fill(p.A.Data, math.Sqrt(1/float64(h)))
	fill(p.a, 0.1)
	fill(p.B.Data, math.Sqrt(1/float64(f)))
	fill(p.b, 0.1)
	return p
}

// shard is what one of size ranks holds of the block: A_i, the columns
// [off, off+f) of A (and of a), and B_i, the same rows of B; b whole (it is
// added once, after the AllReduce).
type shard struct {
	h, f, off int
	A, B      blas32.General // h x f, f x h
	a, b      []float32      // f, h
}

// errShards is the error for a world size that does not split 4h evenly.
func errShards(h, size int) error {
	return fmt.Errorf("world size %d does not divide 4h = %d (-hidden %d): the column split of A and the row split of B need equal shards", size, 4*h, h)
}

// shardOf copies rank's shard of p for a world of size ranks.
func (p *params) shardOf(rank, size int) (*shard, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("rank %d out of range for world size %d", rank, size)
	}
	if (4*p.h)%size != 0 {
		return nil, errShards(p.h, size)
	}
	f := 4 * p.h / size
	s := &shard{h: p.h, f: f, off: rank * f,
		A: blas32.General{Rows: p.h, Cols: f, Stride: f, Data: make([]float32, p.h*f)},
		B: blas32.General{Rows: f, Cols: p.h, Stride: p.h, Data: make([]float32, f*p.h)},
		a: append([]float32(nil), p.a[rank*f:(rank+1)*f]...),
		b: append([]float32(nil), p.b...)}
	for r := range p.h {
		copy(s.A.Data[r*f:(r+1)*f], p.A.Data[r*p.A.Stride+s.off:])
	}
	copy(s.B.Data, p.B.Data[s.off*p.B.Stride:(s.off+f)*p.B.Stride])
	return s, nil
}

// gelu is the exact GeLU, x·Φ(x), and gelu' its derivative Φ(x) + x·φ(x),
// computed in float64.
func gelu(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Erf(v/math.Sqrt2)))
}

func geluGrad(x float32) float32 {
	v := float64(x)
	return float32(0.5*(1+math.Erf(v/math.Sqrt2)) + v*math.Exp(-0.5*v*v)/math.Sqrt(2*math.Pi))
}

// matrix returns a rows x cols zero matrix.
func matrix(rows, cols int) blas32.General {
	return blas32.General{Rows: rows, Cols: cols, Stride: cols, Data: make([]float32, rows*cols)}
}

// cache is what the forward pass keeps for the backward pass.
type cache struct {
	X, Z, H blas32.General // input (n x h), pre-activation and GeLU (n x f)
}

// forwardLocal is the shard's part of the forward pass, with no
// communication: Z_i = X·A_i + a_i, H_i = GeLU(Z_i) (the column-parallel
// linear), and P_i = H_i·B_i, this shard's partial sum of the output (the
// row-parallel linear before its AllReduce). P_i is written to p (n x h).
func (s *shard) forwardLocal(X blas32.General, p []float32) cache {
	n := X.Rows
	c := cache{X: X, Z: matrix(n, s.f), H: matrix(n, s.f)}
	for r := range n {
		copy(c.Z.Data[r*s.f:(r+1)*s.f], s.a)
	}
	blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, X, s.A, 1, c.Z)
	for i, v := range c.Z.Data {
		c.H.Data[i] = gelu(v)
	}
	P := blas32.General{Rows: n, Cols: s.h, Stride: s.h, Data: p[:n*s.h]}
	blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, c.H, s.B, 0, P)
	return c
}

// addBias adds b to every row of the n x h matrix y (after the AllReduce:
// once, not once per rank).
func addBias(y, b []float32) {
	for r := 0; r < len(y); r += len(b) {
		for j, v := range b {
			y[r+j] += v
		}
	}
}

// grads are the gradients of one shard's parameters.
type grads struct {
	A, B blas32.General // h x f, f x h
	a, b []float32      // f, h
}

// backwardLocal is the shard's part of the backward pass, with no
// communication, from dY (n x h, the gradient of the block's output, the same
// on every rank): the gradients of its parameters, and its partial sum of the
// input gradient, dX_i = dZ_i·A_iᵀ, written to dx (n x h).
func (s *shard) backwardLocal(c cache, dY blas32.General, dx []float32) grads {
	n := dY.Rows
	g := grads{A: matrix(s.h, s.f), B: matrix(s.f, s.h), a: make([]float32, s.f), b: make([]float32, s.h)}
	// dB_i = H_iᵀ·dY, db = column sums of dY (b is replicated).
	blas32.Gemm(blas.Trans, blas.NoTrans, 1, c.H, dY, 0, g.B)
	for r := range n {
		for j, v := range dY.Data[r*dY.Stride : r*dY.Stride+s.h] {
			g.b[j] += v
		}
	}
	// dZ_i = (dY·B_iᵀ) ⊙ GeLU'(Z_i).
	dZ := matrix(n, s.f)
	blas32.Gemm(blas.NoTrans, blas.Trans, 1, dY, s.B, 0, dZ)
	for i, z := range c.Z.Data {
		dZ.Data[i] *= geluGrad(z)
	}
	// dA_i = Xᵀ·dZ_i, da_i = column sums of dZ_i.
	blas32.Gemm(blas.Trans, blas.NoTrans, 1, c.X, dZ, 0, g.A)
	for r := range n {
		for j, v := range dZ.Data[r*s.f : (r+1)*s.f] {
			g.a[j] += v
		}
	}
	// dX_i = dZ_i·A_iᵀ: this shard's part of dX.
	DX := blas32.General{Rows: n, Cols: s.h, Stride: s.h, Data: dx[:n*s.h]}
	blas32.Gemm(blas.NoTrans, blas.Trans, 1, dZ, s.A, 0, DX)
	return g
}
