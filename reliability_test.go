package goccl_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

// loopWorker runs 64 MiB AllReduces until one fails. It prints "ready" after
// the first two, and on failure "LOST <rank> via <rank>" (or "ERR ...") and
// the error.
func loopWorker(ctx context.Context, c *goccl.Comm) int {
	buf := make([]float32, 16<<20)
	for i := 0; ; i++ {
		if err := goccl.AllReduce(ctx, c, buf, buf, len(buf), goccl.Sum); err != nil {
			var lost *goccl.PeerLostError
			if errors.As(err, &lost) && errors.Is(err, goccl.ErrPeerLost) {
				fmt.Printf("LOST %d via %d\n", lost.Rank, lost.Via)
			} else {
				fmt.Printf("ERR other\n")
			}
			fmt.Printf("error: %v\n", err)
			if c.Err() == nil {
				fmt.Printf("Err() is nil after a failure\n")
			}
			return 3
		}
		if i == 1 {
			fmt.Println("ready")
		}
	}
}

// TestRankKilled kills one rank with SIGKILL in the middle of a loop of
// 64 MiB AllReduces: every survivor must fail within 2 s (the operation
// timeout is 60 s) with an ErrPeerLost error naming the killed rank, over
// shared memory and over TCP, with 2 and 4 ranks.
func TestRankKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	for _, tr := range []struct{ name, env string }{{"shm", "GOCCL_SHM_DISABLE=0"}, {"tcp", "GOCCL_SHM_DISABLE=1"},
		{"roce", "GOCCL_SHM_DISABLE=1 GOCCL_NET=roce"}} {
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/np%d", tr.name, n), func(t *testing.T) {
				testRankKilled(t, n, n-1, strings.Fields(tr.env)...)
			})
		}
	}
}

// startWatched starts cmd and feeds its output (stdout and stderr) line by
// line to onLine, from one goroutine that readers tracks. The returned
// channel is closed once the process has exited (after onExit, if any, ran).
func startWatched(t testing.TB, cmd *exec.Cmd, readers *sync.WaitGroup, onLine func(line string), onExit func()) chan struct{} {
	t.Helper()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readers.Add(1)
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			onLine(sc.Text())
		}
		io.Copy(io.Discard, pr)
	}()
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		if onExit != nil {
			onExit()
		}
		pw.Close()
		close(exited)
	}()
	return exited
}

func testRankKilled(t *testing.T, n, victim int, env ...string) {
	addr := freeAddr(t)
	cmds := make([]*exec.Cmd, n)
	outs := make([]strings.Builder, n)
	var outMu sync.Mutex
	ready := make(chan int, n)
	waited := make([]chan struct{}, n)
	var readers sync.WaitGroup
	for r := 0; r < n; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "GOCCL_TEST_WORKER=loop",
			"GOCCL_RANK="+strconv.Itoa(r), "GOCCL_WORLD_SIZE="+strconv.Itoa(n),
			"GOCCL_LOCAL_RANK="+strconv.Itoa(r), "GOCCL_STORE_ADDR="+addr, "GOCCL_TIMEOUT=60s")
		cmd.Env = append(cmd.Env, env...)
		cmds[r] = cmd
		waited[r] = startWatched(t, cmd, &readers, func(line string) {
			outMu.Lock()
			outs[r].WriteString(line + "\n")
			outMu.Unlock()
			if line == "ready" {
				ready <- r
			}
		}, nil)
	}
	defer func() {
		for _, c := range cmds {
			c.Process.Kill()
		}
	}()
	for i := 0; i < n; i++ {
		select {
		case <-ready:
		case <-time.After(60 * time.Second):
			t.Fatalf("ranks not ready after 60 s")
		}
	}
	time.Sleep(50 * time.Millisecond) // into the next operations
	killed := time.Now()
	if err := cmds[victim].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan int, n)
	for r := 0; r < n; r++ {
		if r == victim {
			continue
		}
		go func(r int) {
			<-waited[r]
			exited <- r
		}(r)
	}
	deadline := time.After(30 * time.Second)
	for i := 0; i < n-1; i++ {
		select {
		case r := <-exited:
			if d := time.Since(killed); d > 2*time.Second {
				t.Errorf("rank %d failed %v after rank %d was killed, want within 2 s", r, d.Round(time.Millisecond), victim)
			}
		case <-deadline:
			t.Fatalf("survivors still running 30 s after rank %d was killed", victim)
		}
	}
	readers.Wait()
	outMu.Lock()
	defer outMu.Unlock()
	for r := 0; r < n; r++ {
		if r == victim {
			continue
		}
		out := outs[r].String()
		t.Logf("rank %d:\n%s", r, out)
		if !strings.Contains(out, fmt.Sprintf("LOST %d ", victim)) {
			t.Errorf("rank %d does not name rank %d as lost:\n%s", r, victim, out)
		}
		if strings.Contains(out, "Err() is nil") {
			t.Errorf("rank %d: Comm.Err() is nil after the failure", r)
		}
	}
}

// TestAbortPendingOperations: Abort from another goroutine makes three
// pending collectives (one running, two queued behind it) return ErrAborted
// at once, not at the communicator's timeout (a minute; the test allows each
// 5 s, for a loaded machine), and later calls fail at once.
func TestAbortPendingOperations(t *testing.T) {
	for _, shmOff := range []string{"0", "1"} {
		t.Setenv("GOCCL_SHM_DISABLE", shmOff)
		release := make(chan struct{})
		errs := goroutineRanks(t, 2, time.Minute, func(c *goccl.Comm) error {
			if c.Rank() == 1 {
				<-release // never joins the collectives
				return nil
			}
			defer close(release)
			results := make(chan error, 3)
			for i := 0; i < 3; i++ {
				go func() {
					buf := make([]float32, 1<<20)
					results <- goccl.AllReduce(context.Background(), c, buf, buf, len(buf), goccl.Sum)
				}()
			}
			time.Sleep(100 * time.Millisecond) // let them block
			if err := c.Err(); err != nil {
				return fmt.Errorf("Err before Abort: %v", err)
			}
			c.Abort()
			for i := 0; i < 3; i++ {
				select {
				case err := <-results:
					if !errors.Is(err, goccl.ErrAborted) {
						return fmt.Errorf("pending op %d: got %v, want ErrAborted", i, err)
					}
				case <-time.After(5 * time.Second):
					return fmt.Errorf("pending op %d still blocked 5 s after Abort", i)
				}
			}
			if !errors.Is(c.Err(), goccl.ErrAborted) {
				return fmt.Errorf("Err after Abort: %v", c.Err())
			}
			buf := make([]float32, 4)
			if err := goccl.AllReduce(context.Background(), c, buf, buf, 4, goccl.Sum); !errors.Is(err, goccl.ErrAborted) {
				return fmt.Errorf("op after Abort: got %v, want ErrAborted", err)
			}
			c.Abort() // idempotent
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("shm_disable=%s: rank %d: %v", shmOff, r, err)
			}
		}
	}
}
