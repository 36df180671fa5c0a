package goccl

import "context"

// The typed collectives below follow NCCL's conventions:
//   - count is in elements, not bytes;
//   - an operation is in-place when sendbuf and recvbuf start at the same
//     element (for AllGather: sendbuf is recvbuf[rank*count:]; for
//     ReduceScatter: recvbuf is sendbuf[rank*count:]);
//   - every rank of the communicator must call the same collectives in the same
//     order with the same count, type, op and root; a disagreement is detected
//     and returned as an error on the ranks that see it;
//   - each call blocks until this rank's part is done or ctx ends; when ctx has
//     no deadline the communicator's operation timeout (GOCCL_TIMEOUT) applies.

// AllReduce reduces count elements of sendbuf across all ranks with op and
// leaves the result in recvbuf on every rank. len(sendbuf), len(recvbuf) >= count.
func AllReduce[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int, op RedOp) error {
	return c.AllReduceBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T](), op)
}

// Broadcast copies count elements of sendbuf on root into recvbuf on every rank.
// sendbuf is only read on root (it may be nil elsewhere); len(recvbuf) >= count.
func Broadcast[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int, root int) error {
	return c.BroadcastBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T](), root)
}

// Reduce reduces count elements of sendbuf across all ranks with op into
// recvbuf on root. recvbuf is only written on root (it may be nil elsewhere).
func Reduce[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int, op RedOp, root int) error {
	return c.ReduceBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T](), op, root)
}

// AllGather gathers count elements from every rank: recvbuf[r*count:(r+1)*count]
// receives rank r's sendbuf. len(recvbuf) >= Size()*count.
func AllGather[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int) error {
	return c.AllGatherBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T]())
}

// ReduceScatter reduces Size()*count elements of sendbuf across ranks with op;
// rank r receives block r (elements r*count to (r+1)*count) in recvbuf.
// len(sendbuf) >= Size()*count, len(recvbuf) >= count.
func ReduceScatter[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int, op RedOp) error {
	return c.ReduceScatterBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T](), op)
}

// AllToAll sends block p of sendbuf (elements p*count to (p+1)*count) to rank p,
// which stores it as block r (this rank) of its recvbuf. Both buffers hold
// Size()*count elements.
func AllToAll[T Element](ctx context.Context, c *Comm, sendbuf, recvbuf []T, count int) error {
	return c.AllToAllBytes(ctx, asBytes(sendbuf), asBytes(recvbuf), count, TypeOf[T]())
}

// Send sends count elements of buf to peer. Messages between one pair of ranks
// arrive in the order they were sent; the peer must post a matching Recv.
func Send[T Element](ctx context.Context, c *Comm, buf []T, count int, peer int) error {
	return c.SendBytes(ctx, asBytes(buf), count, TypeOf[T](), peer)
}

// Recv receives count elements from peer into buf.
func Recv[T Element](ctx context.Context, c *Comm, buf []T, count int, peer int) error {
	return c.RecvBytes(ctx, asBytes(buf), count, TypeOf[T](), peer)
}

// SendRecv sends count elements of sendbuf to sendPeer and receives count
// elements from recvPeer into recvbuf, concurrently, so that ranks exchanging
// in a ring or pairwise cannot deadlock (the ncclGroupStart/Send/Recv/
// ncclGroupEnd idea). A peer of -1 skips that half. sendbuf and recvbuf
// may overlap (in place): what is sent is sendbuf as it was at the call
// (MPI_Sendrecv_replace's meaning), at the cost of one copy of it.
func SendRecv[T Element](ctx context.Context, c *Comm, sendbuf []T, sendPeer int, recvbuf []T, recvPeer int, count int) error {
	return c.SendRecvBytes(ctx, asBytes(sendbuf), sendPeer, asBytes(recvbuf), recvPeer, count, TypeOf[T]())
}
