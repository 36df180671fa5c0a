package nn

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestGradientCheck: Linear, ReLU, Linear, SoftmaxCrossEntropy's backward
// against central differences of the loss in float64-accumulated float32.
func TestGradientCheck(t *testing.T) {
	const n, in, hid, classes = 5, 7, 6, 4
	rng := rand.New(rand.NewPCG(1, 2))
	w1, b1 := make([]float32, hid*in), make([]float32, hid)
	w2, b2 := make([]float32, classes*hid), make([]float32, classes)
	InitLinear(rng, w1, b1)
	InitLinear(rng, w2, b2)
	for i := range b1 {
		b1[i] = float32(rng.NormFloat64()) * 0.1
	}
	x := make([]float32, n*in)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	labels := []uint8{0, 3, 1, 2, 3}
	h, z := make([]float32, n*hid), make([]float32, n*classes)
	loss := func() float64 {
		Linear(x, n, w1, b1, h)
		ReLU(h)
		Linear(h, n, w2, b2, z)
		l, _ := SoftmaxCrossEntropy(z, classes, labels, 1)
		return l
	}
	loss()
	dw1, db1 := make([]float32, len(w1)), make([]float32, len(b1))
	dw2, db2 := make([]float32, len(w2)), make([]float32, len(b2))
	dh, dx := make([]float32, len(h)), make([]float32, len(x))
	LinearBackward(h, n, w2, z, dw2, db2, dh)
	ReLUBackward(h, dh)
	LinearBackward(x, n, w1, dh, dw1, db1, dx)
	for _, p := range []struct {
		name string
		v, g []float32
	}{{"w1", w1, dw1}, {"b1", b1, db1}, {"w2", w2, dw2}, {"b2", b2, db2}, {"x", x, dx}} {
		for i := range p.v {
			const eps = 1e-2
			old := p.v[i]
			p.v[i] = old + eps
			up := loss()
			p.v[i] = old - eps
			down := loss()
			p.v[i] = old
			num := (up - down) / (2 * eps)
			if math.Abs(num-float64(p.g[i])) > 2e-3+2e-2*math.Abs(num) {
				t.Errorf("d loss / d %s[%d] = %g, central difference %g", p.name, i, p.g[i], num)
			}
		}
	}
}
