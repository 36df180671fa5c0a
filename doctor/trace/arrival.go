package trace

import (
	"math"
	"sort"
	"strings"
)

// Arrival is how often a rank was the last to reach a collective, and by
// how much: the stragglers that the other ranks wait for.
type Arrival struct {
	Rank    int     `json:"rank"`
	Last    int     `json:"last"`        // collectives this rank reached last
	MeanLag float64 `json:"mean_lag_us"` // in those, after the first rank (µs)
	MaxLag  float64 `json:"max_lag_us"`
}

// Arrivals is the cross-rank view of the collectives the traces share.
type Arrivals struct {
	Collectives int       `json:"collectives"` // with a last rank
	Source      string    `json:"source"`      // how the last rank was found: ArrivalRecorded or ArrivalStarts
	Ranks       []Arrival `json:"ranks"`
}

// Arrivals.Source values.
const (
	ArrivalRecorded = "recorded by the communicator"
	ArrivalStarts   = "latest start"
)

// arrivals matches the ranks' collectives and names the last to reach
// each. goccl traces carry it when the communicator measured it
// (args.last_rank and lag_us: ArrivalRecorded); otherwise the operations
// are matched by sequence number (goccl) or by order (the k-th collective
// kernel of every rank, Kineto, kept when the kernels end together as a
// collective's do), and the last is the latest start (ArrivalStarts: the
// ranks' clocks must agree, as on one host). Nil with fewer than two
// ranks or nothing matched.
func arrivals(rks []*Rank) *Arrivals {
	if len(rks) < 2 {
		return nil
	}
	a := &Arrivals{}
	idx := map[int]int{}
	for i, rk := range rks {
		a.Ranks = append(a.Ranks, Arrival{Rank: rk.Rank})
		idx[rk.Rank] = i
	}
	note := func(last int, lag float64) {
		i, ok := idx[last]
		if !ok {
			return
		}
		r := &a.Ranks[i]
		r.Last++
		r.MeanLag += lag
		r.MaxLag = max(r.MaxLag, lag)
		a.Collectives++
	}
	if recorded := recordedArrivals(rks); len(recorded) > 0 {
		a.Source = ArrivalRecorded
		for _, e := range recorded {
			note(int(e.lastRank), float64(e.lag))
		}
	} else {
		a.Source = ArrivalStarts
		for _, group := range matchCollectives(rks) {
			first, last := 0, 0
			for i, e := range group {
				if e.ts < group[first].ts {
					first = i
				}
				if e.ts > group[last].ts {
					last = i
				}
			}
			note(rks[last].Rank, group[last].ts-group[first].ts)
		}
	}
	if a.Collectives == 0 {
		return nil
	}
	for i := range a.Ranks {
		if r := &a.Ranks[i]; r.Last > 0 {
			r.MeanLag /= float64(r.Last)
		}
	}
	sort.Slice(a.Ranks, func(i, j int) bool { return a.Ranks[i].Rank < a.Ranks[j].Rank })
	return a
}

// recordedArrivals is each goccl collective (by sequence number) whose
// last rank some rank's trace recorded, once.
func recordedArrivals(rks []*Rank) []event {
	seen := map[int64]bool{}
	var out []event
	for _, rk := range rks {
		if !rk.goccl {
			return nil
		}
		for _, e := range rk.gpu {
			if e.kind == Communication && e.seq > 0 && e.lastRank >= 0 && !seen[e.seq] {
				seen[e.seq] = true
				out = append(out, e)
			}
		}
	}
	return out
}

// matchCollectives groups the ranks' collectives, one event per rank in
// rks' order: by sequence number in goccl traces (those every rank has),
// by order in Kineto's (only when every rank has as many communication
// kernels).
func matchCollectives(rks []*Rank) [][]event {
	per := make([][]event, len(rks))
	for i, rk := range rks {
		for _, e := range rk.gpu {
			if e.kind == Communication && (rk.goccl && e.seq > 0 || !rk.goccl && !e.p2p) {
				per[i] = append(per[i], e)
			}
		}
		sort.Slice(per[i], func(a, b int) bool { return per[i][a].ts < per[i][b].ts })
	}
	var groups [][]event
	if rks[0].goccl {
		bySeq := make([]map[int64]event, len(rks))
		for i := range rks {
			bySeq[i] = map[int64]event{}
			for _, e := range per[i] {
				bySeq[i][e.seq] = e
			}
		}
	seqs:
		for _, e := range per[0] {
			g := []event{e}
			for i := 1; i < len(rks); i++ {
				o, ok := bySeq[i][e.seq]
				if !ok {
					continue seqs
				}
				g = append(g, o)
			}
			groups = append(groups, g)
		}
		return groups
	}
	for i := 1; i < len(rks); i++ {
		if len(per[i]) != len(per[0]) || rks[i].goccl {
			return nil
		}
	}
	bad := 0
	for k := range per[0] {
		g := make([]event, len(rks))
		lo, hi, longest := math.Inf(1), math.Inf(-1), 0.0
		for i := range rks {
			g[i] = per[i][k]
			lo, hi, longest = min(lo, g[i].end), max(hi, g[i].end), max(longest, g[i].end-g[i].ts)
		}
		// The ranks of a collective leave it together: kernels matched by
		// order that end far apart are not one collective (or the clocks
		// differ).
		if hi-lo > max(endSpreadMin, longest/10) {
			bad++
			continue
		}
		groups = append(groups, g)
	}
	if 2*bad > len(per[0]) {
		return nil
	}
	return groups
}

// endSpreadMin is the spread of a matched collective's kernel ends (µs)
// always allowed.
const endSpreadMin = 200

// pointToPoint says a communication kernel is NCCL's send/receive, which
// pairs ranks rather than gathering them all.
func pointToPoint(name string) bool {
	return strings.Contains(name, "SendRecv") || strings.Contains(name, "_Send") || strings.Contains(name, "_Recv")
}
