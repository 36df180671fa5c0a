package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/goccl/goccl/examples/internal/mnist"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/goccl/goccl"
)

// position is where the training is: the next step's epoch, its offset in
// the epoch's permutation, and the steps done so far (the learning rate's
// clock).
type position struct{ epoch, offset, step int }

// elastic is the fault-tolerant side of a run (-elastic): every step ends
// with the ranks' agreement to commit it (ddp's ShouldCommit), so that a
// step is applied on every survivor or on none; when a rank has failed the
// survivors shrink (goccl's Comm.Shrink) and redo the step on fewer ranks,
// each taking a larger shard of the same global batch; when processes wait
// to join (a replacement that goccl run started: -join, or GOCCL_JOIN),
// the ranks grow to take them in (Comm.Grow), and rank 0 sends them the
// model, the optimizer state and the position.
type elastic struct {
	stdout  io.Writer
	root    *goccl.Comm // the communicator of Init or Join: its store is the job's, closed last
	current *goccl.Comm // the one the Trainer uses
	// killRank, killAtEpoch: the chaos test (-kill-rank, -kill-at-epoch):
	// the process that started as rank killRank kills itself (SIGKILL)
	// before the first step of that epoch, unless it joined.
	killRank, killAtEpoch int
	startRank             int
	joined                bool
	lost                  []time.Duration // time lost per failure
}

// out is rank 0's output (the rank 0 of the moment: a shrink renumbers).
func (e *elastic) out(t *Trainer) io.Writer {
	if t.rank == 0 {
		return e.stdout
	}
	return io.Discard
}

// chaos kills this process when the chaos test says so.
func (e *elastic) chaos(epoch int) {
	if !e.joined && e.startRank == e.killRank && epoch == e.killAtEpoch {
		fmt.Fprintf(os.Stderr, "ddp-mnist: chaos: rank %d kills itself before epoch %d\n", e.startRank, epoch)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
}

// finishStep ends a step whose communication returned stepErr: it applies
// the update if the ranks commit it and reports whether the step counts;
// after a failure it shrinks the communicator, and when processes wait to
// join it grows (next is where they start). The step must be redone when
// it does not count.
func (e *elastic) finishStep(ctx context.Context, t *Trainer, stepErr error, started time.Time, next position) (bool, error) {
	v, err := t.dp.ShouldCommit(ctx, stepErr)
	if err != nil {
		return false, err
	}
	if v.Commit {
		t.update()
	}
	if v.Shrink {
		nc, err := t.comm.Shrink(ctx)
		if err != nil {
			return false, fmt.Errorf("after a failure (step error: %v): %w", stepErr, err)
		}
		if err := e.rebind(ctx, t, nc); err != nil {
			return false, err
		}
		lost := time.Since(started)
		e.lost = append(e.lost, lost)
		fmt.Fprintf(e.out(t), "failure at epoch %d step %d: rank(s) %v lost; %d ranks go on (the step is redone), %.0f ms lost\n",
			next.epoch, next.step, v.Failed, nc.Size(), float64(lost.Microseconds())/1e3)
		if !v.Commit {
			return false, nil
		}
	}
	if v.Joiners > 0 {
		if err := e.grow(ctx, t, v.Joiners, next); err != nil {
			return false, err
		}
	}
	return true, nil
}

// grow takes n joiners in and sends them the state.
func (e *elastic) grow(ctx context.Context, t *Trainer, n int, next position) error {
	start := time.Now()
	nc, err := t.comm.Grow(ctx, n)
	if err != nil {
		return fmt.Errorf("growing by %d: %w", n, err)
	}
	if err := e.rebind(ctx, t, nc); err != nil {
		return err
	}
	if _, err := t.syncState(ctx, next); err != nil {
		return err
	}
	fmt.Fprintf(e.out(t), "%d rank(s) joined at epoch %d step %d: %d ranks, %.0f ms to grow and send the state\n",
		n, next.epoch, next.step, nc.Size(), float64(time.Since(start).Microseconds())/1e3)
	return nil
}

// rebind moves the Trainer to communicator nc, closing the one it leaves
// unless it is the root (whose store the job still uses).
func (e *elastic) rebind(ctx context.Context, t *Trainer, nc *goccl.Comm) error {
	old := t.comm
	if err := t.bind(ctx, nc); err != nil {
		return err
	}
	if old != e.root {
		old.Close()
	}
	e.current = nc
	return nil
}

// runElastic runs the training elastically: a communicator from Init, or
// from Join (-join), and the run's end closes the last one, then the root.
func runElastic(ctx context.Context, cfg config, trainSet, testSet *mnist.Dataset, stdout io.Writer) (rank int, err error) {
	var c *goccl.Comm
	if cfg.join {
		c, err = goccl.Join(ctx)
	} else {
		c, err = goccl.Init(ctx)
	}
	if err != nil {
		return -1, err
	}
	el := &elastic{stdout: stdout, root: c, current: c, killRank: cfg.killRank, killAtEpoch: cfg.killAtEpoch, startRank: c.Rank(), joined: cfg.join}
	defer func() {
		if el.current != c {
			el.current.Close()
		}
		if cerr := c.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the communicator: %w", cerr)
		}
	}()
	res, err := trainElastic(ctx, c, cfg, trainSet, testSet, stdout, el)
	if err == nil && !res.identical {
		err = errors.New("the ranks' parameters diverged")
	}
	return el.current.Rank(), err
}

// syncState sends rank 0's optimizer state and position to every rank
// (after bind has sent the parameters) and returns the position.
func (t *Trainer) syncState(ctx context.Context, p position) (position, error) {
	o := t.opt
	head := []int64{int64(o.t), int64(p.epoch), int64(p.offset), int64(p.step)}
	for _, buf := range [][]float32{o.m, o.v} {
		if err := goccl.Broadcast(ctx, t.comm, buf, buf, len(buf), 0); err != nil {
			return p, fmt.Errorf("sending the optimizer state: %w", err)
		}
	}
	if err := goccl.Broadcast(ctx, t.comm, head, head, len(head), 0); err != nil {
		return p, fmt.Errorf("sending the position: %w", err)
	}
	o.t = int(head[0])
	return position{int(head[1]), int(head[2]), int(head[3])}, nil
}

// summary is the failures' line.
func (e *elastic) summary(w io.Writer) {
	if len(e.lost) == 0 {
		return
	}
	var total time.Duration
	for _, d := range e.lost {
		total += d
	}
	fmt.Fprintf(w, "failures survived: %d, time lost per failure %.0f ms\n", len(e.lost), float64(total.Microseconds())/1e3/float64(len(e.lost)))
}

// elasticStep runs one step (Step) on the global batch idx; elastic (el
// not nil), it also ends it (finishStep) and redoes it until the ranks
// commit it, next being the position after it.
func (t *Trainer) elasticStep(ctx context.Context, el *elastic, d *mnist.Dataset, idx []int, next position) (float64, int, error) {
	for {
		started := time.Now()
		l, k, err := t.Step(ctx, d, idx)
		if el == nil {
			return l, k, err
		}
		ok, ferr := el.finishStep(ctx, t, err, started, next)
		if ferr != nil {
			return 0, 0, ferr
		}
		if ok {
			return l, k, nil
		}
	}
}
