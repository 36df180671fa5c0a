package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startAggd starts `goccl aggd` (this test binary as goccl) with args and
// returns its address from the line it prints once listening.
func startAggd(t *testing.T, args ...string) (string, *exec.Cmd) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, append([]string{"aggd"}, args...)...)
	cmd.Env = append(os.Environ(), "GOCCL_CLI_TEST_MAIN=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		// goccl aggd: listening on 127.0.0.1:PORT (root, fan-in N)
		f := strings.Fields(s)
		if len(f) < 5 || f[2] != "listening" {
			t.Fatalf("aggd printed %q", s)
		}
		return f[4], cmd
	case <-time.After(10 * time.Second):
		t.Fatal("aggd did not say it was listening")
	}
	return "", nil
}

// TestAggd: `goccl run` of `goccl perf all_reduce` at 3 ranks with
// GOCCL_COLLNET_ENABLE=1 through a root and two leaves started as `goccl
// aggd` processes: 0 wrong, every rank's AllReduce through the tree; then
// the root stops on SIGTERM with status 0.
func TestAggd(t *testing.T) {
	t.Run("tcp", func(t *testing.T) { testAggd(t, false) })
	t.Run("roce", func(t *testing.T) { testAggd(t, true) })
}

// testAggd: with --roce on every node and GOCCL_NET=roce at the ranks,
// every hop of the tree moves to RoCE.
func testAggd(t *testing.T, useRoCE bool) {
	var extra, env []string
	via := "TCP"
	if useRoCE {
		extra = []string{"--roce"}
		env = []string{"--env", "GOCCL_NET=roce", "--env", "GOCCL_SHM_DISABLE=1"}
		via = "RoCE"
	}
	root, rootCmd := startAggd(t, append([]string{"--listen", "127.0.0.1:0", "--fanin", "2"}, extra...)...)
	for range 2 { // each says it listens once the root has it on its list
		startAggd(t, append([]string{"--listen", "127.0.0.1:0", "--fanin", "2", "--parent", root}, extra...)...)
	}
	exe, _ := os.Executable()
	args := append([]string{"run", "-np", "3", "--env", "GOCCL_COLLNET_ENABLE=1", "--env", "GOCCL_COLLNET_AGGD=" + root,
		"--env", "GOCCL_DEBUG=INFO", "--env", "GOCCL_DEBUG_SUBSYS=INIT,COLL"}, env...)
	stdout, stderr, code := runGoccl(t, append(args, exe, "perf", "all_reduce", "-b", "8", "-e", "4M", "-f", "64", "-n", "2", "-w", "1", "-c", "1")...)
	if code != 0 || !strings.Contains(stdout, "[0] # Out of bounds values : 0 OK") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if n := strings.Count(stdout+stderr, "AllReduce uses collnet"); n != 3 {
		t.Errorf("%d ranks used collnet, want 3:\n%s\n%s", n, stdout, stderr)
	}
	if n := strings.Count(stdout+stderr, ") via "+via); n != 3 {
		t.Errorf("%d ranks attached via %s, want 3:\n%s\n%s", n, via, stdout, stderr)
	}
	rootCmd.Process.Signal(syscall.SIGTERM)
	if err := rootCmd.Wait(); err != nil {
		t.Errorf("root after SIGTERM: %v", err)
	}
}

// TestAggdFlags: bad flags are refused with status 2, saying why.
func TestAggdFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"aggd", "--fanin", "0"}, "--fanin 0: want 1 to 1024"},
		{[]string{"aggd", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"aggd", "--fanim", "2"}, `did you mean "--fanin"?`},
		{[]string{"aggd", "--roce"}, `--roce needs a specific IP address in --advertise or --listen (have "0.0.0.0:7400")`},
	} {
		_, stderr, code := runGoccl(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q (want %q)", c.args, code, stderr, c.want)
		}
	}
	_, stderr, code := runGoccl(t, "aggd", "--listen", "256.0.0.1:1")
	if code != 1 || !strings.Contains(stderr, "goccl aggd:") {
		t.Errorf("bad address: exit %d, %q", code, stderr)
	}
}
