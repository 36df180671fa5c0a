package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/goccl/goccl/internal/cluster"
	"github.com/goccl/goccl/internal/cluster/clustertest"
)

// TestClusterUsage: the cluster subcommands' usage errors, before
// anything is built (no root needed).
func TestClusterUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"cluster"}, 2, "usage: goccl cluster up --hosts N"},
		{[]string{"cluster", "-h"}, 0, "plm_rsh_agent"},
		{[]string{"help", "cluster"}, 0, "goccl cluster down"},
		{[]string{"cluster", "upp"}, 2, `unknown subcommand "upp"; did you mean "up"?`},
		{[]string{"cluster", "up"}, 2, "--hosts N is required"},
		{[]string{"cluster", "up", "--hots", "2"}, 2, `unknown flag "--hots"; did you mean "--hosts"?`},
		{[]string{"cluster", "up", "-hosts", "2", "-bw", "fast"}, 2, `invalid value "fast" for flag -bw: invalid rate "fast"`},
		{[]string{"cluster", "up", "--hosts", "2", "--loss", "120%"}, 2, "want a percentage, 0 to 100"},
		{[]string{"cluster", "up", "--hosts", "2", "--delay", "5"}, 2, `invalid value "5" for flag --delay`},
		{[]string{"cluster", "up", "--hosts", "2", "--jitter", "1ms"}, 2, "it varies a delay, and the delay is 0"},
		{[]string{"cluster", "up", "--hosts", "300"}, 2, "1 to 254 in 10.200.0.0/24"},
		{[]string{"cluster", "up", "--hosts", "2", "--subnet", "10.1.0.0"}, 2, `--subnet "10.1.0.0"`},
		{[]string{"cluster", "up", "--hosts", "2", "--slots", "0"}, 2, "--slots 0"},
		{[]string{"cluster", "up", "--hosts", "2", "--name", "a/b"}, 2, `invalid cluster name "a/b"`},
		{[]string{"cluster", "up", "--hosts", "2", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"cluster", "down", "--nam", "x"}, 2, `did you mean "--name"?`},
		{[]string{"cluster", "status", "-h"}, 0, "--state-dir"},
		{[]string{"cluster", "rsh", "h0"}, 2, "usage: goccl cluster rsh HOST COMMAND..."},
		{[]string{"cluster", "rsh", "-x", "true"}, 2, `"-x" is not a host`},
	} {
		var o, e bytes.Buffer
		code := cli(c.args, &o, &e)
		if code != c.code || !strings.Contains(o.String()+e.String(), c.want) {
			t.Errorf("goccl %s: exit %d, want %d with %q:\n%s%s", strings.Join(c.args, " "), code, c.code, c.want, o.String(), e.String())
		}
	}
	var o, e bytes.Buffer
	dir := t.TempDir()
	if code := cli([]string{"cluster", "status", "--name", "nosuch", "--state-dir", dir}, &o, &e); code != 1 || !strings.Contains(e.String(), "no such cluster") {
		t.Errorf("status of no cluster: exit %d: %s", code, e.String())
	}
}

// TestClusterCommands: goccl cluster up, status, down on a 3-host cluster
// shaped at 100mbit, as a user runs them.
func TestClusterCommands(t *testing.T) {
	if why := clustertest.Skip(); why != "" {
		t.Skip(why)
	}
	name, dir := clustertest.Name(), t.TempDir()
	t.Cleanup(func() { clustertest.Remove(t, name, dir) })
	hostfile := filepath.Join(dir, "hosts")
	var o, e bytes.Buffer
	code := cli([]string{"cluster", "up", "-hosts", "3", "--bw", "100mbit", "--delay", "0", "--loss", "0", "--mtu", "1500",
		"--name", name, "--state-dir", dir, "--slots", "4", "--hostfile", hostfile}, &o, &e)
	if code != 0 {
		if why := clustertest.SkipReason(upError(e.String())); why != "" {
			t.Skip(why)
		}
		t.Fatalf("up: exit %d\n%s%s", code, o.String(), e.String())
	}
	out := o.String()
	t.Logf("goccl cluster up:\n%s", out)
	for _, want := range []string{
		"cluster " + name + ": 3 hosts on 10.200.0.0/24, switch namespace " + name + "-sw (bridge br0)",
		"links: rate 100mbit each way per host, no added delay, loss 0%, mtu 1500",
		name + "-h0  10.200.0.1", name + "-h2  10.200.0.3",
		"hostfile (OpenMPI):\n" + name + "-h0 slots=4\n" + name + "-h1 slots=4\n" + name + "-h2 slots=4\n",
		"run a command: ip netns exec " + name + "-h0 COMMAND",
		" cluster rsh",
		"tear down:     goccl cluster down --name " + name + " --state-dir " + dir,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("up: no %q", want)
		}
	}
	if b, err := os.ReadFile(hostfile); err != nil || !strings.Contains(out, string(b)) {
		t.Errorf("hostfile: %q %v", b, err)
	}
	// rsh runs a command on a host, as ssh would (words joined, sh -c).
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "cluster", "rsh", name+"-h1", "ip -o -4 addr show dev eth0;", "echo", "$((6*7))")
	cmd.Env = append(os.Environ(), "GOCCL_CLI_TEST_MAIN=1")
	if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "10.200.0.2/24") || !strings.HasSuffix(string(b), "42\n") {
		t.Errorf("rsh: %v\n%s", err, b)
	}

	o.Reset()
	e.Reset()
	if code := cli([]string{"cluster", "status", "--name", name, "--state-dir", dir}, &o, &e); code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, o.String(), e.String())
	}
	t.Logf("goccl cluster status:\n%s", o.String())
	row := regexp.MustCompile(regexp.QuoteMeta(name) + `-h1\s+eth0\s+10\.200\.0\.2\s+tbf\s+\d+\s+\d+\s+\d+\s+\d+\s+tbf\s+\d+`)
	if !strings.Contains(o.String(), "cluster "+name+": up, 3 hosts") || !row.MatchString(o.String()) {
		t.Errorf("status: want the hosts with their tbf counters")
	}

	o.Reset()
	e.Reset()
	if code := cli([]string{"cluster", "down", "--name", name, "--state-dir", dir}, &o, &e); code != 0 ||
		strings.Count(o.String(), "removed namespace ") != 4 || !strings.Contains(o.String(), "removed state file") {
		t.Errorf("down: exit %d\n%s%s", code, o.String(), e.String())
	}
	o.Reset()
	if code := cli([]string{"cluster", "down", "--name", name, "--state-dir", dir}, &o, &e); code != 0 || !strings.Contains(o.String(), "nothing to remove") {
		t.Errorf("second down: exit %d\n%s", code, o.String())
	}
	o.Reset()
	e.Reset()
	if code := cli([]string{"cluster", "status", "--name", name, "--state-dir", dir}, &o, &e); code != 1 || !strings.Contains(e.String(), "no such cluster") {
		t.Errorf("status after down: exit %d\n%s", code, e.String())
	}
}

// upError turns goccl cluster up's stderr back into an error that
// clustertest.SkipReason reads (it tells a missing qdisc from a failure).
func upError(stderr string) error {
	switch {
	case strings.Contains(stderr, "no netem qdisc"):
		return cluster.ErrNoNetem
	case strings.Contains(stderr, "no tbf qdisc"):
		return cluster.ErrNoTBF
	}
	return nil
}

// TestClusterMpirun runs the recipe goccl cluster up prints: mpirun inside
// host 0 with the hostfile and goccl cluster rsh as the remote shell
// starts `goccl perf all_reduce` as one rank on each of two hosts, which
// meet through the store address file (the hosts share the file system)
// and run over TCP across the shaped link.
func TestClusterMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not installed (Debian openmpi-bin; .ci/run installs it)")
	}
	c := clustertest.New(t, cluster.Config{Hosts: 2, Rate: 1e9})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hostfile := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hostfile, []byte(c.Hostfile(1)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The namespaces share /dev/shm, but the host identity includes the
	// network namespace: the two ranks link over TCP, through the shaping.
	cmd := c.Command(ctx, 0, mpirun, "--allow-run-as-root", "--hostfile", hostfile, "--map-by", "node", "-np", "2",
		"--mca", "plm_rsh_agent", exe+" cluster rsh",
		"-x", "GOCCL_CLI_TEST_MAIN=1", "-x", "GOCCL_DEBUG=INFO", "-x", "GOCCL_DEBUG_SUBSYS=NET,SHM", "-x", "GOCCL_STORE_DIR="+t.TempDir(),
		exe, "perf", "all_reduce", "-b", "8", "-e", "1M", "-f", "4")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOCCL_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "GOCCL_CLI_TEST_MAIN=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("mpirun: %v\nstdout:\n%s\nstderr:\n%s", err, o.String(), e.String())
	}
	// Each rank is local rank 0 on its own host, so both use device 0
	// (parseReport wants rank r on device r, as on one host).
	out := o.String()
	rank1 := regexp.MustCompile(`(?m)^(#  Rank  1 Group  0 Pid +\d+ on +\S+ device  )0( \[cpu\] goccl)$`)
	if !rank1.MatchString(out) {
		t.Fatalf("rank 1 is not local rank 0 of its host:\n%s", out)
	}
	rows, tail := parseReport(t, rank1.ReplaceAllString(out, "${1}1$2"), 2)
	if len(rows) != 9 || tail[0] != "# Out of bounds values : 0 OK" {
		t.Fatalf("%d rows, tail %q\n%s", len(rows), tail, o.String())
	}
	for _, r := range rows {
		if r.wrongOOP != "0" || r.wrongIP != "0" {
			t.Errorf("row %+v", r)
		}
	}
	if logs := e.String() + o.String(); !strings.Contains(logs, "via tcp") || strings.Contains(logs, "via shm") {
		t.Errorf("the ranks of two hosts did not link over TCP (GOCCL_DEBUG=INFO):\n%s", logs)
	}
	stats, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		t.Logf("%s sent %d bytes through its egress qdisc", s.Host.Name, s.Sent())
		if s.Sent() < 1<<20 {
			t.Errorf("%s sent %d bytes: the ranks did not talk across the link", s.Host.Name, s.Sent())
		}
	}
}
