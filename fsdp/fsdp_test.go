package fsdp_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ddp"
	"github.com/goccl/goccl/fsdp"
	"github.com/goccl/goccl/internal/ranktest"
)

// The test model: a 3-layer perceptron, 8 -> 16 -> 16 -> 4, tanh between
// layers, squared error; each layer one unit (weights row-major, then the
// bias). Unit lengths 144, 272 and 68: none a multiple of 3, so every shard
// layout pads.
var dims = []int{8, 16, 16, 4}

const batch = 6 // samples per rank and step

func unitLen(l int) int { return dims[l+1]*dims[l] + dims[l+1] }

func initUnits() [][]float32 {
	r := rand.New(rand.NewPCG(1, 2))
	units := make([][]float32, len(dims)-1)
	for l := range units {
		units[l] = make([]float32, unitLen(l))
		for i := range units[l] {
			units[l][i] = float32(r.NormFloat64() * 0.4)
		}
	}
	return units
}

// sampleOf is rank r's sample i of step s (input, target).
func sampleOf(r, s, i int) (x, y []float32) {
	g := rand.New(rand.NewPCG(uint64(r*1000+s), uint64(i)))
	x, y = make([]float32, dims[0]), make([]float32, dims[3])
	for k := range x {
		x[k] = float32(g.Float64()*2 - 1)
	}
	for k := range y {
		y[k] = float32(math.Sin(float64(x[k]) + float64(x[k+4])))
	}
	return x, y
}

// layer applies unit p of layer l to in.
func layer(l int, p, in []float32, act bool) []float32 {
	no, ni := dims[l+1], dims[l]
	out := make([]float32, no)
	for o := range no {
		s := p[no*ni+o]
		for i := range ni {
			s += p[o*ni+i] * in[i]
		}
		if act {
			s = float32(math.Tanh(float64(s)))
		}
		out[o] = s
	}
	return out
}

// model runs one step's forward and backward over this rank's batch:
// forward(l) gives layer l's parameters for the forward, backward(l) its
// parameters and the gradient buffer (zeroed) for the backward, and done(l)
// is called once layer l's gradient is final (last layer first).
func model(r, s int, forward func(l int) []float32, backward func(l int) (p, g []float32), done func(l int) error) error {
	L := len(dims) - 1
	acts := make([][][]float32, batch) // per sample: input of each layer, then the output
	for i := range batch {
		x, _ := sampleOf(r, s, i)
		acts[i] = [][]float32{x}
	}
	for l := range L {
		p := forward(l)
		for i := range batch {
			acts[i] = append(acts[i], layer(l, p, acts[i][l], l < L-1))
		}
	}
	deltas := make([][]float32, batch) // dLoss/d(pre-activation) of the current layer
	for i := range batch {
		_, y := sampleOf(r, s, i)
		out := acts[i][L]
		deltas[i] = make([]float32, len(out))
		for k := range out {
			deltas[i][k] = (out[k] - y[k]) / batch
		}
	}
	for l := L - 1; l >= 0; l-- {
		p, g := backward(l)
		no, ni := dims[l+1], dims[l]
		for i := range batch {
			in := acts[i][l]
			for o := range no {
				for k := range ni {
					g[o*ni+k] += deltas[i][o] * in[k]
				}
				g[no*ni+o] += deltas[i][o]
			}
			if l > 0 { // the delta of the layer below, through its tanh
				d := make([]float32, ni)
				for k := range ni {
					var s float32
					for o := range no {
						s += p[o*ni+k] * deltas[i][o]
					}
					d[k] = s * (1 - in[k]*in[k])
				}
				deltas[i] = d
			}
		}
		if err := done(l); err != nil {
			return err
		}
	}
	return nil
}

const steps = 5

// newOpt makes the optimizer of a run: Adam, or SGD (Adam hides a scaling
// of the gradient, SGD does not).
var newOpt = func() fsdp.Optimizer { return fsdp.NewAdam(0.01) }

// trainDDP trains with package ddp and newOpt's optimizer on the whole
// vectors.
func trainDDP(ctx context.Context, c *goccl.Comm) ([][]float32, error) {
	params := initUnits()
	d, err := ddp.New(ctx, c, params, ddp.Options{})
	if err != nil {
		return nil, err
	}
	opt := newOpt()
	for s := range steps {
		d.ZeroGrad()
		err := model(c.Rank(), s, func(l int) []float32 { return params[l] },
			func(l int) ([]float32, []float32) { return params[l], d.Grad(l) },
			func(l int) error { return d.MarkReady(l) })
		if err == nil {
			err = d.Wait(ctx)
		}
		if err != nil {
			return nil, err
		}
		for l := range params {
			opt.Step(l, params[l], d.Grad(l))
		}
	}
	return params, nil
}

// trainFSDP trains with package fsdp (c: the shard group).
func trainFSDP(ctx context.Context, c *goccl.Comm, rank int, o fsdp.Options) ([][]float32, *fsdp.FSDP, error) {
	f, err := fsdp.New(ctx, c, initUnits(), newOpt(), o)
	if err != nil {
		return nil, nil, err
	}
	var ferr error
	keep := func(err error) {
		if err != nil && ferr == nil {
			ferr = err
		}
	}
	for s := range steps {
		err := model(rank, s,
			func(l int) []float32 { p, err := f.Forward(ctx, l); keep(err); return p },
			func(l int) ([]float32, []float32) { p, g, err := f.Backward(ctx, l); keep(err); return p, g },
			func(l int) error { return f.ReduceGrad(ctx, l) })
		if err == nil {
			err = ferr
		}
		if err == nil {
			err = f.Step(ctx)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	params := make([][]float32, f.Units())
	for u := range params {
		params[u] = make([]float32, f.Len(u))
		if err := f.Params(ctx, u, params[u]); err != nil {
			return nil, nil, err
		}
	}
	return params, f, nil
}

// relDiff is max |a-b| / max |a| over all elements.
func relDiff(a, b [][]float32) float64 {
	var d, m float64
	for u := range a {
		for i := range a[u] {
			d = max(d, math.Abs(float64(a[u][i]-b[u][i])))
			m = max(m, math.Abs(float64(a[u][i])))
		}
	}
	return d / m
}

// TestEqualsDDP trains the model 5 Adam steps with ddp and with each ZeRO
// stage on 1 to 4 goroutine ranks: the parameters agree within 1e-5, and
// each rank holds the shares of the model the stage promises, in bytes.
// TestEqualsDDPSGD does it with SGD.
func TestEqualsDDP(t *testing.T) { testEqualsDDP(t, 8) }

func TestEqualsDDPSGD(t *testing.T) {
	newOpt = func() fsdp.Optimizer { return &fsdp.SGD{LR: 0.1} }
	defer func() { newOpt = func() fsdp.Optimizer { return fsdp.NewAdam(0.01) } }()
	testEqualsDDP(t, 0)
}

// testEqualsDDP: optBytes is the optimizer's state per element.
func testEqualsDDP(t *testing.T, optBytes int) {
	total := 0
	for l := range len(dims) - 1 {
		total += unitLen(l)
	}
	for _, n := range []int{1, 2, 3, 4} {
		for _, stage := range []fsdp.Stage{fsdp.ZeRO1, fsdp.ZeRO2, fsdp.ZeRO3} {
			t.Run(fmt.Sprintf("ranks=%d/zero%d", n, stage), func(t *testing.T) {
				var mu sync.Mutex
				ranktest.Run(t, n, time.Minute, func(ctx context.Context, c *goccl.Comm) error {
					want, err := trainDDP(ctx, c)
					if err != nil {
						return err
					}
					got, f, err := trainFSDP(ctx, c, c.Rank(), fsdp.Options{Stage: stage})
					if err != nil {
						return err
					}
					if d := relDiff(want, got); d > 1e-5 {
						return fmt.Errorf("rank %d: parameters differ from ddp's by %.3g (relative)", c.Rank(), d)
					}
					shard := 0 // elements of this rank's shards, padding included
					for l := range len(dims) - 1 {
						shard += (unitLen(l) + n - 1) / n
					}
					m := f.Memory()
					mu.Lock()
					defer mu.Unlock()
					if m.OptState != int64(optBytes*shard) {
						return fmt.Errorf("rank %d: optimizer state %d bytes, want %d (%d per element of the shards)", c.Rank(), m.OptState, optBytes*shard, optBytes)
					}
					switch stage {
					case fsdp.ZeRO1, fsdp.ZeRO2:
						if m.Params != int64(4*shard*n) {
							return fmt.Errorf("rank %d: parameters %d bytes, want the whole model padded (%d)", c.Rank(), m.Params, 4*shard*n)
						}
					case fsdp.ZeRO3:
						if m.Params != int64(4*shard) {
							return fmt.Errorf("rank %d: parameters %d bytes, want the shards (%d)", c.Rank(), m.Params, 4*shard)
						}
					}
					largest := 0 // the largest unit, padded
					for l := range len(dims) - 1 {
						largest = max(largest, (unitLen(l)+n-1)/n*n)
					}
					if wantG := int64(4 * (shard + 2*largest)); stage != fsdp.ZeRO1 && m.Grads != wantG {
						return fmt.Errorf("rank %d: gradients %d bytes, want the shards and two unit buffers (%d)", c.Rank(), m.Grads, wantG)
					}
					if c.Rank() == 0 {
						t.Logf("model %d B; rank 0 holds %+v (total %d B)", 4*total, m, m.Total())
					}
					return nil
				})
			})
		}
	}
}

// TestHSDP: 4 ranks as a 2x2 mesh (replicate x shard), ZeRO3 and ZeRO2
// sharded over "shard" and replicated over "replicate": the same parameters
// as ddp over all 4.
func TestHSDP(t *testing.T) {
	for _, stage := range []fsdp.Stage{fsdp.ZeRO2, fsdp.ZeRO3} {
		t.Run(fmt.Sprintf("zero%d", stage), func(t *testing.T) {
			ranktest.Run(t, 4, time.Minute, func(ctx context.Context, c *goccl.Comm) error {
				want, err := trainDDP(ctx, c)
				if err != nil {
					return err
				}
				m, err := goccl.NewMesh(ctx, c, []int{2, 2}, []string{"replicate", "shard"})
				if err != nil {
					return err
				}
				defer m.Close()
				got, _, err := trainFSDP(ctx, m.Comm("shard"), c.Rank(), fsdp.Options{Stage: stage, Replicate: m.Comm("replicate")})
				if err != nil {
					return err
				}
				if d := relDiff(want, got); d > 1e-5 {
					return fmt.Errorf("rank %d: parameters differ from ddp's by %.3g (relative)", c.Rank(), d)
				}
				return nil
			})
		})
	}
}

// TestPrefetch: under ZeRO3 the forward issues each unit's AllGather while
// the previous unit is in use (counted), and turning prefetch off changes
// no result.
func TestPrefetch(t *testing.T) {
	ranktest.Run(t, 2, time.Minute, func(ctx context.Context, c *goccl.Comm) error {
		with, f, err := trainFSDP(ctx, c, c.Rank(), fsdp.Options{Stage: fsdp.ZeRO3})
		if err != nil {
			return err
		}
		without, g, err := trainFSDP(ctx, c, c.Rank(), fsdp.Options{Stage: fsdp.ZeRO3, NoPrefetch: true})
		if err != nil {
			return err
		}
		if d := relDiff(with, without); d != 0 {
			return fmt.Errorf("prefetch changed the parameters by %.3g", d)
		}
		// Per step: 3 gathers in the forward and 1 in the backward (units
		// 2 and 1 are still in the two buffers from the forward), with or
		// without prefetch; with it, 3 of them issued ahead (units 1 and 2
		// in the forward, 0 in the backward).
		fs, gs := f.Stats(), g.Stats()
		if fs.Gathered != 4*steps || gs.Gathered != 4*steps || fs.Prefetched != 3*steps || gs.Prefetched != 0 {
			return fmt.Errorf("AllGathers (prefetched): %d (%d) with prefetch, %d (%d) without, want %d (%d) and %d (0)",
				fs.Gathered, fs.Prefetched, gs.Gathered, gs.Prefetched, 4*steps, 3*steps, 4*steps)
		}
		return nil
	})
}

// TestMisuse: calls out of the documented order are refused with errors
// naming the units, before any collective that could hang.
func TestMisuse(t *testing.T) {
	ranktest.Run(t, 1, time.Minute, func(ctx context.Context, c *goccl.Comm) error {
		f, err := fsdp.New(ctx, c, initUnits(), fsdp.NewAdam(0.01), fsdp.Options{Stage: fsdp.ZeRO2})
		if err != nil {
			return err
		}
		want := func(err error, text string) error {
			if err == nil || !strings.Contains(err.Error(), text) {
				return fmt.Errorf("got %v, want an error with %q", err, text)
			}
			return nil
		}
		for _, e := range []error{
			want(f.Step(ctx), "Step before unit 0's ReduceGrad"),
			want(f.ReduceGrad(ctx, 3), "unit 3 outside [0, 3)"),
			want(f.ReduceGrad(ctx, 2), "ReduceGrad(2) without its Backward"),
		} {
			if e != nil {
				return e
			}
		}
		if _, _, err := f.Backward(ctx, 2); err != nil {
			return err
		}
		_, _, err = f.Backward(ctx, 1)
		if e := want(err, "Backward(1) before ReduceGrad(2)"); e != nil {
			return e
		}
		if err := f.ReduceGrad(ctx, 2); err != nil {
			return err
		}
		if e := want(f.ReduceGrad(ctx, 2), "unit 2's gradient already reduced"); e != nil {
			return e
		}
		_, err = fsdp.New(ctx, c, initUnits(), fsdp.NewAdam(0.01), fsdp.Options{Stage: 4})
		return want(err, "stage 4")
	})
}
