package goccl_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

func init() {
	extraWorkers["window"] = windowWorker
	extraWorkers["windowkill"] = windowKillWorker
}

// hostOf is rank r's host in GOCCL_TEST_HOSTS.
func hostOf(r int) string { return strings.Split(os.Getenv("GOCCL_TEST_HOSTS"), ",")[r] }

func windowWorker(ctx context.Context, c *goccl.Comm) int {
	err := windowRank(c, func(peer int) string {
		if hostOf(peer) == hostOf(c.Rank()) {
			return "shm"
		}
		return "roce"
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("rank %d: window checked\n", c.Rank())
	return 0
}

// windowKillWorker: the last rank kills itself (SIGKILL: no goodbye) 300
// ms after the window is made; the others wait on a signal nobody sends
// and report how long it took to fail, and why.
func windowKillWorker(ctx context.Context, c *goccl.Comm) int {
	w, err := goccl.NewWindow(ctx, c, 4096)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := c.Barrier(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if c.Rank() == c.Size()-1 {
		time.Sleep(300 * time.Millisecond)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	start := time.Now()
	_, err = w.WaitSignal(ctx, 0, goccl.CmpEQ, 1)
	fmt.Printf("rank %d: wait failed after %d ms: %v\n", c.Rank(), time.Since(start).Milliseconds(), err)
	time.Sleep(500 * time.Millisecond) // the other survivors see the victim gone, not this rank
	return 0
}

// TestWindow runs symmetric-memory windows at 3 ranks over each one-sided
// path (shared memory on one host; RoCE queue pairs): puts around the ring
// with a signal after them, puts larger than the RoCE staging ring, gets,
// SET and ADD signals from every rank at once, Quiet, and the misuse
// errors; then Free.
func TestWindow(t *testing.T) {
	for _, path := range []string{"shm", "roce"} {
		t.Run(path, func(t *testing.T) {
			if path == "roce" {
				t.Setenv("GOCCL_NET", "roce")
				t.Setenv("GOCCL_SHM_DISABLE", "1")
			}
			errs := goroutineRanks(t, 3, 60*time.Second, func(c *goccl.Comm) error {
				return windowRank(c, func(int) string { return path })
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// pattern is the bytes rank r puts in round k.
func pattern(r, k, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r*31 + k*7 + i*13 + i>>9)
	}
	return b
}

// windowRank exercises a window on c; pathTo is the path expected to each
// peer.
func windowRank(c *goccl.Comm, pathTo func(peer int) string) error {
	ctx := context.Background()
	n, me := c.Size(), c.Rank()
	next, prev := (me+1)%n, (me+n-1)%n
	const size = 3<<20 + 1000 // more than the RoCE staging ring (1 MiB), not a multiple of 64
	w, err := goccl.NewWindow(ctx, c, size, goccl.WindowSignals(4))
	if err != nil {
		return err
	}
	if w.Bytes() != size || len(w.Local()) != size || w.Signals() != 4 {
		return fmt.Errorf("window of %d bytes (local %d), %d signals", w.Bytes(), len(w.Local()), w.Signals())
	}
	for r := range n {
		if got, want := w.Path(r), pathTo(r); got != want && r != me {
			return fmt.Errorf("path to rank %d: %s, want %s", r, got, want)
		}
	}
	if got := w.Path(me); got != "self" {
		return fmt.Errorf("path to self: %s", got)
	}
	// Rounds of put-with-signal around the ring, small and large: the
	// consumer sees the bytes once it sees the signal.
	for k, m := range []int{1, 4096, 300001, size} {
		src := pattern(me, k, m)
		off := size - m
		if err := w.PutSignal(ctx, next, off, src, 0, goccl.SignalAdd, 1); err != nil {
			return err
		}
		clear(src) // Put returned: src is free
		if v, err := w.WaitSignal(ctx, 0, goccl.CmpGE, uint64(k+1)); err != nil || v != uint64(k+1) {
			return fmt.Errorf("round %d: signal %d, %v", k, v, err)
		}
		if !bytes.Equal(w.Local()[off:], pattern(prev, k, m)) {
			return fmt.Errorf("round %d (%d bytes): rank %d's put is not in the window", k, m, prev)
		}
		if err := c.Barrier(ctx); err != nil { // everyone checked before the next round overwrites
			return err
		}
	}
	// Get the previous rank's window (its last round's bytes: what it got
	// from the rank before it) at an odd offset, and from this rank itself.
	got := make([]byte, 2<<20+3)
	if err := w.Get(ctx, prev, 5, got); err != nil {
		return err
	}
	if want := pattern((prev+n-1)%n, 3, size)[5 : 5+len(got)]; !bytes.Equal(got, want) {
		return fmt.Errorf("Get from rank %d: wrong bytes", prev)
	}
	if err := w.Get(ctx, me, 0, got[:100]); err != nil || !bytes.Equal(got[:100], w.Local()[:100]) {
		return fmt.Errorf("Get from self: %v", err)
	}
	// Every rank adds to rank 0's signal 1, 100 times each, at once; rank
	// 0 also SETs everyone's signal 2.
	for i := 0; i < 100; i++ {
		if err := w.Signal(ctx, 0, 1, goccl.SignalAdd, 1); err != nil {
			return err
		}
	}
	if me == 0 {
		for r := 0; r < n; r++ {
			if err := w.Signal(ctx, r, 2, goccl.SignalSet, 0xfeedface00+uint64(r)); err != nil {
				return err
			}
		}
		if v, err := w.WaitSignal(ctx, 1, goccl.CmpEQ, uint64(100*n)); err != nil {
			return fmt.Errorf("ADD signals from every rank: %d, %v", v, err)
		}
	}
	if _, err := w.WaitSignal(ctx, 2, goccl.CmpEQ, 0xfeedface00+uint64(me)); err != nil {
		return fmt.Errorf("SET signal: %v", err)
	}
	if err := w.Quiet(ctx); err != nil {
		return err
	}
	if err := windowMisuse(c, w); err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if err := w.Free(ctx); err != nil {
		return err
	}
	if err := w.Put(ctx, next, 0, []byte{1}); !errors.Is(err, goccl.ErrInvalidArgument) || !strings.Contains(err.Error(), "freed") {
		return fmt.Errorf("Put after Free: %v", err)
	}
	if err := w.Free(ctx); !errors.Is(err, goccl.ErrInvalidArgument) {
		return fmt.Errorf("second Free: %v", err)
	}
	return nil
}

// windowMisuse checks that bad arguments fail at once with errors naming
// the rank, the operation and the value.
func windowMisuse(c *goccl.Comm, w *goccl.Window) error {
	ctx := context.Background()
	size := w.Bytes()
	bad := []struct {
		name string
		err  error
		want string
	}{
		{"peer out of range", w.Put(ctx, c.Size(), 0, []byte{1}), fmt.Sprintf("peer %d", c.Size())},
		{"negative peer", w.Get(ctx, -1, 0, []byte{1}), "peer -1"},
		{"span past the end", w.Put(ctx, 0, size-1, []byte{1, 2}), fmt.Sprintf("[%d, +2)", size-1)},
		{"negative offset", w.Get(ctx, 0, -8, []byte{1}), "[-8, +1)"},
		{"signal out of range", w.Signal(ctx, 0, 4, goccl.SignalAdd, 1), "signal 4"},
		{"bad signal op", w.Signal(ctx, 0, 0, goccl.SignalOp(9), 1), "signal op 9"},
	}
	_, err := w.WaitSignal(ctx, -1, goccl.CmpEQ, 0)
	bad = append(bad, struct {
		name string
		err  error
		want string
	}{"wait on a bad signal", err, "signal -1"})
	_, err = w.WaitSignal(ctx, 0, goccl.Cmp(7), 0)
	bad = append(bad, struct {
		name string
		err  error
		want string
	}{"bad comparison", err, "comparison 7"})
	for _, b := range bad {
		if !errors.Is(b.err, goccl.ErrInvalidArgument) || !strings.Contains(b.err.Error(), b.want) ||
			!strings.Contains(b.err.Error(), fmt.Sprintf("rank %d", c.Rank())) {
			return fmt.Errorf("%s: %v (want ErrInvalidArgument naming %q)", b.name, b.err, b.want)
		}
	}
	// A wait that is never satisfied ends with its context, naming the
	// signal and the word.
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = w.WaitSignal(tctx, 3, goccl.CmpEQ, 77)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "signal 3 (word 0, waiting for == 77)") {
		return fmt.Errorf("unsatisfied wait: %v", err)
	}
	return nil
}

// TestWindowNoPath: ranks joined by TCP links only have no one-sided
// path; NewWindow says so, naming the peer, on every rank. Bad sizes are
// refused too.
func TestWindowNoPath(t *testing.T) {
	t.Setenv("GOCCL_NET", "socket")
	t.Setenv("GOCCL_SHM_DISABLE", "1")
	errs := goroutineRanks(t, 2, 30*time.Second, func(c *goccl.Comm) error {
		ctx := context.Background()
		if _, err := goccl.NewWindow(ctx, c, 0); !errors.Is(err, goccl.ErrInvalidArgument) {
			return fmt.Errorf("0 bytes: %v", err)
		}
		if _, err := goccl.NewWindow(ctx, c, 64, goccl.WindowSignals(0)); !errors.Is(err, goccl.ErrInvalidArgument) {
			return fmt.Errorf("0 signals: %v", err)
		}
		_, err := goccl.NewWindow(ctx, c, 64)
		want := fmt.Sprintf("no one-sided path to peer %d: its link is tcp", 1-c.Rank())
		if !errors.Is(err, goccl.ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			return fmt.Errorf("over TCP: %v (want %q)", err, want)
		}
		// The communicator is still usable: nothing collective ran.
		return c.Barrier(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestWindowSingleRank: a window of one rank puts, gets and signals to
// itself.
func TestWindowSingleRank(t *testing.T) {
	errs := goroutineRanks(t, 1, 10*time.Second, func(c *goccl.Comm) error {
		ctx := context.Background()
		w, err := goccl.NewWindow(ctx, c, 100)
		if err != nil {
			return err
		}
		var wg sync.WaitGroup
		wg.Add(1)
		var waitErr error
		go func() {
			defer wg.Done()
			_, waitErr = w.WaitSignal(ctx, 0, goccl.CmpEQ, 5)
		}()
		if err := w.PutSignal(ctx, 0, 10, []byte("hello"), 0, goccl.SignalSet, 5); err != nil {
			return err
		}
		wg.Wait()
		if waitErr != nil || string(w.Local()[10:15]) != "hello" {
			return fmt.Errorf("wait %v, window %q", waitErr, w.Local()[10:15])
		}
		return w.Free(ctx)
	})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
}

// TestWindowMultiProcess runs windows in separate processes on 4 ranks
// that pretend to live on two hosts of two ranks (GOCCL_HOSTID) with
// GOCCL_NET=roce: each window mixes peers mapped through shared memory and
// peers reached over RoCE queue pairs, and a rank waits for signals from
// both kinds.
func TestWindowMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	outs := spawn(t, 4, "window", "GOCCL_TEST_HOSTS=a,a,b,b", "GOCCL_NET=roce")
	for r, out := range outs {
		if !strings.Contains(out, "window checked") {
			t.Errorf("rank %d:\n%s", r, out)
		}
	}
}

// TestWindowPeerKilled: a rank killed while the others wait on a window's
// signal fails their waits within 2 s, naming it — found through its exit
// (a peer on the same host) or through the communicator's lost-rank
// watch (a peer over RoCE).
func TestWindowPeerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	for _, tr := range []struct{ name, hosts, net string }{
		{"shm", "a,a,a", "GOCCL_NET=socket"}, {"roce", "a,b,c", "GOCCL_NET=roce"}} {
		t.Run(tr.name, func(t *testing.T) {
			const n = 3
			addr := freeAddr(t)
			outs := make([]bytes.Buffer, n)
			cmds := make([]*exec.Cmd, n)
			for r := range n {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), "GOCCL_TEST_WORKER=windowkill",
					"GOCCL_RANK="+strconv.Itoa(r), "GOCCL_WORLD_SIZE="+strconv.Itoa(n),
					"GOCCL_STORE_ADDR="+addr, "GOCCL_TIMEOUT=60s", "GOCCL_TEST_HOSTS="+tr.hosts, tr.net)
				cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[r] = cmd
			}
			for r, cmd := range cmds {
				err := cmd.Wait()
				if r == n-1 {
					var ee *exec.ExitError
					if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
						t.Errorf("rank %d (the victim): %v\n%s", r, err, outs[r].String())
					}
					continue
				}
				out := outs[r].String()
				var ms int
				var rest string
				i := strings.Index(out, "wait failed after ")
				if err != nil || i < 0 {
					t.Errorf("rank %d: %v\n%s", r, err, out)
					continue
				}
				fmt.Sscanf(out[i:], "wait failed after %d ms: %s", &ms, &rest)
				if ms > 300+2000 || !strings.Contains(out, strconv.Itoa(n-1)) || !strings.Contains(out, "WaitSignal") {
					t.Errorf("rank %d: want a WaitSignal failure naming rank %d within 2 s of its death:\n%s", r, n-1, out)
				}
				t.Logf("rank %d: %s", r, strings.TrimSpace(out[i:]))
			}
		})
	}
}
