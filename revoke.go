package goccl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrRevoked: a rank revoked the communicator (Comm.Revoke).
var ErrRevoked = errors.New("communicator revoked")

// Revoke makes the communicator unusable on every rank (MPIX_Comm_revoke,
// ncclCommRevoke): not collective, any rank may call it, from any
// goroutine. This rank's pending and later operations fail at once with an
// error wrapping ErrRevoked; so do the other ranks' (their pending
// operations when they find their links to this rank closed, or within two
// ticks of their watcher, which reads the revocation in the rendezvous
// store when the rank has been idle or in one operation for a tick: a tick
// is an eighth of the operation timeout, at most 1 s). The
// revocation is in the store before Revoke returns, so it reaches the
// other ranks even if this one dies right after. Agree, Shrink and Split
// still work on a revoked communicator (they use the store): revoke, then
// shrink, is ULFM's way of getting every rank out of its operations and
// into the recovery. ctx bounds the store writes.
func (c *Comm) Revoke(ctx context.Context) error {
	if c == nil {
		return nilComm("Revoke")
	}
	// Into the store first: once Revoke returns the revocation no longer
	// depends on this rank.
	defer c.revokeLocal(c.rank)
	if c.rdv == nil || c.jobID == "" {
		return nil
	}
	key := revokeKey(c.jobID)
	if err := c.rdv.Set(ctx, key+"by", []byte(strconv.Itoa(c.rank))); err != nil {
		return &Error{Rank: c.rank, Op: "Revoke", Err: c.storeErr("storing the revocation", err)}
	}
	if _, err := c.rdv.Add(ctx, key+"n", 1); err != nil {
		return &Error{Rank: c.rank, Op: "Revoke", Err: c.storeErr("storing the revocation", err)}
	}
	if h := c.health; h != nil {
		h.publishWait(report{State: stRevoked, Seq: c.opState.Load() >> 1, Origin: c.rank, Cause: revokedCause(c.rank)})
	}
	return nil
}

// revokeKey is the store prefix of a communicator's revocation.
func revokeKey(jobID string) string { return "goccl/revoke/" + jobID + "/" }

func revokedCause(by int) string { return fmt.Sprintf("rank %d revoked the communicator", by) }

// revokedErr is the error of an operation kind #seq on a communicator
// revoked by rank by.
func (c *Comm) revokedErr(kind opKind, seq uint64, by int) error {
	return c.errorf(kind, seq, "%w by rank %d", ErrRevoked, by)
}

// revokeLocal revokes the communicator on this rank, by rank by: later
// operations fail at begin, the running one and those queued fail as the
// links are aborted (end names the revocation), and the peers' operations
// fail on their links to this rank.
func (c *Comm) revokeLocal(by int) {
	if !c.revokedBy.CompareAndSwap(0, int64(by)+1) {
		return
	}
	c.setAsyncErr(&Error{Rank: c.rank, Op: "Revoke", Err: fmt.Errorf("%w by rank %d", ErrRevoked, by)})
	if c.group != nil {
		c.group.Abort()
	}
	c.q.stop(c, ErrRevoked)
}

// revoked is the rank that revoked the communicator, -1 if none did.
func (c *Comm) revoked() int { return int(c.revokedBy.Load()) - 1 }

// checkRevoked reads the revocation in the store (the watcher, every tick)
// and revokes this rank's communicator when some rank revoked it.
func (c *Comm) checkRevoked(ctx context.Context) {
	if c.revoked() >= 0 {
		return
	}
	key := revokeKey(c.jobID)
	n, err := c.rdv.Add(ctx, key+"n", 0)
	if err != nil || n == 0 {
		return
	}
	by := -1
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if v, err := c.rdv.Get(wctx, key+"by"); err == nil {
		by, _ = strconv.Atoi(string(v))
	}
	c.revokeLocal(by)
}
