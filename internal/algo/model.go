package algo

import (
	"math"
	"math/bits"
)

// LinkCost is the Hockney ("alpha-beta") model of a link: a message of n
// bytes takes Alpha + n·Beta seconds (Hockney, "The communication challenge
// for MPP: Intel Paragon and Meiko CS-2", Parallel Computing 20, 1994).
type LinkCost struct {
	Alpha float64 // seconds per message: latency and per-message overheads
	Beta  float64 // seconds per byte: the inverse of the bandwidth
}

// Bandwidth is the link's bandwidth in bytes per second.
func (l LinkCost) Bandwidth() float64 { return 1 / l.Beta }

func (l LinkCost) valid() bool {
	return l.Alpha >= 0 && l.Beta > 0 && !math.IsInf(l.Alpha, 0) && !math.IsInf(l.Beta, 0)
}

// Costs are the two kinds of links of a Hierarchy. Inter is a host's link
// to the network: the messages that leave a host at once share its
// bandwidth, as do those that enter it.
type Costs struct {
	Intra LinkCost // between two ranks of one host (shared memory)
	Inter LinkCost // between hosts
}

// Valid reports whether both links have a finite latency and a positive,
// finite time per byte (NaN fails too).
func (c Costs) Valid() bool { return c.Intra.valid() && c.Inter.valid() }

// CostModel predicts the time of the flat and the hierarchical schedules of
// this package on ranks laid out over hosts, from the Costs of the two kinds
// of links. Each schedule is a sequence of rounds: a ring step, an exchange
// of recursive doubling or halving, a level of a binomial tree. A round in
// which every message has b bytes takes, on the Hockney model of Thakur,
// Rabenseifner and Gropp ("Optimization of Collective Communication
// Operations in MPICH", IJHPCA 19(1), 2005, whose per-algorithm costs —
// ring 2(p−1)α + 2(p−1)/p·nβ, recursive doubling lg p·(α + nβ),
// halving-doubling 2 lg p·α + 2(p−1)/p·nβ — it reproduces on one kind of
// link), the time of its slowest message: Intra.Alpha + b·Intra.Beta within
// a host, Inter.Alpha + k·b·Inter.Beta across hosts, where k is the most
// messages that leave or enter one host in that round: the host's ranks
// share its link, as the lanes of Träff's multi-lane model do (see
// Hierarchy). The rounds are worked out once, from where each rank is, so a
// prediction costs a few dozen multiplications.
//
// Left out: the reduction's arithmetic (the flat and hierarchical schedules
// reduce about the same bytes per rank) and the overlap of a round's
// messages with the next round's beyond the pipelines modelled (Broadcast's
// pieces, AllReduceHier's).
type CostModel struct {
	Costs
	P, Hosts, PerHost int // PerHost: 0 when hosts hold different numbers of ranks

	flatRD, flatRHD, flatRing schedule // AllReduce over all ranks (the ring host-major)
	flatRingRanks             schedule // P−1 ring steps of 1/P in rank order: AllGather, ReduceScatter
	flatTree                  schedule // Broadcast from rank 0, in rank order
	local                     schedule // L−1 ring steps of 1/L within every host
	interRD, interRHD         schedule // AllReduce of a 1/L chunk among the hosts, L lanes at once
	interRing                 schedule
	interBlocks               schedule // H−1 ring steps of 1/P among the hosts, L lanes at once
	interTree, localTree      schedule // BroadcastHier's two trees
	interChain                schedule // BroadcastHier's chain among the hosts (InterChain)
}

// NewCostModel models ranks on hosts: hostOf[r] is the host of rank r, hosts
// numbered from 0 in the order of their lowest rank (Hierarchy.HostOf).
func NewCostModel(hostOf []int, c Costs) *CostModel {
	if len(hostOf) == 0 {
		return &CostModel{Costs: c}
	}
	members := hostMembers(hostOf)
	P, H := len(hostOf), len(members)
	m := &CostModel{Costs: c, P: P, Hosts: H, PerHost: len(members[0])}
	b := newShaper(hostOf, H)
	ranks := make([]int, P)
	for r := range ranks {
		ranks[r] = r
	}
	all := [][]int{ranks}
	var hostMajor []int
	for _, mem := range members {
		if len(mem) != m.PerHost {
			m.PerHost = 0
		}
		hostMajor = append(hostMajor, mem...)
	}
	m.flatRD = b.recursive(all, 1, false)
	m.flatRHD = b.recursive(all, 1, true)
	m.flatRing = b.ring([][]int{hostMajor}, 2*(P-1), 1/float64(P))
	m.flatRingRanks = b.ring(all, P-1, 1/float64(P))
	m.flatTree = b.tree(all, 1)
	if m.PerHost < 2 || H < 2 {
		return m // no hierarchical schedules
	}
	L := m.PerHost
	inter := make([][]int, L) // lane l: the ranks of local index l, host after host
	for l := range inter {
		for _, mem := range members {
			inter[l] = append(inter[l], mem[l])
		}
	}
	m.local = b.ring(members, L-1, 1/float64(L))
	m.interRD = b.recursive(inter, 1/float64(L), false)
	m.interRHD = b.recursive(inter, 1/float64(L), true)
	m.interRing = b.ring(inter, 2*(H-1), 1/float64(P))
	m.interBlocks = b.ring(inter, H-1, 1/float64(P))
	m.interTree = b.tree(inter[:1], 1)
	m.interChain = b.chain(inter[0], 1)
	m.localTree = b.tree(members, 1)
	return m
}

// hostMembers lists each host's ranks in rank order.
func hostMembers(hostOf []int) [][]int {
	var members [][]int
	for r, h := range hostOf {
		for len(members) <= h {
			members = append(members, nil)
		}
		members[h] = append(members[h], r)
	}
	return members
}

// hierarchical reports whether the hierarchical schedules can run.
func (m *CostModel) hierarchical() bool { return m.PerHost > 1 && m.Hosts > 1 }

// AllReduce predicts a flat AllReduce of nbytes with algorithm a (RD, RHD;
// anything else: the ring, host-major).
func (m *CostModel) AllReduce(nbytes int, a Algorithm) float64 {
	s := m.flatRing
	switch a {
	case RD:
		s = m.flatRD
	case RHD:
		s = m.flatRHD
	}
	t, _ := s.time(m.Costs, float64(nbytes))
	return t
}

// AllReduceHier predicts AllReduceHier of nbytes with inter among the
// hosts: pieces of hierPieceBytes, the first through the ring
// reduce-scatter within the host, the AllReduce among the hosts and the
// ring all-gather within the host, each further one through the slower of
// the host's two steps and the network's one, which overlap. +Inf when the
// hierarchical schedules cannot run.
func (m *CostModel) AllReduceHier(nbytes int, inter Algorithm) float64 {
	if !m.hierarchical() {
		return math.Inf(1)
	}
	s := m.interRing
	switch inter {
	case RD:
		s = m.interRD
	case RHD:
		s = m.interRHD
	}
	piece, pieces := splitPieces(nbytes, hierPieceBytes)
	local, _ := m.local.time(m.Costs, piece)
	network, _ := s.time(m.Costs, piece)
	return 2*local + network + (pieces-1)*max(2*local, network)
}

// Broadcast predicts a Broadcast of nbytes from rank 0: the flat binomial
// tree, or BroadcastHier's tree (or chain, InterChain) among the hosts then
// its tree within each, each
// pipelined in pieces of pipelineBytes. +Inf for hier when the
// hierarchical schedules cannot run.
func (m *CostModel) Broadcast(nbytes int, hier bool) float64 {
	if !hier {
		return m.flatTree.pipelined(m.Costs, nbytes, pipelineBytes)
	}
	if !m.hierarchical() {
		return math.Inf(1)
	}
	inter := &m.interTree
	if InterChain(m.Hosts, nbytes) {
		inter = &m.interChain
	}
	return inter.pipelined(m.Costs, nbytes, pipelineBytes) + m.localTree.pipelined(m.Costs, nbytes, pipelineBytes)
}

// AllGather predicts an AllGather whose output is nbytes: the ring in rank
// order, or AllGatherHier (a ring among the hosts, a ring within the host,
// and the copy into rank order, counted as nbytes through the intra-host
// link without its latency). +Inf for hier when the hierarchical schedules
// cannot run.
func (m *CostModel) AllGather(nbytes int, hier bool) float64 {
	return m.gatherLike(nbytes, hier)
}

// ReduceScatter predicts a ReduceScatter whose input is nbytes: the ring
// in rank order, or ReduceScatterHier (the regrouping copy, a ring within
// the host, a ring among the hosts): the same rounds as AllGather's, in
// the other order.
func (m *CostModel) ReduceScatter(nbytes int, hier bool) float64 {
	return m.gatherLike(nbytes, hier)
}

func (m *CostModel) gatherLike(nbytes int, hier bool) float64 {
	n := float64(nbytes)
	if !hier {
		t, _ := m.flatRingRanks.time(m.Costs, n)
		return t
	}
	if !m.hierarchical() {
		return math.Inf(1)
	}
	network, _ := m.interBlocks.time(m.Costs, n)
	local, _ := m.local.time(m.Costs, n)
	return network + local + n*m.Intra.Beta
}

// splitPieces cuts nbytes into pieces of at most piece bytes: the size of the
// first and their number (at least one).
func splitPieces(nbytes, piece int) (first, n float64) {
	k := max(1, (nbytes+piece-1)/piece)
	return float64(min(nbytes, piece)), float64(k)
}

// round is a set of messages that go at once, every one frac of the
// collective's bytes, repeated count times (a ring's steps).
type round struct {
	frac   float64
	count  int
	intra  bool // a message stays within its host
	fanout int  // the most messages that leave one host, or enter one (0: none crosses)
}

// schedule is the rounds of a schedule, in order, and its load: the most
// that leaves one host or enters one over all the rounds, as a fraction of
// the collective's bytes.
type schedule struct {
	rounds []round
	load   float64
}

// time is the schedule's time for a collective of n bytes, and that of
// its slowest round.
func (s *schedule) time(c Costs, n float64) (total, slowest float64) {
	for _, r := range s.rounds {
		b := r.frac * n
		var t float64
		if r.intra {
			t = c.Intra.Alpha + b*c.Intra.Beta
		}
		if r.fanout > 0 {
			t = max(t, c.Inter.Alpha+float64(r.fanout)*b*c.Inter.Beta)
		}
		total += float64(r.count) * t
		slowest = max(slowest, t)
	}
	return total, slowest
}

// pipelined is the time of nbytes sent through the schedule in pieces of
// at most piece bytes: the first piece through every round, each other one
// in the time of the slowest round or, if longer, of what the schedule
// sends through the busiest host's link (in the steady state every round
// runs at once, on successive pieces).
func (s *schedule) pipelined(c Costs, nbytes, piece int) float64 {
	first, n := splitPieces(nbytes, piece)
	total, slowest := s.time(c, first)
	return total + (n-1)*max(slowest, s.load*first*c.Inter.Beta)
}

// shaper works out the rounds of schedules from where every rank is.
type shaper struct {
	hostOf        []int
	out, in       []int     // per host: messages leaving it, entering it, in this round
	totOut, totIn []float64 // per host: fractions of the bytes leaving it, entering it, in this schedule
}

func newShaper(hostOf []int, hosts int) *shaper {
	return &shaper{hostOf: hostOf, out: make([]int, hosts), in: make([]int, hosts),
		totOut: make([]float64, hosts), totIn: make([]float64, hosts)}
}

// start begins a schedule.
func (b *shaper) start() *schedule {
	clear(b.totOut)
	clear(b.totIn)
	return &schedule{}
}

// add appends to s a round of the messages that each sends (src, dst
// ranks), of frac of the bytes each, count times; nothing when none.
func (b *shaper) add(s *schedule, frac float64, count int, each func(send func(src, dst int))) {
	clear(b.out)
	clear(b.in)
	r := round{frac: frac, count: count}
	sent := false
	each(func(src, dst int) {
		sent = true
		hs, hd := b.hostOf[src], b.hostOf[dst]
		if hs == hd {
			r.intra = true
			return
		}
		b.out[hs]++
		b.in[hd]++
		r.fanout = max(r.fanout, b.out[hs], b.in[hd])
	})
	if !sent || count < 1 {
		return
	}
	s.rounds = append(s.rounds, r)
	for h := range b.out {
		b.totOut[h] += frac * float64(count*b.out[h])
		b.totIn[h] += frac * float64(count*b.in[h])
		s.load = max(s.load, b.totOut[h], b.totIn[h])
	}
}

// ring is count steps of a ring over each lane (ranks in ring order; the
// lanes run at once), every rank sending frac to the next.
func (b *shaper) ring(lanes [][]int, count int, frac float64) schedule {
	s := b.start()
	b.add(s, frac, count, func(send func(int, int)) {
		for _, lane := range lanes {
			for i, r := range lane {
				if len(lane) > 1 {
					send(r, lane[(i+1)%len(lane)])
				}
			}
		}
	})
	return *s
}

// recursive is recursive doubling (AllReduceRD) or, with halving,
// halving-doubling (AllReduceRHD) over each lane, on a vector of frac:
// over the largest power of two, the extra ranks folded in first and
// served last (pow2Fold).
func (b *shaper) recursive(lanes [][]int, frac float64, halving bool) schedule {
	n := len(lanes[0])
	s := b.start()
	if n < 2 {
		return *s
	}
	f := pow2Fold{pow: 1 << (bits.Len(uint(n)) - 1)}
	f.rem = n - f.pow
	pairs := func(odd bool) func(func(int, int)) { // the fold (odd false) and the unfold
		return func(send func(int, int)) {
			for _, lane := range lanes {
				for r := 0; r < 2*f.rem; r += 2 {
					if odd {
						send(lane[r+1], lane[r])
					} else {
						send(lane[r], lane[r+1])
					}
				}
			}
		}
	}
	exchange := func(mask int) func(func(int, int)) {
		return func(send func(int, int)) {
			for _, lane := range lanes {
				for vr := 0; vr < f.pow; vr++ {
					send(lane[f.groupRank(vr)], lane[f.groupRank(vr^mask)])
				}
			}
		}
	}
	b.add(s, frac, 1, pairs(false))
	part := frac
	if halving {
		for mask := f.pow >> 1; mask > 0; mask >>= 1 {
			part /= 2
			b.add(s, part, 1, exchange(mask))
		}
	}
	for mask := 1; mask < f.pow; mask <<= 1 {
		b.add(s, part, 1, exchange(mask))
		if halving {
			part *= 2
		}
	}
	b.add(s, frac, 1, pairs(true))
	return *s
}

// tree is the binomial tree of bcastTree over each lane, rooted at its
// first rank, for a message of frac: a rank passes the message to all its
// children at once when it has it, so round d reaches the ranks d levels
// down (those whose index in the lane has d bits set).
func (b *shaper) tree(lanes [][]int, frac float64) schedule {
	n := len(lanes[0])
	s := b.start()
	for d := 1; d <= bits.Len(uint(n-1)); d++ {
		b.add(s, frac, 1, func(send func(int, int)) {
			for _, lane := range lanes {
				for vr := 1; vr < n; vr++ {
					if bits.OnesCount(uint(vr)) == d {
						send(lane[vr&(vr-1)], lane[vr])
					}
				}
			}
		})
	}
	return *s
}

// chain is the rounds of a chain broadcast along ranks: round d sends from
// ranks[d-1] to ranks[d].
func (b *shaper) chain(ranks []int, frac float64) schedule {
	s := b.start()
	for d := 1; d < len(ranks); d++ {
		b.add(s, frac, 1, func(send func(int, int)) { send(ranks[d-1], ranks[d]) })
	}
	return *s
}

// Crossover is the smallest size among the powers of two from
// CrossoverMin to CrossoverMax from which hier predicts less time than
// flat at every larger one; math.MaxInt when hier does not at
// CrossoverMax. Evaluated once, at Init, so that a collective compares its
// size with it.
func Crossover(flat, hier func(nbytes int) float64) int {
	from := math.MaxInt
	for n := CrossoverMax; n >= CrossoverMin; n >>= 1 {
		// A relative margin, so that two schedules modelled as equal (a
		// flat tree that crosses the network once per host) stay flat.
		if !(hier(n) < flat(n)*(1-1e-9)) {
			break
		}
		from = n
	}
	return from
}

// The sizes Crossover considers.
const (
	CrossoverMin = 64
	CrossoverMax = 1 << 30
)
