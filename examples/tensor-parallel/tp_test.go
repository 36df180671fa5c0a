package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	gocclconfig "github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/ranktest"
)

// small is a block small enough for the race detector: 4h = 192 splits over
// 1, 2, 3 and 4 ranks.
var small = config{hidden: 48, batch: 8, iters: 2, seed: 7}

// TestMatchesSingleRank: at 1, 2 and 4 goroutine ranks, Y, dX and every
// shard's gradients equal the whole block's on one rank (within tolerance;
// the gradients of the parameters exactly), on every rank, and rank 0's
// report says so.
func TestMatchesSingleRank(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(n, "ranks"), func(t *testing.T) {
			var out bytes.Buffer
			ranktest.Run(t, n, 10*time.Second, func(ctx context.Context, c *goccl.Comm) error {
				w := io.Discard
				if c.Rank() == 0 {
					w = &out
				}
				res, err := runTP(ctx, c, small, w)
				if err != nil {
					return err
				}
				if !res.equal || res.size != n {
					return fmt.Errorf("world size %d: differences %v, tolerance %g", res.size, res.maxRel, tolerance(small.hidden))
				}
				for _, q := range []int{qDA, qDa, qDB, qDb} {
					if res.maxRel[q] != 0 {
						return fmt.Errorf("%s differs from the single-rank gradient by %g, want exactly 0", qNames[q], res.maxRel[q])
					}
				}
				return nil
			})
			if s := out.String(); !strings.Contains(s, "output equals single-rank: yes") {
				t.Errorf("rank 0's report:\n%s", s)
			}
			want := fmt.Sprintf("AllReduce bytes per block: %d forward", small.batch*small.hidden*4)
			if n == 1 {
				want = "AllReduce bytes per block: 0 forward"
			}
			if s := out.String(); !strings.Contains(s, want) {
				t.Errorf("rank 0's report lacks %q:\n%s", want, s)
			}
		})
	}
}

// TestCheckIsNotVacuous: the shards without the AllReduce, or with the bias
// b added on every rank, are far outside the tolerance.
func TestCheckIsNotVacuous(t *testing.T) {
	p := newParams(small.hidden, small.seed)
	whole, err := p.shardOf(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	X := randMatrix(small.batch, small.hidden, small.seed, 1)
	var tm timing
	ref, _, err := (&block{s: whole}).forward(context.Background(), X, &tm)
	if err != nil {
		t.Fatal(err)
	}
	// Two shards summed by hand stand in for the AllReduce.
	var sum []float32
	for r := range 2 {
		s, err := p.shardOf(r, 2)
		if err != nil {
			t.Fatal(err)
		}
		y, _, err := (&block{s: s}).forward(context.Background(), X, &tm) // with b
		if err != nil {
			t.Fatal(err)
		}
		if d := relDiff(y, ref); d < 1e3*tolerance(small.hidden) {
			t.Errorf("rank %d's partial output alone differs by only %g", r, d)
		}
		if sum == nil {
			sum = y
		} else {
			for i := range sum {
				sum[i] += y[i]
			}
		}
	}
	if d := relDiff(sum, ref); d < 1e3*tolerance(small.hidden) {
		t.Errorf("with b added on both ranks the output differs by only %g", d)
	}
	// Once b is taken off once, the sum is the block's output.
	for i := range sum {
		sum[i] -= p.b[i%small.hidden]
	}
	if d := relDiff(sum, ref); d > tolerance(small.hidden) {
		t.Errorf("the partial outputs summed, b once: differ by %g", d)
	}
}

// TestBackwardMatchesFiniteDifferences: the gradients of the whole block
// (which the tensor-parallel ones are checked against) are those of the loss
// L = sum(Y ⊙ dY), whose gradient with respect to Y is dY: central
// differences of L at some entries of A, a, B, b and X agree with them.
func TestBackwardMatchesFiniteDifferences(t *testing.T) {
	const h, n = 4, 3
	p := newParams(h, 3)
	X := randMatrix(n, h, 3, 1)
	dY := randMatrix(n, h, 3, 2)
	loss := func() float64 {
		s, err := p.shardOf(0, 1)
		if err != nil {
			t.Fatal(err)
		}
		var tm timing
		y, _, err := (&block{s: s}).forward(context.Background(), X, &tm)
		if err != nil {
			t.Fatal(err)
		}
		l := 0.0
		for i, v := range y {
			l += float64(v) * float64(dY.Data[i])
		}
		return l
	}
	s, err := p.shardOf(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	var tm timing
	b := &block{s: s}
	_, cch, err := b.forward(context.Background(), X, &tm)
	if err != nil {
		t.Fatal(err)
	}
	dX, g, err := b.backward(context.Background(), cch, dY, &tm)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		param, grd []float32
	}{{"A", p.A.Data, g.A.Data}, {"a", p.a, g.a}, {"B", p.B.Data, g.B.Data}, {"b", p.b, g.b}, {"X", X.Data, dX}} {
		for _, i := range []int{0, len(c.param) / 2, len(c.param) - 1} {
			const e = 1e-2
			v := c.param[i]
			c.param[i] = v + e
			up := loss()
			c.param[i] = v - e
			down := loss()
			c.param[i] = v
			num := (up - down) / (2 * e)
			if d := num - float64(c.grd[i]); d > 2e-3*(1+abs(num)) || d < -2e-3*(1+abs(num)) {
				t.Errorf("dL/d%s[%d] = %v, central difference %v", c.name, i, c.grd[i], num)
			}
		}
	}
}

func abs(x float64) float64 { return max(x, -x) }

// TestWorldSizeMustDivide: 3 ranks cannot split 4h = 16 (h = 4); every rank
// says so, naming the world size and 4h, and none hangs.
func TestWorldSizeMustDivide(t *testing.T) {
	cfg := config{hidden: 4, batch: 2, iters: 1, seed: 1}
	var mu sync.Mutex
	var errs []error
	ranktest.Run(t, 3, 10*time.Second, func(ctx context.Context, c *goccl.Comm) error {
		_, err := runTP(ctx, c, cfg, io.Discard)
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		return nil
	})
	if len(errs) != 3 {
		t.Fatalf("%d ranks returned", len(errs))
	}
	for _, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "world size 3 does not divide 4h = 16 (-hidden 4)") {
			t.Errorf("runTP: %v", err)
		}
	}
	if _, err := newParams(4, 1).shardOf(0, 3); err == nil {
		t.Error("shardOf(0, 3) of 4h = 16: no error")
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-hidden", "8", "-batch", "3", "-iters", "2", "-seed", "9"})
	if err != nil || cfg != (config{hidden: 8, batch: 3, iters: 2, seed: 9}) {
		t.Fatalf("parseFlags: %+v, %v", cfg, err)
	}
	for _, bad := range [][]string{{"-hidden", "0"}, {"-batch", "0"}, {"-iters", "0"}, {"-hidden", "x"}, {"extra"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q): no error", bad)
		}
	}
}

// TestGeluGrad: the derivative against a central difference.
func TestGeluGrad(t *testing.T) {
	for _, x := range []float32{-3, -1, -0.3, 0, 0.5, 2} {
		const e = 1e-2
		num := (float64(gelu(x+e)) - float64(gelu(x-e))) / (2 * e)
		if d := num - float64(geluGrad(x)); d > 1e-3 || d < -1e-3 {
			t.Errorf("gelu'(%v) = %v, central difference %v", x, geluGrad(x), num)
		}
	}
}

// clearEnv unsets the goccl variables (a test run under goccl run has them),
// so that goccl.Init makes a world of one rank, as with go run.
func clearEnv(t *testing.T) {
	for _, k := range os.Environ() {
		if name, _, _ := strings.Cut(k, "="); strings.HasPrefix(name, gocclconfig.Prefix) {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
}

// TestRunWorldSizeOne runs the command's entry point as `go run` would with
// no launcher environment: the whole block on one rank.
func TestRunWorldSizeOne(t *testing.T) {
	clearEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	rank, err := run(ctx, []string{"-hidden", "16", "-batch", "4", "-iters", "1"}, &out)
	if err != nil || rank != 0 {
		t.Fatalf("rank %d: %v", rank, err)
	}
	for _, want := range []string{"1 ranks", "AllReduce bytes per block: 0 forward", "output equals single-rank: yes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if _, err := run(ctx, []string{"-batch", "0"}, io.Discard); err == nil {
		t.Error("-batch 0 accepted")
	}
}
