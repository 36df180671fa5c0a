package bootstrap

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport"
)

// lossStore is a store whose waits fail with the loss of a rank once lose
// is closed, as the TCP store's server reports a rank whose connection
// closed without a goodbye.
type lossStore struct {
	rendezvous.Store
	rank int
	lose chan struct{}
}

func (s lossStore) Get(ctx context.Context, key string) ([]byte, error) {
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.lose:
			cancel()
		case <-gctx.Done():
		}
	}()
	v, err := s.Store.Get(gctx, key)
	if err != nil && ctx.Err() == nil {
		return nil, &rendezvous.RankLostError{Rank: s.rank, Reason: "its connection to the store closed without a goodbye"}
	}
	return v, err
}

// TestConnectPeerGoneWhileLinking: 3 ranks over TCP; rank 2 publishes its
// card (an address that accepts connections and never answers) and dies
// or gives up while ranks 0 and 1 make their links: they fail at once
// (within 2 s of a 20 s deadline), naming rank 2, instead of waiting for
// its links until the deadline.
func TestConnectPeerGoneWhileLinking(t *testing.T) {
	for _, how := range []string{"lost", "abandoned"} {
		t.Run(how, func(t *testing.T) {
			t.Setenv("GOCCL_SHM_DISABLE", "1")
			t.Setenv("GOCCL_NSOCKS_PERPEER", "1")
			mem := rendezvous.NewMemStore()
			defer mem.Close()
			store := lossStore{mem, 2, make(chan struct{})}
			silent, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer silent.Close()
			go func() { // accepts and holds, as a stopped or dying process's kernel does
				var held []net.Conn
				defer func() {
					for _, c := range held {
						c.Close()
					}
				}()
				for {
					c, err := silent.Accept()
					if err != nil {
						return
					}
					held = append(held, c)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := range 2 {
				wg.Go(func() {
					var res *Result
					res, errs[r] = Connect(ctx, Params{Rank: r, Size: 3, LocalRank: -1, Store: store, Log: testLog(t)})
					if res != nil {
						release([]*Result{res})
					}
				})
			}
			jobID, err := mem.Get(ctx, "goccl/jobid")
			if err != nil {
				t.Fatal(err)
			}
			me := card{Host: "elsewhere", Addr: silent.Addr().String(), Pid: 1}
			if err := mem.Set(ctx, cardKey(2), []byte(me.String())); err != nil {
				t.Fatal(err)
			}
			// Every rank passes the shared-memory row's barrier, then ranks
			// 0 and 1 wait for rank 2's TCP links.
			go rendezvous.Barrier(ctx, mem, "goccl/shm-mapped", 3)
			time.Sleep(300 * time.Millisecond)
			start := time.Now()
			if how == "lost" {
				close(store.lose)
			} else {
				Abandon(mem, string(jobID), 2, errors.New("Init: something failed"))
			}
			wg.Wait()
			for r, err := range errs {
				var lost *transport.LostError
				var ab *AbandonedError
				switch {
				case err == nil:
					t.Errorf("rank %d: Connect worked without rank 2", r)
				case how == "lost" && (!errors.As(err, &lost) || lost.Rank != 2):
					t.Errorf("rank %d: %v, want rank 2 lost", r, err)
				case how == "abandoned" && (!errors.As(err, &ab) || !strings.Contains(err.Error(), "rank 2: Init: something failed")):
					t.Errorf("rank %d: %v, want rank 2's note", r, err)
				}
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("Connect failed %v after rank 2 went, want at once", d.Round(time.Millisecond))
			}
		})
	}
}

// TestConnectKeepsStoreConnection: the watch beside the link phase ends
// with a cancelled store call, which makes a TCP store client drop its
// connection; Connect dials it again, so that the store's server still
// sees the process die (a rank with no connection open dies unseen).
func TestConnectKeepsStoreConnection(t *testing.T) {
	t.Setenv("GOCCL_SHM_DISABLE", "1")
	t.Setenv("GOCCL_NSOCKS_PERPEER", "1")
	tok := rendezvous.WithToken([]byte("keep"))
	srv, err := rendezvous.NewTCPServer("127.0.0.1:0", tok)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := make([]*Result, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		store, err := rendezvous.DialTCP(ctx, srv.Addr(), tok, rendezvous.WithRank(r))
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		wg.Go(func() {
			res[r], errs[r] = Connect(ctx, Params{Rank: r, Size: 2, LocalRank: -1, Store: store, Log: testLog(t)})
		})
	}
	wg.Wait()
	defer release(res)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	time.Sleep(200 * time.Millisecond) // a dropped connection leaves the server
	if n := srv.Clients(); n != 2 {
		t.Errorf("%d store connections open after Connect, want 2 (one per rank)", n)
	}
}

// TestAbandonCause: a note left by a rank that gave up because a rank was
// lost is read as that loss (so every rank reports the loss, whichever news
// reached it first); another note as AbandonedError.
func TestAbandonCause(t *testing.T) {
	store := rendezvous.NewMemStore()
	ctx := context.Background()
	for _, tc := range []struct {
		err  error
		lost int
	}{
		{&rendezvous.RankLostError{Rank: 2, Reason: "its connection to the store closed"}, 2},
		{&transport.PeerError{Peer: 3, Op: "recv", Err: &transport.LostError{Rank: 3, Via: -1}}, 3},
		{errors.New("Init: something failed"), -1},
	} {
		Abandon(store, "job", 1, tc.err)
		v, err := store.Get(ctx, abandonKey("job"))
		if err != nil {
			t.Fatal(err)
		}
		cause := abandonCause(v)
		var rl *rendezvous.RankLostError
		var ab *AbandonedError
		switch {
		case tc.lost >= 0 && (!errors.As(cause, &rl) || rl.Rank != tc.lost || !strings.Contains(cause.Error(), "reported by rank 1")):
			t.Errorf("note of %v: cause %v, want rank %d lost, reported by rank 1", tc.err, cause, tc.lost)
		case tc.lost < 0 && (!errors.As(cause, &ab) || ab.Note != "rank 1: Init: something failed"):
			t.Errorf("note of %v: cause %v, want the note", tc.err, cause)
		}
	}
}
