package goccl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport"
)

// ErrExcluded: the survivors' agreement (Agree) counted this rank among the
// failed ones: it did not vote before their deadline (it was stopped or
// too slow), so it must not go on with them.
var ErrExcluded = errors.New("the other ranks agreed that this rank had failed")

// Agree is fault-tolerant agreement among the ranks that are alive
// (MPI_Comm_agree of MPI's ULFM): every rank that returns without error
// returns the same value, the bitwise AND of the flags of the ranks that
// took part, and the same failed set, the ranks (in c's numbering,
// ascending) that did not: dead, or silent until the deadline. It holds
// when ranks die before or during the agreement, the calling ranks
// included: the decision is made once, by the first survivor to propose
// one, through an atomic create in the rendezvous store
// (rendezvous.Creator), and every survivor adopts it.
//
// Agree runs over the store, not over c's links, so it works on a
// communicator poisoned by a failure, and it needs no Revoke first. Every
// live rank must call it the same number of times. A dead rank is known at
// once when its process dies (the store's server sees its connection close
// without a goodbye; that needs the job token, GOCCL_JOB_TOKEN, which goccl
// run sets) or when c's links reported it lost; a rank that is alive but
// does not call Agree (stopped, or stuck in user code) is counted failed
// when ctx's deadline, else c's timeout, is near (10 % of the time left,
// at most 1 s, is kept for the decision). A rank the others counted failed
// that calls Agree after the decision gets an error wrapping ErrExcluded.
//
// The store must outlive the ranks that die: with the default store, which
// rank 0 serves, a dead rank 0 fails every Agree (the error says so); a
// store served apart from the ranks (WithStore, etcd) has no such rank.
func (c *Comm) Agree(ctx context.Context, flags uint64) (uint64, []int, error) {
	if c == nil {
		return 0, nil, nilComm("Agree")
	}
	n := c.agrees.Add(1)
	fail := func(err error) (uint64, []int, error) {
		return 0, nil, &Error{Rank: c.rank, Op: "Agree", Err: fmt.Errorf("agreement #%d: %w", n, err)}
	}
	if c.size == 1 {
		return flags, nil, nil
	}
	cr, ok := c.rdv.(rendezvous.Creator)
	if !ok {
		return fail(fmt.Errorf("%w: the rendezvous store (%T) cannot decide atomically (rendezvous.Creator)", ErrInvalidArgument, c.rdv))
	}
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	prefix := fmt.Sprintf("goccl/agree/%s/%d/", c.jobID, n)
	if err := c.rdv.Set(ctx, prefix+"v/"+strconv.Itoa(c.rank), []byte(strconv.FormatUint(flags, 16))); err != nil {
		return fail(c.storeErr("publishing this rank's vote", err))
	}
	// The vote is there: a counter says so without a wait (collectVotes).
	if _, err := c.rdv.Add(ctx, prefix+"in/"+strconv.Itoa(c.rank), 1); err != nil {
		return fail(c.storeErr("publishing this rank's vote", err))
	}
	and, failed, decided, err := c.collectVotes(ctx, prefix, flags)
	if err != nil {
		return fail(err)
	}
	var v []byte
	if decided {
		v, err = c.rdv.Get(ctx, prefix+"decision")
	} else {
		v, err = cr.Create(ctx, prefix+"decision", encodeDecision(and, failed))
	}
	if err != nil {
		return fail(c.storeErr("deciding", err))
	}
	and, failed, err = decodeDecision(v, c.size)
	if err != nil {
		return fail(err)
	}
	// Release the ranks still waiting for the votes of the ranks counted
	// failed: they find this mark instead and read the decision. Every
	// survivor writes the marks (Create keeps a vote already there), so
	// they appear even if the decider dies.
	for _, r := range failed {
		if _, err := cr.Create(ctx, prefix+"v/"+strconv.Itoa(r), []byte(failedMark)); err != nil {
			return fail(c.storeErr("marking the failed ranks", err))
		}
	}
	c.agreeMu.Lock()
	for _, r := range failed {
		c.agreeFailed[r] = true // failed once, failed for every later agreement
	}
	c.agreeMu.Unlock()
	if slices.Contains(failed, c.rank) {
		return fail(fmt.Errorf("%w (failed set %s)", ErrExcluded, joinInts(failed)))
	}
	return and, failed, nil
}

// failedMark stands in the store for the vote of a rank that an
// agreement's decision counted failed.
const failedMark = "failed"

// collectVotes reads every other rank's vote of one agreement (under
// prefix) until the vote deadline: the AND of the votes read (and mine) and
// the ranks that gave none, dead or silent; or decided, when it found that
// the agreement was decided already (a failed rank's mark).
func (c *Comm) collectVotes(ctx context.Context, prefix string, mine uint64) (and uint64, failed []int, decided bool, err error) {
	dl, _ := ctx.Deadline()
	voteCtx, cancel := context.WithDeadline(ctx, dl.Add(-min(time.Until(dl)/10, time.Second)))
	defer cancel()
	c.agreeMu.Lock()
	defer c.agreeMu.Unlock()
	if c.agreeFailed == nil {
		c.agreeFailed = make([]bool, c.size)
	}
	dead := c.agreeFailed // known failed: earlier decisions, losses seen
	for q, root := range c.rootRanks {
		if c.book.has(root) {
			dead[q] = true
		}
	}
	if c.group != nil {
		if r := transport.LostRank(c.group.LostErr()); r >= 0 && r < c.size {
			dead[r] = true
			c.book.add(c.rootRanks[r]) // the store's news of it is old news
		}
	}
	and = mine
	for q := range c.size {
		if q == c.rank {
			continue
		}
		for !dead[q] {
			wctx := voteCtx
			if voteCtx.Err() != nil {
				// Past the deadline: only the votes already there count,
				// which the voters' counters tell without waiting.
				if n, err := c.rdv.Add(ctx, prefix+"in/"+strconv.Itoa(q), 0); err != nil || n == 0 {
					if err != nil && ctx.Err() == nil {
						return 0, nil, false, c.storeErr(fmt.Sprintf("reading rank %d's vote", q), err)
					}
					dead[q] = true // silent until the deadline
					continue
				}
				wctx = ctx
			}
			v, err := c.rdv.Get(wctx, prefix+"v/"+strconv.Itoa(q))
			var lost *rendezvous.RankLostError
			switch {
			case err == nil && string(v) == failedMark:
				return 0, nil, true, nil
			case err == nil:
				f, perr := strconv.ParseUint(string(v), 16, 64)
				if perr != nil {
					return 0, nil, false, fmt.Errorf("rank %d's vote %q: %w", q, v, perr)
				}
				and &= f
			case errors.As(err, &lost):
				c.book.add(lost.Rank)
				if d := slices.Index(c.rootRanks, lost.Rank); d >= 0 {
					dead[d] = true
				}
				continue
			case ctx.Err() == nil && wctx.Err() != nil:
				dead[q] = true // silent until the deadline
				continue
			default:
				return 0, nil, false, c.storeErr(fmt.Sprintf("waiting for rank %d's vote", q), err)
			}
			break
		}
		if dead[q] {
			failed = append(failed, q)
		}
	}
	return and, failed, false, nil
}

// storeErr is err, from the store while doing what; a store that broke
// (not a deadline) may be rank 0's, gone with rank 0.
func (c *Comm) storeErr(what string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w (the rendezvous store failed: the default one dies with rank 0)", what, err)
}

// encodeDecision is an agreement's decision as stored: "AND;r1,r2,...".
func encodeDecision(and uint64, failed []int) []byte {
	return []byte(strconv.FormatUint(and, 16) + ";" + joinInts(failed))
}

// decodeDecision reads what encodeDecision wrote, ranks checked against size.
func decodeDecision(v []byte, size int) (uint64, []int, error) {
	a, f, ok := strings.Cut(string(v), ";")
	and, err := strconv.ParseUint(a, 16, 64)
	if !ok || err != nil {
		return 0, nil, fmt.Errorf("malformed agreement decision %q in the store", v)
	}
	var failed []int
	if f != "" {
		for _, s := range strings.Split(f, ",") {
			r, err := strconv.Atoi(s)
			if err != nil || r < 0 || r >= size {
				return 0, nil, fmt.Errorf("malformed agreement decision %q in the store", v)
			}
			failed = append(failed, r)
		}
	}
	return and, failed, nil
}
