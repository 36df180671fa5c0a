package algo

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/goccl/goccl/transport"
)

// Direct schedules: for a group whose every link can read and write the
// peer's memory (transport.PeerMemory: shared memory with Cross Memory
// Attach), the data of a collective moves with one copy, each rank reading
// what it needs straight out of its peers' buffers or writing what they need
// straight into theirs, and only small control messages go through the
// links. This is how MPI libraries use single-copy mechanisms on one node
// (OpenMPI's vader BTL with CMA or XPMEM, MPICH's Nemesis LMT) and what NCCL
// does with P2P reads and writes between GPUs; the schedules here are
// goccl's own:
//
//  1. every rank sends each peer the Regions of its buffers (16-32 bytes);
//  2. every rank reads what it needs or writes what its peers need (for
//     reductions, a peer's piece is read into a cache-resident staging
//     buffer of directStage bytes and folded in);
//  3. every rank tells each peer it has finished with its buffers and waits
//     for the same word from each peer before it returns, so that no buffer
//     is reused while a peer may still read or write it.
//
// A rank that fails in the middle aborts its links; a shared-memory link's
// Abort waits until a peer's access in progress has ended, so an exposed
// buffer is never handed back to the caller while a peer uses it.

// directStage is the staging buffer of the reducing direct schedules: a piece
// of a peer's buffer is read into it and folded into the result while it is
// still in cache.
const directStage = 256 << 10

// ctlBytes is the capacity of the per-peer control messages (two Regions).
const ctlBytes = 2 * transport.RegionSize

// Direct reports whether the direct schedules may run on this group (set by
// AgreeDirect).
func (g *Group) Direct() bool { return g.direct }

// AgreeDirect finds out, with every rank of the group, whether every rank
// can read every peer's memory, and enables the direct schedules if so. Every
// rank must call it at the same point (it exchanges messages, like a
// barrier: a dissemination AND over ceil(log2 P) rounds). op's header names
// the operation in the messages; op.Header.Count must be 1.
func (g *Group) AgreeDirect(ctx context.Context, op *Op) (bool, error) {
	ok := byte(1)
	for p, l := range g.links {
		if p == g.Rank {
			continue
		}
		pm, isPM := l.(transport.PeerMemory)
		if !isPM || !pm.PeerReadable() {
			ok = 0
		}
	}
	var in [1]byte
	P, r := g.Size, g.Rank
	for k := 1; k < P; k <<= 1 {
		out := [1]byte{ok}
		if err := g.sendRecv(ctx, op, mod(r+k, P), out[:], mod(r-k, P), in[:], false); err != nil {
			return false, err
		}
		ok &= in[0]
	}
	g.direct = ok == 1 && P > 1
	if g.direct {
		g.pm = make([]transport.PeerMemory, P)
		for p, l := range g.links {
			if p != r {
				g.pm[p] = l.(transport.PeerMemory)
			}
		}
		g.ctlOut = make([][ctlBytes]byte, P)
		g.ctlIn = make([][ctlBytes]byte, P)
	}
	return g.direct, nil
}

func (g *Group) checkDirect(op *Op) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	if !g.direct {
		return fmt.Errorf("algo: direct schedule on a group without peer memory access")
	}
	return nil
}

// expose writes the Regions of bufs (at most two) into every peer's control
// message.
func (g *Group) expose(bufs ...[]byte) {
	for p, pm := range g.pm {
		if pm == nil {
			continue
		}
		for i, b := range bufs {
			pm.Expose(b).Encode(g.ctlOut[p][i*transport.RegionSize:])
		}
	}
}

// region is the i-th Region peer p sent in its last control message.
func (g *Group) region(p, i int) transport.Region {
	return transport.DecodeRegion(g.ctlIn[p][i*transport.RegionSize:])
}

// exchange sends the first n bytes of ctlOut[p] to every peer p and receives
// ctlIn[p] from each. On failure it aborts the group.
func (g *Group) exchange(ctx context.Context, op *Op, n int) error {
	return g.exchangeWith(ctx, op, n, -1)
}

// exchangeWith is exchange with every peer when root is -1, else a star: the
// root exchanges with every peer, every other rank with the root only.
func (g *Group) exchangeWith(ctx context.Context, op *Op, n, root int) error {
	g.postCtl(ctx, op, n, root)
	return g.finishCtl(ctx, op, n, root)
}

// talks reports whether this rank exchanges control messages with p in an
// exchange rooted at root (-1: everyone).
func (g *Group) talks(p, root int) bool { return root < 0 || g.Rank == root || p == root }

// postCtl starts sending the first n bytes of ctlOut[p] to the peers of an
// exchange (see exchangeWith); finishCtl completes it. Work done in between
// overlaps the peers' messages in flight.
func (g *Group) postCtl(ctx context.Context, op *Op, n, root int) {
	P, r := g.Size, g.Rank
	for k := 1; k < P; k++ {
		if p := mod(r+k, P); g.talks(p, root) {
			g.post(ctx, op, p, g.ctlOut[p][:n])
		}
	}
}

// finishCtl receives ctlIn[p] from the peers of the exchange and waits for
// the sends postCtl started. On failure it aborts the group.
func (g *Group) finishCtl(ctx context.Context, op *Op, n, root int) error {
	P, r := g.Size, g.Rank
	var err error
	for k := 1; k < P && err == nil; k++ {
		if p := mod(r-k, P); g.talks(p, root) {
			err = g.recv(ctx, op, p, g.ctlIn[p][:n], false)
		}
	}
	if err != nil {
		g.abortFor(err)
	}
	for k := 1; k < P; k++ {
		if p := mod(r+k, P); g.talks(p, root) {
			if werr := g.wait(p); err == nil && werr != nil {
				err = werr
				g.abortFor(err)
			}
		}
	}
	return err
}

// read copies len(dst) bytes at off of peer p's i-th region into dst,
// aborting the group on failure.
func (g *Group) read(ctx context.Context, p, i, off int, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	if err := g.pm[p].ReadPeer(ctx, g.region(p, i), off, dst); err != nil {
		g.abortFor(err)
		return err
	}
	return nil
}

// write copies src into peer p's i-th region at off, aborting the group on
// failure.
func (g *Group) write(ctx context.Context, p, i, off int, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if err := g.pm[p].WritePeer(ctx, g.region(p, i), off, src); err != nil {
		g.abortFor(err)
		return err
	}
	return nil
}

// stageBuf returns the staging buffer, allocated on first use.
func (g *Group) stageBuf() []byte {
	if g.stage == nil {
		g.stage = make([]byte, directStage)
	}
	return g.stage
}

// foldFrom computes dst = a op (peer p's i-th region at off), reading the
// peer's bytes through the staging buffer, piece by piece; a may be dst.
func (g *Group) foldFrom(ctx context.Context, op *Op, p, i, off int, dst, a []byte) error {
	stage := g.stageBuf()
	piece := len(stage) - len(stage)%op.ElemSize
	for lo := 0; lo < len(dst); lo += piece {
		hi := min(len(dst), lo+piece)
		st := stage[:hi-lo]
		if err := g.read(ctx, p, i, off+lo, st); err != nil {
			return err
		}
		d, x := dst[lo:hi], a[lo:hi]
		switch {
		case sameStart(d, x):
			op.Reduce(d, st)
		case op.Reduce3 != nil:
			op.Reduce3(d, x, st)
		default:
			copy(d, x)
			op.Reduce(d, st)
		}
	}
	return nil
}

// AllReduceDirect reduces send (count elements) into recv: rank r reduces
// block r of P, reading that block of every peer's send, and writes the
// result into its own recv and every peer's recv, piece by piece as it is
// computed. Two rounds of control messages; each rank reads (P-1)/P and
// writes (P-1)/P of the vector to its peers, like the ring, with no
// intermediate copy. Every block is reduced by one rank, so all ranks end
// bit-identical. In place it needs no extra round: the only rank that reads
// or writes block r of any buffer is rank r, and it reads each piece before
// it overwrites it. send may be recv.
//
// Pushing the result beat the alternatives measured with 2 ranks (-n 300,
// 128 KiB-32 MiB): reading it back from the rank that reduced it (a third
// round, 1.2-2x slower) and every rank reading the whole of every peer's
// input (1.1-1.5x slower).
func (g *Group) AllReduceDirect(ctx context.Context, op *Op, send, recv []byte, count int) error {
	if err := g.checkDirect(op); err != nil {
		return err
	}
	P, r, es := g.Size, g.Rank, op.ElemSize
	n := count * es
	send, recv = send[:n], recv[:n]
	g.expose(send, recv)
	if err := g.exchange(ctx, op, 2*transport.RegionSize); err != nil {
		return err
	}
	off, cnt := block(count, P, r)
	lo, hi := off*es, (off+cnt)*es
	piece := directStage - directStage%es
	for c := lo; c < hi; c += piece {
		e := min(hi, c+piece)
		for k := 1; k < P; k++ {
			a := send[c:e]
			if k > 1 {
				a = recv[c:e]
			}
			if err := g.foldFrom(ctx, op, mod(r+k, P), 0, c, recv[c:e], a); err != nil {
				return err
			}
		}
		for k := 1; k < P; k++ {
			if err := g.write(ctx, mod(r+k, P), 1, c, recv[c:e]); err != nil {
				return err
			}
		}
	}
	return g.exchange(ctx, op, 0)
}

// AllGatherDirect gathers count elements of send from every rank into recv
// (block q from rank q): every rank writes its send into block Rank of every
// peer's recv, and copies it into its own while the Regions are in flight.
// Writing was faster than reading the peers' blocks (2 ranks, 512 KiB: 14-16
// against 20-23 µs; 2 MiB: 89 against 109-112 µs). send may be recv's block
// Rank.
func (g *Group) AllGatherDirect(ctx context.Context, op *Op, send, recv []byte, count int) error {
	if err := g.checkDirect(op); err != nil {
		return err
	}
	bb := count * op.ElemSize
	return g.pushBlocks(ctx, op, recv, bb, send[:bb], func(int) []byte { return send[:bb] })
}

// pushBlocks exposes recv (Size blocks of bb bytes), copies own into block
// Rank while the Regions are in flight, then writes out(p) into block Rank
// of every peer p's recv, and ends with the "done" round.
func (g *Group) pushBlocks(ctx context.Context, op *Op, recv []byte, bb int, own []byte, out func(p int) []byte) error {
	P, r := g.Size, g.Rank
	g.expose(recv[:P*bb])
	g.postCtl(ctx, op, transport.RegionSize, -1)
	copyIfDifferent(recv[r*bb:(r+1)*bb], own)
	if err := g.finishCtl(ctx, op, transport.RegionSize, -1); err != nil {
		return err
	}
	for k := 1; k < P; k++ {
		p := mod(r+k, P)
		if err := g.write(ctx, p, 0, r*bb, out(p)); err != nil {
			return err
		}
	}
	return g.exchange(ctx, op, 0)
}

// ReduceScatterDirect reduces send (Size*count elements) across the group
// and leaves block Rank in recv, folding in block Rank of every peer's send
// through the staging buffer. recv may alias send's block Rank.
func (g *Group) ReduceScatterDirect(ctx context.Context, op *Op, send, recv []byte, count int) error {
	if err := g.checkDirect(op); err != nil {
		return err
	}
	P, r, es := g.Size, g.Rank, op.ElemSize
	bb := count * es
	g.expose(send[:P*bb])
	if err := g.exchange(ctx, op, transport.RegionSize); err != nil {
		return err
	}
	mine, out := send[r*bb:(r+1)*bb], recv[:bb]
	piece := directStage - directStage%es
	for c := 0; c < bb; c += piece {
		e := min(bb, c+piece)
		for k := 1; k < P; k++ {
			a := mine[c:e]
			if k > 1 {
				a = out[c:e]
			}
			if err := g.foldFrom(ctx, op, mod(r+k, P), 0, r*bb+c, out[c:e], a); err != nil {
				return err
			}
		}
	}
	return g.exchange(ctx, op, 0)
}

// AllToAllDirect writes block p of send into block Rank of rank p's recv,
// for every peer p, and copies its own block locally while the Regions are
// in flight. send and recv must not overlap (the caller copies for in
// place: rank p reads its block Rank while this rank would write it).
func (g *Group) AllToAllDirect(ctx context.Context, op *Op, send, recv []byte, count int) error {
	if err := g.checkDirect(op); err != nil {
		return err
	}
	r, bb := g.Rank, count*op.ElemSize
	return g.pushBlocks(ctx, op, recv, bb, send[r*bb:(r+1)*bb], func(p int) []byte { return send[p*bb : (p+1)*bb] })
}

// BroadcastDirect copies count elements of root's send into every rank's
// recv. The root and each other rank swap the Regions of send and recv; the
// rank reads the first (P-1)/P of the message from the root's send while the
// root writes the last 1/P into the rank's recv, so that the root's core
// works too (with 2 ranks, each side copies half); then they swap "done".
// send is only read on root, where it may be recv.
func (g *Group) BroadcastDirect(ctx context.Context, op *Op, send, recv []byte, count, root int) error {
	if err := g.checkDirect(op); err != nil {
		return err
	}
	P, r, es := g.Size, g.Rank, op.ElemSize
	n := count * es
	src := recv[:n]
	if r == root {
		src = send[:n]
	}
	// The root writes [split, n) of every other rank's recv: 1/P of the
	// message in place, which balances the root's writes to P-1 ranks
	// against each rank's reads; 1/(2P) out of place, where the root also
	// copies send to its own recv (a local copy runs about twice as fast as
	// a cross-process one: 1 MiB with 2 ranks took 40 µs with 1/P, 29 µs
	// with 1/(2P)). The root sends split with its Region.
	share := P
	if !sameStart(send, recv) {
		share = 2 * P
	}
	split := n - n/share
	split -= split % max(es, 64) // whole elements, cache-line aligned
	g.expose(src)
	const msg = transport.RegionSize + 8
	for p := range g.ctlOut {
		binary.LittleEndian.PutUint64(g.ctlOut[p][transport.RegionSize:], uint64(split))
	}
	if err := g.exchangeWith(ctx, op, msg, root); err != nil {
		return err
	}
	if r != root {
		if s := binary.LittleEndian.Uint64(g.ctlIn[root][transport.RegionSize:]); s <= uint64(n) {
			split = int(s)
		} else {
			err := fmt.Errorf("algo: broadcast root %d sent split %d for a %d-byte message", root, s, n)
			g.abortFor(err)
			return err
		}
	}
	if r == root {
		for k := 1; k < P; k++ {
			p := mod(r+k, P)
			if err := g.write(ctx, p, 0, split, src[split:]); err != nil {
				return err
			}
		}
		copyIfDifferent(recv[:n], src)
	} else if err := g.read(ctx, root, 0, 0, recv[:split]); err != nil {
		return err
	}
	return g.exchangeWith(ctx, op, 0, root)
}
