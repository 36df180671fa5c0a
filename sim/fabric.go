package sim

import (
	"fmt"
	"math"
)

// Graph is a topology as directed links for the flow level: every GPU has
// one link out to its node's fabric and one in (intra's data rate), every
// NIC one link up to its switch and one down (the NIC's data rate), and
// the switches of the network's shape are joined by links of
// network.link_gbps. A full-duplex cable is two links. Vertices are
// numbered GPUs first (node-major), then one hub per node (its NVSwitch or
// PCIe root), then the switches.
type Graph struct {
	Topo  *Topology
	Links []Link
	sh    shape
	// First link of each block: a GPU's link out is gpuOut+g, in gpuIn+g;
	// node h's NIC i up is nicUp+h*nics+i, down nicDown+h*nics+i; the
	// switch-to-switch links follow from net.
	gpuOut, gpuIn, nicUp, nicDown, net int
	spread                             bool      // routing: least-loaded equal-cost path, not ECMP's hash
	load                               []float64 // spread: bytes placed on each link so far
}

// Link is one direction of a cable (or of a GPU's fabric port).
type Link struct {
	From, To  int32   // vertices (Graph.VertexName)
	GBps      float64 // data rate, GB/s = 1e9 B/s
	LatencyUs float64 // one way, µs
}

// Routings are the routing policies of the flow level: "ecmp" hashes each
// flow onto one of the equal-cost up-paths (collisions happen as on real
// fabrics), "spread" places it on the least-loaded one (adaptive routing,
// or a hash without collisions).
var Routings = []string{"ecmp", "spread"}

// maxGraphGPUs bounds the graphs the flow level builds (its memory is
// linear in GPUs; larger clusters are for the closed form).
const maxGraphGPUs = 1 << 17

// shape is a network's resolved parameters (the defaults of docs/sim.md
// applied).
type shape struct {
	kind                  string
	m                     int // NICs per node (at least 1)
	hosts                 int // nodes per leaf (dragonfly: per switch)
	onLeaf                int // NICs of one node on one leaf: m, or 1 on rails
	leaves                int // leaves (dragonfly: switches)
	up                    int // uplinks per leaf: spines (2 tiers) or aggregation switches per pod (3 tiers)
	tiers, perPod, pods   int
	up2                   int     // 3 tiers: uplinks per aggregation switch (cores per group)
	link                  float64 // switch-to-switch link, GB/s of data
	groups, perGroup, gbl int     // dragonfly: groups, switches per group, parallel global links per pair of groups
	global                float64 // dragonfly: one global link, GB/s of data
}

// dataGBps is a link of gbps Gbit/s as GB/s of data: InfiniBand's payload
// share at a 4096-byte MTU (the closed form's, nccl.go).
func dataGBps(gbps float64) float64 { return gbps / 8 * ibPayload }

// defaultRadix is a switch's ports when network.radix is 0: an NVIDIA
// Quantum-2 QM9700 NDR switch has 64 ports of 400 Gbit/s (its datasheet).
const defaultRadix = 64

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// shape resolves t's network parameters, or names the one that cannot be
// built.
func (t *Topology) shape() (shape, error) {
	n := t.Network
	s := shape{kind: n.Kind, m: max(1, t.NICsPerNode), tiers: max(n.Tiers, 2)}
	if s.kind == "" {
		s.kind = "single-switch"
	}
	radix := n.Radix
	if radix == 0 {
		radix = defaultRadix
	}
	s.link = dataGBps(t.NICGbps)
	if n.LinkGbps > 0 {
		s.link = dataGBps(n.LinkGbps)
	}
	over := math.Max(1, n.Oversubscription)
	switch s.kind {
	case "single-switch":
		s.hosts, s.onLeaf, s.leaves = t.Nodes, s.m, 1
	case "fat-tree", "rail-optimized":
		s.onLeaf = s.m
		if s.kind == "rail-optimized" {
			s.onLeaf = 1
		}
		s.hosts = n.NodesPerLeaf
		if s.hosts == 0 { // the leaf's ports split down:up as over:1
			s.hosts = max(1, int(float64(radix)*over/(1+over))/s.onLeaf)
		}
		s.leaves = ceilDiv(t.Nodes, s.hosts) * (s.m / s.onLeaf)
		s.up = int(math.Ceil(float64(s.hosts*s.onLeaf) / over))
		if s.tiers == 3 {
			s.perPod = n.LeavesPerPod
			if s.perPod == 0 {
				s.perPod = max(1, radix/2)
			}
			s.pods = ceilDiv(s.leaves, s.perPod)
			s.up2 = int(math.Ceil(float64(s.perPod) / math.Max(1, n.AggOversubscription)))
		}
	case "dragonfly":
		return t.dragonflyShape(s, radix)
	}
	return s, nil
}

// dragonflyShape resolves a dragonfly (Kim, Dally, Scott, Abts, ISCA 2008,
// §3: a balanced group has a = 2p = 2h switches for p terminal ports and h
// global links per switch, radix k = p + h + a − 1).
func (t *Topology) dragonflyShape(s shape, radix int) (shape, error) {
	n := t.Network
	p := max(1, (radix+1)/4)
	s.onLeaf, s.hosts, s.perGroup, s.gbl = s.m, n.NodesPerLeaf, n.SwitchesPerGroup, n.GlobalLinks
	if s.hosts == 0 {
		s.hosts = max(1, p/s.m)
	}
	if s.perGroup == 0 {
		s.perGroup = 2 * p
	}
	if s.gbl == 0 {
		s.gbl = p
	}
	s.groups = n.Groups
	if s.groups == 0 {
		s.groups = ceilDiv(ceilDiv(t.Nodes, s.hosts), s.perGroup)
	}
	s.leaves = s.groups * s.perGroup
	if s.leaves*s.hosts < t.Nodes {
		return s, fmt.Errorf("sim: topology %q: dragonfly of %d groups × %d switches × %d nodes holds %d nodes, not %d (network.groups, switches_per_group, nodes_per_leaf)",
			t.Name, s.groups, s.perGroup, s.hosts, s.leaves*s.hosts, t.Nodes)
	}
	if s.groups > 1 && s.perGroup*s.gbl < s.groups-1 {
		return s, fmt.Errorf("sim: topology %q: dragonfly network.global_links = %d: %d switches × %d global links cannot join each of %d groups to the %d others",
			t.Name, s.gbl, s.perGroup, s.gbl, s.groups, s.groups-1)
	}
	s.global = s.link
	if n.GlobalGbps > 0 {
		s.global = dataGBps(n.GlobalGbps)
	}
	if s.groups > 1 {
		s.global *= float64(max(1, s.perGroup*s.gbl/(s.groups-1))) // a pair's parallel links as one
	}
	return s, nil
}

// BuildGraph builds t's graph with a routing of Routings ("" is ecmp).
func (t *Topology) BuildGraph(routing string) (*Graph, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if routing != "" && !oneOf(routing, Routings) {
		return nil, fmt.Errorf("sim: routing %q: not one of %v", routing, Routings)
	}
	if t.GPUs() > maxGraphGPUs {
		return nil, fmt.Errorf("sim: topology %q: %d GPUs: the flow level builds up to %d (the closed form has no limit)", t.Name, t.GPUs(), maxGraphGPUs)
	}
	sh, err := t.shape()
	if err != nil {
		return nil, err
	}
	g := &Graph{Topo: t, sh: sh, spread: routing == "spread"}
	gpus, hub0, sw0 := t.GPUs(), int32(t.GPUs()), int32(t.GPUs()+t.Nodes)
	intra := t.ncclLinks(gpus).intra
	g.gpuOut, g.gpuIn = g.add(gpus), g.add(gpus)
	for i := range gpus {
		hub := hub0 + int32(i/t.GPUsPerNode)
		g.Links[g.gpuOut+i] = Link{From: int32(i), To: hub, GBps: intra}
		g.Links[g.gpuIn+i] = Link{From: hub, To: int32(i), GBps: intra, LatencyUs: t.Intra.LatencyUs}
	}
	if t.Nodes > 1 || t.NICsPerNode > 0 {
		g.buildNICs(hub0, sw0)
		g.buildNetwork(sw0 + int32(sh.leaves))
	}
	if g.spread {
		g.load = make([]float64, len(g.Links))
	}
	return g, nil
}

// add appends n links and returns the first one's index.
func (g *Graph) add(n int) int {
	first := len(g.Links)
	g.Links = append(g.Links, make([]Link, n)...)
	return first
}

// leafOf is the leaf (dragonfly: switch) of node h's NIC i.
func (g *Graph) leafOf(h, i int) int {
	if g.sh.kind == "single-switch" {
		return 0
	}
	if g.sh.kind == "rail-optimized" {
		return h/g.sh.hosts*g.sh.m + i // leaves group-major: a pod holds every rail of its nodes
	}
	return h / g.sh.hosts
}

// buildNICs joins each node's hub to its NICs' leaves; a NIC-to-NIC path
// has the network's latency, half on each NIC's link.
func (g *Graph) buildNICs(hub0, sw0 int32) {
	t, m := g.Topo, g.sh.m
	rate, lat := dataGBps(t.NICGbps), t.Network.LatencyUs/2
	g.nicUp, g.nicDown = g.add(t.Nodes*m), g.add(t.Nodes*m)
	for h := range t.Nodes {
		for i := range m {
			leaf := sw0 + int32(g.leafOf(h, i))
			g.Links[g.nicUp+h*m+i] = Link{From: hub0 + int32(h), To: leaf, GBps: rate, LatencyUs: lat}
			g.Links[g.nicDown+h*m+i] = Link{From: leaf, To: hub0 + int32(h), GBps: rate, LatencyUs: lat}
		}
	}
}

// buildNetwork adds the switch-to-switch links; top is the first vertex
// above the leaves.
func (g *Graph) buildNetwork(top int32) {
	s, sw0 := &g.sh, top-int32(g.sh.leaves)
	g.net = len(g.Links)
	pair := func(a, b int32, rate float64) {
		g.Links = append(g.Links, Link{From: a, To: b, GBps: rate}, Link{From: b, To: a, GBps: rate})
	}
	switch {
	case s.kind == "single-switch":
	case s.kind == "dragonfly":
		one := func(a, b int, rate float64) {
			g.Links = append(g.Links, Link{From: sw0 + int32(a), To: sw0 + int32(b), GBps: rate})
		}
		for x := range s.leaves { // local, all-to-all in a group: x → y at net + x*(a-1) + y'
			for y := range s.perGroup {
				if y != x%s.perGroup {
					one(x, x/s.perGroup*s.perGroup+y, s.link)
				}
			}
		}
		for a := range s.groups { // global, per ordered pair: a → b at after the locals + a*(groups-1) + b'
			for b := range s.groups {
				if a != b {
					one(g.gateway(a, b), g.gateway(b, a), s.global)
				}
			}
		}
	case s.tiers == 2: // leaf l to spine j at net + 2*(l*up+j)
		for l := range s.leaves {
			for j := range s.up {
				pair(sw0+int32(l), top+int32(j), s.link)
			}
		}
	default: // leaf l to aggregation (pod, a); aggregation (p, a) to core (a, j)
		for l := range s.leaves {
			for a := range s.up {
				pair(sw0+int32(l), top+int32(l/s.perPod*s.up+a), s.link)
			}
		}
		core0 := top + int32(s.pods*s.up)
		for p := range s.pods {
			for a := range s.up {
				for j := range s.up2 {
					pair(top+int32(p*s.up+a), core0+int32(a*s.up2+j), s.link)
				}
			}
		}
	}
}

// gateway is the switch of group a that holds its global link to group b.
func (g *Graph) gateway(a, b int) int {
	rel := (b-a+g.sh.groups)%g.sh.groups - 1
	return a*g.sh.perGroup + rel%g.sh.perGroup
}

// pairLink is the link from a to b of the pair added i-th after first
// (pairs are added as a→b, b→a).
func pairLink(first, i int, down bool) int32 {
	if down {
		return int32(first + 2*i + 1)
	}
	return int32(first + 2*i)
}

// NICOf is the NIC a GPU's traffic to other nodes leaves through (its
// node's NICs split evenly over its GPUs).
func (g *Graph) NICOf(gpu int) int {
	t := g.Topo
	return gpu % t.GPUsPerNode * g.sh.m / t.GPUsPerNode
}

// Route appends to path the links of a flow from GPU src to GPU dst (its
// id picks the ECMP path), through src's NIC srcNIC and dst's NIC dstNIC
// when they are on different nodes. Spread routing records bytes on the
// path it picks.
func (g *Graph) Route(path []int32, src, dst, srcNIC, dstNIC, id int, bytes float64) []int32 {
	t, first := g.Topo, len(path)
	path = append(path, int32(g.gpuOut+src))
	hs, hd := src/t.GPUsPerNode, dst/t.GPUsPerNode
	if hs != hd {
		m := g.sh.m
		path = append(path, int32(g.nicUp+hs*m+srcNIC))
		path = g.between(path, g.leafOf(hs, srcNIC), g.leafOf(hd, dstNIC), flowHash(src, dst, id), bytes)
		path = append(path, int32(g.nicDown+hd*m+dstNIC))
	}
	path = append(path, int32(g.gpuIn+dst))
	if g.spread {
		for _, l := range path[first:] {
			g.load[l] += bytes
		}
	}
	return path
}

// flowHash is the ECMP hash of a flow: a deterministic mix of (src, dst,
// id), as a switch hashes a packet's addresses and queue pair (the
// finalizer of SplitMix64, Steele, Lea, Flood, OOPSLA 2014).
func flowHash(src, dst, id int) uint64 {
	z := uint64(src)<<42 ^ uint64(dst)<<21 ^ uint64(id) + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// between appends the switch links from leaf a to leaf b.
func (g *Graph) between(path []int32, a, b int, h uint64, bytes float64) []int32 {
	s := &g.sh
	switch {
	case a == b || s.kind == "single-switch":
		return path
	case s.kind == "dragonfly":
		return g.dragonflyPath(path, a, b)
	case s.tiers == 2:
		j := g.pick(s.up, h, func(j int) float64 {
			return max(g.loadOf(pairLink(g.net, a*s.up+j, false)), g.loadOf(pairLink(g.net, b*s.up+j, true)))
		})
		return append(path, pairLink(g.net, a*s.up+j, false), pairLink(g.net, b*s.up+j, true))
	}
	return g.threeTierPath(path, a, b, h)
}

// threeTierPath: up to an aggregation switch of a's pod, through a core
// when b is in another pod (core (x, j) joins aggregation x of every pod),
// down to b.
func (g *Graph) threeTierPath(path []int32, a, b int, h uint64) []int32 {
	s := &g.sh
	pa, pb := a/s.perPod, b/s.perPod
	x := g.pick(s.up, h, func(x int) float64 {
		return max(g.loadOf(pairLink(g.net, a*s.up+x, false)), g.loadOf(pairLink(g.net, b*s.up+x, true)))
	})
	path = append(path, pairLink(g.net, a*s.up+x, false))
	if pa != pb {
		aggs := g.net + 2*s.leaves*s.up
		j := g.pick(s.up2, h>>32, func(j int) float64 {
			return max(g.loadOf(pairLink(aggs, (pa*s.up+x)*s.up2+j, false)), g.loadOf(pairLink(aggs, (pb*s.up+x)*s.up2+j, true)))
		})
		path = append(path, pairLink(aggs, (pa*s.up+x)*s.up2+j, false), pairLink(aggs, (pb*s.up+x)*s.up2+j, true))
	}
	return append(path, pairLink(g.net, b*s.up+x, true))
}

// dragonflyPath is minimal routing: to the gateway of a's group, its
// global link, from the far gateway to b (Kim et al. §4.1; Valiant's
// non-minimal routing is not modelled).
func (g *Graph) dragonflyPath(path []int32, a, b int) []int32 {
	s := &g.sh
	local := func(x, y int) int32 { // x → y in one group
		yy := y % s.perGroup
		if yy > x%s.perGroup {
			yy--
		}
		return int32(g.net + x*(s.perGroup-1) + yy)
	}
	ga, gb := a/s.perGroup, b/s.perGroup
	if ga == gb {
		return append(path, local(a, b))
	}
	out, in := g.gateway(ga, gb), g.gateway(gb, ga)
	if a != out {
		path = append(path, local(a, out))
	}
	globals := g.net + s.leaves*(s.perGroup-1)
	rel := (gb-ga+s.groups)%s.groups - 1
	path = append(path, int32(globals+ga*(s.groups-1)+rel))
	if in != b {
		path = append(path, local(in, b))
	}
	return path
}

// pick chooses one of n equal-cost links: by the hash under ECMP, else
// the one whose path carries the fewest bytes (the first on ties).
func (g *Graph) pick(n int, h uint64, load func(int) float64) int {
	if !g.spread {
		return int(h % uint64(n))
	}
	best, bl := 0, math.Inf(1)
	for i := range n {
		if l := load(i); l < bl {
			best, bl = i, l
		}
	}
	return best
}

func (g *Graph) loadOf(l int32) float64 {
	if g.load == nil {
		return 0
	}
	return g.load[l]
}

// VertexName names a vertex: "gpu 9", "node 1", "leaf 3", "spine 0",
// "agg 2.1" (pod 2), "core 5", "switch 7" (dragonfly), "switch".
func (g *Graph) VertexName(v int32) string {
	t, s, i := g.Topo, &g.sh, int(v)
	if i < t.GPUs() {
		return fmt.Sprintf("gpu %d", i)
	}
	if i -= t.GPUs(); i < t.Nodes {
		return fmt.Sprintf("node %d", i)
	}
	i -= t.Nodes
	switch {
	case s.kind == "single-switch":
		return "switch"
	case s.kind == "dragonfly":
		return fmt.Sprintf("switch %d.%d", i/s.perGroup, i%s.perGroup)
	case i < s.leaves:
		return fmt.Sprintf("leaf %d", i)
	case s.tiers == 2:
		return fmt.Sprintf("spine %d", i-s.leaves)
	case i-s.leaves < s.pods*s.up:
		return fmt.Sprintf("agg %d.%d", (i-s.leaves)/s.up, (i-s.leaves)%s.up)
	}
	return fmt.Sprintf("core %d", i-s.leaves-s.pods*s.up)
}

// LinkName names link l: "gpu 3 → node 0", "node 0 nic 2 → leaf 1".
func (g *Graph) LinkName(l int32) string {
	k := g.Links[l]
	name := g.VertexName(k.From) + " → " + g.VertexName(k.To)
	if i := int(l); i >= g.nicUp && i < g.net {
		nic := (i - g.nicUp) % (g.Topo.Nodes * g.sh.m) % g.sh.m
		name += fmt.Sprintf(" (nic %d)", nic)
	}
	return name
}

// shapeError names the first shape field of n out of range ("" if none):
// counts are 0 (the default) or positive, rates 0 or positive, tiers 0, 2
// or 3, an oversubscription 0 or at least 1.
func (n *Network) shapeError() string {
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	for _, c := range []struct {
		field string
		v     int
	}{{"radix", n.Radix}, {"nodes_per_leaf", n.NodesPerLeaf}, {"leaves_per_pod", n.LeavesPerPod},
		{"groups", n.Groups}, {"switches_per_group", n.SwitchesPerGroup}, {"global_links", n.GlobalLinks}} {
		if c.v < 0 || c.v > math.MaxInt32 {
			return fmt.Sprintf("network.%s = %d: 0 (the default) or a positive count", c.field, c.v)
		}
	}
	for _, c := range []struct {
		field string
		v     float64
	}{{"link_gbps", n.LinkGbps}, {"global_gbps", n.GlobalGbps}} {
		if !(c.v >= 0) || !finite(c.v) {
			return fmt.Sprintf("network.%s = %v: 0 (the NICs' rate) or a positive rate", c.field, c.v)
		}
	}
	switch {
	case n.Tiers != 0 && n.Tiers != 2 && n.Tiers != 3:
		return fmt.Sprintf("network.tiers = %d: 2 or 3 (0 reads as 2)", n.Tiers)
	case n.AggOversubscription != 0 && (!(n.AggOversubscription >= 1) || !finite(n.AggOversubscription)):
		return fmt.Sprintf("network.agg_oversubscription = %v: 1 (non-blocking) or more; 0 reads as 1", n.AggOversubscription)
	case n.Radix == 1:
		return "network.radix = 1: a switch needs 2 ports or more"
	}
	return ""
}
