// Package linktest checks that an implementation of transport.Link keeps the
// contract stated in package transport. A transport's tests run the whole
// suite with one line:
//
//	func TestLinkConformance(t *testing.T) { linktest.Run(t, newPair) }
//
// where newPair connects two fresh links. RunConfig takes the transport's
// own message sizes of interest and the exemptions test doubles need.
//
// The suite never assumes that a link buffers anything: every Send has a
// receiver running beside it, unless the check is about a Send that cannot
// complete. It needs only the transport.Link methods.
package linktest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl/transport"
)

// Config describes the links a run of the suite checks.
type Config struct {
	// NewPair returns two fresh, connected links: a, the link of rank 0 to
	// rank 1, and b, the link of rank 1 to rank 0. It releases what it set
	// up with t.Cleanup. The suite closes both links when the test ends, also
	// when the test closed them already.
	NewPair func(t *testing.T) (a, b transport.Link)
	// Sizes are message sizes in bytes that matter to the transport, such
	// as its slot, chunk or striping sizes and their neighbours; the suite
	// sends them besides its own.
	Sizes []int
	// Allocates exempts the links from the check that a steady stream of
	// Send, TrySend and Recv allocates nothing: for test doubles, and for
	// links whose allocations are not the transport's own (a library's).
	Allocates bool
}

// Run checks the links newPair makes; see Config.NewPair.
func Run(t *testing.T, newPair func(t *testing.T) (a, b transport.Link)) {
	t.Helper()
	RunConfig(t, Config{NewPair: newPair})
}

// RunConfig checks the links c.NewPair makes, as subtests of t.
func RunConfig(t *testing.T, c Config) {
	t.Helper()
	if c.NewPair == nil {
		t.Fatal("linktest: Config.NewPair is nil")
	}
	s := &suite{cfg: c, sizes: sizes(c.Sizes)}
	t.Run("PeerAndName", s.peerAndName)
	t.Run("RoundTrip", s.roundTrip)
	t.Run("Counters", s.counters)
	t.Run("Headers", s.headers)
	t.Run("Mismatch", s.mismatch)
	t.Run("MismatchWhileSending", s.mismatchWhileSending)
	t.Run("Stream", s.stream)
	t.Run("TrySendNeverWaits", s.trySendNeverWaits)
	t.Run("CancelRecv", s.cancelRecv)
	t.Run("DeadlineRecv", s.deadlineRecv)
	t.Run("DoneBeforeCall", s.doneBeforeCall)
	t.Run("DeadlineSend", s.deadlineSend)
	t.Run("CloseWhileBlocked", s.closeWhileBlocked)
	t.Run("Abort", s.abort)
	t.Run("AbortInFlight", s.abortInFlight)
	t.Run("CloseRace", s.closeRace)
	t.Run("Allocs", s.allocs)
}

const (
	// prompt bounds how long a call may take to return once what ends it
	// (a Close, a cancelled ctx, a mismatch) has happened; generous, for
	// the race detector on a loaded machine.
	prompt = 5 * time.Second
	// settle is how long a call is given to block before the suite ends it.
	settle = 50 * time.Millisecond
	// bigMsg is the message a sender repeats to fill whatever a link
	// buffers; sendCap bounds how much it sends before the suite concludes
	// that Send never waits for the receiver.
	bigMsg  = 1 << 20
	sendCap = 1 << 30
)

type suite struct {
	cfg   Config
	sizes []int // every size RoundTrip sends, ascending
}

// sizes returns the suite's message sizes with the transport's added.
func sizes(extra []int) []int {
	s := []int{0, 1, 7, 8, 63, 64, 65, 4095, 4096, 4097, 64 << 10, 64<<10 + 1, 1<<20 + 7}
	if !testing.Short() {
		// The short suite runs under the race detector, where filling
		// and checking 10 MiB byte by byte took most of the suite's
		// time; 1 MiB and the transport's own sizes already take its
		// chunking and striping through several rounds there.
		s = append(s, 10<<20+3)
	}
	for _, n := range extra {
		if n >= 0 {
			s = append(s, n)
		}
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// pair returns a new pair of links, closed when t ends.
func (s *suite) pair(t *testing.T) (a, b transport.Link) {
	t.Helper()
	a, b = s.cfg.NewPair(t)
	if a == nil || b == nil {
		t.Fatal("NewPair returned a nil link")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// hdr is the header of message seq of n bytes; its fields vary with seq so
// that a link that loses or reorders any of them is caught.
func hdr(seq uint64, n int) transport.Header {
	return transport.Header{
		Seq:     seq,
		Op:      uint8(seq*7 + 1),
		DType:   uint8(seq*13 + 2),
		RedOp:   uint8(seq*5 + 3),
		Root:    int32(seq%5) - 1,
		Count:   uint64(n)/4 + seq<<32,
		Bytes:   uint64(n),
		Arrival: transport.Arrival{Rank: int32(seq%7) - 1, Spread: uint32(seq * 977), At: int64(seq)*1_000_003 + 1},
	}
}

// checkArrival fails when a Recv with want did not report the Arrival of
// the header sent.
func checkArrival(want *transport.Header, sent transport.Arrival) error {
	if want.Arrival != sent {
		return fmt.Errorf("message seq %d: Recv reported arrival %+v, the header carried %+v", want.Seq, want.Arrival, sent)
	}
	return nil
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// fill writes n pseudo-random bytes, determined by seed, into b: random bytes
// tiled with a prime period, cheap for large buffers, and no two chunks or
// pieces of a message alike.
func fill(b []byte, seed uint64) {
	const period = 65521
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	binary.LittleEndian.PutUint64(key[8:], uint64(len(b)))
	rand.NewChaCha8(key).Read(b[:min(len(b), period)])
	for i := period; i < len(b); i += period {
		copy(b[i:], b[:period])
	}
}

func filled(n int, seed uint64) []byte {
	b := make([]byte, n)
	fill(b, seed)
	return b
}

// addBytes adds src to dst byte by byte (mod 256), eight lanes at a time.
func addBytes(dst, src []byte) {
	const hi = 0x8080808080808080
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		a := binary.LittleEndian.Uint64(dst[i:])
		b := binary.LittleEndian.Uint64(src[i:])
		binary.LittleEndian.PutUint64(dst[i:], ((a&^hi)+(b&^hi))^((a^b)&hi))
	}
	for ; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

// async runs f in a goroutine and returns a channel with its error.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// returns waits up to prompt for errc.
func returns(t *testing.T, errc <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(prompt):
		t.Fatalf("%s did not return within %v", what, prompt)
		return nil
	}
}

// finishes waits for a call that moves data: for as long as its ctx allows,
// then prompt more (a call must end once its ctx has).
func finishes(t *testing.T, ctx context.Context, errc <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	return returns(t, errc, what+" after its ctx ended")
}

// blocks checks that errc stays empty for settle.
func blocks(t *testing.T, errc <-chan error, what string) {
	t.Helper()
	select {
	case err := <-errc:
		t.Fatalf("%s returned instead of waiting: %v", what, err)
	case <-time.After(settle):
	}
}

// wantPeerErr checks that err wraps target and is a *transport.PeerError
// naming peer and op.
func wantPeerErr(t *testing.T, err, target error, peer int, op, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got %v, want an error wrapping %v", what, err, target)
	}
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Peer != peer || pe.Op != op {
		t.Fatalf("%s: got %#v, want a *transport.PeerError for %s with peer %d", what, err, op, peer)
	}
}

// wantClosed checks that err says the link is closed, and that it does not
// report a lost rank.
func wantClosed(t *testing.T, err error, peer int, op, what string) {
	t.Helper()
	wantPeerErr(t, err, transport.ErrClosed, peer, op, what)
	if errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("%s: %v reports a lost rank after a plain close", what, err)
	}
}

// transfer sends payload from one link and receives it on the other, at
// once, with header h, and checks what arrives.
func transfer(t *testing.T, ctx context.Context, from, to transport.Link, h transport.Header, payload []byte) {
	t.Helper()
	sent := async(func() error { h := h; return from.Send(ctx, &h, payload) })
	got := make([]byte, len(payload))
	want := h
	want.Arrival = transport.Arrival{} // Check ignores it; Recv reports the sender's
	if err := to.Recv(ctx, &want, got, nil); err != nil {
		t.Fatalf("Recv of %d bytes (seq %d): %v", len(payload), h.Seq, err)
	}
	if err := checkArrival(&want, h.Arrival); err != nil {
		t.Fatal(err)
	}
	if err := returns(t, sent, "Send"); err != nil {
		t.Fatalf("Send of %d bytes (seq %d): %v", len(payload), h.Seq, err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("%d bytes (seq %d): payload differs", len(payload), h.Seq)
	}
}

// folder is a ReduceFunc (byte-wise add) that records the pieces a Recv
// hands it, to check them against the contract: each piece is the part of
// the destination at the same offset as the payload piece, pieces start at
// multiples of 64 bytes, and they cover the message exactly once. Calls may
// be concurrent.
type folder struct {
	buf []byte // the Recv's destination

	mu     sync.Mutex
	pieces [][2]int // offset, length
	bad    error
}

func (f *folder) fold(dst, src []byte) {
	if len(dst) == 0 && len(src) == 0 {
		return
	}
	base, p := uintptr(unsafe.Pointer(unsafe.SliceData(f.buf))), uintptr(unsafe.Pointer(unsafe.SliceData(dst)))
	var bad error
	switch {
	case len(dst) != len(src):
		bad = fmt.Errorf("reduce got %d destination and %d source bytes", len(dst), len(src))
	case p < base || p+uintptr(len(dst)) > base+uintptr(len(f.buf)):
		bad = fmt.Errorf("reduce got a destination of %d bytes outside the Recv's buffer", len(dst))
	default:
		addBytes(dst, src)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if bad != nil {
		f.bad = cmp.Or(f.bad, bad)
		return
	}
	f.pieces = append(f.pieces, [2]int{int(p - base), len(dst)})
}

// check reports what is wrong with the pieces of an n-byte message.
func (f *folder) check(n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bad != nil {
		return f.bad
	}
	slices.SortFunc(f.pieces, func(a, b [2]int) int { return a[0] - b[0] })
	next := 0
	for _, p := range f.pieces {
		if p[0]%64 != 0 {
			return fmt.Errorf("reduce piece at offset %d: not a multiple of 64", p[0])
		}
		if p[0] != next {
			return fmt.Errorf("reduce pieces: bytes %d to %d missing or folded twice (%d pieces)", min(next, p[0]), max(next, p[0]), len(f.pieces))
		}
		next = p[0] + p[1]
	}
	if next != n {
		return fmt.Errorf("reduce pieces cover %d of %d bytes", next, n)
	}
	return nil
}

// exchange sends a message of n bytes each way at once and checks what
// arrives; with fold, each Recv folds it into a buffer of random bytes.
func exchange(t *testing.T, links [2]transport.Link, seq uint64, n int, fold bool) {
	t.Helper()
	// A minute for each message: how long 10 MiB take depends on the
	// machine, its load and the race detector (4.7 s through soft RoCE
	// with 16 KiB slots under -race beside two busy CPUs); that is no
	// failure, a call that outlives its ctx is.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var src, dst, want [2][]byte
	var folders [2]*folder
	for i := range 2 {
		src[i] = filled(n, seq*4+uint64(i))
		want[i] = src[i]
		dst[i] = make([]byte, n)
		if fold {
			fill(dst[i], seq*4+2+uint64(i))
			want[i] = bytes.Clone(dst[i])
			folders[i] = &folder{buf: dst[i]}
		}
	}
	errs := make(chan error, 4)
	for i := range 2 {
		go func() {
			h := hdr(seq, n)
			errs <- links[i].Send(ctx, &h, src[i])
		}()
		go func() {
			h := hdr(seq, n)
			h.Arrival = transport.Arrival{Rank: -7, At: -1}
			var f transport.ReduceFunc
			if fold {
				f = folders[i].fold
			}
			err := links[i].Recv(ctx, &h, dst[i], f)
			if err == nil {
				err = checkArrival(&h, hdr(seq, n).Arrival)
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := finishes(t, ctx, errs, "Send or Recv"); err != nil {
			t.Fatalf("%d bytes (fold %v): %v", n, fold, err)
		}
	}
	for i := range 2 {
		if fold {
			addBytes(want[i], src[1-i])
			if err := folders[i].check(n); err != nil {
				t.Fatalf("%d bytes to link %d: %v", n, i, err)
			}
		} else {
			want[i] = src[1-i]
		}
		if !bytes.Equal(dst[i], want[i]) {
			t.Fatalf("%d bytes (fold %v) to link %d: payload differs", n, fold, i)
		}
	}
}

// fillUp sends bigMsg-byte messages on l with ctx until a Send fails and
// returns its error and how many messages it sent; it fails the test when
// sendCap bytes go without a Send waiting.
func fillUp(ctx context.Context, l transport.Link, firstSeq uint64) (sent int, err error) {
	buf := make([]byte, bigMsg)
	for sent*bigMsg < sendCap {
		h := hdr(firstSeq+uint64(sent), bigMsg)
		if err := l.Send(ctx, &h, buf); err != nil {
			return sent, err
		}
		sent++
	}
	return sent, fmt.Errorf("linktest: %d MiB sent with nobody receiving: Send never waits", sendCap>>20)
}

func (s *suite) peerAndName(t *testing.T) {
	a, b := s.pair(t)
	if a.Peer() != 1 || b.Peer() != 0 {
		t.Fatalf("Peer() = %d and %d, want 1 and 0", a.Peer(), b.Peer())
	}
	if a.Name() == "" || b.Name() == "" {
		t.Fatalf("empty Name(): %q, %q", a.Name(), b.Name())
	}
}

// roundTrip: every size, both ways at once, copied and folded.
func (s *suite) roundTrip(t *testing.T) {
	a, b := s.pair(t)
	seq := uint64(1)
	for _, fold := range []bool{false, true} {
		for _, n := range s.sizes {
			exchange(t, [2]transport.Link{a, b}, seq, n, fold)
			seq++
		}
	}
}

// counters: each side's Counters add up the payload bytes of the messages
// it sent and received, headers left out, and a failed Recv counts nothing.
func (s *suite) counters(t *testing.T) {
	a, b := s.pair(t)
	ctx := testCtx(t)
	total := uint64(0)
	for i, n := range s.sizes {
		exchange(t, [2]transport.Link{a, b}, uint64(i+1), n, i%2 == 1)
		total += uint64(n)
	}
	for i, l := range []transport.Link{a, b} {
		if c := l.Counters(); c.Sent() != total || c.Received() != total {
			t.Errorf("link %d: Counters sent %d received %d, want %d each", i, c.Sent(), c.Received(), total)
		}
	}
	short, cancel := context.WithTimeout(ctx, settle)
	defer cancel()
	h := hdr(uint64(len(s.sizes)+1), 8)
	if err := a.Recv(short, &h, make([]byte, 8), nil); err == nil {
		t.Fatal("Recv with nothing sent succeeded")
	}
	if got := a.Counters().Received(); got != total {
		t.Errorf("after a failed Recv: received %d, want %d", got, total)
	}
}

// headers: extreme values of every header field arrive intact.
func (s *suite) headers(t *testing.T) {
	a, b := s.pair(t)
	ctx := testCtx(t)
	for i, h := range []transport.Header{
		{Seq: math.MaxUint64, Op: 255, DType: 255, RedOp: 255, Root: math.MaxInt32, Count: math.MaxUint64,
			Arrival: transport.Arrival{Rank: math.MaxInt32, Spread: math.MaxUint32, At: math.MaxInt64}},
		{Seq: 0, Root: math.MinInt32, Bytes: 5, Arrival: transport.Arrival{Rank: math.MinInt32, At: math.MinInt64}},
		{Seq: 1 << 32, Op: 128, DType: 1, RedOp: 2, Root: -1, Count: 1 << 40, Bytes: 64},
	} {
		transfer(t, ctx, a, b, h, filled(int(h.Bytes), uint64(i)))
		transfer(t, ctx, b, a, h, filled(int(h.Bytes), uint64(i)))
	}
}

// mismatch: a message whose header differs from the receiver's in any one
// field fails the Recv with a *transport.MismatchError naming that field,
// and closes the link, so that the sender's pending and later calls fail
// instead of waiting for a reply that never comes.
func (s *suite) mismatch(t *testing.T) {
	for _, tc := range []struct {
		field string
		alter func(h *transport.Header)
	}{
		{"op", func(h *transport.Header) { h.Op++ }},
		{"sequence", func(h *transport.Header) { h.Seq++ }},
		{"dtype", func(h *transport.Header) { h.DType++ }},
		{"redop", func(h *transport.Header) { h.RedOp++ }},
		{"root", func(h *transport.Header) { h.Root++ }},
		{"count", func(h *transport.Header) { h.Count++ }},
		{"message bytes", func(h *transport.Header) { h.Bytes++ }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			a, b := s.pair(t)
			want := hdr(3, 64)
			sent := want
			tc.alter(&sent)
			s.checkMismatch(t, a, b, want, sent, tc.field)
		})
	}
}

// mismatchWhileSending: the same with a message larger than most links
// buffer, whose Send is still in flight when the receiver refuses it.
func (s *suite) mismatchWhileSending(t *testing.T) {
	a, b := s.pair(t)
	want := hdr(1, 32<<20)
	sent := want
	sent.Count++
	s.checkMismatch(t, a, b, want, sent, "count")
}

func (s *suite) checkMismatch(t *testing.T, a, b transport.Link, want, sent transport.Header, field string) {
	t.Helper()
	ctx := testCtx(t)
	sendErr := async(func() error { return a.Send(ctx, &sent, make([]byte, sent.Bytes)) })
	// The sender also waits for a reply, which never comes.
	replyErr := async(func() error { h := hdr(9, 8); return a.Recv(ctx, &h, make([]byte, 8), nil) })
	err := b.Recv(ctx, &want, make([]byte, want.Bytes), nil)
	var me *transport.MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("Recv: got %v, want a *transport.MismatchError", err)
	}
	if me.Peer != 0 || me.Field != field {
		t.Fatalf("Recv: %v names peer %d, field %q; want peer 0, field %q", err, me.Peer, me.Field, field)
	}
	wantMe := transport.Check(0, &want, &sent).(*transport.MismatchError)
	if me.Want != wantMe.Want || me.Got != wantMe.Got {
		t.Fatalf("Recv: %v; want %d, got %d", err, wantMe.Want, wantMe.Got)
	}
	if err := returns(t, replyErr, "the sender's Recv after a mismatch"); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("the sender's Recv after a mismatch: got %v, want ErrClosed", err)
	}
	// The refused Send either completed before the refusal or fails.
	if err := returns(t, sendErr, "the refused Send"); err != nil && !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("the refused Send: got %v, want nil or ErrClosed", err)
	}
	h := hdr(10, 8)
	if err := a.Send(ctx, &h, make([]byte, 8)); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("the sender's next Send: got %v, want ErrClosed", err)
	}
	if ok, err := a.TrySend(&h, make([]byte, 8)); ok || !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("the sender's next TrySend: got %v, %v; want false, ErrClosed", ok, err)
	}
	if err := b.Recv(ctx, &want, make([]byte, want.Bytes), nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("the receiver's next Recv: got %v, want ErrClosed", err)
	}
}

// stream: two streams of messages of mixed sizes, one each way at once,
// sent with TrySend where the link takes them and Send otherwise, arrive
// complete and in order. The sender reuses one buffer, so a link that
// keeps referring to buf after Send or a successful TrySend returned is
// caught.
func (s *suite) stream(t *testing.T) {
	a, b := s.pair(t)
	// About two exchanges' bytes each way (the largest sizes come by
	// turns) plus 1,500 small messages: minutes allowed, for the race
	// detector on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const msgs = 1500
	large := s.sizes[len(s.sizes)/2:] // every 97th message takes the next of these
	size := func(dir, i int) int {
		if i%97 == 0 {
			return large[(i/97+dir)%len(large)]
		}
		return int(uint64(i*2654435761+dir) % 4097)
	}
	maxSize := slices.Max(s.sizes)
	links := [2]transport.Link{a, b}
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for dir := range 2 {
		from, to := links[dir], links[1-dir]
		wg.Go(func() {
			buf := make([]byte, maxSize)
			tried, inline := 0, 0
			for i := 1; i <= msgs; i++ {
				m := buf[:size(dir, i)]
				fill(m, uint64(dir<<32|i))
				h := hdr(uint64(i), len(m))
				if i%3 == 0 {
					tried++
					ok, err := from.TrySend(&h, m)
					if err != nil {
						errs <- fmt.Errorf("direction %d: TrySend of message %d: %w", dir, i, err)
						return
					}
					if ok {
						inline++
						continue
					}
				}
				if err := from.Send(ctx, &h, m); err != nil {
					errs <- fmt.Errorf("direction %d: Send of message %d: %w", dir, i, err)
					return
				}
			}
			t.Logf("direction %d: TrySend took %d of %d messages", dir, inline, tried)
			errs <- nil
		})
		wg.Go(func() {
			buf := make([]byte, maxSize)
			want := make([]byte, maxSize)
			for i := 1; i <= msgs; i++ {
				n := size(dir, i)
				h := hdr(uint64(i), n)
				if err := to.Recv(ctx, &h, buf[:n], nil); err != nil {
					errs <- fmt.Errorf("direction %d: Recv of message %d: %w", dir, i, err)
					return
				}
				fill(want[:n], uint64(dir<<32|i))
				if !bytes.Equal(buf[:n], want[:n]) {
					errs <- fmt.Errorf("direction %d: message %d (%d bytes): payload differs", dir, i, n)
					return
				}
			}
			errs <- nil
		})
	}
	for range 4 {
		if err := finishes(t, ctx, errs, "the stream's Sends or Recvs"); err != nil {
			a.Close() // unblock the other goroutines
			b.Close()
			returns(t, async(func() error { wg.Wait(); return nil }), "the stream's calls after Close")
			t.Fatal(err)
		}
	}
	wg.Wait()
}

// trySendNeverWaits: with nobody receiving, TrySend of bigMsg-byte messages
// returns false, without blocking, once the link cannot take more; a false
// TrySend sends nothing (the messages TrySend took arrive, then exactly the
// next one sent). Small messages are not checked: a TCP link sends those up
// to 64 KiB without asking the socket for room, counting on the kernel's
// buffer, so its TrySend can wait when the peer has stopped reading.
func (s *suite) trySendNeverWaits(t *testing.T) {
	a, b := s.pair(t)
	ctx := testCtx(t)
	buf := filled(bigMsg, 1)
	var sent int
	done := async(func() error {
		for sent*bigMsg < sendCap {
			h := hdr(uint64(sent+1), bigMsg)
			ok, err := a.TrySend(&h, buf)
			if err != nil || !ok {
				return err
			}
			sent++
		}
		return fmt.Errorf("%d MiB taken by TrySend with nobody receiving", sendCap>>20)
	})
	if err := returns(t, done, "TrySend with nobody receiving"); err != nil {
		t.Fatal(err)
	}
	t.Logf("TrySend took %d messages of %d bytes", sent, bigMsg)
	got := make([]byte, bigMsg)
	for i := range sent {
		h := hdr(uint64(i+1), bigMsg)
		if err := b.Recv(ctx, &h, got, nil); err != nil {
			t.Fatalf("message %d of %d taken by TrySend: %v", i+1, sent, err)
		}
		if !bytes.Equal(got, buf) {
			t.Fatalf("message %d of %d taken by TrySend: payload differs", i+1, sent)
		}
	}
	transfer(t, ctx, a, b, hdr(uint64(sent+1), 100), filled(100, 2))
}

// cancelRecv: a Recv waiting for a message fails with context.Canceled
// once its ctx is cancelled; nothing was consumed, so the link still works.
func (s *suite) cancelRecv(t *testing.T) {
	a, b := s.pair(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := async(func() error { h := hdr(1, 8); return b.Recv(ctx, &h, make([]byte, 8), nil) })
	blocks(t, errc, "Recv with nothing sent")
	cancel()
	wantPeerErr(t, returns(t, errc, "Recv after cancel"), context.Canceled, 0, "recv", "Recv after cancel")
	transfer(t, testCtx(t), a, b, hdr(1, 8), []byte("12345678"))
	transfer(t, testCtx(t), b, a, hdr(1, 8), []byte("87654321"))
}

// deadlineRecv: a Recv waiting for a message fails with
// context.DeadlineExceeded once its deadline passes, also for a context
// whose Done channel is nil (as goccl's operation context is when the caller
// gave none); the link still works afterwards.
func (s *suite) deadlineRecv(t *testing.T) {
	for _, withDone := range []bool{true, false} {
		t.Run(fmt.Sprintf("done-channel=%v", withDone), func(t *testing.T) {
			a, b := s.pair(t)
			ctx := deadline(t, 100*time.Millisecond, withDone)
			errc := async(func() error { h := hdr(1, 8); return b.Recv(ctx, &h, make([]byte, 8), nil) })
			err := returns(t, errc, "Recv past its deadline")
			wantPeerErr(t, err, context.DeadlineExceeded, 0, "recv", "Recv past its deadline")
			transfer(t, testCtx(t), a, b, hdr(1, 8), []byte("12345678"))
		})
	}
}

// deadline returns a context that expires after d; without withDone its
// Done channel is nil and only Deadline and Err tell.
func deadline(t *testing.T, d time.Duration, withDone bool) context.Context {
	if withDone {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		t.Cleanup(cancel)
		return ctx
	}
	return deadlineCtx{context.Background(), time.Now().Add(d)}
}

// deadlineCtx has a deadline but no Done channel, like goccl's operation
// context: a link notices it through Deadline and Err.
type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c deadlineCtx) Done() <-chan struct{}       { return nil }
func (c deadlineCtx) Err() error {
	if time.Now().Before(c.deadline) {
		return nil
	}
	return context.DeadlineExceeded
}

// doneBeforeCall: a Send or Recv whose ctx is done before the call fails
// with ctx's error even when it could complete at once, and moves nothing:
// the peer then receives exactly what is sent next, and a message waiting
// for the failed Recv is still there for the next one.
func (s *suite) doneBeforeCall(t *testing.T) {
	a, b := s.pair(t)
	ctx := testCtx(t)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	expired := deadlineCtx{context.Background(), time.Now().Add(-time.Second)}
	// Sends with a receiver waiting.
	recvd := make([]byte, 8)
	recvErr := async(func() error { h := hdr(1, 8); return b.Recv(ctx, &h, recvd, nil) })
	h := hdr(1, 8)
	wantPeerErr(t, a.Send(done, &h, []byte("canceled")), context.Canceled, 1, "send", "Send with a cancelled ctx")
	wantPeerErr(t, a.Send(expired, &h, []byte("expired!")), context.DeadlineExceeded, 1, "send", "Send with an expired ctx")
	blocks(t, recvErr, "Recv after Sends that failed")
	if err := a.Send(ctx, &h, []byte("12345678")); err != nil {
		t.Fatal(err)
	}
	if err := returns(t, recvErr, "Recv"); err != nil || string(recvd) != "12345678" {
		t.Fatalf("Recv: %q, %v; want the message sent after the failed Sends", recvd, err)
	}
	// Recvs with a message waiting (or its Send in flight).
	h = hdr(2, 8)
	sendErr := async(func() error { h := h; return a.Send(ctx, &h, []byte("abcdefgh")) })
	time.Sleep(settle)
	wantPeerErr(t, b.Recv(done, &h, recvd, nil), context.Canceled, 0, "recv", "Recv with a cancelled ctx")
	wantPeerErr(t, b.Recv(expired, &h, recvd, nil), context.DeadlineExceeded, 0, "recv", "Recv with an expired ctx")
	if err := b.Recv(ctx, &h, recvd, nil); err != nil || string(recvd) != "abcdefgh" {
		t.Fatalf("Recv after Recvs that failed: %q, %v", recvd, err)
	}
	if err := returns(t, sendErr, "Send"); err != nil {
		t.Fatal(err)
	}
}

// deadlineSend: a Send that cannot complete because nobody receives fails
// with context.DeadlineExceeded soon after its deadline, with and without a
// Done channel.
func (s *suite) deadlineSend(t *testing.T) {
	for _, withDone := range []bool{true, false} {
		t.Run(fmt.Sprintf("done-channel=%v", withDone), func(t *testing.T) {
			a, _ := s.pair(t)
			const d = 200 * time.Millisecond
			ctx := deadline(t, d, withDone)
			start := time.Now()
			var sent int
			errc := async(func() (err error) { sent, err = fillUp(ctx, a, 1); return err })
			err := returns(t, errc, "Send past its deadline")
			wantPeerErr(t, err, context.DeadlineExceeded, 1, "send", "Send past its deadline")
			if el := time.Since(start); el > d+prompt {
				t.Fatalf("Send failed %v after a %v deadline", el, d)
			}
			t.Logf("%d messages of %d bytes sent before the deadline", sent, bigMsg)
		})
	}
}

// closeWhileBlocked: a Recv waiting for a message and a Send waiting for
// the receiver fail with ErrClosed soon after either side closes the link;
// later calls on both sides fail with ErrClosed (the peer may first receive
// what was completely sent before the close), and Close may be repeated.
func (s *suite) closeWhileBlocked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		send  bool // block in Send (else in Recv)
		local bool // close the blocked link itself (else its peer)
	}{
		{"recv/local-close", false, true},
		{"recv/peer-close", false, false},
		{"send/local-close", true, true},
		{"send/peer-close", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := s.pair(t)
			ctx := testCtx(t)
			var sent int
			errc := async(func() error {
				if tc.send {
					var err error
					sent, err = fillUp(ctx, a, 1)
					return err
				}
				h := hdr(1, 8)
				return a.Recv(ctx, &h, make([]byte, 8), nil)
			})
			blocks(t, errc, "the call to be interrupted")
			closer := b
			if tc.local {
				closer = a
			}
			if err := closer.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			op := "recv"
			if tc.send {
				op = "send"
			}
			wantClosed(t, returns(t, errc, "the blocked call after Close"), 1, op, "the blocked call after Close")
			s.checkClosed(t, ctx, a, b, sent)
			if err := a.Close(); err != nil {
				t.Fatalf("Close again: %v", err)
			}
			if err := b.Close(); err != nil {
				t.Fatalf("Close again: %v", err)
			}
		})
	}
}

// checkClosed checks that every call on a closed pair fails with ErrClosed,
// after b has received what a had sent before the close, if anything: sent
// messages of bigMsg bytes from sequence 1 on.
func (s *suite) checkClosed(t *testing.T, ctx context.Context, a, b transport.Link, sent int) {
	t.Helper()
	small := []byte("12345678")
	big := make([]byte, bigMsg)
	for i, l := range [2]transport.Link{a, b} {
		peer := 1 - i
		h := hdr(1000, 8)
		err := eventually(func() error { return l.Send(ctx, &h, small) })
		wantClosed(t, err, peer, "send", fmt.Sprintf("Send on link %d after Close", i))
		for _, buf := range [][]byte{small, big} {
			h := hdr(1001, len(buf))
			err := eventually(func() error {
				ok, err := l.TrySend(&h, buf)
				if err == nil && !ok {
					err = errNothing
				}
				return err
			})
			wantClosed(t, err, peer, "send", fmt.Sprintf("TrySend of %d bytes on link %d after Close", len(buf), i))
		}
	}
	h := hdr(1, 8)
	wantClosed(t, a.Recv(ctx, &h, make([]byte, 8), nil), 1, "recv", "Recv on link 0 after Close")
	buf := make([]byte, bigMsg)
	var err error
	for i := 0; i <= sent; i++ {
		h := hdr(uint64(i+1), bigMsg)
		if err = b.Recv(ctx, &h, buf, nil); err != nil {
			break
		}
	}
	wantClosed(t, err, 0, "recv", "Recv on link 1 after Close")
}

// errNothing stands for a TrySend that returned false without an error.
var errNothing = errors.New("TrySend returned false and no error")

// eventually retries f (a Send to a peer that closed may succeed until the
// transport learns of the close) until it fails, for at most prompt.
func eventually(f func() error) error {
	end := time.Now().Add(prompt)
	for {
		err := f()
		if err != nil || time.Now().After(end) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// abort: the peer's pending and later calls on a link aborted for a lost
// rank fail with a *transport.LostError naming that rank (relayed by the
// aborting side); aborted with NoLostRank, with ErrClosed.
func (s *suite) abort(t *testing.T) {
	for _, lost := range []int{5, transport.NoLostRank} {
		t.Run(fmt.Sprintf("lost=%d", lost), func(t *testing.T) {
			a, b := s.pair(t)
			ctx := testCtx(t)
			recvErr := async(func() error { h := hdr(1, 8); return b.Recv(ctx, &h, make([]byte, 8), nil) })
			blocks(t, recvErr, "Recv")
			if err := returns(t, async(func() error { return a.Abort(lost) }), "Abort"); err != nil {
				t.Fatalf("Abort: %v", err)
			}
			err := returns(t, recvErr, "the peer's Recv after Abort")
			h := hdr(2, 8)
			sendErr := eventually(func() error { return b.Send(ctx, &h, make([]byte, 8)) })
			if lost == transport.NoLostRank {
				wantClosed(t, err, 0, "recv", "the peer's Recv after Abort")
				wantClosed(t, sendErr, 0, "send", "the peer's Send after Abort")
				return
			}
			for _, e := range []struct {
				err error
				op  string
			}{{err, "recv"}, {sendErr, "send"}} {
				var le *transport.LostError
				if !errors.As(e.err, &le) || le.Rank != lost || le.Via != 0 || !errors.Is(e.err, transport.ErrPeerLost) {
					t.Fatalf("the peer's %s after Abort(%d): got %v, want a *transport.LostError naming rank %d via rank 0", e.op, lost, e.err, lost)
				}
				wantPeerErr(t, e.err, transport.ErrPeerLost, 0, e.op, "the peer's call after Abort")
			}
		})
	}
}

// abortInFlight: Abort returns promptly while a Send and a Recv of the same
// link wait, from another goroutine, and both fail.
func (s *suite) abortInFlight(t *testing.T) {
	a, _ := s.pair(t)
	ctx := testCtx(t)
	sendErr := async(func() error { _, err := fillUp(ctx, a, 1); return err })
	recvErr := async(func() error { h := hdr(1, 8); return a.Recv(ctx, &h, make([]byte, 8), nil) })
	blocks(t, sendErr, "Send")
	blocks(t, recvErr, "Recv")
	if err := returns(t, async(func() error { return a.Abort(3) }), "Abort"); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	for _, e := range []struct {
		errc <-chan error
		op   string
	}{{sendErr, "send"}, {recvErr, "recv"}} {
		err := returns(t, e.errc, e.op+" after Abort")
		if !errors.Is(err, transport.ErrClosed) && !errors.Is(err, transport.ErrPeerLost) {
			t.Fatalf("%s after Abort: got %v, want ErrClosed or a lost rank", e.op, err)
		}
	}
}

// closeRace: Close from two goroutines while both sides send and receive
// in both directions ends every call (the race detector and the memory
// checks of the runtime do the rest).
func (s *suite) closeRace(t *testing.T) {
	for iter := range 10 {
		a, b := s.pair(t)
		ctx := testCtx(t)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for _, l := range []transport.Link{a, b} {
			for _, send := range []bool{true, false} {
				wg.Go(func() {
					buf := make([]byte, 200+iter*1000)
					for i := 1; ; i++ {
						h := hdr(uint64(i), len(buf))
						var err error
						if send {
							err = l.Send(ctx, &h, buf)
						} else {
							err = l.Recv(ctx, &h, buf, nil)
						}
						if err != nil {
							if !errors.Is(err, transport.ErrClosed) {
								errs <- err
							}
							return
						}
					}
				})
			}
		}
		time.Sleep(time.Duration(iter%5) * time.Millisecond)
		go a.Close()
		a.Close()
		if err := returns(t, async(func() error { wg.Wait(); return nil }), "calls racing with Close"); err != nil {
			t.Fatal(err)
		}
		close(errs)
		for err := range errs {
			t.Fatalf("call racing with Close: got %v, want ErrClosed", err)
		}
	}
}

// allocs: a steady stream of Send, TrySend and Recv, copying and folding,
// with and without a deadline, allocates nothing.
func (s *suite) allocs(t *testing.T) {
	if s.cfg.Allocates {
		t.Skip("the link allocates (Config.Allocates)")
	}
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	for _, withDL := range []bool{false, true} {
		t.Run(fmt.Sprintf("deadline=%v", withDL), func(t *testing.T) {
			a, b := s.pair(t)
			ctx := context.Background()
			if withDL {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Hour)
				defer cancel()
			}
			maxSize := 4 << 20
			src, dst := filled(maxSize, 1), make([]byte, maxSize)
			type job struct {
				h    *transport.Header
				fold bool
			}
			start, done := make(chan job), make(chan error)
			go func() {
				for j := range start {
					var f transport.ReduceFunc
					if j.fold {
						f = addBytes
					}
					done <- b.Recv(ctx, j.h, dst[:j.h.Bytes], f)
				}
			}()
			defer close(start)
			var failed error
			for _, n := range s.sizes {
				if n > maxSize {
					continue
				}
				h := hdr(1, n)
				for _, fold := range []bool{false, true} {
					// The least of three measurements: an allocation of the
					// link's shows in each, while the runtime's own (a
					// goroutine blocking in a select takes sudogs from a
					// per-P cache, refilled from a central one that a GC
					// empties) comes and goes with the links' background
					// goroutines and the moment of the last GC.
					allocs := math.Inf(1)
					for try := 0; try < 3 && allocs != 0; try++ {
						allocs = min(allocs, testing.AllocsPerRun(10, func() {
							if failed != nil {
								return
							}
							start <- job{&h, fold}
							ok, err := a.TrySend(&h, src[:n])
							if err == nil && !ok {
								err = a.Send(ctx, &h, src[:n])
							}
							if err != nil {
								a.Close() // ends the Recv
							}
							failed = cmp.Or(err, <-done)
						}))
					}
					if failed != nil {
						t.Fatal(failed)
					}
					if allocs != 0 {
						t.Errorf("%d bytes, fold %v: %v allocations per TrySend or Send and Recv", n, fold, allocs)
					}
				}
			}
		})
	}
}
