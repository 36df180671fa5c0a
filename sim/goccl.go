package sim

import (
	"math"

	"github.com/goccl/goccl/internal/algo"
	"github.com/goccl/goccl/internal/cluster"
)

// tcpPayload is a TCP segment's payload share of the Ethernet frame tbf
// shapes at the namespace cluster's MTU: 40 bytes of IPv4 and TCP headers
// and 12 of timestamps per segment, 14 of Ethernet header per frame.
const tcpPayload = float64(cluster.DefaultMTU-52) / float64(cluster.DefaultMTU+14)

// gocclKinds are the runtime's kinds of the collectives.
var gocclKinds = map[string]algo.Kind{
	"all_reduce": algo.KindAllReduce, "all_gather": algo.KindAllGather, "reduce_scatter": algo.KindReduceScatter,
	"broadcast": algo.KindBroadcast, "reduce": algo.KindReduce, "alltoall": algo.KindAllToAll,
}

// GocclCosts are the link costs goccl's cost model sees on t: within a
// host the fabric's latency and rate, between hosts the network's latency
// and a host's NICs at TCP's payload rate.
func (t *Topology) GocclCosts() algo.Costs {
	intra := algo.LinkCost{Alpha: t.Intra.LatencyUs * 1e-6, Beta: 1 / (t.Intra.GBps * 1e9)}
	inter := intra // one host: no network
	if t.NICsPerNode > 0 {
		rate := float64(t.NICsPerNode) * t.NICGbps * 1e9 / 8 * tcpPayload / math.Max(1, t.Network.Oversubscription)
		inter = algo.LinkCost{Alpha: t.Network.LatencyUs * 1e-6, Beta: 1 / rate}
	}
	return algo.Costs{Intra: intra, Inter: inter}
}

// GocclFacts are the Facts goccl's Init would settle for ranks on t placed
// by mapBy (Collective.MapBy): the direct schedules on one host over
// shared memory, the aggregation tree with SHARP, the hierarchical
// crossovers from Init's probe over t's costs. hostOf is each rank's host.
func (t *Topology) GocclFacts(ranks int, mapBy string) (f algo.Facts, hostOf []int) {
	l := t.layout(ranks)
	hostOf = make([]int, ranks)
	for r := range hostOf {
		hostOf[r] = r / t.GPUsPerNode
		if mapBy == "node" {
			hostOf[r] = r % l.nodes
		}
	}
	f = algo.Facts{Size: ranks, Direct: l.nodes == 1 && t.Intra.Kind == "shm", CollNet: t.Network.SHARP && l.nodes > 1,
		DirectMin: algo.DirectMinBytes, Tuning: algo.Tuning{Costs: t.GocclCosts()}}
	if l.nodes > 1 {
		f.HostOf = hostOf
	}
	f.Tuning.HierMin, _ = algo.HierCrossovers(hostOf, f.Tuning.Costs)
	return f, hostOf
}

// gocclCollective predicts c as goccl runs it: the Selector's choice (or
// c.Algo's row where it can run) timed by the runtime's cost model.
func (t *Topology) gocclCollective(c Collective) (Result, error) {
	f, hostOf := t.GocclFacts(c.Ranks, c.MapBy)
	sel := algo.NewSelector(f)
	m := algo.NewCostModel(hostOf, f.Tuning.Costs)
	n := int(min(c.Bytes, math.MaxInt))
	if c.Kind == "sendrecv" {
		if c.Algo != "" && c.Algo != "p2p" {
			return Result{}, t.errAlgo(c, "goccl sends to the next rank (p2p)")
		}
		return Result{Algo: "p2p", TimeUs: gocclSendRecv(m, float64(n)) * 1e6}, nil
	}
	k := gocclKinds[c.Kind]
	r := sel.Choose(k, n, false)
	if c.Algo != "" {
		r = algo.Lookup(k, algo.Algorithm(c.Algo))
		switch {
		case r == nil:
			return Result{}, t.errAlgo(c, "goccl has no such schedule for this kind")
		case r.Usable != nil && !r.Usable(sel):
			return Result{}, t.errAlgo(c, "it needs "+r.Needs)
		}
	}
	if r == nil {
		return Result{}, t.errAlgo(c, "goccl's selector chose no schedule")
	}
	return Result{Algo: string(r.Algo), TimeUs: gocclTime(m, c.Kind, r.Algo, n) * 1e6}, nil
}

// gocclTime is schedule a's time (s) for n bytes: the runtime's cost model
// where it has the schedule, else the same Hockney terms for the rounds
// the schedule runs.
func gocclTime(m *algo.CostModel, kind string, a algo.Algorithm, n int) float64 {
	b, p := float64(n), float64(m.P)
	in := m.Intra
	switch {
	case a == algo.Direct && kind == "all_reduce": // read the peers' chunks, reduce, read the results
		return 2 * (in.Alpha + (p-1)/p*b*in.Beta)
	case a == algo.Direct && kind == "broadcast": // every rank reads the root's buffer
		return in.Alpha + b*in.Beta
	case a == algo.Direct: // every rank reads its P-1 blocks
		return in.Alpha + (p-1)/p*b*in.Beta
	case a == algo.CollNet:
		return gocclCollNet(m, b)
	case kind == "all_reduce" && a == algo.Hier:
		return m.AllReduceHier(n, algo.InterAlgorithm(m.Hosts, m.PerHost, n))
	case kind == "all_reduce" && a == algo.Tree: // reduce up the binomial tree, broadcast down
		return 2 * m.Broadcast(n, false)
	case kind == "all_reduce":
		return m.AllReduce(n, a)
	case kind == "broadcast" || kind == "reduce": // reduce: the broadcast's tree, upward
		return m.Broadcast(n, a == algo.Hier)
	case kind == "all_gather":
		return m.AllGather(n, a == algo.Hier)
	case kind == "reduce_scatter":
		return m.ReduceScatter(n, a == algo.Hier)
	}
	return gocclPairwise(m, b)
}

// gocclCollNet is the aggregation tree's AllReduce: on hosts of several
// ranks a ring reduce-scatter within the host, each rank's chunk through
// the tree (the host's link carries the whole vector each way), a ring
// all-gather; else every rank's whole vector through the tree.
func gocclCollNet(m *algo.CostModel, b float64) float64 {
	in, out := m.Intra, m.Inter
	if m.PerHost < 2 || m.Hosts < 2 {
		return 2*out.Alpha + b*out.Beta*float64(max(1, m.PerHost))
	}
	l := float64(m.PerHost)
	return 2*(l-1)*(in.Alpha+b/l*in.Beta) + 2*out.Alpha + b*out.Beta
}

// gocclPairwise is P-1 rounds of the pairwise exchange: in round r rank i
// sends its block for i+r, of b/P bytes; with hosts of L consecutive ranks
// min(L, r, P-r) of a host's ranks send across hosts, sharing its link.
func gocclPairwise(m *algo.CostModel, b float64) float64 {
	in, out := m.Intra, m.Inter
	p, l := m.P, max(1, m.PerHost)
	if m.Hosts < 2 {
		l = p
	}
	blk := b / float64(p)
	var total float64
	for r := 1; r < p; r++ {
		cross := 0
		if m.Hosts > 1 {
			cross = min(l, r, p-r)
		}
		var t float64
		if cross < l {
			t = in.Alpha + blk*in.Beta
		}
		if cross > 0 {
			t = max(t, out.Alpha+float64(cross)*blk*out.Beta)
		}
		total += t
	}
	return total
}

// gocclSendRecv is every rank sending b bytes to the next: within hosts
// over the fabric, from each host's last rank to the next host's first.
func gocclSendRecv(m *algo.CostModel, b float64) float64 {
	var t float64
	if m.Hosts < 2 || m.PerHost != 1 {
		t = m.Intra.Alpha + b*m.Intra.Beta
	}
	if m.Hosts > 1 {
		t = max(t, m.Inter.Alpha+b*m.Inter.Beta)
	}
	return t
}
