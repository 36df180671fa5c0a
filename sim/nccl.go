package sim

import (
	"math"
	"math/bits"
	"strings"
)

// protocol is one of NCCL's protocols as its tuning model sees it
// (src/graph/tuning.cc): a share of the link's bandwidth that carries
// data, a fixed latency per call and a latency per step of the algorithm
// (a hop to the next GPU) over each kind of link, for the ring and for the
// tree.
type protocol struct {
	name     string
	eff      float64    // data bytes per byte on the link
	base     float64    // µs per call: launch, protocol setup (ring)
	hop      [3]float64 // µs per ring step: over NVLink, over PCIe (or shm), through the network
	treeBase float64    // µs per call of the tree
	treeHop  [3]float64 // µs per tree step, as hop
}

// The hop index of each link kind.
const (
	hopNVLink = iota
	hopPCIe
	hopNet
)

// protocols: LL sends 4 data bytes and a 4-byte flag in every 8-byte
// store (1/2); LL128 one 8-byte flag per 128-byte line (120/128); Simple
// whole buffers behind a memory fence (all of it). The latencies are NCCL's
// default tuner constants (tuning.cc, ncclTunerConstantsDefaults, µs): its
// base latencies and its per-step hardware latencies over NVLink, PCIe and
// the network, for Ring and for Tree.
var protocols = [...]protocol{
	{name: "LL", eff: 0.5, base: 6.6, hop: [3]float64{0.6, 1.0, 2.7}, treeBase: 6.8, treeHop: [3]float64{0.6, 1.0, 5.0}},
	{name: "LL128", eff: 120.0 / 128, base: 14, hop: [3]float64{1.9, 2.5, 4.0}, treeBase: 14, treeHop: [3]float64{1.25, 1.9, 8.5}},
	{name: "Simple", eff: 1, base: 8.4, hop: [3]float64{3.4, 5.7, 14}, treeBase: 8.4, treeHop: [3]float64{4.0, 4.0, 14}},
}

// perChannelCaps are NCCL's caps on one search channel's bus bandwidth
// (GB/s) by generation and by nodes (1, 2, more), from tuning.cc:
// perChMaxRingLL128Bws, perChMaxTreeLL128Bws, perChMaxTreeBws. A GPU not
// named has none (capOf).
var perChannelCaps = map[string]struct{ ringLL128, treeLL128, tree [3]float64 }{
	"ampere":    {[3]float64{20, 20, 20}, [3]float64{20, 20, 20}, [3]float64{24, 23.6, 17.8}},
	"hopper":    {[3]float64{36.7, 36.7, 36.7}, [3]float64{36.7, 36.7, 29}, [3]float64{38.7, 41.4, 36}},
	"blackwell": {[3]float64{40, 40, 40}, [3]float64{55.6, 31.67, 20}, [3]float64{70, 42.8, 24}},
}

const (
	// simple is the index of Simple in protocols.
	simple = 2

	// nvlinkPayload is the share of an NVLink's signalling rate NCCL's
	// topology model counts on (src/graph/topo.h: 20 GB/s per 25 GB/s
	// NVLink3 link, 20.6 per NVLink4 link, 40.1 per 50 GB/s NVLink5 link:
	// 0.80–0.82).
	nvlinkPayload = 0.8
	// pciePayload is the same for PCIe: topo.h's 12 GB/s for a Gen3 x16
	// link of 15.75 GB/s.
	pciePayload = 12 / 15.75
	// ibPayload is an InfiniBand packet's payload share at the 4096-byte
	// MTU: 26 bytes of LRH, BTH, ICRC and VCRC per packet.
	ibPayload = 4096.0 / (4096 + 26)
	// treeEff is NCCL's model's discount of the tree's all_reduce
	// bandwidth (tuning.cc: busBw × .92); ll128RingEff its LL128 ring
	// discount (tuning.cc: × 0.92, "120.0/128.0" in its comment).
	treeEff      = 0.92
	ll128RingEff = 0.92
	// nvlsHopUs is NCCL's model's latency of an NVLS operation (µs): the
	// multimem load-reduce and store through the switch.
	nvlsHopUs = 25
)

// generation is a GPU's architecture, from its name: Ampere (A...),
// Hopper (H...), Blackwell (B..., GB...); "" when unknown.
func generation(gpu string) string {
	g := strings.ToUpper(gpu)
	switch {
	case strings.HasPrefix(g, "A"):
		return "ampere"
	case strings.HasPrefix(g, "H"):
		return "hopper"
	case strings.HasPrefix(g, "B"), strings.HasPrefix(g, "GB"):
		return "blackwell"
	}
	return ""
}

// nvlsEfficiency is the share of the NVLink bandwidth NVLS reaches in
// NCCL's model (tuning.cc, nvlsEfficiency): Hopper 0.85, Blackwell 0.74
// (Hopper's for a GPU not named).
func nvlsEfficiency(gpu string) float64 {
	if generation(gpu) == "blackwell" {
		return 0.74
	}
	return 0.85
}

// llMaxGBps is the most bus bandwidth NCCL's model lets LL reach on one
// node, by architecture (tuning.cc, llMaxBws): LL's stores are 8 bytes
// wide and each waits on its flag, so it never fills a fast link. 0: no
// cap (an unknown GPU; across nodes the cap depends on the CPU, not
// modelled).
func llMaxGBps(gpu string) float64 {
	return map[string]float64{"ampere": 87.7, "hopper": 141, "blackwell": 282}[generation(gpu)]
}

// ncclLinks are the bandwidths (GB/s of data) and hop kinds of a layout.
type ncclLinks struct {
	l          layout
	intra, net float64 // per GPU inside a node; per node through its NICs
	nicGBps    float64 // one NIC's data rate
	intraHop   int
	netLatUs   float64 // the network's own latency, added to each network hop
	intraLatUs float64 // the fabric's latency, when larger than a protocol's hop
	ll128      bool    // NCCL enables LL128 on NVLink systems only
	gpu, gen   string  // Topology.GPU.Name and its generation
	llMax      float64 // LL's cap on the bus bandwidth; 0: none
	ring       ringGraph
}

func (t *Topology) ncclLinks(ranks int) ncclLinks {
	k := ncclLinks{l: t.layout(ranks), intra: t.Intra.GBps, intraHop: hopPCIe,
		netLatUs: t.Network.LatencyUs, intraLatUs: t.Intra.LatencyUs, gpu: t.GPU.Name, gen: generation(t.GPU.Name)}
	switch t.Intra.Kind {
	case "nvswitch", "nvlink":
		k.intra *= nvlinkPayload
		k.intraHop, k.ll128 = hopNVLink, true
	case "pcie":
		k.intra *= pciePayload
	}
	if k.l.nodes == 1 {
		k.llMax = llMaxGBps(t.GPU.Name)
	}
	over := math.Max(1, t.Network.Oversubscription)
	k.nicGBps = t.NICGbps / 8 * ibPayload / over
	k.net = k.l.nics * k.nicGBps
	k.ring = searchRing(k.gen, k.intra, k.l.nodes, k.l.nics, k.nicGBps)
	return k
}

// hop is a protocol's latency of one step inside a node and across
// nodes, from its per-step latencies h (protocol.hop or treeHop).
func (k *ncclLinks) hop(h [3]float64) (intra, net float64) {
	return math.Max(h[k.intraHop], k.intraLatUs), h[hopNet] + k.netLatUs
}

// ringBW is the ring's bus bandwidth with all channels: each channel's
// ring enters and leaves every node once, through one NIC, so a node's
// NICs carry what one GPU sends, and only as many NICs as the search has
// channels carry it (search.cc: one NET per ring channel); the slower of
// a GPU's link and those NICs bounds it.
func (k *ncclLinks) ringBW() float64 {
	if k.l.nodes == 1 {
		return k.intra
	}
	return math.Min(k.intra, math.Min(k.l.nics, float64(k.ring.graph))*k.nicGBps)
}

// capOf is a per-channel cap times g search channels; +Inf without one.
func capOf(c float64, g float64) float64 {
	if c == 0 {
		return math.Inf(1)
	}
	return c * g
}

// index2 is NCCL's column of its per-node-count constants: 1, 2, more nodes.
func (k *ncclLinks) index2() int { return min(k.l.nodes, 3) - 1 }

// ringBusBW is the ring's bus bandwidth under protocol p on nc of the
// communicator's channels (NCCL's refinements, tuning.cc: LL at half,
// capped by llMaxBws; LL128 × 0.92, capped per search channel): a channel
// carries its share of the links, so nc channels carry nc/comm of it.
func (k *ncclLinks) ringBusBW(p, nc int) float64 {
	share := float64(nc) / float64(k.ring.comm)
	bw := k.ringBW() * share
	switch p {
	case 0:
		if bw *= 0.5; k.llMax > 0 {
			bw = math.Min(bw, k.llMax)
		}
	case 1:
		bw = math.Min(bw*ll128RingEff, capOf(perChannelCaps[k.gen].ringLL128[k.index2()], float64(k.ring.graph)*share))
	}
	return bw
}

// treeBusBW is the tree all_reduce's bus bandwidth under protocol p on nc
// channels (tuning.cc: × .92 capped by perChMaxTreeBws; LL × 1/3.8 capped
// by llMaxBws; LL128 × 7/9 on one node, 120/128 across, capped by
// perChMaxTreeLL128Bws), times treeCorrectionFactor for bytes.
func (k *ncclLinks) treeBusBW(p, nc int, bytes int64) float64 {
	share := float64(nc) / float64(k.ring.comm)
	caps, g := perChannelCaps[k.gen], float64(k.ring.graph)*share
	bw := math.Min(k.ringBW()*share*treeEff, capOf(caps.tree[k.index2()], g))
	switch p {
	case 0:
		if bw /= 3.8; k.llMax > 0 {
			bw = math.Min(bw, k.llMax)
		}
	case 1:
		f := 120.0 / 128
		if k.l.nodes == 1 {
			f = 7.0 / 9
		}
		bw = math.Min(bw*f, capOf(caps.treeLL128[k.index2()], g))
	}
	return bw * treeFactor(bytes, p)
}

// data is a link's data rate under protocol p: bw times its efficiency,
// at most LL's cap.
func (k *ncclLinks) data(bw float64, p protocol) float64 {
	if p.name == "LL" && k.llMax > 0 {
		return math.Min(bw*p.eff, k.llMax)
	}
	return bw * p.eff
}

// ncclCandidate is one (algorithm, protocol) pair's prediction.
type ncclCandidate struct {
	algo  string
	proto int
	us    float64
}

// ncclCollective predicts c as NCCL runs it: the fastest of the pairs
// NCCL would consider, or of c.Algo's protocols.
func (t *Topology) ncclCollective(c Collective) (Result, error) {
	k := t.ncclLinks(c.Ranks)
	algos, err := t.ncclAlgos(c, &k)
	if err != nil {
		return Result{}, err
	}
	best := ncclCandidate{us: math.Inf(1)}
	for _, a := range algos {
		for p := range protocols {
			if p == 1 && !k.ll128 || (a == "nvls" || a == "collnet" || a == "pat") && p != simple {
				continue
			}
			if us := k.time(c, a, p); us < best.us {
				best = ncclCandidate{algo: a, proto: p, us: us}
			}
		}
	}
	return Result{Algo: best.algo, Proto: protocols[best.proto].name, TimeUs: best.us}, nil
}

// ncclAlgos are the algorithms NCCL considers for c on these links (only
// c.Algo when set), or an error when c.Algo cannot run it.
func (t *Topology) ncclAlgos(c Collective, k *ncclLinks) ([]string, error) {
	var usable []string
	switch c.Kind {
	case "all_reduce":
		usable = []string{"ring", "tree"}
		if t.Intra.NVLS && k.l.perNode > 1 {
			usable = append(usable, "nvls")
		}
		if t.Network.SHARP && k.l.nodes > 1 {
			usable = append(usable, "collnet")
		}
	case "all_gather", "reduce_scatter":
		usable = []string{"ring"}
		if t.Intra.NVLS && k.l.nodes == 1 && k.l.perNode > 1 && k.l.perNode <= maxNVLSArity {
			usable = append(usable, "nvls") // NCCL's NVLS gather/scatter: one node, at most NCCL_MAX_NVLS_ARITY GPUs
		}
		if k.l.perNode == 1 && k.l.nodes > 1 {
			usable = append(usable, "pat") // ncclPatEnable (tuning.cc): one GPU per node
		}
	case "broadcast", "reduce":
		usable = []string{"ring", "tree"}
		if c.Algo == "" {
			return []string{"ring"}, nil // NCCL runs these as rings only
		}
	case "alltoall":
		usable = []string{"pairwise"}
	case "sendrecv":
		usable = []string{"p2p"}
	}
	if c.Algo == "" {
		return usable, nil
	}
	if oneOf(c.Algo, usable) {
		return []string{c.Algo}, nil
	}
	switch {
	case c.Algo == "nvls" && c.Kind == "all_reduce" && !t.Intra.NVLS:
		return nil, t.errAlgo(c, "needs intra.nvls (an NVSwitch with in-switch reduction)")
	case c.Algo == "nvls" && c.Kind == "all_reduce":
		return nil, t.errAlgo(c, "needs 2 or more ranks on a node")
	case c.Algo == "nvls" && (c.Kind == "all_gather" || c.Kind == "reduce_scatter"):
		return nil, t.errAlgo(c, "needs intra.nvls and one node of 2 to 32 ranks (NCCL runs it across nodes only with CollNet)")
	case c.Algo == "pat" && (c.Kind == "all_gather" || c.Kind == "reduce_scatter"):
		return nil, t.errAlgo(c, "needs one rank per node and 2 or more nodes (NCCL's PAT)")
	case c.Algo == "collnet" && c.Kind == "all_reduce":
		return nil, t.errAlgo(c, "needs network.sharp and 2 or more nodes")
	}
	return nil, t.errAlgo(c, "NCCL runs it with "+strings.Join(usable, ", "))
}

// time is algorithm a's time for c with protocol p (an index of
// protocols), in µs.
func (k *ncclLinks) time(c Collective, a string, p int) float64 {
	switch a {
	case "ring":
		return k.ringTime(c, p)
	case "tree":
		return k.treeTime(c, p)
	case "nvls":
		return k.nvlsTime(c)
	case "pat":
		return k.patTime(c)
	}
	return k.otherTime(c, a, protocols[p])
}

// ringTime: NCCL's ring latency (2(n−1) steps for all_reduce, n−1 for
// the others, those that cross nodes at the network's latency; × 1.4 for
// Simple all_reduce across nodes with at least 64 bytes per channel and
// rank, NCCL's "plateau effect of ring", tuning.cc) plus each GPU's bytes
// (the bus factor times the size) over the bus bandwidth of the channels
// NCCL runs for this size.
func (k *ncclLinks) ringTime(c Collective, p int) float64 {
	pr := protocols[p]
	hi, hn := k.hop(pr.hop)
	steps, inter := c.Ranks-1, k.l.nodes-1 // gather-like, and the chains of broadcast and reduce
	if c.Kind == "all_reduce" {
		steps, inter = 2*steps, 2*inter
	}
	lat := pr.base + float64(steps-inter)*hi + float64(inter)*hn
	if p == simple && k.l.nodes > 1 && c.Kind == "all_reduce" && c.Bytes/int64(k.ring.comm*c.Ranks) >= 64 {
		lat *= 1.4
	}
	nc := channelsUsed(c.Bytes, k.ring, p, c.Ranks, true)
	factor := BusFactor(c.Kind, c.Ranks) // bytes through each GPU's link per byte of the size column
	return lat + float64(c.Bytes)/1e3*factor/k.ringBusBW(p, nc)
}

// treeTime: all_reduce up and down a chain inside each node and the
// double binary tree across nodes (tuning.cc's tree latency and bandwidth,
// each byte of the size crossing a GPU's link twice); broadcast and reduce
// (NCCL runs them as rings; only when forced) one pass.
func (k *ncclLinks) treeTime(c Collective, p int) float64 {
	pr := protocols[p]
	hi, hn := k.hop(pr.treeHop)
	nodes, g := k.l.nodes, k.l.perNode
	depth := float64(bits.Len(uint(nodes - 1))) // ⌈log2 nodes⌉ levels of the binary trees
	s := float64(c.Bytes) / 1e3                 // kB: over GB/s, µs
	if c.Kind != "all_reduce" {                 // one pass down (broadcast) or up (reduce)
		bw := k.intra
		if nodes > 1 {
			bw = math.Min(bw, k.net/2) // an inner node feeds two children
		}
		return pr.base + float64(g-1)*hi + depth*hn + s/k.data(bw*treeEff, pr)
	}
	lat := pr.treeBase + 2*(float64(g-1)*hi+depth*hn)
	nc := channelsUsed(c.Bytes, k.ring, p, c.Ranks, false)
	return lat + s/(0.5*k.treeBusBW(p, nc, c.Bytes))
}

// nvlsTime: in-switch reduction (NVLS) on one node, NVLS inside the nodes
// and trees across them (NVLSTree) on several. Its bandwidth is NCCL's
// per-channel NVLS rate (tuning.cc: the link × nvlsEfficiency × (heads −
// 1)/heads, heads = the NVLS graph's channels, one per GPU of the node)
// applied to the whole link: each byte of the size leaves and enters each
// GPU once. On one node the pipeline's fill adds nvlsFillBytes; its
// latency is NCCL's NVLS hardware latency (25 µs, tuning.cc).
func (k *ncclLinks) nvlsTime(c Collective) float64 {
	heads := nvlsHeads(k.l.perNode)
	bw := k.intra * nvlsEfficiency(k.gpu) * float64(heads-1) / float64(heads)
	n, nodes := float64(c.Ranks), k.l.nodes
	s := float64(c.Bytes) / 1e3
	lat := float64(nvlsHopUs)
	if c.Kind != "all_reduce" { // all_gather, reduce_scatter: each GPU's (n−1)/n of the size
		return lat + s*(n-1)/n/bw
	}
	if nodes == 1 {
		return lat + (s+nvlsFillBytes(c.Bytes, nvlsChannels(k.gpu, 1), heads)/1e3)/bw
	}
	// NVLSTree: one head (and NIC) per NVLS channel; NCCL's model doubles
	// the network's share with 2 nodes.
	pair := 1.0
	if nodes <= 2 {
		pair = 2
	}
	_, hn := k.hop(protocols[simple].hop)
	net := math.Min(k.l.nics, float64(heads)) * k.nicGBps
	bw = math.Min(bw, net*pair*n/(2*(n-1)))
	lat += 2 * float64(bits.Len(uint(nodes-1))) * hn
	return lat + s/bw
}

// patTime: PAT (NCCL's Parallel Aggregated Trees for all_gather and
// reduce_scatter, one GPU per node): NCCL's latency (tuning.cc: 8 µs base,
// log2(nodes) × the network's tree latency / 3.5, 2.8 µs per rank) and
// each GPU's (n−1)/n of the size through its NICs at NCCL's .75.
func (k *ncclLinks) patTime(c Collective) float64 {
	_, hn := k.hop(protocols[simple].treeHop)
	lat := 8 + float64(bits.Len(uint(k.l.nodes))-1)*hn/3.5 + 2.8*float64(c.Ranks)
	s := float64(c.Bytes) / 1e3 * BusFactor(c.Kind, c.Ranks)
	return lat + s/(k.net*patEff)
}

// otherTime: CollNet, pairwise alltoall and p2p sendrecv.
func (k *ncclLinks) otherTime(c Collective, a string, p protocol) float64 {
	n, nodes, g := float64(c.Ranks), k.l.nodes, k.l.perNode
	s := float64(c.Bytes) / 1e3 // kB: over GB/s, µs
	hi, hn := k.hop(p.hop)
	switch a {
	case "collnet":
		// Reduce-scatter and all-gather inside the node, each GPU's share
		// through the switches' aggregation: S leaves and enters a node.
		bw := math.Min(k.intra*float64(g)/math.Max(1, 2*float64(g-1)), k.net)
		return p.base + 2*float64(g-1)*hi + 2*hn + s/(bw*p.eff)
	case "pairwise":
		// Every peer at once: a GPU's share for its node's peers over its
		// link, the node's share for other nodes through its NICs.
		t := s * float64(g-1) / n / k.intra
		if nodes > 1 {
			t = math.Max(t, s*float64(g)*(n-float64(g))/n/k.net)
			hi = hn
		}
		return p.base + hi + t/k.data(1, p)
	}
	// sendrecv: to the next rank; across nodes one GPU per node crosses,
	// through one NIC.
	bw := k.intra
	if nodes > 1 {
		bw, hi = math.Min(bw, k.nicGBps), hn
	}
	return p.base + hi + s/k.data(bw, p)
}
