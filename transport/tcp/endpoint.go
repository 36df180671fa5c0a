// Package tcp implements transport.Link over TCP, for ranks on different hosts.
//
// Every rank owns one Endpoint: a listening socket plus the bookkeeping that
// pairs accepted connections with peers. For each pair of ranks the lower rank
// dials the higher one: a link with nsocks sockets per direction is 2*nsocks
// connections, the first nsocks carrying data from the dialer to the
// listener, the others from the listener to the dialer (never both ways: see
// link). Every connection starts with a handshake: a hello (client to
// server), an ack that also challenges the client (server to client), the
// client's proof, and the server's verdict:
//
//	hello (176 bytes, little-endian)
//	  0  [8]   magic "GOCCLTCP"
//	  8  u16   protocol version (4)
//	 10  u16   connections in this link (2*nsocks: even, 2..128)
//	 12  u16   index of this connection in the link (0..connections-1)
//	 14  u16   length of the job id (0..128)
//	 16  i32   dialing rank
//	 20  i32   target rank
//	 24  [128] job id, zero padded
//	152  [16]  client nonce
//	168  u16   flags: bit 0 = the client has a job token, bit 1 = CRC32C
//	           per chunk (GOCCL_CHECKSUM), bit 2 = TLS after the handshake
//	170  u16   tag: which of several links between the two ranks (0 for
//	           Connect's; ConnectTag's own, e.g. a multi-rail link's
//	           control link or a lane moved to another rail)
//	172  u32   CRC-32 (IEEE) of bytes 0..171
//
//	ack (64 bytes, little-endian)
//	  0  [4]   magic "GCAK"
//	  4  u16   protocol version
//	  6  u16   status: 0 ok, else the reason for the rejection
//	  8  i32   rank of the accepting endpoint
//	 12  u16   flags: as in the hello, for the server
//	 14  u16   reserved, zero
//	 16  [16]  server nonce
//	 32  [32]  server proof: HMAC-SHA256(token, "goccl tcp server v1" || hello || ack[0:32])
//
//	proof (32 bytes): HMAC-SHA256(token, "goccl tcp client v1" || hello || ack[0:32])
//	verdict (1 byte): 0 accepted, 1 refused (then the server closes)
//
// Without a job token the proofs are zero and unchecked (package
// internal/auth). A connection whose hello is garbage (bad magic or checksum,
// short, or not sent within a few seconds) is closed without an answer; a
// well-formed hello for another job, rank or socket layout gets a rejecting
// ack and is closed; a wrong proof gets a refusing verdict. A dialer with a
// token refuses a listener that does not prove the same token. Refusals are
// counted and logged (WithLog). Both sides must agree on the link options
// (checksums, TLS): a hello whose flags differ gets a rejecting ack. With TLS
// (WithTLS) each connection runs a TLS 1.3 handshake right after the verdict,
// the dialer as the TLS client. Accepted connections are parked per (peer,
// socket index) until Connect for that peer collects them; a newer one for
// the same slot replaces the parked one, and one that its dialer closed or
// reset in the meantime is dropped (a refusal, logged), never a lost peer:
// without a token anybody can pass the handshake as any rank.
//
// After the handshake each message is the 40-byte transport.Header followed by
// its payload; see Link for how payloads are striped over several sockets.
package tcp

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goccl/goccl/internal/auth"
	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/transport"
)

const (
	helloMagic   = "GOCCLTCP"
	ackMagic     = "GCAK"
	helloVersion = 4 // 1: connections used both ways; 2: no job token; 3: 40-byte message headers
	helloSize    = 176
	ackSize      = 64
	proofSize    = auth.MACSize
	flagToken    = 1
	flagChecksum = 2
	flagTLS      = 4
	optionFlags  = flagChecksum | flagTLS

	labelTCPServer = "goccl tcp server v1"
	labelTCPClient = "goccl tcp client v1"
	maxJobID       = 128
	maxSocks       = 64           // sockets per direction
	maxConns       = 2 * maxSocks // connections per link

	// defaultHelloTimeout bounds how long an accepted connection may take to
	// present its hello, and (doubled) how long a dialer waits for the ack.
	defaultHelloTimeout = 5 * time.Second
)

// Ack status codes.
const (
	ackOK uint16 = iota
	ackBadVersion
	ackBadJob
	ackBadRank
	ackBadSocks
	ackBadOptions
)

// Verdicts after the client's proof.
const (
	verdictOK      = 0
	verdictRefused = 1
)

func ackReason(s uint16) string {
	switch s {
	case ackBadVersion:
		return "protocol version mismatch"
	case ackBadJob:
		return "job id mismatch"
	case ackBadRank:
		return "wrong rank (the peer is not the rank this address belongs to, or the lower rank must dial)"
	case ackBadSocks:
		return "bad socket index or count"
	case ackBadOptions:
		return "link options differ (" + config.Checksum.Name + " or " + config.TLS.Name + " set on some ranks only)"
	}
	return fmt.Sprintf("status %d", s)
}

// aLongTimeAgo is a deadline in the past: setting it makes blocked I/O return.
var aLongTimeAgo = time.Unix(1, 0)

// debug: GOCCL_DEBUG=INFO or TRACE logs connection events (without
// WithDebugLog).
var debug = config.DebugInfo()

// debugf logs a connection event: to WithDebugLog's logger, else to the
// standard logger under GOCCL_DEBUG=INFO or TRACE.
func (e *Endpoint) debugf(format string, args ...any) {
	switch {
	case e.logd != nil:
		e.logd(format, args...)
	case debug:
		log.Printf("goccl/tcp: "+format, args...)
	}
}

// Endpoint is one rank's listening socket plus the bookkeeping that pairs
// accepted connections with peers.
type Endpoint struct {
	self         int
	jobID        string
	token        []byte
	logw         func(format string, args ...any)
	logd         func(format string, args ...any)
	checksum     bool        // CRC32C after every chunk (WithChecksum)
	tlsServer    *tls.Config // TLS on every connection (WithTLS), nil without
	tlsClient    *tls.Config
	lastLog      atomic.Int64
	ln           *net.TCPListener
	addr         string
	helloTimeout time.Duration

	mu       sync.Mutex
	parked   map[parkKey]parkedConn
	changed  chan struct{} // closed and replaced whenever parked changes
	inflight map[*net.TCPConn]struct{}
	closed   bool
	done     chan struct{}
	wg       sync.WaitGroup

	rejected atomic.Int64 // connections refused during the handshake
}

type parkKey struct{ peer, tag, index int }

type parkedConn struct {
	conn   net.Conn // *net.TCPConn, or *tls.Conn over one
	nsocks int      // connections in the link, as the hello says
}

// EndpointOption configures Listen.
type EndpointOption func(*Endpoint)

// WithToken makes every connection prove the job token (a secret common to
// all ranks, GOCCL_JOB_TOKEN) in both directions; see the handshake above.
func WithToken(token []byte) EndpointOption {
	return func(e *Endpoint) { e.token = append([]byte(nil), token...) }
}

// WithLog gives the endpoint a logger for refused connections (at most one
// line a second).
func WithLog(logf func(format string, args ...any)) EndpointOption {
	return func(e *Endpoint) { e.logw = logf }
}

// WithDebugLog gives the endpoint a logger for connection events (accept
// errors, every refused connection), which it calls whatever the log level
// (the logger chooses). Without it they go to the standard logger under
// GOCCL_DEBUG=INFO or TRACE.
func WithDebugLog(logf func(format string, args ...any)) EndpointOption {
	return func(e *Endpoint) { e.logd = logf }
}

// WithChecksum appends a CRC32C (Castagnoli) to every chunk of every
// payload sent (up to 512 KiB of payload per checksum, see link), and makes
// receivers verify it: a corrupted chunk fails the receive with an error
// wrapping transport.ErrCorrupt that names the peer. Every rank must use it
// or none (GOCCL_CHECKSUM=1).
func WithChecksum() EndpointOption { return func(e *Endpoint) { e.checksum = true } }

// WithTLS runs TLS over every connection after goccl's handshake: server is
// used on accepted connections, client on dialed ones (see JobTLS for
// configurations made from the job token). Every rank must use it or none
// (GOCCL_TLS=1).
func WithTLS(server, client *tls.Config) EndpointOption {
	return func(e *Endpoint) { e.tlsServer, e.tlsClient = server, client }
}

func (e *Endpoint) optionFlags() uint16 {
	var f uint16
	if e.checksum {
		f |= flagChecksum
	}
	if e.tlsServer != nil {
		f |= flagTLS
	}
	return f
}

// Listen opens rank self's listening socket on ip with an ephemeral port.
// jobID (at most 128 bytes) identifies the job: connections presenting another
// job id, or garbage, are closed and ignored.
func Listen(self int, ip net.IP, jobID string, opts ...EndpointOption) (*Endpoint, error) {
	if ip == nil {
		return nil, errors.New("tcp: Listen needs an IP address (see SelectInterface)")
	}
	return listen(self, &net.TCPAddr{IP: ip}, jobID, defaultHelloTimeout, opts...)
}

func listen(self int, laddr *net.TCPAddr, jobID string, helloTimeout time.Duration, opts ...EndpointOption) (*Endpoint, error) {
	if self < 0 || self > math.MaxInt32 {
		return nil, fmt.Errorf("tcp: invalid rank %d", self)
	}
	if len(jobID) > maxJobID {
		return nil, fmt.Errorf("tcp: job id is %d bytes, at most %d allowed", len(jobID), maxJobID)
	}
	ln, err := net.ListenTCP("tcp", laddr)
	if err != nil {
		return nil, fmt.Errorf("tcp: rank %d: listen on %s: %w", self, laddr, err)
	}
	e := &Endpoint{
		self:         self,
		jobID:        jobID,
		ln:           ln,
		addr:         ln.Addr().String(),
		helloTimeout: helloTimeout,
		parked:       make(map[parkKey]parkedConn),
		changed:      make(chan struct{}),
		inflight:     make(map[*net.TCPConn]struct{}),
		done:         make(chan struct{}),
	}
	for _, o := range opts {
		o(e)
	}
	e.wg.Add(1)
	go e.acceptLoop()
	return e, nil
}

// Addr returns the "ip:port" address peers dial.
func (e *Endpoint) Addr() string { return e.addr }

// Close stops accepting, closes parked and half-open connections and waits
// for the endpoint's goroutines. Links already returned by Connect stay open.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.done)
	for c := range e.inflight {
		c.Close()
	}
	for k, p := range e.parked {
		p.conn.Close()
		delete(e.parked, k)
	}
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
	err := e.ln.Close()
	e.wg.Wait()
	return err
}

func (e *Endpoint) isClosed() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

func (e *Endpoint) acceptLoop() {
	defer e.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := e.ln.AcceptTCP()
		if err != nil {
			if e.isClosed() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient (out of file descriptors, aborted connection...).
			e.debugf("rank %d: accept: %v", e.self, err)
			select {
			case <-e.done:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			c.Close()
			return
		}
		e.inflight[c] = struct{}{}
		e.wg.Add(1)
		e.mu.Unlock()
		go e.serve(c)
	}
}

// serve runs the server side of the handshake on an accepted connection and
// parks it when valid.
func (e *Endpoint) serve(c *net.TCPConn) {
	defer e.wg.Done()
	key, nsocks, err := e.handshake(c)
	var conn net.Conn = c
	if err == nil && e.tlsServer != nil {
		conn, err = e.serverTLS(c)
	}
	e.mu.Lock()
	delete(e.inflight, c)
	if err != nil || e.closed {
		e.mu.Unlock()
		c.Close()
		if err != nil {
			e.reject(c, err)
		}
		return
	}
	if old, ok := e.parked[key]; ok {
		// A newer connection for the same slot (the peer retried): it wins.
		old.conn.Close()
	}
	e.parked[key] = parkedConn{conn: conn, nsocks: nsocks}
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}

func (e *Endpoint) handshake(c *net.TCPConn) (parkKey, int, error) {
	if err := c.SetDeadline(time.Now().Add(e.helloTimeout)); err != nil {
		return parkKey{}, 0, err
	}
	var b [helloSize]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return parkKey{}, 0, fmt.Errorf("reading hello: %w", err)
	}
	h, status, why, err := e.checkHello(&b)
	if err != nil {
		return parkKey{}, 0, err
	}
	var a [ackSize]byte
	copy(a[0:4], ackMagic)
	binary.LittleEndian.PutUint16(a[4:], helloVersion)
	binary.LittleEndian.PutUint16(a[6:], status)
	binary.LittleEndian.PutUint32(a[8:], uint32(e.self))
	flags := e.optionFlags()
	if len(e.token) > 0 {
		flags |= flagToken
	}
	binary.LittleEndian.PutUint16(a[12:], flags)
	nonce := auth.Nonce()
	copy(a[16:32], nonce[:])
	mac := auth.MAC(e.token, labelTCPServer, b[:], a[0:32])
	copy(a[32:], mac[:])
	if _, err := c.Write(a[:]); err != nil && why == nil {
		why = fmt.Errorf("writing ack: %w", err)
	}
	if why != nil {
		return parkKey{}, 0, why
	}
	var proof [proofSize]byte
	if _, err := io.ReadFull(c, proof[:]); err != nil {
		return parkKey{}, 0, fmt.Errorf("reading the proof of rank %d: %w", h.from, err)
	}
	verdict := [1]byte{verdictOK}
	if !auth.Check(e.token, proof[:], labelTCPClient, b[:], a[0:32]) {
		verdict[0] = verdictRefused
		why = fmt.Errorf("%w: the dialer (says rank %d) did not prove this job's token", auth.ErrAuth, h.from)
	}
	if _, err := c.Write(verdict[:]); err != nil && why == nil {
		why = fmt.Errorf("writing the verdict: %w", err)
	}
	if why != nil {
		return parkKey{}, 0, why
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		return parkKey{}, 0, err
	}
	return parkKey{peer: int(h.from), tag: int(h.tag), index: int(h.index)}, int(h.nsocks), nil
}

// checkHello judges a hello: garbage (bad magic or checksum, impossible job
// id length) is an error, the connection closed without an answer; a
// well-formed hello this endpoint cannot accept gets a rejecting status and
// the reason (why); otherwise status is ackOK.
func (e *Endpoint) checkHello(b *[helloSize]byte) (h hello, status uint16, why, err error) {
	if string(b[0:8]) != helloMagic {
		return h, 0, nil, errors.New("bad hello magic")
	}
	h = decodeHello(b)
	switch {
	case h.version != helloVersion:
		return h, ackBadVersion, fmt.Errorf("protocol version %d, want %d", h.version, helloVersion), nil
	case binary.LittleEndian.Uint32(b[172:]) != crc32.ChecksumIEEE(b[:172]):
		return h, 0, nil, errors.New("bad hello checksum")
	case int(h.jobLen) > maxJobID:
		return h, 0, nil, fmt.Errorf("job id length %d", h.jobLen)
	case string(b[24:24+int(h.jobLen)]) != e.jobID:
		return h, ackBadJob, fmt.Errorf("job id %q, want %q", b[24:24+int(h.jobLen)], e.jobID), nil
	case int(h.to) != e.self || h.from < 0 || int(h.from) >= e.self:
		return h, ackBadRank, fmt.Errorf("hello from rank %d to rank %d", h.from, h.to), nil
	case h.nsocks < 2 || h.nsocks%2 != 0 || h.nsocks > maxConns || h.index >= h.nsocks:
		return h, ackBadSocks, fmt.Errorf("connection %d of %d", h.index, h.nsocks), nil
	case h.flags&optionFlags != e.optionFlags():
		return h, ackBadOptions, fmt.Errorf("rank %d's link options are %s, this rank's %s", h.from, optionString(h.flags), optionString(e.optionFlags())), nil
	}
	return h, ackOK, nil, nil
}

// checkAck judges the ack to hello from the listener that should be rank
// peer: a foreign or rejecting ack, another rank, other link options, or a
// listener that does not prove this job's token are errors (the last ones
// wrap auth.ErrAuth).
func (e *Endpoint) checkAck(a *[ackSize]byte, hello []byte, peer int) error {
	if string(a[0:4]) != ackMagic {
		return errors.New("handshake: the listener is not a goccl endpoint (bad ack)")
	}
	if s := binary.LittleEndian.Uint16(a[6:]); s != ackOK {
		return fmt.Errorf("handshake rejected by peer (rank %d): %s", int32(binary.LittleEndian.Uint32(a[8:])), ackReason(s))
	}
	if r := int(int32(binary.LittleEndian.Uint32(a[8:]))); r != peer {
		return fmt.Errorf("handshake: address belongs to rank %d, not %d", r, peer)
	}
	serverFlags := binary.LittleEndian.Uint16(a[12:])
	serverToken := serverFlags&flagToken != 0
	switch {
	case serverFlags&optionFlags != e.optionFlags():
		return fmt.Errorf("handshake: peer rank %d's link options are %s, this rank's %s (set %s and %s alike on every rank)",
			peer, optionString(serverFlags), optionString(e.optionFlags()), config.Checksum.Name, config.TLS.Name)
	case serverToken && len(e.token) == 0:
		return fmt.Errorf("handshake: %w: peer rank %d requires a job token (%s)", auth.ErrAuth, peer, config.JobToken.Name)
	case !serverToken && len(e.token) > 0:
		return fmt.Errorf("handshake: %w: peer rank %d does not check job tokens, this rank has one (%s set on some ranks only?)", auth.ErrAuth, peer, config.JobToken.Name)
	case !auth.Check(e.token, a[32:64], labelTCPServer, hello, a[0:32]):
		return fmt.Errorf("handshake: %w: peer rank %d holds a different job token", auth.ErrAuth, peer)
	}
	return nil
}

// reject counts a connection refused by the handshake and logs it (at most
// once a second with WithLog, else under GOCCL_DEBUG).
func (e *Endpoint) reject(c *net.TCPConn, err error) {
	n := e.rejected.Add(1)
	e.debugf("rank %d: rejected connection from %s: %v", e.self, c.RemoteAddr(), err)
	if e.logw == nil {
		return
	}
	now := time.Now().UnixNano()
	last := e.lastLog.Load()
	if now-last < int64(time.Second) || !e.lastLog.CompareAndSwap(last, now) {
		return
	}
	e.logw("tcp endpoint of rank %d: refused a connection from %s: %v (%d refused so far)", e.self, c.RemoteAddr(), err, n)
}

type hello struct {
	version, nsocks, index, jobLen uint16 // nsocks: connections in the link, 2*nsocks of Connect
	from, to                       int32
	flags, tag                     uint16
}

// optionString describes option flags for errors.
func optionString(f uint16) string {
	return fmt.Sprintf("checksum %v, TLS %v", f&flagChecksum != 0, f&flagTLS != 0)
}

// serverTLS runs the server side of TLS on an accepted connection.
func (e *Endpoint) serverTLS(c *net.TCPConn) (net.Conn, error) {
	if err := c.SetDeadline(time.Now().Add(e.helloTimeout)); err != nil {
		return nil, err
	}
	tc := tls.Server(c, e.tlsServer)
	if err := tc.Handshake(); err != nil {
		return nil, fmt.Errorf("%w: TLS handshake: %v", auth.ErrAuth, err)
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return tc, nil
}

func decodeHello(b *[helloSize]byte) hello {
	return hello{
		version: binary.LittleEndian.Uint16(b[8:]),
		nsocks:  binary.LittleEndian.Uint16(b[10:]),
		index:   binary.LittleEndian.Uint16(b[12:]),
		jobLen:  binary.LittleEndian.Uint16(b[14:]),
		from:    int32(binary.LittleEndian.Uint32(b[16:])),
		to:      int32(binary.LittleEndian.Uint32(b[20:])),
		flags:   binary.LittleEndian.Uint16(b[168:]),
		tag:     binary.LittleEndian.Uint16(b[170:]),
	}
}

func encodeHello(b *[helloSize]byte, jobID string, from, to, index, nconns int, flags, tag uint16) {
	*b = [helloSize]byte{}
	copy(b[0:8], helloMagic)
	binary.LittleEndian.PutUint16(b[8:], helloVersion)
	binary.LittleEndian.PutUint16(b[10:], uint16(nconns))
	binary.LittleEndian.PutUint16(b[12:], uint16(index))
	binary.LittleEndian.PutUint16(b[14:], uint16(len(jobID)))
	binary.LittleEndian.PutUint32(b[16:], uint32(int32(from)))
	binary.LittleEndian.PutUint32(b[20:], uint32(int32(to)))
	copy(b[24:24+maxJobID], jobID)
	nonce := auth.Nonce()
	copy(b[152:168], nonce[:])
	binary.LittleEndian.PutUint16(b[168:], flags)
	binary.LittleEndian.PutUint16(b[170:], tag)
	binary.LittleEndian.PutUint32(b[172:], crc32.ChecksumIEEE(b[:172]))
}

// Connect returns the Link to peer. The lower rank dials the higher one's
// peerAddr; the higher rank waits for the connections that peer dials
// (peerAddr is then only used in messages). Both sides must pass the same
// nsocks (1..64), the number of sockets per direction (2*nsocks connections).
// Connect honours ctx: once it is done, Connect fails with an error naming
// the peer and address and wrapping ctx.Err(). Without a ctx deadline it
// waits as long as ctx allows.
func (e *Endpoint) Connect(ctx context.Context, peer int, peerAddr string, nsocks int) (transport.Link, error) {
	return e.ConnectTag(ctx, peer, peerAddr, nsocks, 0)
}

// ConnectTag is Connect for one of several links between the two ranks:
// both sides pass the same tag, and links of different tags never take
// each other's connections (Connect's tag is 0). Sequential Connects with
// one tag are fine too; concurrent ones are not.
func (e *Endpoint) ConnectTag(ctx context.Context, peer int, peerAddr string, nsocks int, tag uint16) (transport.Link, error) {
	if peer < 0 || peer > math.MaxInt32 || peer == e.self {
		return nil, fmt.Errorf("tcp: rank %d: invalid peer %d", e.self, peer)
	}
	if nsocks < 1 || nsocks > maxSocks {
		return nil, fmt.Errorf("tcp: rank %d: nsocks %d out of range 1..%d", e.self, nsocks, maxSocks)
	}
	if e.isClosed() {
		return nil, &transport.PeerError{Peer: peer, Op: "connect", Err: fmt.Errorf("tcp: endpoint closed: %w", transport.ErrClosed)}
	}
	var conns []net.Conn
	var err error
	if e.self < peer {
		conns, err = e.dial(ctx, peer, peerAddr, 2*nsocks, tag)
	} else {
		conns, err = e.collect(ctx, peer, peerAddr, 2*nsocks, tag)
	}
	if err != nil {
		return nil, &transport.PeerError{Peer: peer, Op: "connect", Err: err}
	}
	for _, c := range conns {
		tuneConn(rawTCP(c))
	}
	// Connections 0..nsocks-1 carry data from the dialer (the lower rank).
	tx, rx := conns[:nsocks], conns[nsocks:]
	if e.self > peer {
		tx, rx = rx, tx
	}
	return newLink(e.self, peer, tx, rx, e.checksum), nil
}

func (e *Endpoint) dial(ctx context.Context, peer int, addr string, nconns int, tag uint16) ([]net.Conn, error) {
	conns := make([]net.Conn, 0, nconns)
	for i := 0; i < nconns; i++ {
		c, err := e.dialOne(ctx, peer, addr, i, nconns, tag)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, fmt.Errorf("tcp: rank %d dialing peer %d at %s (connection %d of %d): %w", e.self, peer, addr, i, nconns, err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}

func (e *Endpoint) dialOne(ctx context.Context, peer int, addr string, index, nconns int, tag uint16) (net.Conn, error) {
	backoff := 10 * time.Millisecond
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			tc := c.(*net.TCPConn)
			if err := e.clientHello(ctx, tc, peer, index, nconns, tag); err != nil {
				tc.Close()
				return nil, err
			}
			if e.tlsClient == nil {
				return tc, nil
			}
			tlsConn := tls.Client(tc, e.tlsClient)
			hctx, cancel := context.WithTimeout(ctx, 2*e.helloTimeout)
			err := tlsConn.HandshakeContext(hctx)
			cancel()
			if err != nil {
				tc.Close()
				return nil, fmt.Errorf("handshake: %w: TLS: %v", auth.ErrAuth, err)
			}
			return tlsConn, nil
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("%w (%v)", ctxErr, err)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, err
		}
		// The peer may not be listening yet: retry until ctx says stop.
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (%v)", ctx.Err(), err)
		case <-e.done:
			t.Stop()
			return nil, fmt.Errorf("endpoint closed: %w", transport.ErrClosed)
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

func (e *Endpoint) clientHello(ctx context.Context, c *net.TCPConn, peer, index, nconns int, tag uint16) error {
	dl := time.Now().Add(2 * e.helloTimeout)
	ctxDL, hasCtxDL := ctx.Deadline()
	if hasCtxDL && ctxDL.Before(dl) {
		dl = ctxDL
	}
	if err := c.SetDeadline(dl); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	var b [helloSize]byte
	flags := e.optionFlags()
	if len(e.token) > 0 {
		flags |= flagToken
	}
	encodeHello(&b, e.jobID, e.self, peer, index, nconns, flags, tag)
	_, err := c.Write(b[:])
	var a [ackSize]byte
	if err == nil {
		_, err = io.ReadFull(c, a[:])
	}
	var ackErr error
	if err == nil {
		if ackErr = e.checkAck(&a, b[:], peer); ackErr == nil {
			// The listener proved the token: prove this side's.
			proof := auth.MAC(e.token, labelTCPClient, b[:], a[0:32])
			if _, err = c.Write(proof[:]); err == nil {
				var v [1]byte
				if _, err = io.ReadFull(c, v[:]); err == nil && v[0] != verdictOK {
					ackErr = fmt.Errorf("handshake: %w: peer rank %d refused this rank's proof of the job token", auth.ErrAuth, peer)
				}
			}
		}
	}
	stop()
	if ackErr != nil && errors.Is(ackErr, auth.ErrAuth) {
		return ackErr
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		// Even when the I/O succeeded, the AfterFunc may have poisoned the
		// connection's deadline: give up.
		return fmt.Errorf("handshake: %w", ctxErr)
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) && hasCtxDL && dl.Equal(ctxDL) {
			return fmt.Errorf("handshake: %w", context.DeadlineExceeded)
		}
		return fmt.Errorf("handshake: %w", err)
	}
	if ackErr != nil {
		return ackErr
	}
	return c.SetDeadline(time.Time{})
}

// collect waits until the nconns connections dialed by peer are parked and
// takes them.
func (e *Endpoint) collect(ctx context.Context, peer int, addr string, nconns int, tag uint16) ([]net.Conn, error) {
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return nil, fmt.Errorf("tcp: endpoint closed: %w", transport.ErrClosed)
		}
		conns, have, err := e.takeLocked(parkKey{peer: peer, tag: int(tag)}, nconns)
		ch := e.changed
		e.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("tcp: rank %d waiting for peer %d (%s): %w", e.self, peer, addr, err)
		}
		if conns != nil {
			return conns, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("tcp: rank %d waiting for peer %d (%s) to connect, %d of %d connections arrived: %w",
				e.self, peer, addr, have, nconns, ctx.Err())
		}
	}
}

// takeLocked returns the parked connections of peer when all nconns are
// there, otherwise how many are. A parked connection whose dialer has
// already closed or reset it is dropped (and logged), never handed to a
// link: without a job token anybody can pass the handshake as any rank, and
// such a connection's close must not make the link report that rank lost;
// its slot waits for the real rank's connection.
func (e *Endpoint) takeLocked(key parkKey, nconns int) ([]net.Conn, int, error) {
	peer := key.peer
	slot := func(i int) parkKey { key.index = i; return key }
	have := 0
	for i := 0; i < maxConns; i++ {
		p, ok := e.parked[slot(i)]
		if !ok {
			continue
		}
		if raw := rawTCP(p.conn); peerGone(raw) {
			p.conn.Close()
			delete(e.parked, slot(i))
			e.reject(raw, fmt.Errorf("the dialer (says rank %d) closed connection %d before it was used", peer, i))
			continue
		}
		if p.nsocks != nconns {
			// Both sides must agree on the socket count; drop the strays.
			for j := 0; j < maxConns; j++ {
				if q, ok := e.parked[slot(j)]; ok {
					q.conn.Close()
					delete(e.parked, slot(j))
				}
			}
			return nil, 0, fmt.Errorf("peer connects with %d sockets per direction, this rank expects %d", p.nsocks/2, nconns/2)
		}
		have++
	}
	if have < nconns {
		return nil, have, nil
	}
	conns := make([]net.Conn, nconns)
	for i := range conns {
		k := slot(i)
		conns[i] = e.parked[k].conn
		delete(e.parked, k)
	}
	return conns, have, nil
}

// rejectedCount reports how many connections failed the handshake.
func (e *Endpoint) rejectedCount() int64 { return e.rejected.Load() }
