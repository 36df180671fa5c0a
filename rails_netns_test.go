package goccl_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/cluster"
	"github.com/goccl/goccl/internal/cluster/clustertest"
)

func init() { extraWorkers["railloop"] = railLoopWorker }

func mustRate(s string) cluster.Rate {
	r, err := cluster.ParseRate(s)
	if err != nil {
		panic(err)
	}
	return r
}

// railLoopWorker runs GOCCL_TEST_OPS AllReduces of 16 Mi floats (64 MiB),
// each rank's input (rank+1)·(i mod 251), checks every element of every
// result, and prints "ok N" after operation N; it prints "error: " and
// exits 3 on a failure.
func railLoopWorker(ctx context.Context, c *goccl.Comm) int {
	ops, _ := strconv.Atoi(os.Getenv("GOCCL_TEST_OPS"))
	const n = 16 << 20
	buf := make([]float32, n)
	world := float32(c.Size() * (c.Size() + 1) / 2)
	for op := 1; op <= ops; op++ {
		for i := range buf {
			buf[i] = float32(c.Rank()+1) * float32(i%251)
		}
		if err := goccl.AllReduce(ctx, c, buf, buf, n, goccl.Sum); err != nil {
			fmt.Printf("error: %v\n", err)
			return 3
		}
		for i, v := range buf {
			if want := world * float32(i%251); v != want {
				fmt.Printf("error: operation %d: element %d is %v, want %v\n", op, i, v, want)
				return 3
			}
		}
		fmt.Printf("ok %d\n", op)
	}
	return 0
}

// TestNetnsRails runs the collectives matrix on a namespace cluster of
// hosts with two rails each (goccl cluster up --rails 2), one rank per
// host, over TCP and over RoCE, with GOCCL_SOCKET_IFNAME naming both
// rails: every rank must link each peer over both (its INFO line names
// eth0 and eth1), the results must be right (the matrix checks every
// element), and each rail must have carried a fair share of the bytes
// (the striped messages put half of theirs on each).
func TestNetnsRails(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace test; skipped with -short")
	}
	if why := clustertest.Skip(); why != "" {
		t.Skip(why)
	}
	const n = 2
	c := clustertest.New(t, cluster.Config{Hosts: n, Rails: 2})
	for _, tr := range []struct{ name, net, via string }{
		{"tcp", "socket", "tcp"},
		{"roce", "roce", "NET/RoCE"},
	} {
		t.Run(tr.name, func(t *testing.T) {
			before, err := c.Stats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			store := c.Hosts[0].Addr.String() + ":" + strconv.Itoa(29530+len(tr.name))
			cmds := make([]*exec.Cmd, n)
			for r := range n {
				cmds[r] = c.Command(ctx, r, os.Args[0], "-test.run=^$")
				cmds[r].Env = append(os.Environ(), "GOCCL_TEST_WORKER=matrix", "GOCCL_TEST_COUNTS=1,1000003",
					"GOCCL_RANK="+strconv.Itoa(r), "GOCCL_WORLD_SIZE="+strconv.Itoa(n), "GOCCL_LOCAL_RANK=0",
					"GOCCL_STORE_ADDR="+store, "GOCCL_SOCKET_IFNAME==eth0,eth1", "GOCCL_SHM_DISABLE=1",
					"GOCCL_NET="+tr.net, "GOCCL_DEBUG=INFO", "GOCCL_TIMEOUT=120s")
			}
			outs := spawnCmds(t, cmds)
			via := regexp.MustCompile(`peer \d+ via 2 rails \[eth0 ` + regexp.QuoteMeta(tr.via) + `[^;]*; eth1 ` + regexp.QuoteMeta(tr.via))
			for r, out := range outs {
				if !strings.Contains(out, "operations checked") {
					t.Fatalf("rank %d did not report:\n%s", r, out)
				}
				if !via.MatchString(out) {
					t.Errorf("rank %d: no INFO line matching %q:\n%s", r, via, out)
				}
			}
			after, err := c.Stats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for h := range after {
				var sent [2]uint64
				for i := range sent {
					sent[i] = after[h].Links[i].TxBytes - before[h].Links[i].TxBytes
				}
				t.Logf("%s sent %d bytes on rail 0, %d on rail 1", c.Hosts[h].Name, sent[0], sent[1])
				lo, hi := min(sent[0], sent[1]), max(sent[0], sent[1])
				if hi < 10<<20 || float64(lo) < 0.8*float64(hi) {
					t.Errorf("%s sent %d bytes on rail 0 and %d on rail 1: want both more than 10 MiB and within 20%% of each other",
						c.Hosts[h].Name, sent[0], sent[1])
				}
			}
		})
	}
}

// TestNetnsRailCut: two hosts with two rails of 1 Gbit/s each, one rank
// on each, loop over checked 64 MiB AllReduces over TCP striped over both
// rails. Host 0's rail 1 is cut at its switch port in the middle of the
// loop, for 2 s, then restored. Each rank must warn about rail eth1 and
// its peer within 1 s of the cut; rail eth1's traffic must move to eth0,
// so that operations complete during the cut; after the restore each
// rank must say that the rail acknowledges again, its traffic must move
// back and eth1 carry data again; every operation must end with the
// right result.
func TestNetnsRailCut(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace test; skipped with -short")
	}
	if why := clustertest.Skip(); why != "" {
		t.Skip(why)
	}
	for _, net := range []string{"socket", "roce"} {
		t.Run(net, func(t *testing.T) { railCut(t, net) })
	}
}

func railCut(t *testing.T, net string) {
	const n, ops = 2, 30
	c := clustertest.New(t, cluster.Config{Hosts: n, Rails: 2, Rate: mustRate("1gbit")})
	store := c.Hosts[0].Addr.String() + ":29541"
	var (
		mu                   sync.Mutex
		outs                 = make([]strings.Builder, n)
		warned               = make([]time.Time, n)
		back                 = make([]time.Time, n)
		okCount              = make([]int, n)
		movedAway, movedBack = make([]int, n), make([]int, n)
		okAt                 = make([][]time.Time, n)
		readers              sync.WaitGroup
	)
	progress := make(chan struct{}, 1000)
	waited := make([]chan struct{}, n)
	cmds := make([]*exec.Cmd, n)
	for r := range n {
		cmds[r] = c.Command(context.Background(), r, os.Args[0], "-test.run=^$")
		cmds[r].Env = append(os.Environ(), "GOCCL_TEST_WORKER=railloop", "GOCCL_TEST_OPS="+strconv.Itoa(ops),
			"GOCCL_RANK="+strconv.Itoa(r), "GOCCL_WORLD_SIZE="+strconv.Itoa(n), "GOCCL_LOCAL_RANK=0",
			"GOCCL_STORE_ADDR="+store, "GOCCL_SOCKET_IFNAME==eth0,eth1", "GOCCL_SHM_DISABLE=1", "GOCCL_TIMEOUT=60s", "GOCCL_NET="+net)
		cmds[r].SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		waited[r] = startWatched(t, cmds[r], &readers, func(line string) {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			outs[r].WriteString(now.Format("15:04:05.000 ") + line + "\n")
			switch {
			case strings.Contains(line, "rail eth1 to peer "+strconv.Itoa(1-r)+": nothing acknowledged") && warned[r].IsZero():
				warned[r] = now
			case strings.Contains(line, "rail eth1 to peer "+strconv.Itoa(1-r)+": acknowledging again") && back[r].IsZero():
				back[r] = now
			case strings.Contains(line, "rail eth1's traffic to peer "+strconv.Itoa(1-r)+" is now over rail eth0"):
				movedAway[r]++
			case strings.Contains(line, "rail eth1's traffic to peer "+strconv.Itoa(1-r)+" is back on its own rail"):
				movedBack[r]++
			case strings.HasPrefix(line, "ok "):
				okCount[r]++
				okAt[r] = append(okAt[r], now)
				progress <- struct{}{}
			}
		}, nil)
	}
	t.Cleanup(func() {
		for r, cmd := range cmds {
			cmd.Process.Kill()
			<-waited[r]
		}
		readers.Wait()
	})
	output := func() string {
		mu.Lock()
		defer mu.Unlock()
		var b strings.Builder
		for r := range outs {
			fmt.Fprintf(&b, "--- rank %d\n%s", r, outs[r].String())
		}
		return b.String()
	}
	oks := func() int {
		mu.Lock()
		defer mu.Unlock()
		return min(okCount[0], okCount[1])
	}
	waitOK := func(k int, what string) {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for oks() < k {
			select {
			case <-progress:
			case <-waited[0]:
				t.Fatalf("%s: rank 0 exited after %d operations:\n%s", what, oks(), output())
			case <-waited[1]:
				t.Fatalf("%s: rank 1 exited after %d operations:\n%s", what, oks(), output())
			case <-deadline:
				t.Fatalf("%s: %d operations done after 60 s, want %d:\n%s", what, oks(), k, output())
			}
		}
	}
	port := func(state string) {
		t.Helper()
		if out, err := exec.Command("ip", "-n", c.Switch, "link", "set", c.Hosts[0].Links[1].Port, state).CombinedOutput(); err != nil {
			t.Fatalf("ip link set %s %s: %v: %s", c.Hosts[0].Links[1].Port, state, err, out)
		}
	}
	railSent := func() uint64 {
		t.Helper()
		st, err := c.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st[0].Links[1].TxBytes + st[1].Links[1].TxBytes
	}

	waitOK(2, "before the cut")
	cut := time.Now()
	atCut := oks()
	port("down")
	time.Sleep(2 * time.Second)
	restored := time.Now()
	duringCut := oks() - atCut
	port("up")
	afterRestore := railSent()
	for r := range cmds {
		select {
		case <-waited[r]:
		case <-time.After(120 * time.Second):
			t.Fatalf("rank %d still running 120 s after the restore:\n%s", r, output())
		}
		if code := cmds[r].ProcessState.ExitCode(); code != 0 {
			t.Fatalf("rank %d exited with %d:\n%s", r, code, output())
		}
	}
	if oks() != ops {
		t.Fatalf("%d operations completed, want %d:\n%s", oks(), ops, output())
	}
	mu.Lock()
	warned, back = slices.Clone(warned), slices.Clone(back)
	mu.Unlock()
	for r := range n {
		if warned[r].IsZero() {
			t.Errorf("rank %d never warned about rail eth1", r)
		} else if d := warned[r].Sub(cut); d > time.Second {
			t.Errorf("rank %d warned about rail eth1 %v after the cut, want at most 1 s", r, d)
		} else {
			t.Logf("rank %d warned %v after the cut", r, d.Round(time.Millisecond))
		}
		if back[r].IsZero() {
			t.Errorf("rank %d never said rail eth1 acknowledges again", r)
		} else {
			t.Logf("rank %d saw the rail back %v after the restore", r, back[r].Sub(restored).Round(time.Millisecond))
		}
	}
	mu.Lock()
	away, home := slices.Clone(movedAway), slices.Clone(movedBack)
	mu.Unlock()
	for r := range n {
		if away[r] != 1 || home[r] != 1 {
			t.Errorf("rank %d: rail eth1's traffic moved to eth0 %d times and back %d times, want once each", r, away[r], home[r])
		}
	}
	// 64 MiB each way take about 0.3 s over both rails at 1 Gbit/s and
	// twice that over one: the operation the cut caught and at least
	// one more end while eth1 is down.
	if duringCut < 2 {
		t.Errorf("%d operations completed during the 2 s cut, want at least 2: the traffic did not move to eth0", duringCut)
	} else {
		t.Logf("%d operations completed during the 2 s cut", duringCut)
	}
	mu.Lock()
	var longest time.Duration
	for k := 1; k < len(okAt[0]); k++ {
		longest = max(longest, okAt[0][k].Sub(okAt[0][k-1]))
	}
	mu.Unlock()
	t.Logf("longest operation on rank 0: %v", longest.Round(time.Millisecond))
	if got := railSent() - afterRestore; got < 32<<20 {
		t.Errorf("rail 1 carried %d bytes after the restore, want at least 32 MiB: the restored rail is not used", got)
	}
	if t.Failed() {
		t.Log(output())
	}
}
