package goccl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/internal/algo"
	"github.com/goccl/goccl/internal/reduce"
	"github.com/goccl/goccl/internal/trace"
	"github.com/goccl/goccl/transport"
)

// opKind is the collective carried in transport headers, numbered by
// algo.Kind (the schedule table's kinds).
type opKind algo.Kind

const (
	opAllReduce     = opKind(algo.KindAllReduce)
	opBroadcast     = opKind(algo.KindBroadcast)
	opReduce        = opKind(algo.KindReduce)
	opAllGather     = opKind(algo.KindAllGather)
	opReduceScatter = opKind(algo.KindReduceScatter)
	opAllToAll      = opKind(algo.KindAllToAll)
	opSendRecv      = opKind(algo.KindSendRecv)
	opBarrier       = opKind(algo.KindBarrier)
	opCheck         = opKind(algo.KindCheck) // GOCCL_DEBUG_CHECK fingerprint exchange
	opAllToAllv     = opKind(algo.KindAllToAllv)
	opGather        = opKind(algo.KindGather)
	opScatter       = opKind(algo.KindScatter)
	opGroup         = opKind(algo.KindGroup) // a group of operations (group.go); never in a header
	numOpKinds      = opKind(algo.NumKinds)
)

// opSend and opRecv only name the errors of a Send and a Recv (call.name):
// they run as SendRecv, which their headers, logs, traces and metrics say.
const (
	opSend = numOpKinds + iota
	opRecv
)

var opNames = [...]string{"", "AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllToAll", "SendRecv", "Barrier", "DebugCheck", "AllToAllv", "Gather", "Scatter", "Group",
	opSend: "Send", opRecv: "Recv"}

// String is the operation's name in errors and logs ("AllReduce").
func (k opKind) String() string {
	if int(k) < len(opNames) {
		return opNames[k]
	}
	return "op(" + strconv.Itoa(int(k)) + ")"
}

// nameOf is the kind that names the errors of the running operation of
// kind k (c.mu held): the Send or Recv that runs as a SendRecv.
func (c *Comm) nameOf(k opKind) opKind {
	if k == opSendRecv && c.octx.name != 0 {
		return c.octx.name
	}
	return k
}

// begin locks the communicator and prepares c.op and c.octx for one operation.
// It returns the context the links must use.
func (c *Comm) begin(ctx context.Context, kind opKind, dt DataType, op RedOp, root, count int) (context.Context, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, c.errorf(kind, 0, "%w", ErrClosed)
	}
	if c.aborted.Load() {
		c.mu.Unlock()
		return nil, c.errorf(kind, 0, "%w", ErrAborted)
	}
	if by := c.revoked(); by != -1 {
		c.mu.Unlock()
		return nil, c.revokedErr(kind, 0, by)
	}
	if c.poison != nil {
		c.mu.Unlock()
		return nil, c.errorf(kind, 0, "communicator unusable after an earlier error: %w", c.poison)
	}
	if kind != opSendRecv {
		c.seq++
	}
	if ctx == nil {
		ctx = context.Background()
	}
	_, hasDL := ctx.Deadline()
	var now time.Time // wall and monotonic clocks, for the trace and the metrics
	if c.rec != nil || c.met != nil {
		now = time.Now()
	}
	// One reading of the monotonic clock (half the cost of time.Now) for
	// the deadline and the arrival.
	var mono time.Duration // since c.clock0
	if !hasDL && c.timeout > 0 || c.skew != nil && kind != opSendRecv {
		if now.IsZero() {
			mono = time.Since(c.clock0)
		} else {
			mono = now.Sub(c.clock0)
		}
	}
	h := transport.Header{Seq: c.seq, Op: uint8(kind), DType: uint8(dt), RedOp: uint8(reduce.Op(op)), Root: int32(root), Count: uint64(count)}
	if c.skew != nil && kind != opSendRecv {
		h.Arrival = c.skew.entry(c.rank, mono) // skew.go
	}
	c.op.Header, c.skewSkip = h, false
	if kind != opSendRecv {
		c.past[h.Seq%pastOps] = h
		c.opState.Store(h.Seq << 1)
	}
	c.op.ElemSize = dt.Size()
	c.op.Reduce, c.op.Reduce3 = nil, nil
	if c.rec != nil || c.met != nil {
		c.recStart, c.recBytes, c.recAlgo, c.recName = now, int64(count)*int64(dt.Size()), "", ""
	}
	if c.fr != nil {
		c.flightStart(kind, dt, root, count)
	}
	if c.ras != nil {
		c.ras.begin(kind, h.Seq, int64(count), int64(count)*int64(dt.Size()))
	}
	if !hasDL && c.timeout > 0 {
		c.octx.parent, c.octx.base, c.octx.limit = ctx, c.clock0, mono+c.timeout
		ctx = &c.octx
	}
	if c.debugCheck && c.group != nil && kind != opSendRecv {
		if err := c.checkFingerprints(ctx); err != nil {
			return nil, c.end(kind, err)
		}
	}
	return ctx, nil
}

// end finishes an operation: on failure it poisons the communicator and
// closes its links so that peers waiting on this rank fail fast.
func (c *Comm) end(kind opKind, err error) error {
	if err != nil {
		if by := c.revoked(); by != -1 {
			err = c.revokedErr(kind, c.op.Header.Seq, by)
		} else if c.aborted.Load() {
			err = c.errorf(kind, c.op.Header.Seq, "%w", ErrAborted)
		} else {
			if c.group != nil && kind != opSendRecv && errors.Is(err, context.DeadlineExceeded) {
				if nh := c.group.NotHeard(c.op.Header.Seq); len(nh) > 0 {
					err = fmt.Errorf("%w; no message of this operation yet from rank(s) %s", err, joinInts(nh))
				}
			}
			if c.group != nil && transport.LostRank(err) < 0 {
				if lost := c.group.LostErr(); lost != nil {
					// The group was aborted because a rank was lost: that is
					// why this call failed, whatever it saw.
					err = lost
				}
			}
			c.explainMismatch(err)
			if transport.LostRank(err) < 0 {
				err = c.diagnose(kind, c.op.Header.Seq, err)
			}
			if by := c.revoked(); by != -1 { // the cause diagnose found
				err = c.revokedErr(kind, c.op.Header.Seq, by)
			}
			err = c.wrap(c.nameOf(kind), c.op.Header.Seq, err)
			if c.octx.parent != nil {
				err = c.explainTimeout(err)
			}
		}
		c.poison = err
		c.health.failed(err)
		c.setAsyncErr(err)
		if c.group != nil {
			// Peers blocked on this rank fail now, told which rank was
			// lost if that is the cause.
			c.group.AbortLost(transport.LostRank(err))
		}
	}
	if kind != opSendRecv {
		c.opState.Store(c.op.Header.Seq<<1 | 1)
	}
	if c.fr != nil {
		c.flightEnd(err)
	}
	var last transport.Arrival
	known := false
	if err == nil {
		last, known = c.noteArrival(kind)
	}
	if c.rec != nil {
		c.record(kind, err, last, known)
	}
	if c.met != nil {
		c.met.observe(kind, c.nameOf(kind), c.recBytes, c.recAlgo, time.Since(c.recStart), err)
	}
	if c.ras != nil {
		c.ras.end()
	}
	c.octx.parent, c.octx.name = nil, 0
	c.mu.Unlock()
	return err
}

// record adds the operation that ends to the recorder, with the last
// arrival when this rank knows it; on failure it prints
// the flight recorder's last operations and flushes the trace file.
func (c *Comm) record(kind opKind, err error, last transport.Arrival, known bool) {
	e := trace.Event{Name: cmp.Or(c.recName, kind.String()), Seq: c.op.Header.Seq, Bytes: c.recBytes, Algo: c.recAlgo, Start: c.recStart, End: time.Now(),
		KnowsLast: known, LastRank: int(last.Rank), Lag: time.Duration(last.Spread) * time.Microsecond}
	if kind == opSendRecv {
		e.Seq = 0 // point to point is numbered per pair, not in the collective sequence
	}
	if err != nil {
		e.Err = err.Error()
	}
	c.rec.Record(&e)
	if err != nil {
		c.log.Warnf(subColl, "the last operations of this rank, oldest first (flight recorder):%s", c.fr.Text(flightDump))
		c.rec.Flush()
	}
}

// defaultFlightRecorder is how many operations the recorder keeps when
// GOCCL_TRACE_FILE or GOCCL_FLIGHT_RECORDER_DUMP is set without
// GOCCL_FLIGHT_RECORDER; flightDump is how
// many of them a failure prints at most.
const (
	defaultFlightRecorder = 64
	flightDump            = 16
)

// TraceSpan adds a span of the program's own (name, from start to end) to
// the trace file (GOCCL_TRACE_FILE) on a track beside the communicator's
// operations, for example the compute phases of a training step, so that a
// trace viewer shows which communication they overlapped. Without a trace
// it does nothing. Package ddp uses it for its steps' compute and waits.
func (c *Comm) TraceSpan(name string, start, end time.Time) {
	if c == nil || c.rec == nil {
		return
	}
	c.rec.Record(&trace.Event{Name: name, Track: 1, Start: start, End: end})
}

// opContext is a reusable context that adds the communicator's operation
// timeout to a context without one, without allocating per operation. Links
// observe it through Deadline and Err; its Done channel is the parent's.
// The deadline is kept as a monotonic offset from base: Err, which the
// links call on entry to every send and receive, reads only the monotonic
// clock (time.Since: half the cost of time.Now).
type opContext struct {
	parent context.Context
	base   time.Time     // Comm.clock0
	limit  time.Duration // the deadline, after base
	name   opKind        // the running operation's call.name (see nameOf); kept here, reset by end
}

func (o *opContext) Deadline() (time.Time, bool) { return o.base.Add(o.limit), true }
func (o *opContext) Done() <-chan struct{}       { return o.parent.Done() }
func (o *opContext) Value(key any) any           { return o.parent.Value(key) }
func (o *opContext) Err() error {
	if err := o.parent.Err(); err != nil {
		return err
	}
	if time.Since(o.base) >= o.limit {
		return context.DeadlineExceeded
	}
	return nil
}

// rooted reports whether operations of kind k have a root.
func (k opKind) rooted() bool {
	return k == opBroadcast || k == opReduce || k == opGather || k == opScatter
}

// reducing reports whether operations of kind k reduce (and take a RedOp).
func (k opKind) reducing() bool { return k == opAllReduce || k == opReduce || k == opReduceScatter }

// call describes one collective call for start, which checks its arguments
// and begins it: the kind, the element type, the reduction (reducing kinds
// only), the root (rooted kinds only), the count, and the buffers with the
// elements each must hold (unused: none, this rank does not touch it; on a
// rank other than the root, Broadcast does not read send and Reduce does
// not write recv). start cuts send and recv to those elements (nil when
// unused).
type call struct {
	kind         opKind
	dt           DataType
	op           RedOp
	root         int
	count        int
	send, recv   []byte
	sendN, recvN int

	sendPeer, recvPeer int // SendRecv only: -1 skips that half
	// name, when not 0, is the kind the call's errors name instead of
	// kind: opSend, opRecv for a SendRecv that is one of the two.
	name opKind

	// AllToAllv only: per-peer counts and displacements, in elements.
	sendCounts, sendDispls, recvCounts, recvDispls []int

	grp *Group // opGroup only: the operations of the group

	// Coalesced AllGather and ReduceScatter only (coalesced.go): the
	// caller's lists of buffers.
	sendParts, recvParts parts

	// PreMulSum (premul.go): the scalar of a created operator, which
	// prepare turned into Sum.
	premul    float64
	hasPremul bool
}

// errKind is the kind a's errors name (see call.name).
func (a *call) errKind() opKind {
	if a.name != 0 {
		return a.name
	}
	return a.kind
}

// named is err, an *Error that names a's kind, naming a.name instead.
func (a *call) named(err error) error {
	if e, ok := err.(*Error); ok && a.name != 0 && e.Op == a.kind.String() {
		return &Error{Rank: e.Rank, Op: a.name.String(), Seq: e.Seq, Err: e.Err}
	}
	return err
}

// unused in call.sendN or call.recvN: this rank does not touch that buffer.
const unused = -1

// start checks a call's arguments, begins it and, for a reducing kind, sets
// up its reduction. It returns the context the links must use, after which
// the caller runs the call and finishes it with end (or finish); or a nil
// context when the call is over: its arguments were wrong (the error says
// how), or the communicator has a single rank and start has done the call
// (each collective is then a copy of send into recv).
func (c *Comm) start(ctx context.Context, a *call) (context.Context, error) {
	if err := c.prepare(a); err != nil {
		return nil, err
	}
	k, dt := a.kind, a.dt
	var op RedOp
	if k.reducing() {
		op = a.op
	}
	root := -1
	if k.rooted() {
		root = a.root
	}
	ctx, err := c.begin(ctx, k, dt, op, root, a.count)
	if err != nil {
		return nil, a.named(err)
	}
	c.octx.name = a.name
	if c.fr != nil && k == opSendRecv {
		c.flightAmend(a)
	}
	if a.hasPremul {
		if err := c.preMultiply(a); err != nil {
			return nil, c.end(k, err)
		}
	}
	if c.group == nil {
		if a.sendN != unused && a.recvN != unused {
			copyIfDifferent(a.recv, a.send)
		}
		return nil, c.end(k, nil)
	}
	if !k.reducing() {
		return ctx, nil
	}
	f, err := reduce.Func(reduce.DType(dt), reduce.Op(op))
	if err == nil {
		c.op.Reduce3, err = reduce.Func3(reduce.DType(dt), reduce.Op(op))
	}
	if err != nil {
		return nil, c.end(k, c.errorf(k, 0, "%w: %v", ErrInvalidArgument, err))
	}
	c.op.Reduce = f
	return ctx, nil
}

// prepare checks a call's arguments and cuts its buffers (see call). It
// touches nothing an operation in progress uses, so a non-blocking call is
// checked by its issuer; doing it twice is harmless.
func (c *Comm) prepare(a *call) error {
	k, dt, es := a.kind, a.dt, a.dt.Size()
	var op RedOp
	if k.reducing() {
		if err := c.resolvePreMul(a); err != nil {
			return err
		}
		op = a.op
	}
	if k.rooted() && c.rank != a.root {
		// Off the root, Broadcast and Scatter only receive, Reduce and
		// Gather only send.
		if k == opBroadcast || k == opScatter {
			a.sendN = unused
		} else {
			a.recvN = unused
		}
	}
	// One test on the way that succeeds; invalid finds what failed.
	if !dt.Valid() || !op.Valid() || op == Avg && !dt.IsFloat() || k.rooted() && (a.root < 0 || a.root >= c.size) ||
		a.count < 0 || len(a.send) < a.sendN*es || len(a.recv) < a.recvN*es {
		return c.invalid(a)
	}
	a.send, a.recv = cut(a.send, a.sendN*es), cut(a.recv, a.recvN*es)
	if (k == opGather || k == opScatter) && c.rank == a.root {
		return c.checkInPlace(a)
	}
	return nil
}

// cut is b's first n bytes, or nil for n < 0 (an unused buffer).
func cut(b []byte, n int) []byte {
	if n < 0 {
		return nil
	}
	return b[:n]
}

// invalid is the error of a call whose arguments start refused: the first
// check that fails, in the order type, reduction, root, count, buffers.
func (c *Comm) invalid(a *call) error {
	k, dt, n := a.kind, a.dt, a.errKind()
	reducing := k.reducing()
	switch {
	case !dt.Valid():
		return c.errorf(n, 0, "%w: unknown data type %d", ErrInvalidArgument, uint8(dt))
	case reducing && !a.op.Valid():
		return c.errorf(n, 0, "%w: unknown reduction op %d", ErrInvalidArgument, uint8(a.op))
	case reducing && a.op == Avg && !dt.IsFloat():
		return c.errorf(n, 0, "%w: avg is only defined for floating-point types, got %v", ErrInvalidArgument, dt)
	case k.rooted() && (a.root < 0 || a.root >= c.size):
		return c.errorf(n, 0, "%w: root %d is outside [0, %d)", ErrInvalidArgument, a.root, c.size)
	case a.count < 0:
		return c.errorf(n, 0, "%w: negative count %d", ErrInvalidArgument, a.count)
	}
	name, buf, elems := "sendbuf", a.send, a.sendN
	if len(buf) >= elems*dt.Size() {
		name, buf, elems = "recvbuf", a.recv, a.recvN
	}
	return c.errorf(n, 0, "%w: %s holds %d elements of %v, the operation needs %d", ErrInvalidArgument, name, len(buf)/dt.Size(), dt, elems)
}

// finish ends a call (end); for an Avg reduction that succeeded it first
// divides the result (recv) by the world size.
func (c *Comm) finish(a *call, err error) error {
	if err == nil && a.op == Avg && a.kind.reducing() && a.recv != nil {
		err = reduce.DivideBy(reduce.DType(a.dt), a.recv, c.size)
	}
	return c.end(a.kind, err)
}

// joinInts formats ranks for error messages: "1,3,4".
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
