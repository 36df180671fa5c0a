package algo

import (
	"encoding/binary"
	"math"
)

// The tuner's thresholds, measured with 2 and (oversubscribed) 4 ranks on a
// 2-core host over shared memory (goccl perf; the figures are below):
//   - the direct schedules run from DirectMinBytes·(P-1) bytes of the
//     largest buffer: with 2 ranks they won from 16 KiB on and lost below;
//     with 4 they lost at 16 KiB and won from 128 KiB (their control rounds
//     grow with P-1).
//   - AllReduce, 2 ranks: recursive doubling, one exchange of the whole
//     vector where ring and halving-doubling take two of halves (8 bytes:
//     0.59 against 1.15 µs); in place above rdMaxBytesInPlace2 it needs a
//     scratch pass and the ring wins (3.4 against 5.5 GB/s at 4 MiB).
//   - AllReduce, more ranks: recursive doubling (log2 P whole vectors) up
//     to rdMaxBytes, halving-doubling (log2 P latency terms) up to
//     rhdMaxBytes, the ring (no rank sends more than 2n(P-1)/P) above.
//   - across hosts, the hierarchical schedules from a crossover per kind
//     that Init's probe derives from the cost model (HierCrossovers), or
//     HierMinBytes without one; among the hosts AllReduceHier reduces each
//     rank's chunk as a flat group would (InterAlgorithm).
const (
	HierMinBytes       = 64 << 10
	DirectMinBytes     = 16 << 10
	rdMaxBytes         = 32 << 10
	rdMaxBytesInPlace2 = 2 << 20
	rhdMaxBytes        = 256 << 10
)

// Facts are what the choice of a schedule depends on, all settled by Init
// (a simulator may make them up: nothing here needs links).
type Facts struct {
	Size      int       // ranks
	HostOf    []int     // each rank's host (Hierarchy.HostOf); nil: one host
	Direct    bool      // every rank can read every peer's memory (Group.Direct)
	CollNet   bool      // an aggregation tree is attached (Group.SetAggregator)
	Forced    Algorithm // GOCCL_ALGO (ParseForced); "": the tuner decides
	DirectMin int       // per peer, the smallest buffer of the direct schedules
	Tuning    Tuning    // the crossovers to the hierarchical schedules (FixedTuning without a probe)
}

// Selector chooses the schedule of every call from the table and the
// Facts: GOCCL_ALGO's row where it can run, else the tuner's (Choose).
type Selector struct {
	f              Facts
	hosts, perHost int // perHost 0: uneven hosts
	hierMin        [NumKinds]int
	kinds          [NumKinds]choice
}

// choice is what a Selector chooses from for one kind: the forced row,
// if usable, else the first of rows that picks the call.
type choice struct {
	forced *Schedule
	rows   []*Schedule
}

// NewSelector settles, per kind, the usable rows. GOCCL_ALGO names
// AllReduce's algorithm and forces the row of that name for the other
// kinds too, whose others it turns off: a forced row that cannot run gives
// AllReduce to the tuner (without the aggregation tree) and the other
// kinds to their flat schedules.
func NewSelector(f Facts) *Selector {
	s := &Selector{f: f}
	if members := hostMembers(f.HostOf); len(members) > 0 {
		s.hosts, s.perHost = len(members), len(members[0])
		for _, m := range members {
			if len(m) != s.perHost {
				s.perHost = 0
			}
		}
	}
	for i, k := range HierKinds {
		s.hierMin[k] = f.Tuning.HierMin[i]
	}
	for i := range schedules {
		r := &schedules[i]
		t := &s.kinds[r.Kind]
		if r.Usable != nil && !r.Usable(s) {
			continue
		}
		if f.Forced != "" && r.Algo == f.Forced {
			t.forced = r
		}
		if f.Forced == "" || r.Kind == KindAllReduce || r.Pick == nil && len(t.rows) == 0 {
			t.rows = append(t.rows, r)
		}
	}
	return s
}

// Choose is the schedule of a call of kind k whose largest buffer is
// nbytes (send and recv the same in place); nil for a kind with no rows.
func (s *Selector) Choose(k Kind, nbytes int, inPlace bool) *Schedule {
	if k >= NumKinds {
		return nil
	}
	t := &s.kinds[k]
	if r := t.forced; r != nil && !(inPlace && r.OutOfPlace) {
		return r
	}
	for _, r := range t.rows {
		if !(inPlace && r.OutOfPlace) && (r.Pick == nil || r.Pick(s, nbytes, inPlace)) {
			return r
		}
	}
	return nil
}

// Facts are the facts s was made from.
func (s *Selector) Facts() Facts { return s.f }

// Hierarchical reports whether the hierarchical schedules can run: several
// hosts, the same number of ranks on each, more than one.
func (s *Selector) Hierarchical() bool { return s.hosts > 1 && s.perHost > 1 }

// Forced is the row GOCCL_ALGO forces for kind k where it can run (nil: the
// tuner chooses, or the kind has no row of that name).
func (s *Selector) Forced(k Kind) *Schedule {
	if k >= NumKinds {
		return nil
	}
	return s.kinds[k].forced
}

// Unusable is AllReduce's row that GOCCL_ALGO forces when it cannot run on
// this communicator (nil: none forced, or it runs).
func (s *Selector) Unusable() *Schedule {
	if s.f.Forced == "" || s.kinds[KindAllReduce].forced != nil {
		return nil
	}
	return Lookup(KindAllReduce, s.f.Forced)
}

// InterAlgorithm is the algorithm AllReduceHier runs among hosts hosts of
// perHost ranks for an AllReduce of nbytes (each rank's chunk is
// nbytes/perHost): with 2 hosts, or a chunk up to rdMaxBytes, recursive
// doubling; up to rhdMaxBytes halving-doubling; the ring above.
func InterAlgorithm(hosts, perHost, nbytes int) Algorithm {
	chunk := nbytes / max(1, perHost)
	switch {
	case hosts == 2 || chunk <= rdMaxBytes:
		return RD
	case chunk <= rhdMaxBytes:
		return RHD
	}
	return Ring
}

// HierKinds are the kinds that have a hierarchical schedule, in the order a
// tuning message carries their crossovers.
var HierKinds = [...]Kind{KindAllReduce, KindBroadcast, KindAllGather, KindReduceScatter}

// Tuning is the outcome of Init's probe, the same on every rank (rank 0
// measures and derives it, and broadcasts it): the links measured (zero
// without a probe) and, for each of HierKinds, the smallest buffer that
// runs the hierarchical schedule (math.MaxInt: none does).
type Tuning struct {
	Costs   Costs
	HierMin [len(HierKinds)]int
}

// FixedTuning is the tuning without a probe: HierMinBytes for every kind.
func FixedTuning() Tuning {
	var t Tuning
	for i := range t.HierMin {
		t.HierMin[i] = HierMinBytes
	}
	return t
}

// TuningBytes is the size of an encoded Tuning: four float64 and an int64
// per kind, little-endian.
const TuningBytes = 4*8 + len(HierKinds)*8

// Encode is t as rank 0 broadcasts it.
func (t *Tuning) Encode() (b [TuningBytes]byte) {
	for i, f := range [4]float64{t.Costs.Intra.Alpha, t.Costs.Intra.Beta, t.Costs.Inter.Alpha, t.Costs.Inter.Beta} {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(f))
	}
	for i, n := range t.HierMin {
		binary.LittleEndian.PutUint64(b[32+8*i:], uint64(int64(n)))
	}
	return b
}

// DecodeTuning is the Tuning that Encode made b from (TuningBytes bytes).
func DecodeTuning(b []byte) Tuning {
	f := func(i int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])) }
	t := Tuning{Costs: Costs{Intra: LinkCost{Alpha: f(0), Beta: f(1)}, Inter: LinkCost{Alpha: f(2), Beta: f(3)}}}
	for i := range t.HierMin {
		n := int64(binary.LittleEndian.Uint64(b[32+8*i:]))
		t.HierMin[i] = int(min(n, math.MaxInt)) // a 64-bit rank 0's MaxInt on a 32-bit rank
	}
	return t
}

// HierCrossovers is, for each of HierKinds, the smallest buffer from which
// the cost model predicts the hierarchical schedule faster than the flat
// one the tuner would run instead (Crossover), for ranks on hosts hostOf
// whose links cost costs; ok is false, and the crossovers FixedTuning's,
// when costs are not usable measurements.
func HierCrossovers(hostOf []int, costs Costs) (hierMin [len(HierKinds)]int, ok bool) {
	if !costs.Valid() {
		return FixedTuning().HierMin, false
	}
	m := NewCostModel(hostOf, costs)
	flat := NewSelector(Facts{Size: m.P}) // one host, no direct schedules
	hierMin[0] = Crossover(
		func(n int) float64 { return m.AllReduce(n, flat.Choose(KindAllReduce, n, false).Algo) },
		func(n int) float64 { return m.AllReduceHier(n, InterAlgorithm(m.Hosts, m.PerHost, n)) })
	for i, predict := range [...]func(int, bool) float64{m.Broadcast, m.AllGather, m.ReduceScatter} {
		hierMin[i+1] = Crossover(func(n int) float64 { return predict(n, false) }, func(n int) float64 { return predict(n, true) })
	}
	return hierMin, true
}
