package goccl

import (
	"bytes"
	"context"

	"github.com/goccl/goccl/internal/algo"
)

// Each *Bytes method describes its call (a call) and hands it to do, which
// runs it on this goroutine when no non-blocking operation is outstanding,
// and otherwise queues it behind them and waits (nonblocking.go). run is
// where a call is executed, one at a time, in issue order.

// AllReduceBytes is AllReduce on raw bytes: count elements of type dt.
func (c *Comm) AllReduceBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp) error {
	a := allReduceCall(send, recv, count, dt, op)
	return c.do(ctx, &a)
}

func allReduceCall(send, recv []byte, count int, dt DataType, op RedOp) call {
	return call{kind: opAllReduce, dt: dt, op: op, count: count, send: send, sendN: count, recv: recv, recvN: count}
}

// BroadcastBytes is Broadcast on raw bytes.
func (c *Comm) BroadcastBytes(ctx context.Context, send, recv []byte, count int, dt DataType, root int) error {
	a := broadcastCall(send, recv, count, dt, root)
	return c.do(ctx, &a)
}

func broadcastCall(send, recv []byte, count int, dt DataType, root int) call {
	return call{kind: opBroadcast, dt: dt, root: root, count: count, send: send, sendN: count, recv: recv, recvN: count}
}

// ReduceBytes is Reduce on raw bytes.
func (c *Comm) ReduceBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp, root int) error {
	a := reduceCall(send, recv, count, dt, op, root)
	return c.do(ctx, &a)
}

func reduceCall(send, recv []byte, count int, dt DataType, op RedOp, root int) call {
	return call{kind: opReduce, dt: dt, op: op, root: root, count: count, send: send, sendN: count, recv: recv, recvN: count}
}

// AllGatherBytes is AllGather on raw bytes; count is per rank.
func (c *Comm) AllGatherBytes(ctx context.Context, send, recv []byte, count int, dt DataType) error {
	if c == nil {
		return nilComm(opAllGather.String())
	}
	a := c.allGatherCall(send, recv, count, dt)
	return c.do(ctx, &a)
}

func (c *Comm) allGatherCall(send, recv []byte, count int, dt DataType) call {
	return call{kind: opAllGather, dt: dt, count: count, send: send, sendN: count, recv: recv, recvN: count * c.size}
}

// ReduceScatterBytes is ReduceScatter on raw bytes; count is per rank (the
// size of recv).
func (c *Comm) ReduceScatterBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp) error {
	if c == nil {
		return nilComm(opReduceScatter.String())
	}
	a := c.reduceScatterCall(send, recv, count, dt, op)
	return c.do(ctx, &a)
}

func (c *Comm) reduceScatterCall(send, recv []byte, count int, dt DataType, op RedOp) call {
	return call{kind: opReduceScatter, dt: dt, op: op, count: count, send: send, sendN: count * c.size, recv: recv, recvN: count}
}

// AllToAllBytes is AllToAll on raw bytes; count is the elements per block.
func (c *Comm) AllToAllBytes(ctx context.Context, send, recv []byte, count int, dt DataType) error {
	if c == nil {
		return nilComm(opAllToAll.String())
	}
	a := c.allToAllCall(send, recv, count, dt)
	return c.do(ctx, &a)
}

func (c *Comm) allToAllCall(send, recv []byte, count int, dt DataType) call {
	return call{kind: opAllToAll, dt: dt, count: count, send: send, sendN: count * c.size, recv: recv, recvN: count * c.size}
}

// SendRecvBytes is SendRecv on raw bytes. A peer of -1 skips that half.
func (c *Comm) SendRecvBytes(ctx context.Context, send []byte, sendPeer int, recv []byte, recvPeer int, count int, dt DataType) error {
	a := sendRecvCall(send, sendPeer, recv, recvPeer, count, dt)
	return c.do(ctx, &a)
}

func sendRecvCall(send []byte, sendPeer int, recv []byte, recvPeer int, count int, dt DataType) call {
	a := call{kind: opSendRecv, dt: dt, count: count, send: send, sendN: unused, recv: recv, recvN: unused, sendPeer: sendPeer, recvPeer: recvPeer}
	if sendPeer >= 0 {
		a.sendN = count
	}
	if recvPeer >= 0 {
		a.recvN = count
	}
	return a
}

// checkPeers checks a SendRecv's peers (before its buffers, as start does).
func (c *Comm) checkPeers(a *call) error {
	for _, p := range [2]int{a.sendPeer, a.recvPeer} {
		if p < -1 || p >= c.size {
			return c.errorf(opSendRecv, 0, "%w: peer %d is outside [0, %d)", ErrInvalidArgument, p, c.size)
		}
	}
	if (a.sendPeer == c.rank) != (a.recvPeer == c.rank) {
		return c.errorf(opSendRecv, 0, "%w: a send to self needs a receive from self (send peer %d, recv peer %d)", ErrInvalidArgument, a.sendPeer, a.recvPeer)
	}
	return nil
}

// barrierCall describes a Barrier: no buffers, no elements.
func barrierCall() call {
	return call{kind: opBarrier, dt: Uint8, root: -1, sendN: unused, recvN: unused}
}

// run executes a call on this goroutine: it begins it (start), runs its
// schedule and ends it. Calls run one at a time (start locks c.mu, end
// unlocks it).
func (c *Comm) run(ctx context.Context, a *call) error {
	if a.sendParts.n > 0 {
		return c.runCoalesced(ctx, a)
	}
	switch a.kind {
	case opBarrier:
		return c.barrier(ctx)
	case opGroup:
		return c.runGroup(ctx, a.grp)
	case opAllToAllv:
		if err := c.checkAllToAllv(a); err != nil {
			return err
		}
		return c.runAllToAllv(ctx, a)
	case opSendRecv:
		if err := c.checkPeers(a); err != nil {
			return err
		}
	}
	ctx, err := c.start(ctx, a)
	if ctx == nil {
		return err
	}
	if a.kind == opSendRecv {
		if a.sendPeer == c.rank {
			copy(a.recv, a.send)
			return c.end(opSendRecv, nil)
		}
		send := a.send
		if a.sendPeer >= 0 && a.recvPeer >= 0 && overlaps(send, a.recv) {
			// In place: what is sent is the buffer as this call finds
			// it (MPI_Sendrecv_replace's meaning); without the copy the
			// receive writes under the send's reads. Taken here, when
			// the call runs, not when a non-blocking one is issued: an
			// earlier call may still be writing the buffer then.
			send = bytes.Clone(send)
		}
		err = c.group.SendRecvP2P(ctx, &c.op, c.nextSend(a.sendPeer), a.sendPeer, send, c.nextRecv(a.recvPeer), a.recvPeer, a.recv)
		return c.end(opSendRecv, err)
	}
	// The schedule: the table's row that c.sel chooses for the largest
	// buffer (AllGather's recv, ReduceScatter's send).
	n := max(len(a.send), len(a.recv))
	s := c.sel.Choose(algo.Kind(a.kind), n, sameStart(a.send, a.recv))
	if s == nil {
		return c.end(a.kind, c.errorf(a.kind, 0, "%w: no such operation", ErrInvalidArgument))
	}
	if s.PerRank {
		n = a.count * a.dt.Size()
	}
	// Arrivals travel with the messages; these schedules send none across
	// the hosts (skew.go).
	c.skewSkip = s.Algo == algo.CollNet || s.Algo == algo.Hier && a.count == 0
	c.logAlgo(a.kind, s.Bit(), s.Algo, n)
	return c.finish(a, s.Run(ctx, c.group, &c.op, algo.Args{Send: a.send, Recv: a.recv, Count: a.count, Root: a.root}))
}

// nextSend is the sequence number of the next message to peer p (0 for no
// peer, p < 0).
func (c *Comm) nextSend(p int) uint64 {
	if p < 0 {
		return 0
	}
	c.sendSeq[p]++
	return c.sendSeq[p]
}

// nextRecv is the sequence number of the next message from peer p (0 for no
// peer, p < 0).
func (c *Comm) nextRecv(p int) uint64 {
	if p < 0 {
		return 0
	}
	c.recvSeq[p]++
	return c.recvSeq[p]
}

// SendBytes sends count elements of buf to peer.
func (c *Comm) SendBytes(ctx context.Context, buf []byte, count int, dt DataType, peer int) error {
	a, err := c.p2pCall(opSend, buf, count, dt, peer)
	if err != nil {
		return err
	}
	return c.do(ctx, &a)
}

// RecvBytes receives count elements from peer into buf.
func (c *Comm) RecvBytes(ctx context.Context, buf []byte, count int, dt DataType, peer int) error {
	a, err := c.p2pCall(opRecv, buf, count, dt, peer)
	if err != nil {
		return err
	}
	return c.do(ctx, &a)
}

// p2pCall checks the peer of a Send or Recv (kind opSend, opRecv) and
// describes it: a SendRecv with one half, whose errors name kind.
func (c *Comm) p2pCall(kind opKind, buf []byte, count int, dt DataType, peer int) (call, error) {
	if err := c.checkPeer(kind, peer); err != nil {
		return call{}, err
	}
	var a call
	if kind == opSend {
		a = sendRecvCall(buf, peer, nil, -1, count, dt)
	} else {
		a = sendRecvCall(nil, -1, buf, peer, count, dt)
	}
	a.name = kind
	return a, nil
}

// checkPeer checks the peer of a Send or Recv (kind opSend, opRecv): in
// range, and not this rank.
func (c *Comm) checkPeer(kind opKind, peer int) error {
	if c == nil {
		return nilComm(kind.String())
	}
	if peer == c.rank {
		what := "Send to"
		if kind == opRecv {
			what = "Recv from"
		}
		return c.errorf(kind, 0, "%w: %s self (peer %d) would never complete; use SendRecv", ErrInvalidArgument, what, peer)
	}
	if peer < 0 || peer >= c.size {
		return c.errorf(kind, 0, "%w: peer %d is outside [0, %d)", ErrInvalidArgument, peer, c.size)
	}
	return nil
}

// copyIfDifferent copies src into dst unless they start at the same element
// (an in-place call).
func copyIfDifferent(dst, src []byte) {
	if !sameStart(dst, src) {
		copy(dst, src)
	}
}

// sameStart reports whether a and b start at the same element (true when
// either is empty, so no copy is attempted).
func sameStart(a, b []byte) bool {
	return len(a) == 0 || len(b) == 0 || &a[0] == &b[0]
}
