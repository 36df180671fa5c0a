package gloo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
)

var loopback = net.IPv4(127, 0, 0, 1)

// joinAll joins n Go ranks over an in-memory store.
func joinAll(t *testing.T, n int) []*Group {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := rendezvous.NewMemStore()
	gs := make([]*Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			gs[r], errs[r] = Join(ctx, st, r, n, WithListenIP(loopback))
		}(r)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close()
		}
	})
	return gs
}

// onAll runs fn on every rank concurrently and returns the errors by rank.
func onAll(gs []*Group, fn func(g *Group) error) []error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Add(1)
		go func(r int, g *Group) {
			defer wg.Done()
			errs[r] = fn(g)
		}(r, g)
	}
	wg.Wait()
	return errs
}

func checkCollectives[T goccl.Element](t *testing.T, gs []*Group, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := len(gs)
	for _, count := range []int{0, 1, 2, 3, 7, 1000, 300007} {
		for _, op := range []goccl.RedOp{goccl.Sum, goccl.Prod, goccl.Min, goccl.Max} {
			if op == goccl.Prod && count > 1000 {
				continue
			}
			bufs := make([][]T, n)
			want := make([]T, count)
			for r := range bufs {
				bufs[r] = values[T](count, r, int(op))
				if op == goccl.Prod {
					for i := range bufs[r] {
						bufs[r][i] = T(i%3 + r%2) // small: no overflow
					}
				}
			}
			for i := range want {
				want[i] = bufs[0][i]
				for r := 1; r < n; r++ {
					v := bufs[r][i]
					switch op {
					case goccl.Sum:
						want[i] += v
					case goccl.Prod:
						want[i] *= v
					case goccl.Min:
						want[i] = min(want[i], v)
					case goccl.Max:
						want[i] = max(want[i], v)
					}
				}
			}
			errs := onAll(gs, func(g *Group) error { return AllReduce(ctx, g, bufs[g.Rank()], op) })
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("%s all_reduce %v count %d: %v", name, op, count, err)
			}
			for r := range bufs {
				for i := range want {
					if bufs[r][i] != want[i] {
						t.Fatalf("%s all_reduce %v count %d world %d: rank %d element %d = %v, want %v", name, op, count, n, r, i, bufs[r][i], want[i])
					}
				}
			}
		}
		for root := 0; root < n; root++ {
			bufs := make([][]T, n)
			for r := range bufs {
				bufs[r] = make([]T, count)
			}
			bufs[root] = values[T](count, root, 5)
			errs := onAll(gs, func(g *Group) error { return Broadcast(ctx, g, bufs[g.Rank()], root) })
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("%s broadcast root %d count %d: %v", name, root, count, err)
			}
			want := values[T](count, root, 5)
			for r := range bufs {
				for i := range want {
					if bufs[r][i] != want[i] {
						t.Fatalf("%s broadcast root %d count %d world %d: rank %d element %d = %v, want %v", name, root, count, n, r, i, bufs[r][i], want[i])
					}
				}
			}
		}
		outs := make([][]T, n)
		errs := onAll(gs, func(g *Group) error {
			outs[g.Rank()] = make([]T, n*count)
			return AllGather(ctx, g, outs[g.Rank()], values[T](count, g.Rank(), 9))
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s all_gather count %d: %v", name, count, err)
		}
		for r := range outs {
			for q := 0; q < n; q++ {
				want := values[T](count, q, 9)
				for i := range want {
					if outs[r][q*count+i] != want[i] {
						t.Fatalf("%s all_gather count %d world %d: rank %d block %d element %d = %v, want %v", name, count, n, r, q, i, outs[r][q*count+i], want[i])
					}
				}
			}
		}
	}
}

// TestGoRanks: every operation among Go ranks only, world sizes 1 to 5
// (powers of two and not), counts from 0 to several segments per rank.
func TestGoRanks(t *testing.T) {
	sizes := []int{1, 2, 3, 4, 5}
	if testing.Short() {
		sizes = []int{1, 3, 4}
	}
	for _, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			gs := joinAll(t, n)
			checkCollectives[float32](t, gs, "float32")
			checkCollectives[int64](t, gs, "int64")
			checkCollectives[uint8](t, gs, "uint8")
			checkCollectives[float64](t, gs, "float64")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := errors.Join(onAll(gs, func(g *Group) error { return Barrier(ctx, g) })...); err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				return
			}
			// Send/recv around the ring, two tags interleaved.
			errs := onAll(gs, func(g *Group) error {
				next, prev := (g.Rank()+1)%n, (g.Rank()+n-1)%n
				var a, b [3]int32
				sent := make(chan error, 2)
				go func() { sent <- Send(ctx, g, []int32{int32(g.Rank()), 1, 2}, next, 1) }()
				go func() { sent <- Send(ctx, g, []int32{int32(g.Rank()), 3, 4}, next, 2) }()
				if err := Recv(ctx, g, b[:], prev, 2); err != nil {
					return err
				}
				if err := Recv(ctx, g, a[:], prev, 1); err != nil {
					return err
				}
				if err := errors.Join(<-sent, <-sent); err != nil {
					return err
				}
				if a != [3]int32{int32(prev), 1, 2} || b != [3]int32{int32(prev), 3, 4} {
					return fmt.Errorf("rank %d received %v and %v", g.Rank(), a, b)
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPeerLost: a rank that leaves during an all_reduce fails the others
// with an error naming it, not a hang; the group then refuses more work.
func TestPeerLost(t *testing.T) {
	gs := joinAll(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = AllReduce(ctx, gs[r], make([]float32, 1<<20), goccl.Sum)
		}(r)
	}
	time.Sleep(50 * time.Millisecond)
	gs[2].Close()
	wg.Wait()
	// Gloo relays no cause: a rank that fails closes its connections, so
	// a survivor may see the other survivor's close first. The cascade
	// starts at rank 2, so at least one survivor names it.
	named2 := false
	for r, err := range errs {
		var oe *OpError
		if !errors.Is(err, ErrPeerLost) || !errors.As(err, &oe) || oe.Peer == r || oe.Peer < 0 || oe.Op != "all_reduce" {
			t.Errorf("rank %d: %v, want a lost peer in all_reduce", r, err)
		} else if !strings.Contains(err.Error(), fmt.Sprintf("peer rank %d", oe.Peer)) {
			t.Errorf("rank %d: %q does not name the peer", r, err)
		}
		if oe != nil && oe.Peer == 2 {
			named2 = true
		}
		if ctx.Err() != nil {
			t.Fatalf("rank %d waited for the deadline", r)
		}
		if err := Barrier(ctx, gs[r]); !errors.Is(err, ErrClosed) {
			t.Errorf("rank %d: barrier after the loss: %v, want ErrClosed", r, err)
		}
	}
	if !named2 {
		t.Errorf("no survivor names rank 2: %v", errs)
	}
}

// TestSizeMismatch: ranks that disagree on the size fail with an error
// naming both sizes instead of hanging or reading past a buffer.
func TestSizeMismatch(t *testing.T) {
	gs := joinAll(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := onAll(gs, func(g *Group) error { return Broadcast(ctx, g, make([]int64, 10+g.Rank()), 0) })
	// The root's send may complete before rank 1 reads the size; rank 1
	// must refuse the message.
	var pe *ProtocolError
	if err := errs[1]; !errors.As(err, &pe) || pe.Peer != 0 {
		t.Errorf("rank 1: %v, want a ProtocolError from peer rank 0", err)
	} else if !strings.Contains(err.Error(), "80") || !strings.Contains(err.Error(), "88") {
		t.Errorf("rank 1: %q does not name both sizes (80 and 88 bytes)", err)
	}
	if ctx.Err() != nil {
		t.Error("the ranks waited for the deadline")
	}
}

// TestTimeout: a rank alone in a collective gives up at its context's end,
// naming the peer it waited for; the group is closed after.
func TestTimeout(t *testing.T) {
	gs := joinAll(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := AllReduce(ctx, gs[1], make([]float32, 100), goccl.Sum)
	var oe *OpError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &oe) || oe.Peer != 0 {
		t.Fatalf("got %v, want a deadline naming peer rank 0", err)
	}
	if err := Barrier(context.Background(), gs[1]); !errors.Is(err, ErrClosed) {
		t.Errorf("after the timeout: %v, want ErrClosed", err)
	}
}

func TestInvalidArguments(t *testing.T) {
	gs := joinAll(t, 2)
	g := gs[0]
	ctx := context.Background()
	for name, err := range map[string]error{
		"avg":            AllReduce(ctx, g, []float32{1}, goccl.Avg),
		"avg int":        AllReduce(ctx, g, []int64{1}, goccl.Avg),
		"root":           Broadcast(ctx, g, []float32{1}, 2),
		"negative root":  Broadcast(ctx, g, []float32{1}, -1),
		"gather length":  AllGather(ctx, g, make([]float32, 3), make([]float32, 2)),
		"send self":      Send(ctx, g, []float32{1}, 0, 0),
		"recv bad peer":  Recv(ctx, g, []float32{1}, 5, 0),
		"negative tag":   Send(ctx, g, []float32{1}, 1, -1),
		"bad rank":       func() error { _, err := Join(ctx, rendezvous.NewMemStore(), 2, 2); return err }(),
		"bad world size": func() error { _, err := Join(ctx, rendezvous.NewMemStore(), 0, 0); return err }(),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		} else if !strings.Contains(err.Error(), "rank") {
			t.Errorf("%s: %q does not name the rank", name, err)
		}
	}
	// Still usable: the bad calls did not touch the wire.
	errs := onAll(gs, func(g *Group) error { return AllReduce(ctx, g, []float32{1}, goccl.Sum) })
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
