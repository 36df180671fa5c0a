package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/cluster"
	"github.com/goccl/goccl/internal/cluster/clustertest"
	"github.com/goccl/goccl/internal/collnet"
	"github.com/goccl/goccl/internal/etcdtest"
	"github.com/goccl/goccl/internal/launch"
)

// TestParseRunArgsHosts: -H (repeatable) and --hostfile give the hosts,
// --rsh, --launch-agent and -x go with them, and misuse is named.
func TestParseRunArgsHosts(t *testing.T) {
	hostfile := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(hostfile, []byte("# two hosts\nn1 slots=4\nn2 slots=2 max_slots=8\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want hosts
	}{
		{[]string{"-H", "a:2,b:2", "-H", "c", "prog"}, hosts{list: []launch.Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}, {Name: "c", Slots: 1}}, rsh: []string{"ssh"}}},
		{[]string{"--hostfile", hostfile, "--rsh", "goccl cluster rsh", "-x", "PATH", "-x", "HOME", "--launch-agent", "/opt/goccl", "prog"},
			hosts{list: []launch.Host{{Name: "n1", Slots: 4}, {Name: "n2", Slots: 2}}, rsh: []string{"goccl", "cluster", "rsh"}, agent: "/opt/goccl", export: []string{"PATH", "HOME"}}},
		{[]string{"--nnodes", "3", "--node-rank", "2", "--master-addr", "n0", "prog"},
			hosts{node: &launch.NodeEnv{Source: "flags", NNodes: 3, NodeRank: 2, MasterAddr: "n0", MasterPort: 29500, JobID: "nodes-n0-29500"}}},
	} {
		ra, code := parseRunArgs(tc.args, io.Discard)
		if ra == nil {
			t.Errorf("%q: exit %d", tc.args, code)
			continue
		}
		if !reflect.DeepEqual(ra.hosts, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.args, ra.hosts, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-H", "a:0", "prog"}, `-H a:0: launch: host list entry 1 "a:0": slots "0" is not a positive integer`},
		{[]string{"-H", "a", "--hostfile", hostfile, "prog"}, "give the hosts with -H or with --hostfile, not both"},
		{[]string{"--rsh", "rsh", "prog"}, "--rsh is for a job on several hosts: give them with -H or --hostfile"},
		{[]string{"--hostfile", "/nonexistent/hosts", "prog"}, "open /nonexistent/hosts: no such file or directory"},
		{[]string{"-H", "a", "--rsh", " ", "prog"}, "--rsh is empty"},
		{[]string{"-n", "1", "prog", ":", "-H", "a", "-n", "1", "prog"}, "context 2: --host is the whole job's"},
		{[]string{"--nnodes", "2", "--master-addr", "n0", "prog"}, "--node-rank -1: give this node's index in [0, 2) (--nnodes 2)"},
		{[]string{"--nnodes", "2", "--node-rank", "1", "prog"}, "--nnodes needs --master-addr"},
		{[]string{"--node-rank", "1", "prog"}, "--node-rank is for a job of several nodes: give --nnodes too"},
		{[]string{"-H", "a", "--nnodes", "2", "--node-rank", "0", "--master-addr", "a", "prog"}, "give one or the other"},
	} {
		var e bytes.Buffer
		if ra, code := parseRunArgs(tc.args, &e); ra != nil || code != 2 || !strings.Contains(e.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %q", tc.args, code, e.String(), tc.want)
		}
	}
}

// hostsCluster builds a cluster of n hosts with 1 Gbit/s links for a test
// of goccl run -H, and returns it with the -H value (2 slots each) and the
// --rsh value that reach it.
func hostsCluster(t *testing.T, n int) (c *cluster.Cluster, hostsArg, rsh string) {
	t.Helper()
	c = clustertest.New(t, cluster.Config{Hosts: n, Rate: 1e9})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var hs []string
	for _, h := range c.Hosts {
		hs = append(hs, h.Name+":2")
	}
	return c, strings.Join(hs, ","), exe + " cluster rsh"
}

// perfColls are goccl perf's collectives.
var perfColls = []string{"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv"}

// TestRunHostsCluster: goccl run -H starts 2 ranks on each of 4 namespace
// hosts through goccl cluster rsh, and goccl perf of every collective
// checks its results (flat and hierarchical sizes, 0 wrong), meeting at
// rank 0's store (served on host 0's address) and at an etcd server
// (GOCCL_STORE=etcd://).
func TestRunHostsCluster(t *testing.T) {
	if why := clustertest.Skip(); why != "" {
		t.Skip(why)
	}
	if testing.Short() {
		// About 30 jobs of 8 ranks: the full suite runs it; under the race
		// detector (the short suite) it would cost minutes of both cores.
		t.Skip("4-host matrix of goccl run jobs; skipped with -short")
	}
	c, hostsArg, rsh := hostsCluster(t, 4)
	etcd := etcdtest.Start(t)
	etcdAddr := clustertest.Forward(t, c, 0, etcd.Endpoint) // the hosts reach it through host 0's address
	// "roce": the embedded store, the links between hosts over the soft
	// RoCE device's queue pairs (GOCCL_NET=roce); "roce-v1": RoCE v1
	// (GOCCL_IB_GID_INDEX=0: raw Ethernet frames, each host's two ranks
	// with a device on the same interface and GID), AllReduce and AllToAll;
	// "etcd" (the store alone differs from "embedded"): the same two.
	for _, store := range []string{"embedded", "etcd", "roce", "roce-v1"} {
		t.Run(store, func(t *testing.T) {
			for i, coll := range perfColls {
				if (store == "roce-v1" || store == "etcd") && coll != "all_reduce" && coll != "alltoall" {
					continue // the embedded store runs every collective over the same links
				}
				args := []string{"run", "-H", hostsArg, "--rsh", rsh}
				switch {
				case store == "etcd":
					args = append(args, "--env", fmt.Sprintf("GOCCL_STORE=etcd://%s/hosts-test/%d", etcdAddr, i))
				case store == "roce" && i == 0:
					args = append(args, "--env", "GOCCL_NET=roce", "--env", "GOCCL_DEBUG=INFO")
				case store == "roce":
					args = append(args, "--env", "GOCCL_NET=roce")
				case store == "roce-v1":
					args = append(args, "--env", "GOCCL_NET=roce", "--env", "GOCCL_IB_GID_INDEX=0", "--env", "GOCCL_DEBUG=INFO")
				}
				exe, _ := os.Executable()
				args = append(args, exe, "perf", coll, "-b", "8", "-e", "1M", "-f", "16", "-n", "2", "-w", "1", "-c", "1")
				stdout, stderr, code := runGoccl(t, args...)
				if code != 0 || !strings.Contains(stdout, "[0] # Out of bounds values : 0 OK") {
					t.Fatalf("%s over the %s store: exit %d\nstdout:\n%s\nstderr:\n%s", coll, store, code, stdout, stderr)
				}
				if n := strings.Count(stdout, "[0] #  Rank "); n != 8 {
					t.Errorf("%s: %d ranks in the report, want 8", coll, n)
				}
				if want := map[string]string{"roce": "via NET/RoCE/v2", "roce-v1": "via NET/RoCE/v1"}[store]; want != "" && i == 0 {
					// Each rank's links to the 6 ranks of other hosts.
					if n := strings.Count(stdout+stderr, want); n != 8*6 {
						t.Errorf("%d links %s, want 48:\n%s\n%s", n, want, stdout, stderr)
					}
				}
			}
		})
	}
	// "collnet": AllReduce through an aggregation node (in this process,
	// listening in host 0's namespace) with GOCCL_COLLNET_ENABLE=1.
	t.Run("collnet", func(t *testing.T) {
		ln, err := c.Listen(0, net.JoinHostPort(c.Hosts[0].Addr.String(), "0"))
		if err != nil {
			t.Fatal(err)
		}
		node := collnet.NewNode(ln, collnet.Config{Fanin: 8})
		served := make(chan struct{})
		go func() { node.Serve(context.Background()); close(served) }()
		defer func() { node.Close(); <-served }()
		exe, _ := os.Executable()
		stdout, stderr, code := runGoccl(t, "run", "-H", hostsArg, "--rsh", rsh, "--env", "GOCCL_COLLNET_ENABLE=1",
			"--env", "GOCCL_COLLNET_AGGD="+ln.Addr().String(), "--env", "GOCCL_DEBUG=INFO", "--env", "GOCCL_DEBUG_SUBSYS=COLL",
			exe, "perf", "all_reduce", "-b", "8", "-e", "1M", "-f", "16", "-n", "2", "-w", "1", "-c", "1")
		if code != 0 || !strings.Contains(stdout, "[0] # Out of bounds values : 0 OK") {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if n := strings.Count(stdout+stderr, "AllReduce uses collnet"); n != 8 {
			t.Errorf("%d ranks used collnet, want 8:\n%s\n%s", n, stdout, stderr)
		}
	})
	// "window-roce": symmetric memory across hosts, examples/symm-producer
	// between ranks on hosts 0 and 1 over RoCE queue pairs (RDMA WRITE and
	// 8-byte WRITE signals through the shaped link).
	t.Run("window-roce", func(t *testing.T) {
		hosts := c.Hosts[0].Name + ":1," + c.Hosts[1].Name + ":1"
		stdout, stderr, code := runGoccl(t, "run", "-H", hosts, "--rsh", rsh, "--env", "GOCCL_NET=roce",
			"../../examples/symm-producer", "-n", "50", "-stream", "50", "-sizes", "8,64K,1M")
		if code != 0 || !strings.Contains(stdout, "window via roce") {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		rows := regexp.MustCompile(`(?m)^\[0\] +\d+ +50 .* (\d+)$`).FindAllStringSubmatch(stdout, -1)
		if len(rows) != 3 {
			t.Fatalf("%d rows:\n%s", len(rows), stdout)
		}
		for _, r := range rows {
			if r[1] != "0" {
				t.Errorf("wrong blocks: %s", r[0])
			}
		}
		t.Log("\n" + stdout)
	})
	stats, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		if s.Sent() < 1<<20 {
			t.Errorf("%s sent %d bytes through its link: its ranks did not talk to the other hosts", s.Host.Name, s.Sent())
		}
	}
}

// TestRunHostsLinkCut: a host's link cut in the middle of an AllReduce
// fails every rank, each naming a rank it cannot reach (a rank of the cut
// host, or from the cut host one of the others), within
// GOCCL_SOCKET_TIMEOUT — long before the operation timeout — and goccl run
// reports it and ends.
func TestRunHostsLinkCut(t *testing.T) {
	if why := clustertest.Skip(); why != "" {
		t.Skip(why)
	}
	c, hostsArg, rsh := hostsCluster(t, 4)
	exe, _ := os.Executable()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// --settle 10s: every rank reports its own failure before goccl run
	// stops the rest (the ranks across the cut each notice it at their own
	// socket's timeout; under load they were once more than the default
	// 250 ms apart).
	cmd := exec.CommandContext(ctx, exe, "run", "-H", hostsArg, "--rsh", rsh, "--settle", "10s",
		"--env", "GOCCL_SOCKET_TIMEOUT=3s", "--env", "GOCCL_TIMEOUT=120s",
		exe, "perf", "all_reduce", "-b", "16M", "-e", "16M", "-n", "100000", "-w", "1")
	cmd.Env = append(os.Environ(), "GOCCL_CLI_TEST_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "(B)") { // the table's header: the timed loop is next
			break
		}
	}
	time.Sleep(500 * time.Millisecond)
	if err := c.SetLink(ctx, 3, false); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	took := time.Since(cut)
	t.Logf("goccl run ended %v after the cut: %v\nstderr:\n%s", took.Round(time.Millisecond), err, stderr.String())
	if err == nil {
		t.Fatalf("goccl run succeeded with host 3 cut off\n%s", out.String())
	}
	if took > 60*time.Second {
		t.Errorf("took %v after the cut: the operation timeout (120s), not the dead link, ended it", took)
	}
	// Every rank's error names a rank across the cut.
	re := regexp.MustCompile(`(?m)^\[(\d)\] goccl perf: rank \d: .*rank (\d) lost`)
	named := map[int]int{}
	for _, m := range re.FindAllStringSubmatch(stderr.String(), -1) {
		r, _ := strconv.Atoi(m[1])
		named[r], _ = strconv.Atoi(m[2])
	}
	for r := range 8 {
		lost, ok := named[r]
		switch {
		case !ok:
			t.Errorf("rank %d did not report a lost peer", r)
		case (r >= 6) == (lost >= 6):
			t.Errorf("rank %d names rank %d, on its own side of the cut", r, lost)
		}
	}
	if !strings.Contains(stderr.String(), "unreachable: its host stopped answering") {
		t.Errorf("no rank says why")
	}
	if !regexp.MustCompile(`goccl run: rank \d \(pid \d+ on \S+-h\d\) exited with status 1`).MatchString(stderr.String()) {
		t.Errorf("goccl run does not name the failed rank and its host")
	}
}

// TestRunNodes: under srun (Slurm's step variables) and in Kubernetes pods
// (a PyTorchJob's MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK), one
// goccl run per node, given no flags, starts that node's share of the job:
// two namespace hosts, 2 ranks each, goccl perf all_reduce with 0 wrong.
func TestRunNodes(t *testing.T) {
	if why := clustertest.Skip(); why != "" {
		t.Skip(why)
	}
	c := clustertest.New(t, cluster.Config{Hosts: 2})
	exe, _ := os.Executable()
	for _, wlm := range []string{"slurm", "kubernetes"} {
		t.Run(wlm, func(t *testing.T) {
			port, err := launch.FreePort("")
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				out string
				err error
			}
			results := make(chan result, 2)
			for node := range 2 {
				env := []string{"GOCCL_CLI_TEST_MAIN=1", "GOCCL_JOB_TOKEN=nodes-test-secret", "MASTER_PORT=" + strconv.Itoa(port)}
				if wlm == "slurm" {
					env = append(env, "SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NODELIST=10.200.0.[1-2]", "SLURM_STEP_NUM_NODES=2",
						"SLURM_STEP_NUM_TASKS=2", "SLURM_NODEID="+strconv.Itoa(node), "SLURM_PROCID="+strconv.Itoa(node), "SLURM_NTASKS=2")
				} else {
					env = append(env, "MASTER_ADDR=10.200.0.1", "WORLD_SIZE=2", "RANK="+strconv.Itoa(node))
				}
				cmd := c.Command(context.Background(), node, exe, "run", "-n", "2", exe, "perf", "all_reduce", "-b", "8", "-e", "1M", "-f", "16", "-c", "1")
				cmd.Env = append(cleanEnv(), env...)
				go func() {
					b, err := cmd.CombinedOutput()
					results <- result{string(b), err}
				}()
			}
			var outs string
			for range 2 {
				r := <-results
				outs += r.out
				if r.err != nil {
					t.Errorf("a node's goccl run: %v", r.err)
				}
			}
			for _, want := range []string{
				"[0] # Out of bounds values : 0 OK",
				"goccl run: node 1 of 2 (" + wlm + "): ranks 2-3 of 4, rank 0's store at 10.200.0.1:" + strconv.Itoa(port),
			} {
				if !strings.Contains(outs, want) {
					t.Errorf("no %q in\n%s", want, outs)
				}
			}
		})
	}
}

// cleanEnv is this process's environment without the launcher variables
// that a test's own launcher may have set.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GOCCL_") || strings.HasPrefix(k, "SLURM_") || strings.HasPrefix(k, "PET_") ||
			k == "RANK" || k == "WORLD_SIZE" || k == "MASTER_ADDR" || k == "MASTER_PORT" {
			continue
		}
		env = append(env, kv)
	}
	return env
}
