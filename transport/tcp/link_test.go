package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

var loopback = net.IPv4(127, 0, 0, 1)

func newEndpoint(t testing.TB, rank int, job string) *Endpoint {
	t.Helper()
	e, err := Listen(rank, loopback, job)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// connectPair connects ranks a and b (both sides concurrently) and returns
// a's link to b and b's link to a.
func connectPair(t testing.TB, a, b, nsocks int) (transport.Link, transport.Link) {
	t.Helper()
	ea, eb := newEndpoint(t, a, "job-1"), newEndpoint(t, b, "job-1")
	return connectEndpoints(t, ea, eb, nsocks)
}

func connectEndpoints(t testing.TB, ea, eb *Endpoint, nsocks int) (transport.Link, transport.Link) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var lb transport.Link
	var errB error
	done := make(chan struct{})
	go func() {
		defer close(done)
		lb, errB = eb.Connect(ctx, ea.self, ea.Addr(), nsocks)
	}()
	la, errA := ea.Connect(ctx, eb.self, eb.Addr(), nsocks)
	<-done
	if errA != nil || errB != nil {
		t.Fatalf("connect: %v / %v", errA, errB)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	return la, lb
}

func hdr(seq uint64, n int) transport.Header {
	return transport.Header{Seq: seq, Op: 3, DType: 1, RedOp: 0, Root: -1, Count: uint64(n), Bytes: uint64(n)}
}

func randBytes(r *rand.Rand, n int) []byte {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], r.Uint64())
	// Random bytes, tiled with a prime period: cheap for big buffers (the
	// race detector is slow), and no two chunks or pieces look alike.
	const period = 65521
	b := make([]byte, n)
	rand.NewChaCha8(seed).Read(b[:min(n, period)])
	for i := period; i < n; i += period {
		copy(b[i:], b[:period])
	}
	return b
}

func TestConnect(t *testing.T) {
	for _, ranks := range [][2]int{{0, 1}, {3, 1}} {
		for _, nsocks := range []int{1, 3} {
			t.Run(fmt.Sprintf("ranks%d-%d/socks%d", ranks[0], ranks[1], nsocks), func(t *testing.T) {
				la, lb := connectPair(t, ranks[0], ranks[1], nsocks)
				if la.Peer() != ranks[1] || lb.Peer() != ranks[0] {
					t.Fatalf("peers %d %d", la.Peer(), lb.Peer())
				}
				want := fmt.Sprintf("tcp %d sock", nsocks)
				if !strings.HasPrefix(la.Name(), want) || !strings.Contains(la.Name(), "127.0.0.1:") {
					t.Fatalf("name %q", la.Name())
				}
				h := hdr(1, 5)
				if err := la.Send(context.Background(), &h, []byte("hello")); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, 5)
				if err := lb.Recv(context.Background(), &h, got, nil); err != nil || string(got) != "hello" {
					t.Fatalf("recv %q %v", got, err)
				}
			})
		}
	}
}

func TestRoundTrip(t *testing.T) {
	sizes := []int{0, 1, 7, 64, 512<<10 - 1, 512<<10 + 1, stripeMin + 1, 10<<20 + 3}
	for _, nsocks := range []int{1, 3} {
		t.Run(fmt.Sprintf("socks%d", nsocks), func(t *testing.T) {
			la, lb := connectPair(t, 0, 1, nsocks)
			for _, reduce := range []bool{false, true} {
				for i, n := range sizes {
					exchange(t, la, lb, uint64(i+1), n, reduce)
				}
			}
		})
	}
}

// addBytes is a byte-wise add ReduceFunc; it records piece sizes.
type pieceLog struct {
	mu     sync.Mutex
	pieces []int
}

func (p *pieceLog) add(dst, src []byte) {
	addBytes(dst, src)
	p.mu.Lock()
	p.pieces = append(p.pieces, len(dst))
	p.mu.Unlock()
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

// exchange sends n random bytes both ways at once and checks them.
func exchange(t *testing.T, la, lb transport.Link, seq uint64, n int, reduce bool) {
	t.Helper()
	r := rand.New(rand.NewPCG(seq, uint64(n)))
	links := [2]transport.Link{la, lb}
	var src, dst, init [2][]byte
	for i := range 2 {
		src[i] = randBytes(r, n)
		dst[i] = randBytes(r, n)
		init[i] = bytes.Clone(dst[i])
	}
	var logs [2]pieceLog
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 2 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			h := hdr(seq, n)
			errs <- links[i].Send(context.Background(), &h, src[i])
		}()
		go func() {
			defer wg.Done()
			h := hdr(seq, n)
			var f transport.ReduceFunc
			if reduce {
				f = logs[i].add
			}
			errs <- links[i].Recv(context.Background(), &h, dst[i], f)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("size %d reduce %v: %v", n, reduce, err)
		}
	}
	for i := range 2 {
		want := src[1-i]
		if reduce {
			want = bytes.Clone(init[i])
			addBytes(want, src[1-i]) // checked against a plain loop in TestAddBytes
			odd := 0
			total := 0
			for _, p := range logs[i].pieces {
				total += p
				if p%64 != 0 {
					odd++
				}
			}
			if odd > 1 || total != n {
				t.Fatalf("size %d: reduce pieces %v (%d not multiple of 64, total %d)", n, logs[i].pieces, odd, total)
			}
		}
		if !bytes.Equal(dst[i], want) {
			t.Fatalf("size %d reduce %v: data mismatch on side %d", n, reduce, i)
		}
	}
}

func TestAddBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 7, 8, 9, 64, 1000} {
		a, b := randBytes(r, n), randBytes(r, n)
		want := bytes.Clone(a)
		for i := range want {
			want[i] += b[i]
		}
		addBytes(a, b)
		if !bytes.Equal(a, want) {
			t.Fatalf("n=%d: addBytes wrong", n)
		}
	}
}

func TestOrdered(t *testing.T) {
	for _, nsocks := range []int{1, 2} {
		t.Run(fmt.Sprintf("socks%d", nsocks), func(t *testing.T) {
			la, lb := connectPair(t, 0, 1, nsocks)
			const msgs = 1000
			size := func(i int) int {
				if i%100 == 7 {
					return stripeMin + 100<<10 + i // striped when nsocks > 1
				}
				return i % 300
			}
			errc := make(chan error, 1)
			go func() {
				buf := make([]byte, stripeMin+200<<10)
				for i := 1; i <= msgs; i++ {
					n := size(i)
					for j := range n {
						buf[j] = byte(i + j)
					}
					h := hdr(uint64(i), n)
					if err := la.Send(context.Background(), &h, buf[:n]); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			buf := make([]byte, stripeMin+200<<10)
			for i := 1; i <= msgs; i++ {
				n := size(i)
				h := hdr(uint64(i), n)
				if err := lb.Recv(context.Background(), &h, buf[:n], nil); err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				for j := range n {
					if buf[j] != byte(i+j) {
						t.Fatalf("message %d byte %d corrupt", i, j)
					}
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMismatch(t *testing.T) {
	for _, n := range []int{100, 3 << 20} {
		for _, nsocks := range []int{1, 2} {
			t.Run(fmt.Sprintf("socks%d/size%d", nsocks, n), func(t *testing.T) {
				la, lb := connectPair(t, 0, 1, nsocks)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				sendErr := make(chan error, 1)
				go func() {
					h := hdr(1, n)
					h.Count = 99
					if err := la.Send(ctx, &h, make([]byte, n)); err != nil {
						sendErr <- err
						return
					}
					// Wait for a reply that never comes: must fail, not hang.
					r := hdr(2, 1)
					sendErr <- la.Recv(ctx, &r, make([]byte, 1), nil)
				}()
				h := hdr(1, n)
				err := lb.Recv(ctx, &h, make([]byte, n), nil)
				var me *transport.MismatchError
				if !errors.As(err, &me) || me.Field != "count" || me.Peer != 0 || me.Got != 99 {
					t.Fatalf("receiver: %v", err)
				}
				select {
				case err := <-sendErr:
					if err == nil || ctx.Err() != nil || !errors.Is(err, transport.ErrClosed) {
						t.Fatalf("sender: %v", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("sender hangs after a mismatch")
				}
				if err := lb.Recv(ctx, &h, make([]byte, n), nil); !errors.Is(err, transport.ErrClosed) {
					t.Fatalf("after mismatch: %v", err)
				}
			})
		}
	}
}

func TestCancelRecv(t *testing.T) {
	for _, nsocks := range []int{1, 3} {
		t.Run(fmt.Sprintf("socks%d", nsocks), func(t *testing.T) {
			la, lb := connectPair(t, 0, 1, nsocks)
			buf := make([]byte, 4)
			h := hdr(1, 4)

			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			start := time.Now()
			err := lb.Recv(ctx, &h, buf, nil)
			if !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
				t.Fatalf("cancel: %v after %v", err, time.Since(start))
			}
			var pe *transport.PeerError
			if !errors.As(err, &pe) || pe.Op != "recv" || pe.Peer != 0 {
				t.Fatalf("not a PeerError: %#v", err)
			}

			ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start = time.Now()
			err = lb.Recv(ctx, &h, buf, nil)
			if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
				t.Fatalf("deadline: %v after %v", err, time.Since(start))
			}

			// Nothing was consumed: the link still works, with no stale deadline.
			go la.Send(context.Background(), &h, []byte("abcd"))
			if err := lb.Recv(context.Background(), &h, buf, nil); err != nil || string(buf) != "abcd" {
				t.Fatalf("after cancel: %q %v", buf, err)
			}
		})
	}
}

func TestCancelSendMidMessage(t *testing.T) {
	for _, nsocks := range []int{1, 3} {
		t.Run(fmt.Sprintf("socks%d", nsocks), func(t *testing.T) {
			la, lb := connectPair(t, 0, 1, nsocks)
			// Nobody receives: a 256 MiB send blocks once the kernel buffers fill.
			buf := make([]byte, 256<<20)
			h := hdr(1, len(buf))
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			start := time.Now()
			err := la.Send(ctx, &h, buf)
			if !errors.Is(err, context.Canceled) || time.Since(start) > 3*time.Second {
				t.Fatalf("send: %v after %v", err, time.Since(start))
			}
			// Part of a frame went out: both sides are now closed.
			if err := la.Send(context.Background(), &h, buf); !errors.Is(err, transport.ErrClosed) {
				t.Fatalf("send after partial frame: %v", err)
			}
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer rcancel()
			err = lb.Recv(rctx, &h, buf, nil)
			if !errors.Is(err, transport.ErrClosed) {
				t.Fatalf("receiver of a truncated frame: %v", err)
			}
		})
	}
}

func TestPeerClose(t *testing.T) {
	for _, nsocks := range []int{1, 2} {
		t.Run(fmt.Sprintf("socks%d", nsocks), func(t *testing.T) {
			la, lb := connectPair(t, 0, 1, nsocks)
			h := hdr(1, 4<<20)
			buf := make([]byte, 4<<20)
			errc := make(chan error, 1)
			go func() { errc <- lb.Recv(context.Background(), &h, buf, nil) }()
			time.Sleep(20 * time.Millisecond)
			if err := la.Close(); err != nil {
				t.Fatal(err)
			}
			if err := la.Close(); err != nil { // idempotent
				t.Fatal(err)
			}
			select {
			case err := <-errc:
				var pe *transport.PeerError
				if !errors.Is(err, transport.ErrClosed) || !errors.As(err, &pe) || pe.Op != "recv" {
					t.Fatalf("recv after peer close: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("recv hangs after peer close")
			}
			// Sending to a closed peer fails too (maybe after the kernel notices).
			small := hdr(2, 10)
			var err error
			for i := 0; i < 100 && err == nil; i++ {
				err = lb.Send(context.Background(), &small, make([]byte, 10))
				time.Sleep(time.Millisecond)
			}
			if !errors.Is(err, transport.ErrClosed) {
				t.Fatalf("send to closed peer: %v", err)
			}
			if err := la.Send(context.Background(), &small, make([]byte, 10)); !errors.Is(err, transport.ErrClosed) {
				t.Fatalf("send on closed link: %v", err)
			}
		})
	}
}

func TestCloseWhileBlocked(t *testing.T) {
	for _, nsocks := range []int{1, 2} {
		t.Run(fmt.Sprintf("socks%d", nsocks), func(t *testing.T) {
			la, _ := connectPair(t, 0, 1, nsocks)
			big := make([]byte, 256<<20)
			hs := hdr(1, len(big))
			hr := hdr(1, 8)
			errs := make(chan error, 2)
			go func() { errs <- la.Send(context.Background(), &hs, big) }()
			go func() { errs <- la.Recv(context.Background(), &hr, make([]byte, 8), nil) }()
			time.Sleep(100 * time.Millisecond)
			la.Close()
			for range 2 {
				select {
				case err := <-errs:
					if !errors.Is(err, transport.ErrClosed) {
						t.Fatalf("blocked call after Close: %v", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("blocked call hangs after Close")
				}
			}
		})
	}
}

func TestTrySend(t *testing.T) {
	// 2 MiB+3 bytes: striped over 3 sockets (chunks 0 and 3 on socket 0).
	for _, tc := range []struct{ nsocks, n int }{{1, 256 << 10}, {3, stripeMin + 3}} {
		t.Run(fmt.Sprintf("socks%d", tc.nsocks), func(t *testing.T) { testTrySend(t, tc.nsocks, tc.n) })
	}
}

func testTrySend(t *testing.T, nsocks, n int) {
	la, lb := connectPair(t, 0, 1, nsocks)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Always sent: up to 64 KiB.
	h := hdr(1, 64<<10)
	ok, err := la.TrySend(&h, make([]byte, 64<<10))
	if !ok || err != nil {
		t.Fatalf("TrySend 64 KiB: %v %v", ok, err)
	}
	// Never sent: above trySendMax.
	big := hdr(2, trySendMax+1)
	ok, err = la.TrySend(&big, make([]byte, trySendMax+1))
	if ok || err != nil {
		t.Fatalf("TrySend trySendMax+1: %v %v", ok, err)
	}
	if err := lb.Recv(ctx, &h, make([]byte, 64<<10), nil); err != nil {
		t.Fatal(err)
	}
	// In between: sent while the send buffers have room. Nobody receives,
	// so TrySend must start refusing, not block, once the buffers are full.
	msg := make([]byte, n)
	for i := range msg {
		msg[i] = byte(i % 251)
	}
	roomy := hasRoom(la, n)
	type result struct {
		sent int
		err  error
	}
	res := make(chan result, 1)
	go func() {
		sent := 0
		for seq := uint64(2); sent < 10000; seq++ {
			hm := hdr(seq, n)
			ok, err := la.TrySend(&hm, msg)
			if err != nil || !ok {
				res <- result{sent, err}
				return
			}
			sent++
		}
		res <- result{sent, errors.New("TrySend never refuses")}
	}()
	var r result
	select {
	case r = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("TrySend blocks on a full send buffer")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.sent == 0 && roomy {
		t.Fatalf("TrySend of %d bytes refused on an idle link", n)
	}
	t.Logf("%d messages of %d bytes sent before TrySend refused", r.sent, n)
	got := make([]byte, n)
	for i := range r.sent {
		hm := hdr(uint64(i+2), n)
		if err := lb.Recv(ctx, &hm, got, nil); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("message %d of %d: %v", i, r.sent, err)
		}
	}
}

// hasRoom reports whether the idle link l has the send-buffer room for TrySend
// to send an n-byte message (on Linux, unless core.wmem_max keeps the buffers
// small).
func hasRoom(l transport.Link, n int) bool {
	k := len(l.(*link).tx)
	for i, s := range l.(*link).tx {
		need := stripeShare(n, i, k)
		if i == 0 {
			need += transport.HeaderSize
		}
		if need > 0 && !s.sendRoom(need) {
			return false
		}
	}
	return true
}

func TestStripeShare(t *testing.T) {
	for _, n := range []int{0, 1, chunkSize, stripeMin, stripeMin + 1, 5*chunkSize - 5, 7*chunkSize + 9, 10 << 20} {
		for _, k := range []int{1, 2, 3, 4} {
			total := 0
			for i := range k {
				share := stripeShare(n, i, k)
				want := 0
				if k == 1 || n <= stripeMin {
					if i == 0 {
						want = n
					}
				} else {
					for off := i * chunkSize; off < n; off += k * chunkSize {
						want += min(chunkSize, n-off)
					}
				}
				if share != want {
					t.Errorf("stripeShare(%d, %d, %d) = %d, want %d", n, i, k, share, want)
				}
				total += share
			}
			if total != n {
				t.Errorf("n=%d k=%d: shares add up to %d", n, k, total)
			}
		}
	}
}

func TestArgumentErrors(t *testing.T) {
	la, _ := connectPair(t, 0, 1, 1)
	h := hdr(1, 10)
	if err := la.Send(context.Background(), &h, make([]byte, 9)); err == nil {
		t.Fatal("Send with a short buffer succeeded")
	}
	if err := la.Recv(context.Background(), &h, make([]byte, 11), nil); err == nil {
		t.Fatal("Recv with a wrong buffer size succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := la.Recv(ctx, &h, make([]byte, 10), nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv with a done ctx: %v", err)
	}
}

func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	for _, nsocks := range []int{1, 2} {
		for _, withDL := range []bool{false, true} {
			t.Run(fmt.Sprintf("socks%d/deadline%v", nsocks, withDL), func(t *testing.T) {
				la, lb := connectPair(t, 0, 1, nsocks)
				ctx := context.Background()
				if withDL {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Minute)
					defer cancel()
				}
				const n = 3 << 20 // striped when nsocks > 1
				src, dst := make([]byte, 4<<20), make([]byte, 4<<20)
				type job struct {
					h   *transport.Header
					red bool
				}
				start, done := make(chan job), make(chan error)
				go func() {
					for j := range start {
						var f transport.ReduceFunc
						if j.red {
							f = addBytes
						}
						done <- lb.Recv(ctx, j.h, dst[:j.h.Bytes], f)
					}
				}()
				defer close(start)
				h := hdr(1, n)
				for _, red := range []bool{false, true} {
					allocs := testing.AllocsPerRun(20, func() {
						start <- job{&h, red}
						if err := la.Send(ctx, &h, src[:n]); err != nil {
							t.Fatal(err)
						}
						if err := <-done; err != nil {
							t.Fatal(err)
						}
					})
					if allocs != 0 {
						t.Errorf("reduce %v: %v allocations per Send+Recv", red, allocs)
					}
				}
				// TrySend of a message that needs the send-buffer query (and
				// is striped when nsocks > 1).
				hs := hdr(1, stripeMin+64)
				sent := 0
				allocs := testing.AllocsPerRun(20, func() {
					ok, err := la.TrySend(&hs, src[:hs.Bytes])
					if err != nil {
						t.Fatal(err)
					}
					if ok {
						sent++
						start <- job{&hs, false}
						if err := <-done; err != nil {
							t.Fatal(err)
						}
					}
				})
				if allocs != 0 {
					t.Errorf("%v allocations per TrySend+Recv", allocs)
				}
				if sent == 0 && hasRoom(la, int(hs.Bytes)) {
					t.Error("TrySend never sent")
				}
			})
		}
	}
}
