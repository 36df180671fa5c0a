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
	"testing"
	"time"

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

// dialPair makes the two ends' links at once, over devices da and db (nil:
// that side has none).
func dialPair(t testing.TB, da, db *rdma.Device, o Options) (a, b transport.Link, fallback [2]bool) {
	t.Helper()
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
	a, fb, err := Dial(ctx, ctrl, device(t), Options{})
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
	l, _, err := Dial(ctx, ctrl, d, Options{})
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

// BenchmarkStream sends b.N messages of 4 MiB from a to b (one direction)
// and, with both, from b to a at the same time: the link's cost over the
// device's (compare `goccl roce write-bw -s 4M`).
func BenchmarkStream(b *testing.B) {
	for _, both := range []bool{false, true} {
		name := "oneway"
		if both {
			name = "bidir"
		}
		b.Run(name, func(b *testing.B) {
			x, y, _ := dialPair(b, device(b), device(b), benchOpts)
			const n = 4 << 20
			buf := [2][]byte{make([]byte, n), make([]byte, n)}
			in := [2][]byte{make([]byte, n), make([]byte, n)}
			h := transport.Header{Seq: 1, Op: 3, Root: -1, Count: n, Bytes: n}
			ctx := context.Background()
			b.SetBytes(n)
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
			if both {
				go repeat(func() error { return y.Send(ctx, &h, buf[1]) })
				go repeat(func() error { return x.Recv(ctx, &h, in[1], nil) })
			}
			for i := 0; i < b.N; i++ {
				if err := y.Recv(ctx, &h, in[0], nil); err != nil {
					b.Fatal(err)
				}
			}
			for range map[bool]int{false: 1, true: 3}[both] {
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var benchOpts = Options{} // the ring BenchmarkStream uses
