package xfer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/internal/closed"
	"github.com/goccl/goccl/internal/trace"
	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/topo"
)

// Errors. A failed request's error is an *Error wrapping one of these or
// the cause (a connection's error, a context's).
var (
	ErrClosed        = closed.New("xfer: agent closed")
	ErrRegistration  = errors.New("xfer: bad registration")
	ErrNotRegistered = errors.New("xfer: memory not registered")
	ErrInUse         = errors.New("xfer: memory in use")
	ErrUnknownAgent  = errors.New("xfer: unknown agent")
	ErrInvalidated   = errors.New("xfer: agent invalidated")
	ErrMetadata      = errors.New("xfer: bad metadata")
	ErrNoStore       = errors.New("xfer: no metadata store (Options.Store)")
	ErrProtocol      = errors.New("xfer: protocol error")
	ErrChecksum      = errors.New("xfer: checksum mismatch")
	ErrPeerLost      = errors.New("xfer: peer agent lost")
	ErrBadRequest    = errors.New("xfer: bad request")
)

// Error is a request's failure: the agent it was with, the request's
// number on this agent and what it was.
type Error struct {
	Agent string // the remote agent
	Req   uint64 // the request's number (XferReq.ID)
	What  string // "WRITE of 3 descriptors, 12582912 bytes"
	Err   error
}

func (e *Error) Error() string {
	return fmt.Sprintf("xfer: request %d (%s) with agent %q: %v", e.Req, e.What, e.Agent, e.Err)
}
func (e *Error) Unwrap() error { return e.Err }

// Options configure an agent; the zero value is usable.
type Options struct {
	// Listen is the address the agent serves transfers on (default ":0",
	// every interface, a free port). Its metadata advertises the addresses
	// of the host's interfaces (127.0.0.1 first for agents on the same host).
	Listen string
	// Advertise, when set, replaces the advertised addresses.
	Advertise []string
	// Store is where SendLocalMD publishes and FetchRemoteMD finds
	// metadata (goccl's TCP store or etcd: OpenStore). A request to an
	// agent whose metadata is not loaded fetches it from here. Nil: the
	// store GOCCL_XFER_STORE names, if any, opened on first use.
	Store rendezvous.Store
	// Streams is the number of TCP connections per peer (default 2);
	// chunks of a request are striped over them.
	Streams int
	// ChunkBytes is the largest piece a descriptor is cut into (default
	// 1 MiB; at most 64 MiB).
	ChunkBytes int
	// Checksum adds a CRC-32C to every TCP chunk, verified where it lands.
	Checksum bool
	// NoSHM keeps agents on the same host on TCP (no mapping of their
	// Alloc memory).
	NoSHM bool
	// PeerTimeout is how long a connection may go without an
	// acknowledgement or keep-alive reply before its peer counts as lost
	// (TCP_USER_TIMEOUT; default 10 s).
	PeerTimeout time.Duration
	// Workers is the number of goroutines doing local and shared-memory
	// copies and file I/O (default 2).
	Workers int
	// RDMA is this agent's soft RoCE device (rdma.Open), nil for none.
	// DRAM transfers to agents that have one too go by RDMA READ and WRITE
	// between the registered regions instead of TCP.
	RDMA *rdma.Device
	// RDMATimeout is the queue pairs' ACK timeout exponent (4.096 µs × 2^N;
	// default 16: 268 ms, as GOCCL_IB_TIMEOUT).
	RDMATimeout uint8
	// HostID overrides the host identity (topo.HostID) that decides
	// whether a peer is on the same host.
	HostID string
	// TraceFile, when set, is a Chrome trace file (the form of
	// GOCCL_TRACE_FILE; %p is the process id, %h the host name) to which
	// the agent writes every request that ends: the operation (READ,
	// WRITE), its bytes, post to end, the lanes it took ("path": rdma,
	// tcp, shm, local) and the remote agent; `goccl doctor trace` reads
	// it. The file is complete once Close returns.
	TraceFile string
}

func (o *Options) fill() error {
	if o.Listen == "" {
		o.Listen = ":0"
	}
	if o.Streams == 0 {
		o.Streams = 2
	}
	if o.ChunkBytes == 0 {
		o.ChunkBytes = 1 << 20
	}
	if o.PeerTimeout == 0 {
		o.PeerTimeout = 10 * time.Second
	}
	if o.Workers == 0 {
		o.Workers = 2
	}
	if o.RDMATimeout == 0 {
		o.RDMATimeout = 16
	}
	switch {
	case o.Streams < 1 || o.Streams > 64:
		return fmt.Errorf("xfer: Options.Streams %d (want 1-64)", o.Streams)
	case o.ChunkBytes < 4096 || o.ChunkBytes > maxChunk:
		return fmt.Errorf("xfer: Options.ChunkBytes %d (want 4096 to %d)", o.ChunkBytes, maxChunk)
	case o.Workers < 1 || o.Workers > 256:
		return fmt.Errorf("xfer: Options.Workers %d (want 1-256)", o.Workers)
	}
	if o.HostID == "" {
		o.HostID = topo.HostID("")
	}
	return nil
}

// Agent is a transfer agent (nixlAgent).
type Agent struct {
	name   string
	o      Options
	hostID string
	ln     net.Listener
	addrs  []string
	dev    *rdma.Device // nil: no RoCE
	pd     *rdma.PD

	mu     sync.RWMutex // reg, regGen
	reg    registry
	regGen uint64

	pmu   sync.Mutex
	peers map[string]*peer

	nmu        sync.Mutex
	notifs     map[string][][]byte
	notifBytes int           // queued
	notifCh    chan struct{} // closed and replaced when a notification arrives

	reqSeq  uint64       // under pmu
	postMu  sync.RWMutex // posts hold it read; Close waits for them before unmapping
	work    *workQueue
	local   *memLane // copies within this agent's memory and files
	shm     *memLane // copies into and out of same-host peers' mapped memory
	done    chan struct{}
	closeMu sync.Mutex
	conns   map[net.Conn]struct{} // accepted, under closeMu
	wg      sync.WaitGroup
	ctr     counters
	rec     *trace.Recorder // Options.TraceFile's; nil: none

	smu      sync.Mutex
	ownStore rendezvous.Store // opened from GOCCL_XFER_STORE
}

// NewAgent starts an agent named name (unique among the agents that talk
// to each other; at most 255 bytes) serving on o.Listen.
func NewAgent(name string, o Options) (*Agent, error) {
	if name == "" || len(name) > maxName || strings.ContainsAny(name, "/\x00") {
		return nil, fmt.Errorf("xfer: agent name %q (want 1-%d bytes, no '/')", name, maxName)
	}
	if err := o.fill(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("xfer: agent %q: listen %s: %w", name, o.Listen, err)
	}
	a := &Agent{name: name, o: o, hostID: o.HostID, ln: ln, peers: map[string]*peer{},
		notifs: map[string][][]byte{}, notifCh: make(chan struct{}), done: make(chan struct{}),
		conns: map[net.Conn]struct{}{}}
	if o.RDMA != nil {
		a.dev, a.pd = o.RDMA, o.RDMA.AllocPD()
	}
	a.addrs = o.Advertise
	if len(a.addrs) == 0 {
		a.addrs = advertised(ln.Addr().(*net.TCPAddr))
	}
	a.work = newWorkQueue(o.Workers, &a.wg)
	a.local = &memLane{w: a.work, ctr: &a.ctr.local, name: "local"}
	a.shm = &memLane{w: a.work, ctr: &a.ctr.shm, name: "shm"}
	if o.TraceFile != "" {
		if a.rec, err = trace.New(os.Getpid(), 1, trace.ExpandPath(o.TraceFile, os.Getpid())); err != nil {
			ln.Close()
			return nil, fmt.Errorf("xfer: agent %q: %w", name, err)
		}
	}
	a.wg.Add(1)
	go a.accept()
	return a, nil
}

// advertised lists the addresses peers may dial: the listener's own when
// it is bound to one, else loopback then every up interface's IPv4 address.
func advertised(l *net.TCPAddr) []string {
	port := fmt.Sprint(l.Port)
	if !l.IP.IsUnspecified() {
		return []string{net.JoinHostPort(l.IP.String(), port)}
	}
	out := []string{net.JoinHostPort("127.0.0.1", port)}
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		as, _ := ifc.Addrs()
		for _, ad := range as {
			if ipn, ok := ad.(*net.IPNet); ok && ipn.IP.To4() != nil {
				out = append(out, net.JoinHostPort(ipn.IP.String(), port))
			}
		}
	}
	return out
}

// Name is the agent's name.
func (a *Agent) Name() string { return a.name }

// Addr is the address the agent listens on.
func (a *Agent) Addr() net.Addr { return a.ln.Addr() }

func (a *Agent) isClosed() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// Close stops the agent: requests in flight fail with ErrClosed, peers'
// connections are closed, Alloc memory is unmapped.
func (a *Agent) Close() error {
	a.closeMu.Lock()
	if a.isClosed() {
		a.closeMu.Unlock()
		return nil
	}
	close(a.done)
	a.ln.Close()
	// Posts in progress (an inline copy reads registered memory) end
	// before anything is unmapped; later ones see done.
	a.closeMu.Unlock()
	a.postMu.Lock()
	a.postMu.Unlock()
	a.closeMu.Lock()
	for c := range a.conns {
		c.Close()
	}
	a.closeMu.Unlock()
	a.pmu.Lock()
	peers := a.peers
	a.peers = map[string]*peer{}
	a.pmu.Unlock()
	for _, p := range peers {
		p.fail(ErrClosed)
	}
	a.work.close(ErrClosed)
	a.wg.Wait()
	a.smu.Lock()
	if a.ownStore != nil {
		a.ownStore.Close()
	}
	a.smu.Unlock()
	a.mu.Lock()
	for _, r := range a.reg.regs {
		r.dead = true
		r.free()
	}
	a.reg.regs = nil
	a.mu.Unlock()
	return a.rec.Close()
}

// GetNotifs returns the notifications that arrived since the last call,
// by the name of the agent that sent them, in arrival order per agent.
func (a *Agent) GetNotifs() map[string][][]byte {
	a.nmu.Lock()
	defer a.nmu.Unlock()
	if len(a.notifs) == 0 {
		return nil
	}
	n := a.notifs
	a.notifs = map[string][][]byte{}
	a.notifBytes = 0
	return n
}

// WaitNotif waits until a notification from agent from equal to msg has
// arrived and takes it out of the queue (the others stay for GetNotifs);
// it returns ctx's error once ctx is done.
func (a *Agent) WaitNotif(ctx context.Context, from string, msg []byte) error {
	for {
		a.nmu.Lock()
		q := a.notifs[from]
		for i, m := range q {
			if string(m) == string(msg) {
				a.notifBytes -= len(m)
				a.notifs[from] = append(q[:i:i], q[i+1:]...)
				if len(a.notifs[from]) == 0 {
					delete(a.notifs, from)
				}
				a.nmu.Unlock()
				return nil
			}
		}
		ch := a.notifCh
		a.nmu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("xfer: agent %q: wait for notification %q from %q: %w", a.name, msg, from, ctx.Err())
		case <-a.done:
			return fmt.Errorf("xfer: agent %q: wait for notification: %w", a.name, ErrClosed)
		}
	}
}

// NextNotif waits for the oldest notification from agent from not yet
// taken and returns it (removing it from the queue); ctx's error once ctx
// is done.
func (a *Agent) NextNotif(ctx context.Context, from string) ([]byte, error) {
	for {
		a.nmu.Lock()
		if q := a.notifs[from]; len(q) > 0 {
			m := q[0]
			a.notifBytes -= len(m)
			if len(q) == 1 {
				delete(a.notifs, from)
			} else {
				a.notifs[from] = q[1:]
			}
			a.nmu.Unlock()
			return m, nil
		}
		ch := a.notifCh
		a.nmu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("xfer: agent %q: wait for a notification from %q: %w", a.name, from, ctx.Err())
		case <-a.done:
			return nil, fmt.Errorf("xfer: agent %q: wait for a notification: %w", a.name, ErrClosed)
		}
	}
}

// maxQueuedNotif bounds the notification bytes waiting to be taken
// (GetNotifs, WaitNotif, NextNotif): a peer that sends more while they
// pile up loses its connection.
const maxQueuedNotif = 256 << 20

func (a *Agent) pushNotif(from string, msg []byte) bool {
	a.nmu.Lock()
	if a.notifBytes+len(msg) > maxQueuedNotif {
		a.nmu.Unlock()
		return false
	}
	a.notifBytes += len(msg)
	a.notifs[from] = append(a.notifs[from], msg)
	close(a.notifCh)
	a.notifCh = make(chan struct{})
	a.nmu.Unlock()
	return true
}

// accept serves incoming connections: each carries one initiator's frames.
func (a *Agent) accept() {
	defer a.wg.Done()
	for {
		c, err := a.ln.Accept()
		if err != nil {
			return
		}
		a.closeMu.Lock()
		if a.isClosed() {
			a.closeMu.Unlock()
			c.Close()
			return
		}
		a.conns[c] = struct{}{}
		a.wg.Add(1)
		a.closeMu.Unlock()
		go func() {
			defer a.wg.Done()
			a.serve(c)
			a.closeMu.Lock()
			delete(a.conns, c)
			a.closeMu.Unlock()
			c.Close()
		}()
	}
}

// serve is the target side of one connection.
func (a *Agent) serve(c net.Conn) {
	tuneConn(c, a.o.PeerTimeout)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(c, 64<<10)
	from, err := readHello(br)
	if err != nil || writeHello(c, a.name) != nil {
		return
	}
	c.SetDeadline(time.Time{})
	out := &answers{c: c, slab: make([]byte, 0, 64<<10)}
	defer out.release()
	var qp *rdma.QP // the queue pair the initiator connected through here (one at a time)
	defer func() {
		if qp != nil {
			qp.Destroy()
		}
	}()
	var hb [frameSize]byte
	var f frame
	var bounce []byte
	for {
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			return
		}
		if err := f.decode(hb[:]); err != nil || !f.request() {
			return // a stream out of step: nothing after it can be trusted
		}
		switch f.kind {
		case fNotif:
			msg := make([]byte, f.len)
			if _, err := io.ReadFull(br, msg); err != nil {
				return
			}
			if !a.pushNotif(from, msg) {
				return // the receiver is not taking its notifications
			}
			continue
		case fWrite:
			err = a.serveWrite(br, &f, &bounce)
			if err == nil {
				a.ctr.served.Add(f.len)
				out.frame(&frame{kind: fAck, token: f.token}, nil)
			} else if !errors.Is(err, errConn) {
				out.fail(f.token, err)
				err = nil
			}
		case fRead:
			err = a.serveRead(out, &f, &bounce)
		case fQP:
			msg := make([]byte, f.len)
			if _, err := io.ReadFull(br, msg); err != nil {
				return
			}
			q, info, qerr := a.serveQP(msg)
			if qerr != nil {
				out.fail(f.token, qerr)
			} else {
				if qp != nil { // the initiator replaced it (its own failed)
					qp.Destroy()
				}
				qp = q
				out.frame(&frame{kind: fQPInfo, token: f.token, len: uint64(len(info))}, info)
			}
		}
		if err != nil {
			return
		}
		// Answers go out together while more requests are already here.
		if br.Buffered() < frameSize || out.full() {
			if out.flush() != nil {
				return
			}
		}
	}
}

// answers collects a target's answers for one writev: small frames copied
// into a slab, large payloads referenced where they lie (their
// registrations held busy until written).
type answers struct {
	c     net.Conn
	slab  []byte
	iov   [][]byte
	held  []*region
	bytes int
}

func (o *answers) full() bool {
	return o.bytes >= 4<<20 || len(o.iov) >= 256 || cap(o.slab)-len(o.slab) < 2*frameSize+maxSmall
}

// maxSmall is the largest payload copied into the slab.
const maxSmall = 4096

// frame adds f and its payload; a payload above maxSmall in a registration
// r (nil: copied) is sent from where it lies.
func (o *answers) frame(f *frame, payload []byte) {
	n := len(o.slab)
	o.slab = o.slab[:n+frameSize]
	f.encode(o.slab[n:])
	if len(payload) <= maxSmall {
		o.slab = append(o.slab, payload...)
		o.iov = append(o.iov, o.slab[n:len(o.slab):len(o.slab)])
	} else {
		o.iov = append(o.iov, o.slab[n:n+frameSize:n+frameSize], payload)
	}
	o.bytes += frameSize + len(payload)
}

func (o *answers) fail(token uint64, e error) {
	msg := e.Error()
	if len(msg) > maxSmall {
		msg = msg[:maxSmall]
	}
	o.frame(&frame{kind: fErr, token: token, len: uint64(len(msg))}, []byte(msg))
}

func (o *answers) flush() error {
	if len(o.iov) == 0 {
		return nil
	}
	bufs := net.Buffers(o.iov)
	_, err := bufs.WriteTo(o.c)
	clear(o.iov)
	o.iov, o.slab, o.bytes = o.iov[:0], o.slab[:0], 0
	o.release()
	return err
}

func (o *answers) release() {
	for _, r := range o.held {
		r.busy.Add(-1)
	}
	clear(o.held)
	o.held = o.held[:0]
}

// errConn marks a failure of the connection itself (the serve loop ends).
var errConn = errors.New("connection failed")

// serveWrite stores an fWrite's payload. A chunk into memory that is not
// registered is read and dropped, and answered with an error.
func (a *Agent) serveWrite(br *bufio.Reader, f *frame, bounce *[]byte) error {
	d := Desc{Addr: f.addr, Len: f.len, DevID: f.dev}
	r := a.acquire(f.typ, d)
	if r == nil {
		if _, err := io.CopyN(io.Discard, br, int64(f.len)); err != nil {
			return errConn
		}
		return fmt.Errorf("%w: agent %q has no %s registration holding %s", ErrNotRegistered, a.name, f.typ, d)
	}
	defer r.busy.Add(-1)
	var dst []byte
	if r.typ == DRAM {
		dst = r.bytes(d)
	} else {
		dst = growBounce(bounce, int(f.len))
	}
	if _, err := io.ReadFull(br, dst); err != nil {
		return errConn
	}
	if f.flags&flagCRC != 0 {
		if got := crc(dst); got != f.crc {
			return fmt.Errorf("%w: %d bytes at %s: CRC-32C %08x, sender's %08x", ErrChecksum, f.len, d, got, f.crc)
		}
	}
	if r.typ == FILE {
		return fileIO(r, d, dst, true)
	}
	return nil
}

// serveRead answers an fRead with the bytes, or with an error frame. DRAM
// is sent from where it lies (its registration held until written); a
// file's bytes go through the bounce buffer, so they are written at once.
func (a *Agent) serveRead(out *answers, f *frame, bounce *[]byte) error {
	d := Desc{Addr: f.addr, Len: f.len, DevID: f.dev}
	r := a.acquire(f.typ, d)
	if r == nil {
		out.fail(f.token, fmt.Errorf("%w: agent %q has no %s registration holding %s", ErrNotRegistered, a.name, f.typ, d))
		return nil
	}
	var src []byte
	if r.typ == DRAM {
		src = r.bytes(d)
		out.held = append(out.held, r)
	} else {
		defer r.busy.Add(-1)
		src = growBounce(bounce, int(f.len))
		if err := fileIO(r, d, src, false); err != nil {
			out.fail(f.token, err)
			return nil
		}
	}
	a.ctr.served.Add(f.len)
	reply := frame{kind: fData, token: f.token, len: f.len}
	if f.flags&flagCRC != 0 {
		reply.flags, reply.crc = flagCRC, crc(src)
	}
	out.frame(&reply, src)
	if r.typ == FILE && len(src) > maxSmall {
		return out.flush() // the bounce buffer is reused by the next request
	}
	return nil
}

func growBounce(b *[]byte, n int) []byte {
	if cap(*b) < n {
		*b = alignedBuf(n)
	}
	return (*b)[:n]
}

// Stats are an agent's byte counters since it started.
type Stats struct {
	TCPBytes    uint64 // payload this agent's requests moved over TCP (both directions)
	RDMABytes   uint64 // bytes its requests moved by RDMA READ and WRITE
	SHMBytes    uint64 // bytes its requests copied into or out of same-host peers' mapped memory
	LocalBytes  uint64 // bytes its requests copied within its own memory and files
	ServedBytes uint64 // payload it served as a target (stored and sent) over TCP
	Requests    uint64 // requests completed without error
	Failed      uint64 // requests that failed
}

type counters struct {
	tcp, rdma, shm, local, served, reqs, failed atomic.Uint64
}

// Stats returns the agent's counters.
func (a *Agent) Stats() Stats {
	c := &a.ctr
	return Stats{TCPBytes: c.tcp.Load(), RDMABytes: c.rdma.Load(), SHMBytes: c.shm.Load(), LocalBytes: c.local.Load(),
		ServedBytes: c.served.Load(), Requests: c.reqs.Load(), Failed: c.failed.Load()}
}

// RemoteRegion is one registration in a peer's loaded metadata.
type RemoteRegion struct {
	Type MemType
	Desc Desc
	// MemFD is the peer's memfd number of Alloc memory (in allocation
	// order), 0 for other memory.
	MemFD int
}

// RemoteRegions lists the registrations agent name's loaded metadata
// announces (nil when it is not loaded).
func (a *Agent) RemoteRegions(name string) []RemoteRegion {
	a.pmu.Lock()
	p := a.peers[name]
	a.pmu.Unlock()
	if p == nil {
		return nil
	}
	var out []RemoteRegion
	for _, r := range p.metadata().Regions {
		out = append(out, RemoteRegion{Type: r.Type, Desc: Desc{Addr: r.Addr, Len: r.Len, DevID: r.Dev}, MemFD: r.MemFD})
	}
	return out
}

// GenNotif sends msg to agent remote as a notification (a plain message
// between agents, nixlAgent::genNotif), returning once it is written.
func (a *Agent) GenNotif(ctx context.Context, remote string, msg []byte) error {
	p, err := a.peerFor(ctx, remote)
	if err != nil {
		return err
	}
	if len(msg) > maxNotif {
		return fmt.Errorf("%w: agent %q: notification of %d bytes (at most %d)", ErrBadRequest, a.name, len(msg), maxNotif)
	}
	r := &XferReq{a: a, p: p, remote: remote, what: "notification"}
	r.notif = &chunk{req: r, frame: fNotif, msg: append([]byte(nil), msg...)}
	a.pmu.Lock()
	a.reqSeq++
	r.id = a.reqSeq
	a.pmu.Unlock()
	if err := a.sendNotif(r); err != nil {
		return err
	}
	return r.Wait(ctx)
}

// sendNotif queues a notification-only request (as a post: Close waits).
func (a *Agent) sendNotif(r *XferReq) error {
	a.postMu.RLock()
	defer a.postMu.RUnlock()
	if a.isClosed() {
		return r.fail(ErrClosed)
	}
	if err := r.p.usable(); err != nil {
		return r.fail(err)
	}
	r.mu.Lock()
	r.done = make(chan struct{})
	r.mu.Unlock()
	r.state.Store(int32(InProgress))
	r.remaining.Store(-1)
	r.p.control(r.notif)
	return nil
}
