package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

// TestMeshInterleaved builds a 2x2x2 mesh of 8 goroutine ranks and, round
// after round, interleaves an AllGather on "x", a ReduceScatter on "y" and an
// AllReduce on "z": first blocking, in the same order on every rank (the
// SPMD rule), then non-blocking, issued in an order that differs from rank
// to rank and waited for in yet another: each dimension's communicator sees
// its operations in the same order on its ranks, which is all the rule asks.
// Every result is checked, and the test fails instead of hanging (timeout).
func TestMeshInterleaved(t *testing.T) {
	const n, rounds = 8, 12
	errs := goroutineRanks(t, n, 30*time.Second, func(c *goccl.Comm) error {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		r := c.Rank()
		m, err := goccl.NewMesh(ctx, c, []int{2, 2, 2}, []string{"x", "y", "z"})
		if err != nil {
			return err
		}
		defer m.Close()
		want := []int{r / 4, r / 2 % 2, r % 2} // row-major, as torch.arange(8).view(2, 2, 2)
		if !slices.Equal(m.Coords(), want) {
			return fmt.Errorf("rank %d: coords %v, want %v", r, m.Coords(), want)
		}
		// group(d) lists the ranks of this rank's d-group by coordinate.
		strides := []int{4, 2, 1}
		group := func(d int) []int {
			base := r - want[d]*strides[d]
			return []int{base, base + strides[d]}
		}
		for _, name := range []string{"x", "y", "z"} {
			d := m.Dim(name)
			if sub := m.Comm(name); sub.Size() != 2 || sub.Rank() != want[d] {
				return fmt.Errorf("rank %d: %s communicator rank %d of %d, want %d of 2", r, name, sub.Rank(), sub.Size(), want[d])
			}
		}
		x, y, z := m.Comm("x"), m.Comm("y"), m.Comm("z")
		for i := range rounds {
			nonBlocking := i%2 == 1
			agSend, agRecv := []int64{int64(100*r + i)}, make([]int64, 2)
			rsSend, rsRecv := []int64{int64(r), int64(r + 1000*i)}, make([]int64, 1)
			arBuf := []int64{int64(r * (i + 1))}
			ops := []func() (goccl.Request, error){
				func() (goccl.Request, error) { return goccl.IAllGather(ctx, x, agSend, agRecv, 1) },
				func() (goccl.Request, error) { return goccl.IReduceScatter(ctx, y, rsSend, rsRecv, 1, goccl.Sum) },
				func() (goccl.Request, error) { return goccl.IAllReduce(ctx, z, arBuf, arBuf, 1, goccl.Sum) },
			}
			if nonBlocking {
				reqs := make([]goccl.Request, 3)
				for k := range 3 { // issue order rotated by rank
					j := (k + r) % 3
					if reqs[j], err = ops[j](); err != nil {
						return err
					}
				}
				for k := range 3 { // wait order rotated the other way
					if err := reqs[(3-k+r)%3].Wait(ctx); err != nil {
						return err
					}
				}
			} else {
				if err := goccl.AllGather(ctx, x, agSend, agRecv, 1); err != nil {
					return err
				}
				if err := goccl.ReduceScatter(ctx, y, rsSend, rsRecv, 1, goccl.Sum); err != nil {
					return err
				}
				if err := goccl.AllReduce(ctx, z, arBuf, arBuf, 1, goccl.Sum); err != nil {
					return err
				}
			}
			gx, gy, gz := group(0), group(1), group(2)
			if w := []int64{int64(100*gx[0] + i), int64(100*gx[1] + i)}; !slices.Equal(agRecv, w) {
				return fmt.Errorf("rank %d round %d: AllGather on x = %v, want %v", r, i, agRecv, w)
			}
			var w int64
			for _, p := range gy {
				w += []int64{int64(p), int64(p + 1000*i)}[want[1]]
			}
			if rsRecv[0] != w {
				return fmt.Errorf("rank %d round %d: ReduceScatter on y = %d, want %d", r, i, rsRecv[0], w)
			}
			if w := int64((gz[0] + gz[1]) * (i + 1)); arBuf[0] != w {
				return fmt.Errorf("rank %d round %d: AllReduce on z = %d, want %d", r, i, arBuf[0], w)
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestMeshShapes checks NewMesh's arguments and the layout of a 2x4 mesh
// (HSDP's replicate x shard).
func TestMeshShapes(t *testing.T) {
	errs := goroutineRanks(t, 8, 30*time.Second, func(c *goccl.Comm) error {
		ctx := context.Background()
		for _, bad := range []struct {
			shape []int
			names []string
		}{
			{[]int{2, 2}, []string{"a", "b"}}, // 4 ranks, not 8
			{[]int{8}, []string{"a", "b"}},    // lengths differ
			{[]int{2, 4}, []string{"a", "a"}}, // a name twice
			{[]int{0, 8}, []string{"a", "b"}}, // size 0
			{[]int{2, 4}, []string{"a", ""}},  // no name
			{nil, nil},                        // no dimension
		} {
			_, err := goccl.NewMesh(ctx, c, bad.shape, bad.names)
			if !errors.Is(err, goccl.ErrInvalidArgument) {
				return fmt.Errorf("NewMesh(%v, %q) = %v, want ErrInvalidArgument", bad.shape, bad.names, err)
			}
		}
		m, err := goccl.NewMesh(ctx, c, []int{2, 4}, []string{"replicate", "shard"})
		if err != nil {
			return err
		}
		defer m.Close()
		r := c.Rank()
		shard, repl := m.Comm("shard"), m.Comm("replicate")
		if shard.Size() != 4 || shard.Rank() != r%4 || repl.Size() != 2 || repl.Rank() != r/4 {
			return fmt.Errorf("rank %d: shard %d/%d, replicate %d/%d", r, shard.Rank(), shard.Size(), repl.Rank(), repl.Size())
		}
		if m.Comm("tp") != nil || m.Coord("tp") != -1 {
			return errors.New("a dimension the mesh lacks has a communicator")
		}
		// A row sums its 4 ranks, a column its 2.
		buf := []int64{int64(r)}
		if err := goccl.AllReduce(ctx, shard, buf, buf, 1, goccl.Sum); err != nil {
			return err
		}
		row := int64(r / 4 * 4)
		if buf[0] != 4*row+6 {
			return fmt.Errorf("rank %d: shard sum %d, want %d", r, buf[0], 4*row+6)
		}
		buf[0] = int64(r)
		if err := goccl.AllReduce(ctx, repl, buf, buf, 1, goccl.Sum); err != nil {
			return err
		}
		if want := int64(2*(r%4) + 4); buf[0] != want {
			return fmt.Errorf("rank %d: replicate sum %d, want %d", r, buf[0], want)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
