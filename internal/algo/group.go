// Package algo holds goccl's collective algorithms as schedules of send, receive
// and receive-reduce steps over transport.Links. Nothing here opens a socket or
// a file: a Group is built from Links by the communicator, or from in-memory
// links by the tests, so every algorithm is unit-tested in one process.
//
// All buffers are byte slices whose lengths are whole elements; the element
// size and the reduction are supplied by the caller (Op).
package algo

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/transport"
)

// Op describes one collective call as every rank must agree on it.
type Op struct {
	// Seq, Op, DType, RedOp, Root, Count; Bytes is set per message.
	// Arrival starts as this rank's entry (or zero: none recorded) and
	// gathers the latest entry each message received reports, so that
	// every message sent carries the latest this rank knows of.
	Header   transport.Header
	ElemSize int                  // bytes per element
	Reduce   transport.ReduceFunc // nil for data-movement collectives
	// Reduce3 computes dst = a op b; when set, receives that fold incoming
	// data into a copy of another buffer do it in one pass (out-of-place
	// collectives then never copy their input first).
	Reduce3 func(dst, a, b []byte)
}

// Group is one rank's view of the communicator for the algorithms: its links to
// every other rank and the per-link background senders that let a rank send and
// receive at the same time. A Group runs one operation at a time.
type Group struct {
	Rank, Size int
	links      []transport.Link // indexed by rank; nil at Rank
	senders    []*sender
	scratch    []byte // grown on demand, reused across operations

	recvHdr transport.Header // reused so that passing &hdr to a Link does not allocate
	heard   []uint64         // by rank: sequence number of the last operation a message came from
	sendHdr transport.Header
	aborted atomic.Bool
	lost    atomic.Pointer[error] // the first error that named a lost rank (root group only)
	waitOn  atomic.Int32          // root group only: 1 + the rank a receive or send waits on now, 0 none

	f3   fold3                // state of the current three-operand receive
	f3fn transport.ReduceFunc // f3.reduce, bound once

	// A sub-group (Sub) runs schedules over some of its parent's ranks
	// through the parent's links and senders: ranks maps its ranks to the
	// parent's; failures abort the parent, arrivals are noted there.
	parent *Group
	ranks  []int

	hier *Hierarchy // SetHier
	agg  Aggregator // SetAggregator

	// Direct schedules (direct.go), set up by AgreeDirect.
	direct        bool
	pm            []transport.PeerMemory // by rank; nil at Rank
	ctlOut, ctlIn [][ctlBytes]byte       // per-peer control messages
	stage         []byte                 // staging buffer of reducing reads
}

// fold3 adapts a three-operand kernel to transport.ReduceFunc for one receive:
// each incoming piece is combined with the same region of a (a buffer laid out
// like the destination) and written to the destination.
type fold3 struct {
	f    func(dst, a, b []byte)
	dst0 uintptr // address of the destination's first byte
	a    []byte
}

func (x *fold3) reduce(dst, src []byte) {
	off := int(uintptr(unsafe.Pointer(unsafe.SliceData(dst))) - x.dst0)
	x.f(dst, x.a[off:off+len(dst)], src)
}

// NewGroup wraps links (indexed by rank, nil at rank) for the algorithms.
func NewGroup(rank, size int, links []transport.Link) *Group {
	g := &Group{Rank: rank, Size: size, links: links, senders: make([]*sender, size), heard: make([]uint64, size)}
	g.f3fn = g.f3.reduce
	for p, l := range links {
		if l != nil {
			g.senders[p] = newSender(l)
			if w, ok := l.(transport.LossWatcher); ok {
				// A rank waiting on another peer, or idle, fails as soon as
				// the job is broken, naming the lost rank.
				w.WatchLoss(g.abortFor)
			}
		}
	}
	return g
}

// Sub returns the sub-group of the ranks listed (parent ranks, this rank
// among them, each once), numbered in the order given: a schedule run on it
// reaches rank ranks[i] as its rank i, over the parent's links. Sub-groups
// are how the hierarchical schedules run one algorithm among a host's ranks
// and another among the hosts, and how a ring is ordered so that it enters
// each host once. A sub-group runs one schedule at a time, like its parent,
// and never at the same time as it; it has no direct schedules.
func (g *Group) Sub(ranks []int) (*Group, error) {
	me := -1
	seen := make(map[int]bool, len(ranks))
	for i, r := range ranks {
		if r < 0 || r >= g.Size || seen[r] {
			return nil, fmt.Errorf("algo: sub-group %v: rank %d is out of range or repeated (group of %d)", ranks, r, g.Size)
		}
		seen[r] = true
		if r == g.Rank {
			me = i
		}
	}
	if me < 0 {
		return nil, fmt.Errorf("algo: sub-group %v lacks this rank %d", ranks, g.Rank)
	}
	root := g
	for root.parent != nil {
		// A sub-group of a sub-group maps straight to the root's ranks.
		mapped := make([]int, len(ranks))
		for i, r := range ranks {
			mapped[i] = root.ranks[r]
		}
		ranks, root = mapped, root.parent
	}
	s := &Group{Rank: me, Size: len(ranks), parent: root, ranks: append([]int(nil), ranks...),
		links: make([]transport.Link, len(ranks)), senders: make([]*sender, len(ranks)), heard: make([]uint64, len(ranks))}
	s.f3fn = s.f3.reduce
	for i, r := range ranks {
		s.links[i], s.senders[i] = root.links[r], root.senders[r]
	}
	return s, nil
}

// Link returns the link to peer (nil for this rank).
func (g *Group) Link(peer int) transport.Link { return g.links[peer] }

// Close stops the background senders and closes every link. On a
// sub-group it does nothing: the parent owns them.
func (g *Group) Close() error {
	if g.parent != nil {
		return nil
	}
	var first error
	for p, l := range g.links {
		if l == nil {
			continue
		}
		if err := l.Close(); err != nil && first == nil {
			first = err
		}
		g.senders[p].stop()
	}
	return first
}

// Abort closes every link so that peers blocked on this rank fail fast; the
// Group is unusable afterwards. It may be called from any goroutine, also
// while an operation is running (which then fails).
func (g *Group) Abort() { g.AbortLost(transport.NoLostRank) }

// AbortLost is Abort after this rank lost rank lost: every peer is told, so
// that its pending and later operations fail naming that rank.
func (g *Group) AbortLost(lost int) {
	if g.parent != nil {
		g.parent.AbortLost(lost)
		return
	}
	if !g.aborted.CompareAndSwap(false, true) {
		return
	}
	if lost != transport.NoLostRank {
		for _, l := range g.links {
			if m, ok := l.(transport.LossMarker); ok {
				m.MarkLost(lost)
			}
		}
	}
	for _, l := range g.links {
		if l != nil {
			l.Abort(lost)
		}
	}
}

// abortFor aborts the group after err, relaying a lost rank if err names one.
func (g *Group) abortFor(err error) {
	if transport.LostRank(err) >= 0 {
		root := g
		for root.parent != nil {
			root = root.parent
		}
		root.lost.CompareAndSwap(nil, &err)
	}
	g.AbortLost(transport.LostRank(err))
}

// LostErr is the first error that named a lost rank and aborted the group
// (a schedule's, or a link's LossWatcher's), nil if none: the cause of the
// failure of every call that found the group aborted.
func (g *Group) LostErr() error {
	for g.parent != nil {
		g = g.parent
	}
	if p := g.lost.Load(); p != nil {
		return *p
	}
	return nil
}

// Scratch returns a reusable buffer of n bytes (contents undefined).
func (g *Group) Scratch(n int) []byte {
	if cap(g.scratch) < n {
		g.scratch = make([]byte, n)
	}
	return g.scratch[:n]
}

// post starts sending buf to peer in the background, or sends it inline when
// the link can take it without waiting; it reports which (true: inline, buf is
// free again). wait(peer) must follow before the next post to the same peer
// and, unless post returned true, before buf is modified.
func (g *Group) post(ctx context.Context, op *Op, peer int, buf []byte) bool {
	s := g.senders[peer]
	s.hdr = op.Header
	s.hdr.Bytes = uint64(len(buf))
	if s.busy {
		panic("algo: post to a peer with a send in flight") // programming error in a schedule
	}
	s.busy = true
	sent, err := s.link.TrySend(&s.hdr, buf)
	// A small message that does not fit yet (a root running ahead of its
	// receiver has filled the ring) usually fits within microseconds; try
	// again for a while rather than hand it to the sender goroutine, whose
	// wake-up costs more: of ten runs of 50000 2-rank 8-byte Broadcasts
	// over shared memory, 6 had a p99 above 10 µs (means up to 3.3 µs) with
	// the hand-off, 1 with the retries (means 0.37-1.16 µs).
	for i := 0; !sent && err == nil && len(buf) <= postSpinMax && i < postSpinTries; i++ {
		sent, err = s.link.TrySend(&s.hdr, buf)
	}
	if sent || err != nil {
		s.inlineErr = err
		s.inline = true
		return true
	}
	s.inline = false
	s.req <- sendReq{ctx: ctx, buf: buf}
	return false
}

// postSpinMax and postSpinTries bound post's retries of TrySend.
const (
	postSpinMax   = 64 << 10
	postSpinTries = 4000
)

// wait blocks until the send posted to peer is done and returns its error.
func (g *Group) wait(peer int) error {
	s := g.senders[peer]
	if !s.busy {
		return nil
	}
	s.busy = false
	if s.inline {
		return s.inlineErr
	}
	g.blockOn(peer)
	err := <-s.done
	g.blockOn(-1)
	return err
}

// blockOn notes that the operation waits on peer now (-1: on none), for
// WaitingOn: one atomic store.
func (g *Group) blockOn(peer int) {
	if g.parent != nil {
		if peer >= 0 {
			peer = g.ranks[peer]
		}
		g = g.parent
	}
	g.waitOn.Store(int32(peer + 1))
}

// WaitingOn is the rank (of the root group) whose message, or the end of
// a send to which, the running collective waits for now; -1 when it waits
// on none. Safe from any goroutine (the health query's).
func (g *Group) WaitingOn() int {
	for g.parent != nil {
		g = g.parent
	}
	return int(g.waitOn.Load()) - 1
}

// recv receives the next message from peer into buf, folding it in with
// op.Reduce when reduce is true.
func (g *Group) recv(ctx context.Context, op *Op, peer int, buf []byte, reduce bool) error {
	g.recvHdr = op.Header
	g.recvHdr.Bytes = uint64(len(buf))
	var f transport.ReduceFunc
	if reduce {
		f = op.Reduce
	}
	g.blockOn(peer)
	err := g.links[peer].Recv(ctx, &g.recvHdr, buf, f)
	g.blockOn(-1)
	if err == nil {
		g.noteHeard(peer, op)
	}
	return err
}

// noteHeard records that a message of op (just received into g.recvHdr)
// came from peer, and merges the arrival it reported into op's: what op
// sends next tells the latest entry this rank knows of (transport.Arrival).
func (g *Group) noteHeard(peer int, op *Op) {
	op.Header.Arrival.Merge(g.recvHdr.Arrival)
	seq := op.Header.Seq
	if g.parent != nil {
		g.parent.heard[g.ranks[peer]] = seq
		return
	}
	g.heard[peer] = seq
}

// NotHeard lists the peers from which no message of operation seq has
// arrived (for timeout errors: who the operation is still waiting on,
// directly or through others).
func (g *Group) NotHeard(seq uint64) []int {
	var ranks []int
	for p, s := range g.heard {
		if p != g.Rank && s != seq {
			ranks = append(ranks, p)
		}
	}
	return ranks
}

// Heard is the sequence number of the last operation a message from peer
// came from (0: none yet).
func (g *Group) Heard(peer int) uint64 { return g.heard[peer] }

// recvFold receives from peer and stores a op incoming into dst (a and dst
// have the same length; a may be dst itself, which is a plain receive-reduce).
func (g *Group) recvFold(ctx context.Context, op *Op, peer int, dst, a []byte) error {
	if op.Reduce3 == nil || sameStart(dst, a) {
		if !sameStart(dst, a) {
			copy(dst, a)
		}
		return g.recv(ctx, op, peer, dst, true)
	}
	g.recvHdr = op.Header
	g.recvHdr.Bytes = uint64(len(dst))
	g.f3 = fold3{f: op.Reduce3, dst0: uintptr(unsafe.Pointer(unsafe.SliceData(dst))), a: a}
	g.blockOn(peer)
	err := g.links[peer].Recv(ctx, &g.recvHdr, dst, g.f3fn)
	g.blockOn(-1)
	g.f3.a = nil
	if err == nil {
		g.noteHeard(peer, op)
	}
	return err
}

// sendRecvFold is sendRecv whose receive stores a op incoming into recvBuf.
func (g *Group) sendRecvFold(ctx context.Context, op *Op, to int, sendBuf []byte, from int, recvBuf, a []byte) error {
	g.post(ctx, op, to, sendBuf)
	rerr := g.recvFold(ctx, op, from, recvBuf, a)
	if rerr != nil {
		g.abortFor(rerr)
	}
	serr := g.wait(to)
	if rerr != nil {
		return rerr
	}
	return serr
}

// send sends buf to peer and waits for it.
func (g *Group) send(ctx context.Context, op *Op, peer int, buf []byte) error {
	g.post(ctx, op, peer, buf)
	return g.wait(peer)
}

// sendRecv sends sendBuf to `to` while receiving recvBuf from `from`; either
// peer may be -1. On a receive failure it aborts the group so that a send
// blocked on a dead or disagreeing peer returns instead of hanging.
func (g *Group) sendRecv(ctx context.Context, op *Op, to int, sendBuf []byte, from int, recvBuf []byte, reduce bool) error {
	if to >= 0 {
		g.post(ctx, op, to, sendBuf)
	}
	var rerr error
	if from >= 0 {
		rerr = g.recv(ctx, op, from, recvBuf, reduce)
		if rerr != nil && to >= 0 {
			g.abortFor(rerr)
		}
	}
	var serr error
	if to >= 0 {
		serr = g.wait(to)
	}
	if rerr != nil {
		return rerr
	}
	return serr
}

// sender owns the background goroutine that performs blocking sends on one
// link, so that a rank can send to one peer while receiving from another.
type sender struct {
	link transport.Link
	req  chan sendReq
	done chan error
	hdr  transport.Header

	busy, inline bool
	inlineErr    error
}

type sendReq struct {
	ctx context.Context
	buf []byte
}

func newSender(l transport.Link) *sender {
	s := &sender{link: l, req: make(chan sendReq, 1), done: make(chan error, 1)}
	go s.loop()
	return s
}

func (s *sender) loop() {
	for r := range s.req {
		s.done <- s.link.Send(r.ctx, &s.hdr, r.buf)
	}
}

func (s *sender) stop() {
	if s.busy && !s.inline {
		<-s.done
		s.busy = false
	}
	close(s.req)
}

// errEmpty guards schedules against impossible states.
var errEmpty = errors.New("algo: empty group")

// checkGroup validates the group against the op before a schedule runs.
func (g *Group) checkGroup(op *Op) error {
	if g.Size <= 0 {
		return errEmpty
	}
	if op.ElemSize <= 0 {
		return fmt.Errorf("algo: element size %d", op.ElemSize)
	}
	return nil
}

// SendRecvP2P is SendRecv for point-to-point traffic, whose headers carry
// per-peer sequence numbers (sendSeq for the message to `to`, recvSeq for the
// one expected from `from`) instead of the collective sequence number.
func (g *Group) SendRecvP2P(ctx context.Context, op *Op, sendSeq uint64, to int, send []byte, recvSeq uint64, from int, recv []byte) error {
	seq := op.Header.Seq
	defer func() { op.Header.Seq = seq }()
	if to >= 0 {
		op.Header.Seq = sendSeq
		g.post(ctx, op, to, send)
	}
	var rerr error
	if from >= 0 {
		op.Header.Seq = recvSeq
		rerr = g.recv(ctx, op, from, recv, false)
		if rerr != nil && to >= 0 {
			g.abortFor(rerr)
		}
	}
	var serr error
	if to >= 0 {
		serr = g.wait(to)
	}
	if rerr != nil {
		return rerr
	}
	return serr
}
