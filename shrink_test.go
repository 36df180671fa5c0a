package goccl_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

func init() { extraMains["shrink"] = shrinkWorker }

// shrinkWorker runs AllReduces until one fails (a rank was killed), then
// shrinks and checks an AllReduce on the new communicator, shrinking again
// if that fails too (another rank died); it prints "SHRUNK size sum" with
// the sum of the survivors' original ranks + 1, or "ERR ...".
func shrinkWorker(ctx context.Context) int {
	c, done, err := testInit(ctx, 20*time.Second)
	if err != nil {
		return 2
	}
	defer done()
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
	return shrinkAndCheck(ctx, c, c.Rank()+1)
}

// shrinkAndCheck shrinks c and checks an AllReduce of id (a number of
// this process's, unique in the job) on the new communicator, shrinking
// again if that fails too (another rank died); it prints "SHRUNK size sum"
// with the sum of the members' ids, or "ERR ...", and returns the exit
// status.
func shrinkAndCheck(ctx context.Context, c *goccl.Comm, id int) int {
	return shrinkCheck(ctx, c, id, true)
}

// shrinkCheck is shrinkAndCheck; with retired, c must fail once shrunk
// (Shrink retires a communicator that failed).
func shrinkCheck(ctx context.Context, c *goccl.Comm, id int, retired bool) int {
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
		// them), every element the sum of the survivors' ids.
		x := make([]float32, 1<<20)
		for i := range x {
			x[i] = float32(id)
		}
		err = goccl.AllReduce(ctx, nc, x, x, len(x), goccl.Sum)
		ok := uint64(1)
		if err != nil {
			fmt.Println("FAILED after shrink:", err)
			ok = 0
		}
		// A rank that dies in the AllReduce may fail it on some ranks
		// only: the ranks agree whether it worked everywhere (else they
		// would part, some done, the others shrinking without them).
		all, failed, err := nc.Agree(ctx, ok)
		if err != nil {
			fmt.Println("ERR agree after shrink:", err)
			return 1
		}
		if all != 1 || len(failed) > 0 {
			cur = nc
			continue
		}
		for i, v := range x {
			if v != x[0] {
				fmt.Printf("ERR element %d is %g, element 0 %g\n", i, v, x[0])
				return 1
			}
		}
		if !retired {
			// c may work: an AllReduce on it would change x.
		} else if err := goccl.AllReduce(ctx, c, x, x, 1, goccl.Sum); err == nil {
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
	iters := faultIters(t, "GOCCL_TEST_SHRINK_ITERS", 4)
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
			runShrinkKill(t, newProcs(t, "shrink test"), net, n, v1, v2, stop, delay)
		})
	}
}

// runShrinkKill runs one case of TestShrinkFaultInjection with net's links
// (shm: shared memory, which the shrunk communicator must keep using; tcp:
// GOCCL_SHM_DISABLE=1).
func runShrinkKill(t *testing.T, p *procs, net string, n, v1, v2 int, stop bool, delay time.Duration) {
	for r := range n {
		p.start("shrink", rankEnv(r, n, net)...)
	}
	p.waitAll(nil, "ready", 60*time.Second)
	p.signal(v1, syscall.SIGKILL)
	skip := []int{v1}
	if v2 >= 0 {
		p.waitLine(nil, "FAILED ", 30*time.Second)
		time.Sleep(delay)
		sig := syscall.SIGKILL
		if stop {
			sig = syscall.SIGSTOP
		}
		p.signal(v2, sig)
		skip = append(skip, v2)
	}
	p.wait(90*time.Second, skip...)
	var survivors []int
	for r := range n {
		if r != v1 && r != v2 {
			survivors = append(survivors, r)
		}
	}
	checkShrunk(t, p, survivors, v2, net)
}

// checkShrunk checks that every process of survivors ended in the same
// communicator ("SHRUNK size sum", or "FINAL size sum" where no shrink was
// needed: the sum of its members' ids, a process's id being its index + 1)
// or was counted failed (too slow to vote
// before the others' deadline on a loaded machine, a false suspicion:
// ErrExcluded) and is not in it; maybe (-1: none) is a process that may
// have shrunk with them before it died. With net, every link of the shrunk
// communicator must be of that kind (shm, tcp).
func checkShrunk(t *testing.T, p *procs, survivors []int, maybe int, net string) {
	t.Helper()
	want, members, excluded := "", 0, []int{}
	for _, r := range survivors {
		out := p.out(r)
		i := strings.Index(out, "SHRUNK ")
		if i < 0 {
			i = strings.Index(out, "FINAL ")
		}
		if i < 0 {
			if strings.Contains(out, "agreed that this rank had failed") {
				excluded = append(excluded, r)
				t.Logf("process %d was counted failed (too slow on a loaded machine) and got ErrExcluded", r)
				continue
			}
			t.Errorf("process %d did not shrink:\n%s", r, out)
			continue
		}
		members += r + 1
		if j := strings.Index(out, "LINKS "); j >= 0 && net != "" {
			links := strings.TrimSpace(strings.SplitN(out[j+len("LINKS "):], "\n", 2)[0])
			for _, name := range strings.Split(links, ",") {
				if name != "" && !strings.HasPrefix(name, net) {
					t.Errorf("process %d: the shrunk communicator's links are %s, want all %s", r, links, net)
					break
				}
			}
		}
		got := strings.TrimSpace(strings.SplitN(out[i:], "\n", 2)[0])
		if want == "" {
			want = got
		} else if got != want {
			t.Errorf("process %d: %q, another survivor %q", r, got, want)
		}
	}
	count := len(survivors) - len(excluded)
	kind, _, _ := strings.Cut(want, " ")
	okWant := []string{fmt.Sprintf("%s %d %d", kind, count, members)}
	if maybe >= 0 {
		okWant = append(okWant, fmt.Sprintf("%s %d %d", kind, count+1, members+maybe+1))
	}
	if want != "" && !slicesContains(okWant, want) {
		t.Errorf("survivors agree on %q, want one of %q", want, okWant)
	}
	if t.Failed() || testing.Verbose() {
		p.logAll()
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
