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
	"github.com/goccl/goccl/transport/linktest"
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
// ringPair creates the rings a→b and b→a (as their receivers would) and
// opens them for sending (as their senders would); the files are removed
// when the test ends.
func ringPair(t testing.TB, cfg Config) (abIn, baIn, abOut, baOut *Ring) {
	t.Helper()
	rings := make([]*Ring, 4)
	for i, name := range []string{"ab", "ba"} {
		r, err := CreateRing(uniqueName(t, name), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(r.Path()) })
		if rings[2+i], err = OpenRing(r.Path()); err != nil {
			t.Fatal(err)
		}
		rings[i] = r
	}
	return rings[0], rings[1], rings[2], rings[3]
}

func newPair(t testing.TB, cfg Config, opts ...LinkOption) (a, b transport.Link) {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = testDir(t)
	}
	abIn, baIn, abOut, baOut := ringPair(t, cfg)
	if err := abIn.Unlink(); err != nil {
		t.Fatal(err)
	}
	if err := baOut.Unlink(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abIn.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ring file still present after Unlink: %v", err)
	}
	a = NewLink(0, 1, abOut, baIn, opts...)
	b = NewLink(1, 0, baOut, abIn, opts...)
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

// TestLinkConformance runs the transport.Link suite with the default ring
// (messages from 16 MiB on by CMA), with CMA for every non-empty message,
// and with a small ring whose messages from two slots on go by CMA, so that
// copied and CMA messages interleave.
func TestLinkConformance(t *testing.T) {
	if a, _ := newPair(t, Config{}); a.Name() != "shm" {
		t.Fatalf("Name() = %q, want shm", a.Name())
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		opts []LinkOption
	}{
		{"default", Config{}, nil},
		{"cma", Config{CMAThreshold: cmaAll}, nil},
		{"mixed", Config{SlotSize: 4096, Slots: 4, CMAThreshold: 2 * 4096}, nil},
		{"noyield", Config{}, []LinkOption{WithYield(false)}}, // waits that poll, then sleep
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.cfg.normalize()
			if err != nil {
				t.Fatal(err)
			}
			S, N := cfg.SlotSize, cfg.Slots
			sizes := []int{S - 1, S, S + 1, N*S - 1, N * S, N*S + 1, cmaStageSize + 1, 2*cmaStageSize + 3*S + 7}
			if th := cfg.CMAThreshold; th > 0 {
				sizes = append(sizes, th-1, th)
			}
			recvs := cmaRecvs.Load()
			linktest.RunConfig(t, linktest.Config{
				NewPair: func(t *testing.T) (a, b transport.Link) { return newPair(t, tc.cfg, tc.opts...) },
				Sizes:   sizes,
			})
			if n := cmaRecvs.Load() - recvs; n == 0 {
				t.Error("no message went by CMA")
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
	abIn, baIn, abOut, baOut := ringPair(t, Config{Dir: testDir(t), SlotSize: 64, Slots: 2})
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

// TestCloseAfterUnmap: Close and Abort on a link whose rings are already
// unmapped, while other calls register for a moment (and find it closed),
// must not touch the unmapped rings (it once read the reader-active flag of
// an unmapped ring and crashed with SIGSEGV).
func TestCloseAfterUnmap(t *testing.T) {
	for range 200 {
		a, _ := newPair(t, Config{SlotSize: 64, Slots: 2})
		a.Close() // unmaps: no call in flight
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				h := transport.Header{}
				for range 200 {
					if g%2 == 0 {
						a.TrySend(&h, nil) // enters and leaves a closed link
					} else {
						a.Abort(1)
					}
				}
			})
		}
		wg.Wait()
	}
}

// reclaimedPair is newPair after a failure: a message left in a ring, the
// link aborted by one side, then both sides reclaim the rings, reset their
// inbound ones and link again; the old links' Close must not disturb the new.
func reclaimedPair(t *testing.T, cfg Config) (a, b transport.Link) {
	a0, b0 := newPair(t, cfg)
	ctx := ctxT(t)
	h := hdr(1, 100)
	if ok, err := a0.TrySend(&h, make([]byte, 100)); err != nil {
		t.Fatalf("TrySend: ok %v, %v", ok, err)
	}
	b0.Abort(0)
	aOut, aIn, err := Reclaim(ctx, a0)
	if err != nil {
		t.Fatal(err)
	}
	bOut, bIn, err := Reclaim(ctx, b0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Ring{aIn, bIn} {
		if err := r.ResetInbound(); err != nil {
			t.Fatal(err)
		}
	}
	a, b = NewLink(0, 1, aOut, aIn), NewLink(1, 0, bOut, bIn)
	if la := a.(*link); !la.cmaProbed {
		la.probeCMA()
	}
	a0.Close()
	b0.Close()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestReclaim: links made again over reclaimed rings pass the Link suite,
// copied and by CMA; a link is reclaimed once, not after Close, and not
// while a call of this process still uses it.
func TestReclaim(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"copy", Config{SlotSize: 4096, Slots: 4, CMAThreshold: CMADisabled}},
		{"mixed", Config{SlotSize: 4096, Slots: 4, CMAThreshold: 2 * 4096}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recvs := cmaRecvs.Load()
			linktest.RunConfig(t, linktest.Config{
				NewPair: func(t *testing.T) (a, b transport.Link) { return reclaimedPair(t, tc.cfg) },
				Sizes:   []int{1, 4095, 4096, 4097, 3 * 4096, 5*4096 + 1},
			})
			if n := cmaRecvs.Load() - recvs; tc.cfg.CMAThreshold > 0 && n == 0 {
				t.Error("no message went by CMA after the reset")
			}
		})
	}
	ctx := ctxT(t)
	a, b := newPair(t, Config{SlotSize: 64, Slots: 2})
	if _, _, err := Reclaim(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Reclaim(ctx, a); err == nil {
		t.Error("a link reclaimed twice")
	}
	b.Close()
	if _, _, err := Reclaim(ctx, b); err == nil {
		t.Error("a closed link reclaimed")
	}
	// A call in flight: Reclaim waits for it until its context ends.
	c, _ := newPair(t, Config{SlotSize: 64, Slots: 2})
	lc := c.(*link)
	if !lc.enter() {
		t.Fatal("enter failed on a new link")
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, _, err := Reclaim(short, c); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Reclaim with a call in flight: %v, want a deadline", err)
	}
	lc.leave()
	c.Close() // the failed Reclaim left the rings to Close
	if s := lc.state.Load(); s != closedBit|unmappedBit {
		t.Errorf("after Close: state %#x, want closed and unmapped", s)
	}
}
