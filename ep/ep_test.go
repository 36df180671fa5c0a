package ep_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ep"
	"github.com/goccl/goccl/internal/ranktest"
)

const (
	experts = 8
	k       = 2
	dim     = 3
	tokens  = 10 // per rank
)

// expertFn is expert e: v -> (e+1)*v + e, elementwise.
func expertFn(e int, v []float32) []float32 {
	o := make([]float32, len(v))
	for i, x := range v {
		o[i] = float32(e+1)*x + float32(e)
	}
	return o
}

// inputs are rank r's tokens, their k distinct experts and gate weights.
func inputs(r int) (x []float32, choices []int, weights []float32) {
	g := rand.New(rand.NewPCG(uint64(r), 7))
	x = make([]float32, tokens*dim)
	for i := range x {
		x[i] = float32(g.IntN(9) - 4)
	}
	for range tokens {
		a := g.IntN(experts)
		b := (a + 1 + g.IntN(experts-1)) % experts
		choices = append(choices, a, b)
		w := float32(g.IntN(4)+1) / 8
		weights = append(weights, w, 1-w)
	}
	return x, choices, weights
}

// reference is the layer on one process: each token's kept choices'
// expert outputs, weighted; a choice is dropped when its rank already
// kept capacity tokens for that expert (token order), as ep documents.
func reference(r, capacity int) (out []float32, dropped int) {
	x, choices, weights := inputs(r)
	out = make([]float32, tokens*dim)
	kept := make([]int, experts)
	for i, e := range choices {
		if capacity > 0 && kept[e] == capacity {
			dropped++
			continue
		}
		kept[e]++
		t := i / k
		y := expertFn(e, x[t*dim:(t+1)*dim])
		for j := range y {
			out[t*dim+j] += weights[i] * y[j]
		}
	}
	return out, dropped
}

// TestMoELayer: dispatch, the experts on their ranks, combine: equal to the
// single-process layer at 1, 2 and 4 ranks, with and without dropped tokens.
func TestMoELayer(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		for _, capacity := range []int{0, 2} {
			t.Run(fmt.Sprintf("ranks=%d/capacity=%d", n, capacity), func(t *testing.T) {
				ranktest.Run(t, n, time.Minute, func(ctx context.Context, c *goccl.Comm) error {
					r := c.Rank()
					x, choices, weights := inputs(r)
					pl, err := ep.NewPlan(ctx, c, choices, k, experts, capacity, dim)
					if err != nil {
						return err
					}
					in := make([]float32, pl.Received()*dim)
					if err := pl.Dispatch(ctx, x, in); err != nil {
						return err
					}
					y := make([]float32, len(in))
					local := experts / n
					received := 0
					for e, load := range pl.Load() {
						lo, hi := pl.Expert(e)
						if hi-lo != load {
							return fmt.Errorf("expert %d: Expert says %d tokens, Load %d", e, hi-lo, load)
						}
						received += load
						for tk := lo; tk < hi; tk++ {
							copy(y[tk*dim:(tk+1)*dim], expertFn(r*local+e, in[tk*dim:(tk+1)*dim]))
						}
					}
					if received != pl.Received() {
						return fmt.Errorf("loads add up to %d, Received %d", received, pl.Received())
					}
					out := make([]float32, tokens*dim)
					if err := pl.Combine(ctx, y, weights, out); err != nil {
						return err
					}
					want, dropped := reference(r, capacity)
					if pl.Dropped() != dropped {
						return fmt.Errorf("rank %d: %d choices dropped, want %d", r, pl.Dropped(), dropped)
					}
					if capacity > 0 && dropped == 0 {
						return fmt.Errorf("rank %d: capacity %d dropped nothing: the test does not test dropping", r, capacity)
					}
					for i := range want {
						if math.Abs(float64(out[i]-want[i])) > 1e-5 {
							return fmt.Errorf("rank %d: out[%d] = %g, want %g", r, i, out[i], want[i])
						}
					}
					return checkChoices(ctx, c, pl, x, choices, y, capacity)
				})
			})
		}
	}
}

// checkChoices: CombineChoices returns each kept choice's expert output
// (zeros for a dropped one), and DispatchChoices is its adjoint, as a
// trainer's backward pass needs: summed over the ranks,
// <DispatchChoices(xc), y> = <xc, CombineChoices(y)>.
func checkChoices(ctx context.Context, c *goccl.Comm, pl *ep.Plan, x []float32, choices []int, y []float32, capacity int) error {
	r := c.Rank()
	yc := make([]float32, len(choices)*dim)
	if err := pl.CombineChoices(ctx, y, yc); err != nil {
		return err
	}
	kept := make([]int, experts)
	for i, e := range choices {
		row := yc[i*dim : (i+1)*dim]
		want := make([]float32, dim)
		if capacity == 0 || kept[e] < capacity {
			kept[e]++
			t := i / k
			want = expertFn(e, x[t*dim:(t+1)*dim])
		}
		for j := range row {
			if math.Abs(float64(row[j]-want[j])) > 1e-5 {
				return fmt.Errorf("rank %d: CombineChoices row %d (expert %d) = %v, want %v", r, i, e, row, want)
			}
		}
	}
	g := rand.New(rand.NewPCG(uint64(r), 11))
	xc := make([]float32, len(yc))
	for i := range xc {
		xc[i] = float32(g.IntN(9) - 4)
	}
	in := make([]float32, len(y))
	if err := pl.DispatchChoices(ctx, xc, in); err != nil {
		return err
	}
	dots := make([]float64, 2)
	for i := range in {
		dots[0] += float64(in[i]) * float64(y[i])
	}
	for i := range xc {
		dots[1] += float64(xc[i]) * float64(yc[i])
	}
	if err := goccl.AllReduce(ctx, c, dots, dots, 2, goccl.Sum); err != nil {
		return err
	}
	if math.Abs(dots[0]-dots[1]) > 1e-6*math.Abs(dots[1]) || dots[1] == 0 {
		return fmt.Errorf("rank %d: <DispatchChoices(xc), y> = %g, <xc, CombineChoices(y)> = %g", r, dots[0], dots[1])
	}
	if err := pl.DispatchChoices(ctx, xc[1:], in); err == nil {
		return fmt.Errorf("rank %d: DispatchChoices took a short input", r)
	}
	if err := pl.CombineChoices(ctx, y, yc[1:]); err == nil {
		return fmt.Errorf("rank %d: CombineChoices took a short output", r)
	}
	return nil
}

func TestPlanErrors(t *testing.T) {
	ranktest.Run(t, 2, time.Minute, func(ctx context.Context, c *goccl.Comm) error {
		for _, tc := range []struct {
			name                        string
			choices                     []int
			k, experts, capacity, dimen int
		}{
			{"choices not whole tokens", []int{1, 2, 3}, 2, 4, 0, 1},
			{"experts do not divide", []int{0, 1}, 2, 3, 0, 1},
			{"expert out of range", []int{0, 4}, 2, 4, 0, 1},
			{"negative capacity", []int{0, 1}, 2, 4, -1, 1},
		} {
			if _, err := ep.NewPlan(ctx, c, tc.choices, tc.k, tc.experts, tc.capacity, tc.dimen); err == nil {
				return fmt.Errorf("%s: no error", tc.name)
			}
		}
		return nil
	})
}

// TestPlanSteadyStateAllocations: a Plan reused with Reset, its Dispatch
// and Combine allocate nothing once grown (both ranks run in this process,
// so the count is theirs together).
func TestPlanSteadyStateAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are checked by the full suite (the race detector allocates)")
	}
	var allocs float64
	var measured sync.WaitGroup
	measured.Add(2)
	ranktest.Run(t, 2, time.Minute, func(ctx context.Context, c *goccl.Comm) error {
		x, choices, weights := inputs(c.Rank())
		var pl ep.Plan
		var in, y []float32
		out := make([]float32, tokens*dim)
		var err error
		step := func() {
			if err == nil {
				err = pl.Reset(ctx, c, choices, k, experts, 2, dim)
			}
			if cap(in) < pl.Received()*dim {
				in, y = make([]float32, 4*tokens*dim), make([]float32, 4*tokens*dim)
			}
			in, y = in[:pl.Received()*dim], y[:pl.Received()*dim]
			if err == nil {
				err = pl.Dispatch(ctx, x, in)
			}
			copy(y, in)
			if err == nil {
				err = pl.Combine(ctx, y, weights, out)
			}
		}
		for range 3 {
			step()
		}
		const runs = 10
		if c.Rank() == 0 {
			allocs = testing.AllocsPerRun(runs, step)
		} else {
			for range runs + 1 {
				step()
			}
		}
		measured.Done()
		measured.Wait()
		return err
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per step (Reset, Dispatch, Combine on 2 ranks), want 0", allocs)
	}
}
