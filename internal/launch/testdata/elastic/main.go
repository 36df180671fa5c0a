// Command elastic is a rank program for the tests of goccl run
// --max-restarts: it sums step+1 over the ranks for -steps steps. When a
// step fails (a rank died), the survivors shrink past the dead rank and
// grow back by one when the replacement that goccl run starts calls
// goccl.Join (goccl.Joining); then rank 0 broadcasts the step and the sum
// so far, and the step is done again with every rank. Each rank prints
// "final SIZE SUM" at the end: 3 ranks and 8 steps give 3*(1+...+8) = 108
// on every rank, the replacement included.
//
// With -kill-rank R -kill-at-step S, rank R kills itself (SIGKILL) before
// step S, once: its replacement does not.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/config"
)

func main() {
	steps := flag.Int("steps", 8, "AllReduce steps")
	killRank := flag.Int("kill-rank", -1, "the rank that kills itself (SIGKILL), once")
	killAt := flag.Int("kill-at-step", 3, "the step before which -kill-rank dies")
	timeout := flag.Duration("timeout", 90*time.Second, "bound on the whole run")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	os.Exit(run(ctx, *steps, *killRank, *killAt))
}

func run(ctx context.Context, steps, killRank, killAt int) int {
	var comms []*goccl.Comm // every communicator made, closed at the end (later ones use the first's store)
	defer func() {
		for i := len(comms) - 1; i >= 0; i-- {
			comms[i].Close()
		}
	}()
	keep := func(c *goccl.Comm, err error) (*goccl.Comm, error) {
		if err == nil {
			comms = append(comms, c)
		}
		return c, err
	}
	joining := goccl.Joining()
	step, sum := 0, 0.0
	var c *goccl.Comm
	var err error
	if joining {
		// GOCCL_RANK is the failed rank's: for the logs only.
		fmt.Printf("replacing rank %s: joining\n", config.Rank.Get())
		if c, err = keep(goccl.Join(ctx)); err == nil {
			step, sum, err = syncState(ctx, c, step, sum)
		}
	} else {
		c, err = keep(goccl.Init(ctx))
	}
	if err != nil {
		fmt.Println("ERR start:", err)
		return 1
	}
	me := c.Rank() // the first communicator's: GOCCL_RANK
	for step < steps {
		if !joining && me == killRank && step == killAt {
			fmt.Printf("rank %d: killing myself before step %d\n", me, step)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		x := []float64{float64(step + 1)}
		if err := goccl.AllReduce(ctx, c, x, x, 1, goccl.Sum); err != nil {
			fmt.Printf("step %d failed: %v\n", step, err)
			if c, err = recoverComm(ctx, c, keep); err == nil {
				step, sum, err = syncState(ctx, c, step, sum)
			}
			if err != nil {
				fmt.Println("ERR recovery:", err)
				return 1
			}
			continue
		}
		sum += x[0]
		step++
	}
	fmt.Printf("final %d %g\n", c.Size(), sum)
	return 0
}

// recoverComm shrinks c past its dead ranks and grows the result back by
// one, for the replacement that goccl run starts.
func recoverComm(ctx context.Context, c *goccl.Comm, keep func(*goccl.Comm, error) (*goccl.Comm, error)) (*goccl.Comm, error) {
	s, err := keep(c.Shrink(ctx))
	if err != nil {
		return nil, err
	}
	fmt.Printf("shrunk to %d ranks\n", s.Size())
	g, err := keep(s.Grow(ctx, 1))
	if err != nil {
		return nil, err
	}
	fmt.Printf("grew to %d ranks\n", g.Size())
	return g, nil
}

// syncState gives every rank of c rank 0's step and sum.
func syncState(ctx context.Context, c *goccl.Comm, step int, sum float64) (int, float64, error) {
	st := []float64{float64(step), sum}
	if err := goccl.Broadcast(ctx, c, st, st, 2, 0); err != nil {
		return 0, 0, err
	}
	return int(st[0]), st[1], nil
}
