package xfer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// The TCP lane: one of a peer's streams (Options.Streams connections,
// dialed on first use), carrying the frames of wire.go. A request's TCP
// pieces are striped over them; stream 0 also carries notifications and
// queue pair setup, and tells a dead peer to the other lanes.

// stream is one TCP connection to a peer: a sender goroutine writes
// queued chunks' frames, a receiver goroutine matches answers to them.
type stream struct {
	p    *peer
	idx  int
	wake chan struct{}
	once sync.Once

	mu      sync.Mutex
	q       []*chunk
	pending map[uint64]*chunk // sent, awaiting an answer
	nextTok uint64
	conn    net.Conn
	err     error
}

// enqueue hands one message (a notification, a queue pair's description)
// to the stream.
func (s *stream) enqueue(c *chunk) {
	s.mu.Lock()
	if err := s.err; err != nil {
		s.mu.Unlock()
		c.finish(err)
		return
	}
	s.q = append(s.q, c)
	s.mu.Unlock()
	s.start()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// post hands cs to the stream in one go (the TCP lane's post).
func (s *stream) post(cs []*chunk) {
	s.mu.Lock()
	if err := s.err; err != nil {
		s.mu.Unlock()
		for _, c := range cs {
			c.finish(err)
		}
		return
	}
	s.q = append(s.q, cs...)
	s.mu.Unlock()
	s.start()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *stream) inline() bool   { return false }
func (s *stream) count(n uint64) { s.p.a.ctr.tcp.Add(n) }
func (s *stream) path() string   { return "tcp" }

// start dials the stream (once), in the background.
func (s *stream) start() {
	s.once.Do(func() {
		s.p.a.wg.Add(1)
		go s.run()
	})
}

// fail closes the stream: every queued or unanswered chunk fails with err.
func (s *stream) fail(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	q, pend, c := s.q, s.pending, s.conn
	s.q, s.pending = nil, nil
	s.mu.Unlock()
	if c != nil {
		c.Close()
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	for _, ch := range q {
		ch.finish(err)
	}
	for _, ch := range pend {
		ch.finish(err)
	}
}

// lost fails the whole peer: one broken stream means the peer is gone (or
// out of step).
func (s *stream) lost(err error) {
	s.p.fail(s.lostErr(err))
}

func (s *stream) lostErr(err error) error {
	return fmt.Errorf("%w: agent %q stream %d: %v", ErrPeerLost, s.p.name, s.idx, err)
}

// dial connects to the first of the peer's addresses that answers as it.
func (s *stream) dial() (net.Conn, *bufio.Reader, error) {
	md := s.p.metadata()
	a := s.p.a
	var errs []error
	for _, addr := range md.Addrs {
		if s.p.usable() != nil {
			return nil, nil, s.p.usable()
		}
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		tuneConn(c, a.o.PeerTimeout)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReaderSize(c, 64<<10)
		var name string
		if err = writeHello(c, a.name); err == nil {
			name, err = readHello(br)
		}
		if err == nil && name != s.p.name {
			err = fmt.Errorf("%s answered as agent %q", addr, name)
		}
		if err != nil {
			c.Close()
			errs = append(errs, err)
			continue
		}
		c.SetDeadline(time.Time{})
		return c, br, nil
	}
	return nil, nil, fmt.Errorf("cannot connect (%v)", errors.Join(errs...))
}

// run is the stream's sender; it starts the receiver once connected.
func (s *stream) run() {
	a := s.p.a
	defer a.wg.Done()
	c, br, err := s.dial()
	if err != nil {
		s.lost(err)
		return
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.conn = c
	s.mu.Unlock()
	a.wg.Add(1)
	go s.receive(br)
	var w frameWriter
	for {
		select {
		case <-s.wake:
		case <-a.done:
			s.fail(ErrClosed)
			return
		}
		s.mu.Lock()
		if s.err != nil {
			s.mu.Unlock()
			return
		}
		w.batch = append(w.batch[:0], s.q...)
		clear(s.q)
		s.q = s.q[:0]
		w.encode(s)
		s.mu.Unlock()
		if a.o.Checksum {
			w.checksums() // outside the lock
		}
		bufs := net.Buffers(w.iov)
		_, err := bufs.WriteTo(c)
		clear(w.iov)
		if err != nil {
			err = s.lostErr(err)
		}
		for _, ch := range w.done {
			ch.finish(err)
		}
		if err != nil {
			s.lost(err)
			return
		}
	}
}

// frameWriter turns a batch of a stream's chunks into one writev, its
// buffers reused from batch to batch.
type frameWriter struct {
	batch []*chunk
	hdrs  []byte
	iov   [][]byte
	done  []*chunk // notifications: done once written
}

// encode makes the batch's headers and payload list; requests get tokens
// and wait in s.pending for their answers (s.mu held).
func (w *frameWriter) encode(s *stream) {
	crcOn := s.p.a.o.Checksum
	if need := len(w.batch) * frameSize; cap(w.hdrs) < need {
		w.hdrs = make([]byte, need)
	}
	w.hdrs = w.hdrs[:len(w.batch)*frameSize]
	w.iov, w.done = w.iov[:0], w.done[:0]
	for i, ch := range w.batch {
		h := w.hdrs[i*frameSize : (i+1)*frameSize]
		f := frame{kind: ch.frame}
		if ch.frame == fNotif { // no answer: done once written
			f.len = uint64(len(ch.msg))
			f.encode(h)
			w.iov = append(w.iov, h, ch.msg)
			w.done = append(w.done, ch)
			continue
		}
		s.nextTok++
		s.pending[s.nextTok] = ch
		f.token = s.nextTok
		switch ch.frame {
		case fQP:
			f.len = uint64(len(ch.msg))
			f.encode(h)
			w.iov = append(w.iov, h, ch.msg)
		case fWrite, fRead:
			f.typ, f.addr, f.dev, f.len = ch.rtyp, ch.r.d.Addr, ch.r.d.DevID, ch.r.d.Len
			if crcOn {
				f.flags = flagCRC // a WRITE's CRC itself in checksums, outside the lock
			}
			f.encode(h)
			w.iov = append(w.iov, h)
			if ch.frame == fWrite {
				w.iov = append(w.iov, ch.l.mem)
			}
		}
	}
}

// checksums puts the CRC-32C of every WRITE's payload in its header.
func (w *frameWriter) checksums() {
	for i, ch := range w.batch {
		if ch.frame == fWrite {
			binary.LittleEndian.PutUint32(w.hdrs[i*frameSize+4:], crc(ch.l.mem))
		}
	}
}

// receive reads the target's answers.
func (s *stream) receive(br *bufio.Reader) {
	defer s.p.a.wg.Done()
	var hb [frameSize]byte
	var f frame
	for {
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			s.lost(err)
			return
		}
		if err := f.decode(hb[:]); err != nil || f.request() {
			s.lost(fmt.Errorf("%w: frame kind %d from the target", ErrProtocol, f.kind))
			return
		}
		s.mu.Lock()
		ch := s.pending[f.token]
		delete(s.pending, f.token)
		s.mu.Unlock()
		if ch == nil {
			s.lost(fmt.Errorf("%w: answer to unknown token %d", ErrProtocol, f.token))
			return
		}
		// The answer must fit the question (a foreign or broken target).
		if bad := (f.kind == fAck && ch.frame != fWrite) || (f.kind == fData && ch.frame != fRead) ||
			(f.kind == fQPInfo && ch.frame != fQP); bad {
			what := "queue pair setup"
			if ch.req != nil {
				what = ch.req.op.String()
			}
			err := fmt.Errorf("%w: answer of kind %d to a %s", ErrProtocol, f.kind, what)
			ch.finish(err)
			s.lost(err)
			return
		}
		switch f.kind {
		case fQPInfo:
			msg := make([]byte, f.len)
			if _, err := io.ReadFull(br, msg); err != nil {
				ch.finish(err)
				s.lost(err)
				return
			}
			ch.answer <- qpAnswer{info: msg}
		case fAck:
			ch.finish(nil)
		case fErr:
			msg := make([]byte, f.len)
			if _, err := io.ReadFull(br, msg); err != nil {
				ch.finish(err)
				s.lost(err)
				return
			}
			ch.finish(fmt.Errorf("agent %q refused: %s", s.p.name, msg))
		case fData:
			if f.len != uint64(len(ch.l.mem)) {
				err := fmt.Errorf("%w: %d bytes for a %d-byte read", ErrProtocol, f.len, len(ch.l.mem))
				ch.finish(err)
				s.lost(err)
				return
			}
			if _, err := io.ReadFull(br, ch.l.mem); err != nil {
				ch.finish(err)
				s.lost(err)
				return
			}
			var err error
			if f.flags&flagCRC != 0 {
				if got := crc(ch.l.mem); got != f.crc {
					err = fmt.Errorf("%w: %d bytes from %s: CRC-32C %08x, sender's %08x", ErrChecksum, f.len, ch.r.d, got, f.crc)
				}
			}
			ch.finish(err)
		}
	}
}
