package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
)

func init() {
	extraMains["grow"] = growWorker
	extraMains["join"] = joinWorker
}

// testStore dials the store the test serves (GOCCL_TEST_STORE, with
// GOCCL_TEST_TOKEN) as rank (-1: a joiner, no rank yet).
func testStore(ctx context.Context, rank int) (*rendezvous.TCPStore, error) {
	opts := []rendezvous.Option{rendezvous.WithToken([]byte(os.Getenv("GOCCL_TEST_TOKEN")))}
	if rank >= 0 {
		opts = append(opts, rendezvous.WithRank(rank))
	}
	return rendezvous.DialTCP(ctx, os.Getenv("GOCCL_TEST_STORE"), opts...)
}

// reportGrown runs an AllReduce of rank+1 on c and prints "GROWN size rank sum".
func reportGrown(ctx context.Context, c *goccl.Comm) int {
	x := []float32{float32(c.Rank() + 1)}
	if err := goccl.AllReduce(ctx, c, x, x, 1, goccl.Sum); err != nil {
		fmt.Println("ERR allreduce:", err)
		return 1
	}
	fmt.Printf("GROWN %d %d %g\n", c.Size(), c.Rank(), x[0])
	return 0
}

// growWorker: a rank of GOCCL_WORLD_SIZE ranks; with GOCCL_TEST_KILL set
// it runs AllReduces until one fails (the test kills a rank) and shrinks
// first; then it grows by GOCCL_TEST_GROW ranks and reports.
func growWorker(ctx context.Context) int {
	k, _ := strconv.Atoi(os.Getenv("GOCCL_TEST_GROW"))
	c, done, err := testInit(ctx, 30*time.Second)
	if err != nil {
		return 2
	}
	defer done()
	if os.Getenv("GOCCL_TEST_KILL") != "" {
		buf := make([]float32, 1<<14)
		for i := 0; ; i++ {
			if err := goccl.AllReduce(ctx, c, buf, buf, len(buf), goccl.Sum); err != nil {
				break
			}
			if i == 2 {
				fmt.Println("ready")
			}
		}
		nc := shrinkOrSay(ctx, c)
		if nc == nil {
			return 1
		}
		defer nc.Close()
		c = nc
		fmt.Println("shrunk")
	}
	start := time.Now()
	nc, err := c.Grow(ctx, k)
	if err != nil {
		fmt.Println("ERR grow:", err)
		return 1
	}
	defer nc.Close()
	fmt.Printf("grow took %v\n", time.Since(start))
	return reportGrown(ctx, nc)
}

// shrinkOrSay is c.Shrink's communicator, or nil once it printed the error.
func shrinkOrSay(ctx context.Context, c *goccl.Comm) *goccl.Comm {
	nc, err := c.Shrink(ctx)
	if err != nil {
		fmt.Println("ERR shrink:", err)
		return nil
	}
	return nc
}

// joinWorker joins a growing communicator and reports.
func joinWorker(ctx context.Context) int {
	store, err := testStore(ctx, -1)
	if err != nil {
		fmt.Println("ERR dial:", err)
		return 2
	}
	defer store.Close()
	c, err := goccl.Join(ctx, goccl.WithStore(store), goccl.WithTimeout(30*time.Second))
	if err != nil {
		fmt.Println("ERR join:", err)
		return 1
	}
	defer c.Close()
	return reportGrown(ctx, c)
}

// checkGrown waits for the processes (all but skip) and checks that they
// reported one grown communicator of size want: every rank once, the sum
// of rank+1.
func checkGrown(t *testing.T, p *procs, skip, want int) {
	t.Helper()
	if skip >= 0 {
		p.wait(90*time.Second, skip)
	} else {
		p.wait(90 * time.Second)
	}
	var ranks []int
	for i := range p.ps {
		if i == skip {
			continue
		}
		var size, rank int
		var sum float64
		out := p.out(i)
		j := strings.Index(out, "GROWN ")
		if j < 0 {
			t.Errorf("process %d did not grow:\n%s", i, out)
			continue
		}
		fmt.Sscanf(out[j:], "GROWN %d %d %g", &size, &rank, &sum)
		if size != want || sum != float64(want*(want+1)/2) {
			t.Errorf("process %d: size %d sum %g, want %d and %d", i, size, sum, want, want*(want+1)/2)
		}
		ranks = append(ranks, rank)
	}
	slices.Sort(ranks)
	for r := range ranks {
		if ranks[r] != r {
			t.Errorf("ranks of the grown communicator %v, want 0 to %d once each", ranks, want-1)
			break
		}
	}
	if t.Failed() || testing.Verbose() {
		p.logAll()
	}
}

// TestGrow: 3 ranks grow by 2 joiners, started before and after the ranks
// call Grow; all 5 agree on the grown communicator.
func TestGrow(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	p := newProcs(t, "grow test")
	p.start("join")
	for r := range 3 {
		p.start("grow", "GOCCL_RANK="+strconv.Itoa(r), "GOCCL_WORLD_SIZE=3", "GOCCL_TEST_GROW=2")
	}
	time.Sleep(200 * time.Millisecond)
	p.start("join")
	checkGrown(t, p, -1, 5)
}

// TestShrinkThenGrow is elastic recovery: 4 ranks, one killed (SIGKILL)
// mid-AllReduce; the others shrink to 3, a replacement joins, and they
// grow back to 4.
func TestShrinkThenGrow(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	p := newProcs(t, "grow test")
	for r := range 4 {
		p.start("grow", append(rankEnv(r, 4, "shm"), "GOCCL_TEST_GROW=1", "GOCCL_TEST_KILL=1")...)
	}
	p.waitAll(nil, "ready", 60*time.Second)
	const victim = 2
	p.signal(victim, syscall.SIGKILL)
	p.start("join")
	checkGrown(t, p, victim, 4)
}

// TestJoiningInit: GOCCL_JOIN=1 (goccl run --max-restarts's replacement
// of a failed rank) makes Joining true and Init fail, naming Join.
func TestJoiningInit(t *testing.T) {
	t.Setenv("GOCCL_JOIN", "0")
	if goccl.Joining() {
		t.Error("Joining with GOCCL_JOIN=0")
	}
	t.Setenv("GOCCL_JOIN", "1")
	if !goccl.Joining() {
		t.Error("not Joining with GOCCL_JOIN=1")
	}
	_, err := goccl.Init(context.Background(), goccl.WithWorldSize(1))
	if !errors.Is(err, goccl.ErrInvalidArgument) || !strings.Contains(err.Error(), "call goccl.Join, not Init") {
		t.Errorf("Init with GOCCL_JOIN=1: %v, want ErrInvalidArgument naming goccl.Join", err)
	}
}

func init() {
	extraMains["growfi"] = growFIWorker
	extraMains["joinfi"] = joinFIWorker
}

// growFIWorker: a rank of GOCCL_WORLD_SIZE ranks runs 3 AllReduces, prints
// "ready" and waits for SIGUSR1; then the ranks agree on who is alive
// (shrinking past the dead), grow by GOCCL_TEST_GROW ranks and print "GROW
// ok", or "GROW failed: ..." and go on (regrow); on the grown communicator
// checkGrownComm runs. GOCCL_TEST_ID is the
// process's id in the sums.
func growFIWorker(ctx context.Context) int {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	c, done, err := testInit(ctx, 8*time.Second)
	if err != nil {
		return 2
	}
	defer done()
	id, _ := strconv.Atoi(os.Getenv("GOCCL_TEST_ID"))
	k, _ := strconv.Atoi(os.Getenv("GOCCL_TEST_GROW"))
	buf := make([]float32, 1<<14)
	for range 3 {
		if err := goccl.AllReduce(ctx, c, buf, buf, len(buf), goccl.Sum); err != nil {
			fmt.Println("ERR warm-up:", err)
			return 1
		}
	}
	fmt.Println("ready")
	<-usr1
	// Grow needs every live rank of c: the ranks agree on who is.
	start := time.Now()
	if _, failed, err := c.Agree(ctx, 1); err != nil {
		fmt.Println("ERR agree:", err)
		return 1
	} else if len(failed) > 0 {
		nc := shrinkOrSay(ctx, c)
		if nc == nil {
			return 1
		}
		defer nc.Close()
		c = nc
		fmt.Printf("shrunk first after %v\n", time.Since(start))
	}
	fmt.Println("calling Grow")
	start = time.Now()
	gc, err := c.Grow(ctx, k)
	if err != nil {
		fmt.Printf("GROW failed after %v: %v\n", time.Since(start), err)
		return regrow(ctx, c, id)
	}
	defer gc.Close()
	fmt.Printf("GROW ok after %v\n", time.Since(start))
	return checkGrownComm(ctx, gc, id)
}

// regrow goes on after a failed Grow: the ranks shrink past any dead one
// and grow again by the joiners that Grow did not admit (its rank 0 died
// first), printing "REGROW ok" or "REGROW failed: ..."; checkGrownComm
// runs on the communicator they end in.
func regrow(ctx context.Context, c *goccl.Comm, id int) int {
	nc := shrinkOrSay(ctx, c)
	if nc == nil {
		return 1
	}
	defer nc.Close()
	waiting := []float32{0}
	if nc.Rank() == 0 {
		n, err := nc.JoinersWaiting(ctx)
		if err != nil {
			fmt.Println("ERR joiners waiting:", err)
			return 1
		}
		waiting[0] = float32(n)
	}
	if err := goccl.Broadcast(ctx, nc, waiting, waiting, 1, 0); err != nil {
		fmt.Println("ERR broadcast:", err)
		return 1
	}
	if waiting[0] > 0 {
		gc, err := nc.Grow(ctx, int(waiting[0]))
		if err == nil {
			defer gc.Close()
			fmt.Println("REGROW ok")
			return checkGrownComm(ctx, gc, id)
		}
		fmt.Println("REGROW failed:", err)
	}
	return checkGrownComm(ctx, nc, id)
}

// joinFIWorker joins (within 60 s), prints "JOIN ok" or "JOIN failed: ...",
// and runs checkGrownComm.
func joinFIWorker(ctx context.Context) int {
	store, err := testStore(ctx, -1)
	if err != nil {
		fmt.Println("ERR dial:", err)
		return 2
	}
	defer store.Close()
	id, _ := strconv.Atoi(os.Getenv("GOCCL_TEST_ID"))
	jctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	start := time.Now()
	c, err := goccl.Join(jctx, goccl.WithStore(store), goccl.WithTimeout(8*time.Second))
	if err != nil {
		fmt.Printf("JOIN failed after %v: %v\n", time.Since(start), err)
		return 1
	}
	defer c.Close()
	fmt.Printf("JOIN ok after %v\n", time.Since(start))
	return checkGrownComm(ctx, c, id)
}

// checkGrownComm runs an AllReduce of id on the grown communicator and
// has the ranks agree that it worked everywhere: then it prints "FINAL
// size sum"; else (a rank died after Grow) they shrink (shrinkCheck).
func checkGrownComm(ctx context.Context, gc *goccl.Comm, id int) int {
	x := []float32{float32(id)}
	err := goccl.AllReduce(ctx, gc, x, x, 1, goccl.Sum)
	ok := uint64(1)
	if err != nil {
		fmt.Println("FAILED on the grown communicator:", err)
		ok = 0
	}
	all, failed, err := gc.Agree(ctx, ok)
	if err != nil {
		fmt.Println("ERR agree on the grown communicator:", err)
		return 1
	}
	if all == 1 && len(failed) == 0 {
		fmt.Printf("FINAL %d %g\n", gc.Size(), x[0])
		return 0
	}
	return shrinkCheck(ctx, gc, id, true)
}

// TestGrowFaultInjection: 3 to 8 ranks grow by 1 or 2 joiners; a random
// process (an old rank or a joiner) is SIGKILLed, or SIGSTOPped then
// SIGKILLed up to a second later, before Grow is called (a joiner after it
// took its ticket), inside Grow, or after it returned. Grow's guarantee,
// asserted: every surviving old rank gets the same result, the grown
// communicator or an error (but one counted failed, ErrExcluded); after a
// failed Grow the old ranks shrink and grow again by the joiners it did not
// admit (its rank 0 died first), and every joiner it admitted that lives
// gets an error within 5 s of the last old rank's; after a successful one
// every survivor ends in the same communicator (checked by an AllReduce,
// shrinking again if a member died after Grow). No process hangs. Runs
// alternate between shared memory and TCP. GOCCL_TEST_GROW_ITERS sets the
// runs (default 4).
func TestGrowFaultInjection(t *testing.T) {
	iters := faultIters(t, "GOCCL_TEST_GROW_ITERS", 4)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 4))
	for it := range iters {
		n, k := 3+rng.IntN(6), 1+rng.IntN(2)
		fc := faultCase{revoker: -1, victim: rng.IntN(n + k), stop: rng.IntN(3) == 0,
			when:  []string{"before", "inside", "after"}[rng.IntN(3)],
			delay: time.Duration(rng.IntN(30)) * time.Millisecond, stopFor: time.Duration(100+rng.IntN(900)) * time.Millisecond}
		net := []string{"shm", "tcp"}[it%2]
		t.Run(fmt.Sprintf("%d/%s/np%d+%d/%v", it, net, n, k, fc), func(t *testing.T) {
			runGrowKill(t, newProcs(t, "grow test"), net, n, k, fc)
		})
	}
}

// joinersWaiting waits until k joiners have taken a ticket in the store
// the test serves (the counter grow.go keeps: goccl/join/tickets).
func joinersWaiting(t *testing.T, p *procs, k int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := rendezvous.DialTCP(ctx, p.addr, rendezvous.WithToken([]byte(p.token)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for {
		n, err := s.Add(ctx, "goccl/join/tickets", 0)
		if err != nil {
			p.hung(fmt.Sprintf("%d joiners took no ticket: %v", k, err))
		}
		if int(n) >= k {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func runGrowKill(t *testing.T, p *procs, net string, n, k int, fc faultCase) {
	for r := range n {
		p.start("growfi", append(rankEnv(r, n, net), "GOCCL_TEST_ID="+strconv.Itoa(r+1), "GOCCL_TEST_GROW="+strconv.Itoa(k))...)
	}
	for j := range k {
		p.start("joinfi", netEnv(net), "GOCCL_TEST_ID="+strconv.Itoa(n+j+1))
	}
	olds := make([]int, n)
	for r := range olds {
		olds[r] = r
	}
	p.waitAll(olds, "ready", 60*time.Second)
	joinersWaiting(t, p, k)
	grow := func() {
		for r := range n {
			p.signal(r, syscall.SIGUSR1)
		}
	}
	var reached func()
	switch fc.when {
	case "inside":
		reached = func() { p.waitLine(olds, "calling Grow", 30*time.Second) }
	case "after":
		reached = func() {
			p.waitLine([]int{fc.victim}, map[bool]string{true: "GROW ", false: "JOIN "}[fc.victim < n], 60*time.Second)
		}
	}
	fc.inject(p, grow, reached)
	p.wait(90*time.Second, fc.victim)
	checkGrowOutcome(t, p, n, k, fc)
}

// checkGrowOutcome checks one run of TestGrowFaultInjection (see there).
func checkGrowOutcome(t *testing.T, p *procs, n, k int, fc faultCase) {
	var olds, survivors []int
	grown, failed := 0, 0
	var lastFail time.Time
	for r := range n {
		if r == fc.victim {
			continue
		}
		line, at, ok := p.lineAt(r, "GROW ")
		switch {
		case !ok:
			t.Errorf("old rank %d: Grow gave no result", r)
		case strings.HasPrefix(line, "GROW ok"):
			grown++
		case strings.Contains(line, "agreed that this rank had failed"):
			t.Logf("old rank %d was counted failed (too slow on a loaded machine) and got ErrExcluded", r)
		default:
			failed++
			if at.After(lastFail) {
				lastFail = at
			}
		}
		olds = append(olds, r)
		if fc.when == "before" && !fc.stop && fc.victim < n {
			// The store reports the dead rank: the agreement before Grow
			// (its vote deadline 7.2 s) learns of it at once.
			line, _, _ := p.lineAt(r, "shrunk first after ")
			if d, err := time.ParseDuration(strings.TrimPrefix(line, "shrunk first after ")); err != nil || d > 4*time.Second {
				t.Errorf("old rank %d: %q, want a shrink within 4 s of the kill", r, line)
			}
		}
	}
	survivors = append(survivors, olds...)
	regrown := false
	for _, r := range olds {
		if _, _, ok := p.lineAt(r, "REGROW ok"); ok {
			regrown = true
		}
	}
	if grown > 0 && failed > 0 {
		t.Errorf("Grow worked on %d old ranks and failed on %d", grown, failed)
	}
	for i := n; i < n+k; i++ {
		if i == fc.victim {
			continue
		}
		line, at, ok := p.lineAt(i, "JOIN ")
		switch {
		case !ok:
			t.Errorf("joiner %d: Join gave no result", i)
		case failed > 0 && regrown && strings.HasPrefix(line, "JOIN ok"):
			// Not admitted by the Grow that failed: by the next one.
		case failed > 0 && !strings.HasPrefix(line, "JOIN failed"):
			t.Errorf("joiner %d: %q, but Grow failed on the old ranks", i, line)
		case failed > 0 && at.Sub(lastFail) > 5*time.Second:
			t.Errorf("joiner %d learnt that Grow failed %v after the last old rank, want within 5 s", i, at.Sub(lastFail).Round(time.Millisecond))
		case grown > 0 && !strings.HasPrefix(line, "JOIN ok"):
			t.Errorf("joiner %d: %q, but Grow worked on the old ranks", i, line)
		}
		if strings.HasPrefix(line, "JOIN ok") {
			survivors = append(survivors, i)
		}
	}
	// The victim may have ended in the communicator before it died.
	maybe := fc.victim
	if fc.when == "before" || (failed > 0 && fc.victim >= n) {
		maybe = -1
	}
	checkShrunk(t, p, survivors, maybe, "")
}
