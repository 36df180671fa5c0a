package goccl

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"
)

// QueueDepth is how many non-blocking operations may be outstanding (issued
// and not done) on a communicator: as many kernels as CUDA's launch queue
// holds before a launch blocks. An I form issued when that many are
// outstanding waits, within its context, until half of them are done. The
// slots (about 370 bytes each) are made by a communicator's first I form.
const QueueDepth = 1024

// Request is a handle on a non-blocking operation, returned by the I forms
// (IAllReduceBytes, IAllReduce, ...). It is a small value: copy it freely.
// Wait and Test may be called any number of times, from any goroutine; each
// reports the operation's own result, also after the communicator has moved
// on, been closed or been aborted. The zero Request is not an operation:
// Wait and Test report ErrInvalidArgument.
//
// The operation's buffers belong to it until Wait or Test reports that it is
// done: the caller must not write send buffers nor read or write receive
// buffers before then.
type Request struct {
	q      *opQueue
	ticket uint64 // the operation's place in the communicator's issue order (from 1)
}

// errZeroRequest is what Wait and Test say of a Request no I form returned.
var errZeroRequest = &Error{Rank: -1, Op: "Wait", Err: fmt.Errorf("%w: zero Request (not returned by an I form)", ErrInvalidArgument)}

// Wait blocks until the operation is done and returns its error (nil on
// success). ctx bounds the wait only: when it ends first, Wait returns
// ctx.Err() and the operation goes on (wait again, or Abort the
// communicator). The operation's own deadline is the context given to the I
// form. When ctx can never end (context.Background, nil) and no goroutine
// is running the communicator's operations, Wait runs the queued ones, up to
// its own, on the calling goroutine, which saves two goroutine hand-offs.
func (r Request) Wait(ctx context.Context) error {
	if r.q == nil {
		return errZeroRequest
	}
	return r.q.wait(ctx, r.ticket, true)
}

// Test reports whether the operation is done and, if it is, its error. It
// never blocks.
func (r Request) Test() (bool, error) {
	if r.q == nil {
		return true, errZeroRequest
	}
	r.q.mu.Lock()
	defer r.q.mu.Unlock()
	return r.q.result(r.ticket)
}

// Span reports when the operation ran: from the moment it started (after
// the operations issued before it on the communicator, which run in
// order) to its end, the interval its GOCCL_TRACE_FILE event spans. It is
// the counterpart of PyTorch's Work.get_duration with timing enabled, and
// lets a program measure how much of its communication its computation
// hid. ok is false while the operation is not done, when it failed before
// it started (Close, Abort), and once QueueDepth later operations have
// been issued on the communicator (its slot is reused).
func (r Request) Span() (start, end time.Time, ok bool) {
	if r.q == nil {
		return time.Time{}, time.Time{}, false
	}
	r.q.mu.Lock()
	defer r.q.mu.Unlock()
	s := &r.q.slots[r.ticket%QueueDepth]
	if s.ticket != r.ticket || s.doneAt.Load() != r.ticket || s.start.IsZero() {
		return time.Time{}, time.Time{}, false
	}
	return s.start, s.end, true
}

// slot is one operation of the queue: the call (a copy of the caller's
// descriptor), its context, and once done its error.
type slot struct {
	a      call
	ctx    context.Context
	ticket uint64        // the operation in the slot (0: never used)
	doneAt atomic.Uint64 // the last ticket done in the slot: set by the runner after err, without q.mu
	err    error
	wake   chan struct{} // capacity 1: a token when the operation is done (see wait)
	// When the operation ran (Request.Span): set by the runner before
	// doneAt; zero when it never started.
	start, end time.Time
}

// opQueue runs a communicator's non-blocking operations, in issue order, on
// a worker goroutine started by the first one. Operation t (its ticket, from
// 1) uses slot t % QueueDepth, which is taken again (by t + QueueDepth) only
// once t is done. Because operations run in order and a failed one poisons
// the communicator, an operation whose slot was taken again failed exactly
// when its ticket is at or after the first failure's (failAt): so each
// Request keeps its own result without the queue keeping every one.
type opQueue struct {
	// Operations issued (by the issuer, under mu) and completed (by the
	// runner): blocking calls run inline when they are equal. Each side's
	// fields have a cache line of their own, away from mu and the Comm's,
	// so that the issuer and the runner do not pass lines back and forth
	// on every operation.
	_         cpu.CacheLinePad
	issued    atomic.Uint64
	_         cpu.CacheLinePad
	completed atomic.Uint64
	halt      atomic.Pointer[error] // stopErr, read by a runner between operations
	_         cpu.CacheLinePad

	mu      sync.Mutex
	work    sync.Cond // the worker waits on it for operations
	slots   []slot    // nil until the first non-blocking operation
	next    uint64    // ticket of the next operation issued
	head    uint64    // ticket of the next operation to run
	stopErr error     // set by Close and Abort: ErrClosed or ErrAborted
	runner  bool      // a goroutine (the worker or a Wait) is running operations
	c       *Comm
	exited  chan struct{}
	failAt  uint64 // ticket of the first operation that failed (0: none)
	failErr error
}

// do runs a blocking call: inline when no non-blocking operation is
// outstanding (the fast path, exactly as without the queue), else behind
// them, waiting for its turn and its end.
func (c *Comm) do(ctx context.Context, a *call) error {
	if c == nil {
		return nilComm(a.errKind().String())
	}
	if c.q.issued.Load() == c.q.completed.Load() {
		return c.run(ctx, a)
	}
	r, err := c.issue(ctx, a)
	if err != nil {
		return err
	}
	return r.q.wait(nil, r.ticket, true)
}

// check is the argument check of a call at issue time (start repeats it).
func (c *Comm) check(a *call) error {
	if a.sendParts.n > 0 {
		return c.checkCoalesced(a)
	}
	switch a.kind {
	case opBarrier, opGroup:
		return nil // a group's operations were checked as they were posted
	case opAllToAllv:
		return c.checkAllToAllv(a)
	case opSendRecv:
		if err := c.checkPeers(a); err != nil {
			return err
		}
	}
	return c.prepare(a)
}

// issue checks a call and queues a copy of it, waiting within ctx for a
// slot when the queue is full.
func (c *Comm) issue(ctx context.Context, a *call) (Request, error) {
	if c == nil {
		return Request{}, nilComm(a.errKind().String())
	}
	if err := c.check(a); err != nil {
		return Request{}, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	q := &c.q
	q.mu.Lock()
	for {
		if q.stopErr != nil {
			err := q.stopErr
			q.mu.Unlock()
			return Request{}, c.errorf(a.errKind(), 0, "%w", err)
		}
		if q.slots == nil {
			q.start(c)
		}
		s := &q.slots[q.next%QueueDepth]
		if s.ticket == 0 || s.doneAt.Load() == s.ticket {
			break
		}
		// Full: wait until half the queue is free, not one slot, so that
		// an issuer that keeps the queue full wakes once per
		// QueueDepth/2 operations instead of once per operation (a
		// goroutine hand-off costs more than a small operation).
		t := s.ticket + QueueDepth/2 - 1
		q.mu.Unlock()
		if err := q.wait(ctx, t, false); err != nil && ctx.Err() != nil {
			return Request{}, c.errorf(a.errKind(), 0, "waiting for room in the queue of non-blocking operations (%d): %w", QueueDepth, ctx.Err())
		}
		q.mu.Lock()
	}
	t := q.next
	q.next++
	s := &q.slots[t%QueueDepth]
	s.a, s.ctx, s.ticket, s.err, s.start = *a, ctx, t, nil, time.Time{}
	if c.fr != nil && a.kind != opGroup { // a group is recorded as its parts start
		c.fr.Schedule(c.flightCall(a))
	}
	q.issued.Add(1)
	q.work.Signal()
	q.mu.Unlock()
	return Request{q: q, ticket: t}, nil
}

// start makes the slots and starts the worker (q.mu held).
func (q *opQueue) start(c *Comm) {
	q.slots = make([]slot, QueueDepth)
	for i := range q.slots {
		q.slots[i].wake = make(chan struct{}, 1)
	}
	q.next, q.head = 1, 1
	q.work.L = &q.mu
	q.c = c
	q.exited = make(chan struct{})
	go q.worker(c)
}

// worker runs the queued operations in order until the queue is stopped and
// has none left.
func (q *opQueue) worker(c *Comm) {
	defer close(q.exited)
	defer q.raisePriority(c)()
	q.mu.Lock()
	for {
		for (q.head == q.next || q.runner) && q.stopErr == nil {
			q.work.Wait()
		}
		if q.head == q.next {
			q.mu.Unlock()
			return
		}
		if q.runner { // stopped while a Wait runs operations: it drains them
			q.work.Wait()
			continue
		}
		q.runBatch(c, q.next)
	}
}

// defaultProgressNice is GOCCL_PROGRESS_NICE's default.
const defaultProgressNice = -10

// raisePriority gives the worker's thread the nice value c.progressNice
// (GOCCL_PROGRESS_NICE), the CPU counterpart of the high-priority streams
// NCCL and PyTorch give communication: an operation issued during compute
// mostly waits for peers, and each time one answers, its thread must run at
// once for the operation to move on, instead of waiting for a time slice
// behind the compute threads. With more ranks than cores that made the
// difference between overlap hiding communication and not (docs/
// benchmarks.md, issue 14). The goroutine keeps its thread (LockOSThread)
// until the returned function, which the worker defers, has put the thread's
// nice value back: the thread may be the process's main thread, which
// outlives the goroutine. Lowering the nice value needs CAP_SYS_NICE (or
// RLIMIT_NICE); without it the thread keeps the process's priority and an
// INFO line says so.
func (q *opQueue) raisePriority(c *Comm) (restore func()) {
	if c.progressNice == 0 {
		return func() {}
	}
	runtime.LockOSThread()
	tid := unix.Gettid()
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, tid) // 20 - nice, as the system call returns it
	if err == nil {
		err = unix.Setpriority(unix.PRIO_PROCESS, tid, c.progressNice)
	}
	if err != nil {
		c.log.Infof(subInit, "non-blocking operations run at the process's priority: nice %d refused (%v)", c.progressNice, err)
		runtime.UnlockOSThread()
		return func() {}
	}
	return func() {
		unix.Setpriority(unix.PRIO_PROCESS, tid, 20-raw)
		runtime.UnlockOSThread()
	}
}

// runBatch runs the operations from q.head up to end (not included), in
// order, on the calling goroutine: it claims them (q.head = end) and sets
// q.runner under q.mu, held at entry and exit, and runs and completes them
// without it, so that the issuer and the runner meet on the lock once per
// batch instead of twice per operation. A slot is the runner's from the
// claim until it is done: the issuer copied the call into it and takes it
// again only after that. When the queue is stopped meanwhile (halt), the
// claimed operations not yet started fail with its error, as stop fails the
// unclaimed ones.
func (q *opQueue) runBatch(c *Comm, end uint64) {
	first := q.head
	q.head, q.runner = end, true
	q.mu.Unlock()
	for t := first; t < end; t++ {
		s := &q.slots[t%QueueDepth]
		var err error
		if why := q.halt.Load(); why != nil {
			err = c.errorf(s.a.errKind(), 0, "%w", *why)
		} else {
			s.start = time.Now()
			err = c.run(s.ctx, &s.a)
			s.end = time.Now()
		}
		q.complete(s, err, false)
	}
	q.mu.Lock()
	q.runner = false
}

// complete records the end of the operation in s and wakes its waiters;
// locked says whether the caller holds q.mu (taken here only for a failure).
func (q *opQueue) complete(s *slot, err error, locked bool) {
	s.a, s.ctx = call{}, nil // do not keep the caller's buffers
	s.err = err
	if err != nil {
		if !locked {
			q.mu.Lock()
		}
		if q.failAt == 0 {
			q.failAt, q.failErr = s.ticket, err
		}
		if !locked {
			q.mu.Unlock()
		}
	}
	s.doneAt.Store(s.ticket)
	q.completed.Add(1)
	passOn(s.wake)
}

// passOn leaves a token in wake unless one is there.
func passOn(wake chan struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// result is operation t's state (q.mu held).
func (q *opQueue) result(t uint64) (done bool, err error) {
	s := &q.slots[t%QueueDepth]
	switch {
	case s.ticket == t:
		if s.doneAt.Load() != t {
			return false, nil
		}
		return true, s.err
	case s.ticket > t: // done long ago, slot taken again: see opQueue
		if q.failAt != 0 && t >= q.failAt {
			return true, q.failErr
		}
		return true, nil
	}
	return true, &Error{Rank: -1, Op: "Wait", Err: fmt.Errorf("%w: Request #%d was not issued on this communicator", ErrInvalidArgument, t)}
}

// wait waits for operation t and returns its error, or ctx's if ctx ends
// first (nil ctx: no bound). Each slot's wake channel holds at most one
// token: the worker leaves one when the operation ends, and a waiter that
// takes one and finds the operation done leaves it for the next waiter; a
// waiter that takes a leftover token of an earlier operation finds its own
// not done and waits again. So any number of goroutines may wait, without
// an allocation. A wait that nothing bounds (nil ctx, or one that is never
// done) runs the operations up to t itself when no goroutine is running
// them.
func (q *opQueue) wait(ctx context.Context, t uint64, inline bool) error {
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	s := &q.slots[t%QueueDepth]
	q.mu.Lock()
	for {
		ok, err := q.result(t)
		if ok {
			q.mu.Unlock()
			passOn(s.wake)
			return err
		}
		if inline && done == nil && !q.runner && q.head <= t {
			// Nothing bounds this wait and no goroutine runs
			// operations: run them here, up to t, instead of waiting
			// for the worker to wake up and then wake this one.
			q.runBatch(q.c, t+1)
			q.work.Signal() // the worker: more operations, or stopped
			continue
		}
		q.mu.Unlock()
		select {
		case <-s.wake:
		case <-done:
			return ctx.Err()
		}
		q.mu.Lock()
	}
}

// stop fails the queued operations that have not started with an error
// wrapping why (ErrClosed, ErrAborted), refuses later ones, and lets the
// worker exit after the operation it runs. It does not wait.
func (q *opQueue) stop(c *Comm, why error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopErr != nil {
		return
	}
	q.stopErr = why
	q.halt.Store(&why)
	if q.slots == nil {
		return
	}
	for ; q.head < q.next; q.head++ {
		s := &q.slots[q.head%QueueDepth]
		q.complete(s, c.errorf(s.a.errKind(), 0, "%w", why), true)
	}
	c.fr.RetireScheduled(why.Error())
	q.work.Broadcast()
}

// stopQueue stops the queue (stop) and waits for the worker to exit.
func (c *Comm) stopQueue(why error) {
	c.q.stop(c, why)
	c.q.mu.Lock()
	exited := c.q.exited
	c.q.mu.Unlock()
	if exited != nil {
		<-exited
	}
}
