package goccl_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

func init() { extraWorkers["health"] = healthWorker }

// spin keeps healthWorker's busy loop from being optimized away.
var spin atomic.Uint64

// healthWorker runs 256-element AllReduces until one fails, then prints
// "error: " and the error and exits 3. It prints "ready" after the second.
// Rank GOCCL_TEST_VICTIM, at its third, does what GOCCL_TEST_HEALTH says:
// "busy" loops in its own code for ever, "close" closes its communicator
// (and stays alive 5 s), "count" calls it with another count; "stop": it
// runs on like the others (the test stops it).
func healthWorker(ctx context.Context, c *goccl.Comm) int {
	mode := os.Getenv("GOCCL_TEST_HEALTH")
	victim, _ := strconv.Atoi(os.Getenv("GOCCL_TEST_VICTIM"))
	buf := make([]float32, 256)
	for i := 1; ; i++ {
		n := len(buf)
		if c.Rank() == victim && i == 3 {
			switch mode {
			case "busy":
				for {
					spin.Add(1)
				}
			case "close":
				c.Close()
				time.Sleep(5 * time.Second)
				return 0
			case "count":
				n = 200
			}
		}
		if err := goccl.AllReduce(ctx, c, buf, buf, n, goccl.Sum); err != nil {
			fmt.Printf("error: %v\n", err)
			return 3
		}
		if i == 2 {
			fmt.Println("ready")
		}
	}
}

// healthRun starts n ranks of healthWorker (mode, victim, GOCCL_TIMEOUT
// timeout, env added), waits until all are ready, stops the victim with
// SIGSTOP in mode "stop", and returns each rank's error line and when it
// came after every rank was ready. It fails the test when a rank other
// than the victim prints no error within timeout + 10 s.
func healthRun(t *testing.T, n int, mode string, victim int, timeout time.Duration, env ...string) ([]string, []time.Duration) {
	addr := freeAddr(t)
	cmds := make([]*exec.Cmd, n)
	lines := make([]string, n)
	at := make([]time.Time, n)
	var mu sync.Mutex
	ready := make(chan int, n)
	waited := make([]chan struct{}, n)
	var readers sync.WaitGroup
	for r := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "GOCCL_TEST_WORKER=health", "GOCCL_TEST_HEALTH="+mode, "GOCCL_TEST_VICTIM="+strconv.Itoa(victim),
			"GOCCL_RANK="+strconv.Itoa(r), "GOCCL_WORLD_SIZE="+strconv.Itoa(n), "GOCCL_LOCAL_RANK="+strconv.Itoa(r),
			"GOCCL_STORE_ADDR="+addr, "GOCCL_TIMEOUT="+timeout.String())
		cmds[r] = exec.Command(cmd.Path, cmd.Args[1:]...)
		cmds[r].Env = append(cmd.Env, env...)
		waited[r] = startWatched(t, cmds[r], &readers, func(line string) {
			if line == "ready" {
				ready <- r
			}
			mu.Lock()
			if strings.HasPrefix(line, "error: ") && lines[r] == "" {
				lines[r], at[r] = line, time.Now()
			}
			mu.Unlock()
		}, nil)
	}
	defer func() {
		for r, c := range cmds {
			c.Process.Kill()
			<-waited[r]
		}
		readers.Wait()
	}()
	want := n
	if mode == "busy" || mode == "close" {
		want-- // the victim stops before op #3
	}
	for range want {
		select {
		case <-ready:
		case <-time.After(60 * time.Second):
			t.Fatalf("ranks not ready after 60 s")
		}
	}
	t0 := time.Now()
	if mode == "stop" {
		time.Sleep(20 * time.Millisecond) // into the next operations
		t0 = time.Now()
		if err := cmds[victim].Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	for r := range n {
		if r == victim && mode != "count" {
			continue
		}
		select {
		case <-waited[r]:
		case <-time.After(timeout + 10*time.Second):
			t.Fatalf("rank %d still running %v after the fault", r, timeout+10*time.Second)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	after := make([]time.Duration, n)
	for r := range n {
		if !at[r].IsZero() {
			after[r] = at[r].Sub(t0)
		}
		t.Logf("rank %d (+%v): %s", r, after[r].Round(time.Millisecond), lines[r])
	}
	return lines, after
}

// TestStuckRankNamed: with GOCCL_TIMEOUT=2s, a rank stopped with SIGSTOP
// (the last one, or rank 0, which serves the store) and a rank busy in its
// own code (it never calls the collective) are named by every other rank's
// error, which says which it is, within the timeout + 1 s (+ 0.5 s of
// slack for a loaded machine); 4 and 8 ranks, shared memory and TCP.
func TestStuckRankNamed(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	const timeout = 2 * time.Second
	for _, tr := range []struct{ name, env string }{{"shm", "GOCCL_SHM_DISABLE=0"}, {"tcp", "GOCCL_SHM_DISABLE=1"}} {
		for _, tc := range []struct {
			mode      string
			n, victim int
			want      string
		}{
			{"stop", 4, 3, "alive but stopped (process "},
			{"stop", 4, 0, "alive but stopped (process "},
			{"busy", 4, 2, "alive but never entered op #5: its last operation, op #4, finished "},
			{"busy", 8, 5, "alive but never entered op #5: its last operation, op #4, finished "},
		} {
			t.Run(fmt.Sprintf("%s/%s/np%d/victim%d", tr.name, tc.mode, tc.n, tc.victim), func(t *testing.T) {
				lines, after := healthRun(t, tc.n, tc.mode, tc.victim, timeout, tr.env)
				for r, line := range lines {
					if r == tc.victim {
						continue
					}
					if want := fmt.Sprintf("rank %d: %s", tc.victim, tc.want); !strings.Contains(line, want) {
						t.Errorf("rank %d: error does not say %q: %s", r, want, line)
					}
					_, blamed, _ := strings.Cut(line, "kept waiting by ")
					for o := range tc.n {
						if o != tc.victim && strings.Contains(blamed, fmt.Sprintf("rank %d: ", o)) {
							t.Errorf("rank %d: blames rank %d too: %s", r, o, line)
						}
					}
					if after[r] > timeout+1500*time.Millisecond {
						t.Errorf("rank %d failed %v after the fault, want within %v + 1 s", r, after[r].Round(time.Millisecond), timeout)
					}
				}
			})
		}
	}
}

// TestCauseRelayed: the rank that finds the problem is named, with what it
// found, in every rank's error, not only its own: a count mismatch at
// rank 2 (the ranks that find it say so themselves), and rank 3 closing
// its communicator before op #5 (Init runs ops #1 and #2); 4 ranks, shared
// memory and TCP.
func TestCauseRelayed(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	for _, tr := range []struct{ name, env string }{{"shm", "GOCCL_SHM_DISABLE=0"}, {"tcp", "GOCCL_SHM_DISABLE=1"}} {
		for _, tc := range []struct {
			mode   string
			victim int
			want   string
		}{
			{"count", 2, " found a count mismatch with rank "},
			{"close", 3, "rank 3 closed its communicator before op #5 (its last was op #4)"},
		} {
			t.Run(tr.name+"/"+tc.mode, func(t *testing.T) {
				lines, _ := healthRun(t, 4, tc.mode, tc.victim, 20*time.Second, tr.env)
				for r, line := range lines {
					if r == tc.victim && tc.mode == "close" {
						continue
					}
					if tc.mode == "count" && strings.Contains(line, "disagrees on count") {
						continue // a rank that found it
					}
					if !strings.Contains(line, tc.want) {
						t.Errorf("rank %d: error does not say %q: %s", r, tc.want, line)
					}
				}
			})
		}
	}
}
