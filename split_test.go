package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
)

// TestSplit splits 5 ranks by parity with keys that reverse the order, one
// rank opting out: each new communicator has the expected ranks, its
// AllReduce sums only its members, and the parent keeps working alongside.
func TestSplit(t *testing.T) {
	for _, shmOff := range []string{"0", "1"} {
		t.Run("GOCCL_SHM_DISABLE="+shmOff, func(t *testing.T) {
			t.Setenv("GOCCL_SHM_DISABLE", shmOff)
			const n = 5
			errs := goroutineRanks(t, n, 30*time.Second, func(c *goccl.Comm) error {
				ctx := context.Background()
				r := c.Rank()
				color := r % 2
				if r == 4 {
					color = goccl.SplitNoColor
				}
				sub, err := c.Split(ctx, color, -r)
				if err != nil {
					return err
				}
				if r == 4 {
					if sub != nil {
						return errors.New("SplitNoColor returned a communicator")
					}
				} else {
					defer sub.Close()
					// Members: even {0, 2}, odd {1, 3}; key -rank reverses them.
					members := map[int][]int{0: {2, 0}, 1: {3, 1}}[color]
					if sub.Size() != 2 || members[sub.Rank()] != r {
						return fmt.Errorf("rank %d: new rank %d of %d, want position in %v", r, sub.Rank(), sub.Size(), members)
					}
					buf := []int64{int64(1 << r)}
					if err := goccl.AllReduce(ctx, sub, buf, buf, 1, goccl.Sum); err != nil {
						return err
					}
					want := int64(1<<members[0] | 1<<members[1])
					if buf[0] != want {
						return fmt.Errorf("rank %d: AllReduce in color %d = %d, want %d", r, color, buf[0], want)
					}
				}
				// The parent still works, and a second Split makes another one.
				buf := []int64{int64(r)}
				if err := goccl.AllReduce(ctx, c, buf, buf, 1, goccl.Sum); err != nil || buf[0] != 10 {
					return fmt.Errorf("rank %d: parent AllReduce = %d, %v", r, buf[0], err)
				}
				all, err := c.Split(ctx, 0, 0)
				if err != nil {
					return err
				}
				defer all.Close()
				if all.Size() != n || all.Rank() != r {
					return fmt.Errorf("rank %d: Split(0, 0) gave rank %d of %d", r, all.Rank(), all.Size())
				}
				return all.Barrier(ctx)
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// TestRebuildAfterFailure poisons a communicator (ranks disagree on a
// count), then rebuilds twice: with Split on the poisoned communicator, and
// with a new Init; both new communicators work.
func TestRebuildAfterFailure(t *testing.T) {
	const n = 3
	fresh := rendezvous.NewMemStore()
	errs := goroutineRanks(t, n, 10*time.Second, func(c *goccl.Comm) error {
		ctx := context.Background()
		r := c.Rank()
		buf := make([]float32, 16)
		count := 16
		if r == 1 {
			count = 8
		}
		if err := goccl.AllReduce(ctx, c, buf[:count], buf[:count], count, goccl.Sum); err == nil {
			return errors.New("mismatched AllReduce succeeded")
		}
		if c.Err() == nil {
			return errors.New("communicator not poisoned")
		}
		if err := c.Barrier(ctx); err == nil {
			return errors.New("poisoned communicator ran a Barrier")
		}
		sub, err := c.Split(ctx, 0, r)
		if err != nil {
			return fmt.Errorf("Split after failure: %w", err)
		}
		defer sub.Close()
		x := []float64{float64(r + 1)}
		if err := goccl.AllReduce(ctx, sub, x, x, 1, goccl.Sum); err != nil || x[0] != 6 {
			return fmt.Errorf("AllReduce on the split communicator = %v, %v", x[0], err)
		}
		re, err := goccl.Init(ctx, goccl.WithRank(r), goccl.WithWorldSize(n), goccl.WithStore(fresh))
		if err != nil {
			return fmt.Errorf("re-Init: %w", err)
		}
		defer re.Close()
		x[0] = float64(r + 1)
		if err := goccl.AllReduce(ctx, re, x, x, 1, goccl.Max); err != nil || x[0] != 3 {
			return fmt.Errorf("AllReduce after re-Init = %v, %v", x[0], err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
