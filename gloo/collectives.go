package gloo

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/reduce"
)

// asBytes views a slice of elements as its bytes.
func asBytes[T goccl.Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// collective runs one collective: it takes the next tag (torch's
// ProcessGroupGloo numbers every collective it is called for, empty ones
// included), runs body, and, on failure, ends the group: a collective cut
// short leaves messages in flight that no later one could match.
func (g *Group) collective(ctx context.Context, name string, body func(tag uint32) error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	tag := g.tag
	g.tag++
	if g.failed != nil {
		return &OpError{Rank: g.rank, Op: name, Tag: tag, Peer: -1, Err: fmt.Errorf("%w by an earlier failure: %v", ErrClosed, g.failed)}
	}
	if err := body(tag); err != nil {
		return g.failOp(name, tag, err)
	}
	return nil
}

// failOp ends the group after err and returns err as an *OpError.
func (g *Group) failOp(name string, tag uint32, err error) error {
	var oe *OpError
	if errors.As(err, &oe) {
		return err
	}
	if g.failed == nil {
		g.failed = err
	}
	g.abort(err)
	peer := -1
	var pl *PeerLostError
	var pe *ProtocolError
	var we *waitError
	switch {
	case errors.As(err, &pl):
		peer = pl.Peer
	case errors.As(err, &pe):
		peer = pe.Peer
	case errors.As(err, &we):
		peer = we.peer
	}
	return &OpError{Rank: g.rank, Op: name, Tag: tag, Peer: peer, Err: err}
}

// waitError: ctx ended while an operation waited for a peer.
type waitError struct {
	peer int
	what string
	err  error
}

func (e *waitError) Error() string {
	return fmt.Sprintf("waiting to %s peer rank %d: %v", e.what, e.peer, e.err)
}
func (e *waitError) Unwrap() error { return e.err }

// wait waits for o, posted on the pair with peer.
func (g *Group) wait(ctx context.Context, o *op, peer int) error {
	select {
	case <-o.done:
		return o.err
	default:
	}
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		what := "receive from"
		if o.send {
			what = "send to"
		}
		return &waitError{peer: peer, what: what, err: ctx.Err()}
	}
}

func (g *Group) pairOf(peer int) *pair { return g.pairs[peer] }

func checkOp[T goccl.Element](g *Group, name string, op goccl.RedOp) (func(dst, src []byte), error) {
	dt := goccl.TypeOf[T]()
	if op == goccl.Avg {
		return nil, fmt.Errorf("gloo: rank %d: %s: ReduceOp.AVG is not supported by the Gloo backend (torch refuses it too): %w", g.rank, name, ErrInvalidArgument)
	}
	fn, err := reduce.Func(reduce.DType(dt), reduce.Op(op))
	if err != nil {
		return nil, fmt.Errorf("gloo: rank %d: %s: %v: %w", g.rank, name, err, ErrInvalidArgument)
	}
	return fn, nil
}

// AllReduce reduces buf element-wise over all ranks with op (Sum, Prod,
// Min, Max; torch's ReduceOp.SUM, PRODUCT, MIN, MAX) and leaves the result
// in buf on every rank: torch.distributed.all_reduce of a CPU tensor of
// len(buf) elements of T's dtype. It runs Gloo's ring algorithm (gloo
// allreduce.cc, "ring": reduce-scatter then all-gather over segments of at
// most 1 MiB, two in flight), so every rank, Go or Python, adds in the same
// order and ends with the same bits.
func AllReduce[T goccl.Element](ctx context.Context, g *Group, buf []T, op goccl.RedOp) error {
	fn, err := checkOp[T](g, "all_reduce", op)
	if err != nil {
		return err
	}
	b := asBytes(buf)
	es := goccl.TypeOf[T]().Size()
	return g.collective(ctx, "all_reduce", func(tag uint32) error {
		if len(b) == 0 || g.size == 1 {
			return nil
		}
		return g.ringAllReduce(ctx, b, es, fn, slotOf(allreduceSlotPrefix, tag))
	})
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// ringAllReduce is Gloo's ring allreduce on out (elements of es bytes).
func (g *Group) ringAllReduce(ctx context.Context, out []byte, es int, fn func(dst, src []byte), slot uint64) error {
	size, rank, total := g.size, g.rank, len(out)
	recvPeer, sendPeer := (rank+1)%size, (rank+size-1)%size
	const maxSegmentSize = 1 << 20
	maxSeg := es * max(1, maxSegmentSize/es)
	numSeg := roundUp(max((total+maxSeg-1)/maxSeg, 2*size), size)
	perRank := numSeg / size
	segBytes := roundUp((total+numSeg-1)/numSeg, es)
	tmp := make([]byte, 2*segBytes)
	segOff := [2]int{0, segBytes}
	span := numSeg * segBytes
	// offsets of iteration i: send segment (sendBase*perRank+i), receive
	// segment (recvBase*perRank+i); lengths may be short or <= 0 at the end.
	offsets := func(i, sendBase, recvBase int) (so, ro, sl, rl int) {
		so = ((sendBase*perRank + i) * segBytes) % span
		ro = ((recvBase*perRank + i) * segBytes) % span
		sl = min(segBytes, total-so)
		rl = min(segBytes, total-ro)
		return
	}
	rp, sp := g.pairOf(recvPeer), g.pairOf(sendPeer)
	var recvs, sends [2]*op
	iters := numSeg - perRank + 2
	// Reduce-scatter.
	for i := 0; i < iters; i++ {
		if i >= 2 {
			_, ro, sl, rl := offsets(i-2, rank+1, rank+2)
			if rl > 0 {
				if err := g.wait(ctx, recvs[i&1], recvPeer); err != nil {
					return err
				}
				fn(out[ro:ro+rl], tmp[segOff[i&1]:segOff[i&1]+rl])
			}
			if sl > 0 {
				if err := g.wait(ctx, sends[i&1], sendPeer); err != nil {
					return err
				}
			}
		}
		if i < numSeg-perRank {
			so, _, sl, rl := offsets(i, rank+1, rank+2)
			if rl > 0 {
				recvs[i&1] = rp.postRecv(slot, tmp[segOff[i&1]:segOff[i&1]+rl])
			}
			if sl > 0 {
				sends[i&1] = sp.postSend(slot, out[so:so+sl])
			}
		}
	}
	// All-gather.
	for i := 0; i < iters; i++ {
		if i >= 2 {
			_, _, sl, rl := offsets(i-2, rank, rank+1)
			if rl > 0 {
				if err := g.wait(ctx, recvs[i&1], recvPeer); err != nil {
					return err
				}
			}
			if sl > 0 {
				if err := g.wait(ctx, sends[i&1], sendPeer); err != nil {
					return err
				}
			}
		}
		if i < numSeg-perRank {
			so, ro, sl, rl := offsets(i, rank, rank+1)
			if rl > 0 {
				recvs[i&1] = rp.postRecv(slot, out[ro:ro+rl])
			}
			if sl > 0 {
				sends[i&1] = sp.postSend(slot, out[so:so+sl])
			}
		}
	}
	return nil
}

func (g *Group) checkRank(name, what string, r int) error {
	if r < 0 || r >= g.size {
		return fmt.Errorf("gloo: rank %d: %s: %s %d is out of range [0, %d): %w", g.rank, name, what, r, g.size, ErrInvalidArgument)
	}
	return nil
}

// Broadcast copies root's buf into buf on every other rank:
// torch.distributed.broadcast(tensor, src=root). Gloo's binomial tree
// (broadcast.cc): in step i, ranks whose distance from the root (vrank) is
// below 2^i send the whole buffer to vrank + 2^i.
func Broadcast[T goccl.Element](ctx context.Context, g *Group, buf []T, root int) error {
	if err := g.checkRank("broadcast", "root", root); err != nil {
		return err
	}
	b := asBytes(buf)
	return g.collective(ctx, "broadcast", func(tag uint32) error {
		slot := slotOf(broadcastSlotPrefix, tag)
		size := g.size
		vrank := (g.rank + size - root) % size
		dim := 0
		if size > 1 {
			dim = bits.Len(uint(size - 1))
		}
		mask := (1 << dim) - 1
		var sends []*op
		var sendPeers []int
		for i := 0; i < dim; i++ {
			mask ^= 1 << i
			if vrank&mask != 0 {
				continue
			}
			vpeer := vrank ^ (1 << i)
			if vpeer >= size {
				continue
			}
			peer := (vpeer + root) % size
			if vrank&(1<<i) == 0 {
				sends = append(sends, g.pairOf(peer).postSend(slot, b))
				sendPeers = append(sendPeers, peer)
			} else if err := g.wait(ctx, g.pairOf(peer).postRecv(slot, b), peer); err != nil {
				return err
			}
		}
		for i, o := range sends {
			if err := g.wait(ctx, o, sendPeers[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// AllGather gathers every rank's send into recv, rank r's at
// recv[r*len(send):(r+1)*len(send)]: torch.distributed.all_gather(list,
// tensor), whose list torch fills from one flat buffer laid out as recv.
// len(recv) must be Size()*len(send); send may be recv's own block of this
// rank (in place). Gloo's ring (allgather.cc): each block travels in two
// halves, each rank forwarding to rank+1 what it got from rank-1.
func AllGather[T goccl.Element](ctx context.Context, g *Group, recv, send []T) error {
	if len(recv) != g.size*len(send) {
		return fmt.Errorf("gloo: rank %d: all_gather: receive buffer of %d elements, want %d (world size %d × %d): %w", g.rank, len(recv), g.size*len(send), g.size, len(send), ErrInvalidArgument)
	}
	out, in := asBytes(recv), asBytes(send)
	return g.collective(ctx, "all_gather", func(tag uint32) error {
		inBytes, outBytes := len(in), len(out)
		copy(out[g.rank*inBytes:], in)
		if g.size == 1 || inBytes == 0 {
			return nil
		}
		slot := slotOf(allgatherSlotPrefix, tag)
		size, rank := g.size, g.rank
		recvPeer, sendPeer := (rank+size-1)%size, (rank+1)%size
		rp, sp := g.pairOf(recvPeer), g.pairOf(sendPeer)
		chunk := [2]int{inBytes / 2, inBytes - inBytes/2}
		chunkOff := [2]int{0, inBytes / 2}
		var sends, recvs [2]*op
		for i := 0; i < (size-1)*2; i++ {
			sendSeg := size + rank - i/2
			recvSeg := sendSeg - 1
			so := (sendSeg*inBytes + chunkOff[i&1]) % outBytes
			ro := (recvSeg*inBytes + chunkOff[i&1]) % outBytes
			n := chunk[i&1]
			if i >= 2 {
				if err := g.wait(ctx, sends[i&1], sendPeer); err != nil {
					return err
				}
				if err := g.wait(ctx, recvs[i&1], recvPeer); err != nil {
					return err
				}
			}
			sends[i&1] = sp.postSend(slot, out[so:so+n])
			recvs[i&1] = rp.postRecv(slot, out[ro:ro+n])
		}
		for i := 0; i < 2; i++ {
			if err := g.wait(ctx, sends[i], sendPeer); err != nil {
				return err
			}
			if err := g.wait(ctx, recvs[i], recvPeer); err != nil {
				return err
			}
		}
		return nil
	})
}

// Barrier returns once every rank has called it: torch.distributed.barrier()
// (Gloo's dissemination barrier, barrier.cc: in round k each rank signals
// rank+2^k and waits for rank-2^k).
func Barrier(ctx context.Context, g *Group) error {
	return g.collective(ctx, "barrier", func(tag uint32) error {
		slot := slotOf(barrierSlotPrefix, tag)
		for d := 1; d < g.size; d <<= 1 {
			from, to := (g.rank+g.size-d)%g.size, (g.rank+d)%g.size
			r := g.pairOf(from).postRecv(slot, nil)
			s := g.pairOf(to).postSend(slot, nil)
			if err := g.wait(ctx, r, from); err != nil {
				return err
			}
			if err := g.wait(ctx, s, to); err != nil {
				return err
			}
		}
		return nil
	})
}

// maxTag: torch's send/recv tags are non-negative C ints.
const maxTag = 1<<31 - 1

// Send sends buf to rank peer: torch.distributed.send(tensor, dst, tag=tag),
// matched by the peer's recv(tensor, src=this rank, tag=tag) of the same
// byte size. It returns once buf has been handed to the connection (the
// peer has posted its receive). Point-to-point operations do not take a
// collective tag; they match by tag, in order, per peer.
func Send[T goccl.Element](ctx context.Context, g *Group, buf []T, peer, tag int) error {
	return g.p2p(ctx, "send", asBytes(buf), peer, tag, true)
}

// Recv receives exactly len(buf) elements from rank peer into buf:
// torch.distributed.recv(tensor, src=peer, tag=tag). A send of another size
// fails both with an error naming the sizes.
func Recv[T goccl.Element](ctx context.Context, g *Group, buf []T, peer, tag int) error {
	return g.p2p(ctx, "recv", asBytes(buf), peer, tag, false)
}

func (g *Group) p2p(ctx context.Context, name string, b []byte, peer, tag int, send bool) error {
	if err := g.checkRank(name, "peer", peer); err != nil {
		return err
	}
	if peer == g.rank {
		return fmt.Errorf("gloo: rank %d: %s: peer %d is this rank: %w", g.rank, name, peer, ErrInvalidArgument)
	}
	if tag < 0 || tag > maxTag {
		return fmt.Errorf("gloo: rank %d: %s: tag %d is out of range [0, %d]: %w", g.rank, name, tag, maxTag, ErrInvalidArgument)
	}
	g.mu.Lock()
	if g.failed != nil {
		err := g.failed
		g.mu.Unlock()
		return &OpError{Rank: g.rank, Op: name, Tag: uint32(tag), Peer: peer, Err: fmt.Errorf("%w by an earlier failure: %v", ErrClosed, err)}
	}
	var o *op
	if send {
		o = g.pairOf(peer).postSend(uint64(tag), b)
	} else {
		o = g.pairOf(peer).postRecv(uint64(tag), b)
	}
	g.mu.Unlock()
	if err := g.wait(ctx, o, peer); err != nil {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.failOp(name, uint32(tag), err)
	}
	return nil
}
