package algo

import (
	"math"
	"testing"
)

// near reports whether got is want up to rounding.
func near(got, want float64) bool { return math.Abs(got-want) <= 1e-9*math.Abs(want) }

// TestModelOneLinkKind: with every rank on a host of its own and one kind
// of link, the model gives the costs of Thakur, Rabenseifner and Gropp
// (2005) for recursive doubling (lg p steps of the whole vector, two more
// for the ranks folded in when p is not a power of two), halving-doubling
// (2 lg p latencies, 2(p−1)/p of the vector), the ring (2(p−1) steps of
// n/p) and the ring all-gather (p−1 steps of n/p), and the binomial tree
// whose root sends to its children at once.
func TestModelOneLinkKind(t *testing.T) {
	const a, b, n = 3e-6, 1e-9, 1 << 16
	l := LinkCost{Alpha: a, Beta: b}
	for _, tc := range []struct {
		P                            int
		rd, rhd, ring, gather, bcast float64
	}{
		{4, 2 * (a + n*b), 4*a + 1.5*n*b, 6 * (a + n*b/4), 3 * (a + n*b/4), (a + 2*n*b) + (a + n*b)},
		{6, 4 * (a + n*b), 2*(a+n*b) + 4*a + 1.5*n*b, 10 * (a + n*b/6), 5 * (a + n*b/6),
			(a + 3*n*b) + (a + n*b)}, // 0→4,2,1 at once; then 4→5 and 2→3
	} {
		hostOf := make([]int, tc.P)
		for r := range hostOf {
			hostOf[r] = r
		}
		m := NewCostModel(hostOf, Costs{Intra: l, Inter: l})
		for _, c := range []struct {
			name      string
			got, want float64
		}{
			{"RD", m.AllReduce(n, RD), tc.rd},
			{"RHD", m.AllReduce(n, RHD), tc.rhd},
			{"ring", m.AllReduce(n, Ring), tc.ring},
			{"AllGather", m.AllGather(n, false), tc.gather},
			{"ReduceScatter", m.ReduceScatter(n, false), tc.gather},
			{"Broadcast", m.Broadcast(n, false), tc.bcast},
		} {
			if !near(c.got, c.want) {
				t.Errorf("P=%d %s: %g s, want %g", tc.P, c.name, c.got, c.want)
			}
		}
		if h := m.AllReduceHier(n, RD); !math.IsInf(h, 1) {
			t.Errorf("P=%d: AllReduceHier %g with one rank per host, want +Inf", tc.P, h)
		}
	}
}

// TestModelTwoLevels: 2 hosts × 2 ranks, blocked. Flat recursive doubling
// exchanges within the hosts, then both ranks of a host send the whole
// vector across at once (the host's link carries 2n); AllReduceHier
// reduce-scatters within the host, sends one half per rank across (n per
// host link), and all-gathers within the host. The difference is α_l − n·β_n:
// the hierarchical schedule wins from α_l/β_n bytes.
func TestModelTwoLevels(t *testing.T) {
	c := Costs{Intra: LinkCost{Alpha: 2e-6, Beta: 1 / 5e9}, Inter: LinkCost{Alpha: 50e-6, Beta: 1 / 118e6}}
	m := NewCostModel([]int{0, 0, 1, 1}, c)
	if m.Hosts != 2 || m.PerHost != 2 || m.P != 4 {
		t.Fatalf("model of %d hosts × %d ranks, %d ranks", m.Hosts, m.PerHost, m.P)
	}
	for _, n := range []float64{0, 64, 1 << 20} {
		flat := (c.Intra.Alpha + n*c.Intra.Beta) + (c.Inter.Alpha + 2*n*c.Inter.Beta)
		hier := 2*(c.Intra.Alpha+n/2*c.Intra.Beta) + (c.Inter.Alpha + n*c.Inter.Beta)
		if got := m.AllReduce(int(n), RD); !near(got, flat) {
			t.Errorf("n=%g: flat RD %g, want %g", n, got, flat)
		}
		if got := m.AllReduceHier(int(n), RD); !near(got, hier) {
			t.Errorf("n=%g: AllReduceHier %g, want %g", n, got, hier)
		}
	}
	// Interleaved hosts, the flat tree crosses twice per piece from host
	// 0 (0→1, then 2→3), BroadcastHier once: hierarchical wins; blocked,
	// the tree crosses once (0→2) and both are equal.
	inter := NewCostModel([]int{0, 1, 0, 1}, c)
	for _, n := range []int{64, 4 << 20} {
		if f, h := inter.Broadcast(n, false), inter.Broadcast(n, true); !(h < f) {
			t.Errorf("interleaved, %d bytes: BroadcastHier %g, flat %g", n, h, f)
		}
		if f, h := m.Broadcast(n, false), m.Broadcast(n, true); !(f <= h) {
			t.Errorf("blocked, %d bytes: BroadcastHier %g, flat %g", n, h, f)
		}
	}
	if m.AllGather(1<<20, true) >= m.AllGather(1<<20, false) || m.ReduceScatter(1<<20, true) >= m.ReduceScatter(1<<20, false) {
		t.Errorf("a slow network, 1 MiB: AllGatherHier %g (flat %g), ReduceScatterHier %g (flat %g)",
			m.AllGather(1<<20, true), m.AllGather(1<<20, false), m.ReduceScatter(1<<20, true), m.ReduceScatter(1<<20, false))
	}
	if h := NewCostModel([]int{0, 0, 1}, c).AllGather(64, true); !math.IsInf(h, 1) {
		t.Errorf("uneven hosts: AllGatherHier %g, want +Inf", h)
	}
}

// TestModelPipelines: a Broadcast of many pieces costs the first piece's
// rounds plus one busiest stage per further piece; AllReduceHier's pieces
// overlap the host's steps with the network's.
func TestModelPipelines(t *testing.T) {
	c := Costs{Intra: LinkCost{Alpha: 1e-6, Beta: 1e-10}, Inter: LinkCost{Alpha: 1e-5, Beta: 1e-8}}
	m := NewCostModel([]int{0, 0, 1, 1}, c)
	p := float64(pipelineBytes)
	intra, inter := c.Intra.Alpha+p*c.Intra.Beta, c.Inter.Alpha+p*c.Inter.Beta
	// 0→2 across and 0→1 within, then 2→3 within; 4 pieces.
	if got, want := m.Broadcast(4*pipelineBytes, false), inter+intra+3*inter; !near(got, want) {
		t.Errorf("flat Broadcast of 4 pieces: %g, want %g", got, want)
	}
	// Interleaved hosts: 0→1 across and 0→2 within, then 2→3 across; in
	// the steady state host 0's link carries two pieces per piece.
	il := NewCostModel([]int{0, 1, 0, 1}, c)
	if got, want := il.Broadcast(4*pipelineBytes, false), 2*inter+3*max(inter, 2*p*c.Inter.Beta); !near(got, want) {
		t.Errorf("interleaved flat Broadcast of 4 pieces: %g, want %g", got, want)
	}
	q := float64(hierPieceBytes)
	local := c.Intra.Alpha + q/2*c.Intra.Beta
	network := c.Inter.Alpha + q*c.Inter.Beta // two ranks per host send q/2 each
	if got, want := m.AllReduceHier(3*hierPieceBytes, RD), 2*local+network+2*max(2*local, network); !near(got, want) {
		t.Errorf("AllReduceHier of 3 pieces: %g, want %g", got, want)
	}
}

func TestCrossover(t *testing.T) {
	flat := func(n int) float64 { return float64(n) }
	for _, tc := range []struct {
		name string
		hier func(int) float64
		want int
	}{
		{"always", func(n int) float64 { return float64(n) / 2 }, CrossoverMin},
		{"never", func(n int) float64 { return float64(n) * 2 }, math.MaxInt},
		{"equal", flat, math.MaxInt},
		{"from 1 MiB", func(n int) float64 { return float64(n) + 1e6 - float64(min(n, 2e6)) }, 1 << 20},
		// Faster below 64 KiB only: no size from which it always wins.
		{"window", func(n int) float64 { return float64(n) * map[bool]float64{true: 0.5, false: 2}[n < 64<<10] }, math.MaxInt},
	} {
		if got := Crossover(flat, tc.hier); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
