package rendezvous

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func startServer(t *testing.T) *TCPServer {
	t.Helper()
	srv, err := NewTCPServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func dialT(t *testing.T, addr string) *TCPStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := DialTCP(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawConn is a connection to addr that has passed the handshake (no
// token, no rank): what it writes next is read as request frames.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c := rawUnshaken(t, addr)
	o := options{rank: -1}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := clientHandshake(c, bufio.NewReader(c), addr, &o); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Time{})
	return c
}

// rawUnshaken is a bare connection to addr.
func rawUnshaken(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// expectClosed checks that the server closes c without sending anything.
func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, err := c.Read(make([]byte, 64))
	if n != 0 || err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		t.Fatalf("%s: server answered %d bytes / %v; want the connection closed", what, n, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestTCPServerRejectsGarbage sends malformed frames on raw connections while
// a well-behaved client holds a Get; each bad connection is closed and the
// good client is unaffected.
func TestTCPServerRejectsGarbage(t *testing.T) {
	srv := startServer(t)
	ctx := testCtx(t)
	good, setter := dialT(t, srv.Addr()), dialT(t, srv.Addr())
	var got []byte
	pending := async(func() (err error) { got, err = good.Get(ctx, "after-garbage"); return err })

	for name, f := range malformedFrames() {
		if len(f) < frameHeaderLen {
			continue // waits for more bytes, like a silent client; see below
		}
		if name == "length mismatch" {
			continue // a valid prefix: the server waits for the rest
		}
		c := rawConn(t, srv.Addr())
		if _, err := c.Write(f); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, c, name)
		// The same bytes instead of a handshake.
		c = rawUnshaken(t, srv.Addr())
		c.Write(append(f, make([]byte, storeHelloSize)...))
		expectClosed(t, c, name+" as a hello")
	}
	// A second request while a Get is held is a protocol violation.
	c := rawConn(t, srv.Addr())
	get, _ := appendRequest(nil, request{op: opGet, keys: []string{"never"}})
	c.Write(get)
	time.Sleep(20 * time.Millisecond)
	c.Write(get)
	expectClosed(t, c, "pipelined request during a held Get")

	if err := setter.Set(ctx, "after-garbage", []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if err := mustReturn(t, pending, "Get"); err != nil || string(got) != "ok" {
		t.Fatalf("good client's Get = %q, %v", got, err)
	}
}

func TestTCPServerOversizedFrame(t *testing.T) {
	srv := startServer(t)
	// Announce a frame one byte over the limit: closed before any body.
	c := rawConn(t, srv.Addr())
	c.Write(u32(maxRequestLen + 1))
	expectClosed(t, c, "oversized length")

	// A frame under the length limit whose key length is over MaxKeyLen.
	c = rawConn(t, srv.Addr())
	c.Write(frame([]byte{opSet}, u16(MaxKeyLen+1), make([]byte, MaxKeyLen+10)))
	expectClosed(t, c, "oversized key")

	// The client refuses to send an oversized value or key, and stays usable.
	ctx := testCtx(t)
	cl := dialT(t, srv.Addr())
	if err := cl.Set(ctx, "big", make([]byte, MaxValueLen+1)); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("oversized Set: %v", err)
	}
	if _, err := cl.Get(ctx, strings.Repeat("k", MaxKeyLen+1)); err == nil {
		t.Fatal("oversized key accepted")
	}
	if err := cl.Wait(ctx, make([]string, MaxWaitKeys+1)...); err == nil {
		t.Fatal("too many wait keys accepted")
	}
	// A large (not oversized) value travels in both directions.
	big := bytes.Repeat([]byte("abcdefgh"), 512<<10) // 4 MiB
	if err := cl.Set(ctx, "big", big); err != nil {
		t.Fatal(err)
	}
	if v, err := cl.Get(ctx, "big"); err != nil || !bytes.Equal(v, big) {
		t.Fatalf("Get big: %d bytes, %v", len(v), err)
	}
}

// TestTCPServerSilentClients: clients that connect and send nothing, or half a
// frame, neither block other clients nor stop Close.
func TestTCPServerSilentClients(t *testing.T) {
	srv, err := NewTCPServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rawUnshaken(t, srv.Addr())                            // silent, no handshake
	rawUnshaken(t, srv.Addr()).Write([]byte("GOCCLSTH"))  // half a hello
	rawConn(t, srv.Addr())                                // silent after the handshake
	rawConn(t, srv.Addr()).Write([]byte{0, 0})            // half a header
	rawConn(t, srv.Addr()).Write(append(u32(100), opSet)) // half a frame
	huge := rawConn(t, srv.Addr())
	huge.Write(u32(maxRequestLen)) // announces 64 MiB, sends a little
	huge.Write(make([]byte, 1000))

	ctx := testCtx(t)
	a, b := dialT(t, srv.Addr()), dialT(t, srv.Addr())
	for i := range 10 {
		if _, err := a.Add(ctx, "n", 1); err != nil {
			t.Fatal(err)
		}
		if n, err := b.Add(ctx, "n", 1); err != nil || n != int64(2*i+2) {
			t.Fatalf("Add = %d, %v", n, err)
		}
	}
	held := async(func() error { _, err := a.Get(ctx, "never"); return err })
	mustBlock(t, held, "Get")
	done := async(srv.Close)
	if err := mustReturn(t, done, "server Close with silent clients"); err != nil {
		t.Fatal(err)
	}
	if err := mustReturn(t, held, "Get held across server Close"); err == nil {
		t.Fatal("Get held across server Close succeeded")
	}
	if _, err := b.Add(ctx, "n", 1); err == nil {
		t.Fatal("Add after server Close succeeded")
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestDialTCPGivesUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = DialTCP(ctx, addr)
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("DialTCP took %v", el)
	}
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "gave up after") ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("DialTCP error: %v", err)
	}
}

// TestDialTCPWaitsForServer: ranks may dial before rank 0 serves.
func TestDialTCPWaitsForServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx := testCtx(t)
	dialed := make(chan *TCPStore, 1)
	errc := async(func() error {
		c, err := DialTCP(ctx, addr)
		dialed <- c
		return err
	})
	time.Sleep(100 * time.Millisecond)
	srv, err := NewTCPServer(addr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	defer srv.Close()
	if err := mustReturn(t, errc, "DialTCP"); err != nil {
		t.Fatal(err)
	}
	c := <-dialed
	defer c.Close()
	if err := c.Set(ctx, "k", nil); err != nil {
		t.Fatal(err)
	}
}

// TestTCPStoreReconnects: the client reports a broken connection instead of
// hanging, and the next call dials a new one.
func TestTCPStoreReconnects(t *testing.T) {
	srv := startServer(t)
	ctx := testCtx(t)
	cl := dialT(t, srv.Addr())
	if err := cl.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// Kill the client's connection under it (as a network failure would).
	cl.mu.Lock()
	cl.conn.Close()
	cl.mu.Unlock()
	if _, err := cl.Get(ctx, "k"); err == nil || errors.Is(err, ErrClosed) {
		t.Fatalf("Get on a broken connection: %v", err)
	}
	if v, err := cl.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get after reconnect = %q, %v", v, err)
	}
}

// TestTCPServerAuth: with a job token, clients without it, with another
// one, sending random bytes or staying silent are refused (and counted),
// while clients with the token work; a client with a token refuses a server
// without one, or with another.
func TestTCPServerAuth(t *testing.T) {
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	handshakeTimeout = 300 * time.Millisecond
	tok := []byte("the job token")
	var logged []string
	var mu sync.Mutex
	srv, err := NewTCPServer("127.0.0.1:0", WithToken(tok), WithLog(func(f string, a ...any) {
		mu.Lock()
		logged = append(logged, fmt.Sprintf(f, a...))
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := testCtx(t)
	good := dialTOpts(t, srv.Addr(), WithToken(tok), WithRank(0))
	pending := async(func() error { _, err := good.Get(ctx, "after-intruders"); return err })

	for name, opts := range map[string][]Option{
		"no token":      nil,
		"another token": {WithToken([]byte("another token"))},
	} {
		_, err := DialTCP(ctx, srv.Addr(), opts...)
		if !errors.Is(err, ErrAuth) {
			t.Errorf("client with %s: want ErrAuth, got %v", name, err)
		}
	}
	rnd := rawUnshaken(t, srv.Addr())
	rnd.Write(bytes.Repeat([]byte{0x5a, 0xa5, 0x17}, 100))
	expectClosed(t, rnd, "random bytes")
	silent := rawUnshaken(t, srv.Addr())
	expectClosed(t, silent, "silent client (handshake timeout)")

	// The good client is unaffected.
	setter := dialTOpts(t, srv.Addr(), WithToken(tok), WithRank(1))
	if err := setter.Set(ctx, "after-intruders", []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if err := mustReturn(t, pending, "Get"); err != nil {
		t.Fatal(err)
	}
	if n := srv.Rejected(); n < 4 {
		t.Errorf("server counted %d refused connections, want at least 4", n)
	}
	mu.Lock()
	if len(logged) == 0 || !strings.Contains(logged[0], "refused a connection") {
		t.Errorf("refusals not logged: %q", logged)
	}
	mu.Unlock()

	// A client with a token refuses a server without one, or with another.
	plain := startServer(t)
	if _, err := DialTCP(ctx, plain.Addr(), WithToken(tok)); !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "does not check") {
		t.Errorf("token client vs plain server: %v", err)
	}
	other, err := NewTCPServer("127.0.0.1:0", WithToken([]byte("x")))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := DialTCP(ctx, other.Addr(), WithToken(tok)); !errors.Is(err, ErrAuth) {
		t.Errorf("token client vs server with another token: %v", err)
	}
}

func dialTOpts(t *testing.T, addr string, opts ...Option) *TCPStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := DialTCP(ctx, addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestTCPServerRankLost: when the connection of a rank that proved the job
// token closes without a goodbye (its process died), Gets held for other
// ranks fail at once naming it, once per connection and lost rank; a
// deliberate Close, or a call abandoned by its context, is no loss.
func TestTCPServerRankLost(t *testing.T) {
	tok := WithToken([]byte("rank lost"))
	srv, err := NewTCPServer("127.0.0.1:0", tok)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := testCtx(t)
	a := dialTOpts(t, srv.Addr(), tok, WithRank(0))
	b := dialTOpts(t, srv.Addr(), tok, WithRank(1))
	// Deliberate: a cancelled call and a Close.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if _, err := b.Get(short, "never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("abandoned Get: %v", err)
	}
	cancel()
	b.Close()
	c := dialTOpts(t, srv.Addr(), tok, WithRank(2))
	d := dialTOpts(t, srv.Addr(), tok, WithRank(3))
	held := async(func() error { _, err := a.Get(ctx, "card-of-rank-2"); return err })
	mustBlock(t, held, "Get while nobody is lost")
	// Rank 2 dies: its socket closes with no goodbye.
	c.mu.Lock()
	c.conn.Close()
	c.mu.Unlock()
	start := time.Now()
	err = mustReturn(t, held, "Get after rank 2 died")
	var lost *RankLostError
	if !errors.As(err, &lost) || lost.Rank != 2 {
		t.Fatalf("Get after rank 2 died: %v, want a RankLostError for rank 2", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the loss took %v to reach the waiter", d)
	}
	// Keys that exist are still served. Each connection is told of each
	// loss once: a, told, waits again (the survivors go on through the
	// store: Comm.Agree, Shrink); d, connected before the loss but not yet
	// told, learns it on its first wait; a second loss is told to a too.
	if err := a.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := a.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get of an existing key after a loss: %q %v", v, err)
	}
	short, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := a.Wait(short, "never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait after a loss already told: %v, want it to wait", err)
	}
	if err := d.Wait(ctx, "never"); !errors.As(err, &lost) || lost.Rank != 2 {
		t.Fatalf("first Wait of a connection not told yet: %v, want rank 2 lost", err)
	}
	held = async(func() error { return a.Wait(ctx, "never") })
	mustBlock(t, held, "Wait after the loss was told")
	d.mu.Lock()
	d.conn.Close()
	d.mu.Unlock()
	if err := mustReturn(t, held, "Wait after rank 3 died"); !errors.As(err, &lost) || lost.Rank != 3 {
		t.Fatalf("Wait after a second loss: %v, want rank 3 lost", err)
	}
}

// TestTCPStoreDeadlineIsCtxDone: a call that fails because ctx's deadline
// passed leaves ctx done (the socket deadline may fire before ctx's timer),
// so that a caller can tell a timeout from ctx.Err().
func TestTCPStoreDeadlineIsCtxDone(t *testing.T) {
	c := dialT(t, startServer(t).Addr())
	for i := range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_, err := c.Get(ctx, "never")
		if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() == nil {
			t.Fatalf("call %d: %v, and ctx.Err() = %v after it", i, err, ctx.Err())
		}
		cancel()
	}
}
