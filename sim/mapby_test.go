package sim

import (
	"math"
	"testing"
)

// TestMapByNode: on goccl's namespace cluster (2 hosts × 2), ranks dealt
// round-robin over the hosts make every hop of a rank-ordered ring cross
// between the hosts, two flows per host link where host-major order has
// one: AllGather and ReduceScatter on the flat ring take twice as long,
// while goccl's AllReduce ring (ordered host by host whatever the ranks)
// and the hierarchical schedules do not change; NCCL's runtime ignores the
// placement.
func TestMapByNode(t *testing.T) {
	netns := mustPreset(t, "goccl-netns")
	dgx := mustPreset(t, "dgx-h100").WithNodes(2)
	for _, tc := range []struct {
		topo        *Topology
		kind, algo  string
		ranks       int
		ratio       float64 // time round-robin / host-major
		description string
	}{
		{netns, "all_gather", "ring", 0, 2, "rank-ordered ring"},
		{netns, "reduce_scatter", "ring", 0, 2, "rank-ordered ring"},
		{netns, "all_reduce", "ring", 0, 1, "host-ordered ring"},
		{netns, "all_gather", "", 0, 1, "hierarchical"},
		{dgx, "all_gather", "ring", 16, 1, "NCCL"},
	} {
		c := Collective{Kind: tc.kind, Algo: tc.algo, Bytes: 16 << 20, Ranks: tc.ranks}
		slot, err := tc.topo.Collective(c)
		if err != nil {
			t.Fatal(err)
		}
		c.MapBy = "node"
		node, err := tc.topo.Collective(c)
		if err != nil {
			t.Fatal(err)
		}
		if r := node.TimeUs / slot.TimeUs; math.Abs(r-tc.ratio) > 0.05*tc.ratio {
			t.Errorf("%s %s (%s): round-robin / host-major time %.3f, want %.2f", tc.kind, tc.algo, tc.description, r, tc.ratio)
		}
	}
	if _, err := netns.Collective(Collective{Kind: "all_reduce", Bytes: 1 << 20, MapBy: "core"}); err == nil {
		t.Error("MapBy core: no error")
	}
}
