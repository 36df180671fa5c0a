package goccl_test

import (
	"context"

	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/cluster"
	"github.com/goccl/goccl/internal/cluster/clustertest"
)

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
