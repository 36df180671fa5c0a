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
