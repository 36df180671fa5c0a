package rails_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/linktest"
	"github.com/goccl/goccl/transport/rails"
	"github.com/goccl/goccl/transport/tcp"
)

// dialPair is a TCP link between ranks 0 and 1 over loopback.
func dialPair(nsocks int) (a, b transport.Link, err error) {
	var eps [2]*tcp.Endpoint
	for r := range eps {
		if eps[r], err = tcp.Listen(r, net.IPv4(127, 0, 0, 1), "rails-test"); err != nil {
			return nil, nil, err
		}
		defer eps[r].Close() // the links outlive their endpoints
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		var err error
		b, err = eps[1].Connect(ctx, 0, eps[0].Addr(), nsocks)
		errc <- err
	}()
	a, err = eps[0].Connect(ctx, 1, eps[1].Addr(), nsocks)
	return a, b, errors.Join(err, <-errc)
}

// cuttable is a link that a test can cut as a path is cut: while cut,
// what it sends is lost (Send returns as a socket's buffer takes it) and
// PathStall grows from the cut on.
type cuttable struct {
	transport.Link
	cut *atomic.Int64 // when the path was cut (Unix ns), 0 if it is not
}

func (c *cuttable) Send(ctx context.Context, h *transport.Header, buf []byte) error {
	if c.cut.Load() != 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		return nil
	}
	return c.Link.Send(ctx, h, buf)
}

func (c *cuttable) TrySend(h *transport.Header, buf []byte) (bool, error) {
	if c.cut.Load() != 0 {
		return true, nil
	}
	return c.Link.TrySend(h, buf)
}

func (c *cuttable) PathStall() time.Duration {
	if t := c.cut.Load(); t != 0 {
		return time.Since(time.Unix(0, t))
	}
	return 0
}

// foPair is a pair of rails links with failover over n rails of TCP
// links; rail i's data and control links can be cut through cuts[i].
type foPair struct {
	a, b *rails.Link
	cuts []*atomic.Int64
	logs [2]*logged
}

// logged collects a side's log lines.
type logged struct {
	mu    sync.Mutex
	lines []string
}

func (g *logged) log(level slog.Level, msg string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lines = append(g.lines, level.String()+" "+msg)
}

func (g *logged) has(s string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, l := range g.lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func (g *logged) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(g.lines, "\n")
}

func newFOPair(t *testing.T, n int, stallAfter time.Duration) *foPair {
	t.Helper()
	p := &foPair{logs: [2]*logged{{}, {}}}
	var ra, rb []rails.Rail
	var ca, cb []transport.Link
	for i := range n {
		cut := &atomic.Int64{}
		p.cuts = append(p.cuts, cut)
		x, y, err := dialPair(1)
		if err != nil {
			t.Fatal(err)
		}
		cx, cy, err := dialPair(1)
		if err != nil {
			t.Fatal(err)
		}
		name := "lo" + string(rune('0'+i))
		ra = append(ra, rails.Rail{Link: &cuttable{Link: x, cut: cut}, Iface: name})
		rb = append(rb, rails.Rail{Link: &cuttable{Link: y, cut: cut}, Iface: name})
		ca, cb = append(ca, &cuttable{Link: cx, cut: cut}), append(cb, &cuttable{Link: cy, cut: cut})
	}
	var mu sync.Mutex
	moved := map[[3]int][2]transport.Link{}
	dial := func(self int) func(ctx context.Context, lane, rail, gen int) (transport.Link, error) {
		return func(ctx context.Context, lane, rail, gen int) (transport.Link, error) {
			mu.Lock()
			defer mu.Unlock()
			k := [3]int{lane, rail, gen}
			pr, ok := moved[k]
			if !ok {
				x, y, err := dialPair(1)
				if err != nil {
					return nil, err
				}
				pr = [2]transport.Link{x, y}
				moved[k] = pr
			}
			return pr[self], nil
		}
	}
	var err error
	p.a, err = rails.New(ra, rails.Options{Self: 0, Control: ca, Dial: dial(0), StallAfter: stallAfter, Log: p.logs[0].log})
	if err != nil {
		t.Fatal(err)
	}
	if p.b, err = rails.New(rb, rails.Options{Self: 1, Control: cb, Dial: dial(1), StallAfter: stallAfter, Log: p.logs[1].log}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.a.Close()
		p.b.Close()
	})
	return p
}

// TestFailoverConformance runs the transport.Link suite over rails links
// with failover on (2 and 3 rails): acknowledgements, copies kept for a
// resend and segments must not change what a link does.
func TestFailoverConformance(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%drails", n), func(t *testing.T) {
			linktest.RunConfig(t, linktest.Config{
				NewPair: func(t *testing.T) (transport.Link, transport.Link) {
					p := newFOPair(t, n, 0)
					return p.a, p.b
				},
				Sizes: append(railSizes, 3*rails.SegMax+rails.SegMax/2+128),
			})
		})
	}
}

// exchangeSum sends a striped message (n bytes of uint32) each way and
// folds it into the receiver's buffer, then checks the sums; small is an
// unstriped message sent after it each way.
func exchangeSum(ctx context.Context, p *foPair, seq uint64, n int) error {
	links := [2]*rails.Link{p.a, p.b}
	src, dst, want := [2][]byte{}, [2][]byte{}, [2][]byte{}
	for i := range 2 {
		src[i], dst[i] = make([]byte, n), make([]byte, n)
		for k := 0; k < n; k += 4 {
			src[i][k], dst[i][k] = byte(seq+uint64(i)+uint64(k)), byte(k>>2)
		}
	}
	for i := range 2 {
		want[i] = bytes.Clone(dst[i])
		for k := 0; k < n; k += 4 {
			want[i][k] += src[1-i][k]
		}
	}
	add := func(d, s []byte) {
		for k := range d {
			d[k] += s[k]
		}
	}
	errs := make(chan error, 8)
	for i := range 2 {
		go func() {
			h := transport.Header{Seq: seq, Bytes: uint64(n), Root: -1}
			err := links[i].Send(ctx, &h, src[i])
			if err == nil {
				small := []byte(fmt.Sprintf("after %d from %d", seq, i))
				h = transport.Header{Seq: seq, Op: 1, Bytes: uint64(len(small)), Root: -1}
				err = links[i].Send(ctx, &h, small)
			}
			errs <- err
		}()
		go func() {
			h := transport.Header{Seq: seq, Bytes: uint64(n), Root: -1}
			err := links[i].Recv(ctx, &h, dst[i], add)
			if err == nil && !bytes.Equal(dst[i], want[i]) {
				err = fmt.Errorf("message %d to side %d: sums differ", seq, i)
			}
			if err == nil {
				small := []byte(fmt.Sprintf("after %d from %d", seq, 1-i))
				got := make([]byte, len(small))
				h = transport.Header{Seq: seq, Op: 1, Bytes: uint64(len(small)), Root: -1}
				if err = links[i].Recv(ctx, &h, got, nil); err == nil && !bytes.Equal(got, small) {
					err = fmt.Errorf("small message after %d to side %d: %q, want %q", seq, i, got, small)
				}
			}
			errs <- err
		}()
	}
	var err error
	for range 4 {
		err = errors.Join(err, <-errs)
	}
	return err
}

// TestFailoverMovesLane: rail 1's path is cut while striped messages
// (folded into the receiver's buffer) and small ones flow both ways. The
// transfers go on over rail 0 with every sum right, both sides warn naming
// the rail and the peer, rail 1's traffic runs over rail 0 while the cut
// lasts, and once the path is back it returns to rail 1 and carries data.
func TestFailoverMovesLane(t *testing.T) {
	p := newFOPair(t, 2, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 6 << 20
	seq := uint64(0)
	run := func(k int) {
		t.Helper()
		for range k {
			seq++
			if err := exchangeSum(ctx, p, seq, n); err != nil {
				t.Fatalf("%v\nside 0:\n%v\nside 1:\n%v", err, p.logs[0], p.logs[1])
			}
		}
	}
	run(2)
	p.cuts[1].Store(time.Now().UnixNano())
	cut := time.Now()
	run(2) // the first may be cut in the middle; the second runs on rail 0
	if d := time.Since(cut); d > 10*time.Second {
		t.Errorf("2 exchanges took %v after the cut", d)
	}
	for i, l := range []*rails.Link{p.a, p.b} {
		if h := l.Home(1); h != 0 {
			t.Errorf("side %d: rail 1's traffic runs over rail %d during the cut, want 0", i, h)
		}
		if !p.logs[i].has("WARN rail lo1 to peer " + fmt.Sprint(1-i) + ": nothing acknowledged") {
			t.Errorf("side %d did not warn about rail lo1:\n%v", i, p.logs[i])
		}
	}
	if !p.logs[0].has("rail lo1's traffic to peer 1 is now over rail lo0") {
		t.Errorf("side 0 did not log the move:\n%v", p.logs[0])
	}
	p.cuts[1].Store(0)
	deadline := time.Now().Add(20 * time.Second)
	for p.a.Home(1) != 1 || p.b.Home(1) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("rail 1's traffic not back on rail 1 20 s after the restore:\nside 0:\n%v\nside 1:\n%v", p.logs[0], p.logs[1])
		}
		run(1)
	}
	run(2)
	if !p.logs[1].has("rail lo1's traffic to peer 0 is back on its own rail") {
		t.Errorf("side 1 did not log the move back:\n%v", p.logs[1])
	}
	t.Logf("side 0:\n%v\nside 1:\n%v", p.logs[0], p.logs[1])
	if p.a.Moves() < 2 || p.b.Moves() < 2 {
		t.Errorf("moves: %d and %d, want at least 2 each", p.a.Moves(), p.b.Moves())
	}
}
