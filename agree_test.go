package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
)

// extraMains are worker modes that make their own communicator (the
// multi-process tests' TestMain calls them before any Init).
var extraMains = map[string]func(context.Context) int{"agree": agreeWorker}

// agreeFlags is rank r's vote in agreement i: every bit set but bit
// (i+r)%64, so the AND shows which ranks voted.
func agreeFlags(i, r int) uint64 { return ^(uint64(1) << ((i + r) % 64)) }

// initMem makes n goroutine ranks' communicators over one MemStore.
func initMem(t *testing.T, n int, opts ...goccl.Option) []*goccl.Comm {
	t.Helper()
	store := rendezvous.NewMemStore()
	t.Cleanup(func() { store.Close() })
	comms := make([]*goccl.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			comms[r], errs[r] = goccl.Init(ctx, append([]goccl.Option{goccl.WithRank(r), goccl.WithWorldSize(n), goccl.WithStore(store)}, opts...)...)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		t.Cleanup(func() { comms[r].Close() })
	}
	return comms
}

// TestAgree: 4 ranks agree on the AND of their flags, twice; then rank 3
// stays silent (as a stopped rank would) and the others agree, at their
// deadline, that it failed; rank 3's own Agree afterwards is refused with
// ErrExcluded, and the next agreement among the others counts it failed
// without waiting.
func TestAgree(t *testing.T) {
	const n = 4
	comms := initMem(t, n)
	type result struct {
		and    uint64
		failed []int
		err    error
	}
	round := func(ranks []int, timeout time.Duration, i int) []result {
		res := make([]result, n)
		var wg sync.WaitGroup
		for _, r := range ranks {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				res[r].and, res[r].failed, res[r].err = comms[r].Agree(ctx, agreeFlags(i, r))
			})
		}
		wg.Wait()
		return res
	}
	all := []int{0, 1, 2, 3}
	for i := range 2 {
		want := agreeFlags(i, 0) & agreeFlags(i, 1) & agreeFlags(i, 2) & agreeFlags(i, 3)
		for r, x := range round(all, 10*time.Second, i) {
			if x.err != nil || x.and != want || len(x.failed) != 0 {
				t.Fatalf("agreement %d, rank %d: %x %v %v, want %x and none failed", i, r, x.and, x.failed, x.err, want)
			}
		}
	}
	start := time.Now()
	res := round([]int{0, 1, 2}, 1500*time.Millisecond, 2)
	took := time.Since(start)
	want := agreeFlags(2, 0) & agreeFlags(2, 1) & agreeFlags(2, 2)
	for _, r := range []int{0, 1, 2} {
		if x := res[r]; x.err != nil || x.and != want || !slices.Equal(x.failed, []int{3}) {
			t.Fatalf("rank 3 silent, rank %d: %x %v %v, want %x and failed [3]", r, x.and, x.failed, x.err, want)
		}
	}
	if took > 1500*time.Millisecond {
		t.Errorf("the agreement without rank 3 took %v, past its 1.5 s deadline", took)
	}
	if _, _, err := comms[3].Agree(context.Background(), agreeFlags(2, 3)); !errors.Is(err, goccl.ErrExcluded) {
		t.Fatalf("rank 3's late Agree: %v, want ErrExcluded", err)
	}
	start = time.Now()
	res = round([]int{0, 1, 2}, 10*time.Second, 3)
	for _, r := range []int{0, 1, 2} {
		if x := res[r]; x.err != nil || !slices.Equal(x.failed, []int{3}) {
			t.Fatalf("next agreement, rank %d: %v %v, want failed [3]", r, x.failed, x.err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("an agreement after rank 3 was counted failed took %v: it waited for it again", d)
	}
}

// agreeWorker runs GOCCL_TEST_ROUNDS agreements over a store served by the
// test (GOCCL_TEST_STORE, with GOCCL_TEST_TOKEN, so a rank's death reaches
// the store at once) and prints each decision: "AGREE i and failed". It
// stops at the first error, printing it.
func agreeWorker(ctx context.Context) int {
	rounds, _ := strconv.Atoi(os.Getenv("GOCCL_TEST_ROUNDS"))
	c, done, err := testInit(ctx, 0)
	if err != nil {
		return 2
	}
	defer done()
	rank := c.Rank()
	for i := range rounds {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		and, failed, err := c.Agree(actx, agreeFlags(i, rank))
		cancel()
		if err != nil {
			fmt.Printf("ERR %d: %v\n", i, err)
			return 1
		}
		fmt.Printf("AGREE %d %x %v\n", i, and, failed)
	}
	return 0
}

// TestAgreeFaultInjection runs agreements on 3 to 8 ranks (processes) and
// kills a random rank at a random moment (SIGKILL, or SIGSTOP and SIGKILL
// later), over and over: no survivor hangs, every survivor prints every
// decision, and all of them, the victim's included, are the same for each
// agreement. Runs alternate between shared-memory and TCP links
// (GOCCL_SHM_DISABLE=1): agreement goes through the store, but a link's
// loss report counts as a rank's death. GOCCL_TEST_AGREE_ITERS sets the
// number of runs (default 6; docs/reliability.md gives a long run's counts).
func TestAgreeFaultInjection(t *testing.T) {
	iters := faultIters(t, "GOCCL_TEST_AGREE_ITERS", 6)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	stops := 0
	for it := range iters {
		n := 3 + rng.IntN(6)
		victim := rng.IntN(n)
		stop := rng.IntN(3) == 0
		delay := time.Duration(rng.IntN(80)) * time.Millisecond
		if stop {
			stops++
		}
		net := []string{"shm", "tcp"}[it%2]
		t.Run(fmt.Sprintf("%d/%s/np%d/victim%d/stop=%v/after%v", it, net, n, victim, stop, delay), func(t *testing.T) {
			// A store of its own per run: the store remembers every loss.
			runAgreeKill(t, newProcs(t, "agree test"), net, n, victim, stop, delay)
		})
	}
	t.Logf("%d runs, %d with SIGSTOP first", iters, stops)
}

// rankEnv is the environment of rank r of n ranks on net's links (shm or
// tcp).
func rankEnv(r, n int, net string) []string {
	return []string{"GOCCL_RANK=" + strconv.Itoa(r), "GOCCL_WORLD_SIZE=" + strconv.Itoa(n), "GOCCL_LOCAL_RANK=" + strconv.Itoa(r), netEnv(net)}
}

// netEnv is the environment setting of net's links (shm or tcp).
func netEnv(net string) string {
	return "GOCCL_SHM_DISABLE=" + map[string]string{"shm": "0", "tcp": "1"}[net]
}

func runAgreeKill(t *testing.T, p *procs, net string, n, victim int, stop bool, delay time.Duration) {
	const rounds = 60
	for r := range n {
		p.start("agree", append(rankEnv(r, n, net), "GOCCL_TEST_ROUNDS="+strconv.Itoa(rounds))...)
	}
	// The victim dies before, during or after the agreements: the delay
	// runs from the moment the first rank has decided its first one.
	p.waitLine(nil, "AGREE ", 30*time.Second)
	time.Sleep(delay)
	sig := syscall.SIGKILL
	if stop {
		sig = syscall.SIGSTOP
	}
	p.signal(victim, sig)
	p.wait(60*time.Second, victim)
	outs := make([]string, n)
	for r := range n {
		outs[r] = p.out(r)
	}
	checkAgreements(t, outs, victim, rounds)
}

// checkAgreements: every survivor decided every agreement, and every rank
// that decided agreement i (the victim too) decided the same.
func checkAgreements(t *testing.T, outs []string, victim, rounds int) {
	t.Helper()
	decided := make([]map[int]string, len(outs))
	excluded := make([]int, len(outs)) // the agreement that counted a survivor failed (-1: none)
	for r := range outs {
		decided[r], excluded[r] = map[int]string{}, -1
		for _, line := range strings.Split(outs[r], "\n") {
			var i int
			if _, err := fmt.Sscanf(line, "AGREE %d", &i); err == nil {
				decided[r][i] = line
			}
			if _, err := fmt.Sscanf(line, "ERR %d:", &i); err == nil && strings.Contains(line, "agreed that this rank had failed") {
				excluded[r] = i
			}
		}
		if r != victim && len(decided[r]) != rounds && excluded[r] != len(decided[r]) {
			t.Errorf("rank %d decided %d of %d agreements:\n%s", r, len(decided[r]), rounds, outs[r])
		}
	}
	// A survivor too slow to vote before the others' deadline is counted
	// failed (a false suspicion, as with ULFM's failure detector): it must
	// get ErrExcluded, and the others' decision must name it.
	for r, i := range excluded {
		if i < 0 || r == victim {
			continue
		}
		t.Logf("rank %d was counted failed in agreement %d (too slow on a loaded machine) and got ErrExcluded", r, i)
		for q := range outs {
			if line, ok := decided[q][i]; ok && !strings.Contains(line[strings.Index(line, "["):], strconv.Itoa(r)) {
				t.Errorf("rank %d got ErrExcluded in agreement %d, but rank %d decided %q", r, i, q, line)
			}
		}
	}
	for i := range rounds {
		want := ""
		for r := range outs {
			got, ok := decided[r][i]
			if !ok {
				continue
			}
			if want == "" {
				want = got
			} else if got != want {
				t.Errorf("agreement %d: rank %d decided %q, another %q", i, r, got, want)
			}
		}
	}
	firstFailed := -1
	for i := rounds - 1; i >= 0; i-- {
		for r := range outs {
			if line, ok := decided[r][i]; ok && !strings.HasSuffix(line, "[]") {
				firstFailed = i
			}
		}
	}
	t.Logf("the victim decided %d agreements; the first to count a rank failed: #%d", len(decided[victim]), firstFailed)
	if t.Failed() {
		for r := range outs {
			t.Logf("rank %d:\n%s", r, outs[r])
		}
	}
}
