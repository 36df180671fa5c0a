package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// lineNet is 1 GPU and one 400 Gbit/s NIC per node (NVSwitch intra, not a
// bottleneck), nodes on a two-tier fat-tree of perLeaf nodes per leaf.
func lineNet(nodes, perLeaf int, over float64) *Topology {
	return &Topology{Name: "line", Nodes: nodes, GPUsPerNode: 1,
		Intra:       Fabric{Kind: "nvswitch", GBps: 450},
		NICsPerNode: 1, NICGbps: 400,
		Network: Network{Kind: "fat-tree", LatencyUs: 1, Oversubscription: over, NodesPerLeaf: perLeaf},
		Runtime: "nccl"}
}

// nic400 is a 400 Gbit/s link's data rate, B/s (InfiniBand's payload
// share at a 4096-byte MTU).
const nic400 = 50e9 * 4096 / 4122

// runFlows routes (src, dst, id) flows of b bytes each and runs them.
func runFlows(t *testing.T, g *Graph, b float64, pairs ...[3]int) []Flow {
	t.Helper()
	var flows []Flow
	for _, p := range pairs {
		path := g.Route(nil, p[0], p[1], g.NICOf(p[0]), g.NICOf(p[1]), p[2], b)
		flows = append(flows, Flow{Src: p[0], Dst: p[1], Bytes: b, Path: path})
	}
	if _, err := g.Run(flows); err != nil {
		t.Fatal(err)
	}
	return flows
}

// TestMaxMinTextbook: progressive filling on a line network of the kind
// Bertsekas & Gallager §6.5.2 works through, rates computed by hand.
func TestMaxMinTextbook(t *testing.T) {
	// Three unit links in a row; session 0 crosses all three, sessions 1
	// and 2 the first, session 3 the second, session 4 the third. Link 1
	// fills first at 1/3 (sessions 0, 1, 2); then sessions 3 and 4 have
	// their links' 1 − 1/3 = 2/3 alone.
	rates, bott, err := MaxMin([]float64{1, 1, 1}, [][]int32{{0, 1, 2}, {0}, {0}, {1}, {2}})
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1.0 / 3, 1.0 / 3, 1.0 / 3, 2.0 / 3, 2.0 / 3}
	for i := range want {
		if !near(rates[i], want[i]) {
			t.Errorf("session %d: rate %v, want %v", i, rates[i], want[i])
		}
	}
	if bott[0] != 0 || bott[3] != 1 || bott[4] != 2 {
		t.Errorf("bottlenecks %v, want 0 for session 0, 1 for 3, 2 for 4", bott)
	}
	// Capacities 10, 4, 6: f0 on all three, f1 on L0, f2 on L1, f3 on L1
	// and L2, f4 on L2. L1 fills at 4/3 (f0, f2, f3); L2 has 6 − 8/3 =
	// 10/3 for f4; L0 has 10 − 4/3 = 26/3 for f1.
	rates, _, err = MaxMin([]float64{10, 4, 6}, [][]int32{{0, 1, 2}, {0}, {1}, {1, 2}, {2}})
	if err != nil {
		t.Fatal(err)
	}
	want = []float64{4.0 / 3, 26.0 / 3, 4.0 / 3, 4.0 / 3, 10.0 / 3}
	for i := range want {
		if !near(rates[i], want[i]) {
			t.Errorf("flow %d: rate %v, want %v", i, rates[i], want[i])
		}
	}
	if _, _, err := MaxMin([]float64{1}, [][]int32{{}}); err == nil {
		t.Error("a flow without links: no error")
	}
	if _, _, err := MaxMin([]float64{1}, [][]int32{{1}}); err == nil {
		t.Error("a link out of range: no error")
	}
}

// TestRunEventDriven: when a flow ends, the others share its bandwidth.
func TestRunEventDriven(t *testing.T) {
	// Two GPUs of one node send to a third over its 10 GB/s link in, 1 GB
	// and 3 GB. Both at
	// 5 GB/s until the first ends at 0.2 s (1 GB), the second has 2 GB
	// left at 10 GB/s: 0.4 s.
	tp := &Topology{Name: "box", Nodes: 1, GPUsPerNode: 3, Intra: Fabric{Kind: "shm", GBps: 10}, Runtime: "goccl"}
	g, err := tp.BuildGraph("")
	if err != nil {
		t.Fatal(err)
	}
	flows := []Flow{{Src: 0, Dst: 2, Bytes: 1e9}, {Src: 1, Dst: 2, Bytes: 3e9}}
	for i := range flows {
		flows[i].Path = g.Route(nil, flows[i].Src, flows[i].Dst, 0, 0, 0, flows[i].Bytes)
	}
	phases, err := g.Run(flows)
	if err != nil {
		t.Fatal(err)
	}
	if phases != 2 || !near(flows[0].Finish, 0.2) || !near(flows[1].Finish, 0.4) {
		t.Errorf("phases %d, finishes %v and %v s, want 2, 0.2 and 0.4", phases, flows[0].Finish, flows[1].Finish)
	}
	if g.LinkName(flows[0].Bottleneck) != "node 0 → gpu 2" { // shared in the first phase
		t.Errorf("bottleneck %q, want node 0 → gpu 2", g.LinkName(flows[0].Bottleneck))
	}
}

// TestFlowAgreesWithClosedForm: on a non-blocking network with paths that
// do not collide, the flow level and the closed form are the same model
// (the ring's or the chain's bandwidth is the smaller of a GPU's link and
// its node's NICs; the tree's, each GPU's link carrying the size twice
// over nodes whose every GPU heads a channel; the same latency terms), so
// they agree within 2 %.
func TestFlowAgreesWithClosedForm(t *testing.T) {
	for _, c := range []struct {
		preset, routing string
		nodes           int
		kind, algo      string
	}{
		{"dgx-h100", "spread", 16, "all_reduce", "ring"},     // fat-tree: 4 leaves, the ring crosses spines
		{"dgx-h100", "spread", 16, "all_gather", "ring"},     //
		{"dgx-a100", "spread", 12, "reduce_scatter", "ring"}, //
		{"hgx-h100", "ecmp", 64, "all_reduce", "ring"},       // rails: 2 leaves per rail, one flow per up-link
		{"a100-pcie", "ecmp", 4, "all_reduce", "ring"},       // single switch, 2 channels: the NICs bound it
		{"dgx-h100", "spread", 16, "broadcast", "ring"},      // the ring's chain, every edge the whole size
		{"hgx-h100", "ecmp", 64, "reduce", "ring"},           //
		{"a100-pcie", "ecmp", 4, "broadcast", "ring"},        //
		{"dgx-h100", "spread", 1, "sendrecv", "p2p"},         // NVLink, LL capped on one node
		{"dgx-h100", "spread", 16, "sendrecv", "p2p"},        // one NIC per node boundary
		{"a100-pcie", "ecmp", 4, "sendrecv", "p2p"},          //
		{"dgx-h100", "spread", 16, "all_reduce", "tree"},     // double binary tree over 16 nodes, 8 channels
		{"dgx-h100", "spread", 15, "all_reduce", "tree"},     // odd: tree 1 shifted, not mirrored
		{"dgx-a100", "spread", 12, "all_reduce", "tree"},     // the NICs bound it
		{"hgx-h100", "ecmp", 64, "all_reduce", "tree"},       //
	} {
		tp, err := Preset(c.preset)
		if err != nil {
			t.Fatal(err)
		}
		tp = tp.WithNodes(c.nodes)
		for _, size := range []int64{1 << 20, 1 << 30, 8 << 30} {
			coll := Collective{Kind: c.kind, Bytes: size, Algo: c.algo}
			closed, err := tp.Collective(coll)
			if err != nil {
				t.Fatal(err)
			}
			flow, _, err := tp.FlowCollective(coll, FlowOptions{Routing: c.routing})
			if err != nil {
				t.Fatal(err)
			}
			e := flow.TimeUs/closed.TimeUs - 1
			t.Logf("%s×%d %s %s %d B: flow %.1f µs, closed form %.1f µs: %+.2g", c.preset, c.nodes, c.kind, c.algo, size, flow.TimeUs, closed.TimeUs, e)
			if math.Abs(e) > 0.02 || flow.Proto != closed.Proto || flow.Algo != c.algo {
				t.Errorf("%s×%d %s %s %d B: flow %.1f µs (%s %s), closed form %.1f µs (%s): %+.2f %%",
					c.preset, c.nodes, c.kind, c.algo, size, flow.TimeUs, flow.Algo, flow.Proto, closed.TimeUs, closed.Proto, 100*e)
			}
		}
	}
}

// TestFlowECMPNeverFaster: hashed paths can only add contention.
func TestFlowECMPNeverFaster(t *testing.T) {
	tp, _ := Preset("dgx-h100")
	tp = tp.WithNodes(16)
	coll := Collective{Kind: "all_reduce", Bytes: 1 << 30}
	spread, _, err := tp.FlowCollective(coll, FlowOptions{Routing: "spread"})
	if err != nil {
		t.Fatal(err)
	}
	ecmp, rep, err := tp.FlowCollective(coll, FlowOptions{Routing: "ecmp"})
	if err != nil {
		t.Fatal(err)
	}
	if ecmp.TimeUs < spread.TimeUs*(1-1e-9) {
		t.Errorf("ecmp %.1f µs faster than spread %.1f µs", ecmp.TimeUs, spread.TimeUs)
	}
	if len(rep.Links) == 0 || rep.Links[0].Utilization > 1+1e-9 || len(rep.Jobs[0].Critical) == 0 {
		t.Errorf("report: %+v", rep)
	}
}

// TestFlowOversubscription: 4 nodes of one leaf send to 4 nodes of the
// other. Non-blocking, the leaf has 4 up-links and each flow its NIC's
// rate; at 2:1 it has 2, two flows share each: half the rate.
func TestFlowOversubscription(t *testing.T) {
	pairs := [][3]int{{0, 4, 0}, {1, 5, 0}, {2, 6, 0}, {3, 7, 0}}
	for _, c := range []struct {
		over float64
		rate float64 // B/s per flow, by hand
	}{{1, nic400}, {2, nic400 / 2}} {
		g, err := lineNet(8, 4, c.over).BuildGraph("spread")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range runFlows(t, g, 1e9, pairs...) {
			if !near(f.Finish, 1e9/c.rate) {
				t.Errorf("oversubscription %g: flow %d→%d ends at %v s, want %v", c.over, f.Src, f.Dst, f.Finish, 1e9/c.rate)
			}
		}
	}
}

// TestFlowECMPCollision: two flows from one leaf to the other, two
// spines. Ids whose hashes pick the same spine share its up-link (half
// the NIC's rate each); spread routing gives each a spine.
func TestFlowECMPCollision(t *testing.T) {
	tp := lineNet(4, 2, 1) // leaves of 2 nodes, 2 up-links each: 2 spines
	id := 0
	for flowHash(1, 3, id)%2 != flowHash(0, 2, 0)%2 {
		id++
	}
	spine := flowHash(0, 2, 0) % 2
	for _, c := range []struct {
		routing string
		rate    float64
	}{{"ecmp", nic400 / 2}, {"spread", nic400}} {
		g, err := tp.BuildGraph(c.routing)
		if err != nil {
			t.Fatal(err)
		}
		flows := runFlows(t, g, 1e9, [3]int{0, 2, 0}, [3]int{1, 3, id})
		for _, f := range flows {
			if !near(f.Finish, 1e9/c.rate) {
				t.Errorf("%s: flow %d→%d ends at %v s, want %v", c.routing, f.Src, f.Dst, f.Finish, 1e9/c.rate)
			}
		}
		if c.routing == "ecmp" {
			want := "leaf 0 → spine " + string(rune('0'+spine))
			if got := g.LinkName(flows[1].Bottleneck); got != want && g.LinkName(flows[0].Bottleneck) != want {
				t.Errorf("ecmp bottleneck %q, want %q", got, want)
			}
		}
	}
}

// TestFlowTwoJobsShareLink: two all_gathers of 2 ranks across the same
// two leaves, joined by one up-link (2:1 oversubscription over 2 nodes):
// alone each moves its S/2 per edge at the NIC's rate, together at half.
func TestFlowTwoJobsShareLink(t *testing.T) {
	tp := lineNet(4, 2, 2)
	const size = 1 << 30
	alone, err := tp.FlowJobs([]Job{{Name: "a", Kind: "all_gather", Bytes: size, GPUs: []int{0, 2}}}, FlowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	both, err := tp.FlowJobs([]Job{
		{Name: "a", Kind: "all_gather", Bytes: size, GPUs: []int{0, 2}},
		{Name: "b", Kind: "all_gather", Bytes: size, GPUs: []int{1, 3}},
	}, FlowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := size / 2 / nic400 * 1e6; !near(alone.Jobs[0].TransferUs, want) {
		t.Errorf("alone: transfer %.2f µs, want %.2f", alone.Jobs[0].TransferUs, want)
	}
	for _, j := range both.Jobs {
		if want := size / 2 / (nic400 / 2) * 1e6; !near(j.TransferUs, want) || !near(j.LatencyUs, alone.Jobs[0].LatencyUs) {
			t.Errorf("job %s: transfer %.2f µs, latency %.2f, want %.2f and %.2f", j.Name, j.TransferUs, j.LatencyUs, want, alone.Jobs[0].LatencyUs)
		}
	}
}

// TestGraphShapes: each shape's paths, named hop by hop.
func TestGraphShapes(t *testing.T) {
	rails := &Topology{Name: "rails", Nodes: 4, GPUsPerNode: 2, Intra: Fabric{Kind: "nvswitch", GBps: 450},
		NICsPerNode: 2, NICGbps: 400, Network: Network{Kind: "rail-optimized", NodesPerLeaf: 2}, Runtime: "nccl"}
	three := lineNet(4, 1, 1)
	three.Network.Tiers, three.Network.LeavesPerPod = 3, 2
	dfly := lineNet(4, 1, 1)
	dfly.Network = Network{Kind: "dragonfly", NodesPerLeaf: 1, Groups: 2, SwitchesPerGroup: 2, GlobalLinks: 1}
	for _, c := range []struct {
		topo     *Topology
		src, dst int
		want     string
	}{
		{rails, 1, 3, "gpu 1 → node 0|node 0 → leaf 1 (nic 1)|leaf 1 → node 1 (nic 1)|node 1 → gpu 3"},                                   // one rail, one leaf
		{rails, 1, 5, "gpu 1 → node 0|node 0 → leaf 1 (nic 1)|leaf 1 → spine 0|spine 0 → leaf 3|leaf 3 → node 2 (nic 1)|node 2 → gpu 5"}, // rail 1 of the next nodes
		{three, 0, 1, "gpu 0 → node 0|node 0 → leaf 0 (nic 0)|leaf 0 → agg 0.0|agg 0.0 → leaf 1|leaf 1 → node 1 (nic 0)|node 1 → gpu 1"},
		{dfly, 0, 3, "gpu 0 → node 0|node 0 → switch 0.0 (nic 0)|switch 0.0 → switch 1.0|switch 1.0 → switch 1.1|switch 1.1 → node 3 (nic 0)|node 3 → gpu 3"},
		{dfly, 1, 2, "gpu 1 → node 1|node 1 → switch 0.1 (nic 0)|switch 0.1 → switch 0.0|switch 0.0 → switch 1.0|switch 1.0 → node 2 (nic 0)|node 2 → gpu 2"},
	} {
		g, err := c.topo.BuildGraph("spread")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range g.Route(nil, c.src, c.dst, g.NICOf(c.src), g.NICOf(c.dst), 0, 1) {
			names = append(names, g.LinkName(l))
		}
		if got := strings.Join(names, "|"); got != c.want {
			t.Errorf("%s %d→%d:\n got %s\nwant %s", c.topo.Network.Kind, c.src, c.dst, got, c.want)
		}
	}
	// Across pods in three tiers: leaf, aggregation, core, aggregation, leaf.
	g, _ := three.BuildGraph("spread")
	path := g.Route(nil, 0, 3, 0, 0, 0, 1)
	if got := g.LinkName(path[3]); !strings.HasPrefix(got, "agg 0.0 → core ") || len(path) != 8 {
		t.Errorf("across pods: %d links, third switch link %q", len(path), got)
	}
}

// TestNetworkShapeValidate: shape fields out of range are errors naming
// them; the presets' JSON is unchanged (the new fields are omitted at 0).
func TestNetworkShapeValidate(t *testing.T) {
	for _, c := range []struct {
		set  func(*Network)
		want string
	}{
		{func(n *Network) { n.Tiers = 4 }, "network.tiers = 4"},
		{func(n *Network) { n.Radix = -1 }, "network.radix = -1"},
		{func(n *Network) { n.NodesPerLeaf = -2 }, "network.nodes_per_leaf = -2"},
		{func(n *Network) { n.AggOversubscription = 0.5 }, "network.agg_oversubscription = 0.5"},
		{func(n *Network) { n.GlobalGbps = math.NaN() }, "network.global_gbps = NaN"},
	} {
		tp := lineNet(4, 2, 1)
		c.set(&tp.Network)
		if err := tp.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error naming %q", err, c.want)
		}
	}
	d := lineNet(100, 1, 1)
	d.Network = Network{Kind: "dragonfly", Groups: 2, SwitchesPerGroup: 2, NodesPerLeaf: 1}
	if _, err := d.BuildGraph(""); err == nil || !strings.Contains(err.Error(), "holds 4 nodes, not 100") {
		t.Errorf("dragonfly too small: %v", err)
	}
	d.Network = Network{Kind: "dragonfly", Groups: 10, SwitchesPerGroup: 2, NodesPerLeaf: 5, GlobalLinks: 1}
	if _, err := d.BuildGraph(""); err == nil || !strings.Contains(err.Error(), "global_links = 1") {
		t.Errorf("dragonfly without enough global links: %v", err)
	}
	big, _ := Preset("dgx-h100")
	if _, err := big.WithNodes(maxGraphGPUs/8 + 1).BuildGraph(""); err == nil {
		t.Error("a graph over the flow level's limit: no error")
	}
	var b bytes.Buffer
	p, _ := Preset("dgx-h100")
	if err := json.NewEncoder(&b).Encode(p); err != nil || strings.Contains(b.String(), "tiers") {
		t.Errorf("preset JSON: %v %s", err, b.String())
	}
	if _, err := big.FlowJobs([]Job{{Kind: "scan", Bytes: 8}}, FlowOptions{}); err == nil || !strings.Contains(err.Error(), `kind "scan"`) {
		t.Errorf("scan at the flow level: %v", err)
	}
	if _, err := big.FlowJobs([]Job{{Kind: "broadcast", Algo: "tree", Bytes: 8}}, FlowOptions{}); err == nil || !strings.Contains(err.Error(), `algo "tree"`) {
		t.Errorf("tree broadcast at the flow level: %v", err)
	}
	if _, err := big.FlowJobs([]Job{{Kind: "sendrecv", Bytes: 8, GPUs: []int{3}}}, FlowOptions{}); err == nil || !strings.Contains(err.Error(), "sendrecv on 1 GPU") {
		t.Errorf("sendrecv on one GPU: %v", err)
	}
	if _, err := big.FlowJobs([]Job{{Kind: "all_reduce", Bytes: 8, GPUs: []int{0, 0}}}, FlowOptions{}); err == nil || !strings.Contains(err.Error(), "gpu 0") {
		t.Errorf("a GPU twice: %v", err)
	}
}

// BenchmarkFlowAllReduce16k: one ring all_reduce of 1 GiB over 16,384
// H100s (2,048 DGX nodes, two-tier fat-tree, ECMP): 131,072 flows.
func BenchmarkFlowAllReduce16k(b *testing.B) {
	tp, _ := Preset("dgx-h100")
	tp = tp.WithNodes(2048)
	for _, routing := range Routings {
		b.Run(routing, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, rep, err := tp.FlowCollective(Collective{Kind: "all_reduce", Bytes: 1 << 30}, FlowOptions{Routing: routing})
				if err != nil || rep.Flows != 16384*8 {
					b.Fatal(err)
				}
			}
		})
	}
}
