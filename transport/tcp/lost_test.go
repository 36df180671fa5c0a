package tcp

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// TestPeerLost: a peer whose connections break without a goodbye (what a
// killed process leaves behind) is reported as lost, naming it; a peer that
// aborts because it lost another rank names that rank; a plain Close is
// ErrClosed and no loss.
func TestPeerLost(t *testing.T) {
	cases := []struct {
		name     string
		close    func(l *link)
		wantLost int
		wantVia  int
	}{
		{"died", func(l *link) {
			// Close the sockets as the kernel does for a killed process.
			l.closed.Store(true)
			for i := range l.tx {
				l.tx[i].conn.Close()
				l.rx[i].conn.Close()
			}
		}, 0, -1},
		{"relayed", func(l *link) { l.Abort(7) }, 7, 0},
		{"closed", func(l *link) { l.Close() }, -1, -1},
	}
	for _, tc := range cases {
		for _, nsocks := range []int{1, 2} {
			t.Run(tc.name, func(t *testing.T) {
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
				tc.close(la.(*link))
				err := <-recvErr
				if d := time.Since(start); d > 2*time.Second {
					t.Errorf("Recv took %v to fail", d)
				}
				var le *transport.LostError
				if tc.wantLost < 0 {
					if !errors.Is(err, transport.ErrClosed) || errors.Is(err, transport.ErrPeerLost) {
						t.Fatalf("got %v, want ErrClosed and no loss", err)
					}
					return
				}
				if !errors.As(err, &le) || le.Rank != tc.wantLost || le.Via != tc.wantVia {
					t.Fatalf("got %v, want rank %d lost (via %d)", err, tc.wantLost, tc.wantVia)
				}
				// Sends fail the same way.
				h := hdr(2, 8)
				if err := lb.Send(ctx, &h, make([]byte, 8)); transport.LostRank(err) != tc.wantLost {
					t.Fatalf("Send after: got %v, want rank %d lost", err, tc.wantLost)
				}
			})
		}
	}
}
