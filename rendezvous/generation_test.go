package rendezvous

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestTCPStoreRefusesReplacedServer: a client whose server goes away and
// whose redial reaches a new server at the same address (rank 0 of a later
// Init) must fail with ErrReplaced, never go on there: the new server holds
// none of its keys, so a Get or a barrier would wait for ever (or read
// another rendezvous' values). A redial to the same server still works
// (TestTCPStoreReconnects).
func TestTCPStoreRefusesReplacedServer(t *testing.T) {
	ctx := testCtx(t)
	a, err := NewTCPServer("127.0.0.1:0", WithToken([]byte("replaced")))
	if err != nil {
		t.Fatal(err)
	}
	addr := a.Addr()
	cl, err := DialTCP(ctx, addr, WithToken([]byte("replaced")), WithRank(1))
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Set(ctx, "k", []byte("a")); err != nil {
		t.Fatal(err)
	}
	// A Get held by server a when a goes away fails (EOF or reset).
	held := async(func() error { _, err := cl.Get(ctx, "never"); return err })
	time.Sleep(20 * time.Millisecond)
	a.Close()
	if err := <-held; err == nil || errors.Is(err, ErrReplaced) {
		t.Fatalf("Get held by a closed server: %v, want a broken connection", err)
	}

	// A new server at the same address, holding the same key.
	b, err := NewTCPServer(addr, WithToken([]byte("replaced")))
	if err != nil {
		t.Fatalf("serving again at %s: %v", addr, err)
	}
	defer b.Close()
	other, err := DialTCP(ctx, addr, WithToken([]byte("replaced")), WithRank(0))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Set(ctx, "k", []byte("b")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i, call := range []func() error{
		func() error { _, err := cl.Add(ctx, "barrier/count", 1); return err },
		func() error { v, err := cl.Get(ctx, "k"); return errors.Join(err, wrongValue(v)) },
		func() error { return cl.Wait(ctx, "barrier/done") },
	} {
		err := call()
		if !errors.Is(err, ErrReplaced) || !strings.Contains(err.Error(), addr) {
			t.Fatalf("call %d after the server was replaced: %v, want ErrReplaced naming %s", i, err, addr)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the calls took %v to fail", d)
	}
	// The client said goodbye to b: no rank was taken for dead there.
	if v, err := other.Get(ctx, "k"); err != nil || string(v) != "b" {
		t.Fatalf("the new server's own client: %q, %v", v, err)
	}
	if n, err := other.Add(ctx, "barrier/count", 0); err != nil || n != 0 {
		t.Fatalf("the replaced client's Add reached the new server: count %d, %v", n, err)
	}
}

// wrongValue is an error when v is there at all (a value from the new
// server).
func wrongValue(v []byte) error {
	if v != nil {
		return errors.New("got the new server's value " + string(v))
	}
	return nil
}

// TestConnectGeneration: with WithGeneration, a rank that connects for its
// second rendezvous while rank 0's first store is still up at the same
// address (or address file) waits for rank 0's second store, and uses it; a
// rank behind rank 0 fails at once.
func TestConnectGeneration(t *testing.T) {
	for _, name := range []string{"addr", "file"} {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			addr, dir := freePort(t), t.TempDir()
			env := func(rank int) Env {
				e := Env{Rank: rank, WorldSize: 2, Token: "generation"}
				if name == "addr" {
					e.StoreAddr = addr
				} else {
					e.JobID, e.StoreDir = "gen", dir
				}
				return e
			}
			connect := func(ctx context.Context, rank int, gen uint64) (Store, error) {
				return Connect(ctx, env(rank), "127.0.0.1", WithGeneration(gen))
			}
			// Generation 1, both ranks; rank 1 closes first.
			old0, err := connect(ctx, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer old0.Close()
			old1, err := connect(ctx, 1, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := old1.Set(ctx, "goccl/card/1", []byte("old")); err != nil {
				t.Fatal(err)
			}
			old1.Close()

			// Rank 1's generation 2 must not settle on rank 0's first store.
			type res struct {
				s   Store
				err error
			}
			ch := make(chan res, 1)
			go func() {
				s, err := connect(ctx, 1, 2)
				ch <- res{s, err}
			}()
			select {
			case r := <-ch:
				t.Fatalf("generation 2 connected to generation 1's store: %v, %v", r.s, r.err)
			case <-time.After(300 * time.Millisecond):
			}
			old0.Close()
			new0, err := connect(ctx, 0, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer new0.Close()
			if err := new0.Set(ctx, "goccl/jobid", []byte("second")); err != nil {
				t.Fatal(err)
			}
			r := <-ch
			if r.err != nil {
				t.Fatalf("rank 1, generation 2: %v", r.err)
			}
			defer r.s.Close()
			if v, err := r.s.Get(ctx, "goccl/jobid"); err != nil || string(v) != "second" {
				t.Fatalf("rank 1, generation 2, reads %q, %v; want rank 0's second store", v, err)
			}

			// A rank behind rank 0 (generation 1 against 2) fails at once.
			start := time.Now()
			_, err = connect(ctx, 1, 1)
			if err == nil || !strings.Contains(err.Error(), "generation 2, rank 1's is 1") {
				t.Fatalf("generation 1 against rank 0's generation 2: %v", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v to fail", d)
			}
		})
	}
}

// TestConnectGenerationPlainStore: a rank with a generation accepts a store
// served without one (by a program that calls Connect itself): there is
// nothing to compare.
func TestConnectGenerationPlainStore(t *testing.T) {
	ctx := testCtx(t)
	addr := freePort(t)
	s0, err := Connect(ctx, Env{Rank: 0, WorldSize: 2, StoreAddr: addr}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer s0.Close()
	s1, err := Connect(ctx, Env{Rank: 1, WorldSize: 2, StoreAddr: addr}, "", WithGeneration(3))
	if err != nil {
		t.Fatalf("generation 3 against a store without one: %v", err)
	}
	s1.Close()
}

// TestDialTCPServerClosedInHandshake: a server closed during the handshake
// (rank 0 closing the store of an earlier Init, to serve a new one at the
// same address) is not taken for a refused token: DialTCP tries again and
// reaches the new server. A server that refuses the token still fails the
// dial with ErrAuth, promptly.
func TestDialTCPServerClosedInHandshake(t *testing.T) {
	ctx := testCtx(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	served := make(chan *TCPServer, 1)
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.ReadFull(c, make([]byte, storeHelloSize))
		ln.Close() // as TCPServer.Close: the listener first, then the connections
		c.Close()
		srv, err := NewTCPServer(addr, WithToken([]byte("hungup")))
		if err != nil {
			t.Errorf("serving again at %s: %v", addr, err)
			return
		}
		served <- srv
	}()
	cl, err := DialTCP(ctx, addr, WithToken([]byte("hungup")))
	if srv := <-served; srv != nil {
		defer srv.Close()
	}
	if err != nil {
		t.Fatalf("DialTCP through a server closed in the handshake: %v", err)
	}
	cl.Close()

	other, err := NewTCPServer("127.0.0.1:0", WithToken([]byte("other")))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	start := time.Now()
	if _, err := DialTCP(ctx, other.Addr(), WithToken([]byte("hungup"))); !errors.Is(err, ErrAuth) {
		t.Fatalf("DialTCP with another token: %v, want ErrAuth", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the refusal took %v", d)
	}
}
