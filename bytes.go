package goccl

import (
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
	a := c.allGatherCall(send, recv, count, dt)
	return c.do(ctx, &a)
}

func (c *Comm) allGatherCall(send, recv []byte, count int, dt DataType) call {
	return call{kind: opAllGather, dt: dt, count: count, send: send, sendN: count, recv: recv, recvN: count * c.size}
}

// ReduceScatterBytes is ReduceScatter on raw bytes; count is per rank (the
// size of recv).
func (c *Comm) ReduceScatterBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp) error {
	a := c.reduceScatterCall(send, recv, count, dt, op)
	return c.do(ctx, &a)
}

func (c *Comm) reduceScatterCall(send, recv []byte, count int, dt DataType, op RedOp) call {
	return call{kind: opReduceScatter, dt: dt, op: op, count: count, send: send, sendN: count * c.size, recv: recv, recvN: count}
}

// AllToAllBytes is AllToAll on raw bytes; count is the elements per block.
func (c *Comm) AllToAllBytes(ctx context.Context, send, recv []byte, count int, dt DataType) error {
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
	count, root := a.count, a.root
	switch a.kind {
	case opAllReduce:
		n := len(a.recv)
		if c.collnet != nil && c.algoForced == algo.Auto {
			return c.finish(a, c.allReduceCollNet(ctx, a))
		}
		alg := c.chooseAllReduce(n, sameStart(a.send, a.recv))
		c.logAlgo(opAllReduce, alg, alg.String(), n)
		return c.finish(a, c.group.AllReduce(ctx, &c.op, a.send, a.recv, count, alg))
	case opBroadcast:
		if n := len(a.recv); c.useHier(opBroadcast, n, "tree") {
			err = c.group.BroadcastHier(ctx, &c.op, a.send, a.recv, count, root, c.group.Hierarchy())
		} else if c.useDirect(opBroadcast, n, n, "tree") {
			err = c.group.BroadcastDirect(ctx, &c.op, a.send, a.recv, count, root)
		} else {
			err = c.group.Broadcast(ctx, &c.op, a.send, a.recv, count, root)
		}
		return c.end(opBroadcast, err)
	case opReduce:
		c.logAlgo(opReduce, 0, "tree", len(a.send))
		return c.finish(a, c.group.Reduce(ctx, &c.op, a.send, a.recv, count, root))
	case opAllGather:
		if c.useHier(opAllGather, len(a.recv), "ring") {
			err = c.group.AllGatherHier(ctx, &c.op, a.send, a.recv, count, c.group.Hierarchy())
		} else if c.useDirect(opAllGather, len(a.recv), len(a.send), "ring") {
			err = c.group.AllGatherDirect(ctx, &c.op, a.send, a.recv, count)
		} else {
			err = c.group.AllGather(ctx, &c.op, a.send, a.recv, count)
		}
		return c.end(opAllGather, err)
	case opReduceScatter:
		if c.useHier(opReduceScatter, len(a.send), "ring") {
			err = c.group.ReduceScatterHier(ctx, &c.op, a.send, a.recv, count, c.group.Hierarchy())
		} else if c.useDirect(opReduceScatter, len(a.send), len(a.recv), "ring") {
			err = c.group.ReduceScatterDirect(ctx, &c.op, a.send, a.recv, count)
		} else {
			err = c.group.ReduceScatter(ctx, &c.op, a.send, a.recv, count)
		}
		return c.finish(a, err)
	case opAllToAll:
		// In place, the pairwise exchange from a copy was faster than
		// writing into peers that have just read their own buffers (2
		// ranks, 128 KiB: 11.8 against 16.5 µs).
		n := len(a.send)
		if !sameStart(a.send, a.recv) && c.useDirect(opAllToAll, n, n, "pairwise") {
			return c.end(opAllToAll, c.group.AllToAllDirect(ctx, &c.op, a.send, a.recv, count))
		}
		c.logAlgo(opAllToAll, 0, "pairwise", n)
		src := a.send
		if sameStart(a.send, a.recv) && n > 0 {
			if cap(c.scratch) < n {
				c.scratch = make([]byte, n)
			}
			src = c.scratch[:n]
			copy(src, a.send)
		}
		return c.end(opAllToAll, c.group.AllToAll(ctx, &c.op, src, a.recv, count))
	case opGather, opScatter:
		c.logAlgo(a.kind, 0, "flat", count*a.dt.Size())
		if a.kind == opGather {
			err = c.group.Gather(ctx, &c.op, a.send, a.recv, count, root)
		} else {
			err = c.group.Scatter(ctx, &c.op, a.send, a.recv, count, root)
		}
		return c.end(a.kind, err)
	case opSendRecv:
		sendPeer, recvPeer := a.sendPeer, a.recvPeer
		if sendPeer == c.rank {
			copy(a.recv, a.send)
			return c.end(opSendRecv, nil)
		}
		err = c.group.SendRecvP2P(ctx, &c.op, c.nextSend(sendPeer), sendPeer, a.send, c.nextRecv(recvPeer), recvPeer, a.recv)
		return c.end(opSendRecv, err)
	}
	return c.end(a.kind, c.errorf(a.kind, 0, "%w: no such operation", ErrInvalidArgument))
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
	if err := c.checkPeer("Send to", peer); err != nil {
		return err
	}
	return c.SendRecvBytes(ctx, buf, peer, nil, -1, count, dt)
}

// RecvBytes receives count elements from peer into buf.
func (c *Comm) RecvBytes(ctx context.Context, buf []byte, count int, dt DataType, peer int) error {
	if err := c.checkPeer("Recv from", peer); err != nil {
		return err
	}
	return c.SendRecvBytes(ctx, nil, -1, buf, peer, count, dt)
}

// checkPeer checks the peer of a Send or Recv: not this rank (what says
// which: "Send to", "Recv from"), not negative.
func (c *Comm) checkPeer(what string, peer int) error {
	if peer == c.rank {
		return c.errorf(opSendRecv, 0, "%w: %s self (peer %d) would never complete; use SendRecv", ErrInvalidArgument, what, peer)
	}
	if peer < 0 {
		return c.errorf(opSendRecv, 0, "%w: peer %d is outside [0, %d)", ErrInvalidArgument, peer, c.size)
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
