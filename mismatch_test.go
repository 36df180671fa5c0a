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

// TestRootMismatch: ranks that call Broadcast or Reduce with different roots
// get an ErrMismatch that names the root, on the call itself where their
// schedule receives a message, else at the latest on the next operation
// (which must not blame that operation), over shared memory and TCP, with
// the tree (small) and the direct (large, shared memory) schedules.
func TestRootMismatch(t *testing.T) {
	type call func(ctx context.Context, c *goccl.Comm, buf []float32, root int) error
	calls := map[string]call{
		"Broadcast": func(ctx context.Context, c *goccl.Comm, buf []float32, root int) error {
			return goccl.Broadcast(ctx, c, buf, buf, len(buf), root)
		},
		"Reduce": func(ctx context.Context, c *goccl.Comm, buf []float32, root int) error {
			return goccl.Reduce(ctx, c, buf, make([]float32, len(buf)), len(buf), goccl.Sum, root)
		},
	}
	for _, shmOff := range []string{"0", "1"} {
		t.Setenv("GOCCL_SHM_DISABLE", shmOff)
		for name, f := range calls {
			for _, n := range []int{2, 3} {
				for _, count := range []int{16, 64 << 10} {
					// Roots 0, 1, 0: with 2 ranks both are roots and
					// receive nothing (Broadcast), or both are leaves
					// (Reduce with roots 1, 0).
					rootOf := func(r int) int { return r % 2 }
					if name == "Reduce" {
						rootOf = func(r int) int { return (r + 1) % 2 }
					}
					what := fmt.Sprintf("shm_disable=%s %s np%d count %d", shmOff, name, n, count)
					start := time.Now()
					type result struct{ call, next error }
					res := make([]result, n)
					errs := goroutineRanks(t, n, 10*time.Second, func(c *goccl.Comm) error {
						ctx := context.Background()
						buf := make([]float32, count)
						r := &res[c.Rank()]
						r.call = f(ctx, c, buf, rootOf(c.Rank()))
						r.next = goccl.AllReduce(ctx, c, buf[:4], buf[:4], 4, goccl.Sum)
						return nil
					})
					for r, err := range errs {
						if err != nil {
							t.Fatalf("%s: rank %d: %v", what, r, err)
						}
					}
					named := false
					for r, x := range res {
						if x.call == nil && x.next == nil {
							t.Errorf("%s: rank %d: no error on the call nor on the next operation", what, r)
						}
						err := x.call // the next operation reports the same error
						if err == nil {
							err = x.next
						}
						if m := (*goccl.MismatchError)(nil); errors.As(err, &m) {
							if m.Field != "root" {
								t.Errorf("%s: rank %d: mismatch on %q, want root: %v", what, r, m.Field, err)
							}
							named = true
							want := fmt.Sprintf("disagrees on root of %s (op #3): this rank has %d, peer sent %d", name, rootOf(r), rootOf(m.Peer))
							if err == x.call {
								want = fmt.Sprintf("disagrees on root: this rank has %d, peer sent %d", rootOf(r), rootOf(m.Peer))
							}
							if !errors.Is(err, goccl.ErrMismatch) || !strings.Contains(err.Error(), want) {
								t.Errorf("%s: rank %d: got %v, want ErrMismatch saying %q", what, r, err, want)
							}
						}
					}
					if !named {
						t.Errorf("%s: no rank named the root mismatch: %+v", what, res)
					}
					if d := time.Since(start); d > 8*time.Second {
						t.Errorf("%s: took %v (a timeout, not a detection)", what, d)
					}
				}
			}
		}
	}
}

// TestMismatchNames: a mismatch names operations, element types and
// reduction operators, not their codes.
func TestMismatchNames(t *testing.T) {
	cases := []struct {
		name string
		f    func(ctx context.Context, c *goccl.Comm) error
		want [2]string // what one or the other rank says
	}{
		{"op", func(ctx context.Context, c *goccl.Comm) error {
			buf := make([]float32, 8)
			if c.Rank() == 0 {
				return goccl.AllReduce(ctx, c, buf, buf, 8, goccl.Sum)
			}
			return goccl.Broadcast(ctx, c, buf, buf, 8, 0)
		}, [2]string{"on op: this rank has AllReduce, peer sent Broadcast", "on op: this rank has Broadcast, peer sent AllReduce"}},
		{"dtype", func(ctx context.Context, c *goccl.Comm) error {
			if c.Rank() == 0 {
				return goccl.AllReduce(ctx, c, make([]float32, 8), make([]float32, 8), 8, goccl.Sum)
			}
			return goccl.AllReduce(ctx, c, make([]int32, 8), make([]int32, 8), 8, goccl.Sum)
		}, [2]string{"on dtype: this rank has float, peer sent int32", "on dtype: this rank has int32, peer sent float"}},
		{"redop", func(ctx context.Context, c *goccl.Comm) error {
			buf := make([]float32, 8)
			op := goccl.Sum
			if c.Rank() == 1 {
				op = goccl.Max
			}
			return goccl.AllReduce(ctx, c, buf, buf, 8, op)
		}, [2]string{"on redop: this rank has sum, peer sent max", "on redop: this rank has max, peer sent sum"}},
	}
	for _, tc := range cases {
		errs := goroutineRanks(t, 2, 10*time.Second, func(c *goccl.Comm) error {
			return tc.f(context.Background(), c)
		})
		found := false
		for r, err := range errs {
			var m *goccl.MismatchError
			if errors.As(err, &m) && strings.Contains(err.Error(), fmt.Sprintf("peer %d disagrees %s", 1-r, tc.want[r])) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no rank says %q or %q: %v", tc.name, tc.want[0], tc.want[1], errs)
		}
	}
}
