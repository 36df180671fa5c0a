package goccl_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/rendezvous"
)

// TestMain turns the test binary into a rank when GOCCL_TEST_WORKER is set:
// the multi-process tests start several copies of it through the environment
// that `goccl run` would set.
func TestMain(m *testing.M) {
	if mode := os.Getenv("GOCCL_TEST_WORKER"); mode != "" {
		os.Exit(worker(mode))
	}
	os.Exit(m.Run())
}

func worker(mode string) int {
	ctx := context.Background()
	if mode == "victim" {
		return victimWorker(ctx)
	}
	if mode == "reinit" {
		return reinitWorker(ctx)
	}
	if f := extraMains[mode]; f != nil {
		return f(ctx) // a worker that makes its own communicator
	}
	if os.Getenv("GOCCL_TEST_ROCE_FAULTS") == "1" {
		// 1 % of the device's packets dropped, duplicated, reordered and
		// corrupted (a different pattern per rank).
		r, _ := strconv.Atoi(os.Getenv("GOCCL_RANK"))
		goccl.SetRoCEFaults(rdma.Faults{Drop: 0.01, Duplicate: 0.01, Reorder: 0.01, Corrupt: 0.01, Seed: uint64(r) + 1})
	}
	if hosts := os.Getenv("GOCCL_TEST_HOSTS"); hosts != "" {
		// Pretend the ranks live on the hosts listed, one per rank.
		r, _ := strconv.Atoi(os.Getenv("GOCCL_RANK"))
		os.Setenv("GOCCL_HOSTID", strings.Split(hosts, ",")[r])
	}
	c, err := goccl.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		return 2
	}
	defer c.Close()
	switch mode {
	case "matrix":
		var counts []int
		for _, f := range strings.Split(os.Getenv("GOCCL_TEST_COUNTS"), ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bad GOCCL_TEST_COUNTS:", err)
				return 2
			}
			counts = append(counts, n)
		}
		m := &matrix{ctx: ctx, c: c, counts: counts}
		if err := m.run(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("rank %d: %d operations checked\n", c.Rank(), m.ops)
		return 0
	}
	if mode == "loop" {
		return loopWorker(ctx, c)
	}
	if f := extraWorkers[mode]; f != nil {
		return f(ctx, c)
	}
	if mode == "checked" {
		return checkedWorker(ctx, c)
	}
	fmt.Fprintln(os.Stderr, "unknown worker mode", mode)
	return 2
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// spawn runs n ranks of the test binary in worker mode and returns each rank's
// combined output; it fails the test if any rank fails.
func spawn(t *testing.T, n int, mode string, extraEnv ...string) []string {
	t.Helper()
	addr := freeAddr(t)
	cmds := make([]*exec.Cmd, n)
	for r := 0; r < n; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "GOCCL_TEST_WORKER="+mode,
			"GOCCL_RANK="+strconv.Itoa(r), "GOCCL_WORLD_SIZE="+strconv.Itoa(n),
			"GOCCL_LOCAL_RANK="+strconv.Itoa(r), "GOCCL_STORE_ADDR="+addr, "GOCCL_TIMEOUT=120s")
		cmd.Env = append(cmd.Env, extraEnv...)
		cmds[r] = cmd
	}
	return spawnCmds(t, cmds)
}

// spawnCmds runs the ranks' commands, rank r's being cmds[r] with its
// environment set, and returns each rank's combined output; it fails the
// test if any rank fails.
func spawnCmds(t *testing.T, cmds []*exec.Cmd) []string {
	t.Helper()
	outs := make([]bytes.Buffer, len(cmds))
	for r, cmd := range cmds {
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	failed := false
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			failed = true
			t.Errorf("rank %d: %v\n%s", r, err, outs[r].String())
		}
	}
	res := make([]string, len(cmds))
	for r := range outs {
		res[r] = outs[r].String()
	}
	if failed {
		t.FailNow()
	}
	return res
}

// TestCollectivesMultiProcess runs the whole matrix (every collective x dtype x
// op x in/out-of-place x counts) in separate processes, over shared memory and
// over TCP, for world sizes 1 to 4.
func TestCollectivesMultiProcess(t *testing.T) {
	counts := "0,1,7,1000003"
	if testing.Short() {
		counts = "0,1,7,1003"
	}
	for _, tr := range []struct {
		name, env, net string
		sizes          []int
	}{
		{"shm", "GOCCL_SHM_DISABLE=0", "GOCCL_NET=socket", []int{1, 2, 3, 4}},
		{"tcp", "GOCCL_SHM_DISABLE=1", "GOCCL_NET=socket", []int{1, 2, 3, 4}},
		// Every link over the soft RoCE device's queue pairs (NCCL's
		// NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_NET=IB on one node).
		{"NET/RoCE/v2", "GOCCL_SHM_DISABLE=1", "GOCCL_NET=roce", []int{3}},
	} {
		for _, n := range tr.sizes {
			t.Run(fmt.Sprintf("%s/np%d", tr.name, n), func(t *testing.T) {
				outs := spawn(t, n, "matrix", tr.env, tr.net, "GOCCL_TEST_COUNTS="+counts, "GOCCL_DEBUG=INFO")
				for r, out := range outs {
					if !strings.Contains(out, "operations checked") {
						t.Fatalf("rank %d did not report:\n%s", r, out)
					}
					if n > 1 {
						want := "via " + tr.name
						if !strings.Contains(out, want) {
							t.Fatalf("rank %d: GOCCL_DEBUG=INFO output lacks %q:\n%s", r, want, out)
						}
					}
				}
			})
		}
	}
}

// goroutineRanks runs f on n ranks in this process sharing an in-memory store.
func goroutineRanks(t *testing.T, n int, timeout time.Duration, f func(c *goccl.Comm) error) []error {
	t.Helper()
	store := rendezvous.NewMemStore()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			c, err := goccl.Init(context.Background(), goccl.WithRank(r), goccl.WithWorldSize(n),
				goccl.WithStore(store), goccl.WithTimeout(timeout))
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			errs[r] = f(c)
		}(r)
	}
	wg.Wait()
	return errs
}

// returnsWithin runs f and waits for it at most d (then it fails, and f
// goes on).
func returnsWithin(d time.Duration, f func()) error {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
		return nil
	case <-time.After(d):
		return fmt.Errorf("still running after %v", d)
	}
}

// initComms makes n goroutine ranks of this process meet through store and
// returns their communicators, closed when the test ends. timeout is the
// communicators' (WithTimeout); Init itself has at least a minute.
func initComms(tb testing.TB, n int, store rendezvous.Store, timeout time.Duration) []*goccl.Comm {
	tb.Helper()
	comms := make([]*goccl.Comm, n)
	errs := make([]error, n)
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, time.Minute))
	defer cancel()
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			comms[r], errs[r] = goccl.Init(ctx, goccl.WithRank(r), goccl.WithWorldSize(n),
				goccl.WithStore(store), goccl.WithTimeout(timeout))
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			tb.Fatalf("rank %d: %v", r, err)
		}
		tb.Cleanup(func() { comms[r].Close() })
	}
	return comms
}

// TestCollectivesInProcess runs a small matrix with goroutine ranks (this is
// the part the race detector covers).
func TestCollectivesInProcess(t *testing.T) {
	for _, shmOff := range []string{"0", "1"} {
		t.Run("shm_disable="+shmOff, func(t *testing.T) {
			t.Setenv("GOCCL_SHM_DISABLE", shmOff)
			for _, n := range []int{2, 3} {
				errs := goroutineRanks(t, n, time.Minute, func(c *goccl.Comm) error {
					m := &matrix{ctx: context.Background(), c: c, counts: []int{0, 5, 300}}
					return m.run()
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("np %d rank %d: %v", n, r, err)
					}
				}
			}
		})
	}
}

func TestWorldSizeOne(t *testing.T) {
	c, err := goccl.Init(context.Background(), goccl.WithRank(0), goccl.WithWorldSize(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := &matrix{ctx: context.Background(), c: c, counts: []int{0, 1, 7, 1000}}
	if err := m.run(); err != nil {
		t.Fatal(err)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	c, err := goccl.Init(ctx, goccl.WithRank(0), goccl.WithWorldSize(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cases := []struct {
		name string
		err  error
		want []string
	}{
		{"avg on ints", goccl.AllReduce(ctx, c, []int32{1}, []int32{1}, 1, goccl.Avg), []string{"rank 0", "AllReduce", "avg", "int32"}},
		{"short recv", goccl.AllReduce(ctx, c, make([]float32, 10), make([]float32, 5), 10, goccl.Sum), []string{"rank 0", "AllReduce", "recvbuf", "5", "10"}},
		{"short send", goccl.AllGather(ctx, c, make([]float32, 3), make([]float32, 10), 4), []string{"AllGather", "sendbuf", "3", "4"}},
		{"negative count", goccl.AllReduce(ctx, c, []float32{1}, []float32{1}, -1, goccl.Sum), []string{"negative count -1"}},
		{"bad root", goccl.Broadcast(ctx, c, []float32{1}, []float32{1}, 1, 3), []string{"Broadcast", "root 3"}},
		{"bad reduce root", goccl.Reduce(ctx, c, []float32{1}, []float32{1}, 1, goccl.Sum, -1), []string{"Reduce", "root -1"}},
		{"bad op", goccl.AllReduce(ctx, c, []float32{1}, []float32{1}, 1, goccl.RedOp(9)), []string{"reduction op 9"}},
		{"bad type", c.AllGatherBytes(ctx, make([]byte, 4), make([]byte, 4), 1, goccl.DataType(42)), []string{"AllGather", "unknown data type 42"}},
		{"send to self", goccl.Send(ctx, c, []float32{1}, 1, 0), []string{"Send to self"}},
		{"peer out of range", goccl.Recv(ctx, c, []float32{1}, 1, 4), []string{"peer 4"}},
	}
	for _, tc := range cases {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if !errors.Is(tc.err, goccl.ErrInvalidArgument) {
			t.Errorf("%s: %v is not ErrInvalidArgument", tc.name, tc.err)
		}
		for _, w := range tc.want {
			if !strings.Contains(tc.err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.name, tc.err, w)
			}
		}
	}
	// A bad call does not poison the communicator.
	if err := goccl.AllReduce(ctx, c, []float32{2}, make([]float32, 1), 1, goccl.Sum); err != nil {
		t.Fatalf("after bad input: %v", err)
	}
}

// TestMismatchAcrossRanks: differing counts, dtypes and op order give an error
// on every rank, never a hang or garbage. (Differing roots can leave every rank
// a sender with nothing to receive: then the next operation reports it, see
// TestRootMismatch; catching it on the call needs the fingerprint exchange of
// GOCCL_DEBUG_CHECK, issue 4.)
func TestMismatchAcrossRanks(t *testing.T) {
	for _, check := range []string{"0", "1"} {
		t.Setenv("GOCCL_DEBUG_CHECK", check)
		testMismatchAcrossRanks(t, check == "1")
	}
}

func testMismatchAcrossRanks(t *testing.T, debugCheck bool) {
	for _, tr := range []string{"0", "1"} {
		t.Setenv("GOCCL_SHM_DISABLE", tr)
		cases := map[string]func(ctx context.Context, c *goccl.Comm) error{
			"count": func(ctx context.Context, c *goccl.Comm) error {
				n := 1000 + c.Rank()
				return goccl.AllReduce(ctx, c, make([]float32, n), make([]float32, n), n, goccl.Sum)
			},
			"dtype": func(ctx context.Context, c *goccl.Comm) error {
				if c.Rank() == 0 {
					return goccl.AllReduce(ctx, c, make([]float32, 64), make([]float32, 64), 64, goccl.Sum)
				}
				return goccl.AllReduce(ctx, c, make([]int32, 64), make([]int32, 64), 64, goccl.Sum)
			},
			"order": func(ctx context.Context, c *goccl.Comm) error {
				if c.Rank() == 0 {
					return goccl.AllGather(ctx, c, make([]float32, 4), make([]float32, 4*c.Size()), 4)
				}
				return goccl.AllReduce(ctx, c, make([]float32, 4), make([]float32, 4), 4, goccl.Sum)
			},
		}
		if debugCheck {
			// Only the fingerprint exchange sees this one: with 2 ranks
			// both roots just send.
			cases["root"] = func(ctx context.Context, c *goccl.Comm) error {
				buf := make([]float32, 64)
				return goccl.Broadcast(ctx, c, buf, buf, 64, c.Rank()%2)
			}
		}
		for name, f := range cases {
			for _, n := range []int{2, 3} {
				start := time.Now()
				errs := goroutineRanks(t, n, 20*time.Second, func(c *goccl.Comm) error {
					return f(context.Background(), c)
				})
				for r, err := range errs {
					if err == nil {
						t.Errorf("shm_disable=%s %s np%d: rank %d got no error", tr, name, n, r)
						continue
					}
					if !strings.Contains(err.Error(), fmt.Sprintf("rank %d", r)) {
						t.Errorf("%s: rank %d error does not name the rank: %v", name, r, err)
					}
					if debugCheck && (!errors.Is(err, goccl.ErrMismatch) || !strings.Contains(err.Error(), "rank 1 called")) {
						t.Errorf("GOCCL_DEBUG_CHECK %s np%d: rank %d: got %v, want ErrMismatch naming rank 1's call", name, n, r, err)
					}
				}
				if time.Since(start) > 15*time.Second {
					t.Errorf("shm_disable=%s %s np%d: took %v (timeout instead of detection)", tr, name, n, time.Since(start))
				}
			}
		}
	}
}

func TestWorldSizeNeverReached(t *testing.T) {
	store := rendezvous.NewMemStore()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			c, err := goccl.Init(context.Background(), goccl.WithRank(r), goccl.WithWorldSize(3),
				goccl.WithStore(store), goccl.WithTimeout(time.Second))
			if err == nil {
				c.Close()
			}
			errs[r] = err
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: Init of a 3-rank world with 2 ranks succeeded", r)
		}
		if !strings.Contains(err.Error(), "rank(s) 2") || !strings.Contains(err.Error(), "world size 3") {
			t.Errorf("rank %d: error should name the missing rank 2: %v", r, err)
		}
	}
}

// TestOperationTimeout: a peer that never joins the operation makes it fail
// with a deadline error after the communicator's timeout (no context deadline
// given), over shared memory and over TCP.
func TestOperationTimeout(t *testing.T) {
	for _, shmOff := range []string{"0", "1"} {
		t.Setenv("GOCCL_SHM_DISABLE", shmOff)
		// Init has its own deadline: the communicator's 500 ms is for the
		// operation (Init takes it only when its ctx has none, and a loaded
		// machine under the race detector may need more).
		comms := initComms(t, 2, rendezvous.NewMemStore(), 500*time.Millisecond)
		done := make(chan struct{})
		start := time.Now()
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r == 1 {
					<-done // never calls AllReduce
					return
				}
				defer close(done)
				buf := make([]float32, 1<<20)
				errs[r] = goccl.AllReduce(context.Background(), c, buf, buf, len(buf), goccl.Sum)
			}()
		}
		if err := returnsWithin(30*time.Second, wg.Wait); err != nil {
			t.Fatalf("shm_disable=%s: the AllReduce without its peer: %v", shmOff, err)
		}
		if !errors.Is(errs[0], context.DeadlineExceeded) {
			t.Fatalf("shm_disable=%s: rank 0 got %v, want a deadline error", shmOff, errs[0])
		}
		t.Log(errs[0])
		if msg := errs[0].Error(); !strings.Contains(msg, "rank 0") || !strings.Contains(msg, "AllReduce (op #") ||
			!strings.Contains(msg, "no message of this operation yet from rank(s) 1") {
			t.Errorf("error does not name rank, op, sequence and the peer not heard from: %v", errs[0])
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("shm_disable=%s: took %v", shmOff, d)
		}
	}
}
