package rails_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/linktest"
	"github.com/goccl/goccl/transport/rails"
)

// tcpPair is a TCP link between ranks 0 and 1 over loopback, nsocks
// sockets each way.
func tcpPair(t *testing.T, nsocks int) (a, b transport.Link) {
	t.Helper()
	a, b, err := dialPair(nsocks)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// railPair is a rails.Link pair over n TCP links.
func railPair(t *testing.T, n, nsocks int) (a, b *rails.Link) {
	t.Helper()
	var ra, rb []rails.Rail
	for i := range n {
		x, y := tcpPair(t, nsocks)
		name := "lo" + string(rune('0'+i))
		ra, rb = append(ra, rails.Rail{Link: x, Iface: name}), append(rb, rails.Rail{Link: y, Iface: name})
	}
	a, err := rails.New(ra, rails.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b, err = rails.New(rb, rails.Options{}); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// railSizes are where the rail link changes how it moves a message: the
// striping threshold, and parts that are not whole multiples of 64 bytes.
var railSizes = []int{rails.StripeMin - 1, rails.StripeMin, rails.StripeMin + 64, 3<<20 + 64, 5<<20 + 192}

// TestLinkConformance runs the transport.Link suite over 2 and 3 rails of
// TCP links (1 socket each way on each rail), and over 1 rail.
func TestLinkConformance(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		t.Run(string(rune('0'+n))+"rails", func(t *testing.T) {
			linktest.RunConfig(t, linktest.Config{
				NewPair: func(t *testing.T) (transport.Link, transport.Link) {
					a, b := railPair(t, n, 1)
					return a, b
				},
				Sizes: railSizes,
			})
		})
	}
}

// TestStripesOverEveryRail: a striped message moves an equal share over
// each rail, and unstriped messages take the rails in turn.
func TestStripesOverEveryRail(t *testing.T) {
	a, b := railPair(t, 3, 1)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	send := func(seq uint64, n int) {
		t.Helper()
		h := transport.Header{Seq: seq, Bytes: uint64(n), Root: -1}
		errc := make(chan error, 1)
		go func() { errc <- a.Send(ctx, &h, make([]byte, n)) }()
		want := h
		if err := b.Recv(ctx, &want, make([]byte, n), nil); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	sent := func() (s [3]uint64) {
		for i, r := range a.Rails() {
			s[i] = r.Link.Counters().Sent()
		}
		return s
	}
	const n = 6 << 20
	send(1, n)
	if got := sent(); got != [3]uint64{n / 3, n / 3, n / 3} {
		t.Errorf("a %d-byte message moved %v bytes over the 3 rails, want %d each", n, got, n/3)
	}
	for i := range 3 {
		send(uint64(2+i), 1000)
	}
	if got := sent(); got != [3]uint64{n/3 + 1000, n/3 + 1000, n/3 + 1000} {
		t.Errorf("after 3 messages of 1000 bytes the rails sent %v bytes, want %d each", got, n/3+1000)
	}
	if got := a.Counters().Sent(); got != n+3000 {
		t.Errorf("the link counted %d bytes sent, want %d", got, n+3000)
	}
}

// TestRailFailureFailsLink: closing one rail's link under a striped
// transfer fails both sides' calls (no part waits for ever) and names the
// rail.
func TestRailFailureFailsLink(t *testing.T) {
	a, b := railPair(t, 2, 1)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 64 << 20
	h := transport.Header{Seq: 1, Bytes: n, Root: -1}
	errc := make(chan error, 1)
	go func() { errc <- a.Send(ctx, &h, make([]byte, n)) }()
	time.Sleep(20 * time.Millisecond)
	b.Rails()[1].Link.Close()
	want := h
	err := b.Recv(ctx, &want, make([]byte, n), nil)
	if err == nil {
		t.Fatal("Recv succeeded with a rail closed")
	}
	if !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Recv: %v, want a closed link", err)
	}
	if err := <-errc; err == nil {
		t.Error("Send succeeded with the peer's rail closed")
	}
	if got := b.FailedRail(); got != 1 {
		t.Errorf("FailedRail = %d, want 1", got)
	}
}

// stalling is a rail's link whose PathStall the test sets.
type stalling struct {
	transport.Link
	stall atomic.Int64
}

func (s *stalling) PathStall() time.Duration { return time.Duration(s.stall.Load()) }

// TestStallWarnings: a rail stalled for StallAfter is reported once, with
// its interface and the peer, and again once it is acknowledged again.
func TestStallWarnings(t *testing.T) {
	var ra []rails.Rail
	var st []*stalling
	for i := range 2 {
		x, _ := tcpPair(t, 1)
		s := &stalling{Link: x}
		st = append(st, s)
		ra = append(ra, rails.Rail{Link: s, Iface: "eth" + string(rune('0'+i))})
	}
	msgs := make(chan string, 10)
	l, err := rails.New(ra, rails.Options{StallAfter: 300 * time.Millisecond, Log: func(level slog.Level, msg string) {
		if level != slog.LevelWarn {
			t.Errorf("level %v for %q", level, msg)
		}
		msgs <- msg
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	next := func(what string) string {
		t.Helper()
		select {
		case m := <-msgs:
			return m
		case <-time.After(5 * time.Second):
			t.Fatalf("no warning %s", what)
			return ""
		}
	}
	st[1].stall.Store(int64(200 * time.Millisecond)) // below StallAfter: nothing
	time.Sleep(300 * time.Millisecond)
	st[1].stall.Store(int64(time.Second))
	if m := next("for a stalled rail"); !strings.Contains(m, "rail eth1 to peer 1: nothing acknowledged for 1s") || !strings.Contains(m, "(eth0)") {
		t.Errorf("stall warning %q", m)
	}
	st[1].stall.Store(0)
	if m := next("for the rail back"); !strings.Contains(m, "rail eth1 to peer 1: acknowledging again") {
		t.Errorf("recovery warning %q", m)
	}
	select {
	case m := <-msgs:
		t.Errorf("unexpected warning %q", m)
	case <-time.After(300 * time.Millisecond):
	}
	if l.Stalls() != 1 {
		t.Errorf("Stalls = %d, want 1", l.Stalls())
	}
}
