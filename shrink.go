package goccl

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/goccl/goccl/transport"
)

// Shrink makes a communicator of c's surviving ranks (ncclCommShrink,
// MPIX_Comm_shrink): the ranks that Agree does not count failed, renumbered
// from 0 in their order in c, with c's options. Every live rank must call
// it; it works on a communicator that a failure poisoned or a rank revoked.
//
// When a rank of c failed, or c failed on some rank, c is done for: Shrink
// ends its operations for good (later ones fail, naming Shrink) and the new
// communicator keeps c's shared-memory rings between survivors, reset,
// instead of making new ones (each side takes its rings back once the
// link's calls have ended; see transport/shm.Reclaim). Other links (TCP,
// RoCE) are made anew: a failure closed them. When every rank of c is alive
// and c works everywhere, c stays usable and the new communicator makes
// links of its own, as Split does.
//
// Its result is the same on every survivor: after the new communicator is
// made, the survivors agree again on c; if a rank failed meanwhile, or a
// survivor could not finish, every survivor closes what it made and starts
// over without the newly failed ranks, until ctx's deadline (else c's
// timeout). A rank the survivors counted failed gets an error wrapping
// ErrExcluded. Like Agree, it needs a store that outlives the dead ranks
// (see Agree).
func (c *Comm) Shrink(ctx context.Context) (*Comm, error) {
	if c == nil {
		return nil, nilComm("Shrink")
	}
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	for first := true; ; first = false {
		nc, again, err := c.shrinkOnce(ctx, first)
		if !again {
			return nc, err
		}
	}
}

// shrinkOnce is one attempt of Shrink: again reports that the survivors
// agreed to start over. Only the first attempt takes c's links back: a
// later one may find some taken by the attempt before and others not, and
// a pair whose sides differ would fall back to TCP.
func (c *Comm) shrinkOnce(ctx context.Context, first bool) (nc *Comm, again bool, err error) {
	fail := func(err error) (*Comm, bool, error) {
		return nil, false, &Error{Rank: c.rank, Op: "Shrink", Err: err}
	}
	// The flag says that c works on this rank: every survivor learns
	// whether c failed anywhere, and all decide alike whether to retire it.
	works := uint64(0)
	if c.Err() == nil {
		works = 1
	}
	all, failed, err := c.Agree(ctx, works)
	if err != nil {
		return fail(err)
	}
	var survivors []int
	for r := range c.size {
		if !slices.Contains(failed, r) {
			survivors = append(survivors, r)
		}
	}
	var reuse []transport.Link
	if all == 0 || len(failed) > 0 {
		c.retire()
		if first && c.group != nil {
			reuse = make([]transport.Link, len(survivors))
			for i, r := range survivors {
				if r != c.rank {
					reuse[i] = c.group.Link(r)
				}
			}
		}
	}
	n := c.shrinks.Add(1)
	// The new communicator's Init gets half the time left, so that a rank
	// that stops during it leaves time to agree on starting over.
	dl, _ := ctx.Deadline()
	ictx, cancel := context.WithDeadline(ctx, time.Now().Add(time.Until(dl)/2))
	nc, ierr := c.shrinkInit(ictx, n, survivors, slices.Index(survivors, c.rank), reuse)
	cancel()
	ok := uint64(1)
	if ierr != nil {
		ok = 0
	}
	all, failed2, err := c.Agree(ctx, ok)
	if err == nil && all == 1 && slices.Equal(failed, failed2) {
		return nc, false, nil
	}
	if nc != nil {
		nc.Close()
	}
	if err != nil {
		return fail(err)
	}
	if ctx.Err() != nil {
		return fail(fmt.Errorf("survivors %s could not form a communicator before the deadline: %w (this rank: %v)", joinInts(survivors), ctx.Err(), ierr))
	}
	return nil, true, nil
}

// shrinkInit makes attempt n's communicator of survivors (c's ranks), as
// rank of them, through c's root store under a prefix of its own, with a
// job id of its own.
func (c *Comm) shrinkInit(ctx context.Context, n int64, survivors []int, rank int, reuse []transport.Link) (*Comm, error) {
	jobID := shortJobID(fmt.Sprintf("%s-k%d", c.jobID, n))
	roots := c.rootsOf(survivors)
	opts := append([]Option{WithRank(rank), WithWorldSize(len(survivors)),
		WithStore(c.derivedStore(fmt.Sprintf("goccl/shrink/%s/%d/", c.jobID, n), roots)),
		derived(c.root, c.book, roots, jobID), func(cfg *options) { cfg.reuse = reuse }}, c.splitOpts...)
	return Init(ctx, opts...)
}

// errShrunk is the error of c's operations once Shrink retired it.
var errShrunk = errors.New("Shrink replaced this communicator after a failure and took its shared-memory links")

// retire ends c's operations for good before Shrink takes its links: the
// running one and those queued fail (the links abort), later ones fail at
// once with errShrunk (unless an earlier error poisoned c).
func (c *Comm) retire() {
	if c.group != nil {
		c.group.Abort()
	}
	c.q.stop(c, errShrunk)
	c.mu.Lock()
	if c.poison == nil {
		c.poison = errShrunk
	}
	c.mu.Unlock()
	c.setAsyncErr(&Error{Rank: c.rank, Op: "Shrink", Err: errShrunk})
}

// shortJobID is id, or a hash of it when it is too long for a job id
// (shared-memory file names, TCP handshakes).
func shortJobID(id string) string {
	if len(id) <= 100 {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:16])
}
