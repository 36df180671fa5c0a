package main

import (
	"context"
	"fmt"
	"time"

	"github.com/goccl/goccl"
)

// opener makes the communicator of one step (step counts from 0). Every
// rank calls it with the same step numbers, in the same order.
type opener func(ctx context.Context, step int) (*goccl.Comm, error)

// stats is one rank's timing of a run of steps.
type stats struct {
	steps     int
	total     time.Duration // all the steps, open and close included
	open      time.Duration // in the opener (Init, Split) over all the steps
	close     time.Duration // in Close over all the steps
	allReduce time.Duration // in AllReduce over all the steps
	size      int           // world size
	rank      int
}

// perStep returns the mean of d over the steps.
func (s stats) perStep(d time.Duration) time.Duration {
	if s.steps == 0 {
		return 0
	}
	return d / time.Duration(s.steps)
}

// fill writes rank r's input of a step: every element (r+1)*(step%3+1), so
// that the sum over n ranks is n(n+1)/2*(step%3+1), exact in float32 for
// the world sizes of a host.
func fill(buf []float32, rank, step int) {
	v := float32((rank + 1) * (step%3 + 1))
	for i := range buf {
		buf[i] = v
	}
}

// check verifies a step's AllReduce(Sum) output.
func check(buf []float32, size, rank, step int) error {
	want := float32(size * (size + 1) / 2 * (step%3 + 1))
	for i, v := range buf {
		if v != want {
			return fmt.Errorf("step %d: AllReduce(Sum) element %d is %v, want %v (world size %d, rank %d)", step, i, v, want, size, rank)
		}
	}
	return nil
}

// runSteps runs steps training steps, each one AllReduce(Sum) of count
// float32, and checks every result. With perStep, every step opens its own
// communicator with open and closes it at the end of the step (a naive job);
// otherwise one communicator, opened once before the timed steps, serves
// all of them (its open and close are not counted in the steps).
func runSteps(ctx context.Context, open opener, perStep bool, count, steps int) (st stats, err error) {
	send := make([]float32, count)
	recv := make([]float32, count)
	var shared *goccl.Comm
	if !perStep {
		if shared, err = open(ctx, 0); err != nil {
			return st, fmt.Errorf("opening the communicator: %w", err)
		}
		defer func() {
			if cerr := shared.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("closing the communicator: %w", cerr)
			}
		}()
		// Start the timed steps together.
		if err := shared.Barrier(ctx); err != nil {
			return st, err
		}
	}
	start := time.Now()
	for step := range steps {
		c := shared
		if perStep {
			t := time.Now()
			if c, err = open(ctx, step); err != nil {
				return st, fmt.Errorf("step %d: opening the communicator: %w", step, err)
			}
			st.open += time.Since(t)
		}
		st.rank, st.size = c.Rank(), c.Size()
		fill(send, c.Rank(), step)
		t := time.Now()
		err := goccl.AllReduce(ctx, c, send, recv, count, goccl.Sum)
		st.allReduce += time.Since(t)
		if err == nil {
			err = check(recv, c.Size(), c.Rank(), step)
		}
		if perStep {
			t := time.Now()
			cerr := c.Close()
			st.close += time.Since(t)
			if cerr != nil && err == nil {
				err = fmt.Errorf("closing the communicator: %w", cerr)
			}
		}
		if err != nil {
			return st, fmt.Errorf("step %d: %w", step, err)
		}
		st.steps++
	}
	st.total = time.Since(start)
	return st, nil
}
