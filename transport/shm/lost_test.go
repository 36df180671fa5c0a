package shm

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// TestPeerProcessDies: a Recv and a blocked Send on a link whose peer's
// process dies fail with a *transport.LostError naming the peer, long before
// their deadline. The dead process is left unreaped (a zombie) until the end,
// which must still count as gone.
func TestPeerProcessDies(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a helper process: %v", err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()

	// a watches the helper as if it were rank 1's process.
	a0, b := newPair(t, Config{SlotSize: 4096, Slots: 2})
	al := a0.(*link)
	al.watchPeer(cmd.Process.Pid)
	_ = b

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recvErr := make(chan error, 1)
	go func() {
		h := hdr(1, 8)
		recvErr <- a0.Recv(ctx, &h, make([]byte, 8), nil)
	}()
	select {
	case err := <-recvErr:
		t.Fatalf("Recv returned before the peer died: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err := <-recvErr
	if d := time.Since(killed); d > 2*time.Second {
		t.Errorf("Recv took %v after the peer died", d)
	}
	var lost *transport.LostError
	if !errors.As(err, &lost) || lost.Rank != 1 || lost.Via != -1 || !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("Recv: got %v, want a LostError naming rank 1", err)
	}
	// Later calls fail the same way.
	h := hdr(2, 8)
	if err := a0.Send(ctx, &h, make([]byte, 8)); transport.LostRank(err) != 1 {
		t.Fatalf("Send after the loss: got %v, want a LostError naming rank 1", err)
	}
}
