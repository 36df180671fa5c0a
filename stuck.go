package goccl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/transport"
)

// diagnose completes err, the failure of operation kind #seq on this rank
// (not a lost rank, not this rank's Abort), from the ranks' reports
// (health.go), and publishes this rank's own report before its links
// close: a timeout names the ranks that kept it waiting, a link closed by
// a peer says why the peer closed it, and any other failure (a mismatch)
// is published for the ranks it leaves behind.
func (c *Comm) diagnose(kind opKind, seq uint64, err error) error {
	h := c.health
	switch {
	case h == nil:
		return err
	case errors.Is(err, context.DeadlineExceeded) && kind != opSendRecv:
		// Also a link this rank closed after its other direction timed out.
		return c.diagnoseTimeout(kind, seq, err)
	case errors.Is(err, ErrClosed):
		return c.relayCause(kind, seq, err)
	}
	cause := fmt.Sprintf("rank %d failed in %v (op #%d): %v", c.rank, c.nameOf(kind), seq, err)
	var m *transport.MismatchError
	if errors.As(err, &m) {
		cause = fmt.Sprintf("rank %d found a %s mismatch with rank %d in %v (op #%d): %v", c.rank, m.Field, m.Peer, c.nameOf(kind), seq, m)
	}
	h.publishWait(report{State: stFailed, Seq: seq, Origin: c.rank, Cause: cause})
	return err
}

// relayCause completes err, a link closed by a peer, with the cause that
// peer published or, if it published none (its store call may have failed:
// the store's rank may have exited since), the first another rank did,
// waiting for one at most healthCollect; it then publishes the cause as
// this rank's.
func (c *Comm) relayCause(kind opKind, seq uint64, err error) error {
	h := c.health
	var ranks []int
	var pe *transport.PeerError
	if errors.As(err, &pe) && pe.Peer >= 0 && pe.Peer < c.size && pe.Peer != c.rank {
		ranks = append(ranks, pe.Peer)
	}
	for p := range c.size {
		if p != c.rank && (len(ranks) == 0 || p != ranks[0]) {
			ranks = append(ranks, p)
		}
	}
	got, _ := h.collect(nil, ranks, func(got []*report) bool {
		return slices.ContainsFunc(got, func(r *report) bool { return r != nil && r.final() })
	})
	// A rank's cause is relayed before a timed-out rank's report that has
	// none yet: that rank publishes its verdict a moment after its first
	// report, and the others may have relayed it already.
	slices.SortStableFunc(ranks, func(a, b int) int {
		return cmp.Compare(causeless(got[a]), causeless(got[b]))
	})
	for _, p := range ranks {
		r := got[p]
		if r == nil || !r.final() {
			continue
		}
		if r.State == stTimeout && r.Cause == "" && kind != opSendRecv {
			// That rank timed out in this operation (or in the one
			// before, which it never finished) and has no verdict yet: it
			// closed its links first, as a call on them timed out. This
			// rank, stuck with it, judges for itself.
			return c.diagnoseTimeout(kind, seq, err)
		}
		if r.State == stFailed && r.Cause == "" {
			continue // nothing to relay
		}
		cause, state := r.Cause, stFailed
		if r.State == stRevoked {
			c.revokeLocal(r.Origin) // end names it
			state = stRevoked       // and the ranks that read this rank's report learn it too
		}
		if r.State == stClosed {
			cause = fmt.Sprintf("rank %d closed its communicator before op #%d (its last was op #%d)", p, seq, r.Seq)
		}
		h.publishWait(report{State: state, Seq: seq, Origin: r.Origin, Cause: cause})
		return fmt.Errorf("%w; %s", err, cause)
	}
	h.publishWait(report{State: stFailed, Seq: seq, Origin: c.rank,
		Cause: fmt.Sprintf("rank %d failed in %v (op #%d): %v", c.rank, c.nameOf(kind), seq, err)})
	return err
}

// causeless is 1 for a report without a cause to relay, else 0.
func causeless(r *report) int {
	if r == nil || r.Cause == "" {
		return 1
	}
	return 0
}

// diagnoseTimeout completes err, operation kind #seq timed out on this
// rank, with the ranks that kept it waiting and what each was doing: it
// publishes this rank's wait and reads the others' reports (at most
// healthCollect in all), and judges each rank from them and its own
// observations.
func (c *Comm) diagnoseTimeout(kind opKind, seq uint64, err error) error {
	h := c.health
	notHeard := c.group.NotHeard(seq)
	heard := make([]uint64, c.size)
	for p := range heard {
		heard[p] = seq
		if slices.Contains(notHeard, p) {
			heard[p] = c.group.Heard(p)
		}
	}
	on := -1
	var pe *transport.PeerError
	if errors.As(err, &pe) {
		on = pe.Peer
	}
	me := report{State: stTimeout, Seq: seq, Waiting: notHeard, On: on, Origin: c.rank}
	me.Sent, me.Recv, me.Idle = h.linkState()
	var others []int
	for p := range c.size {
		if p != c.rank {
			others = append(others, p)
		}
	}
	got, reached := h.collect(&me, others, func(got []*report) bool {
		for _, p := range others {
			if !settled(got[p], seq, heard[p]) {
				return false
			}
		}
		return true
	})
	sure, told := c.verdict(seq, got, &me, heard)
	if len(sure) == 0 {
		return err
	}
	verdict := "kept waiting by " + strings.Join(sure, "; ")
	if reached {
		me.Cause = fmt.Sprintf("rank %d timed out in %v (op #%d), kept waiting by %s", c.rank, c.nameOf(kind), seq, strings.Join(told, "; "))
		h.publishWait(me)
	}
	return fmt.Errorf("%w; %s", err, verdict)
}

// verdict judges each rank from the reports got and this rank's me (heard:
// by rank, the last op this rank heard from it in) and returns the ranks
// that kept this rank waiting in op #seq, each with what it did: those
// certain or, if none is, the suspects; and the same for the other ranks
// to relay, in words that name this rank as a rank (it may be an end of
// the link that stopped the operation).
func (c *Comm) verdict(seq uint64, got []*report, me *report, heard []uint64) (sure, told []string) {
	stalled := c.stalledLinks(seq, got, me, false)
	abs := c.stalledLinks(seq, got, me, true)
	var suspects []string
	for p := range c.size {
		if p == c.rank {
			if abs[p] != "" {
				told = append(told, fmt.Sprintf("rank %d: %s", p, abs[p]))
			}
			continue
		}
		s, certain := stalled[p], true
		if s == "" {
			s, certain = c.blame(p, seq, got, me, heard[p])
		}
		switch {
		case s == "":
		case certain:
			sure = append(sure, fmt.Sprintf("rank %d: %s", p, s))
			told = append(told, fmt.Sprintf("rank %d: %s", p, cmp.Or(abs[p], s)))
		default:
			suspects = append(suspects, fmt.Sprintf("rank %d: %s", p, s))
		}
	}
	if len(sure) == 0 {
		sure = suspects // the ranks that did not answer, when nothing is certain
		told = append(told, suspects...)
	}
	return sure, told
}

// settled reports whether r, a rank's report, says all that rank will say
// about op #seq: it failed or timed out, or it runs a later operation, or
// it is idle after an earlier one (a report of an older one than this rank
// last heard of from it, heard, is stale: the watcher of a stopped rank
// published it long ago).
func settled(r *report, seq, heard uint64) bool {
	switch {
	case r == nil:
		return false
	case r.final() || r.Seq > seq:
		return true
	case r.Seq == seq:
		return r.State == stIdle // done with it
	case r.State == stIn:
		// Stuck in an earlier operation, which it began before this rank
		// began this one: it times out no later, and its report says on
		// what it waits.
		return false
	}
	return r.Seq >= heard
}

// blame says what rank p was doing while this rank waited in op #seq, and
// whether that is certain (else p is only suspected: it did not answer);
// "" when p did not keep this rank waiting (it waits too, on others, or
// is ahead). got holds the ranks' reports, me this rank's, heard the last
// operation this rank heard from p in.
func (c *Comm) blame(p int, seq uint64, got []*report, me *report, heard uint64) (string, bool) {
	r, now := got[p], time.Now()
	if r != nil && !settled(r, seq, heard) && !(r.Seq <= seq && r.Seq >= heard && r.State == stIn) {
		r = nil // stale
	}
	switch {
	case r == nil:
		return c.blameSilent(p, seq, got, me.Waiting)
	case r.State == stFailed && r.Origin != p && r.Origin >= 0 && r.Origin < c.size:
		return "", false // it relays what rank Origin found: that rank is judged
	case r.State == stFailed || r.State == stClosed:
		return "failed: " + r.Cause, true
	case r.Seq < seq && r.State == stIdle:
		return fmt.Sprintf("alive but never entered op #%d: its last operation, op #%d, finished %v ago", seq, r.Seq, r.age(now).Round(time.Millisecond)), true
	case r.Seq < seq:
		// Stuck in an earlier operation itself: a suspect, not the cause.
		on := ""
		if r.State == stTimeout && r.On >= 0 {
			on = fmt.Sprintf(", waiting on rank %d", r.On)
		}
		return fmt.Sprintf("alive but never entered op #%d: it has been in op #%d for %v%s", seq, r.Seq, r.age(now).Round(time.Millisecond), on), false
	}
	return "", false
}

// stalledLinks finds, from the reports of the ranks that timed out in op
// #seq or in an earlier one they never finished (me this rank's), the
// links that stopped the operation, and describes each of their two ends
// by rank: rank p waits on rank q, and q waits on p, or q counted more
// bytes sent to p than p received, or q went on to a later operation (so
// it sent p all it had to in p's): what q sent never arrived. A rank away
// from the link has no counters of it and judges from the two ends'
// reports.
func (c *Comm) stalledLinks(seq uint64, got []*report, me *report, abs bool) map[int]string {
	who := c.who
	if abs {
		who = func(p int) string { return fmt.Sprintf("rank %d", p) }
	}
	full := func(p int) *report {
		if p == c.rank {
			return me
		}
		return got[p]
	}
	waits := func(r *report, p int) bool { // r timed out waiting on a peer
		return r != nil && r.State == stTimeout && r.Seq <= seq && r.On >= 0 && r.On < c.size && r.On != p
	}
	out := map[int]string{}
	for p := range c.size {
		rp := full(p)
		if !waits(rp, p) {
			continue
		}
		q := rp.On
		rq := full(q)
		idle := linkIdle(rp, q, rq, p)
		if q == c.rank || p == c.rank {
			idle = c.health.linkIdle(q + p - c.rank)
		}
		moved := fmt.Sprintf("their link moved no bytes for %v", idle.Round(time.Millisecond))
		var mine, theirs string // what never arrived, as p's and q's
		switch n := inFlight(rq, rp, q, p); {
		case waits(rq, q) && rq.On == p:
			out[p] = fmt.Sprintf("entered op #%d but not progressing: it waits on %s and %s on it, and %s", rp.Seq, who(q), who(q), moved)
			continue
		case n > 0:
			mine = fmt.Sprintf("the last %d bytes %s sent it never arrived", n, who(q))
			theirs = fmt.Sprintf("the last %d bytes it sent %s never arrived (%s waits on them)", n, who(p), who(p))
		case rq != nil && rq.Seq > rp.Seq: // in any state: it finished op #rp.Seq
			mine = fmt.Sprintf("what %s sent it in op #%d never arrived (%s went on to op #%d)", who(q), rp.Seq, who(q), rq.Seq)
			theirs = fmt.Sprintf("what it sent %s in op #%d never arrived (%s waits on it)", who(p), rp.Seq, who(p))
		default:
			continue
		}
		out[p] = fmt.Sprintf("entered op #%d but not progressing: it waits on %s, %s, and %s", rp.Seq, who(q), mine, moved)
		if _, ok := out[q]; !ok {
			what := fmt.Sprintf("entered op #%d but not progressing", rq.Seq)
			if rq.State == stIdle {
				what = fmt.Sprintf("alive, idle after op #%d", rq.Seq)
			}
			out[q] = fmt.Sprintf("%s: %s, and %s", what, theirs, moved)
		}
	}
	if !abs {
		delete(out, c.rank)
	}
	return out
}

// who is "rank p", or "this rank".
func (c *Comm) who(p int) string {
	if p == c.rank {
		return "this rank"
	}
	return fmt.Sprintf("rank %d", p)
}

// inFlight is how many more payload bytes rank q's report rq says it sent
// to rank p than p's, rp, says it received (0 when either is unknown).
func inFlight(rq, rp *report, q, p int) uint64 {
	if rq == nil || len(rq.Sent) <= p || len(rp.Recv) <= q || rq.Sent[p] <= rp.Recv[q] {
		return 0
	}
	return rq.Sent[p] - rp.Recv[q]
}

// linkIdle is how long the link between ranks p and q had moved no bytes
// by their reports rp and rq (rq may be nil): the shorter, as either end
// saw it move.
func linkIdle(rp *report, q int, rq *report, p int) time.Duration {
	ms := int64(-1)
	if len(rp.Idle) > q {
		ms = rp.Idle[q]
	}
	if rq != nil && len(rq.Idle) > p && (ms < 0 || rq.Idle[p] < ms) {
		ms = rq.Idle[p]
	}
	return time.Duration(max(ms, 0)) * time.Millisecond
}

// blameSilent is blame for a rank p that published nothing of use: it is
// judged from the other ranks' reports (did any hear from it in op #seq?),
// this rank's link to it and, on this host, its process's state.
func (c *Comm) blameSilent(p int, seq uint64, got []*report, notHeard []int) (string, bool) {
	proc := c.procState(p)
	if proc == "gone" {
		// A suspect only: a rank that failed before this one may have
		// exited since (a killed one is named as lost, not here).
		return fmt.Sprintf("dead (process %d gone)", c.health.pids[p]), false
	}
	entered := !slices.Contains(notHeard, p)
	for _, r := range got {
		if r != nil && r.State == stTimeout && r.Seq == seq && !slices.Contains(r.Waiting, p) {
			entered = true // that rank heard from p in op #seq
		}
	}
	what := fmt.Sprintf("entered op #%d but not progressing", seq)
	if !entered {
		what = fmt.Sprintf("not progressing, no message of op #%d from it (here or at the ranks that answered)", seq)
	}
	switch proc {
	case "stopped":
		what = fmt.Sprintf("alive but stopped (process %d: SIGSTOP or a debugger), ", c.health.pids[p]) + what
	case "":
		what += fmt.Sprintf(": no answer within %v (stopped, hung, or cut off)", healthCollect)
	default:
		what += fmt.Sprintf(": its process %d is %s but did not answer within %v", c.health.pids[p], proc, healthCollect)
	}
	return what + fmt.Sprintf("; its link to this rank moved no bytes for %v", c.health.linkIdle(p).Round(time.Millisecond)), proc == "stopped"
}

// procState is the state of rank p's process when it runs on this host
// ("running", "sleeping", "stopped", "gone"), else "".
func (c *Comm) procState(p int) string {
	h := c.health
	if h.hosts == nil || h.pids == nil || h.hosts[p] != h.hosts[c.rank] || h.pids[p] <= 0 {
		return ""
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(h.pids[p]) + "/stat")
	if errors.Is(err, os.ErrNotExist) {
		return "gone"
	}
	if err != nil {
		return ""
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	switch b[i+2] {
	case 'T', 't':
		return "stopped"
	case 'Z', 'X':
		return "gone"
	case 'R':
		return "running"
	}
	return "sleeping"
}
