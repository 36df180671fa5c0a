// Package exmain is the main function the training examples share: run the
// example with a context that SIGINT and SIGTERM cancel, and turn its error
// into a message naming the rank and an exit status; and their progress
// bars.
package exmain

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"syscall"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/examples/internal/mnist"
	"github.com/goccl/goccl/internal/progress"
)

// Main runs run with the command-line arguments and standard output, then
// exits: 0 on success, 2 for -h, 1 with "NAME: rank R: error" (or
// "NAME: error" when the rank is not known, rank < 0) on failure.
func Main(name string, run func(ctx context.Context, args []string, stdout io.Writer) (rank int, err error)) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	rank, err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case err != nil && rank >= 0:
		fmt.Fprintf(os.Stderr, "%s: rank %d: %v\n", name, rank, err)
		os.Exit(1)
	case err != nil:
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// WithComm makes a communicator from the environment (goccl.Init), runs fn
// with it and with the writer for output (stdout on rank 0, io.Discard on
// the others), and closes it. It returns the rank (-1 when Init failed) and
// fn's error, else Close's.
func WithComm(ctx context.Context, stdout io.Writer, fn func(c *goccl.Comm, out io.Writer) error) (rank int, err error) {
	c, err := goccl.Init(ctx)
	if err != nil {
		return -1, fmt.Errorf("goccl.Init: %w", err)
	}
	defer func() {
		if cerr := c.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the communicator: %w", cerr)
		}
	}()
	out := io.Discard
	if c.Rank() == 0 {
		out = stdout
	}
	return c.Rank(), fn(c, out)
}

// WithMNIST is WithComm for the MNIST examples: it loads the embedded
// training and test sets first (an error there returns rank -1) and
// hands them to fn.
func WithMNIST(ctx context.Context, stdout io.Writer, fn func(c *goccl.Comm, train, test *mnist.Dataset, out io.Writer) error) (rank int, err error) {
	train, test, err := mnist.Load()
	if err != nil {
		return -1, err
	}
	return WithComm(ctx, stdout, func(c *goccl.Comm, out io.Writer) error { return fn(c, train, test, out) })
}

// EpochBar starts the progress bar of one epoch of steps steps, drawn by
// rank 0 only, and only on a terminal unless GOCCL_PROGRESS says otherwise
// (package internal/progress); elsewhere it returns nil, a bar that does
// nothing. Call Increment after each step and Done before printing the
// epoch's line.
func EpochBar(rank, epoch, epochs, steps int) *progress.Bar {
	if rank != 0 {
		return nil
	}
	return progress.New(fmt.Sprintf("epoch %d/%d", epoch, epochs), steps)
}

// Schedule is a training run's steps over n samples in batches of batch:
// perEpoch steps per epoch, total in all (epochs full epochs, or steps > 0
// in all, the last epoch partial), epochs run, and warmup, the first steps
// timings leave out (10, or half of a shorter run).
func Schedule(n, batch, epochs, steps int) (perEpoch, total, epochsRun, warmup int) {
	perEpoch = (n + batch - 1) / batch
	total, epochsRun = epochs*perEpoch, epochs
	if steps > 0 {
		total, epochsRun = steps, (steps+perEpoch-1)/perEpoch
	}
	return perEpoch, total, epochsRun, min(10, total/2)
}

// CosineLR is the learning rate at step of total: lr decayed towards 0
// on a half cosine (SGDR without restarts, Loshchilov and Hutter 2017).
func CosineLR(lr float64, step, total int) float64 {
	return lr * 0.5 * (1 + math.Cos(math.Pi*float64(step)/float64(total)))
}
