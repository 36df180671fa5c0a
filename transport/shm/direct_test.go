package shm

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

func TestReadPeer(t *testing.T) {
	a, b := newPair(t, Config{})
	pa, pb := a.(transport.PeerMemory), b.(transport.PeerMemory)
	if !pa.PeerReadable() || !pb.PeerReadable() {
		t.Fatal("PeerReadable false between two links of one process")
	}
	src := randBytes(rand.New(rand.NewPCG(7, 7)), 3*cmaDirectPiece+4096+17)
	reg := pa.Expose(src)
	if reg.Len != uint64(len(src)) {
		t.Fatalf("region length %d, want %d", reg.Len, len(src))
	}
	var enc [transport.RegionSize]byte
	reg.Encode(enc[:])
	if transport.DecodeRegion(enc[:]) != reg {
		t.Fatal("region does not survive encoding")
	}
	ctx := ctxT(t)
	for _, c := range []struct{ off, n int }{{0, len(src)}, {1, 100}, {cmaDirectPiece - 3, cmaDirectPiece + 7}, {len(src) - 1, 1}, {len(src), 0}, {5, 0}} {
		dst := make([]byte, c.n)
		if err := pb.ReadPeer(ctx, reg, c.off, dst); err != nil {
			t.Fatalf("read %d at %d: %v", c.n, c.off, err)
		}
		if !bytes.Equal(dst, src[c.off:c.off+c.n]) {
			t.Fatalf("read %d at %d: wrong bytes", c.n, c.off)
		}
	}
	for _, c := range []struct{ off, n int }{{-1, 1}, {0, len(src) + 1}, {len(src), 1}, {len(src) + 1, 0}} {
		if err := pb.ReadPeer(ctx, reg, c.off, make([]byte, c.n)); err == nil {
			t.Fatalf("read %d at %d outside a %d-byte region succeeded", c.n, c.off, len(src))
		}
	}
	// Writes land in the peer's buffer.
	dstBuf := make([]byte, len(src))
	dreg := pa.Expose(dstBuf)
	for _, c := range []struct{ off, n int }{{0, len(src)}, {3, cmaDirectPiece + 5}, {len(src) - 1, 1}} {
		clear(dstBuf)
		if err := pb.WritePeer(ctx, dreg, c.off, src[:c.n]); err != nil {
			t.Fatalf("write %d at %d: %v", c.n, c.off, err)
		}
		if !bytes.Equal(dstBuf[c.off:c.off+c.n], src[:c.n]) || bytes.ContainsFunc(dstBuf[:c.off], func(r rune) bool { return r != 0 }) {
			t.Fatalf("write %d at %d: wrong bytes in the peer's buffer", c.n, c.off)
		}
	}
	if err := pb.WritePeer(ctx, dreg, 1, src); err == nil {
		t.Fatal("write past the end of the peer's region succeeded")
	}
	// The link is still usable after a refused out-of-range read.
	h := hdr(1, 8)
	if err := a.Send(ctx, &h, src[:8]); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	if err := b.Recv(ctx, &h, got, nil); err != nil || !bytes.Equal(got, src[:8]) {
		t.Fatalf("recv after refused read: %v", err)
	}
	// A closed link refuses reads, on both sides.
	a.Close()
	for _, p := range []transport.PeerMemory{pa, pb} {
		if err := p.ReadPeer(ctx, reg, 0, got); !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("read on a closed link: want ErrClosed, got %v", err)
		}
	}
}

func TestReadPeerProbeFails(t *testing.T) {
	testProbeFail.Store(true)
	defer testProbeFail.Store(false)
	a, b := newPair(t, Config{})
	pa, pb := a.(transport.PeerMemory), b.(transport.PeerMemory)
	if pa.PeerReadable() || pb.PeerReadable() {
		t.Fatal("PeerReadable true after a failed probe")
	}
	src := make([]byte, 64)
	if err := pb.ReadPeer(ctxT(t), pa.Expose(src), 0, make([]byte, 8)); err == nil {
		t.Fatal("ReadPeer succeeded on a link whose probe failed")
	}
}

func TestReadPeerCMAOff(t *testing.T) {
	a, b := newPair(t, Config{CMAThreshold: CMADisabled})
	if a.(transport.PeerMemory).PeerReadable() || b.(transport.PeerMemory).PeerReadable() {
		t.Fatal("PeerReadable true with CMA disabled")
	}
}

// Abort (an exposing rank giving up) waits until the peer's read in
// progress has ended, so the caller never reuses a buffer being read.
func TestAbortWaitsForPeerRead(t *testing.T) {
	for _, clear := range []bool{true, false} {
		a, b := newPair(t, Config{})
		lb := b.(*link)
		lb.enter() // keeps b's mappings after a's Abort
		lb.in.readerActive.Store(1)
		var cleared atomic.Bool
		done := make(chan struct{})
		go func() {
			defer close(done)
			if clear {
				time.Sleep(30 * time.Millisecond)
				cleared.Store(true)
				lb.in.readerActive.Store(0)
			}
		}()
		start := time.Now()
		a.Abort(transport.NoLostRank)
		d := time.Since(start)
		if clear && !cleared.Load() {
			t.Fatalf("Abort returned after %v while the peer was still reading", d)
		}
		if !clear && (d < cmaAbortWait || d > cmaAbortWait+2*time.Second) {
			t.Fatalf("Abort with a stuck reader returned after %v, want about %v", d, cmaAbortWait)
		}
		<-done
		lb.in.readerActive.Store(0)
		// The reader sees the close before its next piece.
		if err := b.(transport.PeerMemory).ReadPeer(ctxT(t), transport.Region{Addr: 1, Len: 8}, 0, make([]byte, 8)); !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("read after the peer's Abort: want ErrClosed, got %v", err)
		}
		lb.leave()
	}
}
