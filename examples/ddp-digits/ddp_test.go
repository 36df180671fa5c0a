package main

import (
	"bytes"
	"context"
	"fmt"
	"github.com/goccl/goccl/examples/internal/digits"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/ranktest"
)

// runRanks runs fn on n goroutine ranks of one communicator (ranktest.Run).
func runRanks(t *testing.T, n int, fn func(ctx context.Context, c *goccl.Comm) error) {
	t.Helper()
	ranktest.Run(t, n, 2*time.Minute, fn)
}

func trainBatch(t *testing.T, b int) ([]float32, []int) {
	t.Helper()
	ds, err := digits.Load()
	if err != nil {
		t.Fatal(err)
	}
	train0, _ := digits.SplitTrainTest(ds, 1)
	return train0.X[:b*digits.Features], train0.Y[:b]
}

// stepResult is a replica's state after some steps.
type stepResult struct {
	params, init []float32
	losses       []float64
}

// doSteps builds a trainer and does steps steps on the same global batch.
func doSteps(ctx context.Context, c *goccl.Comm, seed uint64, x []float32, y []int, steps int) (stepResult, error) {
	tr, err := newTrainer(ctx, c, 128, seed, 0.05, 0.9)
	if err != nil {
		return stepResult{}, err
	}
	res := stepResult{init: append([]float32(nil), tr.model.Params...)}
	for range steps {
		l, err := tr.Step(ctx, x, y)
		if err != nil {
			return res, err
		}
		res.losses = append(res.losses, l)
	}
	res.params = append([]float32(nil), tr.model.Params...)
	return res, nil
}

func sub(a, b []float32) []float64 {
	d := make([]float64, len(a))
	for i := range a {
		d[i] = float64(a[i]) - float64(b[i])
	}
	return d
}

// TestDDPStepMatchesSingleRank is the key test: a step of 4 goroutine ranks,
// each on its shard of a batch, leaves every rank with the parameters that one
// rank gets from a step on the whole batch (to float32 rounding), for an even
// split (4 x 16), an uneven one (67) and one with empty shards (3), and over
// several momentum steps. Ranks other than 0 start from different random
// parameters, so this also checks that rank 0's initialisation is broadcast.
func TestDDPStepMatchesSingleRank(t *testing.T) {
	const world = 4
	for _, tc := range []struct {
		batch, steps int
	}{{4 * 16, 1}, {67, 1}, {3, 1}, {4 * 16, 3}} {
		t.Run(fmt.Sprintf("batch%d_steps%d", tc.batch, tc.steps), func(t *testing.T) {
			x, y := trainBatch(t, tc.batch)
			var ref stepResult
			runRanks(t, 1, func(ctx context.Context, c *goccl.Comm) (err error) {
				ref, err = doSteps(ctx, c, 11, x, y, tc.steps)
				return err
			})
			got := make([]stepResult, world)
			runRanks(t, world, func(ctx context.Context, c *goccl.Comm) (err error) {
				got[c.Rank()], err = doSteps(ctx, c, 11+uint64(100*c.Rank()), x, y, tc.steps)
				return err
			})
			refDelta := toFloat64(ref.params)
			for i := range refDelta {
				refDelta[i] -= float64(ref.init[i])
			}
			for r, g := range got {
				if !slices.Equal(g.init, ref.init) {
					t.Errorf("rank %d: initial parameters differ from rank 0's after the broadcast", r)
				}
				d := relDiff(toFloat64(g.params), toFloat64(ref.params))
				if d > 1e-5 {
					t.Errorf("rank %d: parameters differ from the 1-rank step by %.3g (relative)", r, d)
				}
				// The update alone, a much stricter comparison.
				du := relDiff(sub(g.params, g.init), refDelta)
				if du > 1e-4 {
					t.Errorf("rank %d: update differs from the 1-rank update by %.3g (relative)", r, du)
				}
				for s := range g.losses {
					if l, lr := g.losses[s], ref.losses[s]; math.Abs(l-lr) > 1e-5*math.Abs(lr) {
						t.Errorf("rank %d step %d: batch loss %v, 1-rank %v", r, s, l, lr)
					}
				}
				if !slices.Equal(g.params, got[0].params) {
					t.Errorf("rank %d: parameters not bit-identical to rank 0's", r)
				}
				if r == 0 {
					t.Logf("params rel diff %.3g, update rel diff %.3g", d, du)
				}
			}
		})
	}
}

// TestParamsIdentical checks that the collective parameter comparison says
// yes for identical replicas and no, on every rank, when one rank differs in
// one bit.
func TestParamsIdentical(t *testing.T) {
	const world = 4
	for _, perturb := range []bool{false, true} {
		answers := make([]bool, world)
		runRanks(t, world, func(ctx context.Context, c *goccl.Comm) error {
			tr, err := newTrainer(ctx, c, 64, 5, 0.05, 0.9)
			if err != nil {
				return err
			}
			if perturb && c.Rank() == 2 {
				p := tr.model.Params
				p[len(p)/2] = math.Float32frombits(math.Float32bits(p[len(p)/2]) ^ 1)
			}
			answers[c.Rank()], err = tr.ParamsIdentical(ctx)
			return err
		})
		for r, a := range answers {
			if a == perturb {
				t.Errorf("perturbed=%v: rank %d says identical=%v", perturb, r, a)
			}
		}
	}
}

// TestTrainFourRanks runs a short job on 4 goroutine ranks: rank 0 prints the
// expected lines, the model learns, and the run tracks the single-process one.
func TestTrainFourRanks(t *testing.T) {
	const world, epochs = 4, 3
	ds, err := digits.Load()
	if err != nil {
		t.Fatal(err)
	}
	train0, test0 := digits.SplitTrainTest(ds, 1)
	cfg := testConfig(epochs)
	var single bytes.Buffer
	want, err := train(context.Background(), nil, cfg, train0, test0, &single)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	results := make([]result, world)
	runRanks(t, world, func(ctx context.Context, c *goccl.Comm) (err error) {
		w := io.Discard // as run does on ranks other than 0
		if c.Rank() == 0 {
			w = &out
		}
		results[c.Rank()], err = train(ctx, c, cfg, train0, test0, w)
		return err
	})
	checkOutput(t, out.String(), epochs, world)
	t.Logf("4 ranks:\n%s1 process:\n%s", out.String(), single.String())
	for r, res := range results {
		if res != results[0] {
			t.Errorf("rank %d ended with %+v, rank 0 with %+v", r, res, results[0])
		}
	}
	got := results[0]
	if got.testAccuracy <= 0.9 {
		t.Errorf("test accuracy %.4f after %d epochs on 4 ranks", got.testAccuracy, epochs)
	}
	if math.Abs(got.lastLoss-want.lastLoss) > 1e-3*want.lastLoss || math.Abs(got.testAccuracy-want.testAccuracy) > 0.01 {
		t.Errorf("4 ranks ended at loss %.6f accuracy %.4f, one process at %.6f %.4f", got.lastLoss, got.testAccuracy, want.lastLoss, want.testAccuracy)
	}
}

// TestRunWorldSizeOne runs the command's entry point as `go run` would with no
// launcher environment: goccl.Init makes a world of size 1.
func TestRunWorldSizeOne(t *testing.T) {
	for _, k := range os.Environ() {
		if name, _, _ := strings.Cut(k, "="); strings.HasPrefix(name, "GOCCL_") {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rank, err := run(ctx, []string{"-epochs", "2", "-hidden", "64"}, &out)
	if err != nil {
		t.Fatalf("rank %d: %v", rank, err)
	}
	checkOutput(t, out.String(), 2, 1)
}
