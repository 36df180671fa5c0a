package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

var ringSeq atomic.Int64

// testDir is /dev/shm when usable (the real thing), else a temp dir.
func testDir(t testing.TB) string {
	if st, err := os.Stat(DefaultDir); err == nil && st.IsDir() {
		if f, err := os.CreateTemp(DefaultDir, "goccl-probe-*"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return DefaultDir
		}
	}
	return t.TempDir()
}

func uniqueName(t testing.TB, suffix string) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	if len(name) > 60 {
		name = name[:60]
	}
	return fmt.Sprintf("goccl-test-%d-%d-%s-%s", os.Getpid(), ringSeq.Add(1), name, suffix)
}

// newPair returns the links of rank 0 to rank 1 and of rank 1 to rank 0, with
// every ring mapped twice (once per side) as two processes would.
func newPair(t testing.TB, cfg Config) (a, b transport.Link) {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = testDir(t)
	}
	abIn, err := CreateRing(uniqueName(t, "ab"), cfg) // created by the receiver (1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(abIn.Path()) })
	baIn, err := CreateRing(uniqueName(t, "ba"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(baIn.Path()) })
	abOut, err := OpenRing(abIn.Path())
	if err != nil {
		t.Fatal(err)
	}
	baOut, err := OpenRing(baIn.Path())
	if err != nil {
		t.Fatal(err)
	}
	if err := abIn.Unlink(); err != nil {
		t.Fatal(err)
	}
	if err := baOut.Unlink(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abIn.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ring file still present after Unlink: %v", err)
	}
	a = NewLink(0, 1, abOut, baIn)
	b = NewLink(1, 0, baOut, abIn)
	// a's NewLink ran before b offered CMA on ba: let a probe now, as its
	// first Recv would, so that both directions start out alike.
	if la := a.(*link); !la.cmaProbed {
		la.probeCMA()
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// Test modes: every message through the slots, or every non-empty message by
// CMA (threshold 1 byte).
const cmaAll = 1

// eachMode runs f as subtest "copy" with CMA off and "cma" with CMA for every
// non-empty message.
func eachMode(t *testing.T, f func(t *testing.T, cmaThreshold int)) {
	t.Run("copy", func(t *testing.T) { f(t, CMADisabled) })
	t.Run("cma", func(t *testing.T) { f(t, cmaAll) })
}

// deadlineCtx has a deadline but no Done channel, like goccl's operation
// context: links must notice it through Err.
type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c deadlineCtx) Done() <-chan struct{}       { return nil }
func (c deadlineCtx) Err() error {
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(r.Uint32()), byte(r.Uint32()), byte(n)}).Read(b)
	return b
}

func hdr(seq uint64, n int) transport.Header {
	return transport.Header{Seq: seq, Op: 3, DType: 7, RedOp: 1, Root: -1, Count: uint64(n), Bytes: uint64(n)}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRoundTrip(t *testing.T) { eachMode(t, testRoundTrip) }

func testRoundTrip(t *testing.T, cmaThreshold int) {
	a, b := newPair(t, Config{CMAThreshold: cmaThreshold})
	recvs := cmaRecvs.Load()
	if a.Name() != "shm" || a.Peer() != 1 || b.Peer() != 0 {
		t.Fatalf("Name/Peer: %q %d %d", a.Name(), a.Peer(), b.Peer())
	}
	ctx := ctxT(t)
	rng := rand.New(rand.NewPCG(1, 2))
	S := DefaultSlotSize
	sizes := []int{0, 1, 7, 64, S - 1, S, S + 1, 10<<20 + 3}
	for i, n := range sizes {
		seq := uint64(i + 1)
		h := hdr(seq, n)
		src := [2][]byte{randBytes(rng, n), randBytes(rng, n)}
		links := [2]transport.Link{a, b}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		got := [2][]byte{make([]byte, n), make([]byte, n)}
		for side := 0; side < 2; side++ {
			wg.Add(2)
			go func() {
				defer wg.Done()
				h := h
				errs[2*side] = links[side].Send(ctx, &h, src[side])
			}()
			go func() {
				defer wg.Done()
				h := h
				errs[2*side+1] = links[side].Recv(ctx, &h, got[side], nil)
			}()
		}
		wg.Wait()
		for j, err := range errs {
			if err != nil {
				t.Fatalf("size %d: call %d: %v", n, j, err)
			}
		}
		if !bytes.Equal(got[0], src[1]) || !bytes.Equal(got[1], src[0]) {
			t.Fatalf("size %d: payload differs", n)
		}
	}
	wantCMA := uint64(0)
	if cmaThreshold > 0 {
		wantCMA = 2 * uint64(len(sizes)-1) // all but the empty messages
	}
	if got := cmaRecvs.Load() - recvs; got != wantCMA {
		t.Fatalf("%d messages went by CMA, want %d", got, wantCMA)
	}
}

func TestRecvReduce(t *testing.T) { eachMode(t, testRecvReduce) }

func testRecvReduce(t *testing.T, cmaThreshold int) {
	const S = 4096
	a, b := newPair(t, Config{SlotSize: S, Slots: 4, CMAThreshold: cmaThreshold})
	ctx := ctxT(t)
	rng := rand.New(rand.NewPCG(3, 4))
	// The largest size takes several staging pieces on the CMA path.
	for _, n := range []int{0, 5, S, 3*S + 100, 20*S + 64, 2*cmaStageSize + 3*S + 7} {
		src := randBytes(rng, n)
		dst := randBytes(rng, n)
		want := make([]byte, n)
		for i := range want {
			want[i] = dst[i] + src[i]
		}
		h := hdr(uint64(n), n)
		errc := make(chan error, 1)
		go func() { hh := h; errc <- a.Send(ctx, &hh, src) }()
		var pieces []int
		total := 0
		err := b.Recv(ctx, &h, dst, func(d, s []byte) {
			if len(d) != len(s) {
				t.Errorf("reduce pieces differ: %d vs %d", len(d), len(s))
			}
			pieces = append(pieces, len(d))
			total += len(d)
			for i := range d {
				d[i] += s[i]
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if total != n || !bytes.Equal(dst, want) {
			t.Fatalf("n=%d: reduce result wrong (total %d)", n, total)
		}
		for i, p := range pieces {
			if i < len(pieces)-1 && (p%64 != 0 || p == 0) {
				t.Fatalf("n=%d: piece %d has %d bytes", n, i, p)
			}
		}
	}
}

func TestHeaderMismatch(t *testing.T) { eachMode(t, testHeaderMismatch) }

func testHeaderMismatch(t *testing.T, cmaThreshold int) {
	a, b := newPair(t, Config{SlotSize: 4096, Slots: 2, CMAThreshold: cmaThreshold})
	ctx := ctxT(t)
	buf := make([]byte, 64)
	hs := hdr(1, 64)
	hs.Count = 5
	hr := hdr(1, 64)
	hr.Count = 6
	// By copy, Send returns at once; by CMA it waits for the receiver,
	// which refuses the message and closes the link.
	firstSend := make(chan error, 1)
	go func() { firstSend <- a.Send(ctx, &hs, buf) }()
	if cmaThreshold <= 0 {
		if err := <-firstSend; err != nil {
			t.Fatal(err)
		}
	}
	// The sender also starts a receive that would wait forever on a healthy link.
	recvErr := make(chan error, 1)
	go func() { h := hdr(9, 8); recvErr <- a.Recv(ctx, &h, make([]byte, 8), nil) }()

	err := b.Recv(ctx, &hr, make([]byte, 64), nil)
	var me *transport.MismatchError
	if !errors.As(err, &me) || me.Field != "count" || me.Want != 6 || me.Got != 5 || me.Peer != 0 {
		t.Fatalf("want count mismatch, got %v", err)
	}
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Peer != 0 {
		t.Fatalf("want PeerError, got %T", err)
	}
	if cmaThreshold > 0 {
		if err := <-firstSend; !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("CMA Send of the refused message: want ErrClosed, got %v", err)
		}
	}
	select {
	case err := <-recvErr:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("sender's Recv: want ErrClosed, got %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("sender's Recv still blocked after mismatch")
	}
	big := make([]byte, 1<<20) // more than the ring holds
	h := hdr(2, len(big))
	if err := a.Send(ctx, &h, big); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("sender's next Send: want ErrClosed, got %v", err)
	}
	h8 := hdr(2, 8)
	if ok, err := a.TrySend(&h8, big[:8]); ok || !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("TrySend after close: %v %v", ok, err)
	}
	if err := b.Recv(ctx, &hr, make([]byte, 64), nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("receiver after mismatch: want ErrClosed, got %v", err)
	}
}

func TestMismatchWhileSenderBlocked(t *testing.T) { eachMode(t, testMismatchWhileSenderBlocked) }

func testMismatchWhileSenderBlocked(t *testing.T, cmaThreshold int) {
	a, b := newPair(t, Config{SlotSize: 64, Slots: 2, CMAThreshold: cmaThreshold})
	ctx := ctxT(t)
	big := make([]byte, 64*10)
	hs := hdr(1, len(big))
	sendErr := make(chan error, 1)
	go func() { sendErr <- a.Send(ctx, &hs, big) }()
	hr := hs
	hr.Op = 4
	err := b.Recv(ctx, &hr, make([]byte, len(big)), nil)
	var me *transport.MismatchError
	if !errors.As(err, &me) || me.Field != "op" {
		t.Fatalf("want op mismatch, got %v", err)
	}
	select {
	case err := <-sendErr:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("blocked Send: want ErrClosed, got %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("blocked Send hangs after mismatch")
	}
}

func TestCancelRecv(t *testing.T) { eachMode(t, testCancelRecv) }

func testCancelRecv(t *testing.T, cmaThreshold int) {
	a, b := newPair(t, Config{SlotSize: 64, Slots: 2, CMAThreshold: cmaThreshold})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	h := hdr(1, 8)
	go func() { hh := h; errc <- b.Recv(ctx, &hh, make([]byte, 8), nil) }()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("want context.Canceled, got %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("took %v", d)
		}
	case <-time.After(time.Second):
		t.Fatal("Recv did not return within a second of cancel")
	}
	// Nothing was consumed, so the link still works.
	ctx2 := ctxT(t)
	go func() { hh := h; errc <- a.Send(ctx2, &hh, []byte("12345678")) }()
	got := make([]byte, 8)
	if err := b.Recv(ctx2, &h, got, nil); err != nil || string(got) != "12345678" {
		t.Fatalf("after cancel: %v %q", err, got)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// Already-cancelled context fails at once.
	if err := b.Recv(ctx, &h, got, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
}

// A Send that cannot complete because nobody receives returns promptly once
// its deadline passes, for a context with a Done channel and for one without.
// On the copy path it waits for ring space; by CMA it waits for the receiver
// to read the buffer, and its abort closes the link (so that the receiver
// never reads the buffer after Send returned).
func TestCancelSendDeadline(t *testing.T) { eachMode(t, testCancelSendDeadline) }

func testCancelSendDeadline(t *testing.T, cmaThreshold int) {
	for _, doneChan := range []bool{true, false} {
		a, b := newPair(t, Config{SlotSize: 64, Slots: 2, CMAThreshold: cmaThreshold})
		h := hdr(1, 64)
		buf := make([]byte, 64)
		if cmaThreshold <= 0 {
			for i := 0; i < 2; i++ {
				if err := a.Send(ctxT(t), &h, buf); err != nil {
					t.Fatal(err)
				}
			}
		}
		var ctx context.Context = deadlineCtx{context.Background(), time.Now().Add(30 * time.Millisecond)}
		if doneChan {
			c, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
			defer cancel()
			ctx = c
		}
		start := time.Now()
		err := a.Send(ctx, &h, buf) // nobody receives
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want DeadlineExceeded, got %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("took %v", d)
		}
		if cmaThreshold > 0 {
			got := make([]byte, 64)
			if err := b.Recv(ctxT(t), &h, got, nil); !errors.Is(err, transport.ErrClosed) {
				t.Fatalf("receiver after the sender's CMA abort: want ErrClosed, got %v", err)
			}
			if err := a.Send(ctxT(t), &h, buf); !errors.Is(err, transport.ErrClosed) {
				t.Fatalf("sender after its CMA abort: want ErrClosed, got %v", err)
			}
		}
	}
}

func TestCloseWhileBlocked(t *testing.T) { eachMode(t, testCloseWhileBlocked) }

func testCloseWhileBlocked(t *testing.T, cmaThreshold int) {
	for _, tc := range []struct {
		name       string
		recv       bool // block in Recv (else in Send on a full ring)
		closeLocal bool // Close the blocked link itself (else the peer's)
	}{
		{"recv/peer-close", true, false},
		{"recv/local-close", true, true},
		{"send/peer-close", false, false},
		{"send/local-close", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newPair(t, Config{SlotSize: 64, Slots: 2, CMAThreshold: cmaThreshold})
			ctx := ctxT(t)
			errc := make(chan error, 1)
			go func() {
				if tc.recv {
					h := hdr(1, 8)
					errc <- a.Recv(ctx, &h, make([]byte, 8), nil)
				} else {
					h := hdr(1, 64*5)
					errc <- a.Send(ctx, &h, make([]byte, 64*5))
				}
			}()
			time.Sleep(30 * time.Millisecond)
			start := time.Now()
			if tc.closeLocal {
				a.Close()
			} else {
				b.Close()
			}
			select {
			case err := <-errc:
				if !errors.Is(err, transport.ErrClosed) {
					t.Fatalf("want ErrClosed, got %v", err)
				}
				var pe *transport.PeerError
				if !errors.As(err, &pe) || pe.Peer != 1 {
					t.Fatalf("want *PeerError for peer 1, got %#v", err)
				}
				if d := time.Since(start); d > 500*time.Millisecond {
					t.Fatalf("took %v", d)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("still blocked after Close")
			}
			// Both sides now fail; Close is idempotent.
			h := hdr(2, 0)
			if err := a.Send(ctx, &h, nil); !errors.Is(err, transport.ErrClosed) {
				t.Fatalf("a.Send after close: %v", err)
			}
			if err := b.Send(ctx, &h, nil); !errors.Is(err, transport.ErrClosed) {
				t.Fatalf("b.Send after close: %v", err)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A message completely sent before the sender closed is still delivered. (A
// CMA message is only completely sent once received: here a CMA message goes
// first, then the small one that survives the close.)
func TestRecvAfterPeerClose(t *testing.T) { eachMode(t, testRecvAfterPeerClose) }

func testRecvAfterPeerClose(t *testing.T, cmaThreshold int) {
	if cmaThreshold > 0 {
		cmaThreshold = 1000
	}
	a, b := newPair(t, Config{SlotSize: 64, Slots: 4, CMAThreshold: cmaThreshold})
	ctx := ctxT(t)
	big := bytes.Repeat([]byte{7}, 1000)
	hb := hdr(1, len(big))
	errc := make(chan error, 1)
	go func() { errc <- a.Send(ctx, &hb, big) }()
	gotBig := make([]byte, len(big))
	if err := b.Recv(ctx, &hb, gotBig, nil); err != nil || !bytes.Equal(gotBig, big) {
		t.Fatalf("first message: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	h := hdr(1, 100)
	msg := bytes.Repeat([]byte{9}, 100)
	if err := a.Send(ctx, &h, msg); err != nil {
		t.Fatal(err)
	}
	a.Close()
	got := make([]byte, 100)
	if err := b.Recv(ctx, &h, got, nil); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("drain after close: %v", err)
	}
	h2 := hdr(2, 1)
	if err := b.Recv(ctx, &h2, got[:1], nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("want ErrClosed, got %v", err)
	}
}

func TestTrySend(t *testing.T) {
	const S, N = 64, 4
	a, b := newPair(t, Config{SlotSize: S, Slots: N})
	ctx := ctxT(t)
	// A 3-slot message fits into the empty ring.
	h3 := hdr(1, 3*S)
	if ok, err := a.TrySend(&h3, make([]byte, 3*S)); !ok || err != nil {
		t.Fatalf("TrySend into empty ring: %v %v", ok, err)
	}
	// Only one slot left: a 2-slot message must be refused without side effects.
	h2 := hdr(2, 2*S)
	if ok, err := a.TrySend(&h2, make([]byte, 2*S)); ok || err != nil {
		t.Fatalf("TrySend of 2 slots into 1 free: %v %v", ok, err)
	}
	h1 := hdr(2, 10)
	if ok, err := a.TrySend(&h1, []byte("0123456789")); !ok || err != nil {
		t.Fatalf("TrySend into last slot: %v %v", ok, err)
	}
	h0 := hdr(3, 0)
	if ok, err := a.TrySend(&h0, nil); ok || err != nil {
		t.Fatalf("TrySend into full ring: %v %v", ok, err)
	}
	hBig := hdr(3, (N+1)*S)
	if ok, err := a.TrySend(&hBig, make([]byte, (N+1)*S)); ok || err != nil {
		t.Fatalf("TrySend larger than ring: %v %v", ok, err)
	}
	// The refused attempts left nothing behind: the receiver sees exactly 2 messages.
	if err := b.Recv(ctx, &h3, make([]byte, 3*S), nil); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 10)
	if err := b.Recv(ctx, &h1, got, nil); err != nil || string(got) != "0123456789" {
		t.Fatalf("%v %q", err, got)
	}
	if ok, err := a.TrySend(&h0, nil); !ok || err != nil {
		t.Fatalf("TrySend after drain: %v %v", ok, err)
	}
	if err := b.Recv(ctx, &h0, nil, nil); err != nil {
		t.Fatal(err)
	}
}

// Messages of every size, half of them by CMA in the "cma" mode (threshold
// 2 slots), interleave with copied ones and with TrySend.
func TestManyMessagesInOrder(t *testing.T) { eachMode(t, testManyMessagesInOrder) }

func testManyMessagesInOrder(t *testing.T, cmaThreshold int) {
	const S = 256
	if cmaThreshold > 0 {
		cmaThreshold = 2 * S
	}
	a, b := newPair(t, Config{SlotSize: S, Slots: 3, CMAThreshold: cmaThreshold})
	recvs := cmaRecvs.Load()
	ctx := ctxT(t)
	const n = 1000
	sizes := make([]int, n)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range sizes {
		sizes[i] = rng.IntN(4*S + 1)
	}
	fill := func(b []byte, seq int) {
		for i := range b {
			b[i] = byte(seq*31 + i)
		}
	}
	errc := make(chan error, 1)
	go func() {
		buf := make([]byte, 4*S)
		for i := 0; i < n; i++ {
			m := buf[:sizes[i]]
			fill(m, i)
			h := hdr(uint64(i+1), len(m))
			if i%3 == 0 {
				if ok, err := a.TrySend(&h, m); err != nil {
					errc <- err
					return
				} else if ok {
					continue
				}
			}
			if err := a.Send(ctx, &h, m); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	buf := make([]byte, 4*S)
	want := make([]byte, 4*S)
	for i := 0; i < n; i++ {
		m := buf[:sizes[i]]
		h := hdr(uint64(i+1), len(m))
		if err := b.Recv(ctx, &h, m, nil); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		w := want[:len(m)]
		fill(w, i)
		if !bytes.Equal(m, w) {
			t.Fatalf("message %d: payload differs", i)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got := cmaRecvs.Load() - recvs; (got > 0) != (cmaThreshold > 0) {
		t.Fatalf("%d messages by CMA with threshold %d", got, cmaThreshold)
	}
	t.Logf("%d of %d messages by CMA", cmaRecvs.Load()-recvs, n)
}

func TestSendRecvAllocs(t *testing.T) {
	a, b := newPair(t, Config{CMAThreshold: CMADisabled})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	buf := make([]byte, 1<<20)
	out := make([]byte, 1<<20)
	h := hdr(1, len(buf))
	add := func(d, s []byte) {
		for i := range d {
			d[i] += s[i]
		}
	}
	var err error
	allocs := testing.AllocsPerRun(20, func() {
		if err == nil {
			err = a.Send(ctx, &h, buf)
		}
		if err == nil {
			err = b.Recv(ctx, &h, out, nil)
		}
		if ok, e := a.TrySend(&h, buf); err == nil && (!ok || e != nil) {
			err = fmt.Errorf("TrySend: %v %v", ok, e)
		}
		if err == nil {
			err = b.Recv(ctx, &h, out, add)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Fatalf("1 MiB Send+Recv round allocates %v times", allocs)
	}
}

// A CMA Send waits for the receiver, so the receiver runs in its own
// goroutine, driven through channels (which do not allocate).
func TestSendRecvAllocsCMA(t *testing.T) {
	a, b := newPair(t, Config{CMAThreshold: 64 << 10})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 1 << 20
	buf := make([]byte, n)
	h := hdr(1, n)
	add := func(d, s []byte) {
		for i := range d {
			d[i] += s[i]
		}
	}
	start := make(chan transport.ReduceFunc)
	done := make(chan error)
	go func() {
		out := make([]byte, n)
		hh := h
		for f := range start {
			done <- b.Recv(ctx, &hh, out, f)
		}
	}()
	defer close(start)
	recvs := cmaRecvs.Load()
	var err error
	allocs := testing.AllocsPerRun(20, func() {
		for _, f := range [2]transport.ReduceFunc{nil, add} {
			if err != nil {
				return
			}
			start <- f
			if ok, e := a.TrySend(&h, buf); ok || e != nil {
				err = fmt.Errorf("TrySend of a CMA message: %v %v", ok, e)
			}
			if e := a.Send(ctx, &h, buf); e != nil && err == nil {
				err = e
			}
			if e := <-done; e != nil && err == nil {
				err = e
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := cmaRecvs.Load() - recvs; got != 2*21 {
		t.Fatalf("%d messages by CMA, want %d", got, 2*21)
	}
	if allocs != 0 {
		t.Fatalf("1 MiB CMA Send+Recv round allocates %v times", allocs)
	}
}

// Close racing with Send/Recv in flight must never touch unmapped memory.
func TestCloseRace(t *testing.T) { eachMode(t, testCloseRace) }

func testCloseRace(t *testing.T, cmaThreshold int) {
	for iter := 0; iter < 20; iter++ {
		a, b := newPair(t, Config{SlotSize: 64, Slots: 2, CMAThreshold: cmaThreshold})
		ctx := ctxT(t)
		var wg sync.WaitGroup
		for _, l := range []transport.Link{a, b} {
			wg.Add(2)
			go func() {
				defer wg.Done()
				buf := make([]byte, 200)
				for i := 1; ; i++ {
					h := hdr(uint64(i), len(buf))
					if err := l.Send(ctx, &h, buf); err != nil {
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				buf := make([]byte, 200)
				for i := 1; ; i++ {
					h := hdr(uint64(i), len(buf))
					if err := l.Recv(ctx, &h, buf, nil); err != nil {
						return
					}
				}
			}()
		}
		time.Sleep(time.Duration(iter%5) * time.Millisecond)
		go a.Close()
		a.Close()
		wg.Wait()
		b.Close()
	}
}

func TestCreateOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := CreateRing("x", Config{Dir: dir, SlotSize: 100}); err == nil {
		t.Fatal("SlotSize 100 accepted")
	}
	if _, err := CreateRing("x", Config{Dir: dir, Slots: -1}); err == nil {
		t.Fatal("negative Slots accepted")
	}
	r, err := CreateRing("x", Config{Dir: dir, SlotSize: 128, Slots: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.Path() != filepath.Join(dir, "x") {
		t.Fatalf("Path %q", r.Path())
	}
	_, err = CreateRing(r.Path(), Config{SlotSize: 128, Slots: 3})
	if err == nil || !strings.Contains(err.Error(), r.Path()) || !strings.Contains(err.Error(), fmt.Sprint(ringSize(128, 3))) || !errors.Is(err, os.ErrExist) {
		t.Fatalf("O_EXCL error should name path and size: %v", err)
	}
	if _, err := CreateRing(filepath.Join(dir, "nodir", "y"), Config{}); err == nil || !strings.Contains(err.Error(), "nodir") {
		t.Fatalf("missing dir: %v", err)
	}
	o, err := OpenRing(r.Path())
	if err != nil {
		t.Fatal(err)
	}
	if o.slotSize != 128 || o.slots != 3 {
		t.Fatalf("opened geometry %d x %d", o.slots, o.slotSize)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Unlink(); err != nil {
		t.Fatal(err)
	}
	if err := r.Unlink(); err != nil { // already gone: no-op
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, make([]byte, 8192), 0o600)
	if _, err := OpenRing(junk); err == nil {
		t.Fatal("opened a file that is not a ring")
	}
	if _, err := OpenRing(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing ring: %v", err)
	}
}

func BenchmarkSendRecv(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			x, y := newPair(b, Config{})
			ctx := context.Background()
			src := make([]byte, size)
			dst := make([]byte, size)
			h := hdr(1, size)
			errc := make(chan error, 1)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				h := h
				for i := 0; i < b.N; i++ {
					if err := y.Recv(ctx, &h, dst, nil); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			for i := 0; i < b.N; i++ {
				if err := x.Send(ctx, &h, src); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
		})
	}
}

func BenchmarkPingPong8B(b *testing.B) {
	x, y := newPair(b, Config{})
	ctx := context.Background()
	h := hdr(1, 8)
	errc := make(chan error, 1)
	go func() {
		h := h
		buf := make([]byte, 8)
		for i := 0; i < b.N; i++ {
			if err := y.Recv(ctx, &h, buf, nil); err != nil {
				errc <- err
				return
			}
			if err := y.Send(ctx, &h, buf); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	buf := make([]byte, 8)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := x.Send(ctx, &h, buf); err != nil {
			b.Fatal(err)
		}
		if err := x.Recv(ctx, &h, buf, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

func TestCloseUnlinksOpenedRings(t *testing.T) {
	cfg := Config{Dir: testDir(t), SlotSize: 64, Slots: 2}
	abIn, err := CreateRing(uniqueName(t, "ab"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(abIn.Path()) })
	baIn, err := CreateRing(uniqueName(t, "ba"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(baIn.Path()) })
	abOut, err := OpenRing(abIn.Path())
	if err != nil {
		t.Fatal(err)
	}
	baOut, err := OpenRing(baIn.Path())
	if err != nil {
		t.Fatal(err)
	}
	a := NewLink(0, 1, abOut, baIn)
	b := NewLink(1, 0, baOut, abIn)
	if err := abIn.Close(); err == nil {
		t.Fatal("Ring.Close of a ring owned by a Link succeeded")
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	a.Close() // a opened ab: its name goes; ba (created by a) stays for b
	if exists(abIn.Path()) || !exists(baIn.Path()) {
		t.Fatalf("after a.Close: ab exists %v, ba exists %v", exists(abIn.Path()), exists(baIn.Path()))
	}
	b.Close()
	if exists(baIn.Path()) {
		t.Fatal("ring file left behind after both sides closed")
	}
}

// Four ranks exchanging with everyone at once on a small machine: waiting
// ranks must sleep rather than starve the ranks that have work.
func TestFourRanksAllToAll(t *testing.T) { eachMode(t, testFourRanksAllToAll) }

func testFourRanksAllToAll(t *testing.T, cmaThreshold int) {
	const n, size, rounds = 4, 1 << 20, 4
	cfg := Config{Dir: testDir(t), SlotSize: 64 << 10, Slots: 4, CMAThreshold: cmaThreshold}
	links := make([][]transport.Link, n)
	for i := range links {
		links[i] = make([]transport.Link, n)
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			links[i][j], links[j][i] = newPair(t, cfg)
			// newPair numbers ranks 0 and 1; only Peer() differs, unused here.
		}
	}
	ctx := ctxT(t)
	src := make([][]byte, n)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range src {
		src[i] = randBytes(rng, size)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, 2*n*n)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if i == j {
				continue
			}
			wg.Add(2)
			go func() { // rank i sends to j
				defer wg.Done()
				for r := 1; r <= rounds; r++ {
					h := hdr(uint64(r), size)
					if err := links[i][j].Send(ctx, &h, src[i]); err != nil {
						errc <- err
						return
					}
				}
			}()
			go func() { // rank i receives from j
				defer wg.Done()
				buf := make([]byte, size)
				for r := 1; r <= rounds; r++ {
					h := hdr(uint64(r), size)
					if err := links[i][j].Recv(ctx, &h, buf, nil); err != nil {
						errc <- err
						return
					}
					if !bytes.Equal(buf, src[j]) {
						errc <- fmt.Errorf("rank %d from %d round %d: payload differs", i, j, r)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("%d ranks x %d peers x %d rounds of %d bytes in %v", n, n-1, rounds, size, time.Since(start))
}
