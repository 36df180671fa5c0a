// Package fsdp is sharded data parallelism over goccl: ZeRO's three stages
// (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models", SC 2020) and PyTorch's FullyShardedDataParallel, for Go
// training loops on float32 parameters.
//
// The model's parameters are grouped in units (FSDP's wrapped modules: a
// layer, a block), each one flat vector of float32. A unit of L elements is
// padded to a multiple of the shard group's size P and cut in P equal
// shards; rank r owns shard r: its slice of the parameters, of the averaged
// gradient and of the optimizer's state. What else a rank keeps is the
// stage's choice:
//
//   - ZeRO1: every rank keeps the whole parameters and gradients; the
//     gradient is averaged with AllReduce, each rank updates its shard with
//     its optimizer state, and an AllGather puts the updated shards back
//     together on every rank (optimizer state: 1/P).
//   - ZeRO2: the same, but a unit's gradient is computed in one of two
//     unit-sized buffers and averaged with ReduceScatter straight into the
//     rank's shard (gradients: the shards plus two units').
//   - ZeRO3: only the shard of the parameters stays; a unit's parameters are
//     all-gathered into one of two buffers before its forward and again
//     before its backward (unless the buffer still holds it from the
//     forward), and the next unit's AllGather is issued as soon as one is
//     waited for, so that it overlaps the current unit's compute (FSDP's
//     FULL_SHARD with forward and backward prefetch). Peak: the shards plus
//     two units' parameters and two units' gradients.
//
// HSDP (hybrid sharding: shard inside a host, replicate across hosts) is
// ZeRO3 or ZeRO2 with Options.Replicate: gradients are reduce-scattered in
// the shard group, then their shards averaged over the replicate group.
//
// A step on every rank, units numbered in forward order:
//
//	for u := range f.Units() { p, _ := f.Forward(ctx, u); forward with p }
//	for u := f.Units() - 1; u >= 0; u-- {
//		p, g, _ := f.Backward(ctx, u) // write unit u's gradient into g
//		f.ReduceGrad(ctx, u)          // issued, not waited for
//	}
//	f.Step(ctx)                       // waits, updates the shards, gathers (ZeRO1/2)
//
// Every rank must make the same calls in the same order. The numerics are
// data parallelism's (the average of the ranks' gradients, then the
// optimizer): TestEqualsDDP checks every stage against package ddp within
// 1e-5.
package fsdp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goccl/goccl"
)

// Stage is what is sharded: ZeRO's stages 1 to 3.
type Stage int

const (
	ZeRO1 Stage = 1 // optimizer state
	ZeRO2 Stage = 2 // and gradients
	ZeRO3 Stage = 3 // and parameters (FSDP's FULL_SHARD)
)

// Optimizer updates a unit's shard of parameters from its shard of the
// averaged gradient; it keeps its own state for that shard (so the state is
// 1/P of the model's). Adam and SGD are provided.
type Optimizer interface {
	// Step updates params in place from grads (same length: the shard).
	Step(unit int, params, grads []float32)
	// StateBytes is the optimizer's state for the shards it has seen.
	StateBytes() int64
}

// Options configure an FSDP.
type Options struct {
	Stage Stage // ZeRO1, ZeRO2 or ZeRO3 (0: ZeRO3)
	// Replicate, when not nil, is the replicate group of HSDP: the ranks
	// holding the same shard on other hosts (a mesh's "replicate"
	// dimension); the communicator given to New is then the shard group.
	Replicate *goccl.Comm
	// NoPrefetch turns ZeRO3's prefetch off: each unit's AllGather is
	// issued only when its Forward or Backward asks for it.
	NoPrefetch bool
}

// Memory is what a rank holds, in bytes (float32: 4 each).
type Memory struct {
	Params   int64 // parameters kept between steps: whole (ZeRO1/2) or the shard (ZeRO3)
	Grads    int64 // gradients: whole (ZeRO1), the shards plus two unit buffers (ZeRO2/3)
	OptState int64 // the optimizer's state (Optimizer.StateBytes)
	Gather   int64 // ZeRO3's two buffers for gathered parameters (the current unit and the next)
}

// Total is the sum.
func (m Memory) Total() int64 { return m.Params + m.Grads + m.OptState + m.Gather }

// Stats are the communication counters since New or ResetStats.
type Stats struct {
	Exposed  time.Duration // time Forward, Backward and Step were blocked on collectives
	Bytes    int64         // bytes this rank handed to collectives in the step
	Gathered int           // parameter AllGathers issued (Params' not counted)
	// Prefetched is how many of them ZeRO3 issued ahead, for the unit after
	// (forward) or before (backward) the one asked for.
	Prefetched int
}

// unit is one flat parameter group.
type unit struct {
	n, shard int       // elements, and elements per shard (padded n / P)
	full     []float32 // ZeRO1/2: the whole parameters (padded); ZeRO3: nil
	grad     []float32 // ZeRO1/2: the whole gradient (padded)
	pshard   []float32 // ZeRO3: this rank's parameter shard
	gshard   []float32 // ZeRO2/3: this rank's averaged gradient shard
	red      goccl.Request
	reduced  bool // red was issued this step
}

// FSDP shards a model's units over a communicator (see the package doc).
type FSDP struct {
	c, repl *goccl.Comm
	stage   Stage
	opt     Optimizer
	units   []unit
	rank, p int
	noPre   bool

	// ZeRO3: two gather buffers and two gradient buffers, each as large as
	// the largest unit; which unit each gather buffer holds (-1: none) and
	// its pending AllGather.
	gbuf    [2][]float32
	gunit   [2]int
	gather  [2]goccl.Request
	pending [2]bool
	gradBuf [2][]float32
	gradOf  [2]int          // the unit whose ReduceScatter reads gradBuf[i] (-1: none)
	open    int             // ZeRO2/3: the unit whose gradient buffer Backward handed out and ReduceGrad has not taken (-1: none)
	reqs    []goccl.Request // ZeRO1/2: Step's parameter AllGathers

	stats Stats
}

// New shards units (each a unit's initial parameters, the same on every
// rank) over c with opt as the optimizer. The slices are copied.
func New(ctx context.Context, c *goccl.Comm, units [][]float32, opt Optimizer, o Options) (*FSDP, error) {
	if c == nil {
		return nil, errors.New("fsdp: nil communicator")
	}
	if opt == nil {
		return nil, errors.New("fsdp: nil optimizer")
	}
	if len(units) == 0 {
		return nil, errors.New("fsdp: no units")
	}
	if o.Stage == 0 {
		o.Stage = ZeRO3
	}
	if o.Stage < ZeRO1 || o.Stage > ZeRO3 {
		return nil, fmt.Errorf("fsdp: stage %d, want 1, 2 or 3", o.Stage)
	}
	if o.Replicate != nil && o.Stage == ZeRO1 {
		return nil, errors.New("fsdp: HSDP (Options.Replicate) shards gradients: use ZeRO2 or ZeRO3")
	}
	f := &FSDP{c: c, repl: o.Replicate, stage: o.Stage, opt: opt, rank: c.Rank(), p: c.Size(), noPre: o.NoPrefetch,
		gunit: [2]int{-1, -1}, gradOf: [2]int{-1, -1}, open: -1}
	largest := 0
	for i, init := range units {
		if len(init) == 0 {
			return nil, fmt.Errorf("fsdp: unit %d is empty", i)
		}
		s := (len(init) + f.p - 1) / f.p
		u := unit{n: len(init), shard: s}
		largest = max(largest, s*f.p)
		if f.stage == ZeRO3 {
			u.pshard = make([]float32, s)
			copy(u.pshard, init[min(len(init), f.rank*s):min(len(init), (f.rank+1)*s)])
		} else {
			u.full = make([]float32, s*f.p)
			copy(u.full, init)
		}
		if f.stage == ZeRO1 {
			u.grad = make([]float32, s*f.p)
		}
		if f.stage != ZeRO1 {
			u.gshard = make([]float32, s)
		}
		f.units = append(f.units, u)
	}
	if f.stage != ZeRO1 {
		for i := range 2 {
			f.gradBuf[i] = make([]float32, largest)
		}
	}
	if f.stage == ZeRO3 {
		for i := range 2 {
			f.gbuf[i] = make([]float32, largest)
		}
	}
	return f, nil
}

// Units is the number of units.
func (f *FSDP) Units() int { return len(f.units) }

// Len is unit u's length in elements (without the padding).
func (f *FSDP) Len(u int) int { return f.units[u].n }

// Forward returns unit u's whole parameters for its forward pass: a
// read-only view, which under ZeRO3 is valid until the next Forward or
// Backward (that call may gather another unit into its buffer), under
// ZeRO1/2 until Step. ZeRO3 gathers them and prefetches unit u+1.
func (f *FSDP) Forward(ctx context.Context, u int) ([]float32, error) {
	if err := f.check(u); err != nil {
		return nil, err
	}
	if f.stage != ZeRO3 {
		return f.units[u].full[:f.units[u].n], nil
	}
	return f.unshard(ctx, u, u+1)
}

// Backward returns unit u's whole parameters and the buffer its gradient
// goes into (zeroed; length Len(u)), for its backward pass; the parameters
// are valid as Forward's are, the gradient buffer until ReduceGrad(u).
// ZeRO3 gathers the parameters again unless a buffer still holds them
// (prefetched by the previous Backward, or the last unit's from its
// forward) and prefetches unit u-1. Call ReduceGrad(u) once the gradient
// is final, before the next Backward.
func (f *FSDP) Backward(ctx context.Context, u int) (params, grad []float32, err error) {
	if err := f.check(u); err != nil {
		return nil, nil, err
	}
	un := &f.units[u]
	if f.stage != ZeRO1 && f.open >= 0 {
		return nil, nil, fmt.Errorf("fsdp: Backward(%d) before ReduceGrad(%d): its gradient buffer would be reused", u, f.open)
	}
	switch f.stage {
	case ZeRO1:
		clear(un.grad)
		return un.full[:un.n], un.grad[:un.n], nil
	case ZeRO2:
		params = un.full[:un.n]
	case ZeRO3:
		// The last unit's parameters are usually still gathered from its
		// forward (FSDP keeps them for the backward that follows at once).
		params, err = f.unshard(ctx, u, u-1)
		if err != nil {
			return nil, nil, err
		}
	}
	// The gradient buffer: one not read by a ReduceScatter in flight.
	i := u % 2
	if f.gradOf[i] >= 0 {
		if err := f.waitReduce(ctx, f.gradOf[i]); err != nil {
			return nil, nil, err
		}
		f.gradOf[i] = -1
	}
	g := f.gradBuf[i][:un.shard*f.p]
	clear(g)
	f.open = u
	return params, g[:un.n], nil
}

// ReduceGrad issues the averaging of unit u's gradient over the ranks
// (AllReduce for ZeRO1, ReduceScatter into the rank's shard for ZeRO2/3,
// then an AllReduce of the shard over the replicate group for HSDP). It
// does not wait: Step does.
func (f *FSDP) ReduceGrad(ctx context.Context, u int) error {
	if err := f.check(u); err != nil {
		return err
	}
	un := &f.units[u]
	if un.reduced {
		return fmt.Errorf("fsdp: unit %d's gradient already reduced in this step", u)
	}
	if f.stage != ZeRO1 && f.open != u {
		return fmt.Errorf("fsdp: ReduceGrad(%d) without its Backward (the open gradient is unit %d's)", u, f.open)
	}
	var err error
	switch f.stage {
	case ZeRO1:
		un.red, err = goccl.IAllReduce(ctx, f.c, un.grad, un.grad, len(un.grad), goccl.Avg)
		f.stats.Bytes += int64(4 * len(un.grad))
	case ZeRO2, ZeRO3:
		i := u % 2
		un.red, err = goccl.IReduceScatter(ctx, f.c, f.gradBuf[i][:un.shard*f.p], un.gshard, un.shard, goccl.Avg)
		f.gradOf[i] = u
		f.stats.Bytes += int64(4 * un.shard * f.p)
		// The unit's gathered parameters are no longer needed.
		for b := range 2 {
			if f.gunit[b] == u && !f.pending[b] {
				f.gunit[b] = -1
			}
		}
	}
	if err != nil {
		return fmt.Errorf("fsdp: unit %d: gradient reduction: %w", u, err)
	}
	un.reduced, f.open = true, -1
	return nil
}

// Step waits for every unit's gradient reduction, runs the optimizer on
// this rank's shards and, under ZeRO1/2, all-gathers the updated shards so
// every rank holds the whole parameters again. Every unit must have had its
// ReduceGrad.
func (f *FSDP) Step(ctx context.Context) error {
	for u := range f.units {
		if !f.units[u].reduced {
			return fmt.Errorf("fsdp: Step before unit %d's ReduceGrad", u)
		}
	}
	for u := range f.units {
		if err := f.waitReduce(ctx, u); err != nil {
			return err
		}
	}
	f.gradOf = [2]int{-1, -1}
	// Gathered parameters are about to change: forget them (after any
	// AllGather still in flight into their buffers).
	for b := range 2 {
		if f.pending[b] {
			if err := f.gather[b].Wait(ctx); err != nil {
				return fmt.Errorf("fsdp: unit %d: parameter AllGather: %w", f.gunit[b], err)
			}
			f.pending[b] = false
		}
		f.gunit[b] = -1
	}
	for u := range f.units {
		un := &f.units[u]
		lo, hi := f.rank*un.shard, (f.rank+1)*un.shard
		switch f.stage {
		case ZeRO1:
			f.opt.Step(u, un.full[lo:hi], un.grad[lo:hi])
		case ZeRO2:
			f.opt.Step(u, un.full[lo:hi], un.gshard)
		case ZeRO3:
			f.opt.Step(u, un.pshard, un.gshard)
		}
	}
	if f.stage != ZeRO3 {
		if len(f.reqs) != len(f.units) {
			f.reqs = make([]goccl.Request, len(f.units))
		}
		reqs := f.reqs
		for u := range f.units {
			un := &f.units[u]
			var err error
			reqs[u], err = goccl.IAllGather(ctx, f.c, un.full[f.rank*un.shard:(f.rank+1)*un.shard], un.full, un.shard)
			if err != nil {
				return fmt.Errorf("fsdp: unit %d: parameter AllGather: %w", u, err)
			}
			f.stats.Bytes += int64(4 * un.shard * f.p)
			f.stats.Gathered++
		}
		t0 := time.Now()
		for u, r := range reqs {
			if err := r.Wait(ctx); err != nil {
				return fmt.Errorf("fsdp: unit %d: parameter AllGather: %w", u, err)
			}
		}
		f.stats.Exposed += time.Since(t0)
	}
	for u := range f.units {
		f.units[u].reduced = false
	}
	return nil
}

// waitReduce waits for unit u's gradient reduction (issued by ReduceGrad)
// and, for HSDP, averages its shard over the replicate group.
func (f *FSDP) waitReduce(ctx context.Context, u int) error {
	un := &f.units[u]
	if !un.reduced || un.red == (goccl.Request{}) {
		return nil
	}
	t0 := time.Now()
	err := un.red.Wait(ctx)
	if err == nil && f.repl != nil {
		err = goccl.AllReduce(ctx, f.repl, un.gshard, un.gshard, un.shard, goccl.Avg)
		f.stats.Bytes += int64(4 * un.shard)
	}
	f.stats.Exposed += time.Since(t0)
	un.red = goccl.Request{}
	if err != nil {
		return fmt.Errorf("fsdp: unit %d: gradient reduction: %w", u, err)
	}
	return nil
}

// unshard returns unit u's gathered parameters (ZeRO3): from the buffer a
// prefetch filled, or gathered now; then prefetches unit next (if any).
func (f *FSDP) unshard(ctx context.Context, u, next int) ([]float32, error) {
	b := f.bufferOf(u)
	if b < 0 {
		b = f.freeBuffer(u)
		if err := f.issueGather(ctx, u, b); err != nil {
			return nil, err
		}
	}
	if f.pending[b] {
		t0 := time.Now()
		err := f.gather[b].Wait(ctx)
		f.stats.Exposed += time.Since(t0)
		f.pending[b] = false
		if err != nil {
			f.gunit[b] = -1
			return nil, fmt.Errorf("fsdp: unit %d: parameter AllGather: %w", u, err)
		}
	}
	if !f.noPre && next >= 0 && next < len(f.units) && f.bufferOf(next) < 0 {
		if err := f.issueGather(ctx, next, 1-b); err != nil {
			return nil, err
		}
		f.stats.Prefetched++
	}
	return f.gbuf[b][:f.units[u].n], nil
}

func (f *FSDP) issueGather(ctx context.Context, u, b int) error {
	un := &f.units[u]
	if f.pending[b] { // a prefetch nobody asked for: let it finish first
		if err := f.gather[b].Wait(ctx); err != nil {
			return fmt.Errorf("fsdp: unit %d: parameter AllGather: %w", f.gunit[b], err)
		}
	}
	r, err := goccl.IAllGather(ctx, f.c, un.pshard, f.gbuf[b][:un.shard*f.p], un.shard)
	if err != nil {
		return fmt.Errorf("fsdp: unit %d: parameter AllGather: %w", u, err)
	}
	f.gather[b], f.pending[b], f.gunit[b] = r, true, u
	f.stats.Bytes += int64(4 * un.shard * f.p)
	f.stats.Gathered++
	return nil
}

// bufferOf is the gather buffer holding (or receiving) unit u, or -1.
func (f *FSDP) bufferOf(u int) int {
	for b := range 2 {
		if f.gunit[b] == u {
			return b
		}
	}
	return -1
}

// freeBuffer picks a gather buffer for unit u: an empty one, else the one
// not holding the unit just used.
func (f *FSDP) freeBuffer(u int) int {
	for b := range 2 {
		if f.gunit[b] < 0 {
			return b
		}
	}
	return u % 2
}

func (f *FSDP) check(u int) error {
	if u < 0 || u >= len(f.units) {
		return fmt.Errorf("fsdp: unit %d outside [0, %d)", u, len(f.units))
	}
	return nil
}

// Params copies unit u's whole parameters into dst (length Len(u)); under
// ZeRO3 it all-gathers them (a collective: every rank must call it).
func (f *FSDP) Params(ctx context.Context, u int, dst []float32) error {
	if err := f.check(u); err != nil {
		return err
	}
	un := &f.units[u]
	if f.stage != ZeRO3 {
		copy(dst, un.full[:un.n])
		return nil
	}
	full := make([]float32, un.shard*f.p)
	if err := goccl.AllGather(ctx, f.c, un.pshard, full, un.shard); err != nil {
		return fmt.Errorf("fsdp: unit %d: parameter AllGather: %w", u, err)
	}
	copy(dst, full[:un.n])
	return nil
}

// Memory is what this rank holds now (see Memory).
func (f *FSDP) Memory() Memory {
	var m Memory
	for _, u := range f.units {
		m.Params += 4 * int64(len(u.full)+len(u.pshard))
		m.Grads += 4 * int64(len(u.grad)+len(u.gshard))
	}
	for i := range 2 {
		m.Grads += 4 * int64(len(f.gradBuf[i]))
		m.Gather += 4 * int64(len(f.gbuf[i]))
	}
	m.OptState = f.opt.StateBytes()
	return m
}

// Stats returns the counters since the last ResetStats.
func (f *FSDP) Stats() Stats { return f.stats }

// ResetStats zeroes the counters.
func (f *FSDP) ResetStats() { f.stats = Stats{} }
