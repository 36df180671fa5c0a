package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/ranktest"
)

// groupValue is element i of the k-th message rank from sends rank to.
func groupValue(from, to, k, i int) float32 { return float32(from*1000+to*100+k*10) + float32(i%7) }

func groupMsg(from, to, k, n int) []float32 {
	b := make([]float32, n)
	for i := range b {
		b[i] = groupValue(from, to, k, i)
	}
	return b
}

func checkGroupMsg(got []float32, from, to, k int) error {
	for i, v := range got {
		if w := groupValue(from, to, k, i); v != w {
			return fmt.Errorf("message %d from rank %d to %d, element %d: got %v, want %v", k, from, to, i, v, w)
		}
	}
	return nil
}

// TestGroupExchanges runs, at 2 to 8 ranks over shared memory and TCP (one
// socket per peer), a ring shift in which every rank sends before it
// receives, with messages of 32 MiB: made one call at a time (Send, then
// Recv) it deadlocks on both transports (measured: shared memory from
// 16 MiB, one TCP socket from 32 MiB), in a Group it must complete. The
// ring's Group has an AllReduce posted between its Send and Recv. Then an
// all-pairs exchange (1 MiB per pair, a message to self included) with all
// sends posted first, and the ring again as an IGroup issued between two
// IAllReduces.
func TestGroupExchanges(t *testing.T) {
	const n = 8 << 20   // elements of the ring messages: 32 MiB of float32
	const m = 256 << 10 // elements of the all-pairs messages: 1 MiB
	sizes := []int{2, 3, 4, 5, 8}
	if testing.Short() {
		sizes = []int{2, 3, 8}
	}
	for _, tr := range []string{"shm", "tcp"} {
		for _, P := range sizes {
			t.Run(fmt.Sprintf("%s/np%d", tr, P), func(t *testing.T) {
				if tr == "tcp" {
					t.Setenv("GOCCL_SHM_DISABLE", "1")
					t.Setenv("GOCCL_NSOCKS_PERPEER", "1")
				}
				ranktest.Run(t, P, 60*time.Second, func(ctx context.Context, c *goccl.Comm) error {
					r := c.Rank()
					next, prev := (r+1)%P, (r+P-1)%P
					// Ring shift with an AllReduce in the group.
					in := make([]float32, n)
					sum := []float32{float32(r)}
					if err := c.Group(ctx, func(g *goccl.Group) error {
						if err := goccl.GroupSend(g, groupMsg(r, next, 0, n), n, next); err != nil {
							return err
						}
						if err := goccl.GroupAllReduce(g, sum, sum, 1, goccl.Sum); err != nil {
							return err
						}
						return goccl.GroupRecv(g, in, n, prev)
					}); err != nil {
						return fmt.Errorf("ring group: %w", err)
					}
					if err := checkGroupMsg(in, prev, r, 0); err != nil {
						return fmt.Errorf("ring group: %w", err)
					}
					if w := float32(P * (P - 1) / 2); sum[0] != w {
						return fmt.Errorf("ring group: AllReduce got %v, want %v", sum[0], w)
					}
					// All pairs, self included: all sends first.
					got := make([][]float32, P)
					if err := c.Group(ctx, func(g *goccl.Group) error {
						for p := 0; p < P; p++ {
							if err := goccl.GroupSend(g, groupMsg(r, p, 1, m), m, p); err != nil {
								return err
							}
						}
						for p := 0; p < P; p++ {
							got[p] = make([]float32, m)
							if err := goccl.GroupRecv(g, got[p], m, p); err != nil {
								return err
							}
						}
						return nil
					}); err != nil {
						return fmt.Errorf("all-pairs group: %w", err)
					}
					for p := 0; p < P; p++ {
						if err := checkGroupMsg(got[p], p, r, 1); err != nil {
							return fmt.Errorf("all-pairs group: %w", err)
						}
					}
					// IGroup between non-blocking collectives.
					a, b := []float32{1}, []float32{2}
					r1, err := goccl.IAllReduce(ctx, c, a, a, 1, goccl.Sum)
					if err != nil {
						return err
					}
					rg, err := c.IGroup(ctx, func(g *goccl.Group) error {
						if err := goccl.GroupSend(g, groupMsg(r, next, 2, n), n, next); err != nil {
							return err
						}
						return goccl.GroupRecv(g, in, n, prev)
					})
					if err != nil {
						return fmt.Errorf("IGroup: %w", err)
					}
					r2, err := goccl.IAllReduce(ctx, c, b, b, 1, goccl.Sum)
					if err != nil {
						return err
					}
					for i, req := range []goccl.Request{r1, rg, r2} {
						if err := req.Wait(ctx); err != nil {
							return fmt.Errorf("request %d: %w", i, err)
						}
					}
					if err := checkGroupMsg(in, prev, r, 2); err != nil {
						return fmt.Errorf("IGroup: %w", err)
					}
					if a[0] != float32(P) || b[0] != float32(2*P) {
						return fmt.Errorf("IAllReduce around IGroup: got %v and %v, want %v and %v", a[0], b[0], P, 2*P)
					}
					return nil
				})
			})
		}
	}
}

// TestGroupMatchesUngrouped: a grouped Send is received by a plain Recv on
// the peer and the other way round; message order per pair is kept across
// grouped and ungrouped calls.
func TestGroupMatchesUngrouped(t *testing.T) {
	ranktest.Run(t, 2, 30*time.Second, func(ctx context.Context, c *goccl.Comm) error {
		const n = 1000
		if c.Rank() == 0 {
			if err := c.Group(ctx, func(g *goccl.Group) error {
				for k := 0; k < 3; k++ {
					if err := goccl.GroupSend(g, groupMsg(0, 1, k, n), n, 1); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return err
			}
			got := make([]float32, n)
			if err := goccl.Recv(ctx, c, got, n, 1); err != nil {
				return err
			}
			return checkGroupMsg(got, 1, 0, 0)
		}
		for k := 0; k < 3; k++ {
			got := make([]float32, n)
			if err := goccl.Recv(ctx, c, got, n, 0); err != nil {
				return err
			}
			if err := checkGroupMsg(got, 0, 1, k); err != nil {
				return err
			}
		}
		return c.Group(ctx, func(g *goccl.Group) error { return goccl.GroupSend(g, groupMsg(1, 0, 0, n), n, 0) })
	})
}

// TestGroupBadInput: post errors are returned at once and fail the group
// (nothing runs: the next call still works), naming the rank, the
// operation and the value.
func TestGroupBadInput(t *testing.T) {
	ranktest.Run(t, 2, 30*time.Second, func(ctx context.Context, c *goccl.Comm) error {
		buf := make([]float32, 4)
		cases := []struct {
			name string
			fn   func(g *goccl.Group) error
			want []string
		}{
			{"peer out of range", func(g *goccl.Group) error { return goccl.GroupSend(g, buf, 4, 2) }, []string{": Send: ", "peer 2 is outside [0, 2)"}},
			{"negative peer", func(g *goccl.Group) error { return goccl.GroupRecv(g, buf, 4, -1) }, []string{": Recv: ", "peer -1 is outside"}},
			{"short buffer", func(g *goccl.Group) error { return goccl.GroupRecv(g, buf, 5, 1-c.Rank()) }, []string{"recvbuf holds 4", "needs 5"}},
			{"bad reduction", func(g *goccl.Group) error { return goccl.GroupAllReduce(g, buf, buf, 4, goccl.RedOp(99)) }, []string{"AllReduce", "unknown reduction op 99"}},
			{"unmatched self send", func(g *goccl.Group) error { return goccl.GroupSend(g, buf, 4, c.Rank()) }, []string{"Group", "1 Send(s) to self", "0 Recv(s) from self"}},
			{"self sizes differ", func(g *goccl.Group) error {
				_ = goccl.GroupSend(g, buf, 4, c.Rank())
				return goccl.GroupRecv(g, buf, 3, c.Rank())
			}, []string{"Group", "has 16 bytes, its Recv 12"}},
			{"error ignored by fn", func(g *goccl.Group) error {
				_ = goccl.GroupSend(g, buf, -3, 1-c.Rank())
				return nil
			}, []string{"negative count -3"}},
		}
		for _, tc := range cases {
			err := c.Group(ctx, tc.fn)
			if !errors.Is(err, goccl.ErrInvalidArgument) {
				return fmt.Errorf("%s: got %v, want ErrInvalidArgument", tc.name, err)
			}
			for _, w := range append(tc.want, fmt.Sprintf("rank %d", c.Rank())) {
				if !strings.Contains(err.Error(), w) {
					return fmt.Errorf("%s: error %q lacks %q", tc.name, err, w)
				}
			}
		}
		mine := errors.New("mine")
		if err := c.Group(ctx, func(g *goccl.Group) error { return mine }); err != mine {
			return fmt.Errorf("fn's error: got %v", err)
		}
		var kept *goccl.Group
		_ = c.Group(ctx, func(g *goccl.Group) error { kept = g; return nil })
		if err := goccl.GroupSend(kept, buf, 4, 1-c.Rank()); !errors.Is(err, goccl.ErrInvalidArgument) {
			return fmt.Errorf("post after the group: got %v, want ErrInvalidArgument", err)
		}
		// Nothing ran: the communicator still works.
		x := []float32{1}
		if err := goccl.AllReduce(ctx, c, x, x, 1, goccl.Sum); err != nil || x[0] != 2 {
			return fmt.Errorf("AllReduce after bad groups: %v, %v", x, err)
		}
		return nil
	})
}

// TestGroupWorldSizeOne: sends to self are matched with receives from self.
func TestGroupWorldSizeOne(t *testing.T) {
	ranktest.Run(t, 1, 10*time.Second, func(ctx context.Context, c *goccl.Comm) error {
		a, b := make([]float32, 3), make([]float32, 5)
		err := c.Group(ctx, func(g *goccl.Group) error {
			_ = goccl.GroupSend(g, groupMsg(0, 0, 0, 3), 3, 0)
			_ = goccl.GroupSend(g, groupMsg(0, 0, 1, 5), 5, 0)
			_ = goccl.GroupRecv(g, a, 3, 0)
			return goccl.GroupRecv(g, b, 5, 0)
		})
		if err != nil {
			return err
		}
		if err := checkGroupMsg(a, 0, 0, 0); err != nil {
			return err
		}
		return checkGroupMsg(b, 0, 0, 1)
	})
}
