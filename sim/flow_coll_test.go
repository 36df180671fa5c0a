package sim

import (
	"math/bits"
	"testing"
)

// TestDtreeShape: NCCL's double binary tree, parents worked out by hand
// from trees.cc's rule for 8 ranks (tree 1 mirrored) and 5 (tree 1
// shifted); for every size, each tree spans the ranks from one root
// within ⌈log2 n⌉ levels, and no rank has children in both trees but
// tree 0's root (one child) when n is odd.
func TestDtreeShape(t *testing.T) {
	for _, c := range []struct {
		n      int
		t0, t1 []int
	}{
		// 0 ← 4 ← {2, 6}, 2 ← {1, 3}, 6 ← {5, 7}; mirrored: 7 ← 3 ← {5, 1}, 5 ← {6, 4}, 1 ← {2, 0}.
		{8, []int{-1, 2, 4, 2, 0, 6, 4, 6}, []int{1, 3, 1, 7, 5, 3, 5, -1}},
		// 0 ← 4 ← 2 ← {1, 3}; shifted by one: 1 ← 0 ← 3 ← {2, 4}.
		{5, []int{-1, 2, 4, 2, 0}, []int{1, -1, 3, 0, 3}},
	} {
		for r := range c.n {
			if p0, p1 := dtreeParent(0, r, c.n), dtreeParent(1, r, c.n); p0 != c.t0[r] || p1 != c.t1[r] {
				t.Errorf("n %d rank %d: parents %d, %d; want %d, %d", c.n, r, p0, p1, c.t0[r], c.t1[r])
			}
		}
	}
	for n := 1; n <= 300; n++ {
		inner := make([]int, n) // trees in which a rank has children
		for tr := range 2 {
			roots, has := 0, make([]bool, n)
			for r := range n {
				p, depth := dtreeParent(tr, r, n), 0
				if p < 0 {
					roots++
				} else if !has[p] {
					has[p] = true
					inner[p]++
				}
				for q := r; dtreeParent(tr, q, n) >= 0; q = dtreeParent(tr, q, n) {
					if depth++; depth > bits.Len(uint(n-1)) {
						t.Fatalf("n %d tree %d: rank %d deeper than %d", n, tr, r, bits.Len(uint(n-1)))
					}
				}
			}
			if roots != 1 {
				t.Errorf("n %d tree %d: %d roots", n, tr, roots)
			}
		}
		for r, k := range inner {
			if k > 1 && (r > 0 || n%2 == 0) {
				t.Errorf("n %d: rank %d has children in both trees", n, r)
			}
		}
	}
}

// TestFlowTreeOversubscribed: a tree all_reduce of 1 GiB over 8 nodes (1
// GPU and NIC each), 4 per leaf. The busiest NIC (a rank inside one tree,
// a leaf of the other) sends 4 flows of S/2: 2S at the NIC's rate, at
// Simple's share (treeEff), by hand. Only 4 flows each way cross between
// the leaves (edges 4→0, 2→4 of tree 0, 3→7, 5→3 of tree 1), each held to
// a quarter of a NIC by its busiest NIC, so one up-link per leaf (4:1)
// leaves the time unchanged; the closed form divides every NIC by 4.
func TestFlowTreeOversubscribed(t *testing.T) {
	const size = 1 << 30
	want := 2 * size / nic400 / treeEff * 1e6
	var closed [2]float64
	for i, over := range []float64{1, 4} {
		tp := lineNet(8, 4, over)
		rep, err := tp.FlowJobs([]Job{{Name: "ar", Kind: "all_reduce", Algo: "tree", Bytes: size}}, FlowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		j := rep.Jobs[0]
		if j.Algo != "tree" || j.Proto != "Simple" || !near(j.TransferUs, want) {
			t.Errorf("oversubscription %g: %s %s transfer %.1f µs, want tree Simple %.1f", over, j.Algo, j.Proto, j.TransferUs, want)
		}
		r, err := tp.Collective(Collective{Kind: "all_reduce", Algo: "tree", Bytes: size})
		if err != nil {
			t.Fatal(err)
		}
		closed[i] = r.TimeUs
		t.Logf("oversubscription %g: flow %.1f µs, closed form %.1f µs", over, j.TimeUs, r.TimeUs)
	}
	if closed[1] < 3.9*closed[0] {
		t.Errorf("closed form: %.1f µs at 4:1, %.1f at 1:1: want 4 times", closed[1], closed[0])
	}
}

// TestFlowChainsShareLink: a broadcast on GPUs 0, 2 (root 0) and a reduce
// on 3, 1 (root 3) each cross from leaf 0 to leaf 1, whose single up-link
// (2:1 over 2 nodes) they share. Alone a chain's one edge moves S at the
// NIC's rate, not the closed form's half (it divides every NIC by the
// oversubscription); together each gets half the up-link.
func TestFlowChainsShareLink(t *testing.T) {
	tp := lineNet(4, 2, 2)
	const size = 1 << 30
	bcast := Job{Name: "b", Kind: "broadcast", Bytes: size, GPUs: []int{0, 2}}
	reduce := Job{Name: "r", Kind: "reduce", Bytes: size, GPUs: []int{3, 1}}
	for _, job := range []Job{bcast, reduce} {
		alone, err := tp.FlowJobs([]Job{job}, FlowOptions{})
		if err != nil {
			t.Fatal(err)
		}
		closed, err := tp.Collective(Collective{Kind: job.Kind, Bytes: size, Ranks: 2})
		if err != nil {
			t.Fatal(err)
		}
		j := alone.Jobs[0]
		if want := size / nic400 * 1e6; j.Proto != "Simple" || !near(j.TransferUs, want) || alone.Flows != 1 {
			t.Errorf("%s alone: %s transfer %.1f µs in %d flows, want Simple %.1f in 1", job.Kind, j.Proto, j.TransferUs, alone.Flows, want)
		}
		if j.TimeUs > 0.55*closed.TimeUs {
			t.Errorf("%s alone: flow %.1f µs, closed form %.1f: want about half", job.Kind, j.TimeUs, closed.TimeUs)
		}
	}
	both, err := tp.FlowJobs([]Job{bcast, reduce}, FlowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range both.Jobs {
		if want := 2 * size / nic400 * 1e6; !near(j.TransferUs, want) {
			t.Errorf("%s together: transfer %.1f µs, want %.1f", j.Kind, j.TransferUs, want)
		}
	}
}

// TestFlowSendRecvNetwork: sendrecv on 8 nodes, 4 per leaf, one up-link
// per leaf (4:1): only 3→4 and 7→0 cross, one each way, so every flow has
// its NIC's rate (by hand) where the closed form divides the NICs by 4.
// On 64 HGX H100 (rails) the flow from a node's last GPU to the next
// node's first crosses from rail 7 to rail 0 through the spines: spread
// routing gives each its own up-link and agrees with the closed form;
// ECMP hashes several onto one.
func TestFlowSendRecvNetwork(t *testing.T) {
	const size = 1 << 30
	tp := lineNet(8, 4, 4)
	rep, err := tp.FlowJobs([]Job{{Name: "sr", Kind: "sendrecv", Bytes: size}}, FlowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	closed, err := tp.Collective(Collective{Kind: "sendrecv", Bytes: size})
	if err != nil {
		t.Fatal(err)
	}
	j := rep.Jobs[0]
	if want := size / nic400 * 1e6; j.Algo != "p2p" || j.Proto != "Simple" || !near(j.TransferUs, want) || rep.Flows != 8 {
		t.Errorf("4:1: %s %s transfer %.1f µs in %d flows, want p2p Simple %.1f in 8", j.Algo, j.Proto, j.TransferUs, rep.Flows, want)
	}
	if j.TimeUs > 0.3*closed.TimeUs {
		t.Errorf("4:1: flow %.1f µs, closed form %.1f: want about a quarter", j.TimeUs, closed.TimeUs)
	}
	hgx, _ := Preset("hgx-h100")
	hgx = hgx.WithNodes(64)
	coll := Collective{Kind: "sendrecv", Bytes: size}
	want, err := hgx.Collective(coll)
	if err != nil {
		t.Fatal(err)
	}
	spread, _, err := hgx.FlowCollective(coll, FlowOptions{Routing: "spread"})
	if err != nil {
		t.Fatal(err)
	}
	ecmp, _, err := hgx.FlowCollective(coll, FlowOptions{Routing: "ecmp"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("hgx-h100×64 sendrecv 1 GiB: closed form %.1f µs, spread %.1f, ecmp %.1f", want.TimeUs, spread.TimeUs, ecmp.TimeUs)
	if !near(spread.TimeUs, want.TimeUs) || ecmp.TimeUs < 2*spread.TimeUs {
		t.Errorf("hgx-h100×64: spread %.1f µs, ecmp %.1f; want the closed form's %.1f and ECMP collisions", spread.TimeUs, ecmp.TimeUs, want.TimeUs)
	}
}

// BenchmarkFlowCollectives16k: one broadcast, reduce, sendrecv and tree
// all_reduce of 1 GiB over 16,384 H100s (2,048 DGX nodes, two-tier
// fat-tree, ECMP).
func BenchmarkFlowCollectives16k(b *testing.B) {
	tp, _ := Preset("dgx-h100")
	tp = tp.WithNodes(2048)
	for _, c := range []Collective{
		{Kind: "broadcast", Bytes: 1 << 30}, {Kind: "reduce", Bytes: 1 << 30},
		{Kind: "sendrecv", Bytes: 1 << 30}, {Kind: "all_reduce", Algo: "tree", Bytes: 1 << 30},
	} {
		b.Run(c.Kind+"-"+c.Algo, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, rep, err := tp.FlowCollective(c, FlowOptions{})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(rep.Flows), "flows")
				b.ReportMetric(float64(rep.Phases), "solves")
			}
		})
	}
}
