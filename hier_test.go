package goccl_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestCollectivesHierarchical runs the collective matrix on ranks that
// GOCCL_HOSTID places on several "hosts" of this machine: shared memory
// within a host, TCP between hosts, and the hierarchical schedules (forced
// with GOCCL_ALGO=hier, or chosen by the tuner for large buffers), with the
// hosts' ranks numbered in blocks and dealt out round robin. The tuner's
// probe is off (GOCCL_TUNER_PROBE=0): its fixed threshold, algo.HierMinBytes,
// decides, not measurements of loopback (TestTunerProbe covers those).
func TestCollectivesHierarchical(t *testing.T) {
	counts := "0,1,7,100003" // 100003 elements: above the tuner's algo.HierMinBytes
	if testing.Short() {
		counts = "0,1,7,1003"
	}
	for _, tc := range []struct{ hosts, forced string }{{"a,a,b,b", "hier"}, {"a,b,a,b", ""}, {"a,a,a,b,b,b", "hier"}} {
		hosts, forced := tc.hosts, tc.forced
		{
			name := strings.ReplaceAll(hosts, ",", "") + "/algo=" + forced
			t.Run(name, func(t *testing.T) {
				keys := strings.Split(hosts, ",")
				n := len(keys)
				env := []string{"GOCCL_TEST_HOSTS=" + hosts, "GOCCL_TEST_COUNTS=" + counts, "GOCCL_DEBUG=INFO", "GOCCL_DEBUG_SUBSYS=INIT,COLL,NET,SHM",
					"GOCCL_TUNER_PROBE=0"}
				if forced != "" {
					env = append(env, "GOCCL_ALGO="+forced)
				}
				outs := spawn(t, n, "matrix", env...)
				for r, out := range outs {
					if !strings.Contains(out, "operations checked") {
						t.Fatalf("rank %d did not report:\n%s", r, out)
					}
					for p := 0; p < n; p++ {
						if p == r {
							continue
						}
						want := fmt.Sprintf("peer %d via tcp", p)
						if keys[p] == keys[r] {
							want = fmt.Sprintf("peer %d via shm", p)
						}
						if !strings.Contains(out, want) {
							t.Fatalf("rank %d: output lacks %q:\n%s", r, want, out)
						}
					}
					if !strings.Contains(out, fmt.Sprintf("init: 2 hosts, %d ranks per host", n/2)) {
						t.Fatalf("rank %d: no hierarchy in the log:\n%s", r, out)
					}
					// The tuner takes the hierarchical AllReduce from 64 KiB.
					if (forced == "hier" || !testing.Short()) && !strings.Contains(out, "AllReduce uses hier") {
						t.Fatalf("rank %d: no hierarchical AllReduce in the log:\n%s", r, out)
					}
					if forced == "hier" {
						for _, op := range []string{"Broadcast", "AllGather", "ReduceScatter"} {
							if !strings.Contains(out, op+" uses hier") {
								t.Fatalf("rank %d: %s did not run its hierarchical schedule:\n%s", r, op, out)
							}
						}
					}
				}
			})
		}
	}
}
