package algo

import "context"

// This file holds the collectives whose blocks are not all the same size or
// that move data to or from one root: AllToAllv, Gather and Scatter. The
// caller (the communicator) has checked every count, displacement and root
// against the buffers; the schedules here slice the buffers as told.

// AllToAllv sends sendCounts[p] elements of send, from element
// sendDispls[p], to rank p, and receives recvCounts[p] elements from rank p
// into recv at element recvDispls[p], in P-1 pairwise steps (step s: send to
// Rank+s while receiving from Rank-s), each message sized by its own count.
// Every message carries its own element count in the header (op.Header.Count
// is set per message and restored on return), so a rank that sends a peer a
// different count than the peer expects makes the peer fail with a
// *transport.MismatchError on "count" naming both values. A zero count is
// an empty message: both sides still exchange one, so the schedule is the
// same on every rank whatever the counts. The block a rank sends itself is
// copied (sendCounts[Rank] must equal recvCounts[Rank]). send and recv must
// not overlap (the caller copies for in-place).
func (g *Group) AllToAllv(ctx context.Context, op *Op, send []byte, sendCounts, sendDispls []int, recv []byte, recvCounts, recvDispls []int) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	P, r, es := g.Size, g.Rank, op.ElemSize
	count := op.Header.Count
	defer func() { op.Header.Count = count }()
	sblk := func(p int) []byte { return send[sendDispls[p]*es : (sendDispls[p]+sendCounts[p])*es] }
	rblk := func(p int) []byte { return recv[recvDispls[p]*es : (recvDispls[p]+recvCounts[p])*es] }
	for s := 1; s < P; s++ {
		to, from := mod(r+s, P), mod(r-s, P)
		op.Header.Count = uint64(sendCounts[to])
		g.post(ctx, op, to, sblk(to))
		if s == 1 {
			// This rank's own block is copied while the first send is in
			// flight.
			copy(rblk(r), sblk(r))
		}
		op.Header.Count = uint64(recvCounts[from])
		err := g.recv(ctx, op, from, rblk(from), false)
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
	if P == 1 {
		copy(rblk(r), sblk(r))
	}
	return nil
}

// Gather collects count elements of send from every rank into recv on root
// (Size*count elements, block p from rank p); recv is only used on root. The
// schedule is flat (linear): every other rank sends its block straight to
// the root, all at once, and the root receives them in rank order starting
// after itself, while its own block is copied first. At the world sizes goccl
// runs at (one host or a few) this costs P-1 messages at the root, as a
// binomial tree would in total, without the tree's forwarding copies; since
// the senders all start together, a slow peer delays only its own block
// (the others wait in their links' buffers and senders). On root, send may
// be recv's block Root (in place).
func (g *Group) Gather(ctx context.Context, op *Op, send, recv []byte, count, root int) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	P, r := g.Size, g.Rank
	bb := count * op.ElemSize
	if r != root {
		return g.send(ctx, op, root, send[:bb])
	}
	copyIfDifferent(recv[root*bb:(root+1)*bb], send[:bb])
	for s := 1; s < P; s++ {
		p := mod(root+s, P)
		if err := g.recv(ctx, op, p, recv[p*bb:(p+1)*bb], false); err != nil {
			g.abortFor(err)
			return err
		}
	}
	return nil
}

// Scatter sends block p (count elements) of send on root to rank p, which
// stores it in recv; send is only used on root. The schedule is flat (see
// Gather): the root posts its sends to every peer before waiting for any
// (each link has its own background sender), so one slow receiver does not
// hold up the others, and copies its own block meanwhile. On root, recv may
// be send's block Root (in place).
func (g *Group) Scatter(ctx context.Context, op *Op, send, recv []byte, count, root int) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	P, r := g.Size, g.Rank
	bb := count * op.ElemSize
	if r != root {
		return g.recv(ctx, op, root, recv[:bb], false)
	}
	for s := 1; s < P; s++ {
		p := mod(root+s, P)
		g.post(ctx, op, p, send[p*bb:(p+1)*bb])
	}
	copyIfDifferent(recv[:bb], send[root*bb:(root+1)*bb])
	var first error
	for s := 1; s < P; s++ {
		if err := g.wait(mod(root+s, P)); err != nil && first == nil {
			first = err
			g.abortFor(err)
		}
	}
	return first
}
