package roce

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/linktest"
	"github.com/goccl/goccl/transport/tcp"
)

// tcpPair connects two TCP links over loopback (ranks 0 and 1).
func tcpPair(t testing.TB) (a, b transport.Link) {
	t.Helper()
	ea, err := tcp.Listen(0, net.IPv4(127, 0, 0, 1), "roce-test")
	if err != nil {
		t.Fatal(err)
	}
	eb, err := tcp.Listen(1, net.IPv4(127, 0, 0, 1), "roce-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ea.Close(); eb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errB error
	done := make(chan struct{})
	go func() { defer close(done); b, errB = eb.Connect(ctx, 0, ea.Addr(), 1) }()
	a, errA := ea.Connect(ctx, 1, eb.Addr(), 1)
	<-done
	if errA != nil || errB != nil {
		t.Fatalf("tcp connect: %v / %v", errA, errB)
	}
	return a, b
}

// device opens a soft RoCE v2 device on loopback (nil: none).
func device(t testing.TB, opts ...rdma.Option) *rdma.Device {
	t.Helper()
	d, err := rdma.Open("127.0.0.1:0", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// domain is dev's domain (nil: none).
func domain(dev *rdma.Device) *Domain {
	if dev == nil {
		return nil
	}
	return NewDomain(dev)
}

// dialPair makes the two ends' links at once, over devices da and db (nil:
// that side has none).
func dialPair(t testing.TB, da, db *rdma.Device, o Options) (a, b transport.Link, fallback [2]bool) {
	t.Helper()
	return dialPairDomains(t, domain(da), domain(db), o)
}

// dialPairDomains is dialPair in given domains. A zero o.Timeout is
// GOCCL_IB_TIMEOUT's default (16: 268 ms, as goccl's communicators use),
// not the package's 14: 8 tries of 67 ms fail a queue pair whose device
// the race detector and a loaded machine kept from running for half a
// second.
func dialPairDomains(t testing.TB, da, db *Domain, o Options) (a, b transport.Link, fallback [2]bool) {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 16
	}
	ca, cb := tcpPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errB error
	done := make(chan struct{})
	go func() { defer close(done); b, fallback[1], errB = Dial(ctx, cb, db, o) }()
	var errA error
	a, fallback[0], errA = Dial(ctx, ca, da, o)
	<-done
	if errA != nil || errB != nil {
		t.Fatalf("dial: %v / %v", errA, errB)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, fallback
}

// TestLinkConformance runs the transport.Link suite over RoCE links with
// the default ring and with small slots (messages of many chunks, more
// than the ring holds), on one device per side as two processes would have.
func TestLinkConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"default", Options{}},
		{"small-slots", Options{Slots: 3, SlotBytes: 16 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			per := tc.o.SlotBytes
			if per == 0 {
				per = DefaultSlotBytes
			}
			slots := max(tc.o.Slots, 2)
			linktest.RunConfig(t, linktest.Config{
				NewPair: func(t *testing.T) (a, b transport.Link) {
					a, b, _ = dialPair(t, device(t), device(t), tc.o)
					return a, b
				},
				Sizes: []int{per - hdrRoom - 1, per - hdrRoom, per - hdrRoom + 1, 2*per - hdrRoom + 64,
					slots*per - hdrRoom, slots*per + 1, 3*slots*per + 192},
				// golang.org/x/net's ReadBatch allocates per batch of
				// datagrams the device reads (the sender's address), and
				// the engine's queues grow now and then.
				Allocates: true,
			})
		})
	}
}

// TestName: the link says which transport it is, as GOCCL_DEBUG=INFO
// prints it per peer.
func TestName(t *testing.T) {
	a, _, fb := dialPair(t, device(t), device(t), Options{})
	if fb[0] || fb[1] {
		t.Fatal("fell back to TCP with devices on both sides")
	}
	if !strings.HasPrefix(a.Name(), "NET/RoCE/v2 ") {
		t.Fatalf("name %q", a.Name())
	}
}

// TestFallback: a side without a device makes both sides keep the TCP
// link, and it works.
func TestFallback(t *testing.T) {
	for _, tc := range []struct {
		name   string
		da, db bool
	}{{"this side", false, true}, {"peer", true, false}, {"neither", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var da, db *rdma.Device
			if tc.da {
				da = device(t)
			}
			if tc.db {
				db = device(t)
			}
			a, b, fb := dialPair(t, da, db, Options{})
			if !fb[0] || !fb[1] || !strings.HasPrefix(a.Name(), "tcp") || !strings.HasPrefix(b.Name(), "tcp") {
				t.Fatalf("fallback %v, names %q %q", fb, a.Name(), b.Name())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			h := transport.Header{Seq: 1, Op: 3, Root: -1, Count: 5, Bytes: 5}
			errc := make(chan error, 1)
			go func() { errc <- a.Send(ctx, &h, []byte("hello")) }()
			got := make([]byte, 5)
			if err := b.Recv(ctx, &h, got, nil); err != nil || string(got) != "hello" || <-errc != nil {
				t.Fatalf("over the fallback: %q %v", got, err)
			}
		})
	}
}

// TestBadOptions: a ring that cannot work is refused before anything is
// made.
func TestBadOptions(t *testing.T) {
	ca, _ := tcpPair(t)
	for _, o := range []Options{{Slots: 1}, {SlotBytes: 1000}, {SlotBytes: 16 << 20}} {
		if _, _, err := Dial(context.Background(), ca, nil, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// TestLossyDevice: a 4 MiB stream both ways through devices that drop,
// duplicate, reorder and corrupt 1 % of packets arrives whole (the queue
// pairs' retransmission under the link).
func TestLossyDevice(t *testing.T) {
	f := rdma.Faults{Drop: 0.01, Duplicate: 0.01, Reorder: 0.01, Corrupt: 0.01, Seed: 3}
	a, b, _ := dialPair(t, device(t, rdma.WithFaults(f)), device(t, rdma.WithFaults(f)), Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 4 << 20
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(i*7 + i>>12)
	}
	h := transport.Header{Seq: 1, Op: 3, Root: -1, Count: n, Bytes: n}
	for _, dir := range [][2]transport.Link{{a, b}, {b, a}} {
		errc := make(chan error, 1)
		go func() { errc <- dir[0].Send(ctx, &h, out) }()
		in := make([]byte, n)
		if err := dir[1].Recv(ctx, &h, in, nil); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		for i := range in {
			if in[i] != out[i] {
				t.Fatalf("byte %d: %d, want %d", i, in[i], out[i])
			}
		}
	}
}

// TestQPFailureWatched: when the peer's device stops answering but its
// control connection stays up (a partition of the RDMA path), the queue
// pair's retry-exceeded completion fails a Send naming the peer as lost
// and reaches the loss watcher, without waiting for the control link.
func TestQPFailureWatched(t *testing.T) {
	db := device(t)
	a, _, _ := dialPair(t, device(t), db, Options{Timeout: 10, RetryCnt: 2}) // 4.2 ms × 3 tries
	lost := make(chan error, 1)
	a.(transport.LossWatcher).WatchLoss(func(err error) { lost <- err })
	db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// 4 MiB is more than the peer's ring: the Send waits for credits that
	// never come, until the queue pair gives up.
	h := transport.Header{Seq: 1, Op: 3, Root: -1, Count: 4 << 20, Bytes: 4 << 20}
	err := a.Send(ctx, &h, make([]byte, 4<<20))
	if transport.LostRank(err) != 1 || !strings.Contains(err.Error(), "stopped acknowledging") {
		t.Fatalf("Send to a silent peer: %v", err)
	}
	select {
	case w := <-lost:
		if transport.LostRank(w) != 1 {
			t.Fatalf("watcher heard %v", w)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the loss watcher never heard of the failed queue pair")
	}
}

// TestPeerGone: when the peer's process is killed (its control
// connection and device vanish without a goodbye), a waiting Recv fails at
// once naming the peer as lost, and the loss watcher hears of it. The peer
// is this test binary run again (peerMain).
func TestPeerGone(t *testing.T) {
	ea, err := tcp.Listen(0, net.IPv4(127, 0, 0, 1), "roce-test")
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeerGone$")
	cmd.Env = append(os.Environ(), "GOCCL_ROCE_TEST_PEER="+ea.Addr())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("peer process: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctrl, err := ea.Connect(ctx, 1, strings.TrimSpace(line), 1)
	if err != nil {
		t.Fatal(err)
	}
	a, fb, err := Dial(ctx, ctrl, NewDomain(device(t)), Options{})
	if err != nil || fb {
		t.Fatalf("dial: %v (fallback %v)", err, fb)
	}
	defer a.Close()
	// One message each way first: the link works.
	h := transport.Header{Seq: 1, Op: 3, Root: -1, Count: 8, Bytes: 8}
	if err := a.Send(ctx, &h, []byte("ping1234")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	if err := a.Recv(ctx, &h, got, nil); err != nil || string(got) != "ping1234" {
		t.Fatalf("echo: %q %v", got, err)
	}
	lost := make(chan error, 1)
	a.(transport.LossWatcher).WatchLoss(func(err error) { lost <- err })
	errc := make(chan error, 1)
	go func() {
		h := transport.Header{Seq: 2, Op: 3, Root: -1, Count: 8, Bytes: 8}
		errc <- a.Recv(context.Background(), &h, make([]byte, 8), nil)
	}()
	time.Sleep(20 * time.Millisecond)
	cmd.Process.Kill()
	start := time.Now()
	select {
	case err := <-errc:
		if !errors.Is(err, transport.ErrPeerLost) || transport.LostRank(err) != 1 {
			t.Fatalf("Recv: %v", err)
		}
		t.Logf("Recv failed %v after the kill: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(2 * time.Second):
		t.Fatal("Recv still waiting 2 s after the peer was killed")
	}
	select {
	case err := <-lost:
		if transport.LostRank(err) != 1 {
			t.Fatalf("watcher: %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("the loss watcher was not called")
	}
	cmd.Wait()
}

// peerMain is TestPeerGone's peer: it connects back, echoes one message
// and waits to be killed.
func peerMain(addr string) {
	eb, err := tcp.Listen(1, net.IPv4(127, 0, 0, 1), "roce-test")
	if err != nil {
		panic(err)
	}
	fmt.Println(eb.Addr())
	ctx := context.Background()
	ctrl, err := eb.Connect(ctx, 0, addr, 1)
	if err != nil {
		panic(err)
	}
	d, err := rdma.Open("127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	l, _, err := Dial(ctx, ctrl, NewDomain(d), Options{})
	if err != nil {
		panic(err)
	}
	h := transport.Header{Seq: 1, Op: 3, Root: -1, Count: 8, Bytes: 8}
	buf := make([]byte, 8)
	if err := l.Recv(ctx, &h, buf, nil); err != nil {
		panic(err)
	}
	if err := l.Send(ctx, &h, buf); err != nil {
		panic(err)
	}
	time.Sleep(time.Minute)
}

func TestMain(m *testing.M) {
	if addr := os.Getenv("GOCCL_ROCE_TEST_PEER"); addr != "" {
		peerMain(addr)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// BenchmarkStream sends b.N messages of 4 MiB from a to b (one direction),
// also from a registered buffer (RDMA WRITE straight from it), and, with
// both, from b to a at the same time: the link's cost over the device's
// (compare `goccl roce write-bw -s 4M`). cpu-ns/B is the process's CPU
// time (user and system, both ends) per byte delivered.
func BenchmarkStream(b *testing.B) {
	for _, tc := range []struct {
		name                     string
		both, registered, direct bool
	}{{"oneway", false, false, false}, {"oneway-registered", false, true, false}, {"oneway-direct", false, true, true},
		{"bidir", true, false, false}, {"bidir-direct", true, true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			dx, dy := NewDomain(device(b)), NewDomain(device(b))
			x, y, _ := dialPairDomains(b, dx, dy, benchOpts)
			const n = 4 << 20
			buf := [2][]byte{make([]byte, n), make([]byte, n)}
			in := [2][]byte{make([]byte, n), make([]byte, n)}
			// registered: the sources; direct: the destinations too (the
			// receiver advertises them, no copy at either end).
			for i, reg := range []struct {
				d   *Domain
				buf []byte
				on  bool
			}{{dx, buf[0], tc.registered}, {dy, buf[1], tc.registered && tc.both}, {dy, in[0], tc.direct}, {dx, in[1], tc.direct && tc.both}} {
				if reg.on {
					if _, err := reg.d.Register(reg.buf); err != nil {
						b.Fatal(i, err)
					}
				}
			}
			h := transport.Header{Seq: 1, Op: 3, Root: -1, Count: n, Bytes: n}
			ctx := context.Background()
			b.SetBytes(n)
			cpu0 := cpuTime()
			b.ResetTimer()
			errc := make(chan error, 3)
			repeat := func(f func() error) {
				for i := 0; i < b.N; i++ {
					if err := f(); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}
			go repeat(func() error { return x.Send(ctx, &h, buf[0]) })
			if tc.both {
				go repeat(func() error { return y.Send(ctx, &h, buf[1]) })
				go repeat(func() error { return x.Recv(ctx, &h, in[1], nil) })
			}
			for i := 0; i < b.N; i++ {
				if err := y.Recv(ctx, &h, in[0], nil); err != nil {
					b.Fatal(err)
				}
			}
			for range map[bool]int{false: 1, true: 3}[tc.both] {
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			moved := float64(b.N) * n
			if tc.both {
				moved *= 2
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/moved, "cpu-ns/B")
		})
	}
}

// cpuTime is the process's CPU time so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var benchOpts = Options{} // the ring BenchmarkStream uses

// TestRegisteredSend: a message from a registered buffer goes by RDMA
// WRITE straight from it (no staging copy) and arrives whole, folded too;
// a buffer only partly registered, or small, is staged and arrives as well.
// Register and Deregister refuse misuse with errors that say what.
func TestRegisteredSend(t *testing.T) {
	da := NewDomain(device(t))
	ca, cb := tcpPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var b transport.Link
	done := make(chan error, 1)
	go func() {
		var err error
		b, _, err = Dial(ctx, cb, NewDomain(device(t)), Options{Timeout: 16}) // as dialPair
		done <- err
	}()
	a, _, err := Dial(ctx, ca, da, Options{Timeout: 16})
	if err != nil || <-done != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	const n = 3<<20 + 4096
	buf := make([]byte, n+8192)
	for i := range buf {
		buf[i] = byte(i*31 + i>>9)
	}
	reg, err := da.Register(buf[4096:])
	if err != nil {
		t.Fatal(err)
	}
	xfer := func(seq uint64, out []byte, fold bool) {
		t.Helper()
		h := transport.Header{Seq: seq, Op: 3, Root: -1, Count: uint64(len(out)), Bytes: uint64(len(out))}
		errc := make(chan error, 1)
		go func() { errc <- a.Send(ctx, &h, out) }()
		in := make([]byte, len(out))
		var reduce transport.ReduceFunc
		if fold {
			for i := range in {
				in[i] = 1
			}
			reduce = func(dst, src []byte) {
				for i := range dst {
					dst[i] += src[i]
				}
			}
		}
		if err := b.Recv(ctx, &h, in, reduce); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		for i := range in {
			want := out[i]
			if fold {
				want++
			}
			if in[i] != want {
				t.Fatalf("message %d, byte %d: %d, want %d", seq, i, in[i], want)
			}
		}
	}
	zc := &a.(*Link).zeroCopied
	xfer(1, buf[4096:4096+n], false)
	xfer(2, buf[8192:8192+n], true) // inside, at an offset
	if got := zc.Load(); got != 2*n {
		t.Fatalf("%d bytes sent from the registered buffer, want %d", got, 2*n)
	}
	xfer(3, buf[:n], false)                       // starts before the registration: staged
	xfer(4, buf[4096:4096+zeroCopyMin-64], false) // small: staged
	if got := zc.Load(); got != 2*n {
		t.Fatalf("%d bytes sent from the registered buffer after staged sends, want %d", got, 2*n)
	}

	// Misuse.
	if _, err := da.Register(nil); err == nil {
		t.Error("an empty buffer registered")
	}
	if _, err := da.Register(buf[:8192]); !errors.Is(err, ErrOverlap) {
		t.Errorf("overlapping registration: %v", err)
	}
	// Deregistering while a send reads the buffer: the peer does not
	// receive yet, so the send waits for slots, holding the buffer.
	h := transport.Header{Seq: 5, Op: 3, Root: -1, Count: n, Bytes: n}
	errc := make(chan error, 1)
	go func() { errc <- a.Send(ctx, &h, buf[4096:4096+n]) }()
	deadline := time.Now().Add(5 * time.Second)
	for reg.users.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := reg.Deregister(); !errors.Is(err, ErrInUse) {
		t.Fatalf("Deregister during a send: %v", err)
	}
	if err := b.Recv(ctx, &h, make([]byte, n), nil); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if err := reg.Deregister(); err != nil {
		t.Fatalf("Deregister after the send: %v", err)
	}
	if err := reg.Deregister(); !errors.Is(err, ErrDereg) {
		t.Fatalf("second Deregister: %v", err)
	}
	xfer(6, buf[4096:4096+n], false) // no longer registered: staged
	if got := zc.Load(); got != 3*n {
		t.Fatalf("%d bytes zero-copied after Deregister, want %d (messages 1, 2 and 5)", got, 3*n)
	}
}

// TestDirectReceive: a receive into a registered buffer advertises it, and
// a registered send then writes the payload straight into it (all of it
// when the advert came first, the rest when it came mid-message); every
// other combination stays on the ring; bytes are right either way.
func TestDirectReceive(t *testing.T) {
	da, db := NewDomain(device(t)), NewDomain(device(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ta, tb, _ := dialPairDomains(t, da, db, Options{})
	a, b := ta.(*Link), tb.(*Link)
	defer a.Close()
	defer b.Close()
	const n = 3<<20 + 4096
	src := make([]byte, n)
	dst := make([]byte, n+4096)
	sreg, err := da.Register(src)
	if err != nil {
		t.Fatal(err)
	}
	rreg, err := db.Register(dst)
	if err != nil {
		t.Fatal(err)
	}
	seq := uint64(0)
	// xfer sends out from a and receives it into in at b, the send
	// starting first when sendFirst (and the receive once the send holds
	// every slot), else once b's advert has landed at a.
	xfer := func(out, in []byte, sendFirst bool, reduce transport.ReduceFunc) {
		t.Helper()
		seq++
		for i := range out {
			out[i] = byte(i*7 + int(seq))
		}
		h := transport.Header{Seq: seq, Op: 3, Root: -1, Count: uint64(len(out)), Bytes: uint64(len(out))}
		sent := make(chan error, 1)
		send := func() { sent <- a.Send(ctx, &h, out) }
		recvd := make(chan error, 1)
		if sendFirst {
			go send()
			waitFor(t, func() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.posted-a.credits >= uint64(a.pslots) })
			go func() { recvd <- b.Recv(ctx, &h, in, reduce) }()
		} else {
			go func() { recvd <- b.Recv(ctx, &h, in, reduce) }()
			if reduce == nil && len(in) >= zeroCopyMin {
				if r, _ := db.acquire(in); r != nil {
					r.release()
					want := a.sentMsgs + 1
					waitFor(t, func() bool {
						e := a.rmr.Bytes()[a.rslots*a.rslot+int(a.sentMsgs%fifoLen)*fifoEntry:]
						return atomic.LoadUint64((*uint64)(unsafe.Pointer(&e[24]))) == want
					})
				}
			}
			go send()
		}
		if err := <-recvd; err != nil {
			t.Fatal(err)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		for i := range in {
			want := out[i]
			if reduce != nil {
				want++
			}
			if in[i] != want {
				t.Fatalf("message %d, byte %d: %d, want %d", seq, i, in[i], want)
			}
		}
	}
	direct := func() uint64 { return b.DirectReceived() }

	xfer(src, dst[:n], false, nil) // advert first: all but the header's slot direct
	if got := direct(); got != n {
		t.Fatalf("advert before the send: %d bytes direct, want %d", got, n)
	}
	// In WRITEs of directPiece (so that what a posts meanwhile does not
	// wait behind the whole message).
	if got, want := a.dposted, uint64((n+directPiece-1)/directPiece); got != want {
		t.Fatalf("advert before the send: %d direct WRITEs, want %d of at most %d bytes", got, want, directPiece)
	}
	xfer(src, dst[4096:4096+n], true, nil) // the advert overtakes the send
	if got := direct() - n; got == 0 || got >= n {
		t.Fatalf("advert during the send: %d bytes direct, want some but not all of %d", got, n)
	}
	for i := 0; i < 2*fifoLen+1; i++ { // round the advert FIFO
		m := zeroCopyMin + i*4096
		before := direct()
		xfer(src[:m], dst[:m], false, nil)
		if got := direct() - before; got != uint64(m) {
			t.Fatalf("message %d of %d bytes: %d direct", seq, m, got)
		}
	}
	before, adverts := direct(), b.aposted
	fold := func(d, s []byte) {
		for i := range d {
			d[i] += s[i]
		}
	}
	in := dst[:n]
	for i := range in {
		in[i] = 1
	}
	xfer(src, in, false, fold)                                   // a reduce: on the ring, no advert
	xfer(make([]byte, n), dst[:n], false, nil)                   // unregistered source: staged
	xfer(src, make([]byte, n), false, nil)                       // unregistered destination: no advert
	xfer(src[:zeroCopyMin-64], dst[:zeroCopyMin-64], false, nil) // small: staged
	if direct() != before || b.aposted != adverts+1 {
		t.Fatalf("direct bytes %d -> %d, adverts %d -> %d: want no direct bytes and 1 advert (the unregistered source's)", before, direct(), adverts, b.aposted)
	}

	// Deregistering while a receive is advertised fails; afterwards it works.
	h := transport.Header{Seq: seq + 1, Op: 3, Root: -1, Count: n, Bytes: n}
	recvd := make(chan error, 1)
	go func() { recvd <- b.Recv(ctx, &h, dst[:n], nil) }()
	waitFor(t, func() bool { return rreg.users.Load() > 0 })
	if err := rreg.Deregister(); !errors.Is(err, ErrInUse) {
		t.Fatalf("Deregister during an advertised receive: %v", err)
	}
	if err := a.Send(ctx, &h, src); err != nil {
		t.Fatal(err)
	}
	if err := <-recvd; err != nil {
		t.Fatal(err)
	}
	if err := rreg.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := sreg.Deregister(); err != nil {
		t.Fatal(err)
	}

	// An advertised receive that fails closes the link: the sender could
	// still write into the buffer afterwards.
	rreg, err = db.Register(dst)
	if err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 20*time.Millisecond)
	defer stop()
	h.Seq++
	if err := b.Recv(short, &h, dst[:n], nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("advertised receive past its deadline: %v", err)
	}
	if err := b.Recv(ctx, &h, make([]byte, 8), nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("receive after a failed advertised receive: %v, want the link closed", err)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
	}
}
