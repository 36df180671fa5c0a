// Command latency measures the distribution of per-operation times of a
// collective (float32, sum), which nccl-tests-style averages hide: a few
// slow iterations (a descheduled rank, a sleeping waiter) dominate the mean
// of small operations. Every rank times each iteration; rank 0 prints, per
// size, its median, 90th and 99th percentiles and mean.
//
//	go run ./cmd/goccl run -np 2 ./examples/latency -op allreduce -b 8 -e 1M -n 20000
//
// Sizes are bytes per rank's input (AllGather's output is np times larger).
// GOCCL_ALGO, GOCCL_SHM_DISABLE and the other GOCCL_* variables apply.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/goccl/goccl"
)

func main() {
	op := flag.String("op", "allreduce", "allreduce, allgather or broadcast")
	minB := flag.Int("b", 8, "smallest size in bytes (multiple of 4)")
	maxB := flag.Int("e", 1<<20, "largest size in bytes")
	factor := flag.Int("f", 8, "size multiplication factor")
	iters := flag.Int("n", 10000, "timed iterations per size (fewer above 64 KiB: n*64KiB/size, at least 200)")
	flag.Parse()
	if err := run(*op, *minB, *maxB, *factor, *iters); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(op string, minB, maxB, factor, iters int) error {
	if minB < 4 || maxB < minB || factor < 2 || iters < 1 {
		return fmt.Errorf("bad sizes or iterations: -b %d -e %d -f %d -n %d", minB, maxB, factor, iters)
	}
	ctx := context.Background()
	c, err := goccl.Init(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	maxCount := maxB / 4
	send := make([]float32, maxCount)
	recv := make([]float32, maxCount*c.Size())
	call := func(n int) error {
		switch op {
		case "allreduce":
			return goccl.AllReduce(ctx, c, send, recv, n, goccl.Sum)
		case "allgather":
			return goccl.AllGather(ctx, c, send, recv, n)
		case "broadcast":
			return goccl.Broadcast(ctx, c, send, recv, n, 0)
		}
		return fmt.Errorf("unknown -op %q", op)
	}
	if c.Rank() == 0 {
		fmt.Printf("# %s, %d ranks, float32; time per operation in µs on rank 0\n", op, c.Size())
		fmt.Printf("%12s %8s %10s %10s %10s %10s\n", "bytes", "iters", "p50", "p90", "p99", "mean")
	}
	times := make([]time.Duration, iters)
	for size := minB; size <= maxB; size *= factor {
		n := size / 4
		it := iters
		if size > 64<<10 {
			it = max(200, iters*(64<<10)/size)
		}
		for i := 0; i < max(10, it/10); i++ { // warm-up
			if err := call(n); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		var total time.Duration
		for i := 0; i < it; i++ {
			t := time.Now()
			if err := call(n); err != nil {
				return err
			}
			times[i] = time.Since(t)
			total += times[i]
		}
		d := times[:it]
		slices.Sort(d)
		us := func(x time.Duration) float64 { return float64(x.Nanoseconds()) / 1e3 }
		if c.Rank() == 0 {
			fmt.Printf("%12d %8d %10.2f %10.2f %10.2f %10.2f\n", size, it,
				us(d[it/2]), us(d[it*9/10]), us(d[it*99/100]), us(total)/float64(it))
		}
	}
	return c.Barrier(ctx)
}
