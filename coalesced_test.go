package goccl_test

import (
	"context"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

// TestCoalescedBadInput: the coalesced collectives and AllToAllSingle
// refuse bad lists, short buffers and bad splits with ErrInvalidArgument,
// naming the operation, the buffer and the counts.
func TestCoalescedBadInput(t *testing.T) {
	ctx := context.Background()
	c, err := goccl.Init(ctx, goccl.WithRank(0), goccl.WithWorldSize(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f := func(n ...int) [][]float32 {
		l := make([][]float32, len(n))
		for i, k := range n {
			l[i] = make([]float32, k)
		}
		return l
	}
	ints := [][]int32{make([]int32, 2)}
	_, ierr := goccl.IAllGatherCoalesced(ctx, c, f(2), f(2, 1))
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"lists differ", goccl.AllGatherCoalesced(ctx, c, f(2, 3), f(2)), []string{"rank 0", "AllGather", "2 send buffers and 1 receive buffers"}},
		{"empty lists", goccl.ReduceScatterCoalesced(ctx, c, f(), f(), goccl.Sum), []string{"ReduceScatter", "0 send buffers"}},
		{"short recv", goccl.AllGatherCoalesced(ctx, c, f(2, 3), f(2, 2)), []string{"AllGather", "recvbufs[1] holds 2 elements of float,", "needs 3"}},
		{"short send", goccl.ReduceScatterCoalesced(ctx, c, f(4, 1), f(4, 2), goccl.Max), []string{"ReduceScatter", "sendbufs[1] holds 1", "needs 2"}},
		{"avg on integers", goccl.ReduceScatterCoalesced(ctx, c, ints, ints, goccl.Avg), []string{"ReduceScatter", "avg", "int32"}},
		{"bad op", goccl.ReduceScatterCoalesced(ctx, c, f(1), f(1), goccl.RedOp(9)), []string{"ReduceScatter", "unknown reduction op 9"}},
		{"I form, lists differ", ierr, []string{"AllGather", "1 send buffers and 2 receive buffers"}},
		{"splits entries", goccl.AllToAllSingle(ctx, c, make([]float32, 4), []int{2, 2}, make([]float32, 4), nil), []string{"AllToAllv", "sendcounts has 2 entries"}},
		{"split past buffer", goccl.AllToAllSingle(ctx, c, make([]float32, 4), []int{5}, make([]float32, 5), []int{5}), []string{"AllToAllv", "peer 0", "sendcount 5", "4 elements"}},
	} {
		checkInvalid(t, tc.name, tc.err, tc.want)
	}
	// On 3 ranks, a buffer of 4 elements without splits does not divide.
	errs := goroutineRanks(t, 3, 5*time.Second, func(c *goccl.Comm) error {
		return goccl.AllToAllSingle(ctx, c, make([]float32, 4), nil, make([]float32, 3), []int{1, 1, 1})
	})
	for _, err := range errs {
		checkInvalid(t, "uneven split", err, []string{"AllToAllv", "sendbuf's 4 elements do not split evenly over 3 ranks"})
	}
	// What is refused does not poison: a good call still runs.
	if err := goccl.AllGatherCoalesced(ctx, c, f(2, 3), f(2, 3)); err != nil {
		t.Fatalf("AllGatherCoalesced after refused calls: %v", err)
	}
}
