package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ddp"
	"github.com/goccl/goccl/examples/internal/mnist"
	"github.com/goccl/goccl/internal/ranktest"
)

// small is a model small enough to check by central differences.
var small = shape{in: 6, hidden: 5, ffn: 4, classes: 3, experts: 4, k: 2}

// batchOf is a fixed random batch of n samples for shape s.
func batchOf(s shape, n int) ([]float32, []uint8) {
	g := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, n*s.in)
	for i := range x {
		x[i] = float32(g.NormFloat64())
	}
	y := make([]uint8, n)
	for i := range y {
		y[i] = uint8(g.IntN(s.classes))
	}
	return x, y
}

// gradients is what a rank computed: the replicated gradient (summed
// over the ranks) and each global expert's, by expert number.
type gradients struct {
	rep  []float32
	exp  map[int][]float32
	loss float64
}

// gradientOn computes the gradient of the global batch (x, y) on n ranks,
// each taking its shard, with no capacity limit.
func gradientOn(t *testing.T, n int, s shape, x []float32, y []uint8, aux float32) gradients {
	t.Helper()
	got := gradients{exp: map[int][]float32{}}
	var mu sync.Mutex
	ranktest.Run(t, n, time.Minute, func(ctx context.Context, c *goccl.Comm) error {
		m, err := newModel(c, s, 3, 0, aux, 1e-3)
		if err != nil {
			return err
		}
		lo, hi := ddp.Shard(len(y), n, c.Rank())
		loss, _, err := m.gradient(ctx, x[lo*s.in:hi*s.in], y[lo:hi], len(y))
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		got.loss += loss
		if c.Rank() == 0 {
			got.rep = append([]float32(nil), m.repGrad[:len(m.rep)]...)
		}
		for e, g := range m.expGrad {
			got.exp[c.Rank()*m.local+e] = append([]float32(nil), g...)
		}
		return nil
	})
	return got
}

func relDiff(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i] - b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / max(den, 1e-30))
}

// TestDistributedEqualsOneRank: the gradient of a global batch on 2 and 4
// ranks, experts sharded and tokens exchanged, equals the one-rank
// gradient with all experts local (no capacity limit, so nothing drops).
// The load-balancing loss is per rank by definition, so it is off here.
func TestDistributedEqualsOneRank(t *testing.T) {
	s := shape{in: mnist.Features, hidden: 16, ffn: 12, classes: mnist.Classes, experts: 4, k: 2}
	train, _, err := mnist.Load()
	if err != nil {
		t.Fatal(err)
	}
	idx := make([]int, 37)
	for i := range idx {
		idx[i] = i
	}
	x := make([]float32, len(idx)*s.in)
	train.Input(idx, x)
	want := gradientOn(t, 1, s, x, train.Labels[:len(idx)], 0)
	for _, n := range []int{2, 4} {
		got := gradientOn(t, n, s, x, train.Labels[:len(idx)], 0)
		if d := relDiff(got.rep, want.rep); d > 1e-5 {
			t.Errorf("%d ranks: replicated gradient differs from one rank's by %.2g", n, d)
		}
		for e := range s.experts {
			if d := relDiff(got.exp[e], want.exp[e]); d > 1e-5 || len(got.exp[e]) != s.ffnLen() {
				t.Errorf("%d ranks: expert %d's gradient differs from one rank's by %.2g", n, e, d)
			}
		}
		if math.Abs(got.loss-want.loss) > 1e-4*want.loss {
			t.Errorf("%d ranks: loss %g, one rank %g", n, got.loss, want.loss)
		}
	}
}

// TestGradientCheck: the backward pass, gate and load-balancing loss
// included, against central differences of the loss on one rank, for
// the MoE block and the dense one.
func TestGradientCheck(t *testing.T) {
	for _, s := range []shape{small, {in: 6, hidden: 5, ffn: 4, classes: 3}} {
		t.Run(fmt.Sprintf("experts=%d", s.experts), func(t *testing.T) {
			const n, aux = 7, 0.5
			x, y := batchOf(s, n)
			ranktest.Run(t, 1, time.Minute, func(ctx context.Context, c *goccl.Comm) error {
				m, err := newModel(c, s, 3, 0, aux, 1e-3)
				if err != nil {
					return err
				}
				for i := range m.rep {
					m.rep[i] += 0.05 * float32(math.Sin(float64(i))) // biases off zero
				}
				// loss is the objective whose gradient backward computes:
				// the mean cross-entropy plus aux * E * sum_e f_e P_e with
				// f_e the share of choices (held at its value at the
				// point, as backward does) and P_e the mean probability.
				var frac []float32
				loss := func() float64 {
					if err := m.forward(ctx, x, n, 0); err != nil {
						t.Fatal(err)
					}
					l, _ := crossEntropy(m.logits, s.classes, y)
					l /= n
					if s.experts == 0 {
						return l
					}
					if frac == nil {
						frac = make([]float32, s.experts)
						for _, e := range m.choices {
							frac[e] += 1 / float32(n*s.k)
						}
					}
					for e := range s.experts {
						var p float64
						for t := range n {
							p += float64(m.probs[t*s.experts+e]) / n
						}
						l += aux * float64(s.experts) * float64(frac[e]) * p
					}
					return l
				}
				loss()
				choices := append([]int(nil), m.choices...)
				if _, _, err := m.gradient(ctx, x, y, n); err != nil {
					return err
				}
				params := [][]float32{m.rep}
				grads := [][]float32{m.repGrad[:len(m.rep)]}
				for e := range m.exp {
					params, grads = append(params, m.exp[e]), append(grads, m.expGrad[e])
				}
				bad := 0
				for p := range params {
					for i := range params[p] {
						const eps = 1e-3
						old := params[p][i]
						params[p][i] = old + eps
						up := loss()
						params[p][i] = old - eps
						down := loss()
						params[p][i] = old
						if s.experts > 0 && !slices.Equal(m.choices, choices) {
							continue // the perturbation changed the routing: not differentiable here
						}
						num := (up - down) / (2 * eps)
						if g := float64(grads[p][i]); math.Abs(num-g) > 1e-3+2e-2*math.Abs(num) {
							if bad++; bad < 10 {
								t.Errorf("tensor %d [%d]: gradient %g, central difference %g", p, i, g, num)
							}
						}
					}
				}
				return nil
			})
		})
	}
}

// crossEntropy is the summed softmax cross-entropy of the logits, without
// touching them.
func crossEntropy(logits []float32, classes int, y []uint8) (float64, int) {
	var sum float64
	for r, label := range y {
		row := logits[r*classes : (r+1)*classes]
		zmax := float64(row[0])
		for _, v := range row {
			zmax = max(zmax, float64(v))
		}
		var s float64
		for _, v := range row {
			s += math.Exp(float64(v) - zmax)
		}
		sum += zmax + math.Log(s) - float64(row[label])
	}
	return sum, 0
}

// TestTrainTwoRanks trains on 2 ranks for 500 steps and checks the output
// and that the experts learned: test accuracy >= 0.93, the load within
// 2x of even, and the same result on both ranks.
func TestTrainTwoRanks(t *testing.T) {
	trainSet, testSet, err := mnist.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags([]string{"-steps", "500", "-hidden", "64", "-ffn", "64", "-experts", "4"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	results := make([]result, 2)
	ranktest.Run(t, 2, 2*time.Minute, func(ctx context.Context, c *goccl.Comm) (err error) {
		w := io.Discard
		if c.Rank() == 0 {
			w = &out
		}
		results[c.Rank()], err = train(ctx, c, cfg, trainSet, testSet, w)
		return err
	})
	t.Logf("\n%s", out.String())
	r := results[0]
	if r.accuracy < 0.93 || r.accuracy != results[1].accuracy {
		t.Errorf("test accuracy %.4f on rank 0, %.4f on rank 1, want >= 0.93 and equal", r.accuracy, results[1].accuracy)
	}
	if r.imbalance < 1 || r.imbalance > 2 || r.steps != 500 || !(r.a2a > 0) || r.a2a >= r.step {
		t.Errorf("result %+v: want 500 steps, imbalance in [1, 2], all-to-all time in (0, step)", r)
	}
	for _, want := range []string{"epoch 1 loss ", "final test accuracy: ", "summary: ranks=2 experts=4 k=2 batch=128 steps=500 "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"-experts", "4", "-k", "5"}, {"-k", "0"}, {"-lr", "0"}, {"-batch", "0"}, {"extra"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	ranktest.Run(t, 2, time.Minute, func(ctx context.Context, c *goccl.Comm) error {
		if _, err := newModel(c, shape{in: 2, hidden: 2, ffn: 2, classes: 2, experts: 3, k: 1}, 1, 0, 0, 1e-3); err == nil {
			return fmt.Errorf("3 experts on 2 ranks: no error")
		}
		return nil
	})
}
