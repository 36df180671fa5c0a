package goccl_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport/tcp"
)

// victimWorker connects to the job's store as its rank would at the start
// of Init, says so, and waits to be killed: a rank that dies during Init.
func victimWorker(ctx context.Context) int {
	env, _, err := rendezvous.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := rendezvous.Connect(ctx, env, "127.0.0.1")
	if err != nil {
		fmt.Fprintln(os.Stderr, "victim:", err)
		return 2
	}
	defer s.Close()
	fmt.Println("connected")
	time.Sleep(time.Hour)
	return 0
}

// checkedWorker runs 200 AllReduces of 1 MiB and checks every result.
func checkedWorker(ctx context.Context, c *goccl.Comm) int {
	n := 1 << 18
	buf := make([]float32, n)
	for it := 0; it < 200; it++ {
		for i := range buf {
			buf[i] = float32(c.Rank() + i%7 + it)
		}
		if err := goccl.AllReduce(ctx, c, buf, buf, n, goccl.Sum); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for i, v := range buf {
			want := float32(0)
			for r := 0; r < c.Size(); r++ {
				want += float32(r + i%7 + it)
			}
			if v != want {
				fmt.Fprintf(os.Stderr, "iteration %d element %d: %v, want %v\n", it, i, v, want)
				return 1
			}
		}
	}
	fmt.Println("ok")
	return 0
}

// startRanks starts n ranks of the test binary in worker mode with the
// given store address; mode(r) picks each rank's mode. It returns the
// commands and a channel of each rank's output lines.
func startRanks(t *testing.T, n int, addr string, mode func(r int) string, extraEnv ...string) ([]*exec.Cmd, []chan string) {
	t.Helper()
	cmds := make([]*exec.Cmd, n)
	lines := make([]chan string, n)
	for r := 0; r < n; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "GOCCL_TEST_WORKER="+mode(r),
			"GOCCL_RANK="+strconv.Itoa(r), "GOCCL_WORLD_SIZE="+strconv.Itoa(n),
			"GOCCL_LOCAL_RANK="+strconv.Itoa(r), "GOCCL_STORE_ADDR="+addr, "GOCCL_TIMEOUT=60s")
		cmd.Env = append(cmd.Env, extraEnv...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
		lines[r] = make(chan string, 100)
		go func(r int) {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines[r] <- sc.Text()
			}
			close(lines[r])
		}(r)
	}
	t.Cleanup(func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	})
	return cmds, lines
}

// TestRankKilledDuringInit: a rank that dies (SIGKILL) after reaching the
// store but before its address card is published makes every other rank's
// Init fail within 2 s, naming it, instead of waiting for the Init deadline
// (60 s here). With 2 and 4 ranks; the victim is the last rank, or rank 0,
// which serves the store. The job has a token, as under goccl run: without
// one, a store connection's close proves nothing (TestForgedRankDeath).
func TestRankKilledDuringInit(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	for _, n := range []int{2, 4} {
		for _, victim := range []int{n - 1, 0} {
			t.Run(fmt.Sprintf("np%d/victim%d", n, victim), func(t *testing.T) {
				testRankKilledDuringInit(t, n, victim)
			})
		}
	}
}

func testRankKilledDuringInit(t *testing.T, n, victim int) {
	cmds, lines := startRanks(t, n, freeAddr(t), func(r int) string {
		if r == victim {
			return "victim"
		}
		return "loop"
	}, "GOCCL_JOB_TOKEN=killed-during-init")
	select {
	case l := <-lines[victim]:
		if l != "connected" {
			t.Fatalf("victim: %q", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the victim did not reach the store")
	}
	time.Sleep(100 * time.Millisecond) // the others are waiting for its card
	killed := time.Now()
	cmds[victim].Process.Kill()
	for r := 0; r < n; r++ {
		if r == victim {
			continue
		}
		var out []string
		for l := range lines[r] {
			out = append(out, l)
		}
		cmds[r].Wait()
		if d := time.Since(killed); d > 2*time.Second {
			t.Errorf("rank %d failed %v after the kill, want within 2 s", r, d.Round(time.Millisecond))
		}
		all := strings.Join(out, "\n")
		if !strings.Contains(all, fmt.Sprintf("rank %d lost", victim)) || cmds[r].ProcessState.ExitCode() == 0 {
			t.Errorf("rank %d (exit %d) does not name rank %d as lost:\n%s", r, cmds[r].ProcessState.ExitCode(), victim, all)
		}
	}
}

// TestJobTokenIntruders: a job with a token completes correctly while
// intruders hit its store and peer ports: clients without the token (one
// even knows the job id and speaks goccl's TCP protocol), clients sending
// random bytes, and clients that connect and stay silent. Each intrusion is
// refused.
func TestJobTokenIntruders(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	const token = "0123456789abcdef-test-token"
	addr := freeAddr(t)
	n := 2
	cmds, lines := startRanks(t, n, addr, func(int) string { return "checked" },
		"GOCCL_JOB_TOKEN="+token, "GOCCL_SHM_DISABLE=1")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var silent []net.Conn
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	var mu sync.Mutex
	refused := map[string]error{}
	note := func(what string, err error) {
		mu.Lock()
		refused[what] = err
		mu.Unlock()
	}
	dialRetry := func(a string) net.Conn {
		for ctx.Err() == nil {
			if c, err := net.Dial("tcp", a); err == nil {
				return c
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("cannot reach %s", a)
		return nil
	}
	attack := func(a, name string) {
		silent = append(silent, dialRetry(a)) // connects and says nothing
		c := dialRetry(a)
		c.Write(randomBytes(4096))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Read(make([]byte, 1)) // the server closes (or answers, then closes)
		for err == nil {
			_, err = c.Read(make([]byte, 64))
		}
		note(name+" random bytes", err)
		c.Close()
	}
	attack(addr, "store")
	// A store client without the token.
	if _, err := rendezvous.DialTCP(ctx, addr); !errors.Is(err, rendezvous.ErrAuth) {
		t.Errorf("store client without the token: want ErrAuth, got %v", err)
	}
	// The operator (who holds the token) reads the peers' addresses and the
	// job id, which an intruder could learn from the environment.
	op, err := rendezvous.DialTCP(ctx, addr, rendezvous.WithToken([]byte(token)))
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	jobID, err := op.Get(ctx, "goccl/jobid")
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < n; r++ {
		card, err := op.Get(ctx, "goccl/card/"+strconv.Itoa(r))
		if err != nil {
			t.Fatal(err)
		}
		peerAddr := strings.Split(string(card), "|")[1]
		attack(peerAddr, fmt.Sprintf("rank %d", r))
		if r == 0 {
			continue
		}
		// Speaks goccl's protocol with the right job id, but has no token.
		ep, err := tcp.Listen(0, net.IPv4(127, 0, 0, 1), string(jobID))
		if err != nil {
			t.Fatal(err)
		}
		_, err = ep.Connect(ctx, r, peerAddr, 1)
		ep.Close()
		if !errors.Is(err, rendezvous.ErrAuth) {
			t.Errorf("peer connection without the token to rank %d: want ErrAuth, got %v", r, err)
		}
	}
	for r := 0; r < n; r++ {
		var out []string
		for l := range lines[r] {
			out = append(out, l)
		}
		if err := cmds[r].Wait(); err != nil || !strings.Contains(strings.Join(out, "\n"), "ok") {
			t.Errorf("rank %d: %v\n%s", r, err, strings.Join(out, "\n"))
		}
	}
	for what, err := range refused {
		if err == nil {
			t.Errorf("%s: connection not closed", what)
		}
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return b
}

// TestSecureLinks runs the collective matrix over TCP links with TLS (keys
// from the job token) and CRC32C checksums, on 3 ranks, and checks that the
// links say so; without a token GOCCL_TLS=1 is refused with a clear error.
func TestSecureLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	outs := spawn(t, 3, "matrix", "GOCCL_SHM_DISABLE=1", "GOCCL_TEST_COUNTS=0,1,7,1000003",
		"GOCCL_JOB_TOKEN=secure-links-test", "GOCCL_TLS=1", "GOCCL_CHECKSUM=1", "GOCCL_DEBUG=INFO")
	for r, out := range outs {
		if !strings.Contains(out, "operations checked") || !strings.Contains(out, "tls crc32c") {
			t.Fatalf("rank %d: no checked operations over tls crc32c links:\n%s", r, out)
		}
	}
	t.Setenv("GOCCL_TLS", "1")
	t.Setenv("GOCCL_JOB_TOKEN", "")
	_, err := goccl.Init(context.Background(), goccl.WithRank(0), goccl.WithWorldSize(2),
		goccl.WithStore(rendezvous.NewMemStore()), goccl.WithTimeout(5*time.Second))
	if !errors.Is(err, goccl.ErrInvalidArgument) || !strings.Contains(err.Error(), "GOCCL_JOB_TOKEN") {
		t.Fatalf("GOCCL_TLS=1 without a token or certificates: %v", err)
	}
}
