package rails_test

import (
	"context"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// TestFailoverCopies: unstriped messages of sizes that make a lane's ring
// of copies grow, fill and wrap, sent by TrySend (Send when it declines)
// one at a time: each must go, although the peer's acknowledgement may
// come before TrySend returns (a copy logged after its send would never
// be freed, and the next message would wait for ever).
func TestFailoverCopies(t *testing.T) {
	p := newFOPair(t, 2, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sizes := []int{0, 1, 100, 4096, 65536, 65537, 1<<20 - 1, 100, 1<<20 - 1, 1<<20 - 1, 7, 1<<20 - 1}
	src, dst := make([]byte, 1<<20), make([]byte, 1<<20)
	for k := range 40 {
		for i, n := range sizes {
			h := transport.Header{Seq: uint64(k), Bytes: uint64(n), Root: -1}
			done := make(chan error, 1)
			go func() { w := h; done <- p.b.Recv(ctx, &w, dst[:n], nil) }()
			ok, err := p.a.TrySend(&h, src[:n])
			if err == nil && !ok {
				err = p.a.Send(ctx, &h, src[:n])
			}
			if err != nil {
				t.Fatalf("round %d size %d (%d): send %v\na:\n%sb:\n%s", k, i, n, err, p.a.DebugState(), p.b.DebugState())
			}
			if err := <-done; err != nil {
				t.Fatalf("round %d size %d: recv %v", k, i, err)
			}
		}
	}
}
