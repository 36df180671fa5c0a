package sim

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
)

// Flow is a transfer of Bytes from GPU Src to GPU Dst along Path (links of
// a Graph). Run sets Finish and Bottleneck.
type Flow struct {
	Job        int
	Src, Dst   int
	Bytes      float64
	Path       []int32
	Finish     float64 // seconds after the start
	Bottleneck int32   // the link that set its rate last (-1 before Run)
}

// MaxMin is the max-min fair rate of each flow (GB/s when caps are GB/s)
// over links of capacities caps, each flow crossing the links of its path,
// by progressive filling (Bertsekas & Gallager, Data Networks, 2nd ed.,
// §6.5.2): all rates rise together; a link that fills freezes the rates of
// the flows through it; the rest rise on. bottleneck is the link that
// froze each flow. A flow without links is an error (its rate would be
// unbounded).
func MaxMin(caps []float64, paths [][]int32) (rates []float64, bottleneck []int32, err error) {
	active := make([]int32, len(paths))
	for i, p := range paths {
		if len(p) == 0 {
			return nil, nil, fmt.Errorf("sim: flow %d crosses no link", i)
		}
		for _, l := range p {
			if l < 0 || int(l) >= len(caps) {
				return nil, nil, fmt.Errorf("sim: flow %d: link %d: have %d links", i, l, len(caps))
			}
		}
		active[i] = int32(i)
	}
	s := newSolver(caps)
	rates, bottleneck = make([]float64, len(paths)), make([]int32, len(paths))
	s.solve(paths, active, rates, bottleneck)
	return rates, bottleneck, nil
}

// solver holds progressive filling's per-link state between solves.
type solver struct {
	caps   []float64
	rem    []float64 // capacity not yet given to frozen flows
	count  []int32   // flows through the link still rising
	ver    []uint32  // bumped on each change: older heap entries are stale
	start  []int32   // flows through link l: list[start[l]:start[l+1]]
	list   []int32
	frozen []bool
	heap   []share
}

type share struct {
	level float64 // the rate at which the link fills
	link  int32
	ver   uint32
}

func newSolver(caps []float64) *solver {
	n := len(caps)
	return &solver{caps: caps, rem: make([]float64, n), count: make([]int32, n), ver: make([]uint32, n), start: make([]int32, n+1)}
}

// solve sets rate[f] and bottleneck[f] for the flows f of active.
func (s *solver) solve(paths [][]int32, active []int32, rate []float64, bottleneck []int32) {
	clear(s.count)
	for _, f := range active {
		for _, l := range paths[f] {
			s.count[l]++
		}
	}
	s.start[0] = 0
	for l := range s.caps {
		s.start[l+1] = s.start[l] + s.count[l]
		s.rem[l] = s.caps[l]
	}
	s.list = slices.Grow(s.list[:0], int(s.start[len(s.caps)]))[:s.start[len(s.caps)]]
	fill := slices.Clone(s.start[:len(s.caps)])
	if len(s.frozen) < len(paths) {
		s.frozen = make([]bool, len(paths))
	}
	s.heap = s.heap[:0]
	for _, f := range active {
		s.frozen[f] = false
		for _, l := range paths[f] {
			s.list[fill[l]] = f
			fill[l]++
		}
	}
	for l, c := range s.count {
		if c > 0 {
			s.push(share{level: s.rem[l] / float64(c), link: int32(l), ver: s.ver[l]})
		}
	}
	for len(s.heap) > 0 {
		e := s.pop()
		if e.ver != s.ver[e.link] || s.count[e.link] == 0 {
			continue
		}
		for _, f := range s.list[s.start[e.link]:s.start[e.link+1]] {
			if !s.frozen[f] {
				s.freeze(paths[f], f, e, rate, bottleneck)
			}
		}
	}
}

// freeze fixes flow f at the level of e's link and takes its rate from
// the links of its path.
func (s *solver) freeze(path []int32, f int32, e share, rate []float64, bottleneck []int32) {
	s.frozen[f], rate[f], bottleneck[f] = true, e.level, e.link
	for _, l := range path {
		s.rem[l] = math.Max(0, s.rem[l]-e.level)
		s.count[l]--
		s.ver[l]++
		if s.count[l] > 0 && l != e.link {
			s.push(share{level: s.rem[l] / float64(s.count[l]), link: l, ver: s.ver[l]})
		}
	}
}

func (s *solver) push(e share) {
	s.heap = append(s.heap, e)
	for i := len(s.heap) - 1; i > 0; {
		p := (i - 1) / 2
		if s.heap[p].level <= s.heap[i].level {
			break
		}
		s.heap[p], s.heap[i] = s.heap[i], s.heap[p]
		i = p
	}
}

func (s *solver) pop() share {
	h := s.heap
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1].level < h[c].level {
			c++
		}
		if h[i].level <= h[c].level {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	s.heap = h
	return top
}

// finishTolerance groups finishes: flows due within this share of the
// next finish time finish with it (ties, without a re-solve each).
const finishTolerance = 1e-9

// FinishGroup is the share of the elapsed time within which Run lets flows
// that end close together end at one re-solve: each keeps its own finish
// time, but the bandwidth it frees goes to the others up to this share of
// the run early. It bounds the re-solves when hashed paths give many
// distinct rates (alltoall under ECMP); 0 re-solves at every distinct
// finish.
var FinishGroup = 1e-2

// Run moves flows over g's links: it solves the max-min fair rates, runs
// until the next flow finishes, and solves again for the rest (event by
// event). It sets each flow's Finish (seconds; bytes over GB/s) and
// Bottleneck, and returns the number of phases (solves).
func (g *Graph) Run(flows []Flow) (phases int, err error) {
	caps := make([]float64, len(g.Links))
	for i, l := range g.Links {
		caps[i] = l.GBps * 1e9
	}
	paths := make([][]int32, len(flows))
	left := make([]float64, len(flows))
	var active []int32
	for i := range flows {
		f := &flows[i]
		if len(f.Path) == 0 || !(f.Bytes >= 0) || math.IsInf(f.Bytes, 0) {
			return 0, fmt.Errorf("sim: flow %d (gpu %d → %d): %d links, %v bytes", i, f.Src, f.Dst, len(f.Path), f.Bytes)
		}
		paths[i], left[i], f.Finish, f.Bottleneck = f.Path, f.Bytes, 0, -1
		if f.Bytes > 0 {
			active = append(active, int32(i))
		}
	}
	s := newSolver(caps)
	rate, bott := make([]float64, len(flows)), make([]int32, len(flows))
	now := 0.0
	for len(active) > 0 {
		s.solve(paths, active, rate, bott)
		phases++
		dt := math.Inf(1)
		for _, f := range active {
			dt = math.Min(dt, left[f]/rate[f])
		}
		if math.IsInf(dt, 0) || math.IsNaN(dt) {
			return phases, errors.New("sim: a flow's links have no capacity left")
		}
		horizon := max(dt*(1+finishTolerance), dt+FinishGroup*(now+dt))
		keep := active[:0]
		for _, f := range active {
			flows[f].Bottleneck = bott[f]
			if left[f]/rate[f] <= horizon {
				flows[f].Finish = now + left[f]/rate[f]
				continue
			}
			left[f] -= rate[f] * dt
			keep = append(keep, f)
		}
		active, now = keep, now+dt
	}
	return phases, nil
}

// Job is one collective of a flow-level run, on some of the topology's
// GPUs; the flows of several jobs share the links.
type Job struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"`           // one of FlowKinds
	Algo  string `json:"algo,omitempty"` // one of FlowAlgos(Kind); "": the first
	Bytes int64  `json:"bytes"`          // nccl-tests' size column, as Collective.Bytes
	GPUs  []int  `json:"gpus"`           // the ranks in order (global GPU numbers, node-major); nil: every GPU; broadcast's and reduce's root is the first
}

// FlowKinds are the collectives the flow level runs (FlowAlgos lists
// their algorithms).
var FlowKinds = []string{"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv"}

// FlowOptions tune a flow-level run.
type FlowOptions struct {
	Routing  string // one of Routings; "" is ecmp
	TopLinks int    // busiest links reported; 0: 10
}

// FlowReport is a flow-level run: each job's time and bandwidths, the
// busiest links and the size of the problem.
type FlowReport struct {
	Routing string      `json:"routing"`
	TimeUs  float64     `json:"time_us"` // the last job's end
	Jobs    []JobReport `json:"jobs"`
	Links   []LinkUse   `json:"busiest_links"`
	Flows   int         `json:"flows"`
	Phases  int         `json:"phases"` // max-min solves: one at the start and one per finish
}

// JobReport is one job's outcome: time = latency + transfer, bandwidths
// as nccl-tests defines them, and the flows that finished last.
type JobReport struct {
	Name       string         `json:"name"`
	Kind       string         `json:"kind"`
	Algo       string         `json:"algo"`  // of FlowAlgos
	Proto      string         `json:"proto"` // NCCL's protocol: the fastest for this job alone
	Ranks      int            `json:"ranks"`
	Bytes      int64          `json:"bytes"`
	TimeUs     float64        `json:"time_us"`
	LatencyUs  float64        `json:"latency_us"`  // the closed form's latency term with the graph's path latencies
	TransferUs float64        `json:"transfer_us"` // the job's last flow's finish, at the protocol's efficiency
	AlgBW      float64        `json:"alg_bw"`      // GB/s
	BusBW      float64        `json:"bus_bw"`      // GB/s
	Critical   []CriticalFlow `json:"critical_flows"`
	Late       int            `json:"late_flows"` // flows that finish last (Critical lists up to 3)
}

// CriticalFlow is a flow that ends its job, with the link that held it.
type CriticalFlow struct {
	Src        int      `json:"src"` // GPU
	Dst        int      `json:"dst"`
	Bytes      float64  `json:"bytes"`
	FinishUs   float64  `json:"finish_us"`
	Bottleneck string   `json:"bottleneck"`
	Path       []string `json:"path"`
}

// LinkUse is a link's load over the run.
type LinkUse struct {
	Link        string  `json:"link"`
	GBps        float64 `json:"GBps"`
	Bytes       float64 `json:"bytes"`
	Utilization float64 `json:"utilization"` // bytes / (rate × the run's transfer time)
}

// maxFlows bounds a run's flows (about 150 bytes each with their paths
// and the solver's state): alltoall is n(n−1) flows.
const maxFlows = 1 << 21

// FlowJobs runs jobs together on t's graph and reports them.
func (t *Topology) FlowJobs(jobs []Job, opt FlowOptions) (*FlowReport, error) {
	g, err := t.BuildGraph(opt.Routing)
	if err != nil {
		return nil, err
	}
	fs := flowSet{g: g}
	hops := make([]jobHops, len(jobs))
	for j := range jobs {
		if hops[j], err = fs.addJob(j, &jobs[j]); err != nil {
			return nil, err
		}
	}
	flows := fs.done()
	phases, err := g.Run(flows)
	if err != nil {
		return nil, err
	}
	rep := &FlowReport{Routing: orRouting(opt.Routing), Flows: len(flows), Phases: phases}
	for j := range jobs {
		jr := g.jobReport(&jobs[j], j, flows, hops[j])
		rep.TimeUs = math.Max(rep.TimeUs, jr.TimeUs)
		rep.Jobs = append(rep.Jobs, jr)
	}
	top := opt.TopLinks
	if top == 0 {
		top = 10
	}
	rep.Links = g.busiest(flows, top)
	return rep, nil
}

func orRouting(r string) string {
	if r == "" {
		return "ecmp"
	}
	return r
}

// flowSet collects flows, their paths in one array.
type flowSet struct {
	g     *Graph
	flows []Flow
	arena []int32
	ends  []int
}

// add routes one flow (id picks its ECMP path) and returns its path's
// latency, µs.
func (fs *flowSet) add(job, src, dst, srcNIC, dstNIC, id int, bytes float64) float64 {
	start := len(fs.arena)
	fs.arena = fs.g.Route(fs.arena, src, dst, srcNIC, dstNIC, id, bytes)
	fs.flows = append(fs.flows, Flow{Job: job, Src: src, Dst: dst, Bytes: bytes})
	fs.ends = append(fs.ends, len(fs.arena))
	lat := 0.0
	for _, l := range fs.arena[start:] {
		lat += fs.g.Links[l].LatencyUs
	}
	return lat
}

// done gives each flow its path.
func (fs *flowSet) done() []Flow {
	start := 0
	for i, end := range fs.ends {
		fs.flows[i].Path = fs.arena[start:end:end]
		start = end
	}
	return fs.flows
}

// jobRanks checks a job and returns its ranks.
func (fs *flowSet) jobRanks(j int, job *Job) ([]int, error) {
	t := fs.g.Topo
	bad := func(why string, a ...any) error {
		return fmt.Errorf("sim: job %d (%q): %s", j, job.Name, fmt.Sprintf(why, a...))
	}
	if !oneOf(job.Kind, FlowKinds) {
		return nil, bad("kind %q: the flow level runs %v", job.Kind, FlowKinds)
	}
	if algos := FlowAlgos(job.Kind); job.Algo != "" && !oneOf(job.Algo, algos) {
		return nil, bad("%s algo %q: the flow level runs %v", job.Kind, job.Algo, algos)
	}
	if job.Bytes < 0 {
		return nil, bad("bytes %d: negative", job.Bytes)
	}
	ranks := job.GPUs
	if ranks == nil {
		ranks = make([]int, t.GPUs())
		for i := range ranks {
			ranks[i] = i
		}
	}
	seen := make(map[int]bool, len(ranks))
	for _, r := range ranks {
		if r < 0 || r >= t.GPUs() || seen[r] {
			return nil, bad("gpu %d: out of 0..%d or listed twice", r, t.GPUs()-1)
		}
		seen[r] = true
	}
	if len(ranks) == 0 {
		return nil, bad("no GPUs")
	}
	if job.Kind == "sendrecv" && len(ranks) < 2 {
		return nil, bad("sendrecv on 1 GPU: needs 2 or more")
	}
	n := len(ranks)
	if flows := len(fs.flows) + n*(n-1); job.Kind == "alltoall" && flows > maxFlows {
		return nil, bad("alltoall on %d ranks is %d flows: the flow level runs up to %d", n, n*(n-1), maxFlows)
	}
	return ranks, nil
}

// addJob adds job j's flows and returns the path latencies its latency
// term needs.
func (fs *flowSet) addJob(j int, job *Job) (jobHops, error) {
	ranks, err := fs.jobRanks(j, job)
	if err != nil {
		return jobHops{}, err
	}
	algo := job.Algo
	if algo == "" {
		algo = FlowAlgos(job.Kind)[0]
	}
	if len(ranks) == 1 {
		return jobHops{nodes: 1, perNode: 1, kind: job.Kind, algo: algo}, nil
	}
	size := float64(job.Bytes)
	switch algo {
	case "pairwise":
		return fs.pairwise(j, ranks, size/float64(len(ranks))), nil
	case "p2p":
		return fs.sendrecv(j, ranks, size), nil
	case "tree":
		return fs.tree(j, ranks, size)
	}
	return fs.ring(j, ranks, size*BusFactor(job.Kind, len(ranks)), job.Kind)
}

// latency is a job's latency term under protocol p, µs: the closed
// form's (nccl.go) with the graph's path latencies. A ring's chunk makes
// a pass round the ring (all_reduce two: reduce-scatter, all-gather) of
// n−nodes hops inside nodes and nodes−1 across (broadcast's and reduce's
// chain one pass); a tree's goes up and down the chain inside a node
// (perNode−1 hops) and ⌈log2 nodes⌉ levels across; pairwise alltoall and
// sendrecv one hop.
func (t *Topology) latency(p protocol, n int, h jobHops) float64 {
	base, hop := p.base, p.hop
	if h.algo == "tree" {
		base, hop = p.treeBase, p.treeHop
	}
	if n == 1 {
		return base
	}
	hi := math.Max(hop[t.ncclLinks(n).intraHop], h.intraUs)
	hn := hop[hopNet] + h.netUs
	switch h.algo {
	case "pairwise", "p2p":
		if h.nodes > 1 {
			return base + hn
		}
		return base + hi
	case "tree":
		depth := float64(bits.Len(uint(h.nodes - 1)))
		return base + 2*(float64(h.perNode-1)*hi+depth*hn)
	}
	passes := 1.0
	if h.kind == "all_reduce" {
		passes = 2
	}
	return base + passes*(float64(n-h.nodes)*hi+float64(h.nodes-1)*hn)
}

// protocol picks the fastest of NCCL's protocols for a job whose flows
// took transfer seconds at the links' full data rate. A protocol's share
// of the links is the closed form's, which scales every link alike: for a
// ring its bus bandwidth (ncclLinks.ringBusBW on the channels NCCL runs
// for the size: LL's half and cap, LL128's 0.92 and per-channel cap) over
// the ring's full one, and
// Simple all_reduce across nodes has the closed form's ×1.4 latency
// (NCCL's ring plateau); for the tree its bus bandwidth (treeBusBW: 0.92,
// per-channel caps, NCCL's size correction) over the same; alltoall and
// sendrecv take the protocols' efficiencies (sendrecv on one node at most
// LL's cap). It returns the protocol's index, latency and transfer (µs).
func (t *Topology) protocol(job *Job, n int, h jobHops, transfer float64) (int, float64, float64) {
	best, lat, xfer := simple, 0.0, math.Inf(1)
	k := t.ncclLinks(n)
	for i, p := range protocols {
		if i == 1 && !k.ll128 {
			continue
		}
		share := p.eff
		switch h.algo {
		case "ring":
			share = k.ringBusBW(i, channelsUsed(job.Bytes, k.ring, i, n, true)) / k.ringBW()
		case "tree":
			share = k.treeBusBW(i, channelsUsed(job.Bytes, k.ring, i, n, false), job.Bytes) / k.ringBW()
		}
		x := transfer / share * 1e6
		if h.algo == "p2p" && i == 0 && k.llMax > 0 {
			x = math.Max(x, float64(job.Bytes)/1e3/k.llMax)
		}
		l := t.latency(p, n, h)
		if i == simple && h.algo == "ring" && h.nodes > 1 && job.Kind == "all_reduce" && job.Bytes/int64(k.ring.comm*n) >= 64 {
			l *= 1.4
		}
		if l+x < lat+xfer {
			best, lat, xfer = i, l, x
		}
	}
	return best, lat, xfer
}

// jobHops are a job's largest path latencies inside a node and across
// nodes (µs), its node count and most ranks on one node, its kind and
// algorithm: what its latency term and protocol need.
type jobHops struct {
	intraUs, netUs float64
	nodes, perNode int
	kind, algo     string
}

func (h *jobHops) note(sameNode bool, us float64) {
	if sameNode {
		h.intraUs = math.Max(h.intraUs, us)
	} else {
		h.netUs = math.Max(h.netUs, us)
	}
}

// byNode groups a job's ranks by node (groups[k]: the ranks on the k-th
// node in the order of their first rank) and counts the channels NCCL
// opens: one per NIC the job's GPUs use on a node (the closed form's
// layout), at least one.
func (fs *flowSet) byNode(ranks []int) (groups [][]int, channels, most int) {
	t := fs.g.Topo
	at := make([]int32, t.Nodes) // k+1 of each node seen
	for _, r := range ranks {
		h := r / t.GPUsPerNode
		if at[h] == 0 {
			groups = append(groups, nil)
			at[h] = int32(len(groups))
		}
		k := at[h] - 1
		groups[k] = append(groups[k], r)
		most = max(most, len(groups[k]))
	}
	channels = 1
	if t.NICsPerNode > 0 {
		channels = max(1, ceilDiv(t.NICsPerNode*most, t.GPUsPerNode))
	}
	return groups, channels, most
}

// ring adds a ring's flows. NCCL opens one ring per NIC (channel): here as
// many channels as the NICs the job's GPUs use on a node (the closed
// form's layout). Each channel's ring visits the job's nodes in the order
// of their first rank, starting inside each node at a GPU rotated by the
// channel and leaving it through that GPU's NIC, so every ring crosses
// each node boundary once, through a NIC of its own. A ring's steps are
// the same flows (each rank to its successor, its share of the chunk), so
// each edge is one flow of all its steps' bytes: max-min filling scales
// with the bytes, so for one job this is its steps one after the other,
// for several the fluid limit of their pipelined steps. broadcast's
// chain is the ring without the edge into the root (ranks[0]), reduce's
// without the edge out of it: every edge carries the whole size at once
// (NCCL pipelines the chunks down the chain).
func (fs *flowSet) ring(j int, ranks []int, edgeBytes float64, kind string) (jobHops, error) {
	groups, channels, most := fs.byNode(ranks)
	n, root := len(ranks), ranks[0]
	if len(fs.flows)+n*channels > maxFlows {
		return jobHops{}, fmt.Errorf("sim: job %d: a ring of %d ranks × %d channels is %d flows: the flow level runs up to %d", j, n, channels, n*channels, maxFlows)
	}
	hops := jobHops{nodes: len(groups), perNode: most, kind: kind, algo: "ring"}
	seq, entry := make([]int, 0, n), make([]int, len(groups))
	for c := range channels {
		seq = seq[:0]
		for k, grp := range groups {
			st := c * len(grp) / channels
			entry[k] = grp[st]
			seq = append(append(seq, grp[st:]...), grp[:st]...)
		}
		pos := 0
		for k, grp := range groups {
			for i := range grp {
				kd := k
				if i == len(grp)-1 {
					kd = (k + 1) % len(groups)
				}
				src, dst := seq[pos], seq[(pos+1)%n]
				pos++
				if kind == "broadcast" && dst == root || kind == "reduce" && src == root {
					continue
				}
				lat := fs.add(j, src, dst, fs.g.NICOf(entry[k]), fs.g.NICOf(entry[kd]), c, edgeBytes/float64(channels))
				hops.note(kd == k, lat)
			}
		}
	}
	return hops, nil
}

// pairwise adds alltoall's flows: every rank sends b bytes to every other
// at once, through its own NIC to the peer's.
func (fs *flowSet) pairwise(j int, ranks []int, b float64) jobHops {
	t := fs.g.Topo
	groups, _, most := fs.byNode(ranks)
	hops := jobHops{nodes: len(groups), perNode: most, kind: "alltoall", algo: "pairwise"}
	for _, s := range ranks {
		for _, d := range ranks {
			if s != d {
				hops.note(s/t.GPUsPerNode == d/t.GPUsPerNode, fs.add(j, s, d, fs.g.NICOf(s), fs.g.NICOf(d), 0, b))
			}
		}
	}
	return hops
}

// jobReport is job j's outcome once flows have run.
func (g *Graph) jobReport(job *Job, j int, flows []Flow, h jobHops) JobReport {
	ranks := len(job.GPUs)
	if job.GPUs == nil {
		ranks = g.Topo.GPUs()
	}
	r := JobReport{Name: job.Name, Kind: job.Kind, Algo: h.algo, Ranks: ranks, Bytes: job.Bytes}
	end := 0.0
	for i := range flows {
		if flows[i].Job == j {
			end = math.Max(end, flows[i].Finish)
		}
	}
	for i := range flows {
		f := &flows[i]
		if f.Job != j || end == 0 || f.Finish < end*(1-finishTolerance) {
			continue
		}
		if r.Late++; len(r.Critical) < 3 {
			c := CriticalFlow{Src: f.Src, Dst: f.Dst, Bytes: f.Bytes, FinishUs: f.Finish * 1e6, Bottleneck: g.LinkName(f.Bottleneck)}
			for _, l := range f.Path {
				c.Path = append(c.Path, g.LinkName(l))
			}
			r.Critical = append(r.Critical, c)
		}
	}
	var p int
	p, r.LatencyUs, r.TransferUs = g.Topo.protocol(job, ranks, h, end)
	r.Proto = protocols[p].name
	r.TimeUs = r.LatencyUs + r.TransferUs
	if r.TimeUs > 0 {
		r.AlgBW = float64(job.Bytes) / (r.TimeUs * 1e-6) / 1e9
	}
	r.BusBW = r.AlgBW * BusFactor(job.Kind, ranks)
	return r
}

// busiest are the top links by utilization over the run's transfer time.
func (g *Graph) busiest(flows []Flow, top int) []LinkUse {
	bytes := make([]float64, len(g.Links))
	end := 0.0
	for i := range flows {
		end = math.Max(end, flows[i].Finish)
		for _, l := range flows[i].Path {
			bytes[l] += flows[i].Bytes
		}
	}
	var used []int32
	for l, b := range bytes {
		if b > 0 {
			used = append(used, int32(l))
		}
	}
	util := func(l int32) float64 { return bytes[l] / (g.Links[l].GBps * 1e9 * end) }
	slices.SortStableFunc(used, func(a, b int32) int {
		return -cmpFloat(util(a), util(b))
	})
	var out []LinkUse
	for _, l := range used[:min(top, len(used))] {
		out = append(out, LinkUse{Link: g.LinkName(l), GBps: g.Links[l].GBps, Bytes: bytes[l], Utilization: util(l)})
	}
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// FlowCollective runs c as one job on t's first c.Ranks GPUs (all when 0)
// at the flow level with c.Algo (one of FlowAlgos(c.Kind); "" the
// first), the fastest protocol.
func (t *Topology) FlowCollective(c Collective, opt FlowOptions) (Result, *FlowReport, error) {
	ranks := c.Ranks
	if ranks == 0 {
		ranks = t.GPUs()
	}
	if ranks < 1 || ranks > t.GPUs() {
		return Result{}, nil, fmt.Errorf("sim: %s ranks %d: topology %q has 1 to %d GPUs", c.Kind, c.Ranks, t.Name, t.GPUs())
	}
	if algos := FlowAlgos(c.Kind); c.Algo != "" && algos != nil && !oneOf(c.Algo, algos) {
		return Result{}, nil, fmt.Errorf("sim: %s algo %q: the flow level runs %s", c.Kind, c.Algo, strings.Join(algos, ", "))
	}
	gpus := make([]int, ranks)
	for i := range gpus {
		gpus[i] = i
	}
	rep, err := t.FlowJobs([]Job{{Name: c.Kind, Kind: c.Kind, Algo: c.Algo, Bytes: c.Bytes, GPUs: gpus}}, opt)
	if err != nil {
		return Result{}, nil, err
	}
	j := rep.Jobs[0]
	return Result{Algo: j.Algo, Proto: j.Proto, TimeUs: j.TimeUs, AlgBW: j.AlgBW, BusBW: j.BusBW}, rep, nil
}
