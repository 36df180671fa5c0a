package goccl_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

// TestPreMulSum: each rank scales its input by its own scalar before the
// sum, in AllReduce (out of place and in place), ReduceScatter (both),
// Reduce (the root and the others), an I form and ReduceScatterCoalesced;
// the caller's send buffer is never written, and the operators' errors name
// the operation and the value.
func TestPreMulSum(t *testing.T) {
	const n, count = 3, 4
	errs := goroutineRanks(t, n, 30*time.Second, func(c *goccl.Comm) error {
		ctx := context.Background()
		r := c.Rank()
		scalar := func(q int) float64 { return 0.5 * float64(q+1) }
		op, err := c.CreatePreMulSum(scalar(r))
		if err != nil {
			return err
		}
		in := func(q, i int) float64 { return float64(10*q + i) } // rank q's element i
		want := func(i int) float64 {
			var s float64
			for q := range n {
				s += scalar(q) * in(q, i)
			}
			return s
		}
		fill := func(m int) []float64 {
			b := make([]float64, m)
			for i := range b {
				b[i] = in(r, i)
			}
			return b
		}
		check := func(what string, got []float64, off int) error {
			for i, g := range got {
				if w := want(off + i); g != w {
					return fmt.Errorf("rank %d %s: elem %d = %g, want %g", r, what, i, g, w)
				}
			}
			return nil
		}
		// AllReduce, out of place: the send buffer stays as it was.
		send, recv := fill(count), make([]float64, count)
		if err := goccl.AllReduce(ctx, c, send, recv, count, op); err != nil {
			return err
		}
		if err := check("AllReduce", recv, 0); err != nil {
			return err
		}
		if !slices.Equal(send, fill(count)) {
			return fmt.Errorf("rank %d: AllReduce wrote its send buffer: %v", r, send)
		}
		buf := fill(count)
		if err := goccl.AllReduce(ctx, c, buf, buf, count, op); err != nil {
			return err
		}
		if err := check("AllReduce in place", buf, 0); err != nil {
			return err
		}
		// ReduceScatter out of place and in place.
		send, recv = fill(n*count), make([]float64, count)
		if err := goccl.ReduceScatter(ctx, c, send, recv, count, op); err != nil {
			return err
		}
		if err := check("ReduceScatter", recv, r*count); err != nil {
			return err
		}
		if !slices.Equal(send, fill(n*count)) {
			return fmt.Errorf("rank %d: ReduceScatter wrote its send buffer", r)
		}
		send = fill(n * count)
		if err := goccl.ReduceScatter(ctx, c, send, send[r*count:(r+1)*count], count, op); err != nil {
			return err
		}
		if err := check("ReduceScatter in place", send[r*count:(r+1)*count], r*count); err != nil {
			return err
		}
		// Reduce to rank 1: the others scale into scratch.
		send, recv = fill(count), make([]float64, count)
		if err := goccl.Reduce(ctx, c, send, recv, count, op, 1); err != nil {
			return err
		}
		if r == 1 {
			if err := check("Reduce", recv, 0); err != nil {
				return err
			}
		}
		if !slices.Equal(send, fill(count)) {
			return fmt.Errorf("rank %d: Reduce wrote its send buffer", r)
		}
		// The I form, and a coalesced ReduceScatter.
		send, recv = fill(count), make([]float64, count)
		req, err := goccl.IAllReduce(ctx, c, send, recv, count, op)
		if err == nil {
			err = req.Wait(ctx)
		}
		if err != nil {
			return err
		}
		if err := check("IAllReduce", recv, 0); err != nil {
			return err
		}
		sends := [][]float64{fill(n * 2), fill(n * 1)}
		recvs := [][]float64{make([]float64, 2), make([]float64, 1)}
		if err := goccl.ReduceScatterCoalesced(ctx, c, sends, recvs, op); err != nil {
			return err
		}
		if err := check("ReduceScatterCoalesced buffer 0", recvs[0], 2*r); err != nil {
			return err
		}
		if err := check("ReduceScatterCoalesced buffer 1", recvs[1], r); err != nil {
			return err
		}
		return c.DestroyRedOp(op)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestPreMulSumErrors(t *testing.T) {
	ctx := context.Background()
	c, err := goccl.Init(ctx, goccl.WithRank(0), goccl.WithWorldSize(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	op, err := c.CreatePreMulSum(2)
	if err != nil {
		t.Fatal(err)
	}
	f := []float32{1.5, -3}
	if err := goccl.AllReduce(ctx, c, f, f, 2, op); err != nil || f[0] != 3 || f[1] != -6 {
		t.Fatalf("one rank: AllReduce = %v, %v; want [3 -6]", f, err)
	}
	ints := []int32{1, 2}
	checkInvalid(t, "integers", goccl.AllReduce(ctx, c, ints, ints, 2, op), []string{"AllReduce", "premulsum", "int32"})
	checkInvalid(t, "unknown op", goccl.AllReduce(ctx, c, f, f, 2, goccl.RedOp(70)), []string{"AllReduce", "unknown reduction op 70"})
	if err := c.DestroyRedOp(op); err != nil {
		t.Fatal(err)
	}
	checkInvalid(t, "destroyed op", goccl.ReduceScatter(ctx, c, f, f[:1], 1, op), []string{"ReduceScatter", "unknown reduction op 64"})
	checkInvalid(t, "destroyed twice", c.DestroyRedOp(op), []string{"DestroyRedOp", "reduction op 64 was not created"})
	// A destroyed operator's number is handed out again.
	if again, err := c.CreatePreMulSum(0.5); err != nil || again != op {
		t.Fatalf("CreatePreMulSum after Destroy = %d, %v; want %d", again, err, op)
	}
}
