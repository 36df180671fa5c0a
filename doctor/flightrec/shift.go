package flightrec

import (
	"fmt"
	"slices"
	"sort"
)

// collSig is what two ranks' entries of one collective must agree on:
// the collective, its sizes and its dtypes (not its state).
func collSig(e *Entry, size int) string {
	return e.op() + " " + sizeSig(e, size) + " " + dtypeSig(e)
}

// findShift explains mismatch m (of type, sizes or dtypes) as ranks that
// issued one collective more than the others, or one fewer: the ranks of
// one side's collectives from m.Seq+1 on line up with the other side's
// from m.Seq on, and only one side's do. It then blames the smaller side
// (the side that issued the extra one, or else the side that skipped it)
// rather than the ranks that differ from the most ranks, says so in
// m.Detail and sets m.Shift. fr_trace matches by sequence number only, so
// it blames the rank compared with the first at m.Seq and, later, the
// ranks missing from the collective the others then wait in.
func findShift(m *Mismatch, colls map[int]map[int64]*Entry, size int) {
	sides := map[string][]int{}
	for r, c := range colls {
		if e, ok := c[m.Seq]; ok {
			sides[collSig(e, size)] = append(sides[collSig(e, size)], r)
		}
	}
	var ahead, behind []int
	for _, side := range sides {
		others := othersOf(colls, m.Seq, side)
		if lineUp(colls, side, others, m.Seq, size) {
			if ahead != nil {
				return // both ways line up: no telling
			}
			ahead, behind = side, others
		}
	}
	if ahead == nil {
		return
	}
	sort.Ints(ahead)
	e := colls[ahead[0]][m.Seq]
	what := fmt.Sprintf("#%d %s (input sizes %v)", m.Seq, e.op(), e.InputSizes)
	lines := fmt.Sprintf("rank(s) %s's collectives from #%d on line up with rank(s) %s's from #%d on", ranksText(ahead), m.Seq+1, ranksText(behind), m.Seq)
	if len(ahead) <= len(behind) {
		m.Culprits = ahead
		m.Detail += fmt.Sprintf("; %s: rank(s) %s issued one collective more, %s, which rank(s) %s never issued", lines, ranksText(ahead), what, ranksText(behind))
	} else {
		m.Culprits = behind
		m.Detail += fmt.Sprintf("; %s: rank(s) %s skipped %s, which rank(s) %s issued", lines, ranksText(behind), what, ranksText(ahead))
	}
	m.Shift = true
}

// othersOf are the ranks holding collective seq that are not in side,
// sorted.
func othersOf(colls map[int]map[int64]*Entry, seq int64, side []int) []int {
	var out []int
	for r, c := range colls {
		if _, ok := c[seq]; ok && !slices.Contains(side, r) {
			out = append(out, r)
		}
	}
	sort.Ints(out)
	return out
}

// lineUp reports whether every rank of ahead holds, from seq+1 to its
// last, the collectives every rank of behind holds from seq to its last
// (at least one): one collective more, to the end of the dumps. Ranks
// that ran different collectives at seq and then went on in step hold as
// many as the others and do not line up.
func lineUp(colls map[int]map[int64]*Entry, ahead, behind []int, seq int64, size int) bool {
	if len(behind) == 0 {
		return false
	}
	for _, a := range ahead {
		for _, b := range behind {
			last := lastSeq(colls[b])
			if last < seq || lastSeq(colls[a]) != last+1 {
				return false
			}
			for t := seq; t <= last; t++ {
				ea, okA := colls[a][t+1]
				eb, okB := colls[b][t]
				if !okA || !okB || collSig(ea, size) != collSig(eb, size) {
					return false
				}
			}
		}
	}
	return true
}

// lastSeq is the highest sequence number in c; 0 if none.
func lastSeq(c map[int64]*Entry) int64 {
	var hi int64
	for s := range c {
		hi = max(hi, s)
	}
	return hi
}

// hangAfter is the first collective after seq that some dumped ranks
// hold and others never entered: where the job waits after its first
// mismatch (fr_trace goes on past a mismatch and reports it as "not all
// ranks joining"); nil when there is none.
func hangAfter(seq int64, colls map[int]map[int64]*Entry, dumped []int) *Mismatch {
	_, hi := window(colls)
	for s := seq + 1; s <= hi; s++ {
		ents := map[int]*Entry{}
		for r, c := range colls {
			if e, ok := c[s]; ok {
				ents[r] = e
			}
		}
		if len(ents) == 0 {
			continue
		}
		if m := missingRanks(s, ents, dumped, colls); m != nil {
			return m
		}
	}
	return nil
}
