package ras

import (
	"fmt"
	"strings"
	"time"
)

// StallAfter is how long a rank's operation must have waited on a peer
// whose link moved no bytes before the status says so: a healthy wait
// (a peer computing a moment longer) is shorter.
const StallAfter = time.Second

// stall is what the status says of a rank that answered but whose
// operation does not move: it waits on a peer (stuck false: the peer, or
// one further on, holds it up), or it is an end of the link that stops the
// operation (stuck: "entered op #N but not progressing").
type stall struct {
	text  string
	stuck bool
	on    int // the peer it waits on, -1 when it does not wait (the sending end of a stalled link)
}

// stalls judges v's answering ranks whose operation has waited on a peer
// for StallAfter with their link idle: two ranks that wait on each other,
// or a rank that waits on a peer whose messages to it never arrived (the
// peer counted more bytes sent than it received, or went on to a later
// operation), are both not progressing; any other such rank is waiting.
func stalls(v *commView) map[int]stall {
	rep := map[int]*CommReport{}
	for _, r := range v.ranks {
		rep[r.rep.Rank] = r.rep
	}
	out := map[int]stall{}
	set := func(r int, s stall) {
		if old, ok := out[r]; !ok || s.stuck && !old.stuck {
			out[r] = s
		}
	}
	for _, r := range v.ranks {
		p, w := r.rep.Rank, waitOf(r.rep)
		if w == nil {
			continue
		}
		op, q := r.rep.Op, w.Peer
		rq := rep[q]
		moved := fmt.Sprintf("their link moved no bytes for %s", secs(idleOf(r.rep)))
		in := fmt.Sprintf("op #%d %s", op.Seq, op.Kind)
		var mine, theirs string
		switch n := inFlight(rq, r.rep); {
		case rq == nil:
			set(p, stall{fmt.Sprintf("is waiting on rank %d in %s, which does not answer: %s", q, in, its(moved)), false, q})
			continue
		case waitOf(rq) != nil && waitOf(rq).Peer == p:
			set(p, stall{fmt.Sprintf("entered %s but is not progressing: it waits on rank %d and rank %d on it, and %s", in, q, q, moved), true, q})
			continue
		case n > 0:
			mine = fmt.Sprintf("the last %s rank %d sent it never arrived", bytesText(n), q)
			theirs = fmt.Sprintf("the last %s it sent rank %d never arrived (rank %d waits on them)", bytesText(n), p, p)
		case rq.Seq > op.Seq:
			mine = fmt.Sprintf("what rank %d sent it in op #%d never arrived (rank %d went on to op #%d)", q, op.Seq, q, rq.Seq)
			theirs = fmt.Sprintf("what it sent rank %d in op #%d never arrived (rank %d waits on it)", p, op.Seq, p)
		default:
			set(p, stall{fmt.Sprintf("is waiting on rank %d in %s: %s", q, in, its(moved)), false, q})
			continue
		}
		set(p, stall{fmt.Sprintf("entered %s but is not progressing: it waits on rank %d, %s, and %s", in, q, mine, moved), true, q})
		qin := fmt.Sprintf("idle after op #%d", rq.Seq)
		if rq.Op != nil {
			qin = fmt.Sprintf("entered op #%d %s but is not progressing", rq.Op.Seq, rq.Op.Kind)
		}
		set(q, stall{fmt.Sprintf("%s: %s, and %s", qin, theirs, moved), true, -1})
	}
	return out
}

// its is s of a link seen from one end: "its link", not "their link".
func its(s string) string { return strings.Replace(s, "their link", "its link", 1) }

// waitOf is r's wait when its operation has waited StallAfter on a peer
// over a link that moved no bytes for as long, else nil.
func waitOf(r *CommReport) *Wait {
	if r == nil || r.Op == nil || r.Op.Wait == nil || idleOf(r) < StallAfter.Seconds() {
		return nil
	}
	return r.Op.Wait
}

// idleOf is how long r's link to the peer its operation waits on has
// moved no bytes (its operation's running time when not known).
func idleOf(r *CommReport) float64 {
	if r.Op.Wait.IdleSec < 0 {
		return r.Op.WaitSec
	}
	return min(r.Op.Wait.IdleSec, r.Op.WaitSec)
}

// inFlight is how many more bytes rq's rank counted sent to r's than r's
// counted received from it (0 when either does not say).
func inFlight(rq, r *CommReport) uint64 {
	if rq == nil {
		return 0
	}
	var sent, recv uint64
	var ok1, ok2 bool
	for _, l := range rq.Links {
		if l.Peer == r.Rank {
			sent, ok1 = l.Sent, true
		}
	}
	for _, l := range r.Links {
		if l.Peer == rq.Rank {
			recv, ok2 = l.Received, true
		}
	}
	if !ok1 || !ok2 || sent <= recv {
		return 0
	}
	return sent - recv
}
