package ddp_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ddp"
	"github.com/goccl/goccl/internal/ranktest"
)

// runRanks runs fn on n goroutine ranks of one communicator (ranktest.Run).
func runRanks(t *testing.T, n int, fn func(ctx context.Context, c *goccl.Comm) error) {
	t.Helper()
	ranktest.Run(t, n, time.Minute, fn)
}

func TestAssignBuckets(t *testing.T) {
	const mib = 1 << 18 // float32 elements in 1 MiB
	for _, tc := range []struct {
		name         string
		lens         []int
		first, capMB float64
		want         [][]int
	}{
		{"defaults one bucket", []int{10, 20, 30}, 0, 0, [][]int{{2, 1, 0}}},
		// Reverse order; the first bucket holds at most 1 MiB.
		{"first 1MiB", []int{mib, 10, mib / 2, mib / 2}, 0, 0, [][]int{{3, 2}, {1, 0}}},
		{"first 1MiB exceeded", []int{mib, 10, mib / 2, mib/2 + 1}, 0, 0, [][]int{{3}, {2, 1, 0}}},
		// The 25 MiB cap, never splitting: 20+10 > 25 closes the bucket.
		{"cap", []int{20 * mib, 10 * mib, 15 * mib, 10 * mib, 1}, 0, 0, [][]int{{4}, {3, 2}, {1}, {0}}},
		// A parameter larger than the cap has a bucket of its own.
		{"oversized", []int{3 * mib, 30 * mib, 1}, 1, 2, [][]int{{2}, {1}, {0}}},
		{"small caps", []int{4, 4, 4, 4}, 16.0 / (1 << 20), 32.0 / (1 << 20), [][]int{{3}, {2, 1}, {0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs := ddp.AssignBuckets(tc.lens, tc.first, tc.capMB)
			var got [][]int
			total := 0
			for _, b := range bs {
				got = append(got, b.Params)
				n := 0
				for _, i := range b.Params {
					n += tc.lens[i]
				}
				if n != b.Len {
					t.Errorf("bucket %v: Len %d, want %d", b.Params, b.Len, n)
				}
				total += n
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("buckets %v, want %v", got, tc.want)
			}
		})
	}
}

// The linear model y = W x + b (W: out x in) with the loss
// sum_samples 0.5 |Wx+b-y|^2 * scale.
const in, out = 24, 8

type sample struct{ x, y []float32 }

func makeData(n int, seed uint64) []sample {
	rng := rand.New(rand.NewPCG(seed, 7))
	s := make([]sample, n)
	for k := range s {
		s[k].x = make([]float32, in)
		s[k].y = make([]float32, out)
		for i := range s[k].x {
			s[k].x[i] = float32(rng.NormFloat64())
		}
		for i := range s[k].y {
			s[k].y[i] = float32(rng.NormFloat64())
		}
	}
	return s
}

func initParams(seed uint64) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 9))
	p := [][]float32{make([]float32, out*in), make([]float32, out)}
	for _, t := range p {
		for i := range t {
			t[i] = float32(rng.NormFloat64() * 0.3)
		}
	}
	return p
}

// backward adds scale times the gradient over the samples into d's
// gradients, marking b (parameter 1) then W (parameter 0) ready.
func backward(d *ddp.DDP, params [][]float32, data []sample, scale float32) error {
	w, b := params[0], params[1]
	gw, gb := d.Grad(0), d.Grad(1)
	r := make([]float32, out)
	for _, s := range data {
		for o := range out {
			v := b[o] - s.y[o]
			for i := range in {
				v += w[o*in+i] * s.x[i]
			}
			r[o] = v * scale
		}
		for o := range out {
			gb[o] += r[o]
		}
	}
	if err := d.MarkReady(1); err != nil {
		return err
	}
	for _, s := range data {
		for o := range out {
			v := b[o] - s.y[o]
			for i := range in {
				v += w[o*in+i] * s.x[i]
			}
			for i := range in {
				gw[o*in+i] += v * scale * s.x[i]
			}
		}
	}
	return d.MarkReady(0)
}

func sgd(d *ddp.DDP, params [][]float32, lr float32) {
	for p, t := range params {
		for i, g := range d.Grad(p) {
			t[i] -= lr * g
		}
	}
}

// train runs steps SGD steps on its shard of global batches of data (the
// whole of it per step); the last step accumulates two micro-steps under
// NoSync. It returns the final parameters and the last reduced gradients.
func train(ctx context.Context, c *goccl.Comm, data []sample, steps int, opts ddp.Options) ([][]float32, [][]float32, error) {
	size, rank := 1, 0
	if c != nil {
		size, rank = c.Size(), c.Rank()
	}
	params := initParams(uint64(rank + 1)) // ranks differ: New broadcasts rank 0's
	d, err := ddp.New(ctx, c, params, opts)
	if err != nil {
		return nil, nil, err
	}
	n := len(data) / size
	shard := data[rank*n : (rank+1)*n]
	scale := 1 / float32(n) // mean over the shard; Avg over ranks: mean over the batch
	for s := range steps {
		d.ZeroGrad()
		if s == steps-1 {
			h := n / 2
			if err := d.NoSync(func() error { return backward(d, params, shard[:h], scale) }); err != nil {
				return nil, nil, err
			}
			if err := backward(d, params, shard[h:], scale); err != nil {
				return nil, nil, err
			}
		} else if err := backward(d, params, shard, scale); err != nil {
			return nil, nil, err
		}
		if err := d.Wait(ctx); err != nil {
			return nil, nil, err
		}
		sgd(d, params, 0.05)
	}
	grads := [][]float32{slices.Clone(d.Grad(0)), slices.Clone(d.Grad(1))}
	return params, grads, nil
}

func relDiff(a, b [][]float32) float64 {
	var num, den float64
	for t := range a {
		for i := range a[t] {
			x := float64(a[t][i]) - float64(b[t][i])
			num += x * x
			den += float64(b[t][i]) * float64(b[t][i])
		}
	}
	return math.Sqrt(num / den)
}

// multiRank runs train on n ranks and returns each rank's result.
func multiRank(t *testing.T, n int, data []sample, steps int, opts func() ddp.Options) (params, grads [][][]float32) {
	params, grads = make([][][]float32, n), make([][][]float32, n)
	runRanks(t, n, func(ctx context.Context, c *goccl.Comm) error {
		p, g, err := train(ctx, c, data, steps, opts())
		params[c.Rank()], grads[c.Rank()] = p, g
		return err
	})
	return params, grads
}

// TestMatchesSingleRank: 4 ranks on their quarters of the batch end where one
// rank ends on the whole batch (3 steps, the last one accumulating 2
// micro-steps under NoSync), with one bucket and with one per parameter.
func TestMatchesSingleRank(t *testing.T) {
	data := makeData(4*16, 3)
	const steps = 3
	ref, refGrads, err := train(context.Background(), nil, data, steps, ddp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts ddp.Options
	}{
		{"one bucket", ddp.Options{}},
		{"two buckets", ddp.Options{FirstBucketMB: 1e-6, BucketCapMB: 1e-6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			params, grads := multiRank(t, 4, data, steps, func() ddp.Options { return tc.opts })
			for r := range params {
				if d := relDiff(params[r], ref); d > 1e-5 {
					t.Errorf("rank %d: parameters differ from one rank's by %.2g (relative)", r, d)
				}
				if d := relDiff(grads[r], refGrads); d > 1e-5 {
					t.Errorf("rank %d: last gradient differs from one rank's by %.2g (relative)", r, d)
				}
			}
		})
	}
}

// TestCompressHooks: the fp16 and bf16 hooks give the fp32 result to within
// 2e-3 (fp16) and 1e-2 (bf16) in relative norm, parameters and gradients.
func TestCompressHooks(t *testing.T) {
	data := makeData(4*16, 5)
	const steps = 2
	refP, refG := multiRank(t, 4, data, steps, func() ddp.Options { return ddp.Options{} })
	for _, tc := range []struct {
		name string
		hook func() ddp.Hook
		tol  float64
	}{
		{"fp16", ddp.FP16Compress, 2e-3},
		{"bf16", ddp.BF16Compress, 1e-2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			params, grads := multiRank(t, 4, data, steps, func() ddp.Options {
				return ddp.Options{Hook: tc.hook(), FirstBucketMB: 1e-6, BucketCapMB: 1e-6}
			})
			for r := range params {
				dp, dg := relDiff(params[r], refP[r]), relDiff(grads[r], refG[r])
				t.Logf("rank %d: parameters %.2g, gradients %.2g (relative)", r, dp, dg)
				if dp > tc.tol || dg > tc.tol {
					t.Errorf("rank %d: %s differs from fp32 by %.2g (parameters), %.2g (gradients); tolerance %g", r, tc.name, dp, dg, tc.tol)
				}
				if r > 0 && relDiff(params[r], params[0]) != 0 {
					t.Errorf("rank %d: parameters differ from rank 0's", r)
				}
			}
		})
	}
}

// TestErrors: marking twice and waiting with unmarked parameters are errors
// naming the parameters; the DDP is usable for the next step.
func TestErrors(t *testing.T) {
	runRanks(t, 2, func(ctx context.Context, c *goccl.Comm) error {
		params := [][]float32{make([]float32, 4), make([]float32, 4), make([]float32, 4)}
		d, err := ddp.New(ctx, c, params, ddp.Options{FirstBucketMB: 1e-6, BucketCapMB: 1e-6})
		if err != nil {
			return err
		}
		if err := d.MarkReady(2); err != nil {
			return err
		}
		err = d.MarkReady(2)
		if err == nil || !strings.Contains(err.Error(), "parameter 2 marked ready twice") {
			return fmt.Errorf("marking twice: %v", err)
		}
		if err := d.MarkReady(5); err == nil || !strings.Contains(err.Error(), "MarkReady(5)") {
			return fmt.Errorf("marking 5: %v", err)
		}
		err = d.Wait(ctx) // bucket 0 (parameter 2) was issued: Wait waits for it
		if err == nil || !strings.Contains(err.Error(), "parameters [0 1] not marked ready") {
			return fmt.Errorf("wait with unmarked: %v", err)
		}
		// The next step works.
		for i := range 3 {
			clear(d.Grad(i))
			d.Grad(i)[0] = float32(c.Rank() + 1)
		}
		for _, i := range []int{2, 1, 0} {
			if err := d.MarkReady(i); err != nil {
				return err
			}
		}
		if err := d.Wait(ctx); err != nil {
			return err
		}
		for i := range 3 {
			if g := d.Grad(i)[0]; g != 1.5 {
				return fmt.Errorf("gradient %d: %v, want 1.5", i, g)
			}
		}
		// Under NoSync too.
		err = d.NoSync(func() error {
			if err := d.MarkReady(0); err != nil {
				return err
			}
			return d.MarkReady(0)
		})
		if err == nil || !strings.Contains(err.Error(), "parameter 0 marked ready twice") {
			return fmt.Errorf("marking twice under NoSync: %v", err)
		}
		return nil
	})
}

// TestOutOfOrder: marking in forward order (against the buckets), or in
// mixed orders that differ between ranks, still issues the buckets in bucket
// order, each as soon as it and every earlier one are complete, and gives the
// average.
func TestOutOfOrder(t *testing.T) {
	runRanks(t, 3, func(ctx context.Context, c *goccl.Comm) error {
		params := [][]float32{make([]float32, 3), make([]float32, 5), make([]float32, 7)}
		d, err := ddp.New(ctx, c, params, ddp.Options{FirstBucketMB: 1e-6, BucketCapMB: 1e-6})
		if err != nil {
			return err
		}
		order := []int{0, 1, 2}
		if c.Rank() == 1 {
			order = []int{1, 0, 2}
		}
		// Buckets {2}, {1}, {0}: marking 0 and 1 issues nothing before 2 is
		// marked, then all three at once, in bucket order.
		issued := []int{0, 0, 3}
		if c.Rank() == 2 {
			order = []int{2, 0, 1}
			issued = []int{1, 1, 3}
		}
		for step := range 3 {
			for i := range 3 {
				for k := range d.Grad(i) {
					d.Grad(i)[k] = float32(c.Rank()*10 + i + k + step)
				}
			}
			for k, i := range order {
				if err := d.MarkReady(i); err != nil {
					return err
				}
				if n := d.Issued(); n != issued[k] {
					return fmt.Errorf("after marking %v: %d buckets issued, want %d", order[:k+1], n, issued[k])
				}
			}
			if err := d.Wait(ctx); err != nil {
				return err
			}
			if n := d.Issued(); n != 0 {
				return fmt.Errorf("after Wait: Issued %d", n)
			}
			for i := range 3 {
				for k, g := range d.Grad(i) {
					if want := float32(10 + i + k + step); g != want {
						return fmt.Errorf("step %d gradient %d[%d] = %v, want %v", step, i, k, g, want)
					}
				}
			}
		}
		return nil
	})
}

// TestSteadyStateAllocations: after warm-up a step of the default path
// (ZeroGrad, MarkReady each parameter, Wait) allocates nothing.
func TestSteadyStateAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are checked by the full suite (the race detector allocates)")
	}
	var allocs float64
	runRanks(t, 2, func(ctx context.Context, c *goccl.Comm) error {
		params := [][]float32{make([]float32, 1<<16), make([]float32, 100), make([]float32, 1<<18), make([]float32, 10)}
		d, err := ddp.New(ctx, c, params, ddp.Options{})
		if err != nil {
			return err
		}
		var stepErr error
		step := func() {
			d.ZeroGrad()
			for i := 3; i >= 0; i-- {
				d.Grad(i)[0] = 1
				if err := d.MarkReady(i); err != nil && stepErr == nil {
					stepErr = err
				}
			}
			if err := d.Wait(ctx); err != nil && stepErr == nil {
				stepErr = err
			}
		}
		for range 5 {
			step()
		}
		const runs = 20
		if c.Rank() == 0 {
			allocs = testing.AllocsPerRun(runs, step)
		} else {
			for range runs + 1 {
				step()
			}
		}
		if n := len(d.Buckets()); n != 2 {
			return fmt.Errorf("%d buckets, want 2", n)
		}
		if stepErr != nil {
			return stepErr
		}
		// Neither rank closes (Close publishes a report, which allocates)
		// while the other still counts.
		return c.Barrier(ctx)
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per step, want 0", allocs)
	}
}

// TestStats: the timings add up, the communication's spans among them.
func TestStats(t *testing.T) {
	runRanks(t, 2, func(ctx context.Context, c *goccl.Comm) error {
		params := [][]float32{make([]float32, 1000), make([]float32, 1000)}
		d, err := ddp.New(ctx, c, params, ddp.Options{FirstBucketMB: 1e-6, BucketCapMB: 1e-6})
		if err != nil {
			return err
		}
		for range 3 {
			for i := 1; i >= 0; i-- {
				if err := d.MarkReady(i); err != nil {
					return err
				}
			}
			if err := d.Wait(ctx); err != nil {
				return err
			}
		}
		s := d.Stats()
		if s.Steps != 3 || len(s.BucketComm) != 2 {
			return fmt.Errorf("stats %+v", s)
		}
		if s.Step <= 0 || s.Compute < 0 || s.Exposed < 0 || s.Compute+s.Exposed > s.Step || s.TotalStep < s.Step {
			return fmt.Errorf("inconsistent stats %+v", s)
		}
		for b, x := range s.BucketComm {
			if x <= 0 {
				return fmt.Errorf("bucket %d: communication time %v", b, x)
			}
		}
		// The AllReduces' spans: the part not hidden ran while Wait was
		// blocked, so it is at most Exposed.
		if s.Comm <= 0 || s.CommHidden < 0 || s.CommHidden > s.Comm || s.Comm-s.CommHidden > s.Exposed ||
			s.TotalComm < s.Comm || s.TotalCommHidden < s.CommHidden || s.TotalComm-s.TotalCommHidden > s.TotalExposed {
			return fmt.Errorf("communication %v, hidden %v, exposed %v; totals %v, %v, %v", s.Comm, s.CommHidden, s.Exposed, s.TotalComm, s.TotalCommHidden, s.TotalExposed)
		}
		return nil
	})
}

// TestCommBytes: Stats.CommBytes is the payload of the step's buckets, 4
// bytes per gradient element in float32 and 2 with the 16-bit hooks; NoSync
// micro-steps add nothing, and without a communicator it is 0.
func TestCommBytes(t *testing.T) {
	const n0, n1 = 1000, 300
	step := func(d *ddp.DDP, ctx context.Context) error {
		for i := 1; i >= 0; i-- {
			if err := d.MarkReady(i); err != nil {
				return err
			}
		}
		return d.Wait(ctx)
	}
	for _, tc := range []struct {
		name string
		hook func() ddp.Hook
		elem int64
	}{
		{"fp32", func() ddp.Hook { return nil }, 4},
		{"fp16", ddp.FP16Compress, 2},
		{"bf16", ddp.BF16Compress, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runRanks(t, 2, func(ctx context.Context, c *goccl.Comm) error {
				params := [][]float32{make([]float32, n0), make([]float32, n1)}
				d, err := ddp.New(ctx, c, params, ddp.Options{Hook: tc.hook(), FirstBucketMB: 1e-6, BucketCapMB: 1e-6})
				if err != nil {
					return err
				}
				if err := d.NoSync(func() error { return step(d, ctx) }); err != nil {
					return err
				}
				for range 3 {
					if err := step(d, ctx); err != nil {
						return err
					}
				}
				s, want := d.Stats(), tc.elem*(n0+n1)
				if len(s.BucketComm) != 2 || s.CommBytes != want || s.TotalCommBytes != 3*want {
					return fmt.Errorf("%d buckets, CommBytes %d, TotalCommBytes %d; want 2, %d, %d", len(s.BucketComm), s.CommBytes, s.TotalCommBytes, want, 3*want)
				}
				d.ResetStats()
				if s := d.Stats(); s.CommBytes != 0 || s.TotalCommBytes != 0 {
					return fmt.Errorf("after ResetStats: CommBytes %d, TotalCommBytes %d", s.CommBytes, s.TotalCommBytes)
				}
				return nil
			})
		})
	}
	ctx := context.Background()
	d, err := ddp.New(ctx, nil, [][]float32{make([]float32, 10)}, ddp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.MarkReady(0); err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if s := d.Stats(); s.Steps != 1 || s.CommBytes != 0 {
		t.Errorf("no communicator: %d steps, CommBytes %d; want 1, 0", s.Steps, s.CommBytes)
	}
}

// TestFP16NoOverflow: gradients whose sum over the ranks exceeds float16's
// range but whose average does not come back finite through FP16Compress.
func TestFP16NoOverflow(t *testing.T) {
	runRanks(t, 4, func(ctx context.Context, c *goccl.Comm) error {
		d, err := ddp.New(ctx, c, [][]float32{make([]float32, 3)}, ddp.Options{Hook: ddp.FP16Compress()})
		if err != nil {
			return err
		}
		copy(d.Grad(0), []float32{40000, -40000, 1})
		if err := d.MarkReady(0); err != nil {
			return err
		}
		if err := d.Wait(ctx); err != nil {
			return err
		}
		if g := d.Grad(0); !slices.Equal(g, []float32{40000, -40000, 1}) {
			return fmt.Errorf("gradient %v, want [40000 -40000 1]", g)
		}
		return nil
	})
}

func TestIdenticalAndShard(t *testing.T) {
	runRanks(t, 3, func(ctx context.Context, c *goccl.Comm) error {
		p := []float32{1, 2, float32(math.NaN()), -0}
		if ok, err := ddp.Identical(ctx, c, p); err != nil || !ok {
			return fmt.Errorf("same parameters: identical %v, %v", ok, err)
		}
		if c.Rank() == 2 {
			p[1] = math.Nextafter32(p[1], 3) // one ulp
		}
		if ok, err := ddp.Identical(ctx, c, p); err != nil || ok {
			return fmt.Errorf("one ulp apart on rank 2: identical %v, %v", ok, err)
		}
		return nil
	})
	for _, n := range []int{0, 1, 2, 7, 128} {
		next := 0
		for r := range 3 {
			lo, hi := ddp.Shard(n, 3, r)
			if lo != next || hi < lo || hi-lo > n/3+1 {
				t.Fatalf("Shard(%d, 3, %d) = [%d, %d), want it to start at %d", n, r, lo, hi, next)
			}
			next = hi
		}
		if next != n {
			t.Fatalf("Shard(%d, 3, ·) covers [0, %d)", n, next)
		}
	}
}

// TestShouldCommit: 3 ranks whose steps succeed commit together (one
// AllReduce); when one rank's step fails without breaking the
// communicator, no rank commits and all are told to shrink; after a
// communicator is broken (Abort on every rank) the fallback through
// Comm.Agree tells all of them the same.
func TestShouldCommit(t *testing.T) {
	runRanks(t, 3, func(ctx context.Context, c *goccl.Comm) error {
		d, err := ddp.New(ctx, c, [][]float32{make([]float32, 4)}, ddp.Options{})
		if err != nil {
			return err
		}
		v, err := d.ShouldCommit(ctx, nil)
		if err != nil || !v.Commit || v.Shrink || v.Joiners != 0 {
			return fmt.Errorf("all steps ok: %+v %v", v, err)
		}
		var stepErr error
		if c.Rank() == 1 {
			stepErr = errors.New("a NaN in the loss")
		}
		if v, err = d.ShouldCommit(ctx, stepErr); err != nil || v.Commit || !v.Shrink {
			return fmt.Errorf("rank 1's step failed: %+v %v", v, err)
		}
		c.Abort()
		v, err = d.ShouldCommit(ctx, errors.New("communicator aborted"))
		if err != nil || v.Commit || !v.Shrink || len(v.Failed) != 0 {
			return fmt.Errorf("after Abort: %+v %v", v, err)
		}
		return nil
	})
}
