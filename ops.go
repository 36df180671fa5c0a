package goccl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/internal/reduce"
	"github.com/goccl/goccl/transport"
)

// opKind is the collective carried in transport headers.
type opKind uint8

const (
	opAllReduce opKind = iota + 1
	opBroadcast
	opReduce
	opAllGather
	opReduceScatter
	opAllToAll
	opSendRecv
	opBarrier
	opCheck // GOCCL_DEBUG_CHECK fingerprint exchange
	numOpKinds
)

var opNames = [...]string{"", "AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllToAll", "SendRecv", "Barrier", "DebugCheck"}

func (k opKind) String() string {
	if k < numOpKinds {
		return opNames[k]
	}
	return "op(" + strconv.Itoa(int(k)) + ")"
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
	if c.poison != nil {
		c.mu.Unlock()
		return nil, c.errorf(kind, 0, "communicator unusable after an earlier error: %w", c.poison)
	}
	if kind != opSendRecv {
		c.seq++
	}
	r := reduce.Op(op)
	c.op.Header = transport.Header{Seq: c.seq, Op: uint8(kind), DType: uint8(dt), RedOp: uint8(r), Root: int32(root), Count: uint64(count)}
	c.op.ElemSize = dt.Size()
	c.op.Reduce, c.op.Reduce3 = nil, nil
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		c.octx.parent = ctx
		c.octx.deadline = time.Now().Add(c.timeout)
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
		if c.aborted.Load() {
			err = c.errorf(kind, c.op.Header.Seq, "%w", ErrAborted)
		} else {
			if c.group != nil && kind != opSendRecv && errors.Is(err, context.DeadlineExceeded) {
				if nh := c.group.NotHeard(c.op.Header.Seq); len(nh) > 0 {
					err = fmt.Errorf("%w; no message of this operation yet from rank(s) %s", err, joinInts(nh))
				}
			}
			err = c.wrap(kind, c.op.Header.Seq, err)
		}
		c.poison = err
		c.setAsyncErr(err)
		if c.group != nil {
			// Peers blocked on this rank fail now, told which rank was
			// lost if that is the cause.
			c.group.AbortLost(transport.LostRank(err))
		}
	}
	c.octx.parent = nil
	c.mu.Unlock()
	return err
}

// opContext is a reusable context that adds the communicator's operation
// timeout to a context without one, without allocating per operation. Links
// observe it through Deadline and Err; its Done channel is the parent's.
type opContext struct {
	parent   context.Context
	deadline time.Time
}

func (o *opContext) Deadline() (time.Time, bool) { return o.deadline, true }
func (o *opContext) Done() <-chan struct{}       { return o.parent.Done() }
func (o *opContext) Value(key any) any           { return o.parent.Value(key) }
func (o *opContext) Err() error {
	if err := o.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(o.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *Comm) checkTypes(kind opKind, dt DataType, op RedOp, reducing bool) error {
	if !dt.Valid() {
		return c.errorf(kind, 0, "%w: unknown data type %d", ErrInvalidArgument, uint8(dt))
	}
	if !reducing {
		return nil
	}
	if !op.Valid() {
		return c.errorf(kind, 0, "%w: unknown reduction op %d", ErrInvalidArgument, uint8(op))
	}
	if op == Avg && !dt.IsFloat() {
		return c.errorf(kind, 0, "%w: avg is only defined for floating-point types, got %v", ErrInvalidArgument, dt)
	}
	return nil
}

func (c *Comm) checkLen(kind opKind, name string, buf []byte, elems int, dt DataType) error {
	if elems < 0 {
		return c.errorf(kind, 0, "%w: negative count %d", ErrInvalidArgument, elems)
	}
	if need := elems * dt.Size(); len(buf) < need {
		return c.errorf(kind, 0, "%w: %s holds %d elements of %v, the operation needs %d", ErrInvalidArgument, name, len(buf)/dt.Size(), dt, elems)
	}
	return nil
}

func (c *Comm) checkRoot(kind opKind, root int) error {
	if root < 0 || root >= c.size {
		return c.errorf(kind, 0, "%w: root %d is outside [0, %d)", ErrInvalidArgument, root, c.size)
	}
	return nil
}

func (c *Comm) setReduce(kind opKind, dt DataType, op RedOp) error {
	f, err := reduce.Func(reduce.DType(dt), reduce.Op(op))
	if err != nil {
		return c.errorf(kind, 0, "%w: %v", ErrInvalidArgument, err)
	}
	f3, err := reduce.Func3(reduce.DType(dt), reduce.Op(op))
	if err != nil {
		return c.errorf(kind, 0, "%w: %v", ErrInvalidArgument, err)
	}
	c.op.Reduce, c.op.Reduce3 = f, f3
	return nil
}

// joinInts formats ranks for error messages: "1,3,4".
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
