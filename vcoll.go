package goccl

import (
	"context"
	"unsafe"
)

// AllToAllv, Gather and Scatter: the collectives with per-peer counts or a
// root that owns all the blocks. Counts and displacements are in elements.

// AllToAllv sends sendCounts[p] elements of sendbuf, starting at element
// sendDispls[p], to rank p, and receives recvCounts[p] elements from rank p
// into recvbuf starting at element recvDispls[p] (MPI_Alltoallv; the
// expert-parallel exchange of mixture-of-experts layers). All four slices
// have Size() entries. What rank a sends to rank b (sendCounts[b] on a) must
// be what b expects from a (recvCounts[a] on b): a disagreement fails the
// call with ErrMismatch naming both counts. sendCounts[Rank()] must equal
// recvCounts[Rank()]. Counts may be zero. Receive regions with elements must
// not overlap one another; send regions may. sendbuf and recvbuf may overlap
// (the same buffer, in place): the call then sends from a copy of sendbuf.
// A nil displacement slice means the regions are packed in rank order: peer
// p's region starts after the counts of peers 0 to p-1 (AllToAllSingle).
func AllToAllv[T Element](ctx context.Context, c *Comm, sendbuf []T, sendCounts, sendDispls []int, recvbuf []T, recvCounts, recvDispls []int) error {
	return c.AllToAllvBytes(ctx, asBytes(sendbuf), sendCounts, sendDispls, asBytes(recvbuf), recvCounts, recvDispls, TypeOf[T]())
}

// AllToAllSingle is PyTorch's all_to_all_single on flat buffers: sendbuf is
// split in Size() consecutive chunks of sendSplits[p] elements, chunk p
// going to rank p, and recvbuf receives recvSplits[p] elements from rank p,
// the chunks consecutive in rank order: the token exchange of expert
// parallelism, where the splits are the per-expert token counts exchanged
// first. nil splits divide a buffer evenly (its length must then be a
// multiple of Size()); with both nil it is AllToAll. It is AllToAllv with
// packed regions (nil displacements), and reports its errors as AllToAllv.
func AllToAllSingle[T Element](ctx context.Context, c *Comm, sendbuf []T, sendSplits []int, recvbuf []T, recvSplits []int) error {
	a, err := allToAllSingleCall(c, sendbuf, sendSplits, recvbuf, recvSplits)
	if err != nil {
		return err
	}
	return c.do(ctx, &a)
}

// IAllToAllSingle is the non-blocking AllToAllSingle.
func IAllToAllSingle[T Element](ctx context.Context, c *Comm, sendbuf []T, sendSplits []int, recvbuf []T, recvSplits []int) (Request, error) {
	a, err := allToAllSingleCall(c, sendbuf, sendSplits, recvbuf, recvSplits)
	if err != nil {
		return Request{}, err
	}
	return c.issue(ctx, &a)
}

// allToAllSingleCall describes an AllToAllSingle: AllToAll without splits,
// else AllToAllv with packed regions (a nil side split evenly).
func allToAllSingleCall[T Element](c *Comm, sendbuf []T, sendSplits []int, recvbuf []T, recvSplits []int) (call, error) {
	if c == nil {
		return call{}, nilComm(opAllToAllv.String())
	}
	dt := TypeOf[T]()
	if sendSplits == nil && recvSplits == nil {
		if len(sendbuf)%c.size != 0 {
			return call{}, c.errorf(opAllToAll, 0, "%w: sendbuf's %d elements do not split evenly over %d ranks", ErrInvalidArgument, len(sendbuf), c.size)
		}
		return c.allToAllCall(asBytes(sendbuf), asBytes(recvbuf), len(sendbuf)/c.size, dt), nil
	}
	if err := c.evenSplits(&sendSplits, len(sendbuf), "send"); err != nil {
		return call{}, err
	}
	if err := c.evenSplits(&recvSplits, len(recvbuf), "recv"); err != nil {
		return call{}, err
	}
	return allToAllvCall(asBytes(sendbuf), sendSplits, nil, asBytes(recvbuf), recvSplits, nil, dt), nil
}

// evenSplits replaces nil splits of a buffer of n elements by an even split
// (which: "send" or "recv"). It allocates only then.
func (c *Comm) evenSplits(splits *[]int, n int, which string) error {
	if *splits != nil {
		return nil
	}
	if n%c.size != 0 {
		return c.errorf(opAllToAllv, 0, "%w: %sbuf's %d elements do not split evenly over %d ranks (no %sSplits)", ErrInvalidArgument, which, n, c.size, which)
	}
	s := make([]int, c.size)
	for p := range s {
		s[p] = n / c.size
	}
	*splits = s
	return nil
}

// Gather collects count elements of sendbuf from every rank on root:
// recvbuf[p*count:(p+1)*count] receives rank p's sendbuf (MPI_Gather).
// recvbuf is only written on root (it may be nil elsewhere) and holds
// Size()*count elements there. In place: on root, sendbuf may be root's own
// block of recvbuf, recvbuf[root*count:(root+1)*count]; any other overlap of
// the two on root is refused.
func Gather[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int, root int) error {
	return c.GatherBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T](), root)
}

// Scatter hands out root's sendbuf (Size()*count elements): rank p receives
// sendbuf[p*count:(p+1)*count] in recvbuf (count elements) (MPI_Scatter).
// sendbuf is only read on root (it may be nil elsewhere). In place: on root,
// recvbuf may be root's own block of sendbuf,
// sendbuf[root*count:(root+1)*count]; any other overlap of the two on root is
// refused.
func Scatter[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int, root int) error {
	return c.ScatterBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T](), root)
}

// AllToAllvBytes is AllToAllv on raw bytes; counts and displacements are in
// elements of dt.
//
// The header of each message carries that message's element count, which
// the receiver checks against its recvCounts entry; the operation's own
// count (in GOCCL_DEBUG_CHECK fingerprints) is 0, since the ranks' counts
// legitimately differ.
func (c *Comm) AllToAllvBytes(ctx context.Context, send []byte, sendCounts, sendDispls []int, recv []byte, recvCounts, recvDispls []int, dt DataType) error {
	a := allToAllvCall(send, sendCounts, sendDispls, recv, recvCounts, recvDispls, dt)
	return c.do(ctx, &a)
}

func allToAllvCall(send []byte, sendCounts, sendDispls []int, recv []byte, recvCounts, recvDispls []int, dt DataType) call {
	return call{kind: opAllToAllv, dt: dt, root: -1, send: send, recv: recv,
		sendCounts: sendCounts, sendDispls: sendDispls, recvCounts: recvCounts, recvDispls: recvDispls}
}

// checkAllToAllv checks an AllToAllv's arguments and cuts its buffers to the
// elements their regions span (doing it twice is harmless).
func (c *Comm) checkAllToAllv(a *call) error {
	const k = opAllToAllv
	dt := a.dt
	if !dt.Valid() {
		return c.errorf(k, 0, "%w: unknown data type %d", ErrInvalidArgument, uint8(dt))
	}
	es := dt.Size()
	sspan, err := c.checkLayout("send", a.send, a.sendCounts, a.sendDispls, dt)
	if err != nil {
		return err
	}
	rspan, err := c.checkLayout("recv", a.recv, a.recvCounts, a.recvDispls, dt)
	if err != nil {
		return err
	}
	recvCounts, recvDispls := a.recvCounts, a.recvDispls
	if sc, rc := a.sendCounts[c.rank], recvCounts[c.rank]; sc != rc {
		return c.errorf(k, 0, "%w: peer %d (this rank): sendcounts has %d, recvcounts %d", ErrInvalidArgument, c.rank, sc, rc)
	}
	// Receive regions must not overlap (P is small; no allocation); packed
	// ones do not.
	for p := range recvCounts {
		if recvDispls == nil {
			break
		}
		if recvCounts[p] == 0 {
			continue
		}
		lo, hi := recvDispls[p], recvDispls[p]+recvCounts[p]
		for q := p + 1; q < len(recvCounts); q++ {
			if recvCounts[q] != 0 && recvDispls[q] < hi && lo < recvDispls[q]+recvCounts[q] {
				return c.errorf(k, 0, "%w: receive regions of peers %d [%d, %d) and %d [%d, %d) overlap", ErrInvalidArgument,
					p, lo, hi, q, recvDispls[q], recvDispls[q]+recvCounts[q])
			}
		}
	}
	a.send, a.recv = a.send[:sspan*es], a.recv[:rspan*es]
	return nil
}

// runAllToAllv runs a checked AllToAllv (see run).
func (c *Comm) runAllToAllv(ctx context.Context, a *call) error {
	const k = opAllToAllv
	ctx, err := c.begin(ctx, k, a.dt, 0, -1, 0)
	if err != nil {
		return err
	}
	if c.fr != nil {
		c.flightAmend(a)
	}
	es, send, recv := a.dt.Size(), a.send, a.recv
	sendDispls, recvDispls := c.packedDispls(a.sendCounts, a.sendDispls, 0), c.packedDispls(a.recvCounts, a.recvDispls, 1)
	if overlaps(send, recv) {
		if cap(c.scratch) < len(send) {
			c.scratch = make([]byte, len(send))
		}
		src := c.scratch[:len(send)]
		copy(src, send)
		send = src
	}
	if c.group == nil {
		d, s := recvDispls[0]*es, sendDispls[0]*es
		copy(recv[d:d+a.recvCounts[0]*es], send[s:s+a.sendCounts[0]*es])
		return c.end(k, nil)
	}
	c.logAlgo(k, 0, "pairwise", len(recv))
	return c.end(k, c.group.AllToAllv(ctx, &c.op, send, a.sendCounts, sendDispls, recv, a.recvCounts, recvDispls))
}

// packedDispls is displs, or when it is nil the displacements of regions of
// counts packed in rank order, in the communicator's scratch slice side (0:
// send, 1: receive; c.mu held, the operation begun).
func (c *Comm) packedDispls(counts, displs []int, side int) []int {
	if displs != nil {
		return displs
	}
	if len(c.displs[side]) != len(counts) {
		c.displs[side] = make([]int, len(counts))
	}
	d := c.displs[side]
	off := 0
	for p, n := range counts {
		d[p] = off
		off += n
	}
	return d
}

// checkLayout checks one side of an AllToAllv (which: "send" or "recv"):
// Size() counts and displacements, none negative, every region inside buf.
// It returns the elements of buf the regions span (empty ones included, so
// that every region can be sliced from buf cut to the span).
func (c *Comm) checkLayout(which string, buf []byte, counts, displs []int, dt DataType) (span int, err error) {
	const k = opAllToAllv
	if len(counts) != c.size || displs != nil && len(displs) != c.size {
		return 0, c.errorf(k, 0, "%w: %scounts has %d entries and %sdispls %d, want one per rank (%d)", ErrInvalidArgument,
			which, len(counts), which, len(displs), c.size)
	}
	elems := len(buf) / dt.Size()
	packed := 0 // the displacement of a packed layout (nil displs)
	for p, n := range counts {
		d := packed
		if displs != nil {
			d = displs[p]
		}
		packed += max(n, 0)
		switch {
		case n < 0:
			return 0, c.errorf(k, 0, "%w: peer %d: negative %scount %d", ErrInvalidArgument, p, which, n)
		case d < 0:
			return 0, c.errorf(k, 0, "%w: peer %d: negative %sdispl %d", ErrInvalidArgument, p, which, d)
		case d > elems || n > elems-d:
			return 0, c.errorf(k, 0, "%w: peer %d: %sdispl %d + %scount %d is past %sbuf's %d elements of %v", ErrInvalidArgument,
				p, which, d, which, n, which, elems, dt)
		}
		span = max(span, d+n)
	}
	return span, nil
}

// GatherBytes is Gather on raw bytes.
func (c *Comm) GatherBytes(ctx context.Context, send, recv []byte, count int, dt DataType, root int) error {
	if c == nil {
		return nilComm(opGather.String())
	}
	a := c.gatherCall(send, recv, count, dt, root)
	return c.do(ctx, &a)
}

// ScatterBytes is Scatter on raw bytes.
func (c *Comm) ScatterBytes(ctx context.Context, send, recv []byte, count int, dt DataType, root int) error {
	if c == nil {
		return nilComm(opScatter.String())
	}
	a := c.scatterCall(send, recv, count, dt, root)
	return c.do(ctx, &a)
}

// gatherCall and scatterCall describe a Gather and a Scatter as the root
// sees them (the root's recv, resp. send, holds every rank's block);
// prepare marks the whole buffer unused on the other ranks.
func (c *Comm) gatherCall(send, recv []byte, count int, dt DataType, root int) call {
	return call{kind: opGather, dt: dt, root: root, count: count, send: send, sendN: count, recv: recv, recvN: count * c.size}
}

func (c *Comm) scatterCall(send, recv []byte, count int, dt DataType, root int) call {
	return call{kind: opScatter, dt: dt, root: root, count: count, send: send, sendN: count * c.size, recv: recv, recvN: count}
}

// checkInPlace checks the buffers of a Gather or Scatter on its root: they
// may overlap only as in place, the single block being the root's own block
// of the whole buffer.
func (c *Comm) checkInPlace(a *call) error {
	block, all, blockName, allName := a.send, a.recv, "sendbuf", "recvbuf"
	if a.kind == opScatter {
		block, all, blockName, allName = a.recv, a.send, "recvbuf", "sendbuf"
	}
	if overlaps(a.send, a.recv) && !sameBlock(block, all, a.root*a.count*a.dt.Size()) {
		return c.errorf(a.kind, 0, "%w: on root %d, %s overlaps %s other than as the root's block %d (in place)", ErrInvalidArgument, a.root, blockName, allName, a.root)
	}
	return nil
}

// overlaps reports whether a and b share a byte.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

// sameBlock reports whether blk is exactly whole[off:off+len(blk)].
func sameBlock(blk, whole []byte, off int) bool {
	return off+len(blk) <= len(whole) && unsafe.SliceData(blk) == unsafe.SliceData(whole[off:])
}
