package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

// extraWorkers are worker modes of the multi-process tests defined beside
// their tests (worker in comm_test.go consults it).
var extraWorkers = map[string]func(context.Context, *goccl.Comm) int{
	"iloop": iloopWorker,
}

// TestNonBlockingInterleaved: on 2 to 4 ranks, non-blocking collectives and
// point-to-point operations, several outstanding at once, interleaved with
// blocking ones, all give the right results.
func TestNonBlockingInterleaved(t *testing.T) {
	for _, shmOff := range []string{"0", "1"} {
		for _, n := range []int{2, 3, 4} {
			t.Run(fmt.Sprintf("shm_disable=%s/np%d", shmOff, n), func(t *testing.T) {
				t.Setenv("GOCCL_SHM_DISABLE", shmOff)
				errs := goroutineRanks(t, n, time.Minute, func(c *goccl.Comm) error {
					return interleaved(c, 3)
				})
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
			})
		}
	}
}

// interleaved runs rounds of mixed non-blocking and blocking operations and
// checks every result.
func interleaved(c *goccl.Comm, rounds int) error {
	ctx := context.Background()
	r, n := c.Rank(), c.Size()
	const k, count = 8, 1000
	tri := int64(n * (n - 1) / 2)
	for round := 0; round < rounds; round++ {
		bufs := make([][]int64, k)
		reqs := make([]goccl.Request, 0, 16)
		for i := range bufs {
			bufs[i] = make([]int64, count)
			for j := range bufs[i] {
				bufs[i][j] = int64(r + i + j)
			}
			req, err := goccl.IAllReduce(ctx, c, bufs[i], bufs[i], count, goccl.Sum)
			if err != nil {
				return err
			}
			reqs = append(reqs, req)
		}
		bc := make([]float64, count)
		if r == round%n {
			for j := range bc {
				bc[j] = float64(j + round)
			}
		}
		req, err := goccl.IBroadcast(ctx, c, bc, bc, count, round%n)
		if err != nil {
			return err
		}
		reqs = append(reqs, req)
		ring := []int32{int32(r)}
		got := []int32{-1}
		req, err = goccl.ISendRecv(ctx, c, ring, (r+1)%n, got, (r+n-1)%n, 1)
		if err != nil {
			return err
		}
		reqs = append(reqs, req)
		// A blocking call behind the outstanding ones.
		blk := []int64{int64(r)}
		if err := goccl.AllReduce(ctx, c, blk, blk, 1, goccl.Sum); err != nil {
			return fmt.Errorf("blocking AllReduce behind %d outstanding: %w", len(reqs), err)
		}
		if blk[0] != tri {
			return fmt.Errorf("blocking AllReduce = %d, want %d", blk[0], tri)
		}
		// The blocking call ran after them all: they are done.
		for i, q := range reqs {
			if done, err := q.Test(); !done || err != nil {
				return fmt.Errorf("request %d after a later blocking call: done %v, %v", i, done, err)
			}
		}
		gathered := make([]int32, n)
		agr, err := goccl.IAllGather(ctx, c, []int32{int32(r * 10)}, gathered, 1)
		if err != nil {
			return err
		}
		var sendReq, recvReq goccl.Request
		if r == 0 {
			sendReq, err = goccl.ISend(ctx, c, []int64{int64(round)}, 1, n-1)
		} else if r == n-1 {
			recvReq, err = goccl.IRecv(ctx, c, blk, 1, 0)
		}
		if err != nil {
			return err
		}
		bar, err := c.IBarrier(ctx)
		if err != nil {
			return err
		}
		for _, q := range []goccl.Request{bar, agr} { // out of order
			if err := q.Wait(ctx); err != nil {
				return err
			}
		}
		if r == 0 {
			if err := sendReq.Wait(ctx); err != nil {
				return err
			}
		}
		if r == n-1 {
			if err := recvReq.Wait(ctx); err != nil {
				return err
			}
			if blk[0] != int64(round) {
				return fmt.Errorf("IRecv got %d, want %d", blk[0], round)
			}
		}
		for i, b := range bufs {
			for j, v := range b {
				if want := tri + int64(n*(i+j)); v != want {
					return fmt.Errorf("round %d: IAllReduce %d [%d] = %d, want %d", round, i, j, v, want)
				}
			}
		}
		for j, v := range bc {
			if v != float64(j+round) {
				return fmt.Errorf("IBroadcast [%d] = %v, want %v", j, v, float64(j+round))
			}
		}
		if got[0] != int32((r+n-1)%n) {
			return fmt.Errorf("ISendRecv got %d, want %d", got[0], (r+n-1)%n)
		}
		for p, v := range gathered {
			if v != int32(p*10) {
				return fmt.Errorf("IAllGather [%d] = %d, want %d", p, v, p*10)
			}
		}
	}
	return nil
}

// TestNonBlockingTestPolling: Test reports not done while a peer has not
// joined, then done with the right result once it has; a Wait whose ctx ends
// first returns ctx's error and does not cancel the operation.
func TestNonBlockingTestPolling(t *testing.T) {
	joined := make(chan struct{})
	var joinedAt time.Time // rank 0's, set before joined closes
	errs := goroutineRanks(t, 2, time.Minute, func(c *goccl.Comm) error {
		ctx := context.Background()
		buf := []float32{float32(c.Rank() + 1), 2}
		if c.Rank() == 1 {
			<-joined
		}
		req, err := goccl.IAllReduce(ctx, c, buf, buf, 2, goccl.Prod)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			if done, err := req.Test(); done || err != nil {
				return fmt.Errorf("Test before the peer joined: done %v, %v", done, err)
			}
			if _, _, ok := req.Span(); ok {
				return errors.New("Span ok before the peer joined")
			}
			wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			err := req.Wait(wctx)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("Wait with an expired ctx: %v, want DeadlineExceeded", err)
			}
			joinedAt = time.Now()
			close(joined)
		}
		polls := 0
		for deadline := time.Now().Add(10 * time.Second); ; polls++ {
			done, err := req.Test()
			if err != nil {
				return err
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				return errors.New("Test still not done after 10 s")
			}
			runtime.Gosched()
		}
		if buf[0] != 2 || buf[1] != 4 {
			return fmt.Errorf("result %v after %d polls, want [2 4]", buf, polls)
		}
		start, end, ok := req.Span()
		if c.Rank() == 0 && (!ok || end.Before(start) || end.Before(joinedAt) || end.After(time.Now())) {
			// It could not end before the peer joined.
			return fmt.Errorf("Span %v to %v (ok %v); the peer joined at %v", start, end, ok, joinedAt)
		}
		// A second operation starts after the first ends: they run in order.
		reqs := make([]goccl.Request, 2)
		for i := range reqs {
			if reqs[i], err = goccl.IAllReduce(ctx, c, buf, buf, 2, goccl.Sum); err != nil {
				return err
			}
		}
		if err := reqs[1].Wait(ctx); err != nil {
			return err
		}
		_, end0, ok0 := reqs[0].Span()
		start1, end1, ok1 := reqs[1].Span()
		if !ok0 || !ok1 || start1.Before(end0) || end1.Before(start1) {
			return fmt.Errorf("two operations in a row: spans end %v (ok %v), then %v to %v (ok %v)", end0, ok0, start1, end1, ok1)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestNonBlockingTwoComms: operations outstanding on a communicator and on
// one Split from it at the same time; each runs in its own order.
func TestNonBlockingTwoComms(t *testing.T) {
	const n = 4
	errs := goroutineRanks(t, n, time.Minute, func(c *goccl.Comm) error {
		ctx := context.Background()
		r := c.Rank()
		sub, err := c.Split(ctx, r%2, r)
		if err != nil {
			return err
		}
		defer sub.Close()
		a := make([][]int64, 6)
		b := make([][]int64, 6)
		var reqs []goccl.Request
		for i := range a {
			a[i] = []int64{int64(r * i)}
			b[i] = []int64{int64(r + i)}
			qa, err := goccl.IAllReduce(ctx, c, a[i], a[i], 1, goccl.Sum)
			if err != nil {
				return err
			}
			qb, err := goccl.IAllReduce(ctx, sub, b[i], b[i], 1, goccl.Max)
			if err != nil {
				return err
			}
			reqs = append(reqs, qb, qa)
		}
		for i, q := range reqs {
			if err := q.Wait(ctx); err != nil {
				return fmt.Errorf("request %d: %w", i, err)
			}
		}
		for i := range a {
			if want := int64(6 * i); a[i][0] != want {
				return fmt.Errorf("parent op %d = %d, want %d", i, a[i][0], want)
			}
			if want := int64(r%2 + 2 + i); b[i][0] != want {
				return fmt.Errorf("split op %d = %d, want %d", i, b[i][0], want)
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestNonBlockingArgumentErrors: bad arguments are reported by the I form at
// once, and nothing is issued (the next operations still match).
func TestNonBlockingArgumentErrors(t *testing.T) {
	errs := goroutineRanks(t, 2, time.Minute, func(c *goccl.Comm) error {
		ctx := context.Background()
		buf := make([]float32, 4)
		if _, err := goccl.IAllReduce(ctx, c, buf, buf, 5, goccl.Sum); !errors.Is(err, goccl.ErrInvalidArgument) {
			return fmt.Errorf("short buffer: %v", err)
		}
		if _, err := goccl.IBroadcast(ctx, c, buf, buf, 4, 7); !errors.Is(err, goccl.ErrInvalidArgument) {
			return fmt.Errorf("bad root: %v", err)
		}
		if _, err := goccl.ISend(ctx, c, buf, 4, c.Rank()); !errors.Is(err, goccl.ErrInvalidArgument) {
			return fmt.Errorf("send to self: %v", err)
		}
		if _, err := goccl.ISendRecv(ctx, c, buf, 5, buf, 0, 4); !errors.Is(err, goccl.ErrInvalidArgument) {
			return fmt.Errorf("bad peer: %v", err)
		}
		req, err := goccl.IAllReduce(ctx, c, buf, buf, 4, goccl.Sum)
		if err != nil {
			return err
		}
		return req.Wait(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// waitAll waits for every request (bounded by d in all) and returns their
// errors, or an error if one is still pending at the end.
func waitAll(reqs []goccl.Request, d time.Duration) ([]error, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	errs := make([]error, len(reqs))
	for i, q := range reqs {
		errs[i] = q.Wait(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("request %d of %d still pending after %v", i, len(reqs), d)
		}
	}
	return errs, nil
}

// TestNonBlockingMismatch: ranks that issue different sequences get
// ErrMismatch on the operation that disagrees and on every one issued
// after it, on every rank; operations before it succeed, also when their
// slot has since been reused (their Request keeps its result).
func TestNonBlockingMismatch(t *testing.T) {
	const before, after = goccl.QueueDepth + 36, 20 // before > QueueDepth: early slots are reused
	errs := goroutineRanks(t, 2, 30*time.Second, func(c *goccl.Comm) error {
		ctx := context.Background()
		buf := make([]int32, 8)
		var reqs []goccl.Request
		for i := 0; i < before+after; i++ {
			count := 8
			if i == before && c.Rank() == 1 {
				count = 7
			}
			q, err := goccl.IAllReduce(ctx, c, buf, buf, count, goccl.Max)
			if err != nil {
				return fmt.Errorf("issue %d: %w", i, err)
			}
			reqs = append(reqs, q)
		}
		errs, err := waitAll(reqs, 10*time.Second)
		if err != nil {
			return err
		}
		for i, err := range errs {
			if i < before && err != nil {
				return fmt.Errorf("op %d, before the mismatch: %v", i, err)
			}
			if i >= before && !errors.Is(err, goccl.ErrMismatch) {
				return fmt.Errorf("op %d, at or after the mismatch: %v, want ErrMismatch", i, err)
			}
		}
		// Again, once every slot has been reused since (by operations
		// that fail at once).
		for i := 0; i < goccl.QueueDepth; i++ {
			q, err := goccl.IAllReduce(ctx, c, buf, buf, 8, goccl.Max)
			if err != nil {
				return err
			}
			if err := q.Wait(ctx); !errors.Is(err, goccl.ErrMismatch) {
				return fmt.Errorf("op issued after the failure: %v", err)
			}
		}
		if err := reqs[0].Wait(ctx); err != nil {
			return fmt.Errorf("op 0 waited again: %v", err)
		}
		if err := reqs[before].Wait(ctx); !errors.Is(err, goccl.ErrMismatch) {
			return fmt.Errorf("op %d waited again: %v", before, err)
		}
		if !errors.Is(c.Err(), goccl.ErrMismatch) {
			return fmt.Errorf("Err: %v", c.Err())
		}
		if err := goccl.AllReduce(ctx, c, buf, buf, 8, goccl.Max); !errors.Is(err, goccl.ErrMismatch) {
			return fmt.Errorf("blocking op after: %v", err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestNonBlockingStaleRequest: the zero Request is refused; a Request whose
// slot was reused many times still reports its own result.
func TestNonBlockingStaleRequest(t *testing.T) {
	var zero goccl.Request
	if err := zero.Wait(context.Background()); !errors.Is(err, goccl.ErrInvalidArgument) {
		t.Errorf("zero Request Wait: %v", err)
	}
	if done, err := zero.Test(); !done || !errors.Is(err, goccl.ErrInvalidArgument) {
		t.Errorf("zero Request Test: %v, %v", done, err)
	}
	if _, _, ok := zero.Span(); ok {
		t.Error("zero Request Span: ok")
	}
	errs := goroutineRanks(t, 2, 30*time.Second, func(c *goccl.Comm) error {
		ctx := context.Background()
		buf := []int64{int64(c.Rank() + 1)}
		first, err := goccl.IAllReduce(ctx, c, buf, buf, 1, goccl.Max)
		if err != nil {
			return err
		}
		for i := 0; i < 3*goccl.QueueDepth; i++ {
			q, err := goccl.IAllReduce(ctx, c, buf, buf, 1, goccl.Max)
			if err != nil {
				return err
			}
			if i%50 == 0 {
				if err := q.Wait(ctx); err != nil {
					return err
				}
			}
		}
		if err := goccl.AllReduce(ctx, c, buf, buf, 1, goccl.Max); err != nil {
			return err
		}
		if buf[0] != 2 {
			return fmt.Errorf("result %d, want 2", buf[0])
		}
		if done, err := first.Test(); !done || err != nil {
			return fmt.Errorf("stale first Request: %v, %v", done, err)
		}
		if _, _, ok := first.Span(); ok {
			return errors.New("stale first Request: Span ok after its slot was reused")
		}
		return first.Wait(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// pendingOnRank0 runs f on rank 0 of 2 goroutine ranks after issuing k
// AllReduces there that rank 1 never joins (rank 1 runs peer, then waits
// for rank 0 to finish). The AllReduces' ctx has opTimeout (0: none) from
// when they are issued: a deadline set before Init would spend itself on
// Init on a loaded machine.
func pendingOnRank0(t *testing.T, k int, timeout, opTimeout time.Duration, peer func(c *goccl.Comm), f func(c *goccl.Comm, reqs []goccl.Request) error) {
	t.Helper()
	ready := make(chan *goccl.Comm, 1)
	finished := make(chan struct{})
	errs := goroutineRanks(t, 2, timeout, func(c *goccl.Comm) error {
		if c.Rank() == 1 {
			if peer != nil {
				peer(<-ready)
			}
			<-finished
			return nil
		}
		defer close(finished)
		opCtx := context.Background()
		if opTimeout > 0 {
			var cancel context.CancelFunc
			opCtx, cancel = context.WithTimeout(opCtx, opTimeout)
			defer cancel()
		}
		var reqs []goccl.Request
		for i := 0; i < k; i++ {
			buf := make([]float32, 1<<16)
			q, err := goccl.IAllReduce(opCtx, c, buf, buf, len(buf), goccl.Max)
			if err != nil {
				return err
			}
			reqs = append(reqs, q)
		}
		time.Sleep(50 * time.Millisecond)
		if done, _ := reqs[0].Test(); done {
			return errors.New("first request done without the peer")
		}
		ready <- c
		return f(c, reqs)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// expectAll checks that every request fails within d with an error for which
// is reports true, and that the error names the same cause.
func expectAll(reqs []goccl.Request, d time.Duration, what string, is func(error) bool) error {
	start := time.Now()
	errs, err := waitAll(reqs, d)
	if err != nil {
		return err
	}
	for i, err := range errs {
		if !is(err) {
			return fmt.Errorf("request %d: %v, want %s", i, err, what)
		}
	}
	if e := time.Since(start); e > d {
		return fmt.Errorf("%d requests took %v to fail, want < %v", len(reqs), e, d)
	}
	return nil
}

// TestNonBlockingAbort: Abort fails the running and every queued operation
// with ErrAborted within 2 s, and later I forms fail at once; the peer's
// pending operations fail too.
func TestNonBlockingAbort(t *testing.T) {
	base := runtime.NumGoroutine()
	pendingOnRank0(t, 10, time.Minute, 0, func(c *goccl.Comm) {}, func(c *goccl.Comm, reqs []goccl.Request) error {
		c.Abort()
		if err := expectAll(reqs, 2*time.Second, "ErrAborted", func(err error) bool { return errors.Is(err, goccl.ErrAborted) }); err != nil {
			return err
		}
		buf := make([]float32, 4)
		if _, err := goccl.IAllReduce(context.Background(), c, buf, buf, 4, goccl.Sum); !errors.Is(err, goccl.ErrAborted) {
			return fmt.Errorf("I form after Abort: %v", err)
		}
		return nil
	})
	checkGoroutines(t, base)
}

// TestNonBlockingPeerAborted: a peer's Abort reaches every pending Request
// (the peer's end of the links closed: ErrClosed) within 2 s.
func TestNonBlockingPeerAborted(t *testing.T) {
	base := runtime.NumGoroutine()
	got := make(chan struct{})
	ready := make(chan *goccl.Comm, 1)
	finished := make(chan struct{})
	errs := goroutineRanks(t, 2, time.Minute, func(c *goccl.Comm) error {
		if c.Rank() == 1 {
			ready <- c
			<-got
			c.Abort()
			<-finished
			return nil
		}
		defer close(finished)
		var reqs []goccl.Request
		for i := 0; i < 10; i++ {
			buf := make([]float32, 1<<16)
			q, err := goccl.IAllReduce(context.Background(), c, buf, buf, len(buf), goccl.Sum)
			if err != nil {
				return err
			}
			reqs = append(reqs, q)
		}
		<-ready
		time.Sleep(20 * time.Millisecond)
		close(got)
		return expectAll(reqs, 2*time.Second, "ErrClosed", func(err error) bool { return errors.Is(err, goccl.ErrClosed) })
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	checkGoroutines(t, base)
}

// TestNonBlockingTimeout: an operation whose ctx deadline passes fails with
// DeadlineExceeded, and so does every operation queued behind it.
func TestNonBlockingTimeout(t *testing.T) {
	base := runtime.NumGoroutine()
	pendingOnRank0(t, 10, time.Minute, time.Second, nil, func(c *goccl.Comm, reqs []goccl.Request) error {
		return expectAll(reqs, 2*time.Second, "DeadlineExceeded", func(err error) bool {
			return errors.Is(err, context.DeadlineExceeded) && strings.Contains(err.Error(), "rank(s) 1")
		})
	})
	checkGoroutines(t, base)
}

// TestNonBlockingClose: Close with operations pending fails the queued ones
// with ErrClosed and leaves no goroutine behind.
func TestNonBlockingClose(t *testing.T) {
	base := runtime.NumGoroutine()
	pendingOnRank0(t, 10, time.Minute, time.Second, nil, func(c *goccl.Comm, reqs []goccl.Request) error {
		start := time.Now()
		if err := c.Close(); err != nil {
			return err
		}
		// Close lets the running operation end first (at its deadline,
		// within the second from its start).
		if d := time.Since(start); d > 3*time.Second {
			return fmt.Errorf("Close took %v", d)
		}
		// The running one ends at its deadline; the queued ones are closed.
		if err := reqs[0].Wait(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("running request: %v", err)
		}
		if err := expectAll(reqs[1:], time.Second, "ErrClosed", func(err error) bool { return errors.Is(err, goccl.ErrClosed) }); err != nil {
			return err
		}
		buf := make([]float32, 4)
		if _, err := goccl.IAllReduce(context.Background(), c, buf, buf, 4, goccl.Sum); !errors.Is(err, goccl.ErrClosed) {
			return fmt.Errorf("I form after Close: %v", err)
		}
		if err := goccl.AllReduce(context.Background(), c, buf, buf, 4, goccl.Sum); !errors.Is(err, goccl.ErrClosed) {
			return fmt.Errorf("blocking call after Close: %v", err)
		}
		return nil
	})
	checkGoroutines(t, base)
}

// checkGoroutines fails the test if more goroutines than base are still
// running 2 s after it is called.
func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before the test:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNonBlockingRankKilled: a rank killed with SIGKILL while its peers have
// several non-blocking AllReduces outstanding: every survivor's pending
// Requests all fail within 2 s naming the killed rank.
func TestNonBlockingRankKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	for _, tr := range []struct{ name, shmOff string }{{"shm", "0"}, {"tcp", "1"}} {
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/np%d", tr.name, n), func(t *testing.T) {
				t.Setenv("GOCCL_SHM_DISABLE", tr.shmOff)
				testRankKilled(t, n, n-1, "GOCCL_TEST_WORKER=iloop")
			})
		}
	}
}

// iloopWorker keeps 8 non-blocking 4 MiB AllReduces outstanding until one
// fails, then waits for all and prints "LOST <rank> via <rank>" if every one
// names the same lost rank (else "ERR ..."), as loopWorker does.
func iloopWorker(ctx context.Context, c *goccl.Comm) int {
	const k = 8
	bufs := make([][]float32, k)
	reqs := make([]goccl.Request, k)
	issue := func(i int) error {
		var err error
		reqs[i], err = goccl.IAllReduce(ctx, c, bufs[i], bufs[i], len(bufs[i]), goccl.Sum)
		return err
	}
	for i := range bufs {
		bufs[i] = make([]float32, 1<<20)
		if err := issue(i); err != nil {
			fmt.Printf("ERR issue: %v\n", err)
			return 3
		}
	}
	for n := 0; ; n++ {
		i := n % k
		if err := reqs[i].Wait(ctx); err != nil {
			lost := -2
			via := -2
			for j := 0; j < k; j++ { // every pending one, this one again included
				e := reqs[(i+j)%k].Wait(ctx)
				var pl *goccl.PeerLostError
				if !errors.As(e, &pl) || !errors.Is(e, goccl.ErrPeerLost) || (lost != -2 && pl.Rank != lost) {
					fmt.Printf("ERR other: request %d: %v\n", (i+j)%k, e)
					return 3
				}
				lost, via = pl.Rank, pl.Via
			}
			fmt.Printf("LOST %d via %d\n", lost, via)
			fmt.Printf("error: %v\n", err)
			if c.Err() == nil {
				fmt.Printf("Err() is nil after a failure\n")
			}
			return 3
		}
		if n == 2*k {
			fmt.Println("ready")
		}
		if err := issue(i); err != nil {
			fmt.Printf("ERR issue: %v\n", err)
			return 3
		}
	}
}

// TestNonBlockingWorldSizeOne: on a single rank the I forms copy send into
// recv in the background, and Close stops the worker.
func TestNonBlockingWorldSizeOne(t *testing.T) {
	base := runtime.NumGoroutine()
	c, err := goccl.Init(context.Background(), goccl.WithRank(0), goccl.WithWorldSize(1))
	if err != nil {
		t.Fatal(err)
	}
	send := []float64{1, 2, 3}
	recv := make([]float64, 3)
	req, err := goccl.IAllReduce(context.Background(), c, send, recv, 3, goccl.Avg)
	if err != nil {
		t.Fatal(err)
	}
	if err := req.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if recv[0] != 1 || recv[1] != 2 || recv[2] != 3 {
		t.Errorf("recv %v, want [1 2 3]", recv)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	checkGoroutines(t, base)
}

// TestNonBlockingThenVColl: blocking AllToAllv, Gather and Scatter issued
// while non-blocking operations are outstanding run after them, in issue
// order, on every rank.
func TestNonBlockingThenVColl(t *testing.T) {
	const n, count = 3, 1 << 12
	errs := goroutineRanks(t, n, time.Minute, func(c *goccl.Comm) error {
		ctx := context.Background()
		r := c.Rank()
		for round := 0; round < 20; round++ {
			bufs := make([][]float32, 4+round%2*40)
			reqs := make([]goccl.Request, len(bufs))
			for i := range bufs {
				bufs[i] = make([]float32, count>>(uint(i%2)*10))
				for j := range bufs[i] {
					bufs[i][j] = float32(r + i + round)
				}
				var err error
				if reqs[i], err = goccl.IAllReduce(ctx, c, bufs[i], bufs[i], len(bufs[i]), goccl.Sum); err != nil {
					return err
				}
			}
			// Each rank sends rank+1 elements to every peer.
			sc, sd, rc, rd := make([]int, n), make([]int, n), make([]int, n), make([]int, n)
			send := make([]int32, n*(r+1))
			for p := 0; p < n; p++ {
				sc[p], sd[p], rc[p], rd[p] = r+1, p*(r+1), p+1, p*(p+1)/2
				for j := 0; j < r+1; j++ {
					send[p*(r+1)+j] = int32(100*r + p)
				}
			}
			recv := make([]int32, n*(n+1)/2)
			if err := goccl.AllToAllv(ctx, c, send, sc, sd, recv, rc, rd); err != nil {
				return fmt.Errorf("round %d: AllToAllv: %w", round, err)
			}
			for p := 0; p < n; p++ {
				for j := 0; j < p+1; j++ {
					if got, want := recv[rd[p]+j], int32(100*p+r); got != want {
						return fmt.Errorf("round %d: AllToAllv from %d: got %d, want %d", round, p, got, want)
					}
				}
			}
			g := make([]int32, n)
			if err := goccl.Gather(ctx, c, []int32{int32(r + round)}, g, 1, round%n); err != nil {
				return fmt.Errorf("round %d: Gather: %w", round, err)
			}
			if r == round%n {
				for p := range g {
					if g[p] != int32(p+round) {
						return fmt.Errorf("round %d: Gather block %d = %d", round, p, g[p])
					}
				}
			}
			for i, req := range reqs {
				if err := req.Wait(ctx); err != nil {
					return fmt.Errorf("round %d: IAllReduce %d: %w", round, i, err)
				}
				want := float32(n*(i+round) + n*(n-1)/2)
				if bufs[i][0] != want || bufs[i][len(bufs[i])-1] != want {
					return fmt.Errorf("round %d: IAllReduce %d: got %v, want %v", round, i, bufs[i][0], want)
				}
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
