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

// sendOne sends n random bytes from la to lb and checks what arrives.
func sendOne(t *testing.T, la, lb transport.Link, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	src := randBytes(rand.New(rand.NewPCG(1, uint64(n))), n)
	h := hdr(1, n)
	sendErr := make(chan error, 1)
	go func() { sendErr <- la.Send(ctx, &h, src) }()
	got := make([]byte, n)
	if err := lb.Recv(ctx, &h, got, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatal("payload differs")
	}
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

// TestPathStall: a link whose peer takes everything reports no stall, and
// asking allocates nothing (the rails link polls it every 100 ms while
// data flows).
func TestPathStall(t *testing.T) {
	la, lb := connectPair(t, 0, 1, 2)
	h := hdr(1, 5)
	if err := la.Send(context.Background(), &h, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if err := lb.Recv(context.Background(), &h, got, nil); err != nil {
		t.Fatal(err)
	}
	ps := la.(interface{ PathStall() time.Duration })
	time.Sleep(50 * time.Millisecond) // the peer's ACK
	if d := ps.PathStall(); d != 0 {
		t.Errorf("PathStall = %v on a link whose data was taken", d)
	}
	if n := testing.AllocsPerRun(100, func() { ps.PathStall() }); n != 0 {
		t.Errorf("PathStall allocates %v times per call", n)
	}
}
