// Package ddp is data-parallel training for Go training loops over goccl, in
// the manner of PyTorch's DistributedDataParallel: every rank holds a replica
// of the model, the gradients live in a few flat buckets, and each bucket is
// averaged over the ranks with a non-blocking AllReduce as soon as its last
// gradient is final, so that communication overlaps the rest of the
// backward pass.
//
// A step on every rank:
//
//	d.ZeroGrad()                 // or let the backward overwrite d.Grad(i)
//	forward; backward, writing parameter i's gradient into d.Grad(i)
//	  and calling d.MarkReady(i) once it is final (last layers first)
//	d.Wait(ctx)                  // every bucket averaged over the ranks
//	optimizer step reading d.Grad(i)
//
// Buckets. Parameters are registered once, in forward order. They are
// assigned to buckets in REVERSE registration order (the backward pass
// produces the last layers' gradients first): a parameter joins the current
// bucket when the bucket's size in bytes (4 per float32) stays within the
// cap, else it starts the next bucket; a parameter is never split, so one
// larger than the cap has a bucket of its own. The first bucket's cap is
// Options.FirstBucketMB (default 1 MiB), the others' Options.BucketCapMB
// (default 25 MiB). Within a bucket the parameters also lie in reverse
// registration order. Grad(i) is a view of its bucket's buffer (gradient as
// bucket view): there is no copy between gradients and buckets.
//
// Order. Every rank issues the buckets' collectives in bucket order (0, 1,
// ...), whatever order the gradients are marked in: a bucket whose gradients
// are all marked is issued as soon as every earlier bucket has been issued.
// When the backward marks in exact reverse registration order this is the
// moment of its last MarkReady; marking out of order only delays buckets,
// it never reorders them, so the ranks always agree.
//
// Averaging. The reduction is the mean over the ranks (goccl.Avg), as in
// PyTorch: with gradient accumulation (NoSync), the micro-steps' gradients
// add up locally and the next synchronised step averages that sum over the
// ranks. Clearing the gradients is the caller's job (ZeroGrad).
package ddp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goccl/goccl"
)

// Default bucket caps, in MiB (2^20 bytes).
const (
	DefaultBucketCapMB   = 25
	DefaultFirstBucketMB = 1
)

// Options configure a DDP. The zero value gives the defaults.
type Options struct {
	// BucketCapMB is the size cap of every bucket but the first, in MiB
	// (2^20 bytes). 0: DefaultBucketCapMB.
	BucketCapMB float64
	// FirstBucketMB is the size cap of the first bucket (the last
	// parameters), in MiB: small, so that communication starts early.
	// 0: DefaultFirstBucketMB.
	FirstBucketMB float64
	// Hook, when not nil, replaces the default communication of a bucket
	// (an IAllReduce(Avg) in place, in float32). See FP16Compress and
	// BF16Compress.
	Hook Hook
}

// Work is a communication in flight, as a Hook returns it.
type Work interface {
	// Wait blocks until the communication is done and its result is in the
	// bucket, and returns its error. ctx bounds the wait only.
	Wait(ctx context.Context) error
}

// Hook is a bucket's communication. Issue starts the reduction of bucket b,
// whose gradients are grad (the bucket's buffer, which the hook may read and
// must leave holding the average over the ranks once the returned Work's
// Wait has returned nil). Issue must not block on the other ranks; every
// rank calls it for the same buckets in the same order. ctx is the context
// given to New. Issue is called on the goroutine calling MarkReady, Work.Wait
// on the one calling Wait. To keep a step free of allocations, return a
// pointer kept per bucket rather than a new value.
type Hook interface {
	Issue(ctx context.Context, c *goccl.Comm, b int, grad []float32) (Work, error)
}

// Bucket describes one bucket: the parameters it holds, in its order (reverse
// registration order), and its length in float32 elements.
type Bucket struct {
	Params []int
	Len    int
}

// Stats are the timings of the data-parallel steps, as time.Duration values
// (nanoseconds). A step starts at the end of the previous synchronised Wait
// (at New for the first) and ends at the end of its Wait; steps under NoSync
// belong to the next synchronised step.
type Stats struct {
	Steps int // synchronised steps completed since New or ResetStats

	// The last step.
	Step    time.Duration // step start to the end of its Wait
	Compute time.Duration // step start to its last MarkReady (forward and backward as the DDP sees them)
	Exposed time.Duration // the time Wait was blocked: communication not hidden behind compute
	// BucketComm[b] is bucket b's communication time, from its issue to
	// the moment the DDP saw it done (it looks at a MarkReady and in Wait,
	// so this is an upper bound).
	BucketComm []time.Duration
	// Comm is the time the buckets' AllReduces ran in the last step (the
	// union of their Request.Span intervals, which GOCCL_TRACE_FILE shows
	// as the operations), and CommHidden the part of it before Wait was
	// called, hidden behind the step's compute; Comm - CommHidden ran
	// while Wait was blocked. Both are 0 with a Hook (its Work has no
	// span).
	Comm, CommHidden time.Duration
	// CommBytes is the gradient payload this rank handed to AllReduce in
	// the last step: the buckets' lengths times 4 bytes (float32), or 2
	// with FP16Compress and BF16Compress (a Hook from outside this package
	// counts as float32); 0 when the DDP has no communicator. A ring
	// AllReduce over P ranks sends (and receives) about 2(P-1)/P times
	// that per rank.
	CommBytes int64

	// Sums over the Steps steps.
	TotalStep, TotalCompute, TotalExposed time.Duration
	TotalComm, TotalCommHidden            time.Duration
	TotalCommBytes                        int64
}

// DDP is one rank's data-parallel state. Its methods are for one goroutine
// (the training loop's).
type DDP struct {
	ctx  context.Context
	c    *goccl.Comm // nil: world size 1, no communication
	hook Hook
	elem int64 // payload bytes per gradient element (Stats.CommBytes)

	params   [][]float32
	grads    [][]float32 // views of the buckets
	bucketOf []int
	buckets  []bucket

	ready     []bool
	nReady    int
	nextIssue int // the next bucket to issue
	sync      bool

	stepStart time.Time
	lastMark  time.Time
	stepBytes int64 // payload issued this step
	stats     Stats

	// Elastic steps (elastic.go): steps committed, and when rank 0 last
	// asked the store for joiners.
	commits   int
	joinCheck time.Time
}

type bucket struct {
	Bucket
	buf     []float32
	pending int // parameters not yet marked this step
	issued  bool
	done    bool // seen done (for the timing)
	req     goccl.Request
	work    Work // hook's, when a hook is set
	issueAt time.Time
	comm    time.Duration
	err     error
}

// AssignBuckets returns the buckets New makes for parameters of the given
// lengths (float32 elements) with the given caps in MiB (0: the defaults).
func AssignBuckets(lens []int, firstMB, capMB float64) []Bucket {
	if firstMB <= 0 {
		firstMB = DefaultFirstBucketMB
	}
	if capMB <= 0 {
		capMB = DefaultBucketCapMB
	}
	var bs []Bucket
	var cur Bucket
	limit := firstMB * (1 << 20)
	for i := len(lens) - 1; i >= 0; i-- {
		if len(cur.Params) > 0 && float64(4*(cur.Len+lens[i])) > limit {
			bs = append(bs, cur)
			cur = Bucket{}
			limit = capMB * (1 << 20)
		}
		cur.Params = append(cur.Params, i)
		cur.Len += lens[i]
	}
	if len(cur.Params) > 0 {
		bs = append(bs, cur)
	}
	return bs
}

// New registers the parameters (one slice per tensor, in forward order),
// broadcasts rank 0's values into them and returns the DDP with zeroed
// gradients. c nil stands for a world of one rank (no communication). ctx is
// the context of the collectives the DDP issues later (at MarkReady): it
// should live as long as the training.
func New(ctx context.Context, c *goccl.Comm, params [][]float32, opts Options) (*DDP, error) {
	if len(params) == 0 {
		return nil, errors.New("ddp: no parameters")
	}
	lens := make([]int, len(params))
	for i, p := range params {
		if len(p) == 0 {
			return nil, fmt.Errorf("ddp: parameter %d is empty", i)
		}
		lens[i] = len(p)
	}
	if opts.BucketCapMB < 0 || opts.FirstBucketMB < 0 {
		return nil, errors.New("ddp: negative bucket cap")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	d := &DDP{ctx: ctx, c: c, hook: opts.Hook, elem: 4, params: params, sync: true,
		grads: make([][]float32, len(params)), bucketOf: make([]int, len(params)), ready: make([]bool, len(params))}
	if h, ok := opts.Hook.(payloadSizer); ok {
		d.elem = h.elemBytes()
	}
	for b, bk := range AssignBuckets(lens, opts.FirstBucketMB, opts.BucketCapMB) {
		buf := make([]float32, bk.Len)
		o := 0
		for _, i := range bk.Params {
			d.grads[i] = buf[o : o+lens[i] : o+lens[i]]
			d.bucketOf[i] = b
			o += lens[i]
		}
		d.buckets = append(d.buckets, bucket{Bucket: bk, buf: buf, pending: len(bk.Params)})
	}
	d.stats.BucketComm = make([]time.Duration, len(d.buckets))
	if c != nil {
		for i, p := range params {
			if err := goccl.Broadcast(ctx, c, p, p, len(p), 0); err != nil {
				return nil, fmt.Errorf("ddp: broadcast of parameter %d: %w", i, err)
			}
		}
	}
	d.stepStart = time.Now()
	return d, nil
}

// NumParams is the number of registered parameters.
func (d *DDP) NumParams() int { return len(d.params) }

// Grad returns parameter i's gradient: a view of its bucket's buffer, for the
// backward pass to write (or add) into and the optimizer to read.
func (d *DDP) Grad(i int) []float32 { return d.grads[i] }

// Buckets describes the buckets, in issue order.
func (d *DDP) Buckets() []Bucket {
	bs := make([]Bucket, len(d.buckets))
	for b := range d.buckets {
		bs[b] = d.buckets[b].Bucket
	}
	return bs
}

// Issued is the number of this step's buckets whose communication has been
// issued (buckets 0 to Issued()-1).
func (d *DDP) Issued() int { return d.nextIssue }

// ZeroGrad sets every gradient to zero. It must not be called while buckets
// are in flight (between the first issue of a step and its Wait).
func (d *DDP) ZeroGrad() {
	for b := range d.buckets {
		clear(d.buckets[b].buf)
	}
}

// SetSync turns communication on (the default) or off. While off, MarkReady
// only checks the marks and Wait returns at once: gradients accumulate
// locally, and the next synchronised step averages the accumulated sums. It
// must be changed between steps only.
func (d *DDP) SetSync(on bool) { d.sync = on }

// NoSync runs fn (forward and backward of one or more micro-steps) with
// communication off (see SetSync) and turns it back on.
func (d *DDP) NoSync(fn func() error) error {
	prev := d.sync
	d.sync = false
	defer func() { d.sync = prev }()
	return fn()
}

// MarkReady tells the DDP that parameter i's gradient is final for this step.
// When that completes a bucket (and every earlier bucket is issued), the
// bucket's communication is issued at once. Marking a parameter twice in one
// step is an error naming it.
func (d *DDP) MarkReady(i int) error {
	if i < 0 || i >= len(d.params) {
		return fmt.Errorf("ddp: MarkReady(%d): no such parameter (%d registered)", i, len(d.params))
	}
	if d.ready[i] {
		return fmt.Errorf("ddp: parameter %d marked ready twice in one step", i)
	}
	d.ready[i] = true
	d.nReady++
	d.lastMark = time.Now()
	if !d.sync {
		if d.nReady == len(d.params) { // a micro-step's backward is complete
			d.resetMarks()
		}
		return nil
	}
	d.poll()
	d.buckets[d.bucketOf[i]].pending--
	for d.nextIssue < len(d.buckets) && d.buckets[d.nextIssue].pending == 0 {
		d.issue(d.nextIssue)
		d.nextIssue++
	}
	return nil
}

// issue starts bucket b's communication. An error is kept for Wait.
func (d *DDP) issue(b int) {
	bk := &d.buckets[b]
	bk.issued = true
	bk.issueAt = time.Now()
	if d.c == nil {
		bk.done = true
		return
	}
	d.stepBytes += d.elem * int64(len(bk.buf))
	if d.hook != nil {
		bk.work, bk.err = d.hook.Issue(d.ctx, d.c, b, bk.buf)
	} else {
		bk.req, bk.err = goccl.IAllReduce(d.ctx, d.c, bk.buf, bk.buf, len(bk.buf), goccl.Avg)
	}
	if bk.err != nil {
		bk.done = true
	}
}

// poll records the end of issued default-path buckets that are done, for the
// timings (hooks' Work has no Test: their time ends in Wait).
func (d *DDP) poll() {
	if d.hook != nil || d.c == nil {
		return
	}
	now := time.Time{}
	for b := range d.nextIssue {
		bk := &d.buckets[b]
		if bk.done {
			continue
		}
		if ok, _ := bk.req.Test(); !ok {
			break // they end in order
		}
		if now.IsZero() {
			now = time.Now()
		}
		bk.done = true
		bk.comm = now.Sub(bk.issueAt)
	}
}

// commSpans is the union of the step's bucket AllReduces' spans (they run
// in issue order, so the spans come sorted) and its part before
// blockStart, when Wait was called.
func (d *DDP) commSpans(blockStart time.Time) (comm, hidden time.Duration) {
	if d.hook != nil || d.c == nil {
		return 0, 0
	}
	var lo, hi time.Time // the merged interval being built
	flush := func() {
		comm += hi.Sub(lo)
		if e := minTime(hi, blockStart); e.After(lo) {
			hidden += e.Sub(lo)
		}
	}
	for b := range d.buckets {
		start, end, ok := d.buckets[b].req.Span()
		if !ok {
			continue
		}
		if !lo.IsZero() && start.After(hi) {
			flush()
			lo = time.Time{}
		}
		if lo.IsZero() {
			lo, hi = start, end
		} else if end.After(hi) {
			hi = end
		}
	}
	if !lo.IsZero() {
		flush()
	}
	return comm, hidden
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (d *DDP) resetMarks() {
	clear(d.ready)
	d.nReady = 0
	for b := range d.buckets {
		bk := &d.buckets[b]
		bk.pending = len(bk.Params)
		bk.issued, bk.done, bk.err, bk.work = false, false, nil, nil
		bk.comm = 0
	}
	d.nextIssue = 0
	d.stepBytes = 0
}

// Wait waits for every bucket of the step and ends the step: afterwards each
// Grad(i) holds the gradient averaged over the ranks. It returns the error of
// the first failed bucket, naming it, or, when some parameters were not
// marked ready, an error naming them (after waiting for the buckets that were
// issued). ctx bounds the waiting; when it ends first, Wait returns its error
// and the step stays open (call Wait again). Under NoSync, Wait only checks
// the marks.
func (d *DDP) Wait(ctx context.Context) error {
	if !d.sync {
		if d.nReady != 0 {
			return d.unmarked()
		}
		return nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	blockStart := time.Now()
	var first error
	for b := range d.nextIssue {
		bk := &d.buckets[b]
		if bk.done && bk.err != nil {
			if first == nil {
				first = d.bucketErr(b, bk.err)
			}
			continue
		}
		var err error
		if d.hook != nil {
			if bk.work != nil {
				err = bk.work.Wait(ctx)
			}
		} else if d.c != nil {
			err = bk.req.Wait(ctx)
		}
		if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return err // the step stays open
		}
		if !bk.done || d.hook != nil {
			bk.comm = time.Since(bk.issueAt)
		}
		bk.done = true
		if err != nil {
			bk.err = err
			if first == nil {
				first = d.bucketErr(b, err)
			}
		}
	}
	end := time.Now()
	if d.nReady != len(d.params) {
		err := d.unmarked()
		d.resetMarks()
		d.stepStart = end
		if first != nil {
			return errors.Join(first, err)
		}
		return err
	}
	// On the communicator's trace (GOCCL_TRACE_FILE), beside the buckets'
	// AllReduces: the step's compute, up to this call of Wait (so that the
	// spans a program adds for its forward and backward passes nest in it),
	// then the time Wait was blocked.
	d.c.TraceSpan("ddp compute", d.stepStart, blockStart)
	d.c.TraceSpan("ddp wait", blockStart, end)
	s := &d.stats
	s.Steps++
	s.Step = end.Sub(d.stepStart)
	s.Compute = d.lastMark.Sub(d.stepStart)
	s.Exposed = end.Sub(blockStart)
	s.CommBytes = d.stepBytes
	for b := range d.buckets {
		s.BucketComm[b] = d.buckets[b].comm
	}
	s.Comm, s.CommHidden = d.commSpans(blockStart)
	s.TotalStep += s.Step
	s.TotalCompute += s.Compute
	s.TotalExposed += s.Exposed
	s.TotalComm += s.Comm
	s.TotalCommHidden += s.CommHidden
	s.TotalCommBytes += s.CommBytes
	d.resetMarks()
	d.stepStart = end
	return first
}

func (d *DDP) bucketErr(b int, err error) error {
	bk := &d.buckets[b]
	return fmt.Errorf("ddp: bucket %d (parameters %v): %w", b, bk.Params, err)
}

// unmarked is the error naming the parameters not marked ready this step.
func (d *DDP) unmarked() error {
	var missing []int
	for i, r := range d.ready {
		if !r {
			missing = append(missing, i)
		}
	}
	return fmt.Errorf("ddp: Wait: parameters %v not marked ready (%d of %d marked)", missing, d.nReady, len(d.params))
}

// Stats returns the timings (a copy).
func (d *DDP) Stats() Stats {
	s := d.stats
	s.BucketComm = append([]time.Duration(nil), s.BucketComm...)
	return s
}

// ResetStats sets the counts and sums of Stats to zero.
func (d *DDP) ResetStats() {
	bc := d.stats.BucketComm
	clear(bc)
	d.stats = Stats{BucketComm: bc}
}
