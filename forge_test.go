package goccl_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport/tcp"
)

// forgeStoreDeath is the attack of issue 13 on the store at addr: a 32-byte
// hello that claims rank, a zero proof (all a client without a token sends),
// then a reset (SO_LINGER 0), as the socket of a killed process would close.
func forgeStoreDeath(t *testing.T, addr string, rank int) {
	t.Helper()
	var c net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		if c, err = net.Dial("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store at %s never listened: %v", addr, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	hello := make([]byte, 32)
	copy(hello, "GOCCLSTH")
	binary.BigEndian.PutUint16(hello[8:], 1) // protocol version; flags 0: no token
	binary.BigEndian.PutUint32(hello[12:], uint32(rank))
	c.Write(hello)
	if _, err := io.ReadFull(c, make([]byte, 64)); err != nil {
		t.Fatalf("no challenge from the store: %v", err)
	}
	c.Write(make([]byte, 32))
	time.Sleep(100 * time.Millisecond) // the server has taken (or refused) the proof
	c.(*net.TCPConn).SetLinger(0)
}

// TestForgedRankDeath: a connection to rank 0's store that claims rank 1
// and resets must not fail rank 0's Init, with or without a job token: the
// real rank 1 joins afterwards and both Inits succeed. When rank 1 never
// joins, the Init timeout names it as missing, not as lost.
func TestForgedRankDeath(t *testing.T) {
	for _, tc := range []struct {
		name, token string
		join        bool
	}{
		{"no token", "", true},
		{"token", "forged-death-test", true},
		{"no token, rank 1 never joins", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := freeAddr(t)
			timeout := 30 * time.Second
			if !tc.join {
				timeout = 2 * time.Second
			}
			opts := func(r int) []goccl.Option {
				return []goccl.Option{goccl.WithRank(r), goccl.WithWorldSize(2), goccl.WithStoreAddr(addr),
					goccl.WithJobToken(tc.token), goccl.WithTimeout(timeout)}
			}
			ctx := context.Background()
			type result struct {
				c   *goccl.Comm
				err error
			}
			res0 := make(chan result, 1)
			go func() {
				c, err := goccl.Init(ctx, opts(0)...)
				res0 <- result{c, err}
			}()
			forgeStoreDeath(t, addr, 1)
			if !tc.join {
				r := <-res0
				if r.err == nil {
					r.c.Close()
					t.Fatal("rank 0's Init succeeded without rank 1")
				}
				if msg := r.err.Error(); !strings.Contains(msg, "no word from rank(s) 1") || strings.Contains(msg, "lost") {
					t.Fatalf("rank 0's Init: %v; want a timeout naming rank 1 as missing", r.err)
				}
				return
			}
			time.Sleep(100 * time.Millisecond)
			select {
			case r := <-res0:
				t.Fatalf("rank 0's Init returned before rank 1 joined: %v", r.err)
			default:
			}
			c1, err := goccl.Init(ctx, opts(1)...)
			if err != nil {
				t.Fatalf("rank 1's Init: %v", err)
			}
			defer c1.Close()
			r := <-res0
			if r.err != nil {
				t.Fatalf("rank 0's Init: %v", r.err)
			}
			defer r.c.Close()
			done := make(chan error, 1)
			go func() { done <- r.c.Barrier(ctx) }()
			if err := c1.Barrier(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDirTokenInit: ranks that meet through the address file (as under
// mpirun or srun, which give no token) authenticate their TCP links with
// the token shared through the store directory: a peer connection without
// it is refused.
func TestDirTokenInit(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("OMPI_COMM_WORLD_RANK", "0")
	t.Setenv("OMPI_COMM_WORLD_SIZE", "2")
	t.Setenv("GOCCL_JOB_ID", "dir-token-init")
	t.Setenv("GOCCL_STORE_DIR", dir)
	t.Setenv("GOCCL_SHM_DISABLE", "1")
	t.Setenv("GOCCL_JOB_TOKEN", "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms := make([]*goccl.Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Go(func() { comms[r], errs[r] = goccl.Init(ctx, goccl.WithRank(r), goccl.WithWorldSize(2)) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		defer comms[r].Close()
	}
	env := rendezvous.Env{WorldSize: 2, JobID: "dir-token-init", StoreDir: dir}
	token, err := rendezvous.DirToken(env)
	if err != nil || token == "" {
		t.Fatalf("the job's token: %q, %v", token, err)
	}
	b, err := os.ReadFile(rendezvous.AddrFilePath(env))
	if err != nil {
		t.Fatal(err)
	}
	addr, _, _ := strings.Cut(string(b), "\n")
	op, err := rendezvous.DialTCP(ctx, addr, rendezvous.WithToken([]byte(token)))
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	jobID, err := op.Get(ctx, "goccl/jobid")
	if err != nil {
		t.Fatal(err)
	}
	card, err := op.Get(ctx, "goccl/card/1")
	if err != nil {
		t.Fatal(err)
	}
	ep, err := tcp.Listen(0, net.IPv4(127, 0, 0, 1), string(jobID))
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	if _, err := ep.Connect(ctx, 1, strings.Split(string(card), "|")[1], 1); !errors.Is(err, rendezvous.ErrAuth) {
		t.Errorf("a peer connection without the token: %v, want ErrAuth", err)
	}
}
