package sim

import (
	"math"
	"math/bits"
	"strings"
)

// protocol is one of NCCL's protocols as its tuning model sees it
// (src/graph/tuning.cc): a share of the link's bandwidth that carries
// data, a fixed latency per call and a latency per step of the algorithm
// (a hop to the next GPU) over each kind of link.
type protocol struct {
	name string
	eff  float64    // data bytes per byte on the link
	base float64    // µs per call: launch, protocol setup
	hop  [3]float64 // µs per step: over NVLink, over PCIe (or shm), through the network
}

// The hop index of each link kind.
const (
	hopNVLink = iota
	hopPCIe
	hopNet
)

// protocols: LL sends 4 data bytes and a 4-byte flag in every 8-byte
// store (1/2); LL128 one 8-byte flag per 128-byte line (120/128); Simple
// whole buffers behind a memory fence (all of it). The latencies are those
// of NCCL's tuning model for the ring (its default tuner constants, µs):
// its base latencies and its per-step hardware latencies over NVLink, PCIe
// and the network.
var protocols = [...]protocol{
	{name: "LL", eff: 0.5, base: 6.6, hop: [3]float64{0.6, 1.0, 2.7}},
	{name: "LL128", eff: 120.0 / 128, base: 14, hop: [3]float64{1.9, 2.5, 4.0}},
	{name: "Simple", eff: 1, base: 8.4, hop: [3]float64{3.4, 5.7, 14}},
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
	// treeEff is NCCL's model's discount of the tree's pipeline against
	// the ring's bandwidth (tuning.cc: ×0.92 on the tree's bus bandwidth).
	treeEff = 0.92
	// nvlsChannels is NCCL's default number of NVLS channels on Hopper,
	// one of which its model counts as not carrying data.
	nvlsChannels = 16
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
	intraHop   int
	netLatUs   float64 // the network's own latency, added to each network hop
	intraLatUs float64 // the fabric's latency, when larger than a protocol's hop
	ll128      bool    // NCCL enables LL128 on NVLink systems only
	gpu        string  // Topology.GPU.Name
	llMax      float64 // LL's cap on the bus bandwidth; 0: none
}

func (t *Topology) ncclLinks(ranks int) ncclLinks {
	k := ncclLinks{l: t.layout(ranks), intra: t.Intra.GBps, intraHop: hopPCIe,
		netLatUs: t.Network.LatencyUs, intraLatUs: t.Intra.LatencyUs, gpu: t.GPU.Name}
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
	k.net = k.l.nics * t.NICGbps / 8 * ibPayload / over
	return k
}

// hop is a protocol's latency of one step inside a node and across nodes.
func (k *ncclLinks) hop(p protocol) (intra, net float64) {
	return math.Max(p.hop[k.intraHop], k.intraLatUs), p.hop[hopNet] + k.netLatUs
}

// ringBW is the ring's bus bandwidth: each channel's ring enters and
// leaves every node once, so a node's NICs carry what one GPU sends, and
// the slower of a GPU's link and its node's NICs bounds it.
func (k *ncclLinks) ringBW() float64 {
	if k.l.nodes == 1 {
		return k.intra
	}
	return math.Min(k.intra, k.net)
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
			if p == 1 && !k.ll128 || (a == "nvls" || a == "collnet") && p != simple {
				continue
			}
			if us := k.time(c, a, protocols[p]); us < best.us {
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
	case c.Algo == "collnet" && c.Kind == "all_reduce":
		return nil, t.errAlgo(c, "needs network.sharp and 2 or more nodes")
	}
	return nil, t.errAlgo(c, "NCCL runs it with "+strings.Join(usable, ", "))
}

// time is algorithm a's time for c with protocol p, in µs.
func (k *ncclLinks) time(c Collective, a string, p protocol) float64 {
	n, nodes, g := float64(c.Ranks), k.l.nodes, k.l.perNode
	s := float64(c.Bytes) / 1e3 // kB: over GB/s, µs
	hi, hn := k.hop(p)
	switch a {
	case "ring":
		steps, inter := c.Ranks-1, nodes-1 // gather-like, and the chains of broadcast and reduce
		if c.Kind == "all_reduce" {
			steps, inter = 2*steps, 2*inter
		}
		lat := p.base + float64(steps-inter)*hi + float64(inter)*hn
		factor := BusFactor(c.Kind, c.Ranks) // bytes through each GPU's link per byte of the size column
		return lat + s*factor/k.data(k.ringBW(), p)
	case "tree":
		depth := float64(bits.Len(uint(nodes - 1))) // ⌈log2 nodes⌉ levels of the binary trees
		if c.Kind != "all_reduce" {                 // one pass down (broadcast) or up (reduce)
			bw := k.intra
			if nodes > 1 {
				bw = math.Min(bw, k.net/2) // an inner node feeds two children
			}
			return p.base + float64(g-1)*hi + depth*hn + s/k.data(bw*treeEff, p)
		}
		lat := p.base + 2*(float64(g-1)*hi+depth*hn) // up and down: a chain in the node, trees across
		return lat + s/(0.5*k.data(k.ringBW()*treeEff, p))
	case "nvls":
		bw := k.intra * nvlsEfficiency(k.gpu) * (nvlsChannels - 1) / nvlsChannels // S each way per GPU
		lat := float64(nvlsHopUs)
		if nodes > 1 { // NVLS inside the nodes, trees across (NVLSTree): NCCL's model doubles the network's share with 2 nodes
			pair := 1.0
			if nodes <= 2 {
				pair = 2
			}
			bw = math.Min(bw, k.net*pair*n/(2*(n-1)))
			lat += 2 * float64(bits.Len(uint(nodes-1))) * hn
		}
		return lat + s/bw
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
		bw, hi = math.Min(bw, k.net/k.l.nics), hn
	}
	return p.base + hi + s/k.data(bw, p)
}
