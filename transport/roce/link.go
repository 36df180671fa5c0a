// Package roce carries goccl's links over reliable-connection queue pairs
// of the soft RoCE device (package rdma), the way NCCL's net/IB transport
// carries them over an InfiniBand or RoCE NIC.
//
// Data path. Each side registers a receive ring of Slots slots of SlotBytes
// bytes and tells the peer its address and rkey. A message (a 64-byte
// header room holding transport.Header, then the payload) goes as one or
// more chunks of at most SlotBytes: the sender copies a chunk into its own
// registered staging slot and posts an RDMA WRITE with immediate into the
// peer's next ring slot; the immediate carries the chunk's length. The
// WRITE with immediate consumes a receive WR at the peer and completes
// there with the immediate, in order (RC), which is how the receiver learns
// that the slot is full; it copies (or folds) the slot into the caller's
// buffer and returns the slot with a zero-length WRITE with immediate
// carrying a credit. The sender never has more chunks outstanding than the
// peer has slots (credit-based flow control, NCCL's per-connection FIFO
// idea). Staging slot i is reused once the WRITE that used it has
// completed, which on RC means the peer acknowledged it.
//
// Control path. The link keeps the TCP link it was made over (the
// bootstrap's link to the same peer) as its control channel, as NCCL keeps
// its bootstrap sockets: the queue-pair attributes and ring addresses are
// exchanged over it (NCCL's connect handles), and afterwards it carries
// only the goodbye. A goroutine waits on it, so a peer that closes or aborts
// its link, or whose process dies (the socket's EOF or reset), fails this
// side's calls at once, with the reason the peer gave, instead of after the
// queue pair's retry budget (a peer that is gone never acknowledges). A
// queue pair that fails on its own (IBV_WC_RETRY_EXC_ERR: the peer's
// device stopped answering) fails the link the same way.
package roce

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/rdma/qp"
	"github.com/goccl/goccl/transport"
)

// Defaults of Options.
const (
	DefaultSlots     = 8
	DefaultSlotBytes = 256 << 10
)

// hdrRoom is the room for the header at the start of a message's first
// chunk: 64 bytes, so that payload pieces stay cut at multiples of 64 bytes
// (transport.ReduceFunc's rule).
const hdrRoom = 64

// Immediate data: the top byte is the kind, the low 24 bits its value.
const (
	immData   = 0 << 24 // a chunk of that many bytes is in the next slot
	immCredit = 1 << 24 // that many slots are free again
	immDirect = 2 << 24 // the rest of the message was written into the receiver's buffer (takes a slot, no bytes)
	immKind   = 0xff << 24
	immValue  = 1<<24 - 1
)

// WR ids: data WRs count from 0; credit returns, direct payload WRITEs and
// receive-buffer adverts are marked.
const (
	creditWR = 1 << 63
	directWR = 1 << 62
	advertWR = 1 << 61
)

// The advert FIFO (NCCL's receive FIFO): fifoLen entries of fifoEntry
// bytes after each side's receive ring, written by the peer. A receiver
// whose buffer is registered writes, for its next message m, entry m mod
// fifoLen: the buffer's address (8 bytes), rkey (4), 4 spare, length (8),
// then in a WRITE of its own (RC orders it after the rest; an aligned
// 8-byte WRITE lands whole) the word m+1 that makes the entry valid.
const (
	fifoLen   = 4
	fifoEntry = 32
	fifoBytes = fifoLen * fifoEntry
)

// spin is how long a waiting call polls before it sleeps.
const spin = 30 * time.Microsecond

// Options configure a RoCE link.
type Options struct {
	// Slots and SlotBytes shape this side's receive ring (and so the
	// chunks the peer sends): DefaultSlots and DefaultSlotBytes when 0.
	// SlotBytes must be a multiple of 64 from 4 KiB to 8 MiB.
	Slots, SlotBytes int
	// Timeout and RetryCnt are the queue pair's local ACK timeout exponent
	// (4.096 µs × 2^Timeout) and retry count: 14 (67 ms) and 7 when 0.
	Timeout, RetryCnt uint8
	// Source is the device's UDP source port the queue pair sends from
	// (rdma.QPSource; DialQPs sets it per queue pair).
	Source int
}

func (o *Options) fill() error {
	if o.Slots == 0 {
		o.Slots = DefaultSlots
	}
	if o.SlotBytes == 0 {
		o.SlotBytes = DefaultSlotBytes
	}
	switch {
	case o.Slots < 2 || o.Slots > 1024:
		return fmt.Errorf("roce: %d receive slots: want 2 to 1024", o.Slots)
	case o.SlotBytes%64 != 0 || o.SlotBytes < 4<<10 || o.SlotBytes > 8<<20:
		return fmt.Errorf("roce: slot of %d bytes: want a multiple of 64 from 4 KiB to 8 MiB", o.SlotBytes)
	}
	return nil
}

// Link is a transport.Link over one RC queue pair; see the package doc.
type Link struct {
	peer          int
	dom           *Domain
	ctrl          transport.Link
	qp            *rdma.QP
	cq            *rdma.CQ
	rmr           *rdma.MR // receive ring: the peer writes here
	smr           *rdma.MR // send staging
	rslots, rslot int
	pslots, pslot int // the peer's ring
	raddr         uint64
	rkey          uint32
	name          string
	counters      transport.Counters
	zeroCopied    atomic.Uint64 // payload bytes sent straight from registered buffers
	direct        atomic.Uint64 // payload bytes received straight into registered buffers
	amr           *rdma.MR      // this side's adverts, the source of their WRITEs

	mu       sync.Mutex
	wcs      [64]rdma.WC
	lens     []int  // chunk length in each ring slot, by arrival; -1: the rest came direct (immDirect)
	arrived  uint64 // data chunks that arrived
	credits  uint64 // credits the peer returned
	sendDone uint64 // data WRs completed
	err      error  // why the link failed (the cause, not yet wrapped)
	local    bool   // this side closed the link
	posted   uint64 // data WRs posted (l.sent, read by Close)
	dposted  uint64 // direct payload WRITEs posted
	ddone    uint64 // and completed
	aposted  uint64 // adverts posted (a WRITE pair each)
	adone    uint64 // and completed (both WRITEs)
	watch    func(error)
	sendSig  chan struct{}
	recvSig  chan struct{}
	done     chan struct{}
	once     sync.Once

	// The sender's (one at a time).
	sent      uint64 // data chunks posted
	sentMsgs  uint64 // messages sent
	sendTimer *time.Timer
	// The receiver's (one at a time).
	consumed  uint64 // data chunks consumed
	recvMsgs  uint64 // messages received
	unacked   int    // consumed slots not yet returned
	recvTimer *time.Timer
}

var _ transport.Link = (*Link)(nil)
var _ transport.LossWatcher = (*Link)(nil)
var _ transport.LossMarker = (*Link)(nil)

// setup is what each side sends the other over the control link.
type setup struct {
	hasDev     bool
	info       rdma.ConnInfo
	slots, per int
}

const setupSize = 64

var setupHdr = transport.Header{Op: 0xfe, Root: -1, Count: 1, Bytes: setupSize}

func (s *setup) encode(b []byte) {
	clear(b)
	if !s.hasDev {
		return
	}
	b[0] = 1
	binary.LittleEndian.PutUint32(b[1:], s.info.QPN)
	binary.LittleEndian.PutUint32(b[5:], s.info.PSN)
	copy(b[9:25], s.info.GID[:])
	binary.LittleEndian.PutUint16(b[25:], s.info.Port)
	binary.LittleEndian.PutUint32(b[27:], uint32(s.info.MTU))
	binary.LittleEndian.PutUint32(b[31:], s.info.RKey)
	binary.LittleEndian.PutUint64(b[35:], s.info.Addr)
	binary.LittleEndian.PutUint32(b[43:], uint32(s.info.Len))
	binary.LittleEndian.PutUint32(b[47:], uint32(s.slots))
	binary.LittleEndian.PutUint32(b[51:], uint32(s.per))
	binary.LittleEndian.PutUint16(b[55:], s.info.SrcPort)
}

func (s *setup) decode(b []byte) error {
	*s = setup{hasDev: b[0] == 1}
	if !s.hasDev {
		return nil
	}
	s.info.QPN = binary.LittleEndian.Uint32(b[1:])
	s.info.PSN = binary.LittleEndian.Uint32(b[5:])
	copy(s.info.GID[:], b[9:25])
	s.info.Port = binary.LittleEndian.Uint16(b[25:])
	s.info.MTU = int(binary.LittleEndian.Uint32(b[27:]))
	s.info.RKey = binary.LittleEndian.Uint32(b[31:])
	s.info.Addr = binary.LittleEndian.Uint64(b[35:])
	s.info.Len = int(binary.LittleEndian.Uint32(b[43:]))
	s.slots = int(binary.LittleEndian.Uint32(b[47:]))
	s.per = int(binary.LittleEndian.Uint32(b[51:]))
	s.info.SrcPort = binary.LittleEndian.Uint16(b[55:])
	if s.slots < 2 || s.per < hdrRoom+64 || s.per%64 != 0 || s.info.Len != s.slots*s.per+fifoBytes {
		return fmt.Errorf("roce: the peer's receive ring is %d slots of %d bytes in %d bytes", s.slots, s.per, s.info.Len)
	}
	return nil
}

// exchange sends mine over ctrl and receives the peer's.
func exchange(ctx context.Context, ctrl transport.Link, mine *setup) (setup, error) {
	var out, in [setupSize]byte
	mine.encode(out[:])
	sent := make(chan error, 1)
	go func() { h := setupHdr; sent <- ctrl.Send(ctx, &h, out[:]) }()
	var peer setup
	rh := setupHdr // Recv writes the arrival it got into its header (a copy: Send reads setupHdr meanwhile)
	err := ctrl.Recv(ctx, &rh, in[:], nil)
	if serr := <-sent; err == nil {
		err = serr
	}
	if err == nil {
		err = peer.decode(in[:])
	}
	return peer, err
}

// Dial makes the RoCE link to ctrl's peer in dom (its device and memory),
// exchanging what the queue pairs need over ctrl (the peer calls Dial at
// the same time). When this side has no device (dom nil) or the peer has none, it returns ctrl
// itself and fallback true: both sides then go on over TCP. On success ctrl
// belongs to the returned link (its control channel); on error Dial closes
// what it made but not ctrl.
func Dial(ctx context.Context, ctrl transport.Link, dom *Domain, o Options) (l transport.Link, fallback bool, err error) {
	l, fallback, err = dial(ctx, ctrl, dom, o, true)
	if err == nil && !fallback {
		go l.(*Link).watchCtrl()
	}
	return l, fallback, err
}

// DialQPs is Dial making n links to the peer, their queue pairs on the
// device's source ports 0 to n-1 (rdma.WithSourcePorts): NCCL_IB_QPS_PER_CONNECTION's
// queue pairs, separate flows to switches that spread flows over paths
// (ECMP). The first link keeps ctrl as its control channel; the others
// have none, so whoever holds them must close them all once one fails (a
// rails.Link does): the peer's goodbye, or its loss, reaches the first.
// With fallback, links is ctrl alone.
func DialQPs(ctx context.Context, ctrl transport.Link, dom *Domain, o Options, n int) (links []transport.Link, fallback bool, err error) {
	if n < 1 {
		return nil, false, fmt.Errorf("roce: %d queue pairs per connection", n)
	}
	for k := range n {
		o.Source = k
		l, fb, err := dial(ctx, ctrl, dom, o, k == 0)
		if err != nil {
			for _, l := range links {
				l.(*Link).release() // ctrl stays the caller's, as Dial leaves it
			}
			return nil, false, err
		}
		if fb {
			return []transport.Link{ctrl}, true, nil
		}
		links = append(links, l)
	}
	go links[0].(*Link).watchCtrl()
	return links, false, nil
}

// dial is Dial; the link keeps ctrl as its control channel if keep.
func dial(ctx context.Context, ctrl transport.Link, dom *Domain, o Options, keep bool) (l transport.Link, fallback bool, err error) {
	if err := o.fill(); err != nil {
		return nil, false, err
	}
	peer := ctrl.Peer()
	var mine setup
	var rl *Link
	if dom != nil {
		if rl, err = newLink(dom, peer, o); err != nil {
			return nil, false, err
		}
		mine = setup{hasDev: true, info: rl.qp.LocalInfo(rl.rmr), slots: rl.rslots, per: rl.rslot}
	}
	theirs, err := exchange(ctx, ctrl, &mine)
	if err == nil && rl != nil && theirs.hasDev {
		err = rl.connect(ctx, ctrl, mine.info, theirs, o, keep)
	}
	if err != nil || rl == nil || !theirs.hasDev {
		if rl != nil {
			rl.release()
		}
		if err != nil {
			return nil, false, fmt.Errorf("roce: connecting to peer %d: %w", peer, err)
		}
		return ctrl, true, nil
	}
	return rl, false, nil
}

func newLink(dom *Domain, peer int, o Options) (*Link, error) {
	l := &Link{peer: peer, dom: dom, rslots: o.Slots, rslot: o.SlotBytes,
		sendSig: make(chan struct{}, 1), recvSig: make(chan struct{}, 1), done: make(chan struct{})}
	pd := dom.pd
	l.cq = dom.dev.CreateCQ()
	var err error
	if l.qp, err = pd.CreateQP(l.cq, l.cq, rdma.QPSource(o.Source)); err != nil {
		return nil, err
	}
	if l.rmr, err = pd.RegMR(make([]byte, o.Slots*o.SlotBytes+fifoBytes), rdma.AccessLocalWrite|rdma.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if l.amr, err = pd.RegMR(make([]byte, fifoBytes), rdma.AccessLocalWrite); err != nil {
		return nil, err
	}
	l.lens = make([]int, o.Slots)
	return l, nil
}

// connect brings the queue pair to RTS towards the peer, posts the
// receive WRs, and waits until the peer has done the same (a WRITE that
// reaches a queue pair not yet ready to receive would be dropped and only
// resent at the retry timeout).
func (l *Link) connect(ctx context.Context, ctrl transport.Link, local rdma.ConnInfo, peer setup, o Options, keep bool) error {
	l.pslots, l.pslot, l.raddr, l.rkey = peer.slots, peer.per, peer.info.Addr, peer.info.RKey
	var err error
	if l.smr, err = l.rmr.PD().RegMR(make([]byte, l.pslots*l.pslot), rdma.AccessLocalWrite); err != nil {
		return err
	}
	if err := l.qp.Connect(local, peer.info, rdma.ConnectOptions{Timeout: o.Timeout, RetryCnt: o.RetryCnt, Access: rdma.AccessRemoteWrite}); err != nil {
		return err
	}
	// Every WRITE with immediate the peer sends (data: at most our slots
	// outstanding; credits: at most its slots) consumes one receive WR; one
	// is posted again for each completion.
	for i := 0; i < l.rslots+l.pslots+2; i++ {
		if err := l.qp.PostRecv(rdma.RecvWR{ID: uint64(i)}); err != nil {
			return err
		}
	}
	var ready setup
	ready.hasDev = true
	ready.info = local
	ready.slots, ready.per = l.rslots, l.rslot
	if _, err := exchange(ctx, ctrl, &ready); err != nil {
		return err
	}
	l.name = fmt.Sprintf("NET/RoCE/v%d qpn %#x to %v qpn %#x, %d x %d KiB slots", l.rmr.PD().Device().Version(),
		local.QPN, peerAddr(peer.info), peer.info.QPN, l.pslots, l.pslot>>10)
	if local.SrcPort != 0 {
		l.name += fmt.Sprintf(", source port %d", local.SrcPort)
	}
	l.sendTimer, l.recvTimer = time.NewTimer(time.Hour), time.NewTimer(time.Hour)
	l.sendTimer.Stop()
	l.recvTimer.Stop()
	if keep {
		l.ctrl = ctrl // watched once the peer is done with it (watchCtrl)
	}
	return nil
}

func peerAddr(ci rdma.ConnInfo) string {
	return rdma.GIDString(ci.GID, ci.Port)
}

// watchCtrl waits on the control link: nothing but its end arrives there.
func (l *Link) watchCtrl() {
	var buf [1]byte
	err := l.ctrl.Recv(context.Background(), &transport.Header{Op: 0xfd, Root: -1, Bytes: 1}, buf[:], nil)
	var pe *transport.PeerError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	l.fail(err)
}

// fail records why the link stopped (the first reason wins), wakes every
// waiter, and reports a lost rank to the watcher.
func (l *Link) fail(cause error) {
	l.mu.Lock()
	first := l.err == nil
	if first {
		l.err = cause
	}
	watch := l.watch
	l.mu.Unlock()
	if !first {
		return
	}
	l.once.Do(func() { close(l.done) })
	if watch != nil && errors.Is(cause, transport.ErrPeerLost) {
		watch(&transport.PeerError{Peer: l.peer, Op: "link", Err: cause})
	}
}

// WatchLoss implements transport.LossWatcher: the control link's end, or
// the queue pair's failure, naming a lost rank calls f.
func (l *Link) WatchLoss(f func(error)) {
	l.mu.Lock()
	l.watch = f
	err := l.err
	l.mu.Unlock()
	if err != nil && errors.Is(err, transport.ErrPeerLost) && !errors.Is(err, transport.ErrClosed) {
		f(&transport.PeerError{Peer: l.peer, Op: "link", Err: err})
	}
}

// MarkLost implements transport.LossMarker through the control link.
func (l *Link) MarkLost(lost int) {
	if m, ok := l.ctrl.(transport.LossMarker); ok {
		m.MarkLost(lost)
	}
}

// Peer implements transport.Link.
func (l *Link) Peer() int { return l.peer }

// Name implements transport.Link.
func (l *Link) Name() string { return l.name }

// ZeroCopied counts the payload bytes sent straight from registered
// buffers (no staging copy).
func (l *Link) ZeroCopied() uint64 { return l.zeroCopied.Load() }

// DirectReceived counts the payload bytes the peer wrote straight into
// this side's registered receive buffers (no copy out of the ring).
func (l *Link) DirectReceived() uint64 { return l.direct.Load() }

// Counters implements transport.Link.
func (l *Link) Counters() *transport.Counters { return &l.counters }

// drainTime bounds how long Close waits for the chunks already sent.
const drainTime = 2 * time.Second

// Close implements transport.Link. A Send returns once its data is in the
// staging slots, not once it has arrived, so Close first waits (up to
// drainTime) until the peer has acknowledged every chunk sent: a rank that
// sends its last message and closes must not take it back (moving the
// queue pair to the error state flushes what is not acknowledged yet), as
// closing a TCP socket does not discard what is in its send buffer.
func (l *Link) Close() error {
	deadline := time.Now().Add(drainTime)
	for {
		l.mu.Lock()
		l.progressLocked()
		done := l.sendDone >= l.posted && l.ddone >= l.dposted || l.err != nil
		l.mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		select {
		case <-l.cq.Ready():
		case <-l.done:
		case <-time.After(time.Millisecond):
		}
	}
	return l.Abort(transport.NoLostRank)
}

// Abort implements transport.Link: the control link carries the reason.
func (l *Link) Abort(lost int) error {
	l.mu.Lock()
	l.local = true
	l.mu.Unlock()
	l.fail(transport.ErrClosed)
	if l.ctrl != nil {
		l.ctrl.Abort(lost)
	}
	l.release()
	return nil
}

// release moves the queue pair to the error state (its WRs flush),
// removes it from the device (whose timer visits every queue pair it
// holds: a long-lived goccl aggd closes one per hop of every job) and
// deregisters the memory, so that nothing the peer still sends lands.
func (l *Link) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.qp != nil {
		l.qp.Modify(&qp.Attr{State: qp.StateErr}, qp.AttrState)
		l.qp.Destroy()
	}
	if l.rmr != nil {
		l.rmr.Dereg()
	}
	if l.smr != nil {
		l.smr.Dereg()
	}
	if l.amr != nil {
		l.amr.Dereg()
	}
}

// Roles of await.
const (
	roleSend   = iota
	roleRecv   // a chunk has arrived
	roleFlush  // every chunk posted has been acknowledged
	roleDirect // fewer than directWindow direct WRITEs unacknowledged
)

// A direct send (into the buffer the receiver advertised) posts WRITEs of
// directPiece bytes, at most directWindow of them unacknowledged. One WRITE
// of the whole rest, as before, held everything this side posted after it
// until it was done: on 2 hosts with 250 Mbit/s links a 2-rank ring
// AllReduce of 64 MiB in registered buffers took 3.0-3.3 s against 2.4 s
// unregistered, the peer's credits and advert queued behind a 32 MiB
// WRITE; now 2.3 s. 2 MiB in flight covers a round trip of 1.6 ms at the
// device's 1.25 GB/s on loopback (BenchmarkStream's direct variants kept
// their speed) and of 65 ms at 250 Mbit/s; 4 MiB (1 MiB pieces) held an
// 8 MiB AllReduce's 4 MiB steps whole again (324-357 ms against 290).
// Links with larger slots (Options) get as many bytes in flight as their
// slots hold.
const (
	directPiece  = 512 << 10
	directWindow = 4
)

// progressLocked takes the completions there are and signals the side
// they concern.
func (l *Link) progressLocked() {
	for {
		n := l.cq.PollInto(l.wcs[:])
		if n == 0 {
			return
		}
		var toSend, toRecv bool
		for i := range l.wcs[:n] {
			wc := &l.wcs[i]
			if wc.Status != qp.StatusSuccess {
				if l.err == nil {
					l.err = &transport.LostError{Rank: l.peer, Via: -1,
						Cause: fmt.Errorf("RoCE queue pair %#x: %v (the peer's device stopped acknowledging)", l.qp.QPN(), wc.Status)}
					l.once.Do(func() { close(l.done) })
					// The group learns now, not when the control
					// connection's keep-alive gives up (a partition leaves
					// the peer's process alive for seconds more).
					if watch := l.watch; watch != nil {
						go watch(&transport.PeerError{Peer: l.peer, Op: "link", Err: l.err})
					}
				}
				continue
			}
			switch wc.Opcode {
			case qp.CQRecvWriteImm:
				l.qp.PostRecv(rdma.RecvWR{ID: wc.WRID})
				switch wc.Imm & immKind {
				case immData:
					l.lens[l.arrived%uint64(l.rslots)] = int(wc.Imm & immValue)
					l.arrived++
					toRecv = true
				case immDirect:
					l.lens[l.arrived%uint64(l.rslots)] = -1
					l.arrived++
					toRecv = true
				case immCredit:
					l.credits += uint64(wc.Imm & immValue)
					toSend = true
				}
			default:
				switch {
				case wc.WRID&creditWR != 0:
				case wc.WRID&directWR != 0:
					l.ddone++
					toSend = true
				case wc.WRID&advertWR != 0:
					if wc.WRID&1 != 0 {
						l.adone++ // the second WRITE of the pair
					}
				default:
					l.sendDone++
					toSend = true
				}
			}
		}
		if toSend {
			signal(l.sendSig)
		}
		if toRecv {
			signal(l.recvSig)
		}
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// readyLocked reports whether role can go on: a free slot at the peer and
// a free staging slot (send), a chunk in the ring (recv).
func (l *Link) readyLocked(role int) bool {
	switch role {
	case roleRecv:
		return l.consumed < l.arrived
	case roleFlush:
		return l.sendDone >= l.posted && l.ddone >= l.dposted
	case roleDirect:
		// At least as many bytes in flight as the staged path's slots.
		return l.dposted-l.ddone < uint64(max(directWindow, l.pslots*l.pslot/directPiece))
	}
	return l.sent < l.credits+uint64(l.pslots) && l.sent < l.sendDone+uint64(l.pslots)
}

// await waits until role can go on, the link fails, or ctx ends: it spins
// briefly, then sleeps on the completion queue, the other side's signal,
// the link's end and ctx.
func (l *Link) await(ctx context.Context, role int) error {
	sig, timer := l.sendSig, l.sendTimer // roleFlush is the sender's too
	if role == roleRecv {
		sig, timer = l.recvSig, l.recvTimer
	}
	start := time.Now()
	for {
		l.mu.Lock()
		l.progressLocked()
		ok, err, local := l.readyLocked(role), l.err, l.local
		l.mu.Unlock()
		if ok && (err == nil || role == roleRecv && !local) {
			return nil // a chunk that arrived before the peer closed is read, as on TCP
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Since(start) < spin {
			runtime.Gosched()
			continue
		}
		var tc <-chan time.Time
		if dl, has := ctx.Deadline(); has {
			d := time.Until(dl)
			if d <= 0 {
				return context.DeadlineExceeded
			}
			timer.Reset(d)
			tc = timer.C
		}
		select {
		case <-l.cq.Ready():
		case <-sig:
		case <-l.done:
		case <-ctx.Done():
		case <-tc:
		}
		if tc != nil {
			timer.Stop()
		}
	}
}

// callErr wraps a failure of op: ctx's error, or why the link ended.
func (l *Link) callErr(op string, err error) error {
	return &transport.PeerError{Peer: l.peer, Op: op, Err: err}
}

// postErr is the error of a call whose post failed: why the link ended
// when it has (Close moves the queue pair to the error state, so a call
// racing with it fails to post), else the post's error, closing the link.
func (l *Link) postErr(op string, err error) error {
	l.mu.Lock()
	l.progressLocked() // a failed queue pair's completions say why
	ended := l.err
	l.mu.Unlock()
	if ended != nil {
		return l.callErr(op, ended)
	}
	l.Close()
	return l.callErr(op, err)
}

// start fails a call that may not begin: the link has ended or ctx is
// done. A Recv on a link the peer closed goes on to read what arrived
// before (await decides).
func (l *Link) start(ctx context.Context, op string) error {
	l.mu.Lock()
	err := l.err
	if err != nil && op == "recv" && !l.local {
		err = nil
	}
	l.mu.Unlock()
	if err == nil {
		err = ctx.Err()
		if err == nil {
			if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
				err = context.DeadlineExceeded
			}
		}
	}
	if err != nil {
		return l.callErr(op, err)
	}
	return nil
}

// chunks is how many chunks a message of n payload bytes takes.
func (l *Link) chunks(n int) int {
	first := l.pslot - hdrRoom
	if n <= first {
		return 1
	}
	return 1 + (n-first+l.pslot-1)/l.pslot
}

// Send implements transport.Link.
func (l *Link) Send(ctx context.Context, h *transport.Header, buf []byte) error {
	if err := l.start(ctx, "send"); err != nil {
		return err
	}
	if h.Bytes != uint64(len(buf)) {
		return l.callErr("send", fmt.Errorf("header says %d bytes, buffer holds %d", h.Bytes, len(buf)))
	}
	if err := l.send(ctx, h, buf); err != nil {
		return err
	}
	l.sentMsgs++
	return nil
}

// zeroCopyMin is the smallest registered message sent without staging:
// below it the copy costs less than waiting for the acknowledgement.
const zeroCopyMin = 64 << 10

func (l *Link) send(ctx context.Context, h *transport.Header, buf []byte) error {
	if len(buf) >= zeroCopyMin {
		if reg, off := l.dom.acquire(buf); reg != nil {
			defer reg.release()
			return l.sendRegistered(ctx, h, buf, reg, off)
		}
	}
	return l.sendStaged(ctx, h, buf)
}

// sendStaged sends buf through the staging slots: it returns once the
// last chunk is posted.
func (l *Link) sendStaged(ctx context.Context, h *transport.Header, buf []byte) error {
	return l.sendGather(ctx, h, buf, nil)
}

// sendv sends the message a then b (h.Bytes == len(a)+len(b)), staged.
func (l *Link) sendv(ctx context.Context, h *transport.Header, a, b []byte) error {
	if err := l.start(ctx, "send"); err != nil {
		return err
	}
	if h.Bytes != uint64(len(a)+len(b)) {
		return l.callErr("send", fmt.Errorf("header says %d bytes, buffers hold %d", h.Bytes, len(a)+len(b)))
	}
	if err := l.sendGather(ctx, h, a, b); err != nil {
		return err
	}
	l.sentMsgs++
	return nil
}

// sendGather is sendStaged of the message a then b.
func (l *Link) sendGather(ctx context.Context, h *transport.Header, a, b []byte) error {
	off, total := 0, len(a)+len(b)
	for first := true; first || off < total; first = false {
		if err := l.await(ctx, roleSend); err != nil {
			if !first {
				l.Close() // part of the message went: the stream is broken
			}
			return l.callErr("send", err)
		}
		slot := int(l.sent % uint64(l.pslots))
		st := l.smr.Bytes()[slot*l.pslot : (slot+1)*l.pslot]
		n := 0
		if first {
			h.Encode(st)
			n = hdrRoom
		}
		k := 0
		if off < len(a) {
			k = copy(st[n:], a[off:])
		}
		if off+k >= len(a) {
			k += copy(st[n+k:], b[off+k-len(a):])
		}
		off += k
		n += k
		err := l.qp.PostSend(rdma.SendWR{ID: l.sent, Opcode: qp.WRWriteImm, MR: l.smr, Offset: slot * l.pslot, Length: n,
			RemoteAddr: l.raddr + uint64(slot*l.pslot), RKey: l.rkey, Imm: immData | uint32(n)})
		if err != nil {
			return l.postErr("send", err)
		}
		l.sent++
		l.mu.Lock()
		l.posted++
		l.mu.Unlock()
	}
	l.counters.AddSent(total)
	return nil
}

// sendRegistered sends buf, which lies at offset off of reg: the header
// alone from a staging slot, then the payload by RDMA WRITEs straight from
// the registered buffer; it returns once every chunk is acknowledged (the
// device reads the buffer until then, also to resend). A failure part-way
// closes the link, which stops the device reading. Once the receiver has
// advertised a registered buffer for this message (advert), the rest of
// the payload goes by WRITEs into that buffer (directPiece each, a window
// of them in flight) and a zero-length WRITE with immediate (immDirect) in
// the next slot tells the receiver it has landed (RC delivers it after the
// payload): no copy at either end.
func (l *Link) sendRegistered(ctx context.Context, h *transport.Header, buf []byte, reg *Region, off int) error {
	pos := -1 // -1: the header
	for pos < len(buf) {
		if err := l.await(ctx, roleSend); err != nil {
			if pos >= 0 {
				l.Close()
			}
			return l.callErr("send", err)
		}
		slot := int(l.sent % uint64(l.pslots))
		wr := rdma.SendWR{ID: l.sent, Opcode: qp.WRWriteImm, RemoteAddr: l.raddr + uint64(slot*l.pslot), RKey: l.rkey}
		if pos < 0 {
			h.Encode(l.smr.Bytes()[slot*l.pslot:])
			wr.MR, wr.Offset, wr.Length = l.smr, slot*l.pslot, hdrRoom
			wr.Imm = immData | hdrRoom
			pos = 0
		} else if addr, rkey, ok := l.advert(len(buf)); ok {
			// The rest in WRITEs of directPiece, at most directWindow of
			// them unacknowledged: the queue pair sends its work requests
			// in order, so what this side posts meanwhile (its own adverts
			// and the credits of what it receives) waits behind at most
			// the window, not behind the whole message.
			for pos < len(buf) {
				if err := l.await(ctx, roleDirect); err != nil {
					l.Close()
					return l.callErr("send", err)
				}
				n := min(len(buf)-pos, directPiece)
				err := l.qp.PostSend(rdma.SendWR{ID: directWR | l.dposted, Opcode: qp.WRWrite, MR: reg.mr, Offset: off + pos,
					Length: n, RemoteAddr: addr + uint64(pos), RKey: rkey})
				if err != nil {
					return l.postErr("send", err)
				}
				l.mu.Lock()
				l.dposted++
				l.mu.Unlock()
				pos += n
			}
			wr.Imm = immDirect
		} else {
			n := min(len(buf)-pos, l.pslot)
			wr.MR, wr.Offset, wr.Length = reg.mr, off+pos, n
			wr.Imm = immData | uint32(n)
			pos += n
		}
		if err := l.qp.PostSend(wr); err != nil {
			return l.postErr("send", err)
		}
		l.sent++
		l.mu.Lock()
		l.posted++
		l.mu.Unlock()
	}
	if err := l.await(ctx, roleFlush); err != nil {
		l.mu.Lock()
		peerClosed := !l.local && errors.Is(err, transport.ErrClosed) && !errors.Is(err, transport.ErrPeerLost)
		l.mu.Unlock()
		// Close either way: the queue pair must stop reading buf, which
		// it would go on resending from while acknowledgements are due.
		l.Close()
		if !peerClosed {
			return l.callErr("send", err)
		}
		// The peer closed its link after the whole message was posted (it
		// received it and was done, acknowledgements in flight): a
		// success, as a TCP send whose peer then closes.
	}
	l.counters.AddSent(len(buf))
	l.zeroCopied.Add(uint64(len(buf)))
	return nil
}

// advert returns the buffer the receiver advertised for the message being
// sent (the sentMsgs-th), if it has and its length is n.
func (l *Link) advert(n int) (addr uint64, rkey uint32, ok bool) {
	k := int(l.sentMsgs % fifoLen)
	e := l.rmr.Bytes()[l.rslots*l.rslot+k*fifoEntry:][:fifoEntry]
	if atomic.LoadUint64((*uint64)(unsafe.Pointer(&e[24]))) != l.sentMsgs+1 {
		return 0, 0, false
	}
	if binary.LittleEndian.Uint64(e[16:]) != uint64(n) {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(e[0:]), binary.LittleEndian.Uint32(e[8:]), true
}

// advertise tells the peer that the next message (the recvMsgs-th) may
// be written straight into buf, registered in reg at offset off: two
// WRITEs into the peer's advert FIFO. It reports false, having posted
// nothing, while fifoLen-1 earlier adverts are not yet acknowledged.
func (l *Link) advertise(reg *Region, off int, buf []byte) (bool, error) {
	l.mu.Lock()
	l.progressLocked()
	a := l.aposted
	busy := a-l.adone >= fifoLen-1
	l.mu.Unlock()
	if busy {
		return false, nil
	}
	src := int(a%fifoLen) * fifoEntry // the source entry: free, as fewer than fifoLen adverts are in flight
	e := l.amr.Bytes()[src : src+fifoEntry]
	binary.LittleEndian.PutUint64(e[0:], reg.mr.Addr()+uint64(off))
	binary.LittleEndian.PutUint32(e[8:], reg.mr.RKey())
	binary.LittleEndian.PutUint64(e[16:], uint64(len(buf)))
	binary.LittleEndian.PutUint64(e[24:], l.recvMsgs+1)
	dst := l.raddr + uint64(l.pslots*l.pslot+int(l.recvMsgs%fifoLen)*fifoEntry)
	err := l.qp.PostSend(rdma.SendWR{ID: advertWR | a<<1, Opcode: qp.WRWrite, MR: l.amr, Offset: src, Length: 24, RemoteAddr: dst, RKey: l.rkey})
	if err == nil {
		err = l.qp.PostSend(rdma.SendWR{ID: advertWR | a<<1 | 1, Opcode: qp.WRWrite, MR: l.amr, Offset: src + 24, Length: 8, RemoteAddr: dst + 24, RKey: l.rkey})
	}
	if err != nil {
		return false, l.postErr("recv", err)
	}
	l.mu.Lock()
	l.aposted++
	l.mu.Unlock()
	return true, nil
}

// TrySend implements transport.Link: it sends when the whole message fits
// the peer's free slots and the free staging slots now.
func (l *Link) TrySend(h *transport.Header, buf []byte) (bool, error) {
	ctx := context.Background()
	if err := l.start(ctx, "send"); err != nil {
		return false, err
	}
	if h.Bytes != uint64(len(buf)) {
		return false, l.callErr("send", fmt.Errorf("header says %d bytes, buffer holds %d", h.Bytes, len(buf)))
	}
	need := uint64(l.chunks(len(buf)))
	l.mu.Lock()
	l.progressLocked()
	free := min(l.credits+uint64(l.pslots), l.sendDone+uint64(l.pslots)) - l.sent
	l.mu.Unlock()
	if need > free {
		return false, nil
	}
	// Staged even from a registered buffer: a registered send waits for
	// the acknowledgements.
	if err := l.sendStaged(ctx, h, buf); err != nil {
		return true, err
	}
	l.sentMsgs++
	return true, nil
}

// Recv implements transport.Link. A receive of at least zeroCopyMin bytes
// without reduce into a registered buffer advertises the buffer to the
// sender first, who may then write the payload into it directly; such a
// receive that fails closes the link (the sender may still be writing).
func (l *Link) Recv(ctx context.Context, want *transport.Header, buf []byte, reduce transport.ReduceFunc) error {
	if err := l.start(ctx, "recv"); err != nil {
		return err
	}
	advertised := false
	if reduce == nil && len(buf) >= zeroCopyMin {
		if reg, off := l.dom.acquire(buf); reg != nil {
			defer reg.release()
			var err error
			if advertised, err = l.advertise(reg, off, buf); err != nil {
				return err
			}
		}
	}
	_, err := l.recv(ctx, want, buf, nil, reduce, advertised)
	if err != nil && advertised {
		l.Close()
	}
	return err
}

// RecvAny receives the next message whatever its header says (for byte
// streams over a link: Stream) into buf if its payload fits, else into
// spare, and returns the payload: a prefix of buf or of spare. A payload
// that fits neither fails the call and closes the link.
func (l *Link) RecvAny(ctx context.Context, buf, spare []byte) ([]byte, error) {
	if err := l.start(ctx, "recv"); err != nil {
		return nil, err
	}
	return l.recv(ctx, nil, buf, spare, nil, false)
}

// recv receives a message into buf and returns the bytes filled: its
// header must match want, or, want nil, its payload fit buf or spare
// (which is then cut to it).
func (l *Link) recv(ctx context.Context, want *transport.Header, buf, spare []byte, reduce transport.ReduceFunc, advertised bool) ([]byte, error) {
	off := 0
	for first := true; first || off < len(buf); first = false {
		if err := l.await(ctx, roleRecv); err != nil {
			if !first {
				l.Close()
			}
			return nil, l.callErr("recv", err)
		}
		slot := int(l.consumed % uint64(l.rslots))
		l.mu.Lock()
		n := l.lens[slot]
		l.mu.Unlock()
		if n < 0 { // the rest of the payload is in buf
			if first || !advertised {
				l.Close()
				return nil, l.callErr("recv", errors.New("roce: the peer wrote into a buffer this side did not advertise"))
			}
			l.direct.Add(uint64(len(buf) - off))
			off = len(buf)
		} else {
			data := l.rmr.Bytes()[slot*l.rslot : slot*l.rslot+n]
			if first {
				var got transport.Header
				if n < hdrRoom {
					l.Close()
					return nil, l.callErr("recv", fmt.Errorf("roce: a first chunk of %d bytes has no header", n))
				}
				if err := got.Decode(data); err != nil {
					l.Close()
					return nil, l.callErr("recv", err)
				}
				if want == nil {
					if got.Bytes > uint64(len(buf)) {
						if got.Bytes > uint64(len(spare)) {
							l.Close()
							return nil, l.callErr("recv", fmt.Errorf("roce: a message of %d bytes for buffers of %d and %d", got.Bytes, len(buf), len(spare)))
						}
						buf = spare
					}
					buf = buf[:got.Bytes]
				} else if err := transport.Check(l.peer, want, &got); err != nil {
					l.Close()
					return nil, err
				} else {
					if want.Arrival != got.Arrival { // no write when equal: callers may share want with a Send
						want.Arrival = got.Arrival
					}
				}
				data = data[hdrRoom:]
			}
			if len(data) > len(buf)-off {
				l.Close()
				return nil, l.callErr("recv", fmt.Errorf("roce: peer sent %d more bytes than its header said", len(data)-(len(buf)-off)))
			}
			if reduce == nil {
				copy(buf[off:], data)
			} else if len(data) > 0 {
				reduce(buf[off:off+len(data)], data)
			}
			off += len(data)
		}
		l.consumed++
		l.unacked++
		if l.unacked >= (l.rslots+1)/2 {
			if err := l.returnSlots(); err != nil {
				return nil, err
			}
		}
	}
	if err := l.returnSlots(); err != nil {
		return nil, err
	}
	l.recvMsgs++
	l.counters.AddReceived(len(buf))
	return buf, nil
}

// returnSlots gives the peer the consumed slots back.
func (l *Link) returnSlots() error {
	if l.unacked == 0 {
		return nil
	}
	err := l.qp.PostSend(rdma.SendWR{ID: creditWR | l.consumed, Opcode: qp.WRWriteImm, RemoteAddr: l.raddr, RKey: l.rkey,
		Imm: immCredit | uint32(l.unacked)})
	if err != nil {
		return l.postErr("recv", err)
	}
	l.unacked = 0
	return nil
}
