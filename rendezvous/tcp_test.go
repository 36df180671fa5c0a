package rendezvous

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
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

func rawConn(t *testing.T, addr string) net.Conn {
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
	rawConn(t, srv.Addr())                                // silent
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
