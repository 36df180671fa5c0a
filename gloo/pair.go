package gloo

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// op is one posted send or receive on a pair.
type op struct {
	slot uint64
	buf  []byte
	send bool
	n    int // bytes received (receives)
	done chan struct{}
	fin  atomic.Bool
	err  error
}

func newOp(slot uint64, buf []byte, send bool) *op {
	return &op{slot: slot, buf: buf, send: send, done: make(chan struct{})}
}

// complete finishes o with err (nil: success); only the first call counts.
func (o *op) complete(err error) {
	if o.fin.CompareAndSwap(false, true) {
		o.err = err
		close(o.done)
	}
}

// frame is one message queued for the pair's writer.
type frame struct {
	hdr     [preambleLen]byte
	payload []byte
	op      *op // the send a data frame completes, nil for notifications
}

// pair is the connection to one peer rank and the matching of its messages,
// mirroring gloo's tcp::Pair for unbound buffers: a send announces itself
// (NOTIFY_SEND_READY), a receive announces itself with its size
// (NOTIFY_RECV_READY), and the data (SEND_UNBOUND_BUFFER) travels only once
// the receiver has announced a receive, so data never arrives unexpected.
// Sends and receives of one slot match in the order they were posted.
//
// A reader goroutine handles what arrives; a writer goroutine sends what
// is queued, so the reader never blocks on a write (the peer's reader may
// be waiting for ours). Any failure fails the whole pair: every posted
// operation completes with the error, the connection is closed.
type pair struct {
	rank, peer int
	conn       net.Conn
	maxLen     uint64 // largest data message accepted

	mu         sync.Mutex
	err        error
	pendSend   map[uint64][]*op // sends waiting for the peer's NOTIFY_RECV_READY
	pendRecv   map[uint64][]*op // announced receives waiting for data, in order
	remoteSend map[uint64]int   // the peer's NOTIFY_SEND_READY not yet matched by a receive here
	remoteRecv map[uint64]int   // the peer's NOTIFY_RECV_READY not yet matched by a send here
	expectSend map[uint64]int   // receives posted before the peer's NOTIFY_SEND_READY came
	txq        []*frame
	wake       chan struct{}
	stop       chan struct{}
	wg         sync.WaitGroup

	sent, received atomic.Uint64 // payload bytes
}

func newPair(rank, peer int, conn net.Conn, maxLen uint64) *pair {
	p := &pair{
		rank: rank, peer: peer, conn: conn, maxLen: maxLen,
		pendSend:   map[uint64][]*op{},
		pendRecv:   map[uint64][]*op{},
		remoteSend: map[uint64]int{},
		remoteRecv: map[uint64]int{},
		expectSend: map[uint64]int{},
		wake:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
	}
	p.wg.Add(2)
	go p.readLoop()
	go p.writeLoop()
	return p
}

// enqueue queues a message; the caller holds p.mu.
func (p *pair) enqueue(opcode uint64, slot uint64, length int, payload []byte, o *op) {
	f := &frame{payload: payload, op: o}
	n := uint64(preambleLen)
	if opcode == opSendUnboundBuffer {
		n += uint64(len(payload))
	}
	h := preamble{nbytes: n, opcode: opcode, slot: slot, length: uint64(length)}
	h.put(f.hdr[:])
	p.txq = append(p.txq, f)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// postSend posts a send of buf on slot (gloo's Pair::send of an unbound buffer).
func (p *pair) postSend(slot uint64, buf []byte) *op {
	o := newOp(slot, buf, true)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		o.complete(p.err)
		return o
	}
	if p.remoteRecv[slot] > 0 {
		// The peer announced its receive already: announce and send at once
		// (the peer still counts the announcement).
		dec(p.remoteRecv, slot)
		p.enqueue(opNotifySendReady, slot, len(buf), nil, nil)
		p.enqueue(opSendUnboundBuffer, slot, len(buf), buf, o)
		return o
	}
	p.pendSend[slot] = append(p.pendSend[slot], o)
	p.enqueue(opNotifySendReady, slot, len(buf), nil, nil)
	return o
}

// postRecv posts a receive of exactly len(buf) bytes on slot.
func (p *pair) postRecv(slot uint64, buf []byte) *op {
	o := newOp(slot, buf, false)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		o.complete(p.err)
		return o
	}
	if p.remoteSend[slot] > 0 {
		dec(p.remoteSend, slot)
	} else {
		p.expectSend[slot]++
	}
	p.pendRecv[slot] = append(p.pendRecv[slot], o)
	p.enqueue(opNotifyRecvReady, slot, len(buf), nil, nil)
	return o
}

func dec(m map[uint64]int, k uint64) {
	if m[k] <= 1 {
		delete(m, k)
	} else {
		m[k]--
	}
}

func pop(m map[uint64][]*op, k uint64) *op {
	q := m[k]
	if len(q) == 0 {
		return nil
	}
	o := q[0]
	if len(q) == 1 {
		delete(m, k)
	} else {
		q[0] = nil
		m[k] = q[1:]
	}
	return o
}

// fail ends the pair with err (the first error wins): the connection is
// closed, every posted operation completes with the error. It does not wait
// for the goroutines; see shutdown.
func (p *pair) fail(err error) {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return
	}
	p.err = err
	var ops []*op
	for _, m := range []map[uint64][]*op{p.pendSend, p.pendRecv} {
		for k, q := range m {
			ops = append(ops, q...)
			delete(m, k)
		}
	}
	for _, f := range p.txq {
		if f.op != nil {
			ops = append(ops, f.op)
		}
	}
	p.txq = nil
	close(p.stop)
	p.mu.Unlock()
	p.conn.Close()
	for _, o := range ops {
		o.complete(err)
	}
}

// shutdown fails the pair with err and waits until its goroutines have
// ended, so that nothing reads into or writes from a caller's buffer after.
func (p *pair) shutdown(err error) {
	p.fail(err)
	p.wg.Wait()
}

// failure returns the pair's error, nil while it works.
func (p *pair) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *pair) protoErr(format string, args ...any) error {
	return &ProtocolError{Rank: p.rank, Peer: p.peer, Msg: fmt.Sprintf(format, args...)}
}

func (p *pair) readLoop() {
	defer p.wg.Done()
	br := bufio.NewReaderSize(p.conn, 64<<10)
	var hb [preambleLen]byte
	for {
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			p.fail(p.ioErr("read", err))
			return
		}
		h, err := parsePreamble(hb[:], p.maxLen)
		if err != nil {
			p.fail(p.protoErr("%v", err))
			return
		}
		switch h.opcode {
		case opNotifySendReady:
			p.mu.Lock()
			if p.expectSend[h.slot] > 0 {
				dec(p.expectSend, h.slot)
			} else {
				p.remoteSend[h.slot]++
			}
			p.mu.Unlock()
		case opNotifyRecvReady:
			p.mu.Lock()
			if o := pop(p.pendSend, h.slot); o != nil {
				if uint64(len(o.buf)) > h.length {
					p.mu.Unlock()
					err := p.protoErr("on %s the peer receives %d bytes, this rank sends %d: the ranks called different operations or sizes", slotName(h.slot), h.length, len(o.buf))
					o.complete(err)
					p.fail(err)
					return
				}
				p.enqueue(opSendUnboundBuffer, h.slot, len(o.buf), o.buf, o)
			} else {
				p.remoteRecv[h.slot]++
			}
			p.mu.Unlock()
		case opSendUnboundBuffer:
			p.mu.Lock()
			o := pop(p.pendRecv, h.slot)
			p.mu.Unlock()
			if o == nil {
				p.fail(p.protoErr("%d bytes of data on %s, for which no receive was announced", h.length, slotName(h.slot)))
				return
			}
			if h.length != uint64(len(o.buf)) {
				err := p.protoErr("on %s the peer sends %d bytes, this rank receives %d: the ranks called different operations or sizes", slotName(h.slot), h.length, len(o.buf))
				o.complete(err)
				p.fail(err)
				return
			}
			if _, err := io.ReadFull(br, o.buf); err != nil {
				err = p.ioErr("read", err)
				o.complete(err)
				p.fail(err)
				return
			}
			p.received.Add(h.length)
			o.n = len(o.buf)
			o.complete(nil)
		}
	}
}

func (p *pair) writeLoop() {
	defer p.wg.Done()
	var batch []*frame
	var bufs net.Buffers
	for {
		p.mu.Lock()
		batch = append(batch[:0], p.txq...)
		clear(p.txq)
		p.txq = p.txq[:0]
		p.mu.Unlock()
		if len(batch) == 0 {
			select {
			case <-p.wake:
				continue
			case <-p.stop:
				return
			}
		}
		// Gather consecutive frames into one writev; complete the sends
		// after the write that carried their last byte.
		bufs = bufs[:0]
		for _, f := range batch {
			bufs = append(bufs, f.hdr[:])
			if len(f.payload) > 0 {
				bufs = append(bufs, f.payload)
			}
		}
		w := bufs
		if _, err := w.WriteTo(p.conn); err != nil {
			err = p.ioErr("write", err)
			for _, f := range batch {
				if f.op != nil {
					f.op.complete(err)
				}
			}
			p.fail(err)
			return
		}
		for i, f := range batch {
			if f.op != nil {
				p.sent.Add(uint64(len(f.payload)))
				f.op.complete(nil)
			}
			batch[i] = nil
		}
	}
}

// ioErr wraps a connection error: a peer gone (EOF, reset) is a
// *PeerLostError; after fail closed the connection, the pair's first error.
func (p *pair) ioErr(what string, err error) error {
	if e := p.failure(); e != nil {
		return e
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err) {
		return &PeerLostError{Rank: p.rank, Peer: p.peer, Cause: err}
	}
	return &PeerLostError{Rank: p.rank, Peer: p.peer, Cause: fmt.Errorf("%s: %w", what, err)}
}
