package tcp

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// TestForgedPeerClose: without a job token anybody can pass the handshake
// as rank 0. Connections that do so for every slot and then reset before
// rank 1 collects them are dropped, not made into rank 1's link to rank 0
// (which would report rank 0 lost): rank 1's Connect waits for the real
// rank 0, and the link works.
func TestForgedPeerClose(t *testing.T) {
	ea, eb := newEndpoint(t, 0, "job-1"), newEndpoint(t, 1, "job-1")
	forger := newEndpoint(t, 0, "job-1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	forged, err := forger.dial(ctx, 1, eb.Addr(), 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		eb.mu.Lock()
		n := len(eb.parked)
		eb.mu.Unlock()
		if n == len(forged) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d forged connections parked", n, len(forged))
		}
	}
	for _, c := range forged {
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
	time.Sleep(50 * time.Millisecond) // the resets arrive
	var lb transport.Link
	var errB error
	done := make(chan struct{})
	go func() {
		defer close(done)
		lb, errB = eb.Connect(ctx, 0, ea.Addr(), 1)
	}()
	time.Sleep(50 * time.Millisecond) // rank 1 looks at the parked connections first
	la, err := ea.Connect(ctx, 1, eb.Addr(), 1)
	<-done
	if err != nil || errB != nil {
		t.Fatalf("connect: %v / %v", err, errB)
	}
	defer la.Close()
	defer lb.Close()
	h := hdr(1, 3)
	if err := la.Send(ctx, &h, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3)
	if err := lb.Recv(ctx, &h, got, nil); err != nil || string(got) != "abc" {
		t.Fatalf("rank 1 received %q, %v", got, err)
	}
	if n := eb.rejectedCount(); n != int64(len(forged)) {
		t.Errorf("rank 1 dropped %d connections, want %d", n, len(forged))
	}
}
