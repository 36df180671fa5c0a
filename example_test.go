package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
)

// ranks runs fn on n goroutine ranks of one communicator, joined through an
// in-memory store (a job would start one process per rank with a launcher
// and call goccl.Init(ctx)), and prints what each rank returns, in rank
// order.
func ranks(n int, fn func(ctx context.Context, c *goccl.Comm) (string, error)) {
	ctx := context.Background()
	store := rendezvous.NewMemStore()
	defer store.Close()
	out := make([]string, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			c, err := goccl.Init(ctx, goccl.WithRank(r), goccl.WithWorldSize(n), goccl.WithStore(store))
			if err != nil {
				out[r] = err.Error()
				return
			}
			defer c.Close()
			if out[r], err = fn(ctx, c); err != nil {
				out[r] = err.Error()
			}
		})
	}
	wg.Wait()
	for r, s := range out {
		fmt.Printf("rank %d: %s\n", r, s)
	}
}

// Every rank contributes its vector; every rank receives the element-wise
// sum (in place: send and receive buffers are the same slice).
func ExampleAllReduce() {
	ranks(3, func(ctx context.Context, c *goccl.Comm) (string, error) {
		r := float32(c.Rank())
		x := []float32{r, 10 * r}
		err := goccl.AllReduce(ctx, c, x, x, len(x), goccl.Sum)
		return fmt.Sprint(x), err
	})
	// Output:
	// rank 0: [3 30]
	// rank 1: [3 30]
	// rank 2: [3 30]
}

// The root's buffer is copied to every rank.
func ExampleBroadcast() {
	ranks(3, func(ctx context.Context, c *goccl.Comm) (string, error) {
		x := []int64{0, 0}
		if c.Rank() == 1 {
			x = []int64{7, 8}
		}
		err := goccl.Broadcast(ctx, c, x, x, len(x), 1)
		return fmt.Sprint(x), err
	})
	// Output:
	// rank 0: [7 8]
	// rank 1: [7 8]
	// rank 2: [7 8]
}

// Only the root receives the reduction (here the maximum).
func ExampleReduce() {
	ranks(3, func(ctx context.Context, c *goccl.Comm) (string, error) {
		x := []int32{int32(c.Rank()), -int32(c.Rank())}
		max := make([]int32, 2)
		err := goccl.Reduce(ctx, c, x, max, len(x), goccl.Max, 0)
		return fmt.Sprint(max), err
	})
	// Output:
	// rank 0: [2 0]
	// rank 1: [0 0]
	// rank 2: [0 0]
}

// Every rank receives every rank's block, in rank order; count is per rank.
func ExampleAllGather() {
	ranks(3, func(ctx context.Context, c *goccl.Comm) (string, error) {
		mine := []uint8{uint8(c.Rank()), uint8(c.Rank())}
		all := make([]uint8, 2*c.Size())
		err := goccl.AllGather(ctx, c, mine, all, 2)
		return fmt.Sprint(all), err
	})
	// Output:
	// rank 0: [0 0 1 1 2 2]
	// rank 1: [0 0 1 1 2 2]
	// rank 2: [0 0 1 1 2 2]
}

// Rank p receives block p of the element-wise sum; count is the block size.
func ExampleReduceScatter() {
	ranks(2, func(ctx context.Context, c *goccl.Comm) (string, error) {
		x := []float64{1, 2, 3, 4} // the same on both ranks
		block := make([]float64, 2)
		err := goccl.ReduceScatter(ctx, c, x, block, 2, goccl.Sum)
		return fmt.Sprint(block), err
	})
	// Output:
	// rank 0: [2 4]
	// rank 1: [6 8]
}

// Block q of rank p's send buffer becomes block p of rank q's receive
// buffer.
func ExampleAllToAll() {
	ranks(2, func(ctx context.Context, c *goccl.Comm) (string, error) {
		r := int32(c.Rank())
		send := []int32{10*r + 0, 10*r + 1} // one element for each rank
		recv := make([]int32, 2)
		err := goccl.AllToAll(ctx, c, send, recv, 1)
		return fmt.Sprint(recv), err
	})
	// Output:
	// rank 0: [0 10]
	// rank 1: [1 11]
}

// Per-peer counts and displacements (in elements): rank 0 sends one element
// to itself and two to rank 1; rank 1 sends none to rank 0 and one to
// itself.
func ExampleAllToAllv() {
	ranks(2, func(ctx context.Context, c *goccl.Comm) (string, error) {
		var send, recv []float32
		var sc, sd, rc, rd []int
		if c.Rank() == 0 {
			send, sc, sd = []float32{1, 2, 3}, []int{1, 2}, []int{0, 1}
			recv, rc, rd = make([]float32, 1), []int{1, 0}, []int{0, 1}
		} else {
			send, sc, sd = []float32{9}, []int{0, 1}, []int{0, 0}
			recv, rc, rd = make([]float32, 3), []int{2, 1}, []int{0, 2}
		}
		err := goccl.AllToAllv(ctx, c, send, sc, sd, recv, rc, rd)
		return fmt.Sprint(recv), err
	})
	// Output:
	// rank 0: [1]
	// rank 1: [2 3 9]
}

// The root collects every rank's block; Scatter is the reverse.
func ExampleGather() {
	ranks(3, func(ctx context.Context, c *goccl.Comm) (string, error) {
		mine := []int64{int64(100 * c.Rank())}
		var all []int64
		if c.Rank() == 2 {
			all = make([]int64, c.Size())
		}
		err := goccl.Gather(ctx, c, mine, all, 1, 2)
		return fmt.Sprint(all), err
	})
	// Output:
	// rank 0: []
	// rank 1: []
	// rank 2: [0 100 200]
}

// The root hands block p of its buffer to rank p.
func ExampleScatter() {
	ranks(3, func(ctx context.Context, c *goccl.Comm) (string, error) {
		var all []uint32
		if c.Rank() == 0 {
			all = []uint32{5, 6, 7}
		}
		mine := make([]uint32, 1)
		err := goccl.Scatter(ctx, c, all, mine, 1, 0)
		return fmt.Sprint(mine), err
	})
	// Output:
	// rank 0: [5]
	// rank 1: [6]
	// rank 2: [7]
}

// Point to point: every Send is matched by a Recv on the peer, in order.
func ExampleSend() {
	ranks(2, func(ctx context.Context, c *goccl.Comm) (string, error) {
		buf := []float32{0, 0, 0}
		if c.Rank() == 0 {
			buf = []float32{1.5, 2.5, 3.5}
			return "sent", goccl.Send(ctx, c, buf, len(buf), 1)
		}
		err := goccl.Recv(ctx, c, buf, len(buf), 0)
		return fmt.Sprint(buf), err
	})
	// Output:
	// rank 0: sent
	// rank 1: [1.5 2.5 3.5]
}

// A ring shift: every rank sends to the next and receives from the
// previous; the two halves run together, so it cannot deadlock.
func ExampleSendRecv() {
	ranks(3, func(ctx context.Context, c *goccl.Comm) (string, error) {
		r, n := c.Rank(), c.Size()
		out, in := []int32{int32(r)}, []int32{-1}
		err := goccl.SendRecv(ctx, c, out, (r+1)%n, in, (r+n-1)%n, 1)
		return fmt.Sprint(in), err
	})
	// Output:
	// rank 0: [2]
	// rank 1: [0]
	// rank 2: [1]
}

// The non-blocking form returns at once; the buffer belongs to the
// operation until Wait (or Test) reports it done.
func ExampleIAllReduce() {
	ranks(2, func(ctx context.Context, c *goccl.Comm) (string, error) {
		grad := []float32{float32(c.Rank()) + 1}
		req, err := goccl.IAllReduce(ctx, c, grad, grad, 1, goccl.Avg)
		if err != nil {
			return "", err
		}
		// ... compute here while the AllReduce runs ...
		err = req.Wait(ctx)
		return fmt.Sprint(grad), err
	})
	// Output:
	// rank 0: [1.5]
	// rank 1: [1.5]
}

// An all-pairs exchange in which every rank posts all its sends before its
// receives: in a Group they progress together, whatever the message size.
func ExampleComm_Group() {
	ranks(3, func(ctx context.Context, c *goccl.Comm) (string, error) {
		r, n := c.Rank(), c.Size()
		in := make([]int32, n)
		err := c.Group(ctx, func(g *goccl.Group) error {
			for p := 0; p < n; p++ {
				if err := goccl.GroupSend(g, []int32{int32(10*r + p)}, 1, p); err != nil {
					return err
				}
			}
			for p := 0; p < n; p++ {
				if err := goccl.GroupRecv(g, in[p:p+1], 1, p); err != nil {
					return err
				}
			}
			return nil
		})
		return fmt.Sprint(in), err
	})
	// Output:
	// rank 0: [0 10 20]
	// rank 1: [1 11 21]
	// rank 2: [2 12 22]
}

// A disagreement between ranks is an error naming the field and both
// values, on the ranks that see it, instead of a hang or garbage.
func ExampleErrMismatch() {
	ranks(2, func(ctx context.Context, c *goccl.Comm) (string, error) {
		x := make([]float32, 4+c.Rank()) // rank 1 passes a different count
		err := goccl.AllReduce(ctx, c, x, x, len(x), goccl.Sum)
		if errors.Is(err, goccl.ErrMismatch) {
			return "ErrMismatch", nil
		}
		return "", err
	})
	// Output:
	// rank 0: ErrMismatch
	// rank 1: ErrMismatch
}
