package goccl

import (
	"context"

	"github.com/goccl/goccl/internal/algo"
	"github.com/goccl/goccl/internal/reduce"
)

// AllReduceBytes is AllReduce on raw bytes: count elements of type dt.
func (c *Comm) AllReduceBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp) error {
	if err := c.checkTypes(opAllReduce, dt, op, true); err != nil {
		return err
	}
	if err := c.checkLen(opAllReduce, "sendbuf", send, count, dt); err != nil {
		return err
	}
	if err := c.checkLen(opAllReduce, "recvbuf", recv, count, dt); err != nil {
		return err
	}
	ctx, err := c.begin(ctx, opAllReduce, dt, op, -1, count)
	if err != nil {
		return err
	}
	if err := c.setReduce(opAllReduce, dt, op); err != nil {
		return c.end(opAllReduce, err)
	}
	n := count * dt.Size()
	if c.group == nil {
		if !sameStart(send, recv) {
			copy(recv[:n], send[:n])
		}
	} else {
		a := c.chooseAllReduce(n, sameStart(send, recv))
		c.logAlgo(opAllReduce, a, a.String(), n)
		err = c.group.AllReduce(ctx, &c.op, send[:n], recv[:n], count, a)
	}
	if err == nil && op == Avg {
		err = reduce.DivideBy(reduce.DType(dt), recv[:n], c.size)
	}
	return c.end(opAllReduce, err)
}

// BroadcastBytes is Broadcast on raw bytes.
func (c *Comm) BroadcastBytes(ctx context.Context, send, recv []byte, count int, dt DataType, root int) error {
	if err := c.checkTypes(opBroadcast, dt, 0, false); err != nil {
		return err
	}
	if err := c.checkRoot(opBroadcast, root); err != nil {
		return err
	}
	if c.rank == root {
		if err := c.checkLen(opBroadcast, "sendbuf", send, count, dt); err != nil {
			return err
		}
	}
	if err := c.checkLen(opBroadcast, "recvbuf", recv, count, dt); err != nil {
		return err
	}
	ctx, err := c.begin(ctx, opBroadcast, dt, 0, root, count)
	if err != nil {
		return err
	}
	n := count * dt.Size()
	if c.group == nil {
		if !sameStart(send, recv) {
			copy(recv[:n], send[:n])
		}
	} else {
		var s []byte
		if c.rank == root {
			s = send[:n]
		}
		if c.useDirect(n) {
			c.logAlgo(opBroadcast, algo.Direct, "direct", n)
			err = c.group.BroadcastDirect(ctx, &c.op, s, recv[:n], count, root)
		} else {
			c.logAlgo(opBroadcast, 0, "tree", n)
			err = c.group.Broadcast(ctx, &c.op, s, recv[:n], count, root)
		}
	}
	return c.end(opBroadcast, err)
}

// ReduceBytes is Reduce on raw bytes.
func (c *Comm) ReduceBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp, root int) error {
	if err := c.checkTypes(opReduce, dt, op, true); err != nil {
		return err
	}
	if err := c.checkRoot(opReduce, root); err != nil {
		return err
	}
	if err := c.checkLen(opReduce, "sendbuf", send, count, dt); err != nil {
		return err
	}
	if c.rank == root {
		if err := c.checkLen(opReduce, "recvbuf", recv, count, dt); err != nil {
			return err
		}
	}
	ctx, err := c.begin(ctx, opReduce, dt, op, root, count)
	if err != nil {
		return err
	}
	if err := c.setReduce(opReduce, dt, op); err != nil {
		return c.end(opReduce, err)
	}
	n := count * dt.Size()
	if c.group == nil {
		copy(recv[:n], send[:n])
	} else {
		c.logAlgo(opReduce, 0, "tree", n)
		var r []byte
		if c.rank == root {
			r = recv[:n]
		}
		err = c.group.Reduce(ctx, &c.op, send[:n], r, count, root)
	}
	if err == nil && op == Avg && c.rank == root {
		err = reduce.DivideBy(reduce.DType(dt), recv[:n], c.size)
	}
	return c.end(opReduce, err)
}

// AllGatherBytes is AllGather on raw bytes; count is per rank.
func (c *Comm) AllGatherBytes(ctx context.Context, send, recv []byte, count int, dt DataType) error {
	if err := c.checkTypes(opAllGather, dt, 0, false); err != nil {
		return err
	}
	if err := c.checkLen(opAllGather, "sendbuf", send, count, dt); err != nil {
		return err
	}
	if err := c.checkLen(opAllGather, "recvbuf", recv, count*c.size, dt); err != nil {
		return err
	}
	ctx, err := c.begin(ctx, opAllGather, dt, 0, -1, count)
	if err != nil {
		return err
	}
	n := count * dt.Size()
	if c.group == nil {
		if mine := recv[:n]; !sameStart(send, mine) {
			copy(mine, send[:n])
		}
	} else {
		if c.useDirect(n * c.size) {
			c.logAlgo(opAllGather, algo.Direct, "direct", n)
			err = c.group.AllGatherDirect(ctx, &c.op, send[:n], recv[:n*c.size], count)
		} else {
			c.logAlgo(opAllGather, 0, "ring", n)
			err = c.group.AllGather(ctx, &c.op, send[:n], recv[:n*c.size], count)
		}
	}
	return c.end(opAllGather, err)
}

// ReduceScatterBytes is ReduceScatter on raw bytes; count is per rank (the
// size of recv).
func (c *Comm) ReduceScatterBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp) error {
	if err := c.checkTypes(opReduceScatter, dt, op, true); err != nil {
		return err
	}
	if err := c.checkLen(opReduceScatter, "sendbuf", send, count*c.size, dt); err != nil {
		return err
	}
	if err := c.checkLen(opReduceScatter, "recvbuf", recv, count, dt); err != nil {
		return err
	}
	ctx, err := c.begin(ctx, opReduceScatter, dt, op, -1, count)
	if err != nil {
		return err
	}
	if err := c.setReduce(opReduceScatter, dt, op); err != nil {
		return c.end(opReduceScatter, err)
	}
	n := count * dt.Size()
	if c.group == nil {
		copy(recv[:n], send[:n])
	} else {
		if c.useDirect(n * c.size) {
			c.logAlgo(opReduceScatter, algo.Direct, "direct", n)
			err = c.group.ReduceScatterDirect(ctx, &c.op, send[:n*c.size], recv[:n], count)
		} else {
			c.logAlgo(opReduceScatter, 0, "ring", n)
			err = c.group.ReduceScatter(ctx, &c.op, send[:n*c.size], recv[:n], count)
		}
	}
	if err == nil && op == Avg {
		err = reduce.DivideBy(reduce.DType(dt), recv[:n], c.size)
	}
	return c.end(opReduceScatter, err)
}

// AllToAllBytes is AllToAll on raw bytes; count is the elements per block.
func (c *Comm) AllToAllBytes(ctx context.Context, send, recv []byte, count int, dt DataType) error {
	if err := c.checkTypes(opAllToAll, dt, 0, false); err != nil {
		return err
	}
	if err := c.checkLen(opAllToAll, "sendbuf", send, count*c.size, dt); err != nil {
		return err
	}
	if err := c.checkLen(opAllToAll, "recvbuf", recv, count*c.size, dt); err != nil {
		return err
	}
	ctx, err := c.begin(ctx, opAllToAll, dt, 0, -1, count)
	if err != nil {
		return err
	}
	n := count * dt.Size() * c.size
	src := send[:n]
	if sameStart(send, recv) && n > 0 {
		if cap(c.scratch) < n {
			c.scratch = make([]byte, n)
		}
		src = c.scratch[:n]
		copy(src, send[:n])
	}
	if c.group == nil {
		copy(recv[:n], src)
	} else {
		// In place, the pairwise exchange from the copy was faster than
		// writing into peers that have just read their own buffers (2
		// ranks, 128 KiB: 11.8 against 16.5 µs).
		if c.useDirect(n) && !sameStart(send, recv) {
			c.logAlgo(opAllToAll, algo.Direct, "direct", n)
			err = c.group.AllToAllDirect(ctx, &c.op, src, recv[:n], count)
		} else {
			c.logAlgo(opAllToAll, 0, "pairwise", n)
			err = c.group.AllToAll(ctx, &c.op, src, recv[:n], count)
		}
	}
	return c.end(opAllToAll, err)
}

// SendRecvBytes is SendRecv on raw bytes. A peer of -1 skips that half.
func (c *Comm) SendRecvBytes(ctx context.Context, send []byte, sendPeer int, recv []byte, recvPeer int, count int, dt DataType) error {
	if err := c.checkTypes(opSendRecv, dt, 0, false); err != nil {
		return err
	}
	for _, p := range [2]int{sendPeer, recvPeer} {
		if p < -1 || p >= c.size {
			return c.errorf(opSendRecv, 0, "%w: peer %d is outside [0, %d)", ErrInvalidArgument, p, c.size)
		}
	}
	if sendPeer >= 0 {
		if err := c.checkLen(opSendRecv, "sendbuf", send, count, dt); err != nil {
			return err
		}
	}
	if recvPeer >= 0 {
		if err := c.checkLen(opSendRecv, "recvbuf", recv, count, dt); err != nil {
			return err
		}
	}
	if (sendPeer == c.rank) != (recvPeer == c.rank) {
		return c.errorf(opSendRecv, 0, "%w: a send to self needs a receive from self (send peer %d, recv peer %d)", ErrInvalidArgument, sendPeer, recvPeer)
	}
	ctx, err := c.begin(ctx, opSendRecv, dt, 0, -1, count)
	if err != nil {
		return err
	}
	n := count * dt.Size()
	if sendPeer == c.rank {
		copy(recv[:n], send[:n])
		return c.end(opSendRecv, nil)
	}
	var s, r []byte
	if sendPeer >= 0 {
		s = send[:n]
	}
	if recvPeer >= 0 {
		r = recv[:n]
	}
	err = c.group.SendRecvP2P(ctx, &c.op, c.nextSend(sendPeer), sendPeer, s, c.nextRecv(recvPeer), recvPeer, r)
	return c.end(opSendRecv, err)
}

func (c *Comm) nextSend(p int) uint64 {
	if p < 0 {
		return 0
	}
	c.sendSeq[p]++
	return c.sendSeq[p]
}

func (c *Comm) nextRecv(p int) uint64 {
	if p < 0 {
		return 0
	}
	c.recvSeq[p]++
	return c.recvSeq[p]
}

// SendBytes sends count elements of buf to peer.
func (c *Comm) SendBytes(ctx context.Context, buf []byte, count int, dt DataType, peer int) error {
	if peer == c.rank {
		return c.errorf(opSendRecv, 0, "%w: Send to self (peer %d) would never complete; use SendRecv", ErrInvalidArgument, peer)
	}
	if peer < 0 {
		return c.errorf(opSendRecv, 0, "%w: peer %d is outside [0, %d)", ErrInvalidArgument, peer, c.size)
	}
	return c.SendRecvBytes(ctx, buf, peer, nil, -1, count, dt)
}

// RecvBytes receives count elements from peer into buf.
func (c *Comm) RecvBytes(ctx context.Context, buf []byte, count int, dt DataType, peer int) error {
	if peer == c.rank {
		return c.errorf(opSendRecv, 0, "%w: Recv from self (peer %d) would never complete; use SendRecv", ErrInvalidArgument, peer)
	}
	if peer < 0 {
		return c.errorf(opSendRecv, 0, "%w: peer %d is outside [0, %d)", ErrInvalidArgument, peer, c.size)
	}
	return c.SendRecvBytes(ctx, nil, -1, buf, peer, count, dt)
}

// sameStart reports whether a and b start at the same element (true when
// either is empty, so no copy is attempted).
func sameStart(a, b []byte) bool {
	return len(a) == 0 || len(b) == 0 || &a[0] == &b[0]
}
