package ras

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// operationsText is what RAS lacks, per communicator: the operation each
// rank is in (or finished last), the ranks that hold the others up and
// why, the arrival skew, and (verbose) every rank's links.
func (j *Job) operationsText(b *strings.Builder, comms []*commView) {
	if len(comms) == 0 {
		return
	}
	b.WriteString("Operations\n==========\n\n")
	for _, v := range comms {
		fmt.Fprintf(b, "%s %s, %d %s\n", label(comms, v), v.id, v.size, plural(v.size, "rank", "ranks"))
		j.opLines(b, v)
		skewLines(b, v)
		if j.Verbose {
			j.rankDetails(b, v)
		}
		b.WriteString("\n")
	}
}

// front is the latest collective any rank of v has begun.
func front(v *commView) uint64 {
	var s uint64
	for _, r := range v.ranks {
		s = max(s, r.rep.Seq)
	}
	return s
}

// opLines groups v's ranks by the operation they are in, then names the
// ranks that are behind: not answering (not progressing), idle before the
// front operation (never entered it), or still in an earlier one.
func (j *Job) opLines(b *strings.Builder, v *commView) {
	type key struct {
		seq  uint64
		kind string
	}
	in := map[key][]*CommReport{}
	var keys []key
	var idle []*rankView
	for i := range v.ranks {
		r := v.ranks[i].rep
		if r.Op == nil {
			idle = append(idle, &v.ranks[i])
			continue
		}
		k := key{r.Op.Seq, r.Op.Kind}
		if in[k] == nil {
			keys = append(keys, k)
		}
		in[k] = append(in[k], r)
	}
	slices.SortFunc(keys, func(a, b key) int { return len(in[b]) - len(in[a]) })
	for _, k := range keys {
		rs := in[k]
		lo, hi := rs[0].Op.WaitSec, rs[0].Op.WaitSec
		ranks := make([]int, len(rs))
		for i, r := range rs {
			lo, hi, ranks[i] = min(lo, r.Op.WaitSec), max(hi, r.Op.WaitSec), r.Rank
		}
		size := ""
		if op := rs[0].Op; op.Count > 0 {
			size = fmt.Sprintf(" (count %d, %s)", op.Count, bytesText(op.Bytes))
		}
		fmt.Fprintf(b, "  %d %s in op #%d %s%s for %s: %s %s\n", len(rs), plural(len(rs), "rank is", "ranks are"),
			k.seq, k.kind, size, secRange(lo, hi), plural(len(rs), "rank", "ranks"), joinRanks(ranks))
	}
	st := stalls(v)
	for _, r := range v.ranks {
		if s, ok := st[r.rep.Rank]; ok {
			fmt.Fprintf(b, "  Rank %d %s -- %s\n", r.rep.Rank, s.text, rankProcText(r.proc, r.rep.Rank))
		}
	}
	fr := front(v)
	allIdle := len(idle) == len(v.ranks)
	for _, r := range idle {
		switch {
		case allIdle, st[r.rep.Rank].stuck:
		case r.rep.Seq < fr:
			fmt.Fprintf(b, "  Rank %d has not entered op #%d: idle for %s after op #%d -- %s\n", r.rep.Rank, fr,
				secs(r.rep.IdleSec), r.rep.Seq, rankProcText(r.proc, r.rep.Rank))
		default:
			fmt.Fprintf(b, "  Rank %d is idle for %s after op #%d -- %s\n", r.rep.Rank, secs(r.rep.IdleSec), r.rep.Seq, rankProcText(r.proc, r.rep.Rank))
		}
	}
	if allIdle && len(idle) > 0 {
		seqs := map[uint64]bool{}
		for _, r := range idle {
			seqs[r.rep.Seq] = true
		}
		if len(seqs) == 1 {
			fmt.Fprintf(b, "  All %d ranks that answered are idle after op #%d\n", len(idle), idle[0].rep.Seq)
		}
	}
	for _, m := range v.missing {
		p := j.peerOf(v, m)
		if p == nil {
			fmt.Fprintf(b, "  Rank %d did not report this communicator\n", m)
			continue
		}
		what := "not progressing"
		if p.State == Answered {
			what = "no longer a member (its process answered without this communicator)"
		} else if p.State == Dead || p.State == Unknown {
			what = "dead"
		}
		fmt.Fprintf(b, "  Rank %d is %s: %s (%s) -- %s\n", m, what, p.State, p.Why, procText(p))
	}
}

// skewLines prints the arrival skew the ranks reported (the first rank
// that has any).
func skewLines(b *strings.Builder, v *commView) {
	for _, r := range v.ranks {
		if len(r.rep.Skew) == 0 {
			continue
		}
		fmt.Fprintf(b, "  Arrival skew (as rank %d saw it):\n", r.rep.Rank)
		for _, s := range r.rep.Skew {
			fmt.Fprintf(b, "    rank %d arrived last in %.0f %% of the last %d operations, %s late at the median\n",
				s.Rank, 100*s.LastFraction, s.Ops, time.Duration(s.MedianLagSec*float64(time.Second)).Round(time.Microsecond))
		}
		return
	}
}

// rankDetails is VERBOSE STATUS's per-rank part: state, operation, links.
func (j *Job) rankDetails(b *strings.Builder, v *commView) {
	for _, rv := range v.ranks {
		r := rv.rep
		state := "idle for " + secs(r.IdleSec) + " after op #" + fmt.Sprint(r.Seq)
		if r.Op != nil {
			state = fmt.Sprintf("in op #%d %s for %s", r.Op.Seq, r.Op.Kind, secs(r.Op.WaitSec))
			if w := r.Op.Wait; w != nil && w.IdleSec >= 0 {
				state += fmt.Sprintf(", waiting on rank %d (link idle %s)", w.Peer, secs(w.IdleSec))
			} else if w != nil {
				state += fmt.Sprintf(", waiting on rank %d", w.Peer)
			}
		}
		fmt.Fprintf(b, "  Rank %d -- %s, %s: %s\n", r.Rank, rankProcText(rv.proc, r.Rank), r.Status, state)
		for _, l := range r.Links {
			st := "open"
			if l.Closed {
				st = "closed"
			}
			fmt.Fprintf(b, "    peer %d %s: sent %s, received %s, %s\n", l.Peer, l.Transport, bytesText(l.Sent), bytesText(l.Received), st)
		}
		if len(r.Lost) > 0 {
			fmt.Fprintf(b, "    knows %s %s dead\n", plural(len(r.Lost), "rank", "ranks"), joinRanks(r.Lost))
		}
	}
}

func secs(s float64) string { return fmt.Sprintf("%.3fs", s) }

func secRange(lo, hi float64) string {
	if secs(lo) == secs(hi) {
		return secs(lo)
	}
	return fmt.Sprintf("%.3f-%.3fs", lo, hi)
}
