package tcp

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// TestPeerLost: a peer whose connections break without a goodbye (what a
// killed process leaves behind) is reported as lost, naming it. (A peer that
// aborts because it lost another rank, and a plain Close: the conformance
// suite's Abort checks.)
func TestPeerLost(t *testing.T) {
	for _, nsocks := range []int{1, 2} {
		t.Run(fmt.Sprintf("socks%d", nsocks), func(t *testing.T) {
			la, lb := connectPair(t, 0, 1, nsocks)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			recvErr := make(chan error, 1)
			go func() {
				h := hdr(1, 8<<20)
				recvErr <- lb.Recv(ctx, &h, make([]byte, 8<<20), nil)
			}()
			time.Sleep(20 * time.Millisecond)
			start := time.Now()
			// Close the sockets as the kernel does for a killed process.
			l := la.(*link)
			l.closed.Store(true)
			for i := range l.tx {
				l.tx[i].conn.Close()
				l.rx[i].conn.Close()
			}
			err := <-recvErr
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("Recv took %v to fail", d)
			}
			var le *transport.LostError
			if !errors.As(err, &le) || le.Rank != 0 || le.Via != -1 {
				t.Fatalf("got %v, want rank 0 lost", err)
			}
			// Sends fail the same way.
			h := hdr(2, 8)
			if err := lb.Send(ctx, &h, make([]byte, 8)); transport.LostRank(err) != 0 {
				t.Fatalf("Send after: got %v, want rank 0 lost", err)
			}
		})
	}
}

// TestClosedWhileJudging: a side that closes its link while it waits for
// the peer's goodbye on a broken connection (a rails link closes its
// other rails when one fails) reports a closed link, not a lost peer: the
// goodbye went unread because of this side, not the peer. The peer's
// sending connections break while its receiving ones, which carry the
// goodbye, stay open and silent, so the wait is under way when Close
// comes.
func TestClosedWhileJudging(t *testing.T) {
	la, lb := connectPair(t, 0, 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recvErr := make(chan error, 1)
	go func() {
		h := hdr(1, 8<<20)
		recvErr <- lb.Recv(ctx, &h, make([]byte, 8<<20), nil)
	}()
	time.Sleep(20 * time.Millisecond)
	l := la.(*link)
	l.closed.Store(true)
	l.tx[0].conn.Close()
	time.Sleep(100 * time.Millisecond) // lb reads EOF and waits for a goodbye (goodbyeWait)
	lb.Close()
	err := <-recvErr
	if !errors.Is(err, transport.ErrClosed) || errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("Recv: got %v, want ErrClosed and no lost peer", err)
	}
	l.rx[0].conn.Close()
}
