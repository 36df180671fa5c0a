package shm

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goccl/goccl/transport"
)

// Wait strategy: poll the shared counter spinIters times (about a
// microsecond: a peer that is running answers within it), then for up to
// yieldPhase poll between yields of the processor, both to other goroutines of
// this process (runtime.Gosched) and to other processes (sched_yield), so a
// rank sharing a core with its peer (more ranks than cores) hands the core
// over instead of burning it; then sleep on the futex word with a futexSleep
// timeout, after which ctx, the closed flag and the counter are checked again.
// A link made WithYield(false) (every rank of the host has a core) only
// polls for the first pollPhase of the yield phase: there sched_yield hands
// the core to whatever else is runnable on it, and runs of 2-rank 8-512 B
// AllReduces on a 2-vCPU VM had stretches of 7.5 µs operations in 17 of 35
// runs with it, none in 10 without (docs/benchmarks.md).
const (
	spinIters  = 2000
	yieldPhase = 50 * time.Microsecond
	pollPhase  = 10 * time.Microsecond // WithYield(false): the part of the yield phase that only polls
	futexSleep = 10 * time.Millisecond
)

// yieldPhaseOver runs one step of the yield phase of a wait that started
// polling at iteration spinIters; it reports whether the phase is over and the
// waiter should sleep. Without yield it reads the clock every 64th step
// only, and yields only once pollPhase has passed (to this P's other
// goroutines when GOMAXPROCS is 1, and to the kernel).
func yieldPhaseOver(i int, since *time.Time, yield bool) (over, yielded bool) {
	if i == spinIters {
		*since = time.Now()
	}
	if !yield && (i-spinIters)%64 != 63 {
		return false, false
	}
	d := time.Since(*since)
	if d >= yieldPhase {
		return true, false
	}
	if !yield && d < pollPhase {
		return false, false
	}
	if runtime.GOMAXPROCS(0) == 1 {
		// Let this P's other goroutines (a background sender) run. With
		// more Ps they run elsewhere, and Gosched would cost: it wakes an
		// idle P's thread (wakep), which on a host with one core per rank
		// steals the peer's core; 2-rank AllGather at 64 KiB-256 KiB fell
		// to 2-3 GB/s in half the runs with it, never without (6-8 GB/s).
		runtime.Gosched()
	}
	syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	return false, true
}

// futexSleeps counts futex sleeps (slow path only), for tests.
var futexSleeps atomic.Uint64

// state bits of a link: closedBit | unmappedBit | number of calls in flight.
const (
	closedBit   = 1 << 63
	unmappedBit = 1 << 62 // set (with closedBit) by whoever unmaps the rings
)

type link struct {
	counters   transport.Counters
	self, peer int
	out, in    *Ring

	// closedBit | unmappedBit | calls currently using the mappings, plus
	// one that NewLink registers and Close (or Reclaim) drops, so that an
	// Abort leaves the rings mapped for Reclaim. The mappings are unmapped
	// by whoever brings it to exactly closedBit and then wins the swap to
	// closedBit|unmappedBit (a call registering in between keeps them mapped
	// and unmaps them when it leaves).
	state         atomic.Uint64
	released      atomic.Bool // Close or Reclaim dropped NewLink's registration
	readerSettled atomic.Bool // an Abort saw the peer's reader idle (or gave up waiting) after the close
	_             [48]byte

	// Sender-owned (one Send/TrySend at a time).
	sTail  uint64 // slots published (only the sender writes out.tail)
	sHead  uint64 // last seen out.head
	cmaMin int    // smallest message sent by CMA (0: never); fixed at NewLink
	pinned []byte // buffer of the CMA send in flight
	_      [16]byte

	// Receiver-owned (one Recv at a time).
	rHead        uint64       // slots released (only the receiver writes in.head)
	rTail        uint64       // last seen in.tail
	cmaProbed    bool         // the CMA probe ran (or CMA is off)
	cmaOK        bool         // the probe could read the sender's memory
	noYield      bool         // WithYield(false): waits poll without yielding before they sleep
	colocSkip    atomic.Int32 // colocated waits to let pass before the next sleep (colocation.go)
	colocBackoff atomic.Int32 // the next colocSkip after a sleep
	cmaPid       int          // the sender's pid, as verified by the probe

	peerProc proc          // the peer's process, when WithPeerPID was given
	peerDead atomic.Bool   // peerGone saw the peer's process gone
	peerLost atomic.Uint32 // the peer's lost rank + 1, kept by shutdown
	stage    []byte        // staging buffer of reducing CMA receives
	_        [8]byte

	// The word the peer's receiver reads to check that CMA works (see cma.go).
	probe uint64
}

// NewLink returns the Link of rank self to rank peer: out carries self->peer, in carries peer->self.
//
// The Link owns both rings from now on: its Close unmaps them (and unlinks the
// name of a ring that this side opened, if still present). It panics on nil rings, on out == in, or on a ring
// already given to another Link.
// LinkOption configures NewLink.
type LinkOption func(*link)

// WithPeerPID makes the link watch the peer's process (pid, in this
// process's pid namespace): a wait that finds it gone fails with a
// *transport.LostError naming the peer instead of waiting for its deadline.
// The check runs each time a wait is about to sleep (after the spin and
// yield phases, then every futex timeout of 10 ms) and uses a pidfd, so a
// reused pid or an unreaped (zombie) peer is still seen as gone; on kernels
// without pidfd_open (before 5.3) it falls back to kill(pid, 0).
func WithPeerPID(pid int) LinkOption { return func(l *link) { l.watchPeer(pid) } }

// WithYield says whether the link's waits yield the processor between
// polls from their first microsecond (the default, for more ranks than
// cores on the host) or only after pollPhase (every rank has a core of its
// own). See spinIters.
func WithYield(yield bool) LinkOption { return func(l *link) { l.noYield = !yield } }

func NewLink(self, peer int, out, in *Ring, opts ...LinkOption) transport.Link {
	if out == nil || in == nil || out == in {
		panic("shm: NewLink needs two distinct rings")
	}
	if !out.owned.CompareAndSwap(false, true) {
		panic("shm: ring " + out.path + " already belongs to a Link")
	}
	if !in.owned.CompareAndSwap(false, true) {
		out.owned.Store(false)
		panic("shm: ring " + in.path + " already belongs to a Link")
	}
	l := &link{self: self, peer: peer, out: out, in: in}
	l.state.Store(1) // NewLink's registration: see state
	l.sTail, l.sHead = out.tail.Load(), out.head.Load()
	l.rHead, l.rTail = in.head.Load(), in.tail.Load()
	l.initCMA()
	for _, o := range opts {
		o(l)
	}
	return l
}

func (l *link) Peer() int    { return l.peer }
func (l *link) Name() string { return "shm" }

// Counters implements transport.Link.
func (l *link) Counters() *transport.Counters { return &l.counters }

// enter registers a call that will touch the mappings; false when closed.
func (l *link) enter() bool {
	if l.state.Add(1)&closedBit != 0 {
		l.leave()
		return false
	}
	return true
}

func (l *link) leave() {
	if l.state.Add(^uint64(0)) == closedBit && l.state.CompareAndSwap(closedBit, closedBit|unmappedBit) {
		l.out.unmap()
		l.in.unmap()
	}
}

// shutdown closes the link; the caller must be registered (enter or Close).
// lost is the rank to report to the peer (or -1).
func (l *link) shutdown(lost int) {
	if l.state.Or(closedBit)&closedBit != 0 {
		return
	}
	// Keep the peer's reason, if it closed first: errClosed must not read
	// the rings once this side has closed (they may be unmapped).
	l.peerLost.Store(l.ringLost())
	l.out.markClosed(lost)
	l.in.markClosed(lost)
	l.peerProc.release()
}

// MarkLost implements transport.LossMarker: it writes the lost rank into
// both rings' headers now, before the link closes, so that the peer reads
// it however this side's link ends up closed (a failed call's Close
// included). The rings stay open.
func (l *link) MarkLost(lost int) {
	if lost < 0 {
		return
	}
	if l.state.Add(1)&(closedBit|unmappedBit) == 0 {
		l.out.closeLost.CompareAndSwap(0, uint32(lost)+1)
		l.in.closeLost.CompareAndSwap(0, uint32(lost)+1)
	}
	l.leave()
}

// Close sets the closed flag on both rings, wakes every waiter in either
// process, and unmaps the rings once no call of this process uses them. Pending
// and later calls on both sides fail with transport.ErrClosed (a Recv still
// returns messages that were completely sent before the peer closed).
func (l *link) Close() error {
	err := l.Abort(transport.NoLostRank)
	if l.released.CompareAndSwap(false, true) {
		l.leave() // NewLink's registration: the last one out unmaps
	}
	return err
}

// Abort is Close, telling the peer that this side lost rank lost (see
// transport.Link), except that the rings stay mapped until Close, so that
// Reclaim can take them back for a new link between the same processes.
func (l *link) Abort(lost int) error {
	// Registering keeps the mappings alive while we write the flags, unless
	// they are gone already (unmappedBit). A count of calls in flight does
	// not prove they are mapped: a call that found the link closed
	// registers for a moment after the rings were unmapped.
	if l.state.Add(1)&unmappedBit == 0 {
		l.shutdown(lost)
		// The peer may be reading this side's memory (a CMA message or a
		// ReadPeer of an exposed buffer), also if an error closed the
		// link earlier: the closed flag stops it before its next piece;
		// wait for the current one so that the caller may reuse its
		// buffers once Abort returns. Once: a reader stopped by the
		// closed flag starts no other piece, and one that never clears
		// its flag (a dead peer) must not cost every later Abort or
		// Close the whole wait.
		if !l.readerSettled.Load() {
			l.waitReaderIdle()
			l.readerSettled.Store(true)
		}
	}
	l.leave()
	// The name of a ring this side opened is needed by nobody now: its creator
	// mapped it first. (A created ring's name may still be needed by a slow
	// peer that has not opened it yet, so it is left to Ring.Unlink.)
	for _, r := range [2]*Ring{l.out, l.in} {
		if r.opened {
			r.Unlink()
		}
	}
	return nil
}

// errClosed is the error of a call on a closed link: when the peer closed it
// because it lost a rank, a *transport.LostError naming that rank; when the
// peer's process died, one naming the peer.
func (l *link) errClosed(op string) error {
	if l.peerDead.Load() {
		return &transport.PeerError{Peer: l.peer, Op: op, Err: &transport.LostError{Rank: l.peer, Via: -1, Cause: l.peerProc.exitErr()}}
	}
	v := l.peerLost.Load()
	if l.state.Load()&closedBit == 0 {
		v = l.ringLost() // the caller is registered: the rings are mapped
	}
	if v != 0 {
		return &transport.PeerError{Peer: l.peer, Op: op, Err: &transport.LostError{Rank: int(v - 1), Via: l.peer}}
	}
	return &transport.PeerError{Peer: l.peer, Op: op, Err: transport.ErrClosed}
}

// ringLost returns the lost rank + 1 that the peer wrote when it closed the
// link, or 0. The caller must keep the rings mapped.
func (l *link) ringLost() uint32 {
	for _, r := range [2]*Ring{l.in, l.out} {
		if v := r.closeLost.Load(); v != 0 && int(v-1) != l.self {
			return v
		}
	}
	return 0
}

// peerGone checks, before a wait sleeps, whether the peer's process is gone;
// if so it closes the link (waking this process's other waiters) and
// returns true: the caller returns errClosed.
func (l *link) peerGone() bool {
	if !l.peerProc.exited() {
		return false
	}
	l.peerDead.Store(true)
	l.shutdown(l.peer)
	return true
}

func (l *link) errCtx(ctx context.Context, op string) error {
	return &transport.PeerError{Peer: l.peer, Op: op, Err: ctx.Err()}
}

func (l *link) errCorrupt(format string, args ...any) error {
	return &transport.PeerError{Peer: l.peer, Op: "recv", Err: fmt.Errorf("shm: corrupt ring %s: "+format, append([]any{l.in.path}, args...)...)}
}

func slotsFor(n, slotSize int) int {
	if n == 0 {
		return 1
	}
	return (n + slotSize - 1) / slotSize
}

// Send transmits h and buf; it returns once buf has been copied into the ring,
// or, for a message that goes by CMA, once the receiver has read it.
// A Send interrupted (ctx or closure) after part of the message was published
// closes the link, since the peer could not tell where the next message starts.
func (l *link) Send(ctx context.Context, h *transport.Header, buf []byte) error {
	err := l.send(ctx, h, buf)
	if err == nil {
		l.counters.AddSent(len(buf))
	}
	return err
}

func (l *link) send(ctx context.Context, h *transport.Header, buf []byte) error {
	if h.Bytes != uint64(len(buf)) {
		return fmt.Errorf("shm: send to peer %d: header says %d bytes, buffer has %d", l.peer, h.Bytes, len(buf))
	}
	if !l.enter() {
		return l.errClosed("send")
	}
	defer l.leave()
	if ctx.Err() != nil { // Err, not just Done: a deadline-only context has no Done channel
		return l.errCtx(ctx, "send")
	}
	if l.useCMA(len(buf)) {
		return l.sendCMA(ctx, h, buf)
	}
	return l.publish(ctx, h, buf)
}

// TrySend sends only if every slot the message needs is free now; otherwise it
// returns (false, nil) and changes nothing. A message needing more than Slots
// slots, or one that would go by CMA (whose Send waits for the receiver), is
// never sent by TrySend.
func (l *link) TrySend(h *transport.Header, buf []byte) (bool, error) {
	ok, err := l.trySend(h, buf)
	if ok && err == nil {
		l.counters.AddSent(len(buf))
	}
	return ok, err
}

func (l *link) trySend(h *transport.Header, buf []byte) (bool, error) {
	if h.Bytes != uint64(len(buf)) {
		return false, fmt.Errorf("shm: send to peer %d: header says %d bytes, buffer has %d", l.peer, h.Bytes, len(buf))
	}
	if !l.enter() {
		return false, l.errClosed("send")
	}
	defer l.leave()
	r := l.out
	if r.closed.Load() != 0 {
		return false, l.errClosed("send")
	}
	if l.useCMA(len(buf)) {
		return false, nil
	}
	need := uint64(slotsFor(len(buf), r.slotSize))
	slots := uint64(r.slots)
	if l.sTail-l.sHead+need > slots {
		l.sHead = r.head.Load()
		if l.sTail-l.sHead+need > slots {
			return false, nil
		}
	}
	return true, l.publish(context.Background(), h, buf) // never waits: the space is there
}

func (l *link) publish(ctx context.Context, h *transport.Header, buf []byte) error {
	r := l.out
	slots := uint64(r.slots)
	n := len(buf)
	ns := slotsFor(n, r.slotSize)
	off := 0
	for i := 0; i < ns; i++ {
		if r.closed.Load() != 0 {
			if i > 0 {
				l.shutdown(-1)
			}
			return l.errClosed("send")
		}
		if l.sTail-l.sHead >= slots {
			if err := l.wait(ctx, condSlotFree); err != nil {
				if i > 0 {
					l.shutdown(-1)
				}
				return err
			}
		}
		meta, payload := r.slot(l.sTail)
		m := min(n-off, r.slotSize)
		binary.LittleEndian.PutUint32(meta[0:], uint32(m))
		if i == 0 {
			binary.LittleEndian.PutUint32(meta[4:], flagFirst)
			h.Encode(meta[8:])
		} else {
			binary.LittleEndian.PutUint32(meta[4:], 0)
		}
		copy(payload[:m], buf[off:off+m])
		off += m
		l.sTail++
		r.tail.Store(l.sTail) // release: slot contents before the counter
		// Wake the receiver only if it announced that it sleeps; taking the
		// flag makes it one FUTEX_WAKE per sleep rather than one per slot.
		if r.recvWaiting.Load() != 0 && r.recvWaiting.Swap(0) != 0 {
			r.dataWord.Add(1)
			futexWake(r.dataWord, 1)
		}
	}
	return nil
}

// Recv receives the next message into buf, copying or folding it in with
// reduce directly from the ring's slots (or, for a CMA message, from the
// sender's memory). A header mismatch or corrupt frame closes the link (both
// sides see it closed) and returns the error. A Recv interrupted in the middle
// of a message also closes the link.
func (l *link) Recv(ctx context.Context, want *transport.Header, buf []byte, reduce transport.ReduceFunc) error {
	err := l.recv(ctx, want, buf, reduce)
	if err == nil {
		l.counters.AddReceived(len(buf))
	}
	return err
}

func (l *link) recv(ctx context.Context, want *transport.Header, buf []byte, reduce transport.ReduceFunc) error {
	if want.Bytes != uint64(len(buf)) {
		return fmt.Errorf("shm: recv from peer %d: header says %d bytes, buffer has %d", l.peer, want.Bytes, len(buf))
	}
	if !l.enter() {
		return l.errClosed("recv")
	}
	defer l.leave()
	if ctx.Err() != nil { // Err, not just Done: a deadline-only context has no Done channel
		return l.errCtx(ctx, "recv")
	}
	if !l.cmaProbed {
		l.probeCMA()
	}
	r := l.in
	for {
		if l.rHead == l.rTail {
			if err := l.wait(ctx, condData); err != nil {
				return err // nothing consumed: the link stays usable
			}
		}
		if !l.cmaProbed {
			l.probeCMA() // the sender's offer precedes its first message
		}
		meta, desc := r.slot(l.rHead)
		flags := binary.LittleEndian.Uint32(meta[4:])
		if flags&flagFirst == 0 {
			l.shutdown(-1)
			return l.errCorrupt("expected the first slot of a message")
		}
		var got transport.Header
		if err := got.Decode(meta[8:]); err != nil {
			l.shutdown(-1)
			return &transport.PeerError{Peer: l.peer, Op: "recv", Err: err}
		}
		if err := transport.Check(l.peer, want, &got); err != nil {
			l.shutdown(-1)
			return &transport.PeerError{Peer: l.peer, Op: "recv", Err: err}
		}
		if want.Arrival != got.Arrival { // no write when equal: callers may share want with a Send
			want.Arrival = got.Arrival
		}
		if flags&flagCMA == 0 {
			return l.recvCopy(ctx, buf, reduce)
		}
		if retry, err := l.recvCMA(ctx, meta, desc, buf, reduce); !retry {
			return err
		}
		// Refused: the sender now sends the same message through the slots.
	}
}

// recvCopy receives a message that travels through the slots, starting with
// its first slot (at rHead, already checked).
func (l *link) recvCopy(ctx context.Context, buf []byte, reduce transport.ReduceFunc) error {
	r := l.in
	n := len(buf)
	ns := slotsFor(n, r.slotSize)
	off := 0
	for i := 0; i < ns; i++ {
		if i > 0 && l.rHead == l.rTail {
			if err := l.wait(ctx, condData); err != nil {
				l.shutdown(-1)
				return err
			}
		}
		meta, payload := r.slot(l.rHead)
		m := int(binary.LittleEndian.Uint32(meta[0:]))
		if i > 0 && binary.LittleEndian.Uint32(meta[4:])&flagFirst != 0 {
			l.shutdown(-1)
			return l.errCorrupt("message ended after %d of %d bytes", off, n)
		}
		if exp := min(n-off, r.slotSize); m != exp {
			l.shutdown(-1)
			return l.errCorrupt("slot holds %d bytes, expected %d", m, exp)
		}
		if reduce != nil {
			if m > 0 {
				reduce(buf[off:off+m], payload[:m])
			}
		} else {
			copy(buf[off:off+m], payload[:m])
		}
		off += m
		l.release()
	}
	return nil
}

// release hands the slot at rHead back to the sender, waking it if it sleeps.
func (l *link) release() {
	r := l.in
	l.rHead++
	r.head.Store(l.rHead) // release the slot to the sender
	if r.sendWaiting.Load() != 0 && r.sendWaiting.Swap(0) != 0 {
		r.spaceWord.Add(1)
		futexWake(r.spaceWord, 1)
	}
}

// cond is what a wait of a link waits for.
type cond uint8

const (
	condSlotFree cond = iota // the outbound ring has a free slot (a Send)
	condReleased             // the receiver released every slot this side published (a CMA Send)
	condData                 // the inbound ring has a published slot (a Recv)
)

// ready reports whether c holds now; if so, it updates the link's copy of
// the peer's counter.
func (l *link) ready(c cond) bool {
	switch c {
	case condSlotFree:
		if hd := l.out.head.Load(); l.sTail-hd < uint64(l.out.slots) {
			l.sHead = hd
			return true
		}
	case condReleased:
		if l.out.head.Load() == l.sTail {
			l.sHead = l.sTail
			return true
		}
	default:
		if t := l.in.tail.Load(); t != l.rHead {
			l.rTail = t
			return true
		}
	}
	return false
}

// wait blocks until c holds, with the strategy described at spinIters. The
// closed flag is read before c, so that what the peer did before it closed
// the link (published data, a released CMA message) still counts. A wait
// that finds the link closed reports ctx's error if ctx is done too: the
// close may be the peer's (or this side's CMA Send's) reaction to the same
// expired deadline, which must not hide it.
func (l *link) wait(ctx context.Context, c cond) error {
	r, op := l.out, "send"
	word, waiting := r.spaceWord, r.sendWaiting
	if c == condData {
		r, op = l.in, "recv"
		word, waiting = r.dataWord, r.recvWaiting
	}
	var yieldStart time.Time
	checked := !l.noYield // colocation: checked once per wait, when every rank has a core
	for i := 0; ; i++ {
		closed := r.closed.Load() != 0
		if l.ready(c) {
			return nil
		}
		if closed {
			if ctx.Err() != nil {
				return l.errCtx(ctx, op)
			}
			return l.errClosed(op)
		}
		if i < spinIters {
			continue
		}
		over, yielded := yieldPhaseOver(i, &yieldStart, !l.noYield)
		if yielded && !checked {
			checked = true
			l.checkColocated()
		}
		if !over {
			continue
		}
		if ctx.Err() != nil { // Err, not just Done: a deadline-only context has no Done channel
			return l.errCtx(ctx, op)
		}
		if l.peerGone() {
			// The peer may have acted and exited since the check above:
			// what it did still counts.
			if l.ready(c) {
				return nil
			}
			return l.errClosed(op)
		}
		// Set the waiter flag, re-check, then sleep on a word that every
		// waker bumps: a wake-up between the re-check and the sleep makes
		// FUTEX_WAIT return at once instead of being lost.
		v := word.Load()
		waiting.Store(1)
		if !l.ready(c) && r.closed.Load() == 0 {
			futexSleeps.Add(1)
			futexWait(word, v)
		}
		waiting.Store(0)
	}
}

// PeerExited reports whether the peer's process has exited (false when it
// cannot be watched: another pid namespace). Symmetric-memory waits, which
// have no ring to find closed, poll it before they sleep.
func (l *link) PeerExited() bool { return l.peerProc.exited() }
