package goccl

import "context"

// The I forms below issue an operation and return at once with a Request
// (see Request for when its buffers may be touched again). Their arguments
// are checked as the blocking forms check them, and an error there is
// returned at once, with nothing issued. Operations run in the background,
// one at a time, in the order they were issued on the communicator, blocking
// calls included (a blocking call waits for the non-blocking ones issued
// before it); every rank must issue the same sequence, as for blocking
// calls. ctx is the operation's context: its cancellation and deadline bound
// the operation itself, and without a deadline the communicator's operation
// timeout applies, counted from when the operation starts to run. When
// QueueDepth operations are outstanding the I form waits for half of them to
// end, within ctx; if ctx ends first the operation is not issued and the
// error wraps ctx's (peers that issued it then fail it; Abort is the way out).
// A failed operation poisons the communicator as a blocking one does: it and
// every operation issued after it report an error wrapping the same cause.

// IAllReduceBytes is the non-blocking AllReduceBytes.
func (c *Comm) IAllReduceBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp) (Request, error) {
	a := allReduceCall(send, recv, count, dt, op)
	return c.issue(ctx, &a)
}

// IBroadcastBytes is the non-blocking BroadcastBytes.
func (c *Comm) IBroadcastBytes(ctx context.Context, send, recv []byte, count int, dt DataType, root int) (Request, error) {
	a := broadcastCall(send, recv, count, dt, root)
	return c.issue(ctx, &a)
}

// IReduceBytes is the non-blocking ReduceBytes.
func (c *Comm) IReduceBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp, root int) (Request, error) {
	a := reduceCall(send, recv, count, dt, op, root)
	return c.issue(ctx, &a)
}

// IAllGatherBytes is the non-blocking AllGatherBytes.
func (c *Comm) IAllGatherBytes(ctx context.Context, send, recv []byte, count int, dt DataType) (Request, error) {
	if c == nil {
		return Request{}, nilComm(opAllGather.String())
	}
	a := c.allGatherCall(send, recv, count, dt)
	return c.issue(ctx, &a)
}

// IReduceScatterBytes is the non-blocking ReduceScatterBytes.
func (c *Comm) IReduceScatterBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp) (Request, error) {
	if c == nil {
		return Request{}, nilComm(opReduceScatter.String())
	}
	a := c.reduceScatterCall(send, recv, count, dt, op)
	return c.issue(ctx, &a)
}

// IAllToAllBytes is the non-blocking AllToAllBytes.
func (c *Comm) IAllToAllBytes(ctx context.Context, send, recv []byte, count int, dt DataType) (Request, error) {
	if c == nil {
		return Request{}, nilComm(opAllToAll.String())
	}
	a := c.allToAllCall(send, recv, count, dt)
	return c.issue(ctx, &a)
}

// ISendRecvBytes is the non-blocking SendRecvBytes.
func (c *Comm) ISendRecvBytes(ctx context.Context, send []byte, sendPeer int, recv []byte, recvPeer int, count int, dt DataType) (Request, error) {
	a := sendRecvCall(send, sendPeer, recv, recvPeer, count, dt)
	return c.issue(ctx, &a)
}

// ISendBytes is the non-blocking SendBytes.
func (c *Comm) ISendBytes(ctx context.Context, buf []byte, count int, dt DataType, peer int) (Request, error) {
	a, err := c.p2pCall(opSend, buf, count, dt, peer)
	if err != nil {
		return Request{}, err
	}
	return c.issue(ctx, &a)
}

// IRecvBytes is the non-blocking RecvBytes.
func (c *Comm) IRecvBytes(ctx context.Context, buf []byte, count int, dt DataType, peer int) (Request, error) {
	a, err := c.p2pCall(opRecv, buf, count, dt, peer)
	if err != nil {
		return Request{}, err
	}
	return c.issue(ctx, &a)
}

// IBarrier is the non-blocking Barrier: its Request is done once every rank
// has entered it.
func (c *Comm) IBarrier(ctx context.Context) (Request, error) {
	a := barrierCall()
	return c.issue(ctx, &a)
}

// IAllReduce is the non-blocking AllReduce.
func IAllReduce[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int, op RedOp) (Request, error) {
	return c.IAllReduceBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T](), op)
}

// IBroadcast is the non-blocking Broadcast.
func IBroadcast[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int, root int) (Request, error) {
	return c.IBroadcastBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T](), root)
}

// IReduce is the non-blocking Reduce.
func IReduce[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int, op RedOp, root int) (Request, error) {
	return c.IReduceBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T](), op, root)
}

// IAllGather is the non-blocking AllGather.
func IAllGather[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int) (Request, error) {
	return c.IAllGatherBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T]())
}

// IReduceScatter is the non-blocking ReduceScatter.
func IReduceScatter[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int, op RedOp) (Request, error) {
	return c.IReduceScatterBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T](), op)
}

// IAllToAll is the non-blocking AllToAll.
func IAllToAll[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int) (Request, error) {
	return c.IAllToAllBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T]())
}

// ISend is the non-blocking Send.
func ISend[T Element](ctx context.Context, c *Comm, buf []T, count int, peer int) (Request, error) {
	return c.ISendBytes(ctx, asBytes(buf), count, TypeOf[T](), peer)
}

// IRecv is the non-blocking Recv.
func IRecv[T Element](ctx context.Context, c *Comm, buf []T, count int, peer int) (Request, error) {
	return c.IRecvBytes(ctx, asBytes(buf), count, TypeOf[T](), peer)
}

// ISendRecv is the non-blocking SendRecv.
func ISendRecv[T Element](ctx context.Context, c *Comm, sendbuf []T, sendPeer int, recvbuf []T, recvPeer int, count int) (Request, error) {
	return c.ISendRecvBytes(ctx, asBytes(sendbuf), sendPeer, asBytes(recvbuf), recvPeer, count, TypeOf[T]())
}

// IAllToAllvBytes is the non-blocking AllToAllvBytes. The four count and
// displacement slices, like the buffers, belong to the operation until it
// is done: do not modify them before.
func (c *Comm) IAllToAllvBytes(ctx context.Context, send []byte, sendCounts, sendDispls []int, recv []byte, recvCounts, recvDispls []int, dt DataType) (Request, error) {
	a := allToAllvCall(send, sendCounts, sendDispls, recv, recvCounts, recvDispls, dt)
	return c.issue(ctx, &a)
}

// IGatherBytes is the non-blocking GatherBytes.
func (c *Comm) IGatherBytes(ctx context.Context, send, recv []byte, count int, dt DataType, root int) (Request, error) {
	if c == nil {
		return Request{}, nilComm(opGather.String())
	}
	a := c.gatherCall(send, recv, count, dt, root)
	return c.issue(ctx, &a)
}

// IScatterBytes is the non-blocking ScatterBytes.
func (c *Comm) IScatterBytes(ctx context.Context, send, recv []byte, count int, dt DataType, root int) (Request, error) {
	if c == nil {
		return Request{}, nilComm(opScatter.String())
	}
	a := c.scatterCall(send, recv, count, dt, root)
	return c.issue(ctx, &a)
}

// IAllToAllv is the non-blocking AllToAllv (see IAllToAllvBytes for the
// counts and displacements).
func IAllToAllv[T Element](ctx context.Context, c *Comm, sendbuf []T, sendCounts, sendDispls []int, recvbuf []T, recvCounts, recvDispls []int) (Request, error) {
	return c.IAllToAllvBytes(ctx, asBytes(sendbuf), sendCounts, sendDispls, asBytes(recvbuf), recvCounts, recvDispls, TypeOf[T]())
}

// IGather is the non-blocking Gather.
func IGather[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int, root int) (Request, error) {
	return c.IGatherBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T](), root)
}

// IScatter is the non-blocking Scatter.
func IScatter[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int, root int) (Request, error) {
	return c.IScatterBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T](), root)
}
