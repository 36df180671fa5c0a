package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/reduce"
	"github.com/goccl/goccl/transport"
)

// cmaMid is the CMA threshold of most tests: 64 KiB.
const cmaMid = 64 << 10

// sendAsync starts l.Send(ctx, h, buf) in a goroutine and returns its result channel.
func sendAsync(ctx context.Context, l transport.Link, h transport.Header, buf []byte) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- l.Send(ctx, &h, buf) }()
	return errc
}

// waitErr waits at most d for errc.
func waitErr(t *testing.T, errc <-chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(d):
		t.Fatalf("still blocked after %v", d)
		return nil
	}
}

func TestCMAThreshold(t *testing.T) {
	ctx := ctxT(t)
	if a, _ := newPair(t, Config{}); a.(*link).cmaMin != DefaultCMAThreshold {
		t.Fatalf("default threshold %d, want %d", a.(*link).cmaMin, DefaultCMAThreshold)
	}
	for _, tc := range []struct {
		threshold, size int
		cma             bool
	}{
		{cmaMid, cmaMid - 64, false},
		{cmaMid, cmaMid, true},
		{1 << 20, 512 << 10, false},
		{1 << 20, 1 << 20, true},
		{CMADisabled, 2 << 20, false},
	} {
		a, b := newPair(t, Config{CMAThreshold: tc.threshold})
		if s := b.(*link).in.cmaState.Load(); s != cmaOK && tc.threshold >= 0 {
			t.Fatalf("threshold %d: probe state %d", tc.threshold, s)
		}
		src := randBytes(rand.New(rand.NewPCG(1, uint64(tc.size))), tc.size)
		h := hdr(1, tc.size)
		recvs := cmaRecvs.Load()
		var errc <-chan error
		if ok, err := a.TrySend(&h, src); err != nil || ok == tc.cma {
			// TrySend takes a copied message that fits (the ring holds 4 MiB)
			// and refuses a CMA one.
			t.Fatalf("threshold %d, %d bytes: TrySend %v %v", tc.threshold, tc.size, ok, err)
		} else if !ok {
			errc = sendAsync(ctx, a, h, src)
		}
		got := make([]byte, tc.size)
		if err := b.Recv(ctx, &h, got, nil); err != nil || !bytes.Equal(got, src) {
			t.Fatalf("threshold %d, %d bytes: %v", tc.threshold, tc.size, err)
		}
		if errc != nil {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
		if n := cmaRecvs.Load() - recvs; (n == 1) != tc.cma {
			t.Fatalf("threshold %d, %d bytes: %d messages by CMA", tc.threshold, tc.size, n)
		}
	}
}

// exchange sends src both ways at once and checks what arrives (folded into
// dst with xor when fold is set); it returns how many messages came by CMA.
func exchange(t *testing.T, a, b transport.Link, seq uint64, src []byte, fold bool) uint64 {
	t.Helper()
	ctx := ctxT(t)
	recvs := cmaRecvs.Load()
	h := hdr(seq, len(src))
	e1, e2 := sendAsync(ctx, a, h, src), sendAsync(ctx, b, h, src)
	for _, l := range []transport.Link{a, b} {
		got := make([]byte, len(src))
		var f transport.ReduceFunc
		if fold {
			copy(got, src)
			f = xorInto
		}
		if err := l.Recv(ctx, &h, got, f); err != nil {
			t.Fatal(err)
		}
		want := src
		if fold {
			want = make([]byte, len(src))
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d bytes (fold %v): payload differs", len(src), fold)
		}
	}
	for _, e := range []<-chan error{e1, e2} {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
	return cmaRecvs.Load() - recvs
}

// A probe that fails (as with Yama ptrace_scope, seccomp or another uid)
// leaves every message on the copy path.
func TestCMAProbeFails(t *testing.T) {
	testProbeFail.Store(true)
	defer testProbeFail.Store(false)
	a, b := newPair(t, Config{SlotSize: 64 << 10, Slots: 4, CMAThreshold: cmaMid})
	for _, l := range []transport.Link{a, b} {
		if s := l.(*link).in.cmaState.Load(); s != cmaFailed {
			t.Fatalf("probe state %d, want failed", s)
		}
	}
	src := randBytes(rand.New(rand.NewPCG(5, 5)), 3<<20+64)
	for i, fold := range []bool{false, true} {
		if n := exchange(t, a, b, uint64(i+1), src, fold); n != 0 {
			t.Fatalf("%d messages by CMA after a failed probe", n)
		}
	}
	h := hdr(3, cmaMid)
	if ok, err := a.TrySend(&h, src[:cmaMid]); !ok || err != nil {
		t.Fatalf("TrySend without CMA: %v %v", ok, err)
	}
}

func TestCMAEnv(t *testing.T) {
	t.Run("off", func(t *testing.T) {
		t.Setenv("GOCCL_SHM_CMA", "0")
		a, b := newPair(t, Config{CMAThreshold: cmaMid})
		for _, l := range []transport.Link{a, b} {
			l := l.(*link)
			if l.cmaMin != 0 || l.in.cmaState.Load() != cmaFailed {
				t.Fatalf("GOCCL_SHM_CMA=0: cmaMin %d, state %d", l.cmaMin, l.in.cmaState.Load())
			}
		}
		if n := exchange(t, a, b, 1, make([]byte, 1<<20), false); n != 0 {
			t.Fatalf("%d messages by CMA with GOCCL_SHM_CMA=0", n)
		}
	})
	t.Run("threshold", func(t *testing.T) {
		t.Setenv("GOCCL_SHM_CMA_THRESHOLD", "1M")
		a, _ := newPair(t, Config{CMAThreshold: 4096})
		if m := a.(*link).cmaMin; m != 1<<20 {
			t.Fatalf("GOCCL_SHM_CMA_THRESHOLD=1M: threshold %d", m)
		}
		t.Setenv("GOCCL_SHM_CMA_THRESHOLD", "-1")
		a, _ = newPair(t, Config{CMAThreshold: cmaMid})
		if m := a.(*link).cmaMin; m != 0 {
			t.Fatalf("GOCCL_SHM_CMA_THRESHOLD=-1: threshold %d", m)
		}
		t.Setenv("GOCCL_SHM_CMA_THRESHOLD", "lots")
		if _, err := CreateRing(uniqueName(t, "x"), Config{Dir: t.TempDir()}); err == nil {
			t.Fatal("bad GOCCL_SHM_CMA_THRESHOLD accepted")
		}
	})
}

// A receiver that cannot read a CMA message refuses it, and the sender sends
// it again through the slots; the next message goes by CMA again.
func TestCMARefusedMessageIsResent(t *testing.T) {
	a, b := newPair(t, Config{CMAThreshold: cmaMid})
	src := randBytes(rand.New(rand.NewPCG(6, 6)), 2<<20+64)
	for i, fold := range []bool{false, true} {
		refused := cmaRefused.Load()
		testReadFails.Store(1)
		if n := exchange(t, a, b, uint64(2*i+1), src, fold); n != 1 {
			t.Fatalf("fold %v: %d messages by CMA, want 1 (the other refused)", fold, n)
		}
		if n := cmaRefused.Load() - refused; n != 1 {
			t.Fatalf("fold %v: %d refused", fold, n)
		}
		if n := exchange(t, a, b, uint64(2*i+2), src, fold); n != 2 {
			t.Fatalf("fold %v: %d messages by CMA after a refusal, want 2", fold, n)
		}
	}
}

// A CMA Send whose receiver never reads returns promptly when its context is
// cancelled, and leaves the link closed on both sides.
func TestCMASendCancelled(t *testing.T) {
	a, b := newPair(t, Config{CMAThreshold: cmaMid})
	ctx, cancel := context.WithCancel(context.Background())
	buf := make([]byte, 4<<20)
	h := hdr(1, len(buf))
	errc := sendAsync(ctx, a, h, buf)
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	cancel()
	if err := waitErr(t, errc, 2*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("Send returned %v after cancel", d)
	}
	if err := b.Recv(ctxT(t), &h, buf, nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("receiver: want ErrClosed, got %v", err)
	}
	if err := a.Recv(ctxT(t), &h, buf, nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("sender's own Recv: want ErrClosed, got %v", err)
	}
}

// An aborting CMA Send waits, bounded, for a receiver in the middle of a
// process_vm_readv (simulated by raising the reader-active flag).
func TestCMAAbortWaitsForReader(t *testing.T) {
	for _, clear := range []bool{true, false} {
		a, b := newPair(t, Config{CMAThreshold: cmaMid})
		la := a.(*link)
		la.enter() // keeps a's mappings after the abort closes the link
		out := la.out
		out.readerActive.Store(1)
		var cleared atomic.Bool
		clearedDone := make(chan struct{})
		buf := make([]byte, 1<<20)
		h := hdr(1, len(buf))
		go func() {
			defer close(clearedDone)
			if clear {
				time.Sleep(300 * time.Millisecond)
				cleared.Store(true)
				out.readerActive.Store(0)
			}
		}()
		// The deadline must not pass before Send has published the
		// message (then it rightly returns at once): 50 ms, not 5, for a
		// loaded machine under the race detector.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		start := time.Now()
		err := a.Send(ctx, &h, buf)
		d := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want DeadlineExceeded, got %v", err)
		}
		if clear && !cleared.Load() {
			t.Fatalf("Send returned after %v, while the reader was still active", d)
		}
		if !clear && (d < cmaAbortWait || d > cmaAbortWait+2*time.Second) {
			t.Fatalf("Send with a stuck reader returned after %v, want about %v", d, cmaAbortWait+50*time.Millisecond)
		}
		<-clearedDone
		out.readerActive.Store(0)
		la.leave()
		if err := a.Send(ctxT(t), &h, buf); !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("link not closed by the aborted CMA Send: %v", err)
		}
		if err := b.Recv(ctxT(t), &h, buf, nil); !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("receiver after the aborted CMA Send: want ErrClosed, got %v", err)
		}
	}
}

// A receiver interrupted in the middle of a CMA message (ctx, or the peer's
// Close) closes the link: the sender's Send fails instead of hanging.
func TestCMARecvInterrupted(t *testing.T) {
	for _, byCtx := range []bool{true, false} {
		a, b := newPair(t, Config{CMAThreshold: cmaMid})
		ctx, cancel := context.WithCancel(context.Background())
		buf := make([]byte, 4*cmaStageSize)
		h := hdr(1, len(buf))
		errc := sendAsync(ctxT(t), a, h, buf)
		calls := 0
		err := b.Recv(ctx, &h, make([]byte, len(buf)), func(d, s []byte) {
			if calls++; calls == 1 {
				if byCtx {
					cancel()
				} else {
					a.Close()
				}
			}
		})
		cancel()
		want := error(transport.ErrClosed)
		if byCtx {
			want = context.Canceled
		}
		if !errors.Is(err, want) || calls != 1 {
			t.Fatalf("byCtx %v: want %v after one piece, got %v after %d", byCtx, want, err, calls)
		}
		if err := waitErr(t, errc, 2*time.Second); !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("byCtx %v: sender: want ErrClosed, got %v", byCtx, err)
		}
		if err := b.Recv(ctxT(t), &h, buf, nil); !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("byCtx %v: next Recv: want ErrClosed, got %v", byCtx, err)
		}
	}
}

// benchLink streams messages of size bytes from x to y (and from y to x at the
// same time when bidir is set, as in a two-rank AllGather), folding them in
// with red when it is not nil.
func benchLink(b *testing.B, cfg Config, size int, red transport.ReduceFunc, bidir bool) {
	x, y := newPair(b, cfg)
	ctx := context.Background()
	h := hdr(1, size)
	dirs := [][2]transport.Link{{x, y}}
	if bidir {
		dirs = append(dirs, [2]transport.Link{y, x})
	}
	errc := make(chan error, 2*len(dirs))
	bufs := make([][2][]byte, len(dirs))
	for i := range bufs {
		bufs[i] = [2][]byte{make([]byte, size), make([]byte, size)}
	}
	recvs := cmaRecvs.Load()
	b.SetBytes(int64(size * len(dirs)))
	b.ReportAllocs()
	b.ResetTimer()
	for i, d := range dirs {
		go func() {
			h := h
			for range b.N {
				if err := d[1].Recv(ctx, &h, bufs[i][1], red); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		go func() {
			h := h
			for range b.N {
				if err := d[0].Send(ctx, &h, bufs[i][0]); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range 2 * len(dirs) {
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if n := cmaRecvs.Load() - recvs; cfg.CMAThreshold > 0 && size >= cfg.CMAThreshold && n == 0 {
		b.Fatal("CMA mode but no message went by CMA")
	}
}

// BenchmarkLink: copy vs CMA (default threshold, or every size with "cma"),
// one way or both ways at once, copying or folding float32 sums.
func BenchmarkLink(b *testing.B) {
	add, err := reduce.Func(reduce.Float32, reduce.Sum)
	if err != nil {
		b.Fatal(err)
	}
	for _, bidir := range []bool{false, true} {
		for _, red := range []transport.ReduceFunc{nil, add} {
			for _, size := range []int{64 << 10, 256 << 10, 1 << 20, 16 << 20} {
				for _, mode := range []struct {
					name string
					th   int
				}{{"copy", CMADisabled}, {"cma", cmaAll}} {
					name := "oneway"
					if bidir {
						name = "bidir"
					}
					if red != nil {
						name += "-reduce"
					}
					name += fmt.Sprintf("/%dKiB/%s", size>>10, mode.name)
					b.Run(name, func(b *testing.B) { benchLink(b, Config{CMAThreshold: mode.th}, size, red, bidir) })
				}
			}
		}
	}
}
