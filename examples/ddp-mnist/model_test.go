package main

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestNumParams(t *testing.T) {
	cfg, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	// 784*1024+1024 + 1024*256+256 + 256*10+10
	if got := numParams(cfg.sizes()); got != 1068810 {
		t.Errorf("default model has %d parameters, want 1068810", got)
	}
	m := newMLP([]int{3, 4, 2}, 1)
	ls := m.layers
	if len(ls) != 2 || &ls[0].W.Data[0] != &m.Params[0] || &ls[0].B[0] != &m.Params[12] ||
		&ls[1].W.Data[0] != &m.Params[16] || &ls[1].B[1] != &m.Params[len(m.Params)-1] {
		t.Errorf("layer views do not tile Params in order")
	}
}

// TestGradientCheck compares the backward pass of a tiny model with central
// finite differences of the mean loss, for every parameter. The model is
// float32, so the step and the tolerance are loose but still catch any
// transposed product, missing bias term or wrong ReLU mask.
func TestGradientCheck(t *testing.T) {
	sizes := []int{7, 6, 5, 4}
	const n = 5
	m := newMLP(sizes, 3)
	rng := rand.New(rand.NewPCG(9, 9))
	for i := range m.Params { // non-zero biases too
		m.Params[i] += float32(rng.NormFloat64() * 0.1)
	}
	x := make([]float32, n*sizes[0])
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := []uint8{0, 3, 1, 2, 3}
	grad := make([]float32, len(m.Params))
	m.lossGrad(x, y, grad)
	meanLoss := func() float64 { l, _ := m.lossGrad(x, y, nil); return l / n }
	const eps = 1e-3
	worst := 0.0
	for i := range m.Params {
		p := m.Params[i]
		m.Params[i] = p + eps
		up := meanLoss()
		m.Params[i] = p - eps
		down := meanLoss()
		m.Params[i] = p
		num := (up - down) / (2 * eps)
		diff := math.Abs(num - float64(grad[i]))
		if diff > 1e-3+1e-2*math.Abs(num) {
			t.Errorf("parameter %d: backward %.6g, finite difference %.6g", i, grad[i], num)
		}
		worst = max(worst, diff)
	}
	t.Logf("%d parameters, largest |backward - finite difference| %.3g", len(m.Params), worst)
}
