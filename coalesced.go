package goccl

import (
	"context"
	"unsafe"
)

// Coalesced collectives: several buffers in one operation, as PyTorch's
// all_gather_into_tensor_coalesced and reduce_scatter_tensor_coalesced do
// for the parameters and gradients of a sharded model. The buffers travel
// as one AllGather (or ReduceScatter) of their total count, packed in a
// staging buffer the communicator keeps (its largest use so far, reused:
// no allocation once it has grown), so that n small buffers cost one
// operation's latency instead of n. A list of one buffer runs as the plain
// operation, without the copies.
//
// Every rank must pass the same number of buffers with the same counts, in
// the same order. The lists and the buffers belong to the operation until
// it is done (the call returns, or the I form's Request is done). Buffers
// must not overlap one another.

// AllGatherCoalesced gathers every buffer of sendbufs from every rank: for
// each i, recvbufs[i] receives rank r's sendbufs[i] at element
// r*len(sendbufs[i]), and so holds at least Size()*len(sendbufs[i])
// elements.
func AllGatherCoalesced[T Element](ctx context.Context, c *Comm, sendbufs, recvbufs [][]T) error {
	a, err := coalescedCall(c, opAllGather, sendbufs, recvbufs, TypeOf[T](), Sum)
	if err != nil {
		return err
	}
	return c.do(ctx, &a)
}

// IAllGatherCoalesced is the non-blocking AllGatherCoalesced.
func IAllGatherCoalesced[T Element](ctx context.Context, c *Comm, sendbufs, recvbufs [][]T) (Request, error) {
	a, err := coalescedCall(c, opAllGather, sendbufs, recvbufs, TypeOf[T](), Sum)
	if err != nil {
		return Request{}, err
	}
	return c.issue(ctx, &a)
}

// ReduceScatterCoalesced reduces every buffer of sendbufs across ranks with
// op: for each i, with count = len(recvbufs[i]), rank r receives the
// reduction of elements r*count to (r+1)*count of sendbufs[i] in
// recvbufs[i]; sendbufs[i] holds at least Size()*count elements.
func ReduceScatterCoalesced[T Element](ctx context.Context, c *Comm, sendbufs, recvbufs [][]T, op RedOp) error {
	a, err := coalescedCall(c, opReduceScatter, sendbufs, recvbufs, TypeOf[T](), op)
	if err != nil {
		return err
	}
	return c.do(ctx, &a)
}

// IReduceScatterCoalesced is the non-blocking ReduceScatterCoalesced.
func IReduceScatterCoalesced[T Element](ctx context.Context, c *Comm, sendbufs, recvbufs [][]T, op RedOp) (Request, error) {
	a, err := coalescedCall(c, opReduceScatter, sendbufs, recvbufs, TypeOf[T](), op)
	if err != nil {
		return Request{}, err
	}
	return c.issue(ctx, &a)
}

// parts is a coalesced call's list of buffers: the caller's [][]T, whose
// slice headers hold lengths in elements, seen without a copy.
type parts struct {
	p unsafe.Pointer // the first []T header of the list
	n int
}

func partsOf[T Element](l [][]T) parts {
	return parts{unsafe.Pointer(unsafe.SliceData(l)), len(l)}
}

// elems is the element count of buffer i.
func (l parts) elems(i int) int {
	return len(*(*[]byte)(unsafe.Add(l.p, uintptr(i)*unsafe.Sizeof([]byte(nil)))))
}

// bytes is buffer i as bytes (es: the element size).
func (l parts) bytes(i, es int) []byte {
	h := *(*[]byte)(unsafe.Add(l.p, uintptr(i)*unsafe.Sizeof([]byte(nil))))
	return unsafe.Slice(unsafe.SliceData(h), len(h)*es)
}

// coalescedCall describes a coalesced AllGather or ReduceScatter: count is
// the total per rank (the sum of the send counts, or of the receive counts),
// which is what the packed operation carries.
func coalescedCall[T Element](c *Comm, k opKind, sendbufs, recvbufs [][]T, dt DataType, op RedOp) (call, error) {
	if c == nil {
		return call{}, nilComm(k.String())
	}
	if len(sendbufs) != len(recvbufs) || len(sendbufs) == 0 {
		return call{}, c.errorf(k, 0, "%w: coalesced: %d send buffers and %d receive buffers, want the same number, at least 1", ErrInvalidArgument, len(sendbufs), len(recvbufs))
	}
	a := call{kind: k, dt: dt, op: op, sendParts: partsOf(sendbufs), recvParts: partsOf(recvbufs)}
	return a, c.checkCoalesced(&a)
}

// checkCoalesced checks a coalesced call's buffers and sets its count.
func (c *Comm) checkCoalesced(a *call) error {
	k := a.kind
	// The type and the reduction, as the plain operation checks them.
	probe := call{kind: k, dt: a.dt, op: a.op}
	if err := c.prepare(&probe); err != nil {
		return err
	}
	total := 0
	for i := range a.sendParts.n {
		ns, nr := a.sendParts.elems(i), a.recvParts.elems(i)
		count, need, have, which := ns, ns*c.size, nr, "recvbufs"
		if k == opReduceScatter {
			count, need, have, which = nr, nr*c.size, ns, "sendbufs"
		}
		if have < need {
			return c.errorf(k, 0, "%w: coalesced: %s[%d] holds %d elements of %v, the operation needs %d (%d ranks x %d)",
				ErrInvalidArgument, which, i, have, a.dt, need, c.size, count)
		}
		total += count
	}
	a.count = total
	return nil
}

// runCoalesced runs a checked coalesced call: packs its buffers into the
// staging buffer, runs the plain operation on it and unpacks the result.
func (c *Comm) runCoalesced(ctx context.Context, a *call) error {
	if err := c.checkCoalesced(a); err != nil {
		return err
	}
	es, p, total := a.dt.Size(), c.size, a.count
	sp, rp := a.sendParts, a.recvParts
	if sp.n == 1 {
		inner := c.allGatherCall(sp.bytes(0, es), rp.bytes(0, es), total, a.dt)
		if a.kind == opReduceScatter {
			inner = c.reduceScatterCall(sp.bytes(0, es), rp.bytes(0, es), total, a.dt, a.op)
		}
		return c.run(ctx, &inner)
	}
	c.stageMu.Lock()
	defer c.stageMu.Unlock()
	row := total * es // one rank's share, in bytes
	if need := row * (p + 1); cap(c.stage) < need {
		c.stage = make([]byte, need)
	}
	if a.kind == opAllGather {
		send, recv := c.stage[:row], c.stage[row:row*(p+1)]
		off := 0
		for i := range sp.n {
			off += copy(send[off:], sp.bytes(i, es))
		}
		inner := c.allGatherCall(send, recv, total, a.dt)
		if err := c.run(ctx, &inner); err != nil {
			return err
		}
		for r := range p {
			off := r * row
			for i := range rp.n {
				n := sp.elems(i) * es
				off += copy(rp.bytes(i, es)[r*n:(r+1)*n], recv[off:off+n])
			}
		}
		return nil
	}
	send, recv := c.stage[:row*p], c.stage[row*p:row*(p+1)]
	for r := range p {
		off := r * row
		for i := range sp.n {
			n := rp.elems(i) * es
			off += copy(send[off:off+n], sp.bytes(i, es)[r*n:(r+1)*n])
		}
	}
	inner := c.reduceScatterCall(send, recv, total, a.dt, a.op)
	if err := c.run(ctx, &inner); err != nil {
		return err
	}
	off := 0
	for i := range rp.n {
		n := rp.elems(i) * es
		off += copy(rp.bytes(i, es)[:n], recv[off:off+n])
	}
	return nil
}
