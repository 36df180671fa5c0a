package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
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

// recordSink records the order in which the backward pass reports parts.
type recordSink struct{ parts [][3]int } // layer, r0, r1 (r0 = r1 = -1: bias; all -1: the backward starts)

func (s *recordSink) backward()        { s.parts = append(s.parts, [3]int{-1, -1, -1}) }
func (s *recordSink) bias(l int) error { s.parts = append(s.parts, [3]int{l, -1, -1}); return nil }
func (s *recordSink) rows(l, r0, r1 int) error {
	s.parts = append(s.parts, [3]int{l, r0, r1})
	return nil
}

// TestChunkedBackward: the weight gradient computed in row blocks of 3
// (into separate slices) equals the one computed whole, and the parts are
// reported after the start of the backward pass, last layer first, bias
// first, last rows first.
func TestChunkedBackward(t *testing.T) {
	sizes := []int{5, 7, 4}
	m := newMLP(sizes, 3)
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 6*sizes[0])
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := []uint8{0, 1, 2, 3, 1, 0}
	whole := make([]float32, len(m.Params))
	m.lossGrad(x, y, whole)
	var gl []gradLayer
	for _, ly := range m.layers {
		g := gradLayer{Out: ly.Out, B: make([]float32, ly.Out)}
		for _, b := range rowBlocks(ly.Out, 3) {
			g.W = append(g.W, make([]float32, (b[1]-b[0])*ly.In))
		}
		gl = append(gl, g)
	}
	var sink recordSink
	if _, _, err := m.lossGradLayers(x, y, gl, 3, &sink); err != nil {
		t.Fatal(err)
	}
	want := [][3]int{{-1, -1, -1}, {1, -1, -1}, {1, 1, 4}, {1, 0, 1}, {0, -1, -1}, {0, 4, 7}, {0, 1, 4}, {0, 0, 1}}
	if len(sink.parts) != len(want) {
		t.Fatalf("parts reported: %v, want %v", sink.parts, want)
	}
	for i := range want {
		if sink.parts[i] != want[i] {
			t.Fatalf("parts reported: %v, want %v", sink.parts, want)
		}
	}
	for l, ly := range views(sizes, whole) {
		for k, b := range rowBlocks(ly.Out, 3) {
			for i, v := range gl[l].W[k] {
				if w := ly.W.Data[b[0]*ly.In+i]; v != w {
					t.Fatalf("layer %d block %d element %d: %v, whole %v", l, k, i, v, w)
				}
			}
		}
		for i, v := range gl[l].B {
			if v != ly.B[i] {
				t.Fatalf("layer %d bias %d: %v, whole %v", l, i, v, ly.B[i])
			}
		}
	}
}

// TestPercentileMS: nearest-rank percentiles of step times.
func TestPercentileMS(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // 1..100 ms, unsorted
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct{ p, want float64 }{{50, 50}, {99, 99}, {100, 100}, {1, 1}, {0, 1}} {
		if got := percentileMS(slices.Clone(ds), c.p); got != c.want {
			t.Errorf("p%v = %v ms, want %v", c.p, got, c.want)
		}
	}
	if got := percentileMS([]time.Duration{3 * time.Millisecond, 40 * time.Millisecond}, 99); got != 40 {
		t.Errorf("p99 of 2 steps = %v, want the slower (40)", got)
	}
	if got := percentileMS(nil, 50); got != 0 {
		t.Errorf("p50 of none = %v, want 0", got)
	}
}
