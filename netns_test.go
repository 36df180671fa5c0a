package goccl_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestNetnsLinkCut runs two ranks in two network namespaces joined by a veth
// pair, forced onto TCP, looping over 64 MiB AllReduces (worker mode "loop"),
// and cuts the link in the middle of an operation: no packet is lost loudly
// (no RST, no FIN), the sockets just stall, so it is the operation timeout
// (GOCCL_TIMEOUT=3s) that must fire. Both ranks must return an error naming
// the other rank (a deadline error or a lost peer) and exit within the
// timeout plus a margin of the cut, not hang.
//
// It needs root and iproute2 with network namespace support, and skips with
// a message otherwise.
func TestNetnsLinkCut(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace test; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("network namespace test needs root")
	}
	ipCmd, err := exec.LookPath("ip")
	if err != nil {
		t.Skipf("network namespace test needs the ip command (iproute2): %v", err)
	}
	ip := func(args ...string) error {
		out, err := exec.Command(ipCmd, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}

	const (
		timeout = 3 * time.Second // GOCCL_TIMEOUT
		margin  = 5 * time.Second // allowed on top of it after the cut
		// The namespaces are private, so neither the subnet nor the port can
		// collide with anything on the host.
		port = "29517"
	)
	pid := os.Getpid()
	ns := [2]string{fmt.Sprintf("goccl-test-%d-a", pid), fmt.Sprintf("goccl-test-%d-b", pid)}
	veth := [2]string{fmt.Sprintf("gcla%d", pid), fmt.Sprintf("gclb%d", pid)} // at most 15 bytes
	addr := [2]string{"10.213.77.1", "10.213.77.2"}

	for _, n := range ns {
		if err := ip("netns", "add", n); err != nil {
			t.Skipf("cannot create network namespaces: %v", err)
		}
		t.Cleanup(func() {
			if err := ip("netns", "delete", n); err != nil {
				t.Logf("cleanup: %v", err)
			}
		})
	}
	if err := ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1]); err != nil {
		t.Skipf("cannot create a veth pair: %v", err)
	}
	// Deleting the namespaces deletes the pair; this catches the case where
	// it never left the host namespace (runs first: cleanups are LIFO).
	t.Cleanup(func() { exec.Command(ipCmd, "link", "delete", veth[0]).Run() })
	for i := range ns {
		for _, args := range [][]string{
			{"link", "set", veth[i], "netns", ns[i]},
			{"-n", ns[i], "addr", "add", addr[i] + "/24", "dev", veth[i]},
			{"-n", ns[i], "link", "set", "lo", "up"},
			{"-n", ns[i], "link", "set", veth[i], "up"},
		} {
			if err := ip(args...); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Start rank r in namespace r.
	const n = 2
	cmds := make([]*exec.Cmd, n)
	outs := make([]strings.Builder, n)
	var outMu sync.Mutex
	ready := make(chan int, n)
	errAt := make([]time.Time, n) // when the rank printed its "error:" line
	exitAt := make([]time.Time, n)
	waited := make([]chan struct{}, n)
	var readers sync.WaitGroup
	for r := 0; r < n; r++ {
		cmd := exec.Command(ipCmd, "netns", "exec", ns[r], os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "GOCCL_TEST_WORKER=loop",
			"GOCCL_RANK="+strconv.Itoa(r), "GOCCL_WORLD_SIZE="+strconv.Itoa(n), "GOCCL_LOCAL_RANK=0",
			"GOCCL_STORE_ADDR="+addr[0]+":"+port, "GOCCL_SOCKET_IFNAME="+"="+veth[r],
			// Both namespaces share /dev/shm and the host identity:
			// force TCP, over the veth pair.
			"GOCCL_SHM_DISABLE=1",
			"GOCCL_TIMEOUT="+timeout.String())
		cmds[r] = cmd
		waited[r] = startWatched(t, cmd, &readers, func(line string) {
			outMu.Lock()
			outs[r].WriteString(line + "\n")
			if strings.HasPrefix(line, "error:") && errAt[r].IsZero() {
				errAt[r] = time.Now()
			}
			outMu.Unlock()
			if line == "ready" {
				ready <- r
			}
		}, func() {
			outMu.Lock()
			exitAt[r] = time.Now()
			outMu.Unlock()
		})
	}
	killAll := func() {
		for _, c := range cmds {
			c.Process.Kill()
		}
	}
	defer func() {
		killAll()
		for r := range waited {
			<-waited[r]
		}
	}()
	output := func(r int) string {
		outMu.Lock()
		defer outMu.Unlock()
		return outs[r].String()
	}
	exitedEarly := make(chan int, n)
	for r := 0; r < n; r++ {
		go func(r int) { <-waited[r]; exitedEarly <- r }(r)
	}
	for nready := 0; nready < n; {
		select {
		case <-ready:
			nready++
		case r := <-exitedEarly:
			// A rank that printed "ready" then exited before the others
			// did is just as wrong: the link is still up.
			t.Fatalf("rank %d exited before the link was cut (%v):\n%s", r, cmds[r].ProcessState, output(r))
		case <-time.After(60 * time.Second):
			killAll()
			t.Fatalf("ranks not ready after 60 s:\nrank 0:\n%s\nrank 1:\n%s", output(0), output(1))
		}
	}

	time.Sleep(50 * time.Millisecond) // into the next operation
	cut := time.Now()
	if err := ip("-n", ns[0], "link", "set", veth[0], "down"); err != nil {
		t.Fatal(err)
	}
	t.Logf("link cut (%s down in %s)", veth[0], ns[0])

	hard := time.After(timeout + margin)
	hung := false
	for r := 0; r < n; r++ {
		select {
		case <-waited[r]:
		case <-hard:
			hung = true
		}
		if hung {
			break
		}
	}
	if hung {
		killAll()
	}
	for r := range waited {
		<-waited[r]
	}
	readers.Wait()

	outMu.Lock()
	defer outMu.Unlock()
	for r := 0; r < n; r++ {
		peer := 1 - r
		out := outs[r].String()
		if !errAt[r].IsZero() {
			t.Logf("rank %d: error %v after the cut, exit %v after the cut (%v)", r,
				errAt[r].Sub(cut).Round(time.Millisecond), exitAt[r].Sub(cut).Round(time.Millisecond), cmds[r].ProcessState)
		} else {
			t.Logf("rank %d: no error line; exit %v after the cut (%v)", r,
				exitAt[r].Sub(cut).Round(time.Millisecond), cmds[r].ProcessState)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "LOST ") || strings.HasPrefix(line, "ERR ") || strings.HasPrefix(line, "error:") {
				t.Logf("rank %d: %s", r, line)
			}
		}
		if exitAt[r].Before(cut) || (!errAt[r].IsZero() && errAt[r].Before(cut)) {
			t.Errorf("rank %d failed before the link was cut:\n%s", r, out)
			continue
		}
		if d := exitAt[r].Sub(cut); d > timeout+margin {
			t.Errorf("rank %d still running %v after the link was cut (killed), want an error within %v + %v:\n%s",
				r, d.Round(time.Millisecond), timeout, margin, out)
			continue
		}
		if errAt[r].IsZero() || !(strings.Contains(out, "\nLOST ") || strings.Contains(out, "\nERR ") ||
			strings.HasPrefix(out, "LOST ") || strings.HasPrefix(out, "ERR ")) {
			t.Errorf("rank %d exited (%v) without reporting a failed operation:\n%s", r, cmds[r].ProcessState, out)
			continue
		}
		if code := cmds[r].ProcessState.ExitCode(); code != 3 {
			t.Errorf("rank %d exited with status %d, want 3 (a failed AllReduce):\n%s", r, code, out)
		}
		// The error must say which rank it could not reach: "peer P" on a
		// deadline or a broken connection, "rank P lost" or "LOST P" on a
		// lost peer.
		var errLine string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "error:") {
				errLine = line
				break
			}
		}
		if !strings.Contains(errLine, fmt.Sprintf("peer %d", peer)) && !strings.Contains(errLine, fmt.Sprintf("rank %d lost", peer)) &&
			!strings.Contains(out, fmt.Sprintf("LOST %d ", peer)) {
			t.Errorf("rank %d: the error does not name rank %d: %s", r, peer, errLine)
		}
		// And say that the peer was not progressing (its link moved
		// nothing), not only that this rank waited on it.
		if want := fmt.Sprintf("kept waiting by rank %d: ", peer); !strings.Contains(errLine, want) || !strings.Contains(errLine, "not progressing") ||
			!strings.Contains(errLine, "its link to this rank moved no bytes for") {
			t.Errorf("rank %d: the error does not say that rank %d was not progressing: %s", r, peer, errLine)
		}
		if strings.Contains(out, "Err() is nil") {
			t.Errorf("rank %d: Comm.Err() is nil after the failure", r)
		}
	}
}
