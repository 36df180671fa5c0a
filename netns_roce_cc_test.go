package goccl_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/cluster"
	"github.com/goccl/goccl/internal/cluster/clustertest"
)

// TestNetnsRoCEDCQCN: GOCCL_IB_DCQCN turns congestion control on for the
// links goccl makes over RoCE. Two namespace hosts at 200 Mbit/s whose
// switch marks CE above 16 KiB queued run a checked 64 MiB AllReduce over
// RoCE: without the variable the device's packets are not ECN-capable
// and the switch marks none; with it, they are, and it marks some (the
// marking is what makes DCQCN's CNPs, tested in rdma and rdma/qp).
func TestNetnsRoCEDCQCN(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace test; skipped with -short")
	}
	if why := clustertest.Skip(); why != "" {
		t.Skip(why)
	}
	c := clustertest.New(t, cluster.Config{Hosts: 2, Rate: mustRate("200mbit"), ECN: 16 << 10})
	marks := func() uint64 {
		t.Helper()
		st, err := c.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, h := range st {
			n += h.Links[0].ECNMarks
		}
		return n
	}
	for i, tc := range []struct {
		name string
		env  []string
		ect  bool
	}{
		{"off", nil, false},
		{"dcqcn", []string{"GOCCL_IB_DCQCN=200", "GOCCL_IB_TC=106"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := marks()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			store := c.Hosts[0].Addr.String() + ":" + strconv.Itoa(29551+i)
			cmds := make([]*exec.Cmd, 2)
			for r := range cmds {
				cmds[r] = c.Command(ctx, r, os.Args[0], "-test.run=^$")
				cmds[r].Env = append(os.Environ(), "GOCCL_TEST_WORKER=railloop", "GOCCL_TEST_OPS=1",
					"GOCCL_RANK="+strconv.Itoa(r), "GOCCL_WORLD_SIZE=2", "GOCCL_LOCAL_RANK=0",
					"GOCCL_STORE_ADDR="+store, "GOCCL_SHM_DISABLE=1", "GOCCL_NET=roce", "GOCCL_TIMEOUT=120s")
				cmds[r].Env = append(cmds[r].Env, tc.env...)
			}
			spawnCmds(t, cmds)
			got := marks() - before
			t.Logf("%d packets marked CE", got)
			if tc.ect && got == 0 {
				t.Error("no packet marked CE: the device's packets were not ECN-capable")
			}
			if !tc.ect && got != 0 {
				t.Errorf("%d packets marked CE without GOCCL_IB_DCQCN: the device's packets were ECN-capable", got)
			}
		})
	}
}
