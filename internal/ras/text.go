package ras

import (
	"fmt"
	"slices"
	"strings"
)

// Text renders the job as RAS's text reply (after the version line, which
// the server sends first): the job summary, the communicators table, the
// errors and warnings, then what RAS lacks: the operation every rank is in
// or the one it finished last, which ranks are not progressing, link state
// (verbose) and arrival skew.
func (j *Job) Text() string {
	var b strings.Builder
	j.summaryText(&b)
	comms := j.comms()
	fmt.Fprintf(&b, "\nCommunicators... (%.3fs)\n=============\n\n", j.Elapsed.Seconds())
	j.commsTable(&b, comms)
	b.WriteString("\n")
	j.errorsText(&b, comms)
	j.warningsText(&b, comms)
	j.operationsText(&b, comms)
	return b.String()
}

// rangeText is "4" or "1-4".
func rangeText(lo, hi int) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}

// summaryText is RAS's job summary, with ranks where RAS counts GPUs.
func (j *Job) summaryText(b *strings.Builder) {
	procs := j.processes()
	perNode := map[string]int{}
	lo, hi := len(j.Peers), 0
	for _, ranks := range procs {
		perNode[j.Peers[ranks[0]].HostID]++
		lo, hi = min(lo, len(ranks)), max(hi, len(ranks))
	}
	nlo, nhi := len(procs), 0
	for _, n := range perNode {
		nlo, nhi = min(nlo, n), max(nhi, n)
	}
	b.WriteString("Job summary\n===========\n\n")
	fmt.Fprintf(b, "  Nodes  Processes        Ranks  Processes    Ranks\n"+
		"(total)   per node  per process    (total)  (total)\n"+
		"%7d  %9s  %11s  %9d  %7d\n", len(perNode), rangeText(nlo, nhi), rangeText(lo, hi), len(procs), len(j.Peers))
}

// commsTable is RAS's table of communicator groups: communicators of one
// size, node count, status and errors are one line.
func (j *Job) commsTable(b *strings.Builder, comms []*commView) {
	if len(comms) == 0 {
		b.WriteString("No communicator data collected!\n")
		return
	}
	b.WriteString("Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n" +
		"    #  in group  per comm  per node  per comm  in group\n")
	for g, grp := range groups(comms) {
		lo, hi, ranks := grp[0].perNode[0], grp[0].perNode[1], 0
		for _, v := range grp {
			lo, hi, ranks = min(lo, v.perNode[0]), max(hi, v.perNode[1]), ranks+len(v.ranks)
		}
		fmt.Fprintf(b, "%5d  %8d  %8d  %8s  %8d  %8d  %8s  %6s\n", g, len(grp), grp[0].nodes, rangeText(lo, hi),
			grp[0].size, ranks, grp[0].statusWord(), errorWords[grp[0].errors])
	}
}

// groups cuts the sorted communicators into RAS's groups.
func groups(comms []*commView) [][]*commView {
	var out [][]*commView
	for i, v := range comms {
		if i > 0 {
			p := comms[i-1]
			if p.size == v.size && p.nodes == v.nodes && p.statusWord() == v.statusWord() && p.errors == v.errors {
				out[len(out)-1] = append(out[len(out)-1], v)
				continue
			}
		}
		out = append(out, []*commView{v})
	}
	return out
}

// label is "#G-C (hash)" for the C-th communicator of group G.
func label(comms []*commView, v *commView) string {
	for g, grp := range groups(comms) {
		if i := slices.Index(grp, v); i >= 0 {
			return fmt.Sprintf("#%d-%d (%s)", g, i, hash(v.id))
		}
	}
	return "#?"
}

// errorsText is RAS's Errors section: processes that did not answer
// (INCOMPLETE) or are gone (DEAD), communicators with missing ranks or
// failed ranks.
func (j *Job) errorsText(b *strings.Builder, comms []*commView) {
	var s strings.Builder
	if silent := j.silent(Unresponsive); len(silent) > 0 {
		fmt.Fprintf(&s, "INCOMPLETE\n  Missing communicator data from %d job %s\n", len(silent), plural(len(silent), "process", "processes"))
		for _, p := range silent {
			fmt.Fprintf(&s, "  %s: %s\n", procText(p), p.Why)
		}
		s.WriteString("\n")
	}
	if dead := append(j.silent(Dead), j.silent(Unknown)...); len(dead) > 0 {
		fmt.Fprintf(&s, "DEAD\n  %d job %s considered dead\n", len(dead), plural(len(dead), "process is", "processes are"))
		for _, p := range dead {
			fmt.Fprintf(&s, "  %s: %s\n", procText(p), p.Why)
		}
		s.WriteString("\n")
	}
	for _, v := range comms {
		if v.errors&errIncomplete != 0 {
			fmt.Fprintf(&s, "%s INCOMPLETE\n  Missing communicator data from %d %s\n  The missing %s: %s\n\n", label(comms, v),
				len(v.missing), plural(len(v.missing), "rank", "ranks"), plural(len(v.missing), "rank", "ranks"), joinRanks(v.missing))
		}
		if v.errors&errError != 0 {
			fmt.Fprintf(&s, "%s ERROR\n", label(comms, v))
			for _, r := range v.ranks {
				if r.rep.Error != "" {
					fmt.Fprintf(&s, "  Rank %d reported: %s\n", r.rep.Rank, r.rep.Error)
				}
			}
			s.WriteString("\n")
		}
	}
	if s.Len() > 0 {
		b.WriteString("Errors\n======\n\n")
		b.WriteString(s.String())
	}
}

// warningsText is RAS's Warnings section: probe timeouts, and ranks whose
// collective counts or states differ (MISMATCH), grouped by value.
func (j *Job) warningsText(b *strings.Builder, comms []*commView) {
	var s strings.Builder
	if n := j.timeouts(); n > 0 {
		fmt.Fprintf(&s, "TIMEOUT\n  Encountered %d communication %s while gathering communicator data\n\n", n, plural(n, "timeout", "timeouts"))
	}
	for _, v := range comms {
		if v.errors&errMismatch == 0 {
			continue
		}
		fmt.Fprintf(&s, "%s MISMATCH\n", label(comms, v))
		j.mismatchText(&s, v, "status", func(r *CommReport) string { return r.Status }, "have status %s")
		for _, kind := range kinds(v) {
			j.mismatchText(&s, v, kind+" operation counts", func(r *CommReport) string { return fmt.Sprint(r.Counts[kind]) },
				"have launched up to operation %s")
		}
		s.WriteString("\n")
	}
	if s.Len() > 0 {
		b.WriteString("Warnings\n========\n\n")
		b.WriteString(s.String())
	}
}

// kinds lists the operation kinds any rank of v counts.
func kinds(v *commView) []string {
	var ks []string
	for _, r := range v.ranks {
		for k := range r.rep.Counts {
			if !slices.Contains(ks, k) {
				ks = append(ks, k)
			}
		}
	}
	slices.Sort(ks)
	return ks
}

// mismatchText writes, when v's ranks disagree on what value gives, the
// groups of ranks by value, most numerous first, naming the ranks of the
// smaller groups (RAS's outliers: a group of one always, up to a quarter
// of the ranks, any minority when verbose).
func (j *Job) mismatchText(s *strings.Builder, v *commView, what string, value func(*CommReport) string, verb string) {
	byValue := map[string][]*rankView{}
	var order []string
	for i := range v.ranks {
		val := value(v.ranks[i].rep)
		if byValue[val] == nil {
			order = append(order, val)
		}
		byValue[val] = append(byValue[val], &v.ranks[i])
	}
	if len(order) < 2 {
		return
	}
	slices.SortStableFunc(order, func(a, b string) int { return len(byValue[b]) - len(byValue[a]) })
	fmt.Fprintf(s, "  Communicator ranks have different %s\n", what)
	for _, val := range order {
		rs := byValue[val]
		if len(rs) > 1 {
			fmt.Fprintf(s, "  %d ranks "+verb+"\n", len(rs), val)
		}
		if outlier(len(rs), len(v.ranks), j.Verbose) {
			for _, r := range rs {
				if len(rs) == 1 {
					fmt.Fprintf(s, "  Rank %d "+strings.Replace(verb, "have", "has", 1)+" -- %s\n", r.rep.Rank, val, rankProcText(r.proc, r.rep.Rank))
				} else {
					fmt.Fprintf(s, "  Rank %d -- %s\n", r.rep.Rank, rankProcText(r.proc, r.rep.Rank))
				}
			}
		}
	}
}

// outlier is RAS's rule for listing a group's ranks one by one.
func outlier(n, total int, verbose bool) bool {
	if n == 1 {
		return true
	}
	if verbose {
		return 2*n < total
	}
	return n <= 10 && 4*n <= total
}
