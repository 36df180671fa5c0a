package goccl

import (
	"context"

	"github.com/goccl/goccl/internal/algo"
)

// Group collects operations that run together, the Go form of NCCL's
// ncclGroupStart/ncclGroupEnd. Comm.Group and Comm.IGroup hand one to a
// function that posts operations on it; they run once the function has
// returned. Within a group:
//
//   - the point-to-point operations (Send, Recv) all progress at once: the
//     sends to each peer in the order posted, the receives from each peer
//     in the order posted, every peer concurrently. A ring shift or an
//     all-pairs exchange in which every rank posts all its sends before its
//     receives therefore completes at any world size and message size,
//     where the same calls made one by one would deadlock once a message no
//     longer fits in the link's buffer. A Send to this rank itself is
//     allowed and is matched, in order, with a Recv from itself of the same
//     size. A grouped message matches an ungrouped one on the peer: only
//     the order of messages between each pair of ranks matters.
//   - the collectives run after the point-to-point operations, in the order
//     posted. Every rank must post the same collectives in the same order
//     (their point-to-point operations may be posted in any order).
//
// The post methods check their arguments as the blocking forms do and
// return the error at once; the group then fails with the first such error
// and runs nothing. Buffers belong to the group until it is done (Group
// returns, or IGroup's Request is done). A Group is for the function it is
// given to only: it must not be kept, nor used from another goroutine.
type Group struct {
	c     *Comm
	p2p   []call // Send and Recv in posted order (one half each)
	colls []call
	err   error // the first error a post returned
	done  bool  // the function has returned: posting now is an error
}

// Group runs fn, which posts operations on g, then runs them together (see
// Group) and returns when all are done. An error fn returns is returned as
// it is and nothing runs. The group takes its place in the communicator's
// issue order as a whole, behind the non-blocking operations issued before.
func (c *Comm) Group(ctx context.Context, fn func(g *Group) error) error {
	if c == nil {
		return nilComm(opGroup.String())
	}
	a, err := c.collect(fn)
	if err != nil {
		return err
	}
	return c.do(ctx, &a)
}

// IGroup is the non-blocking Group: fn runs at once, on the caller's
// goroutine, and the group's operations are issued as one non-blocking
// operation, whose Request is done when all of them are.
func (c *Comm) IGroup(ctx context.Context, fn func(g *Group) error) (Request, error) {
	if c == nil {
		return Request{}, nilComm(opGroup.String())
	}
	a, err := c.collect(fn)
	if err != nil {
		return Request{}, err
	}
	return c.issue(ctx, &a)
}

// collect runs fn on a new Group and returns the call that runs it.
func (c *Comm) collect(fn func(g *Group) error) (call, error) {
	g := &Group{c: c}
	err := fn(g)
	g.done = true
	if err == nil {
		err = g.err
	}
	if err == nil {
		err = g.checkSelf()
	}
	return call{kind: opGroup, root: -1, grp: g}, err
}

// checkSelf checks that the sends to this rank and the receives from it
// pair up, in order, with the same sizes.
func (g *Group) checkSelf() error {
	c := g.c
	var sends, recvs []int // byte lengths, in order
	for i := range g.p2p {
		a := &g.p2p[i]
		if a.sendPeer == c.rank {
			sends = append(sends, len(a.send))
		}
		if a.recvPeer == c.rank {
			recvs = append(recvs, len(a.recv))
		}
	}
	if len(sends) != len(recvs) {
		return c.errorf(opGroup, 0, "%w: %d Send(s) to self (rank %d) and %d Recv(s) from self: each needs its match", ErrInvalidArgument, len(sends), c.rank, len(recvs))
	}
	for i := range sends {
		if sends[i] != recvs[i] {
			return c.errorf(opGroup, 0, "%w: Send %d to self (rank %d) has %d bytes, its Recv %d", ErrInvalidArgument, i, c.rank, sends[i], recvs[i])
		}
	}
	return nil
}

// post checks a call and adds it to the group.
func (g *Group) post(a call) error {
	c := g.c
	var err error
	switch {
	case g.done:
		err = c.errorf(a.errKind(), 0, "%w: posted on a Group whose function has returned", ErrInvalidArgument)
	case a.kind == opSendRecv:
		err = c.prepare(&a) // peers checked by postP2P; a send to self is matched in the group
	default:
		err = c.check(&a)
	}
	if err != nil {
		return g.fail(err)
	}
	if a.kind == opSendRecv {
		g.p2p = append(g.p2p, a)
	} else {
		g.colls = append(g.colls, a)
	}
	return nil
}

// fail records a post's error (the group's result if it is the first) and
// returns it.
func (g *Group) fail(err error) error {
	if g.err == nil {
		g.err = err
	}
	return err
}

// postP2P posts one half of a SendRecv (send: a Send to peer, else a Recv
// from peer).
func (g *Group) postP2P(send bool, buf []byte, count int, dt DataType, peer int) error {
	kind, a := opRecv, sendRecvCall(nil, -1, buf, peer, count, dt)
	if send {
		kind, a = opSend, sendRecvCall(buf, peer, nil, -1, count, dt)
	}
	if peer < 0 || peer >= g.c.size {
		return g.fail(g.c.errorf(kind, 0, "%w: peer %d is outside [0, %d)", ErrInvalidArgument, peer, g.c.size))
	}
	a.name = kind
	return g.post(a)
}

// SendBytes posts a Send of count elements of buf to peer (which may be
// this rank; see Group).
func (g *Group) SendBytes(buf []byte, count int, dt DataType, peer int) error {
	return g.postP2P(true, buf, count, dt, peer)
}

// RecvBytes posts a Recv of count elements from peer into buf.
func (g *Group) RecvBytes(buf []byte, count int, dt DataType, peer int) error {
	return g.postP2P(false, buf, count, dt, peer)
}

// AllReduceBytes posts an AllReduce (see Comm.AllReduceBytes).
func (g *Group) AllReduceBytes(send, recv []byte, count int, dt DataType, op RedOp) error {
	return g.post(allReduceCall(send, recv, count, dt, op))
}

// BroadcastBytes posts a Broadcast (see Comm.BroadcastBytes).
func (g *Group) BroadcastBytes(send, recv []byte, count int, dt DataType, root int) error {
	return g.post(broadcastCall(send, recv, count, dt, root))
}

// AllGatherBytes posts an AllGather (see Comm.AllGatherBytes).
func (g *Group) AllGatherBytes(send, recv []byte, count int, dt DataType) error {
	return g.post(g.c.allGatherCall(send, recv, count, dt))
}

// ReduceScatterBytes posts a ReduceScatter (see Comm.ReduceScatterBytes).
func (g *Group) ReduceScatterBytes(send, recv []byte, count int, dt DataType, op RedOp) error {
	return g.post(g.c.reduceScatterCall(send, recv, count, dt, op))
}

// GroupSend posts a Send of count elements of buf to peer on g.
func GroupSend[T Element](g *Group, buf []T, count int, peer int) error {
	return g.SendBytes(asBytes(buf), count, TypeOf[T](), peer)
}

// GroupRecv posts a Recv of count elements from peer into buf on g.
func GroupRecv[T Element](g *Group, buf []T, count int, peer int) error {
	return g.RecvBytes(asBytes(buf), count, TypeOf[T](), peer)
}

// GroupAllReduce posts an AllReduce on g.
func GroupAllReduce[T Element](g *Group, sendbuf, recvbuf []T, count int, op RedOp) error {
	return g.AllReduceBytes(asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T](), op)
}

// runGroup runs a group's operations (see Group): the point-to-point ones
// together, then the collectives in order.
func (c *Comm) runGroup(ctx context.Context, g *Group) error {
	if len(g.p2p) > 0 {
		if err := c.runP2P(ctx, g.p2p); err != nil {
			return err
		}
	}
	for i := range g.colls {
		if err := c.run(ctx, &g.colls[i]); err != nil {
			return err
		}
	}
	return nil
}

// runP2P runs a group's point-to-point operations as one operation, each
// message numbered in its pair's sequence as a lone Send or Recv would be.
func (c *Comm) runP2P(ctx context.Context, calls []call) error {
	ctx, err := c.begin(ctx, opSendRecv, Uint8, 0, -1, 0)
	if err != nil {
		return err
	}
	if c.fr != nil {
		c.flightAmend(&call{kind: opGroup})
	}
	sends := make([]algo.Msg, 0, len(calls))
	recvs := make([]algo.Msg, 0, len(calls))
	for i := range calls {
		a := &calls[i]
		m := algo.Msg{DType: uint8(a.dt), Count: uint64(a.count)}
		if p := a.sendPeer; p >= 0 {
			m.Peer, m.Buf = p, a.send
			if p != c.rank {
				m.Seq = c.nextSend(p)
			}
			sends = append(sends, m)
		}
		if p := a.recvPeer; p >= 0 {
			m.Peer, m.Buf = p, a.recv
			if p != c.rank {
				m.Seq = c.nextRecv(p)
			}
			recvs = append(recvs, m)
		}
	}
	if c.rec != nil || c.met != nil {
		var n int64
		for i := range calls {
			n += int64(len(calls[i].send) + len(calls[i].recv))
		}
		c.recBytes, c.recName = n, "Group"
	}
	if c.group == nil {
		for i := range recvs { // world size 1: every message is to self
			copy(recvs[i].Buf, sends[i].Buf)
		}
		return c.end(opSendRecv, nil)
	}
	return c.end(opSendRecv, c.group.P2P(ctx, &c.op, sends, recvs))
}
