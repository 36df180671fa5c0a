package gloo

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
)

// The mixed Python/Go jobs: Python ranks run testdata/torch_rank.py on
// Debian's python3-torch (1.13, its Gloo), Go ranks run goScript below in a
// subprocess of this test binary (TestMain), joining with JoinEnv. Every
// rank checks every result itself and prints a digest of it; the test
// compares the digests across ranks.

const python = "/usr/bin/python3"

// torchOK skips the test when torch cannot be imported by /usr/bin/python3.
func torchOK(t *testing.T) {
	t.Helper()
	out, err := exec.Command(python, "-c", "import torch.distributed as d; assert d.is_gloo_available(); print(__import__('torch').__version__)").CombinedOutput()
	if err != nil {
		t.Skipf("skipped: %s cannot import torch with Gloo (Debian python3-torch): %v: %s", python, err, bytes.TrimSpace(out))
	}
	t.Logf("torch %s", bytes.TrimSpace(out))
}

func TestMain(m *testing.M) {
	if os.Getenv("GLOO_TEST_GO_RANK") == "1" {
		os.Exit(goRankMain())
	}
	os.Exit(m.Run())
}

// values is the script's value of element i on rank r at step k, an
// integer so that sums are exact in every type.
func values[T goccl.Element](n, rank, k int) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = T((i*7+rank*13+k)%97 - 40)
	}
	return s
}

type reporter struct {
	rank int
	bad  int
}

func report[T goccl.Element](r *reporter, name string, got, want []T) {
	if !slices.Equal(got, want) {
		i := 0
		for i < len(got) && got[i] == want[i] {
			i++
		}
		fmt.Printf("rank %d: %s: wrong at %d: got %v want %v\n", r.rank, name, i, got[i:min(i+5, len(got))], want[i:min(i+5, len(want))])
		r.bad++
	}
	sum := sha256.Sum256(asBytes(got))
	fmt.Printf("result %s %s\n", name, hex.EncodeToString(sum[:]))
}

// goScript is torch_rank.py's sequence for one element type.
func goScript[T goccl.Element](ctx context.Context, g *Group, r *reporter, k *int, dname string) error {
	rank, size := g.Rank(), g.Size()
	for _, n := range []int{0, 1, 7, 1000003} {
		*k++
		t := values[T](n, rank, *k)
		if err := AllReduce(ctx, g, t, goccl.Sum); err != nil {
			return err
		}
		want := make([]T, n)
		for q := 0; q < size; q++ {
			for i, v := range values[T](n, q, *k) {
				want[i] += v
			}
		}
		report(r, fmt.Sprintf("all_reduce.sum.%s.%d", dname, n), t, want)
	}
	*k++
	t := values[T](1000, rank, *k)
	if err := AllReduce(ctx, g, t, goccl.Max); err != nil {
		return err
	}
	want := values[T](1000, 0, *k)
	for q := 1; q < size; q++ {
		for i, v := range values[T](1000, q, *k) {
			want[i] = max(want[i], v)
		}
	}
	report(r, "all_reduce.max."+dname+".1000", t, want)
	for root := 0; root < size; root++ {
		for _, n := range []int{5, 300001} {
			*k++
			t := make([]T, n)
			if rank == root {
				t = values[T](n, rank, *k)
			}
			if err := Broadcast(ctx, g, t, root); err != nil {
				return err
			}
			report(r, fmt.Sprintf("broadcast.%d.%s.%d", root, dname, n), t, values[T](n, root, *k))
		}
	}
	for _, n := range []int{1, 3, 100000} {
		*k++
		out := make([]T, size*n)
		if err := AllGather(ctx, g, out, values[T](n, rank, *k)); err != nil {
			return err
		}
		var want []T
		for q := 0; q < size; q++ {
			want = append(want, values[T](n, q, *k)...)
		}
		report(r, fmt.Sprintf("all_gather.%s.%d", dname, n), out, want)
	}
	if err := Barrier(ctx, g); err != nil {
		return err
	}
	*k++
	next, prev := (rank+1)%size, (rank+size-1)%size
	got := make([]T, 1000)
	sent := make(chan error, 1)
	go func() { sent <- Send(ctx, g, values[T](1000, rank, *k), next, 7) }()
	if err := Recv(ctx, g, got, prev, 7); err != nil {
		return err
	}
	if err := <-sent; err != nil {
		return err
	}
	report(r, "recv."+dname+".from_previous", got, values[T](1000, prev, *k))
	return nil
}

// goRankMain is a Go rank's process: JoinEnv, the script, a final barrier.
func goRankMain() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g, err := JoinEnv(ctx)
	if err != nil {
		fmt.Println("join:", err)
		return 1
	}
	defer g.Close()
	if os.Getenv("GLOO_TEST_GO_EXIT_RANK") == strconv.Itoa(g.Rank()) {
		os.Exit(3) // a rank that dies after joining (the failure tests)
	}
	r := &reporter{rank: g.Rank()}
	k := 0
	for _, script := range []func() error{
		func() error { return goScript[float32](ctx, g, r, &k, "float32") },
		func() error { return goScript[int64](ctx, g, r, &k, "int64") },
		func() error { return goScript[float64](ctx, g, r, &k, "float64") },
		func() error { return goScript[uint8](ctx, g, r, &k, "uint8") },
		func() error { return Barrier(ctx, g) },
	} {
		if err := script(); err != nil {
			fmt.Println(err)
			return 1
		}
	}
	fmt.Printf("rank %d done, %d wrong\n", g.Rank(), r.bad)
	if r.bad > 0 {
		return 1
	}
	return 0
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// runMixed starts size ranks, Go where goRanks says, and checks them.
type result struct {
	out string
	err error
}

// startRanks runs size ranks, Go where goRanks says, Python elsewhere, and
// returns each one's output and exit error. port is MASTER_PORT, 0 for a
// free one.
func startRanks(t *testing.T, size int, goRanks []int, port int, extraEnv []string) []result {
	t.Helper()
	if port == 0 {
		port = freePort(t)
	}
	results := make([]result, size)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for r := 0; r < size; r++ {
		var cmd *exec.Cmd
		if slices.Contains(goRanks, r) {
			cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "GLOO_TEST_GO_RANK=1")
		} else {
			cmd = exec.CommandContext(ctx, python, "testdata/torch_rank.py")
			cmd.Env = os.Environ()
		}
		cmd.Env = append(cmd.Env, "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(size),
			"LOCAL_RANK="+strconv.Itoa(r), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"GLOO_SOCKET_IFNAME=lo")
		cmd.Env = append(cmd.Env, extraEnv...)
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			out, err := cmd.CombinedOutput()
			results[r] = result{string(out), err}
		}(r)
	}
	wg.Wait()
	return results
}

// runMixed runs a job (see startRanks) and checks that every rank
// succeeded and that the ranks' results are bit for bit the same.
func runMixed(t *testing.T, size int, goRanks []int, port int, extraEnv []string) {
	t.Helper()
	results := startRanks(t, size, goRanks, port, extraEnv)
	digests := map[string]map[int]string{}
	for r, res := range results {
		kind := "python"
		if slices.Contains(goRanks, r) {
			kind = "go"
		}
		if res.err != nil {
			t.Errorf("rank %d (%s): %v\n%s", r, kind, res.err, res.out)
			continue
		}
		n := 0
		sc := bufio.NewScanner(strings.NewReader(res.out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 3 && f[0] == "result" {
				if digests[f[1]] == nil {
					digests[f[1]] = map[int]string{}
				}
				digests[f[1]][r] = f[2]
				n++
			}
		}
		if n == 0 {
			t.Errorf("rank %d (%s) reported no result:\n%s", r, kind, res.out)
		}
	}
	if t.Failed() {
		return
	}
	for name, byRank := range digests {
		if len(byRank) != size {
			t.Errorf("%s: reported by %d ranks, want %d", name, len(byRank), size)
			continue
		}
		if strings.HasPrefix(name, "recv.") {
			continue // each rank receives another rank's values
		}
		for r := 1; r < size; r++ {
			if byRank[r] != byRank[0] {
				t.Errorf("%s: rank %d's result differs from rank 0's", name, r)
			}
		}
	}
	t.Logf("%d results identical on %d ranks (Go ranks %v)", len(digests), size, goRanks)
}

// TestMixedPythonHostsStore: 2 ranks, Python rank 0 serves the TCPStore
// (plain env://), the Go rank 1 connects to it.
func TestMixedPythonHostsStore(t *testing.T) {
	torchOK(t)
	runMixed(t, 2, []int{1}, 0, nil)
}

// TestMixedGoHostsStore: 2 ranks, the Go rank 0 serves the TCPStore.
func TestMixedGoHostsStore(t *testing.T) {
	torchOK(t)
	runMixed(t, 2, []int{0}, 0, nil)
}

// TestMixedAgentStore4: 4 ranks, Go ranks 0 and 3, Python ranks 1 and 2,
// all clients of a c10d store served as torchrun's agent (and goccl run)
// serve it.
func TestMixedAgentStore4(t *testing.T) {
	torchOK(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rendezvous.ServeC10d(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	runMixed(t, 4, []int{0, 3}, port, []string{"TORCHELASTIC_USE_AGENT_STORE=True", "TORCHELASTIC_RESTART_COUNT=0"})
}

// TestMixedPythonRankDies: a Python rank that dies after joining fails the
// Go rank's next operation with an error naming it, instead of a hang (tag
// 1: the script's first all_reduce, tag 0, is empty and sends nothing).
func TestMixedPythonRankDies(t *testing.T) {
	torchOK(t)
	res := startRanks(t, 2, []int{0}, 0, []string{"GLOO_TEST_PY_EXIT_RANK=1"})
	if res[0].err == nil || !strings.Contains(res[0].out, "all_reduce (tag 1) with peer rank 1: lost peer rank 1") || !strings.Contains(res[0].out, "lost peer rank 1") {
		t.Errorf("Go rank 0: %v, want an error naming the lost peer rank 1:\n%s", res[0].err, res[0].out)
	}
	if strings.Contains(res[0].out, "deadline") {
		t.Errorf("Go rank 0 waited for its deadline:\n%s", res[0].out)
	}
}

// TestMixedGoRankDies: a Go rank that dies after joining fails the Python
// rank's all_reduce (Gloo: "Connection closed by peer") instead of a hang.
func TestMixedGoRankDies(t *testing.T) {
	torchOK(t)
	res := startRanks(t, 2, []int{1}, 0, []string{"GLOO_TEST_GO_EXIT_RANK=1"})
	if res[0].err == nil || !strings.Contains(res[0].out, "all_reduce") ||
		!(strings.Contains(res[0].out, "Connection closed by peer") || strings.Contains(res[0].out, "Connection reset by peer")) {
		t.Errorf("Python rank 0: %v, want Gloo's closed connection in all_reduce:\n%s", res[0].err, res[0].out)
	}
}
