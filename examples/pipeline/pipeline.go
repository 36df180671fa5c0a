package main

import (
	"context"
	"fmt"
	"time"

	"github.com/goccl/goccl"
	"gonum.org/v1/gonum/blas/blas32"
)

// computeMode says what a forward or backward pass does.
type computeMode int

const (
	// computeGemm runs the real matrix products.
	computeGemm computeMode = iota
	// computeFixed sleeps instead, unit for a forward pass and 2*unit for a
	// backward pass: a model of compute in which the schedule alone
	// decides the bubble (4 processes on fewer cores distort real
	// compute), with no arithmetic done and messages of zeros.
	computeFixed
)

func (c computeMode) String() string {
	if c == computeFixed {
		return "fixed"
	}
	return "gemm"
}

// pipeConfig is one pipelined pass over a batch.
type pipeConfig struct {
	sch     Schedule
	m       int // micro-batches
	compute computeMode
	unit    time.Duration // computeFixed: the forward pass's duration
	hidden  int           // width of the messages' rows
}

// passStats is what one stage saw in one pass.
type passStats struct {
	forwards, backwards int
	maxInFlight         int           // most micro-batches forwarded and not yet backwarded at once
	busy                time.Duration // in forward and backward passes
	blocked             time.Duration // in SendRecv, waiting for a neighbour
	wall                time.Duration // from the barrier before to the barrier after
	lossSum             float64       // the last stage's summed loss (computeGemm)
}

// bubble is the share of the wall time the stage was not computing.
func (s passStats) bubble() float64 {
	if s.wall <= 0 {
		return 0
	}
	return 1 - s.busy.Seconds()/s.wall.Seconds()
}

// pipelinePass runs one pipelined forward and backward pass of a batch on
// stage st, this rank's (stage c.Rank() of c.Size()), and leaves the
// gradient of the mean loss over the batch, accumulated over the
// micro-batches, in st.grad (computeGemm). x (batch x hidden rows) is read on
// the first stage and the labels y on the last; both may be nil elsewhere,
// but every rank passes the same batch size.
//
// Messages are activations forward (micro-batch rows of the stage's output
// to stage s+1) and their gradients backward (to stage s-1), hidden-wide
// rows each, in the order of the micro-batches on both sides. Between two
// operations the stage sends the output of the first and receives the
// input of the second in one goccl.SendRecv, whose halves run concurrently:
// so two neighbours that send to each other at the same time (1F1B's steady
// state: an activation one way, a gradient the other) cannot deadlock,
// whatever the transport buffers. (goccl runs a communicator's operations
// one at a time in issue order, so ISend followed by Recv would not
// help: the Recv would start only after the send had completed.)
func pipelinePass(ctx context.Context, c *goccl.Comm, st *stage, cfg pipeConfig, batch int, x []float32, y []uint8) (passStats, error) {
	var ps passStats
	s, p := c.Rank(), c.Size()
	if cfg.m < 1 || batch%cfg.m != 0 {
		return ps, fmt.Errorf("stage %d: batch %d does not split into %d equal micro-batches", s, batch, cfg.m)
	}
	ops, err := stageOps(cfg.sch, p, cfg.m, s)
	if err != nil {
		return ps, fmt.Errorf("stage %d: %w", s, err)
	}
	n := batch / cfg.m // rows per micro-batch
	count := n * cfg.hidden
	first, last := s == 0, s == p-1
	if cfg.compute == computeGemm {
		clear(st.grad)
	}
	acts := make([][]blas32.General, cfg.m) // live activations per micro-batch
	var dlogits [][]float32                 // last stage: the logits' gradient per micro-batch
	if last {
		dlogits = make([][]float32, cfg.m)
	}
	live := 0

	// compute runs op o on its input in and returns its output (nil when it
	// goes to no neighbour).
	compute := func(o Op, in []float32) []float32 {
		t := time.Now()
		defer func() { ps.busy += time.Since(t) }()
		if o.Backward {
			ps.backwards++
			live--
			if cfg.compute == computeFixed {
				time.Sleep(2 * cfg.unit)
				if first {
					return nil
				}
				return make([]float32, count)
			}
			a := acts[o.MB]
			acts[o.MB] = nil
			if last {
				in, dlogits[o.MB] = dlogits[o.MB], nil
			}
			return st.backward(a, in, !first)
		}
		ps.forwards++
		live++
		ps.maxInFlight = max(ps.maxInFlight, live)
		if cfg.compute == computeFixed {
			time.Sleep(cfg.unit)
			acts[o.MB] = []blas32.General{}
			if last {
				return nil
			}
			return make([]float32, count)
		}
		if first {
			in = x[o.MB*count : (o.MB+1)*count]
		}
		a := st.forward(in, n)
		acts[o.MB] = a
		out := a[len(a)-1]
		if last {
			ps.lossSum += lossGrad(out, y[o.MB*n:(o.MB+1)*n], batch)
			dlogits[o.MB] = out.Data
			return nil
		}
		return out.Data
	}

	if err := c.Barrier(ctx); err != nil {
		return ps, fmt.Errorf("stage %d: barrier before %v: %w", s, cfg.sch, err)
	}
	start := time.Now()
	var out []float32 // the previous op's output, to send
	outPeer, prev := -1, Op{}
	for k := 0; k <= len(ops); k++ {
		var in []float32
		inPeer := -1
		if k < len(ops) {
			switch o := ops[k]; {
			case !o.Backward && !first:
				inPeer = s - 1
			case o.Backward && !last:
				inPeer = s + 1
			}
			if inPeer >= 0 {
				in = make([]float32, count)
			}
		}
		if outPeer >= 0 || inPeer >= 0 {
			t := time.Now()
			err := goccl.SendRecv(ctx, c, out, outPeer, in, inPeer, count)
			ps.blocked += time.Since(t)
			if err != nil {
				return ps, fmt.Errorf("stage %d: %v m=%d: SendRecv (send %s output to %d, receive %s input from %d): %w",
					s, cfg.sch, cfg.m, opName(k > 0, prev), outPeer, opName(k < len(ops), ops[min(k, len(ops)-1)]), inPeer, err)
			}
		}
		if k == len(ops) {
			break
		}
		prev = ops[k]
		out, outPeer = compute(prev, in), -1
		if out != nil {
			outPeer = s + 1
			if prev.Backward {
				outPeer = s - 1
			}
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return ps, fmt.Errorf("stage %d: barrier after %v: %w", s, cfg.sch, err)
	}
	ps.wall = time.Since(start)
	return ps, nil
}

// opName names op o for an error message, or "no" when there is none.
func opName(ok bool, o Op) string {
	if !ok {
		return "no"
	}
	return o.String()
}
