package goccl_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
)

func init() { extraMains["shrink"] = shrinkWorker }

// shrinkWorker runs AllReduces until one fails (a rank was killed), then
// shrinks and checks an AllReduce on the new communicator, shrinking again
// if that fails too (another rank died); it prints "SHRUNK size sum" with
// the sum of the survivors' original ranks + 1, or "ERR ...".
func shrinkWorker(ctx context.Context) int {
	rank, _ := strconv.Atoi(os.Getenv("GOCCL_RANK"))
	size, _ := strconv.Atoi(os.Getenv("GOCCL_WORLD_SIZE"))
	tok := rendezvous.WithToken([]byte(os.Getenv("GOCCL_TEST_TOKEN")))
	store, err := rendezvous.DialTCP(ctx, os.Getenv("GOCCL_TEST_STORE"), tok, rendezvous.WithRank(rank))
	if err != nil {
		fmt.Println("ERR dial:", err)
		return 2
	}
	defer store.Close()
	c, err := goccl.Init(ctx, goccl.WithRank(rank), goccl.WithWorldSize(size), goccl.WithStore(store), goccl.WithTimeout(20*time.Second))
	if err != nil {
		fmt.Println("ERR init:", err)
		return 2
	}
	defer c.Close()
	buf := make([]float32, 1<<16)
	for i := 0; ; i++ {
		if err := goccl.AllReduce(ctx, c, buf, buf, len(buf), goccl.Sum); err != nil {
			fmt.Println("FAILED", err)
			break
		}
		if i == 2 {
			fmt.Println("ready")
		}
	}
	cur := c
	for attempt := 0; attempt < 4; attempt++ {
		start := time.Now()
		nc, err := cur.Shrink(ctx)
		if err != nil {
			fmt.Println("ERR shrink:", err)
			return 1
		}
		defer nc.Close()
		fmt.Printf("shrink took %v\n", time.Since(start))
		// 4 MiB through the links (over reset rings, where Shrink kept
		// them), every element the sum of the survivors' original ranks + 1.
		x := make([]float32, 1<<20)
		for i := range x {
			x[i] = float32(rank + 1)
		}
		ok := uint64(1)
		if err := goccl.AllReduce(ctx, nc, x, x, len(x), goccl.Sum); err != nil {
			fmt.Println("FAILED after shrink:", err)
			ok = 0
		}
		// A survivor that finished the AllReduce may be alone in that: a
		// rank stopped after sending its part leaves the others waiting.
		// Agree tells every survivor whether all of them got here (ULFM's
		// pattern: every survivor makes the same calls): if not, all shrink
		// again.
		all, failed, err := nc.Agree(ctx, ok)
		if err != nil {
			fmt.Println("ERR agree after shrink:", err)
			return 1
		}
		if all == 0 || len(failed) > 0 {
			fmt.Println("FAILED after shrink: ranks", failed, "failed")
			cur = nc
			continue
		}
		for i, v := range x {
			if v != x[0] {
				fmt.Printf("ERR element %d is %g, element 0 %g\n", i, v, x[0])
				return 1
			}
		}
		if err := goccl.AllReduce(ctx, c, x, x, 1, goccl.Sum); err == nil {
			fmt.Println("ERR the old communicator still works after a shrink that retired it")
			return 1
		}
		fmt.Printf("LINKS %s\n", strings.Join(goccl.LinkNames(nc), ","))
		fmt.Printf("SHRUNK %d %g\n", nc.Size(), x[0])
		return 0
	}
	fmt.Println("ERR shrunk 4 times")
	return 1
}

// TestShrinkFaultInjection: 3 to 8 ranks (processes) run AllReduces; a
// random rank is killed (SIGKILL), and in half the runs a second one at a
// random moment while the others shrink (SIGSTOP first in some). Every
// survivor must shrink, within the test's bound, to the same communicator
// (size and members) and run an AllReduce on it. GOCCL_TEST_SHRINK_ITERS
// sets the runs (default 4), GOCCL_TEST_SHRINK_NP a fixed world size.
func TestShrinkFaultInjection(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	iters := 4
	if s := os.Getenv("GOCCL_TEST_SHRINK_ITERS"); s != "" {
		iters, _ = strconv.Atoi(s)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	np, _ := strconv.Atoi(os.Getenv("GOCCL_TEST_SHRINK_NP")) // a fixed world size (0: 3 to 8)
	for it := range iters {
		n := 3 + rng.IntN(6)
		if np > 0 {
			n = np
		}
		v1 := rng.IntN(n)
		v2 := -1
		if rng.IntN(2) == 0 {
			v2 = (v1 + 1 + rng.IntN(n-1)) % n
		}
		stop := rng.IntN(3) == 0
		delay := time.Duration(rng.IntN(60)) * time.Millisecond
		net := []string{"shm", "tcp"}[it%2]
		t.Run(fmt.Sprintf("%d/%s/np%d/kill%d/then%d/stop=%v/after%v", it, net, n, v1, v2, stop, delay), func(t *testing.T) {
			srv, err := rendezvous.NewTCPServer("127.0.0.1:0", rendezvous.WithToken([]byte("shrink test")))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			runShrinkKill(t, srv.Addr(), net, n, v1, v2, stop, delay)
		})
	}
}

// runShrinkKill runs one case of TestShrinkFaultInjection with net's links
// (shm: shared memory, which the shrunk communicator must keep using; tcp:
// GOCCL_SHM_DISABLE=1).
func runShrinkKill(t *testing.T, addr, net string, n, v1, v2 int, stop bool, delay time.Duration) {
	cmds := make([]*exec.Cmd, n)
	outs := make([]strings.Builder, n)
	var outMu sync.Mutex
	var readers sync.WaitGroup
	exited := make([]chan struct{}, n)
	ready := make(chan int, n)
	failed := make(chan int, n)
	for r := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "GOCCL_TEST_WORKER=shrink", "GOCCL_TEST_STORE="+addr, "GOCCL_TEST_TOKEN=shrink test",
			"GOCCL_SHM_DISABLE="+map[string]string{"shm": "0", "tcp": "1"}[net],
			"GOCCL_RANK="+strconv.Itoa(r), "GOCCL_WORLD_SIZE="+strconv.Itoa(n), "GOCCL_LOCAL_RANK="+strconv.Itoa(r))
		cmds[r] = cmd
		exited[r] = startWatched(t, cmd, &readers, func(line string) {
			outMu.Lock()
			outs[r].WriteString(line + "\n")
			outMu.Unlock()
			switch {
			case line == "ready":
				ready <- r
			case strings.HasPrefix(line, "FAILED "):
				// Not blocking: a rank prints FAILED again when an AllReduce
				// on a shrunk communicator fails, and a reader blocked here
				// would block the rank's next write (the hang once seen).
				select {
				case failed <- r:
				default:
				}
			}
		}, nil)
	}
	defer func() {
		for _, c := range cmds {
			c.Process.Kill()
		}
	}()
	for range n {
		select {
		case <-ready:
		case <-time.After(60 * time.Second):
			t.Fatal("ranks not ready after 60 s")
		}
	}
	cmds[v1].Process.Kill()
	if v2 >= 0 {
		select {
		case <-failed:
		case <-time.After(30 * time.Second):
			t.Fatal("no rank saw the first kill after 30 s")
		}
		time.Sleep(delay)
		sig := syscall.SIGKILL
		if stop {
			sig = syscall.SIGSTOP
		}
		cmds[v2].Process.Signal(sig)
	}
	deadline := time.After(90 * time.Second)
	for r := range n {
		if r == v1 || r == v2 {
			continue
		}
		select {
		case <-exited[r]:
		case <-deadline:
			for _, c := range cmds {
				c.Process.Signal(syscall.SIGQUIT) // their goroutines, into the output
			}
			time.Sleep(3 * time.Second)
			outMu.Lock()
			for q := range n {
				t.Logf("rank %d:\n%s", q, outs[q].String())
			}
			outMu.Unlock()
			t.Fatalf("rank %d still running 90 s after the kill: hung", r)
		}
	}
	if v2 >= 0 {
		cmds[v2].Process.Kill()
	}
	readers.Wait()
	outMu.Lock()
	defer outMu.Unlock()
	// Every survivor shrank to the same communicator, or was counted
	// failed (too slow to vote before the others' deadline on a loaded
	// machine, a false suspicion: ErrExcluded) and is not in it.
	want, members, excluded := "", 0, []int{}
	for r := range n {
		out := outs[r].String()
		if r == v1 || r == v2 {
			continue
		}
		i := strings.Index(out, "SHRUNK ")
		if i < 0 {
			if strings.Contains(out, "agreed that this rank had failed") {
				excluded = append(excluded, r)
				t.Logf("rank %d was counted failed (too slow on a loaded machine) and got ErrExcluded", r)
				continue
			}
			t.Errorf("rank %d did not shrink:\n%s", r, out)
			continue
		}
		members += r + 1
		if j := strings.Index(out, "LINKS "); j >= 0 {
			links := strings.TrimSpace(strings.SplitN(out[j+len("LINKS "):], "\n", 2)[0])
			for _, name := range strings.Split(links, ",") {
				if name != "" && !strings.HasPrefix(name, net) {
					t.Errorf("rank %d: the shrunk communicator's links are %s, want all %s", r, links, net)
					break
				}
			}
		}
		got := strings.TrimSpace(strings.SplitN(out[i:], "\n", 2)[0])
		if want == "" {
			want = got
		} else if got != want {
			t.Errorf("rank %d: %q, another survivor %q", r, got, want)
		}
	}
	// The survivors: those that reported, and v2 if it shrank with them
	// before it died.
	count := n - 1 - len(excluded)
	if v2 >= 0 {
		count--
	}
	okWant := []string{fmt.Sprintf("SHRUNK %d %d", count, members)}
	if v2 >= 0 {
		okWant = append(okWant, fmt.Sprintf("SHRUNK %d %d", count+1, members+v2+1))
	}
	if want != "" && !slicesContains(okWant, want) {
		t.Errorf("survivors agree on %q, want one of %q", want, okWant)
	}
	for r := range n {
		if t.Failed() || testing.Verbose() {
			t.Logf("rank %d:\n%s", r, outs[r].String())
		}
	}
}

func slicesContains(v []string, s string) bool {
	for _, x := range v {
		if x == s {
			return true
		}
	}
	return false
}
