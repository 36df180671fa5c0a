package xfer

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/goccl/goccl/internal/config"
	"golang.org/x/sys/unix"
)

// peer is a remote agent as this agent knows it: its metadata, its
// streams (TCP connections, dialed on first use) and its Alloc regions
// mapped here when it is on this host.
type peer struct {
	a    *Agent
	name string

	mu      sync.Mutex
	md      *metadata
	err     error // set once: lost, invalidated, agent closed
	streams []*stream
	maps    map[mapKey]*mapping
	rq      *rdmaQP // the queue pair, made on first use
}

// rdma returns the peer's queue pair (made, not yet connected, on first use).
func (p *peer) rdma() *rdmaQP {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rq == nil {
		p.rq = &rdmaQP{p: p, pending: map[uint64]*chunk{}}
		if p.err != nil {
			p.rq.err = p.err
		}
	}
	return p.rq
}

// resetRDMA fails rq's work with err and drops it: the next request
// connects a new queue pair.
func (p *peer) resetRDMA(rq *rdmaQP, err error) {
	p.mu.Lock()
	if p.rq == rq {
		p.rq = nil
	}
	p.mu.Unlock()
	rq.fail(err)
}

func (a *Agent) newPeer(md *metadata) *peer {
	p := &peer{a: a, name: md.Name, md: md, maps: map[mapKey]*mapping{}}
	p.streams = make([]*stream, a.o.Streams)
	for i := range p.streams {
		p.streams[i] = &stream{p: p, idx: i, wake: make(chan struct{}, 1), pending: map[uint64]*chunk{}}
	}
	return p
}

func (a *Agent) loadPeer(md *metadata) error {
	a.pmu.Lock()
	if a.isClosed() {
		a.pmu.Unlock()
		return fmt.Errorf("xfer: agent %q: load metadata of %q: %w", a.name, md.Name, ErrClosed)
	}
	old := a.peers[md.Name]
	if old != nil && old.usable() == nil && slices.Equal(old.metadata().Addrs, md.Addrs) && old.metadata().PID == md.PID {
		// A re-registration: the connections stay; mappings of regions
		// the new metadata no longer has go (once no request holds them).
		keep := map[mapKey]bool{}
		for _, ri := range md.Regions {
			keep[keyOf(&ri)] = true
		}
		var gone []*mapping
		old.mu.Lock()
		old.md = md
		for k, m := range old.maps {
			if !keep[k] {
				delete(old.maps, k)
				gone = append(gone, m)
			}
		}
		old.mu.Unlock()
		a.pmu.Unlock()
		for _, m := range gone {
			m.kill()
		}
		return nil
	}
	a.peers[md.Name] = a.newPeer(md)
	a.pmu.Unlock()
	if old != nil {
		old.fail(fmt.Errorf("%w: agent %q loaded again with other addresses", ErrInvalidated, md.Name))
	}
	return nil
}

// peerFor returns the peer named name, fetching its metadata from the
// store when it is not loaded.
func (a *Agent) peerFor(ctx context.Context, name string) (*peer, error) {
	a.pmu.Lock()
	p := a.peers[name]
	a.pmu.Unlock()
	if p != nil {
		return p, nil
	}
	if a.o.Store == nil && config.XferStore.Get() == "" {
		return nil, fmt.Errorf("xfer: agent %q: %w %q (load its metadata, or give Options.Store or %s)", a.name, ErrUnknownAgent, name, config.XferStore.Name)
	}
	if err := a.FetchRemoteMD(ctx, name); err != nil {
		return nil, err
	}
	a.pmu.Lock()
	p = a.peers[name]
	a.pmu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("xfer: agent %q: %w %q", a.name, ErrUnknownAgent, name)
	}
	return p, nil
}

func (p *peer) metadata() *metadata {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.md
}

func (p *peer) usable() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// fail ends the peer: queued and unanswered chunks fail with err, the
// streams close, the mappings go once no request holds them.
func (p *peer) fail(err error) {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return
	}
	p.err = err
	maps := p.maps
	p.maps = nil
	rq := p.rq
	p.mu.Unlock()
	if rq != nil {
		rq.fail(err)
	}
	for _, s := range p.streams {
		s.fail(err)
	}
	for _, m := range maps {
		m.kill()
	}
}

// enqueue hands c to its stream (never blocks); the stream dials on first use.
func (p *peer) enqueue(c *chunk) {
	p.streams[c.stream].enqueue(c)
}

// mapped maps the peer's Alloc region ri here when the peer is on this
// host (and Options.NoSHM is off); nil when it cannot be.
func (p *peer) mapped(ri *regionInfo) *mapping {
	if ri.Type != DRAM || ri.MemFD <= 0 || p.a.o.NoSHM {
		return nil
	}
	k := keyOf(ri)
	p.mu.Lock()
	if p.err != nil || p.md.Host != p.a.hostID {
		p.mu.Unlock()
		return nil
	}
	if m := p.maps[k]; m != nil {
		p.mu.Unlock()
		return m
	}
	pid := p.md.PID
	p.mu.Unlock()
	m, err := mapRemote(pid, ri) // mmap with MAP_POPULATE: not under p.mu
	if err != nil {
		return nil // TCP then
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if other := p.maps[k]; other != nil || p.err != nil || !p.md.announces(k) {
		m.kill()
		return other // nil when the peer failed or dropped the region meanwhile
	}
	p.maps[k] = m
	// Copies into the mapping need no connection, but the first stream
	// is how this agent notices the peer is gone.
	p.streams[0].start()
	return m
}

// mapKey names a peer's Alloc region: address, size and memfd inode (a
// region deregistered and allocated again may get the same address).
type mapKey struct {
	addr, len, ino uint64
	off            int64
}

func keyOf(ri *regionInfo) mapKey { return mapKey{ri.Addr, ri.Len, ri.Ino, ri.Off} }

// announces reports whether md still has the region k names.
func (md *metadata) announces(k mapKey) bool {
	for i := range md.Regions {
		if keyOf(&md.Regions[i]) == k {
			return true
		}
	}
	return false
}

// mapping is a peer's Alloc memory mapped into this process.
type mapping struct {
	addr, len uint64 // in the peer
	mem       []byte
	mu        sync.Mutex
	holds     int
	dead      bool
}

func mapRemote(pid int, ri *regionInfo) (*mapping, error) {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", pid, ri.MemFD), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Size < ri.Off || uint64(st.Size-ri.Off) < ri.Len || st.Ino != ri.Ino {
		return nil, fmt.Errorf("not the region: %d bytes, inode %d", st.Size, st.Ino)
	}
	mem, err := unix.Mmap(int(f.Fd()), ri.Off, int(ri.Len), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	return &mapping{addr: ri.Addr, len: ri.Len, mem: mem}, nil
}

func (m *mapping) bytes(d Desc) []byte {
	o := d.Addr - m.addr
	return m.mem[o : o+d.Len : o+d.Len]
}

func (m *mapping) hold() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead {
		return false
	}
	m.holds++
	return true
}

func (m *mapping) drop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.holds--
	if m.dead && m.holds == 0 && m.mem != nil {
		unix.Munmap(m.mem)
		m.mem = nil
	}
}

func (m *mapping) kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dead = true
	if m.holds == 0 && m.mem != nil {
		unix.Munmap(m.mem)
		m.mem = nil
	}
}

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

// enqueueAll hands cs to the stream in one go.
func (s *stream) enqueueAll(cs []*chunk) {
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
	var (
		batch []*chunk
		hdrs  []byte
		iov   [][]byte
		done  []*chunk // notifications: done once written
	)
	crcOn := a.o.Checksum
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
		batch = append(batch[:0], s.q...)
		clear(s.q)
		s.q = s.q[:0]
		if need := len(batch) * frameSize; cap(hdrs) < need {
			hdrs = make([]byte, need)
		}
		hdrs = hdrs[:len(batch)*frameSize]
		iov, done = iov[:0], done[:0]
		for i, ch := range batch {
			f := frame{}
			h := hdrs[i*frameSize : (i+1)*frameSize]
			switch ch.kind {
			case kNotif:
				f.kind, f.len = fNotif, uint64(len(ch.notif))
				f.encode(h)
				iov = append(iov, h, ch.notif)
				done = append(done, ch)
				continue
			case kQP:
				s.nextTok++
				s.pending[s.nextTok] = ch
				f = frame{kind: fQP, token: s.nextTok, len: uint64(len(ch.notif))}
				f.encode(h)
				iov = append(iov, h, ch.notif)
				continue
			}
			s.nextTok++
			s.pending[s.nextTok] = ch
			f = frame{token: s.nextTok, typ: ch.rtyp, addr: ch.r.d.Addr, dev: ch.r.d.DevID, len: ch.r.d.Len}
			if ch.req.op == WRITE {
				f.kind = fWrite
				if crcOn {
					f.flags = flagCRC // the CRC itself below, outside the lock
				}
				f.encode(h)
				iov = append(iov, h, ch.l.mem)
			} else {
				f.kind = fRead
				if crcOn {
					f.flags = flagCRC
				}
				f.encode(h)
				iov = append(iov, h)
			}
		}
		s.mu.Unlock()
		if crcOn {
			for i, ch := range batch {
				if ch.kind == kTCP && ch.req.op == WRITE {
					binary.LittleEndian.PutUint32(hdrs[i*frameSize+4:], crc(ch.l.mem))
				}
			}
		}
		bufs := net.Buffers(iov)
		_, err := bufs.WriteTo(c)
		clear(iov)
		if err != nil {
			err = s.lostErr(err)
		}
		for _, ch := range done {
			ch.finish(err)
		}
		if err != nil {
			s.lost(err)
			return
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
		if bad := (f.kind == fAck && (ch.kind != kTCP || ch.req.op != WRITE)) ||
			(f.kind == fData && (ch.kind != kTCP || ch.req.op != READ)); bad {
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
			if ch.kind != kQP {
				err := fmt.Errorf("%w: a queue pair answer to a transfer", ErrProtocol)
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
