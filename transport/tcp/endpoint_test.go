package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/auth"
	"github.com/goccl/goccl/transport"
)

func TestHelloRoundTrip(t *testing.T) {
	var b [helloSize]byte
	encodeHello(&b, "job-x", 3, 7, 2, 4, 0, 9)
	h := decodeHello(&b)
	if string(b[:8]) != helloMagic || h.version != helloVersion || h.from != 3 || h.to != 7 || h.index != 2 || h.nsocks != 4 || h.tag != 9 ||
		string(b[24:24+h.jobLen]) != "job-x" {
		t.Fatalf("hello %+v", h)
	}
}

// rawHello dials addr, sends b and returns the ack status (or -1 when the
// server closed the connection without an ack).
func rawHello(t *testing.T, addr string, b []byte) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(b); err != nil {
		return -1
	}
	var a [ackSize]byte
	if _, err := io.ReadFull(c, a[:]); err != nil {
		return -1
	}
	if string(a[:4]) != ackMagic {
		t.Fatalf("bad ack %q", a[:])
	}
	// The server must close after a rejection.
	if s := binary.LittleEndian.Uint16(a[6:]); s != ackOK {
		if _, err := c.Read(a[:1]); err == nil {
			t.Fatal("connection left open after a rejection")
		}
		return int(s)
	}
	return int(ackOK)
}

func TestBadClients(t *testing.T) {
	ea := newEndpoint(t, 0, "job-1")
	eb, err := listen(1, &net.TCPAddr{IP: loopback}, "job-1", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()

	// A client that connects and stays silent, held open throughout.
	silent, err := net.Dial("tcp", eb.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	// Random bytes.
	r := rand.New(rand.NewPCG(1, 2))
	if s := rawHello(t, eb.Addr(), randBytes(r, 4096)); s != -1 {
		t.Fatalf("garbage got ack status %d", s)
	}
	// Correct magic, garbage after it (bad checksum).
	g := randBytes(r, helloSize)
	copy(g, helloMagic)
	binary.LittleEndian.PutUint16(g[8:], helloVersion)
	if s := rawHello(t, eb.Addr(), g); s != -1 {
		t.Fatalf("bad checksum got ack status %d", s)
	}
	// A short hello, then close.
	if s := rawHello(t, eb.Addr(), []byte(helloMagic)); s != -1 {
		t.Fatalf("short hello got ack status %d", s)
	}
	var b [helloSize]byte
	for _, tc := range []struct {
		name                    string
		job                     string
		from, to, index, nsocks int
		want                    uint16
	}{
		{"wrong job", "job-2", 0, 1, 0, 1, ackBadJob},
		{"wrong target", "job-1", 0, 2, 0, 1, ackBadRank},
		{"higher rank dials", "job-1", 5, 1, 0, 1, ackBadRank},
		{"self", "job-1", 1, 1, 0, 1, ackBadRank},
		{"index out of range", "job-1", 0, 1, 2, 2, ackBadSocks},
		{"too many sockets", "job-1", 0, 1, 0, maxSocks + 1, ackBadSocks},
	} {
		encodeHello(&b, tc.job, tc.from, tc.to, tc.index, tc.nsocks, 0, 0)
		if s := rawHello(t, eb.Addr(), b[:]); s != int(tc.want) {
			t.Errorf("%s: ack status %d, want %d", tc.name, s, tc.want)
		}
	}
	// Wrong version (valid layout otherwise).
	encodeHello(&b, "job-1", 0, 1, 0, 1, 0, 0)
	binary.LittleEndian.PutUint16(b[8:], helloVersion+1)
	if s := rawHello(t, eb.Addr(), b[:]); s != int(ackBadVersion) {
		t.Errorf("wrong version: ack status %d", s)
	}

	// A real Connect still works meanwhile, with nsocks 2.
	la, lb := connectEndpoints(t, ea, eb, 2)
	h := hdr(1, 3)
	if err := lb.Send(context.Background(), &h, []byte("xyz")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3)
	if err := la.Recv(context.Background(), &h, got, nil); err != nil || string(got) != "xyz" {
		t.Fatalf("%q %v", got, err)
	}

	// The silent client is dropped after the hello timeout.
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("silent client: %v", err)
	}
	const wantRejected = 3 + 6 + 1 + 1
	deadline := time.Now().Add(5 * time.Second)
	for eb.rejectedCount() < wantRejected && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := eb.rejectedCount(); n != wantRejected {
		t.Fatalf("rejected %d connections, want %d", n, wantRejected)
	}
}

func TestJobMismatchConnect(t *testing.T) {
	ea, eb := newEndpoint(t, 0, "job-A"), newEndpoint(t, 1, "job-B")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := ea.Connect(ctx, 1, eb.Addr(), 1)
	var pe *transport.PeerError
	if err == nil || !strings.Contains(err.Error(), "job id mismatch") || !errors.As(err, &pe) || pe.Op != "connect" {
		t.Fatalf("connect across jobs: %v", err)
	}
}

func TestNsocksMismatch(t *testing.T) {
	ea, eb := newEndpoint(t, 0, "j"), newEndpoint(t, 1, "j")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		l, err := ea.Connect(ctx, 1, eb.Addr(), 2)
		if l != nil {
			defer l.Close()
		}
		errc <- err
	}()
	_, err := eb.Connect(ctx, 0, ea.Addr(), 3)
	if err == nil || !strings.Contains(err.Error(), "sockets") {
		t.Fatalf("nsocks mismatch: %v", err)
	}
	<-errc
}

func TestConnectTimeout(t *testing.T) {
	ea := newEndpoint(t, 0, "j")
	eb := newEndpoint(t, 1, "j")

	// The higher rank waits for a peer that never dials.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := eb.Connect(ctx, 0, ea.Addr(), 2)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "peer 0") ||
		!strings.Contains(err.Error(), ea.Addr()) || time.Since(start) > 2*time.Second {
		t.Fatalf("waiting side: %v", err)
	}

	// The lower rank dials an address where nobody listens (refused, retried).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	_, err = ea.Connect(ctx2, 5, dead, 1)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "peer 5") || !strings.Contains(err.Error(), dead) {
		t.Fatalf("dialing side: %v", err)
	}

	// Cancellation.
	ctx3, cancel3 := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel3)
	if _, err := eb.Connect(ctx3, 0, ea.Addr(), 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled connect: %v", err)
	}
}

func TestConnectRetriesUntilListening(t *testing.T) {
	// The dialer starts before the peer listens on the address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close()
	ea := newEndpoint(t, 0, "j")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		l   transport.Link
		err error
	}
	rc := make(chan res, 1)
	go func() {
		l, err := ea.Connect(ctx, 1, addr.String(), 1)
		rc <- res{l, err}
	}()
	time.Sleep(100 * time.Millisecond)
	eb, err := listen(1, addr, "j", time.Second)
	if err != nil {
		t.Skipf("port taken meanwhile: %v", err)
	}
	defer eb.Close()
	lb, err := eb.Connect(ctx, 0, ea.Addr(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	r := <-rc
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.l.Close()
}

func TestEndpointClose(t *testing.T) {
	ea := newEndpoint(t, 0, "j")
	eb := newEndpoint(t, 1, "j")
	errc := make(chan error, 1)
	go func() {
		_, err := eb.Connect(context.Background(), 0, ea.Addr(), 1)
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	eb.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("connect on a closed endpoint: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Connect hangs after endpoint Close")
	}
	if err := eb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := eb.Connect(context.Background(), 0, ea.Addr(), 1); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("connect after close: %v", err)
	}
}

func TestListenErrors(t *testing.T) {
	if _, err := Listen(-1, loopback, "j"); err == nil {
		t.Error("negative rank accepted")
	}
	if _, err := Listen(0, loopback, strings.Repeat("x", maxJobID+1)); err == nil {
		t.Error("long job id accepted")
	}
	if _, err := Listen(0, nil, "j"); err == nil {
		t.Error("nil IP accepted")
	}
	e := newEndpoint(t, 0, "j")
	if _, err := e.Connect(context.Background(), 0, e.Addr(), 1); err == nil {
		t.Error("connect to self accepted")
	}
	if _, err := e.Connect(context.Background(), 1, e.Addr(), 0); err == nil {
		t.Error("nsocks 0 accepted")
	}
}

// TestEndpointAuth: with a job token, links form between endpoints holding
// it; a dialer without it, or with another, is refused and counted, and a
// dialer with a token refuses a listener that does not prove it.
func TestEndpointAuth(t *testing.T) {
	tok := []byte("job token")
	var logged atomic.Int32
	listenTok := func(rank int, token []byte) *Endpoint {
		e, err := listen(rank, &net.TCPAddr{IP: loopback}, "job-1", 300*time.Millisecond,
			WithToken(token), WithLog(func(string, ...any) { logged.Add(1) }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	ea, eb := listenTok(0, tok), listenTok(1, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, dialer := range map[string]*Endpoint{
		"no token":      listenTok(0, nil),
		"another token": listenTok(0, []byte("other")),
	} {
		_, err := dialer.dial(ctx, 1, eb.Addr(), 2, 0)
		if !errors.Is(err, auth.ErrAuth) {
			t.Errorf("dialer with %s: want ErrAuth, got %v", name, err)
		}
	}
	plain := listenTok(1, nil)
	if _, err := ea.dial(ctx, 1, plain.Addr(), 2, 0); !errors.Is(err, auth.ErrAuth) || !strings.Contains(err.Error(), "does not check") {
		t.Errorf("token dialer vs plain listener: %v", err)
	}
	// The two members still connect and talk.
	la, lb := connectEndpoints(t, ea, eb, 1)
	h := hdr(1, 3)
	if err := la.Send(context.Background(), &h, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3)
	if err := lb.Recv(context.Background(), &h, got, nil); err != nil || string(got) != "abc" {
		t.Fatalf("%q %v", got, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for eb.rejectedCount() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := eb.rejectedCount(); n != 2 {
		t.Errorf("listener refused %d connections, want 2", n)
	}
	if logged.Load() == 0 {
		t.Error("refusals not logged")
	}
}

// TestConnectTag: links with different tags between the same two ranks,
// dialed at once and each with its own socket count, get their own
// connections (a message on one never arrives on another), and a tag
// used again after its link was made makes a new link.
func TestConnectTag(t *testing.T) {
	ea, eb := newEndpoint(t, 0, "job-tag"), newEndpoint(t, 1, "job-tag")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tags := []uint16{0, 1, 7}
	socks := []int{2, 1, 3}
	for round := range 2 {
		as, bs := make([]transport.Link, len(tags)), make([]transport.Link, len(tags))
		errc := make(chan error, 2*len(tags))
		for k, tag := range tags {
			go func() {
				var err error
				as[k], err = ea.ConnectTag(ctx, 1, eb.Addr(), socks[k], tag)
				errc <- err
			}()
			go func() {
				var err error
				bs[k], err = eb.ConnectTag(ctx, 0, ea.Addr(), socks[k], tag)
				errc <- err
			}()
		}
		for range 6 {
			if err := <-errc; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		for k := range 3 {
			msg := []byte(fmt.Sprintf("round %d tag %d", round, tags[k]))
			h := hdr(uint64(k+1), len(msg))
			if err := as[k].Send(ctx, &h, msg); err != nil {
				t.Fatal(err)
			}
		}
		for k := range 3 {
			msg := []byte(fmt.Sprintf("round %d tag %d", round, tags[k]))
			got := make([]byte, len(msg))
			h := hdr(uint64(k+1), len(msg))
			if err := bs[k].Recv(ctx, &h, got, nil); err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("round %d, tag %d: got %q, %v; want %q", round, tags[k], got, err, msg)
			}
		}
		for k := range 3 {
			as[k].Close()
			bs[k].Close()
		}
	}
}
