package algo

import (
	"context"
	"math/bits"
	"unsafe"
)

// pipelineBytes is the piece size in which tree broadcasts and reductions are
// pipelined, so a rank forwards piece k while it receives piece k+1.
const pipelineBytes = 512 << 10

// block returns the element offset and length of block i when count elements
// are split into n nearly equal blocks (the first count%n blocks get one more).
func block(count, n, i int) (off, length int) {
	base, rem := count/n, count%n
	off = i*base + min(i, rem)
	length = base
	if i < rem {
		length++
	}
	return off, length
}

// sameStart reports whether a and b start at the same address (true for two
// empty slices, so that no copy is attempted).
func sameStart(a, b []byte) bool {
	return len(a) == 0 || len(b) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b)
}

func mod(a, n int) int { return ((a % n) + n) % n }

// AllReduceRing reduces send (count elements) across the group into recv with
// the ring algorithm: P-1 reduce-scatter steps, then P-1 all-gather steps, each
// step sending one of P blocks to the next rank while receiving another from
// the previous one (Patarasuk and Yuan, "Bandwidth optimal all-reduce
// algorithms for clusters of workstations", 2009). Every block is reduced
// along one chain and then copied, so all ranks end with bit-identical
// results. send may be recv (in place); out of place, send is only read, and
// never copied first: the first step sends from it and each receive folds the
// incoming block with send's block straight into recv.
func (g *Group) AllReduceRing(ctx context.Context, op *Op, send, recv []byte, count int) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	if g.Size == 1 {
		copyIfDifferent(recv[:count*op.ElemSize], send[:count*op.ElemSize])
		return nil
	}
	if err := g.ringReduceScatter(ctx, op, send, recv, count); err != nil {
		return err
	}
	return g.ringAllGather(ctx, op, recv, count)
}

// ringOwned is the block (elements [off, off+n) of count) that rank r of P
// holds fully reduced after ringReduceScatter: block r+1.
func ringOwned(count, P, r int) (off, n int) { return block(count, P, mod(r+1, P)) }

// ringReduceScatter is the first half of AllReduceRing: P-1 steps after
// which block ringOwned of recv holds the reduction over the group (the
// other blocks of recv hold partial sums). Blocks are block(count, P, i),
// uneven when P does not divide count. Size must be at least 2.
func (g *Group) ringReduceScatter(ctx context.Context, op *Op, send, recv []byte, count int) error {
	P, r, es := g.Size, g.Rank, op.ElemSize
	next, prev := mod(r+1, P), mod(r-1, P)
	blk := func(b []byte, i int) []byte {
		off, n := block(count, P, mod(i, P))
		return b[off*es : (off+n)*es]
	}
	for s := 0; s < P-1; s++ {
		src := recv // blocks sent after the first step hold partial sums in recv
		if s == 0 {
			src = send
		}
		if err := g.sendRecvFold(ctx, op, next, blk(src, r-s), prev, blk(recv, r-s-1), blk(send, r-s-1)); err != nil {
			return err
		}
	}
	return nil
}

// ringAllGather is the second half of AllReduceRing: starting from each
// rank's ringOwned block of recv, P-1 steps leave every block everywhere.
func (g *Group) ringAllGather(ctx context.Context, op *Op, recv []byte, count int) error {
	P, r, es := g.Size, g.Rank, op.ElemSize
	next, prev := mod(r+1, P), mod(r-1, P)
	blk := func(b []byte, i int) []byte {
		off, n := block(count, P, mod(i, P))
		return b[off*es : (off+n)*es]
	}
	for s := 0; s < P-1; s++ {
		if err := g.sendRecv(ctx, op, next, blk(recv, r+1-s), prev, blk(recv, r-s), false); err != nil {
			return err
		}
	}
	return nil
}

// copyIfDifferent copies src to dst unless they are the same memory.
func copyIfDifferent(dst, src []byte) {
	if !sameStart(dst, src) {
		copy(dst, src)
	}
}

// AllReduceRHD reduces send (count elements) into recv with recursive
// halving-doubling (Rabenseifner; Thakur, Rabenseifner and Gropp,
// "Optimization of collective communication operations in MPICH", 2005): a
// recursive-halving reduce-scatter then a recursive-doubling all-gather over
// the largest power of two p' <= P ranks. For P not a power of two, the first
// 2(P-p') ranks pair up first: even ranks hand their vector to the odd
// neighbour and sit out, and get the result back at the end. send may be recv;
// out of place, send is only read.
func (g *Group) AllReduceRHD(ctx context.Context, op *Op, send, recv []byte, count int) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	es := op.ElemSize
	nbytes := count * es
	if g.Size == 1 {
		copyIfDifferent(recv[:nbytes], send[:nbytes])
		return nil
	}
	// Fold the extra ranks in. src is where this rank's current values live.
	f, src, err := g.foldToPow2(ctx, op, send[:nbytes], recv[:nbytes])
	if err != nil {
		return err
	}
	if vr := f.vrank; vr >= 0 {
		// Recursive halving: each step halves the segment this rank owns.
		var los, his [64]int
		lo, hi := 0, count
		steps := 0
		for mask := f.pow >> 1; mask > 0; mask >>= 1 {
			partner := f.groupRank(vr ^ mask)
			mid := lo + (hi-lo)/2
			keepLo, keepHi, giveLo, giveHi := lo, mid, mid, hi
			if vr&mask != 0 {
				keepLo, keepHi, giveLo, giveHi = mid, hi, lo, mid
			}
			los[steps], his[steps] = lo, hi
			steps++
			if err := g.sendRecvFold(ctx, op, partner, src[giveLo*es:giveHi*es], partner, recv[keepLo*es:keepHi*es], src[keepLo*es:keepHi*es]); err != nil {
				return err
			}
			src = recv
			lo, hi = keepLo, keepHi
		}
		// Recursive doubling: each step doubles the segment, in reverse order.
		for mask := 1; mask < f.pow; mask <<= 1 {
			steps--
			partner := f.groupRank(vr ^ mask)
			plo, phi := los[steps], his[steps]
			// The partner owns the other half of [plo, phi).
			otherLo, otherHi := plo, lo
			if lo == plo {
				otherLo, otherHi = hi, phi
			}
			if err := g.sendRecv(ctx, op, partner, recv[lo*es:hi*es], partner, recv[otherLo*es:otherHi*es], false); err != nil {
				return err
			}
			lo, hi = plo, phi
		}
	}
	// Hand the result back to the ranks that sat out.
	return g.unfoldFromPow2(ctx, op, f, recv[:nbytes])
}

// pow2Fold is how the recursive algorithms, which need a power-of-two
// number of ranks, run on P ranks: over the largest power of two pow <= P.
// The first 2*(P-pow) ranks pair up: even rank r hands its vector to r+1,
// which folds it into its own and takes part for both, and gets the result
// back at the end. Rank r takes part as rank vrank of pow.
type pow2Fold struct {
	pow, rem int // rem = P - pow
	vrank    int // this rank's rank among the pow, or -1: it sits out
}

// groupRank is the group rank of rank vr among the pow.
func (f pow2Fold) groupRank(vr int) int {
	if vr < f.rem {
		return vr*2 + 1
	}
	return vr + f.rem
}

// foldToPow2 folds the extra ranks in (see pow2Fold). send and recv are
// this rank's whole vectors; src is where its values are now: recv when it
// folded a neighbour's in, else send.
func (g *Group) foldToPow2(ctx context.Context, op *Op, send, recv []byte) (f pow2Fold, src []byte, err error) {
	P, r := g.Size, g.Rank
	f.pow = 1 << (bits.Len(uint(P)) - 1)
	f.rem = P - f.pow
	f.vrank = -1
	src = send
	switch {
	case r < 2*f.rem && r%2 == 0:
		err = g.send(ctx, op, r+1, send)
	case r < 2*f.rem:
		err = g.recvFold(ctx, op, r-1, recv, send)
		src = recv
		f.vrank = r / 2
	default:
		f.vrank = r - f.rem
	}
	return f, src, err
}

// unfoldFromPow2 hands the result in recv back to the ranks that sat out.
func (g *Group) unfoldFromPow2(ctx context.Context, op *Op, f pow2Fold, recv []byte) error {
	switch r := g.Rank; {
	case r >= 2*f.rem:
		return nil
	case r%2 == 0:
		return g.recv(ctx, op, r+1, recv, false)
	default:
		return g.send(ctx, op, r-1, recv)
	}
}

// AllReduceRD reduces send (count elements) into recv with recursive
// doubling (Thakur, Rabenseifner and Gropp 2005, the short-message
// algorithm of MPICH): over the largest power of two p' <= P ranks, log2 p'
// steps in which partners exchange their whole vectors and both fold them
// in. It has half the latency terms of halving-doubling (one exchange for 2
// ranks instead of two) at the price of moving and reducing the whole
// vector at every step, so the tuner uses it for small messages. Extra ranks
// of a P that is not a power of two are folded in and served at the end as
// in AllReduceRHD. The reduction kernels are commutative (floats included:
// NaN and signed zeros are handled symmetrically), so partners compute the
// same bits. send may be recv; out of place, send is only read.
func (g *Group) AllReduceRD(ctx context.Context, op *Op, send, recv []byte, count int) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	nbytes := count * op.ElemSize
	if g.Size == 1 {
		copyIfDifferent(recv[:nbytes], send[:nbytes])
		return nil
	}
	dst := recv[:nbytes]
	f, src, err := g.foldToPow2(ctx, op, send[:nbytes], dst)
	if err != nil {
		return err
	}
	if f.vrank >= 0 {
		for mask := 1; mask < f.pow; mask <<= 1 {
			partner := f.groupRank(f.vrank ^ mask)
			if !sameStart(src, dst) {
				// Out of place, first step: fold straight into recv.
				if err := g.sendRecvFold(ctx, op, partner, src, partner, dst, src); err != nil {
					return err
				}
				src = dst
				continue
			}
			// dst is being sent. When the link took it at once (the
			// shared-memory ring or the socket buffer had room), fold
			// straight into it; otherwise receive beside it and fold once
			// the send is done.
			if g.post(ctx, op, partner, dst) {
				if err := g.wait(partner); err != nil {
					return err
				}
				if err := g.recv(ctx, op, partner, dst, true); err != nil {
					return err
				}
				continue
			}
			tmp := g.Scratch(nbytes)
			rerr := g.recv(ctx, op, partner, tmp, false)
			if rerr != nil {
				g.abortFor(rerr)
			}
			if serr := g.wait(partner); rerr == nil && serr != nil {
				rerr = serr
			}
			if rerr != nil {
				return rerr
			}
			op.Reduce(dst, tmp)
		}
	}
	return g.unfoldFromPow2(ctx, op, f, dst)
}

// AllReduceTree reduces to rank 0 with a binomial tree and broadcasts back.
func (g *Group) AllReduceTree(ctx context.Context, op *Op, send, recv []byte, count int) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	n := count * op.ElemSize
	copyIfDifferent(recv[:n], send[:n])
	if err := g.reduceTree(ctx, op, recv, recv, count, 0); err != nil {
		return err
	}
	return g.bcastTree(ctx, op, recv, recv, count, 0)
}

// Broadcast copies count elements of send on root to recv on every rank along
// a binomial tree rooted at root, pipelined in pieces of pipelineBytes. send
// is only read on root, where it may be recv; the root copies send to recv
// while its first sends are in flight.
func (g *Group) Broadcast(ctx context.Context, op *Op, send, recv []byte, count, root int) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	return g.bcastTree(ctx, op, send, recv, count, root)
}

// treeNeighbours returns the parent (-1 at the root) and the children (largest
// subtree first) of rank r in the binomial tree of size P rooted at root.
func treeNeighbours(r, P, root int, children *[64]int) (parent, nchildren int) {
	vr := mod(r-root, P)
	parent = -1
	mask := 1
	for mask < P {
		if vr&mask != 0 {
			parent = mod(vr-mask+root, P)
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < P {
			children[nchildren] = mod(vr+mask+root, P)
			nchildren++
		}
	}
	return parent, nchildren
}

func pieceElems(es int) int {
	n := pipelineBytes / es
	if n < 1 {
		n = 1
	}
	return n
}

func (g *Group) bcastTree(ctx context.Context, op *Op, send, recv []byte, count, root int) error {
	if g.Size == 1 {
		copyIfDifferent(recv[:count*op.ElemSize], send[:count*op.ElemSize])
		return nil
	}
	var children [64]int
	parent, nc := treeNeighbours(g.Rank, g.Size, root, &children)
	return g.bcastPipe(ctx, op, send, recv, count, parent, children[:nc])
}

// bcastChain broadcasts along the chain root, root+1, ..., root-1,
// pipelined in pieces: every rank receives each piece from the one before
// and forwards it to the one after, so every rank sends and receives the
// message once (the bandwidth-optimal broadcast of NCCL's ring, at the cost
// of P−1 piece latencies where the binomial tree has lg P).
func (g *Group) bcastChain(ctx context.Context, op *Op, send, recv []byte, count, root int) error {
	P := g.Size
	if P == 1 {
		copyIfDifferent(recv[:count*op.ElemSize], send[:count*op.ElemSize])
		return nil
	}
	vr := mod(g.Rank-root, P)
	parent := -1
	if vr > 0 {
		parent = mod(g.Rank-1, P)
	}
	var child [1]int
	nc := 0
	if vr < P-1 {
		child[0], nc = mod(g.Rank+1, P), 1
	}
	return g.bcastPipe(ctx, op, send, recv, count, parent, child[:nc])
}

// bcastPipe is a pipelined broadcast over a tree: each piece of recv comes
// from parent (-1 at the root, which sends send) and goes on to children.
func (g *Group) bcastPipe(ctx context.Context, op *Op, send, recv []byte, count, parent int, children []int) error {
	es, nc := op.ElemSize, len(children)
	piece := pieceElems(es)
	npieces := max(1, (count+piece-1)/piece)
	for k := 0; k < npieces; k++ {
		lo, hi := k*piece, min(count, (k+1)*piece)
		p := recv[lo*es : hi*es]
		if parent >= 0 {
			if err := g.recv(ctx, op, parent, p, false); err != nil {
				g.abortFor(err)
				g.waitAll(children[:nc])
				return err
			}
		} else {
			p = send[lo*es : hi*es] // the root forwards its input
		}
		for _, c := range children[:nc] {
			if err := g.wait(c); err != nil {
				g.abortFor(err)
				g.waitAll(children[:nc])
				return err
			}
			g.post(ctx, op, c, p)
		}
		if parent < 0 {
			copyIfDifferent(recv[lo*es:hi*es], p)
		}
	}
	return g.waitAll(children[:nc])
}

func (g *Group) waitAll(peers []int) error {
	var first error
	for _, p := range peers {
		if err := g.wait(p); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Reduce reduces count elements of send across the group into recv on root
// along a binomial tree, pipelined in pieces. recv is only used on root; other
// ranks accumulate in scratch. send is never modified.
func (g *Group) Reduce(ctx context.Context, op *Op, send, recv []byte, count, root int) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	return g.reduceTree(ctx, op, send, recv, count, root)
}

func (g *Group) reduceTree(ctx context.Context, op *Op, send, recv []byte, count, root int) error {
	P, es := g.Size, op.ElemSize
	nbytes := count * es
	if P == 1 {
		copy(recv[:nbytes], send[:nbytes])
		return nil
	}
	var children [64]int
	parent, nc := treeNeighbours(g.Rank, P, root, &children)
	acc := recv
	if parent >= 0 {
		if nc == 0 {
			acc = send // a leaf forwards its input untouched
		} else {
			acc = g.Scratch(nbytes)
		}
	}
	piece := pieceElems(es)
	npieces := max(1, (count+piece-1)/piece)
	for k := 0; k < npieces; k++ {
		lo, hi := k*piece, min(count, (k+1)*piece)
		a := acc[lo*es : hi*es]
		// Children in reverse order: the smallest subtree finishes first. The
		// first one's data is folded with this rank's input straight into acc.
		for i := nc - 1; i >= 0; i-- {
			in := a
			if i == nc-1 {
				in = send[lo*es : hi*es]
			}
			if err := g.recvFold(ctx, op, children[i], a, in); err != nil {
				if parent >= 0 {
					g.abortFor(err)
					g.wait(parent)
				}
				return err
			}
		}
		if parent >= 0 {
			if err := g.wait(parent); err != nil {
				return err
			}
			g.post(ctx, op, parent, a)
		}
	}
	if parent >= 0 {
		return g.wait(parent)
	}
	return nil
}

// AllGather gathers count elements of send from every rank into recv
// (Size*count elements, block r from rank r) with the ring algorithm: P-1
// steps, each forwarding the block received in the last. The first step sends
// straight from send; this rank's block is copied into recv meanwhile (send
// may already be recv's block Rank: in place).
func (g *Group) AllGather(ctx context.Context, op *Op, send, recv []byte, count int) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	P, r, es := g.Size, g.Rank, op.ElemSize
	bb := count * es
	next, prev := mod(r+1, P), mod(r-1, P)
	blk := func(i int) []byte {
		i = mod(i, P)
		return recv[i*bb : (i+1)*bb]
	}
	if P == 1 {
		copyIfDifferent(blk(r), send[:bb])
		return nil
	}
	for s := 0; s < P-1; s++ {
		out := blk(r - s)
		if s == 0 {
			out = send[:bb]
		}
		g.post(ctx, op, next, out)
		if s == 0 {
			copyIfDifferent(blk(r), send[:bb])
		}
		err := g.recv(ctx, op, prev, blk(r-s-1), false)
		if err != nil {
			g.abortFor(err)
		}
		if werr := g.wait(next); err == nil {
			err = werr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ReduceScatter reduces send (Size*count elements) across the group and leaves
// block Rank (count elements) in recv, with the ring algorithm: at step s a
// rank forwards its running partial sum of one block and receives the previous
// rank's partial of the next, folding in its own contribution. Two blocks of
// scratch are used; send is never modified. recv may alias send's block Rank.
func (g *Group) ReduceScatter(ctx context.Context, op *Op, send, recv []byte, count int) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	P, r, es := g.Size, g.Rank, op.ElemSize
	bb := count * es
	own := func(i int) []byte {
		i = mod(i, P)
		return send[i*bb : (i+1)*bb]
	}
	if P == 1 {
		copy(recv[:bb], own(0))
		return nil
	}
	next, prev := mod(r+1, P), mod(r-1, P)
	scratch := g.Scratch(2 * bb)
	acc := [2][]byte{scratch[:bb], scratch[bb:]}
	out := own(r - 1)
	for s := 0; s < P-1; s++ {
		j := r - s - 2
		dst := acc[s%2]
		if s == P-2 {
			dst = recv[:bb] // j == r: the final block lands in recv
		}
		copy(dst, own(j))
		if err := g.sendRecv(ctx, op, next, out, prev, dst, true); err != nil {
			return err
		}
		out = dst
	}
	return nil
}

// AllToAll sends block p of send to rank p and receives rank p's block Rank
// into block p of recv (count elements per block), in P-1 pairwise steps
// (step s: send to Rank+s, receive from Rank-s). send and recv must not
// overlap (the caller copies for in-place).
func (g *Group) AllToAll(ctx context.Context, op *Op, send, recv []byte, count int) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	P, r, es := g.Size, g.Rank, op.ElemSize
	bb := count * es
	blk := func(b []byte, i int) []byte { return b[i*bb : (i+1)*bb] }
	if P == 1 {
		copy(blk(recv, r), blk(send, r))
		return nil
	}
	for s := 1; s < P; s++ {
		to, from := mod(r+s, P), mod(r-s, P)
		if s > 1 {
			if err := g.sendRecv(ctx, op, to, blk(send, to), from, blk(recv, from), false); err != nil {
				return err
			}
			continue
		}
		// First step: this rank's own block is copied while the first
		// send is in flight.
		g.post(ctx, op, to, blk(send, to))
		copy(blk(recv, r), blk(send, r))
		err := g.recv(ctx, op, from, blk(recv, from), false)
		if err != nil {
			g.abortFor(err)
		}
		if werr := g.wait(to); err == nil {
			err = werr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Barrier is a dissemination barrier (Hensgen, Finkel and Manber, 1988):
// ceil(log2 P) rounds of empty messages to Rank+2^k and from Rank-2^k.
func (g *Group) Barrier(ctx context.Context, op *Op) error {
	P, r := g.Size, g.Rank
	for k := 1; k < P; k <<= 1 {
		if err := g.sendRecv(ctx, op, mod(r+k, P), nil, mod(r-k, P), nil, false); err != nil {
			return err
		}
	}
	return nil
}

// SendRecv sends send to `to` and receives recv from `from` concurrently
// (either may be -1).
func (g *Group) SendRecv(ctx context.Context, op *Op, to int, send []byte, from int, recv []byte) error {
	if to == g.Rank && from == g.Rank {
		copy(recv, send)
		return nil
	}
	return g.sendRecv(ctx, op, to, send, from, recv, false)
}
