package ddp

import (
	"context"
	"fmt"
	"time"

	"github.com/goccl/goccl"
)

// Verdict is what the ranks decided at the end of a step (ShouldCommit).
type Verdict struct {
	// Commit: apply this step's update on this rank. It is true on every
	// rank or on none, except after a failure that hit some ranks after
	// they had committed the step and moved on (see ShouldCommit): then the
	// others commit it now, and the ranks that moved on redo their next
	// step.
	Commit bool
	// Shrink: a rank failed or the step's communication failed somewhere:
	// every rank goes on with Comm.Shrink's communicator (which drops the
	// ranks in Failed) and a new DDP on it.
	Shrink bool
	// Failed are the ranks (of the DDP's communicator) that failed or fell
	// silent.
	Failed []int
	// Joiners is how many processes wait to join (goccl.Join): grow by
	// that many with Comm.Grow after this step.
	Joiners int
}

// joinCheckEvery is how often rank 0 asks the store for joiners.
const joinCheckEvery = 200 * time.Millisecond

// ShouldCommit is the second phase of an elastic step (torchft's
// should_commit): every live rank calls it after Wait, with Wait's error
// (or the error that ended its step early), and applies the step's update
// only when the Verdict says Commit, so that the replicas stay identical
// when ranks fail.
//
// The common case costs one AllReduce of 16 bytes over the communicator:
// every rank's step succeeded (the update is applied everywhere), or some
// rank's failed without breaking the communicator (no rank applies it and
// all shrink, which here rebuilds the communicator with every rank). Rank 0 adds the number of processes waiting to join (it
// asks the store at most every 200 ms). When that AllReduce fails on a
// rank (a rank died), the rank falls back to the communicator's
// fault-tolerant agreement (goccl.Comm.Agree), which every survivor reaches
// in the same round: the ranks whose vote failed, and those whose vote
// had succeeded, which committed the step and whose next step then failed.
// The agreement tells the first that the step was committed elsewhere
// (only possible when every rank's step succeeded, so they hold its
// reduced gradients and commit it now) and all of them to shrink. Its
// error is the agreement's: this rank was counted failed
// (goccl.ErrExcluded), or the store is gone; the training cannot go on.
func (d *DDP) ShouldCommit(ctx context.Context, stepErr error) (Verdict, error) {
	if d.c == nil {
		return d.commit(Verdict{Commit: stepErr == nil}), nil
	}
	if stepErr == nil || d.c.Err() == nil {
		joiners, err := d.joiners(ctx)
		if err != nil {
			return Verdict{}, err
		}
		vote := []int64{1, -int64(joiners)}
		if stepErr != nil {
			vote[0] = 0 // a failure that left the communicator working
		}
		if err := goccl.AllReduce(ctx, d.c, vote, vote, len(vote), goccl.Min); err == nil {
			return d.commit(Verdict{Commit: vote[0] == 1, Shrink: vote[0] != 1, Joiners: int(-vote[1])}), nil
		}
	}
	return d.agreeCommit(ctx, stepErr == nil)
}

// agreeCommit is ShouldCommit's fallback through Comm.Agree. pendingOK:
// this rank's step succeeded and is not applied. Every rank's commit count
// is then K or K-1 (the ranks at K committed step K and failed in K+1), so
// its parity tells the two apart: bit 0 is pendingOK, bits 1 and 2 say the
// count is even, odd; when both parities vote, the ranks still holding
// step K (pendingOK) commit it.
func (d *DDP) agreeCommit(ctx context.Context, pendingOK bool) (Verdict, error) {
	flags := ^uint64(0)
	if !pendingOK {
		flags &^= 1
	}
	if d.commits%2 == 0 {
		flags &^= 4 // not odd
	} else {
		flags &^= 2 // not even
	}
	and, failed, err := d.c.Agree(ctx, flags)
	if err != nil {
		return Verdict{}, fmt.Errorf("ddp: should commit: %w", err)
	}
	return d.commit(Verdict{Commit: commitAfterAgree(and, len(failed), pendingOK), Shrink: true, Failed: failed}), nil
}

// commitAfterAgree decides agreeCommit's Commit from the agreement's AND,
// the number of failed ranks and this rank's pendingOK: commit a pending
// step that other ranks committed already (both parities voted), or that
// every rank holds (all pendingOK) when none failed.
func commitAfterAgree(and uint64, failed int, pendingOK bool) bool {
	mixed := and&6 == 0
	return pendingOK && (mixed || and&1 == 1 && failed == 0)
}

// commit counts a committed step.
func (d *DDP) commit(v Verdict) Verdict {
	if v.Commit {
		d.commits++
	}
	return v
}

// joiners is, on rank 0, the processes waiting to join, asked at most every
// joinCheckEvery; 0 elsewhere.
func (d *DDP) joiners(ctx context.Context) (int, error) {
	if d.c.Rank() != 0 || time.Since(d.joinCheck) < joinCheckEvery {
		return 0, nil
	}
	d.joinCheck = time.Now()
	j, err := d.c.JoinersWaiting(ctx)
	if err != nil {
		return 0, fmt.Errorf("ddp: should commit: %w", err)
	}
	return j, nil
}
