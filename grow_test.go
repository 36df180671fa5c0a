package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"os"
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
		nc, err := c.Shrink(ctx)
		if err != nil {
			fmt.Println("ERR shrink:", err)
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
