package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

// TestVCollMultiProcess runs the AllToAllv, Gather and Scatter part of the
// matrix (every dtype, uneven and zero counts, in and out of place, roots
// rotating) in separate processes over shared memory and TCP, world sizes 1
// to 4. TestCollectivesMultiProcess runs them too, with everything else.
func TestVCollMultiProcess(t *testing.T) {
	counts := "0,1,7,100003"
	if testing.Short() {
		counts = "0,1,7,1003"
	}
	for _, tr := range []struct{ name, env string }{{"shm", "GOCCL_SHM_DISABLE=0"}, {"tcp", "GOCCL_SHM_DISABLE=1"}} {
		for n := 1; n <= 4; n++ {
			t.Run(fmt.Sprintf("%s/np%d", tr.name, n), func(t *testing.T) {
				outs := spawn(t, n, "matrix", tr.env, "GOCCL_TEST_COUNTS="+counts, "GOCCL_TEST_VCOLL_ONLY=1", "GOCCL_DEBUG=INFO")
				for r, out := range outs {
					if !strings.Contains(out, "operations checked") {
						t.Fatalf("rank %d did not report:\n%s", r, out)
					}
					if n > 1 && !strings.Contains(out, "AllToAllv uses pairwise") {
						t.Fatalf("rank %d: GOCCL_DEBUG=INFO output lacks the AllToAllv schedule:\n%s", r, out)
					}
				}
			})
		}
	}
}

func TestVCollBadInput(t *testing.T) {
	ctx := context.Background()
	// Rank 0 of a one-rank communicator checks what needs no peer; the
	// per-peer checks need Size() entries, so they also run on two ranks.
	c, err := goccl.Init(ctx, goccl.WithRank(0), goccl.WithWorldSize(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]float32, 8)
	one := []int{0}
	cases := []struct {
		name string
		err  error
		want []string
	}{
		{"negative sendcount", goccl.AllToAllv(ctx, c, buf, []int{-2}, one, buf, []int{1}, one), []string{"rank 0", "AllToAllv", "peer 0", "negative sendcount -2"}},
		{"negative recvdispl", goccl.AllToAllv(ctx, c, buf, []int{1}, one, make([]float32, 8), []int{1}, []int{-3}), []string{"AllToAllv", "peer 0", "negative recvdispl -3"}},
		{"sendspan past buffer", goccl.AllToAllv(ctx, c, buf, []int{4}, []int{6}, make([]float32, 8), []int{4}, one), []string{"AllToAllv", "peer 0", "senddispl 6 + sendcount 4", "8 elements"}},
		{"recvcount past buffer", goccl.AllToAllv(ctx, c, buf, []int{9}, one, make([]float32, 8), []int{9}, one), []string{"AllToAllv", "peer 0", "sendcount 9"}},
		{"count entries", goccl.AllToAllv(ctx, c, buf, []int{1, 1}, one, buf, one, one), []string{"AllToAllv", "sendcounts has 2 entries", "(1)"}},
		{"self counts differ", goccl.AllToAllv(ctx, c, buf, []int{2}, one, make([]float32, 8), []int{3}, one), []string{"AllToAllv", "peer 0", "sendcounts has 2, recvcounts 3"}},
		{"gather root", goccl.Gather(ctx, c, buf, buf, 1, 1), []string{"rank 0", "Gather", "root 1"}},
		{"scatter root", goccl.Scatter(ctx, c, buf, buf, 1, -1), []string{"Scatter", "root -1"}},
		{"gather negative count", goccl.Gather(ctx, c, buf, buf, -4, 0), []string{"Gather", "negative count -4"}},
		{"gather short recv", goccl.Gather(ctx, c, buf, make([]float32, 3), 4, 0), []string{"Gather", "recvbuf holds 3", "needs 4"}},
		{"scatter short send", goccl.Scatter(ctx, c, make([]float32, 2), buf, 4, 0), []string{"Scatter", "sendbuf holds 2", "needs 4"}},
		{"gather bad overlap", goccl.Gather(ctx, c, buf[1:5], buf[:4], 4, 0), []string{"Gather", "overlaps", "root 0"}},
		{"scatter bad overlap", goccl.Scatter(ctx, c, buf[:4], buf[2:6], 4, 0), []string{"Scatter", "overlaps", "root 0"}},
		{"bad type", c.GatherBytes(ctx, make([]byte, 4), make([]byte, 4), 1, goccl.DataType(42), 0), []string{"Gather", "unknown data type 42"}},
	}
	for _, tc := range cases {
		checkInvalid(t, tc.name, tc.err, tc.want)
	}
	// Overlapping receive regions, a displacement past the buffer for a
	// peer other than this rank: two ranks, each making one of the mistakes
	// (each call fails before sending anything).
	errs := goroutineRanks(t, 2, 5*time.Second, func(c *goccl.Comm) error {
		buf := make([]int64, 8)
		if c.Rank() == 1 {
			return goccl.AllToAllv(ctx, c, buf, []int{2, 2}, []int{0, 2}, make([]int64, 8), []int{2, 2}, []int{0, 7})
		}
		return goccl.AllToAllv(ctx, c, buf, []int{3, 2}, []int{0, 3}, make([]int64, 8), []int{3, 2}, []int{0, 2})
	})
	checkInvalid(t, "overlapping recv regions", errs[0], []string{"rank 0", "AllToAllv", "peers 0 [0, 3) and 1 [2, 4) overlap"})
	checkInvalid(t, "recvdispl past buffer", errs[1], []string{"rank 1", "AllToAllv", "peer 1", "recvdispl 7 + recvcount 2", "8 elements of int64"})
	// In place as documented is accepted; a bad call does not poison.
	if err := goccl.Gather(ctx, c, buf[:4], buf[:4], 4, 0); err != nil {
		t.Fatalf("in-place Gather: %v", err)
	}
	if err := goccl.Scatter(ctx, c, buf[:4], buf[:4], 4, 0); err != nil {
		t.Fatalf("in-place Scatter: %v", err)
	}
	if err := goccl.AllToAllv(ctx, c, buf, []int{3}, []int{1}, buf, []int{3}, []int{4}); err != nil {
		t.Fatalf("AllToAllv on one buffer: %v", err)
	}
}

func checkInvalid(t *testing.T, name string, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", name)
		return
	}
	if !errors.Is(err, goccl.ErrInvalidArgument) {
		t.Errorf("%s: %v is not ErrInvalidArgument", name, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q lacks %q", name, err, w)
		}
	}
}

// TestVCollMismatch: ranks that disagree on what one sends the other (an
// AllToAllv count, a Gather or Scatter count) get ErrMismatch naming the
// operation and both counts, on the rank that receives; no rank hangs.
// With GOCCL_DEBUG_CHECK=1 the Gather and Scatter disagreements are caught
// by the fingerprint exchange instead (on every rank); AllToAllv's
// fingerprint count is 0 on every rank, so its header check still reports.
func TestVCollMismatch(t *testing.T) {
	for _, tr := range []string{"0", "1", "check"} {
		debugCheck := tr == "check"
		if debugCheck {
			t.Setenv("GOCCL_DEBUG_CHECK", "1")
		} else {
			t.Setenv("GOCCL_SHM_DISABLE", tr)
		}
		cases := []struct {
			name     string
			detector int
			want     []string
			f        func(ctx context.Context, c *goccl.Comm) error
		}{
			{"AllToAllv", 1, []string{"rank 1", "AllToAllv", "peer 0 disagrees on count: this rank has 4, peer sent 3"}, func(ctx context.Context, c *goccl.Comm) error {
				P := c.Size()
				sc, rc, d := make([]int, P), make([]int, P), make([]int, P)
				for p := range sc {
					sc[p], rc[p], d[p] = 4, 4, 4*p
				}
				if c.Rank() == 0 {
					sc[1] = 3
				}
				return goccl.AllToAllv(ctx, c, make([]float32, 4*P), sc, d, make([]float32, 4*P), rc, d)
			}},
			{"Gather", 0, []string{"rank 0", "Gather", "disagrees on count: this rank has 8, peer sent 9"}, func(ctx context.Context, c *goccl.Comm) error {
				n := 8 + c.Rank()%2
				return goccl.Gather(ctx, c, make([]int32, n), make([]int32, 9*c.Size()), n, 0)
			}},
			{"Scatter", 1, []string{"rank 1", "Scatter", "peer 0 disagrees on count: this rank has 9, peer sent 8"}, func(ctx context.Context, c *goccl.Comm) error {
				n := 8 + c.Rank()%2
				return goccl.Scatter(ctx, c, make([]int32, 9*c.Size()), make([]int32, n), n, 0)
			}},
		}
		for _, tc := range cases {
			for _, n := range []int{2, 3} {
				start := time.Now()
				errs := goroutineRanks(t, n, 10*time.Second, func(c *goccl.Comm) error {
					return tc.f(context.Background(), c)
				})
				err := errs[tc.detector]
				want := tc.want
				if debugCheck && tc.name != "AllToAllv" {
					want = []string{tc.name, "rank 1 called " + tc.name}
				}
				if !errors.Is(err, goccl.ErrMismatch) {
					t.Errorf("shm_disable=%s %s np%d: rank %d got %v, want ErrMismatch", tr, tc.name, n, tc.detector, err)
					continue
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("shm_disable=%s %s np%d: error %q lacks %q", tr, tc.name, n, err, w)
					}
				}
				if d := time.Since(start); d > 8*time.Second {
					t.Errorf("shm_disable=%s %s np%d: took %v (timeout instead of detection)", tr, tc.name, n, d)
				}
			}
		}
	}
}

// TestVCollInProcess runs the AllToAllv, Gather and Scatter matrix on
// goroutine ranks (the part the race detector covers).
func TestVCollInProcess(t *testing.T) {
	t.Setenv("GOCCL_TEST_VCOLL_ONLY", "1")
	for _, shmOff := range []string{"0", "1"} {
		t.Setenv("GOCCL_SHM_DISABLE", shmOff)
		for _, n := range []int{1, 2, 3} {
			errs := goroutineRanks(t, n, time.Minute, func(c *goccl.Comm) error {
				m := &matrix{ctx: context.Background(), c: c, counts: []int{0, 5, 300}}
				return m.run()
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("shm_disable=%s np %d rank %d: %v", shmOff, n, r, err)
				}
			}
		}
	}
}

// TestVCollSteadyStateAllocations: after warm-up AllToAllv, Gather and
// Scatter allocate nothing per call.
func TestVCollSteadyStateAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are checked by the full suite (the race detector allocates)")
	}
	for _, shmOff := range []string{"0", "1"} {
		t.Setenv("GOCCL_SHM_DISABLE", shmOff)
		for _, n := range []int{2, 1 << 18} {
			name := fmt.Sprintf("shm_disable=%s/count=%d", shmOff, n)
			var allocs float64
			errs := goroutineRanks(t, 2, time.Minute, func(c *goccl.Comm) error {
				ctx := context.Background()
				r := c.Rank()
				big := make([]float32, 2*n)
				out := make([]float32, 2*n)
				sc, rc := []int{n - r, n / 2}, []int{n, n/2 + r}
				sd, rd := []int{0, n}, []int{n, 0}
				if r == 1 {
					sc, rc = []int{n / 2, n - 1}, []int{n / 2, n - 1}
				}
				op := func() {
					if err := goccl.AllToAllv(ctx, c, big, sc, sd, out, rc, rd); err != nil {
						panic(err)
					}
					if err := goccl.AllToAllv(ctx, c, big, sc, sd, big, rc, rd); err != nil { // in place
						panic(err)
					}
					if err := goccl.Gather(ctx, c, big[:n], out, n, 1); err != nil {
						panic(err)
					}
					if err := goccl.Scatter(ctx, c, out, big[:n], n, 0); err != nil {
						panic(err)
					}
				}
				for i := 0; i < 5; i++ {
					op()
				}
				const runs = 20
				if r == 0 {
					allocs = testing.AllocsPerRun(runs, op)
				} else {
					for i := 0; i < runs+1; i++ {
						op()
					}
				}
				// Neither rank closes (Close publishes a report, which
				// allocates) while the other still counts.
				return c.Barrier(ctx)
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("%s rank %d: %v", name, r, err)
				}
			}
			if allocs != 0 {
				t.Errorf("%s: %.1f allocations per round, want 0", name, allocs)
			}
		}
	}
}
