package goccl_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/cluster"
	"github.com/goccl/goccl/internal/cluster/clustertest"
)

// TestNetnsECMPQueuePairs: GOCCL_IB_QPS_PER_CONNECTION gives RoCE the flow
// entropy ECMP needs. Two namespace hosts with two rails each are made
// into a routed fabric: each host's address (GOCCL_SOCKET_IFNAME's) is on
// an interface of its own, and its route to the other's is an equal-cost
// multipath over both rails, hashed on the 5-tuple (the kernel's
// fib_multipath_hash_policy 1, as an ECMP switch or a routed host does).
// With one queue pair per connection a host's RoCE traffic is one flow, on
// one path; with 16, each on its own UDP source port, both paths carry
// a share of it. Two checked 64 MiB AllReduces each time.
func TestNetnsECMPQueuePairs(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace test; skipped with -short")
	}
	if why := clustertest.Skip(); why != "" {
		t.Skip(why)
	}
	const n = 2
	c := clustertest.New(t, cluster.Config{Hosts: n, Rails: 2})
	lb := func(h int) string { return fmt.Sprintf("10.231.%d.%d", os.Getpid()%200, h+1) }
	run := func(h int, args ...string) {
		t.Helper()
		if out, err := c.Command(context.Background(), h, args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %s: %v\n%s", c.Hosts[h].Name, strings.Join(args, " "), err, out)
		}
	}
	for h := range n {
		p := 1 - h
		// A veth whose other end stays in the host stands in for a dummy
		// interface (this kernel may have no dummy module).
		run(h, "ip", "link", "add", "lb0", "type", "veth", "peer", "name", "lb0p")
		run(h, "ip", "link", "set", "lb0p", "up")
		run(h, "ip", "link", "set", "lb0", "up")
		run(h, "ip", "addr", "add", lb(h)+"/32", "dev", "lb0")
		for _, kv := range []string{"net.ipv4.fib_multipath_hash_policy=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"} {
			run(h, "sysctl", "-qw", kv)
		}
		route := []string{"ip", "route", "add", lb(p) + "/32"}
		for _, l := range c.Hosts[p].Links {
			route = append(route, "nexthop", "via", l.Addr.String(), "dev", c.Hosts[h].Links[l.Rail].Iface)
			run(h, "sysctl", "-qw", "net.ipv4.conf."+c.Hosts[h].Links[l.Rail].Iface+".rp_filter=0")
		}
		run(h, route...)
	}
	for i, tc := range []struct {
		qps  int
		both bool // both paths carry a share
	}{{1, false}, {16, true}} {
		t.Run("qps="+strconv.Itoa(tc.qps), func(t *testing.T) {
			before, err := c.Stats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			store := lb(0) + ":" + strconv.Itoa(29561+i)
			cmds := make([]*exec.Cmd, n)
			for r := range n {
				cmds[r] = c.Command(ctx, r, os.Args[0], "-test.run=^$")
				cmds[r].Env = append(os.Environ(), "GOCCL_TEST_WORKER=railloop", "GOCCL_TEST_OPS=2",
					"GOCCL_RANK="+strconv.Itoa(r), "GOCCL_WORLD_SIZE="+strconv.Itoa(n), "GOCCL_LOCAL_RANK=0",
					"GOCCL_STORE_ADDR="+store, "GOCCL_SOCKET_IFNAME=lb0", "GOCCL_SHM_DISABLE=1", "GOCCL_NET=roce",
					"GOCCL_IB_QPS_PER_CONNECTION="+strconv.Itoa(tc.qps), "GOCCL_DEBUG=INFO", "GOCCL_TIMEOUT=120s")
			}
			outs := spawnCmds(t, cmds)
			if tc.qps > 1 && !strings.Contains(outs[0], fmt.Sprintf("via %d queue pairs [qp0 NET/RoCE", tc.qps)) {
				t.Errorf("rank 0's INFO lines name no link over %d queue pairs:\n%s", tc.qps, outs[0])
			}
			after, err := c.Stats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for h := range n {
				var sent [2]uint64
				for i := range sent {
					sent[i] = after[h].Links[i].TxBytes - before[h].Links[i].TxBytes
				}
				lo, hi := min(sent[0], sent[1]), max(sent[0], sent[1])
				share := float64(lo) / float64(lo+hi)
				t.Logf("%s sent %d bytes on eth0, %d on eth1 (the smaller share %.1f %%)", c.Hosts[h].Name, sent[0], sent[1], 100*share)
				if hi < 64<<20 {
					t.Fatalf("%s sent %d and %d bytes: want the AllReduces' 128 MiB", c.Hosts[h].Name, sent[0], sent[1])
				}
				// 16 flows on two paths: fewer than 2 on one has odds of
				// 17 in 32768; 2 of 16 is 12.5 %.
				if tc.both && share < 0.10 {
					t.Errorf("%s: %.1f %% of its bytes on the less used path: want both paths used (≥ 10 %%)", c.Hosts[h].Name, 100*share)
				}
				if !tc.both && share > 0.05 {
					t.Errorf("%s: %.1f %% of its bytes on the less used path: one queue pair is one flow, want one path (≤ 5 %%)", c.Hosts[h].Name, 100*share)
				}
			}
		})
	}
}
