package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRoceV2AcrossRouter runs goccl roce write-bw between two network
// namespaces on different subnets joined through a third that routes between
// them: RoCE v2 is UDP/IP, so it crosses the router (the L3 half of issue
// 5's L2-vs-L3 row; RoCE v1, which cannot, is not built yet). Needs root
// and ip netns; skips with a message otherwise.
func TestRoceV2AcrossRouter(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespaces; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	ipCmd, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("ip (iproute2) not installed")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	ns := map[string]string{"a": fmt.Sprintf("goccl-roce-%d-a", pid), "r": fmt.Sprintf("goccl-roce-%d-r", pid), "b": fmt.Sprintf("goccl-roce-%d-b", pid)}
	ip := func(args ...string) error {
		out, err := exec.Command(ipCmd, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	for _, n := range ns {
		if err := ip("netns", "add", n); err != nil {
			for _, m := range ns {
				exec.Command(ipCmd, "netns", "del", m).Run()
			}
			t.Skipf("cannot create network namespaces: %v", err)
		}
	}
	t.Cleanup(func() {
		for _, n := range ns {
			exec.Command(ipCmd, "netns", "del", n).Run()
		}
	})
	va, vra := fmt.Sprintf("gra%d", pid%100000), fmt.Sprintf("grr%d", pid%100000)
	vb, vrb := fmt.Sprintf("grb%d", pid%100000), fmt.Sprintf("grs%d", pid%100000)
	steps := [][]string{
		{"link", "add", va, "netns", ns["a"], "type", "veth", "peer", "name", vra, "netns", ns["r"]},
		{"link", "add", vb, "netns", ns["b"], "type", "veth", "peer", "name", vrb, "netns", ns["r"]},
		{"-n", ns["a"], "addr", "add", "10.214.1.2/24", "dev", va},
		{"-n", ns["r"], "addr", "add", "10.214.1.1/24", "dev", vra},
		{"-n", ns["r"], "addr", "add", "10.214.2.1/24", "dev", vrb},
		{"-n", ns["b"], "addr", "add", "10.214.2.2/24", "dev", vb},
	}
	for _, n := range []string{"a", "r", "b"} {
		steps = append(steps, []string{"-n", ns[n], "link", "set", "lo", "up"})
	}
	steps = append(steps,
		[]string{"-n", ns["a"], "link", "set", va, "up"}, []string{"-n", ns["r"], "link", "set", vra, "up"},
		[]string{"-n", ns["r"], "link", "set", vrb, "up"}, []string{"-n", ns["b"], "link", "set", vb, "up"},
		[]string{"-n", ns["a"], "route", "add", "default", "via", "10.214.1.1"},
		[]string{"-n", ns["b"], "route", "add", "default", "via", "10.214.2.1"},
		[]string{"netns", "exec", ns["r"], "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
	)
	for _, s := range steps {
		if err := ip(s...); err != nil {
			t.Skipf("cannot build the routed topology: %v", err)
		}
	}
	run := func(n string, args ...string) *exec.Cmd {
		cmd := exec.Command(ipCmd, append([]string{"netns", "exec", ns[n], exe}, args...)...)
		cmd.Env = append(os.Environ(), "GOCCL_CLI_TEST_MAIN=1")
		return cmd
	}
	tool := []string{"roce", "write-bw", "-s", "64K", "-n", "500", "-timeout", "30s"}
	server := run("b", tool...)
	var sout bytes.Buffer
	server.Stdout, server.Stderr = &sout, &sout
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Process.Kill()
	var out []byte
	for i := 0; i < 100; i++ {
		out, err = run("a", append(tool, "10.214.2.2")...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "refused") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("client in %s: %v\n%s\nserver:\n%s", ns["a"], err, out, sout.String())
	}
	server.Wait()
	var row []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 5 && f[0] == "65536" {
			row = f
		}
	}
	if row == nil || !strings.Contains(string(out), "GID 10.214.2.2") {
		t.Fatalf("no result across the router:\n%s", out)
	}
	t.Logf("10.214.1.2 -> router -> 10.214.2.2: %s", strings.Join(row, " "))
}
