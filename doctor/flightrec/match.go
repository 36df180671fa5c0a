package flightrec

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/goccl/goccl/doctor"
	"github.com/goccl/goccl/internal/config"
)

// analyzeGroup compares group g's collectives across the ranks that dumped
// it, from the first sequence number every one of them still holds, and
// stops at the first that does not match.
func analyzeGroup(g Group, dumps []*Dump) (GroupResult, []doctor.Finding) {
	res := GroupResult{Name: g.Name, Desc: g.Desc, Ranks: g.Ranks, Dumped: []int{}}
	var fs []doctor.Finding
	colls := map[int]map[int64]*Entry{}
	for _, d := range dumps {
		if !slices.Contains(g.Ranks, d.Rank) {
			continue
		}
		if _, ok := d.Groups[g.Name]; !ok && !hasGroup(d, g.Name) {
			continue
		}
		res.Dumped = append(res.Dumped, d.Rank)
		colls[d.Rank] = collectives(d, g.Name)
	}
	if miss := without(g.Ranks, res.Dumped); len(miss) > 0 {
		fs = append(fs, doctor.Finding{Severity: doctor.SevWarn, Code: "fr-no-dump",
			Message: fmt.Sprintf("process group %s: no dump from rank(s) %s of ranks %s; they are compared nowhere", groupName(g.Name, g.Desc), ranksText(miss), ranksText(g.Ranks)),
			Fix:     "Pass every rank's dump (a folder of them is read whole); with goccl set " + config.FlightRecorderDump.Name + " on every rank, with PyTorch TORCH_FR_DUMP_TEMP_FILE."})
	}
	res.FirstSeq, res.LastSeq = window(colls)
	for seq := res.FirstSeq; seq <= res.LastSeq && res.FirstSeq > 0; seq++ {
		ents := map[int]*Entry{}
		for r, m := range colls {
			if e, ok := m[seq]; ok {
				ents[r] = e
			}
		}
		if len(ents) == 0 {
			continue
		}
		if m := compare(g, seq, ents, res.Dumped, colls); m != nil {
			res.Mismatch = m
			res.LastSeq = seq
			switch m.Kind {
			case "COLLECTIVE_TYPE_MISMATCH", "SIZE_OR_SYNTAX_MISMATCH", "COLLECTIVE_DTYPE_MISMATCH":
				findShift(m, colls, len(g.Ranks))
			}
			if m.Kind != "MISSING_RANKS" && m.Kind != "NOT_COMPLETED" {
				res.Hang = hangAfter(seq, colls, res.Dumped)
			}
			fs = append(fs, mismatchFinding(g, m, res.Hang))
			break
		}
		res.Matched++
	}
	return res, fs
}

// hasGroup reports whether d holds an operation of group name.
func hasGroup(d *Dump, name string) bool {
	for i := range d.Entries {
		if d.Entries[i].pg() == name {
			return true
		}
	}
	return false
}

// without is a less the ranks in b.
func without(a, b []int) []int {
	var out []int
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// window is the sequence numbers to compare: from the first that every
// rank holding collectives still holds (older ones fell out of some ring)
// to the last any rank holds; 0, 0 when none.
func window(colls map[int]map[int64]*Entry) (lo, hi int64) {
	for _, m := range colls {
		if len(m) == 0 {
			continue
		}
		first := int64(-1)
		for s := range m {
			if first < 0 || s < first {
				first = s
			}
			hi = max(hi, s)
		}
		lo = max(lo, first)
	}
	if lo == 0 && hi > 0 {
		lo = 1
	}
	return lo, hi
}

// compare matches the entries of collective seq (by rank) and returns the
// first mismatch in fr_trace's order: missing ranks, type, sizes, dtypes,
// state; then a collective that every rank entered and none completed.
func compare(g Group, seq int64, ents map[int]*Entry, dumped []int, colls map[int]map[int64]*Entry) *Mismatch {
	present := sortedKeys(ents)
	op := majorityOp(ents)
	if m := missingRanks(seq, ents, dumped, colls); m != nil {
		return m
	}
	checks := []struct {
		kind, what string
		sig        func(*Entry) string
	}{
		{"COLLECTIVE_TYPE_MISMATCH", "the collective", func(e *Entry) string { return e.op() }},
		{"SIZE_OR_SYNTAX_MISMATCH", "input/output sizes", func(e *Entry) string { return sizeSig(e, len(g.Ranks)) }},
		{"COLLECTIVE_DTYPE_MISMATCH", "dtypes", dtypeSig},
		{"COLLECTIVE_STATE_MISMATCH", "state", func(e *Entry) string { return e.State }},
	}
	for _, c := range checks {
		if m := majority(ents, c.sig); m != nil {
			return &Mismatch{Seq: seq, Op: op, Kind: c.kind, Culprits: m.culprits,
				Detail: fmt.Sprintf("%s: %s", c.what, m.text)}
		}
	}
	if st := ents[present[0]].State; st != "completed" {
		return &Mismatch{Seq: seq, Op: op, Kind: "NOT_COMPLETED", Culprits: []int{},
			Detail: fmt.Sprintf("every rank (%s) entered it, agrees on it and is in state %s%s", ranksText(present), st, errorsText(ents))}
	}
	return nil
}

// missingRanks is collective seq's MISSING_RANKS mismatch if some dumped
// ranks do not hold it; nil if all do.
func missingRanks(seq int64, ents map[int]*Entry, dumped []int, colls map[int]map[int64]*Entry) *Mismatch {
	present := sortedKeys(ents)
	miss := without(dumped, present)
	if len(miss) == 0 {
		return nil
	}
	first := ents[present[0]]
	return &Mismatch{Seq: seq, Op: majorityOp(ents), Kind: "MISSING_RANKS", Culprits: miss,
		Detail: fmt.Sprintf("ranks %s entered it (%s; input sizes %v, output sizes %v on rank %d); %s",
			ranksText(present), statesText(ents), first.InputSizes, first.OutputSizes, present[0], lastOfMissing(miss, colls))}
}

// lastOfMissing says where each missing rank stopped.
func lastOfMissing(miss []int, colls map[int]map[int64]*Entry) string {
	var parts []string
	for _, r := range miss {
		var last *Entry
		for s, e := range colls[r] {
			if e.State != "scheduled" && (last == nil || s > last.CollectiveSeqID) {
				last = e
			}
		}
		if last == nil {
			parts = append(parts, fmt.Sprintf("rank %d recorded no collective of this group", r))
			continue
		}
		parts = append(parts, fmt.Sprintf("rank %d never reached it: its last collective is #%d %s (%s)", r, last.CollectiveSeqID, last.op(), last.State))
	}
	return strings.Join(parts, "; ")
}

// agreement is a minority that differs from the most ranks.
type agreement struct {
	culprits []int
	text     string
}

// majority groups the entries by sig: nil when they all agree, else the
// ranks that differ from the largest group (ties: the group of the lowest
// rank) and a text naming every group.
func majority(ents map[int]*Entry, sig func(*Entry) string) *agreement {
	by := map[string][]int{}
	for _, r := range sortedKeys(ents) {
		s := sig(ents[r])
		by[s] = append(by[s], r)
	}
	if len(by) < 2 {
		return nil
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := by[keys[i]], by[keys[j]]
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a[0] < b[0]
	})
	m := &agreement{}
	var parts []string
	for i, k := range keys {
		if i > 0 {
			m.culprits = append(m.culprits, by[k]...)
		}
		parts = append(parts, fmt.Sprintf("rank(s) %s have %s", ranksText(by[k]), k))
	}
	sort.Ints(m.culprits)
	m.text = strings.Join(parts, "; ")
	return m
}

// majorityOp is the collective most ranks ran.
func majorityOp(ents map[int]*Entry) string {
	n := map[string]int{}
	best := ""
	for _, r := range sortedKeys(ents) {
		op := ents[r].op()
		n[op]++
		if best == "" || n[op] > n[best] {
			best = op
		}
	}
	return best
}

// sizeSig is what must agree of a collective's sizes, by fr_trace's rules:
// the input sizes but for all_to_all and scatter, the output sizes but for
// all_to_all and gather, and each entry's own consistency (all_reduce: in
// = out; all_gather: out = size × in; reduce_scatter: in = size × out).
func sizeSig(e *Entry, size int) string {
	op := e.op()
	in, out := "-", "-"
	if op != "all_to_all" && op != "scatter" {
		in = fmt.Sprint(e.InputSizes)
	}
	if op != "all_to_all" && op != "gather" {
		out = fmt.Sprint(e.OutputSizes)
	}
	s := "input sizes " + in + ", output sizes " + out
	ni, no := numel(e.InputSizes), numel(e.OutputSizes)
	switch {
	case (op == "all_reduce" || op == "allreduce_coalesced") && fmt.Sprint(e.InputSizes) != fmt.Sprint(e.OutputSizes):
		s += " (input and output differ)"
	case strings.Contains(op, "all_gather") && ni*int64(size) != no:
		s += fmt.Sprintf(" (output %d elements, not %d × input %d)", no, size, ni)
	case strings.Contains(op, "reduce_scatter") && no*int64(size) != ni:
		s += fmt.Sprintf(" (input %d elements, not %d × output %d)", ni, size, no)
	}
	return s
}

// numel is the elements of the first tensor.
func numel(sizes [][]int64) int64 {
	if len(sizes) == 0 {
		return 0
	}
	n := int64(1)
	for _, d := range sizes[0] {
		n *= d
	}
	return n
}

// dtypeSig is the set of element types of the entry's tensors.
func dtypeSig(e *Entry) string {
	set := map[string]bool{}
	for _, d := range append(append([]string{}, e.InputDtypes...), e.OutputDtypes...) {
		set[d] = true
	}
	out := make([]string, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	sort.Strings(out)
	return "dtypes " + strings.Join(out, ",")
}

// statesText is "started on 0,2".
func statesText(ents map[int]*Entry) string {
	by := map[string][]int{}
	for _, r := range sortedKeys(ents) {
		by[ents[r].State] = append(by[ents[r].State], r)
	}
	var parts []string
	for _, st := range []string{"scheduled", "started", "completed"} {
		if rs := by[st]; len(rs) > 0 {
			parts = append(parts, st+" on "+ranksText(rs))
		}
	}
	return strings.Join(parts, ", ")
}

// errorsText is the first error a rank recorded for the operation.
func errorsText(ents map[int]*Entry) string {
	for _, r := range sortedKeys(ents) {
		if e := ents[r].Error; e != "" {
			return fmt.Sprintf("; rank %d's error: %s", r, e)
		}
	}
	return ""
}

func sortedKeys(m map[int]*Entry) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	return ks
}

// mismatchFinding is the finding of a group's first mismatch.
func mismatchFinding(g Group, m *Mismatch, hang *Mismatch) doctor.Finding {
	where := fmt.Sprintf("process group %s, collective #%d %s", groupName(g.Name, g.Desc), m.Seq, m.Op)
	culprit := ""
	if len(m.Culprits) > 0 {
		culprit = fmt.Sprintf("culprit rank(s) %s: ", ranksText(m.Culprits))
	}
	f := doctor.Finding{Severity: doctor.SevError, Message: fmt.Sprintf("%s: %s%s [%s]", where, culprit, m.Detail, m.Kind)}
	if hang != nil {
		f.Message += fmt.Sprintf("; then collective #%d %s: rank(s) %s never entered it, %s [MISSING_RANKS]", hang.Seq, hang.Op, ranksText(hang.Culprits), hang.Detail)
	}
	switch m.Kind {
	case "MISSING_RANKS":
		f.Code = "fr-missing-rank"
		f.Fix = fmt.Sprintf("Find why rank(s) %s did not call %s #%d: a branch or an early exit taken on some ranks only, an exception, or a rank stuck in its own code (take its stacks: kill -QUIT for Go, py-spy dump for Python). Every rank must issue the same collectives in the same order.", ranksText(m.Culprits), m.Op, m.Seq)
	case "COLLECTIVE_TYPE_MISMATCH":
		f.Code = "fr-type-mismatch"
		f.Fix = "The ranks issued their collectives in different orders (or one skipped one): make every rank issue the same collectives in the same order; " + config.DebugCheck.Name + "=1 names the first divergence as it happens."
	case "SIZE_OR_SYNTAX_MISMATCH":
		f.Code = "fr-size-mismatch"
		f.Fix = "Make every rank pass the same count (AllGather: its own share; ReduceScatter: the whole); a rank with a different batch or shard size is the usual cause."
	case "COLLECTIVE_DTYPE_MISMATCH":
		f.Code = "fr-dtype-mismatch"
		f.Fix = "Make every rank pass tensors of the same element type (a mixed-precision path taken on some ranks only is the usual cause)."
	case "COLLECTIVE_STATE_MISMATCH":
		f.Code, f.Severity = "fr-state-mismatch", doctor.SevWarn
		f.Fix = "The ranks named had not completed the collective when they dumped while the others had: they wait on a slow or stuck peer or link; if the job hung here, look at their errors and links."
	default:
		f.Code = "fr-not-completed"
		f.Fix = "No rank is missing and the ranks agree on the collective: look at the errors recorded (a lost peer, a link that stopped, a timeout too short for the size) and at the hosts' network."
	}
	if m.Shift {
		f.Fix = fmt.Sprintf("Rank(s) %s issued one collective more or fewer than the others (a branch taken on some ranks only): every rank must issue the same collectives in the same order; %s=1 names the first divergence as it happens.", ranksText(m.Culprits), config.DebugCheck.Name)
	}
	return f
}
