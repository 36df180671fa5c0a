package goccl

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/goccl/goccl/rendezvous"
)

// Shrink makes a communicator of c's surviving ranks (ncclCommShrink,
// MPIX_Comm_shrink): the ranks that Agree does not count failed, renumbered
// from 0 in their order in c. Every live rank must call it; it works on a
// communicator that a failure poisoned (the failure closed c's links to
// release the ranks waiting on them, so the new communicator makes links of
// its own, as Split does, with c's options).
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
	for {
		nc, again, err := c.shrinkOnce(ctx)
		if !again {
			return nc, err
		}
	}
}

// shrinkOnce is one attempt of Shrink: again reports that the survivors
// agreed to start over.
func (c *Comm) shrinkOnce(ctx context.Context) (nc *Comm, again bool, err error) {
	fail := func(err error) (*Comm, bool, error) {
		return nil, false, &Error{Rank: c.rank, Op: "Shrink", Err: err}
	}
	_, failed, err := c.Agree(ctx, 0)
	if err != nil {
		return fail(err)
	}
	var survivors []int
	for r := range c.size {
		if !slices.Contains(failed, r) {
			survivors = append(survivors, r)
		}
	}
	n := c.shrinks.Add(1)
	// The new communicator's Init gets half the time left, so that a rank
	// that stops during it leaves time to agree on starting over.
	dl, _ := ctx.Deadline()
	ictx, cancel := context.WithDeadline(ctx, time.Now().Add(time.Until(dl)/2))
	nc, ierr := c.shrinkInit(ictx, n, slices.Index(survivors, c.rank), len(survivors), failed)
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

// shrinkInit makes attempt n's communicator: rank of size, through c's
// store under a prefix of its own, with a job id of its own. The store's
// news of the failed ranks' loss (which it tells each rank once, maybe
// now) does not concern the new communicator.
func (c *Comm) shrinkInit(ctx context.Context, n int64, rank, size int, failed []int) (*Comm, error) {
	prefix := fmt.Sprintf("goccl/shrink/%d/", n)
	jobID := shortJobID(fmt.Sprintf("%s-k%d", c.jobID, n))
	opts := append([]Option{WithRank(rank), WithWorldSize(size), WithStore(knownLosses{rendezvous.PrefixStore(c.rdv, prefix), append([]int{}, failed...)}),
		func(cfg *options) { cfg.jobID, cfg.split = jobID, true }}, c.splitOpts...)
	return Init(ctx, opts...)
}

// knownLosses is a store whose Get and Wait wait on past the loss of the
// ranks in known (rendezvous.RankLostError), which the caller has dealt with.
type knownLosses struct {
	rendezvous.Store
	known []int
}

func (k knownLosses) Get(ctx context.Context, key string) ([]byte, error) {
	for {
		v, err := k.Store.Get(ctx, key)
		if !k.isKnown(err) {
			return v, err
		}
	}
}

func (k knownLosses) Wait(ctx context.Context, keys ...string) error {
	for {
		if err := k.Store.Wait(ctx, keys...); !k.isKnown(err) {
			return err
		}
	}
}

// Create implements rendezvous.Creator when the store does.
func (k knownLosses) Create(ctx context.Context, key string, value []byte) ([]byte, error) {
	cr, ok := k.Store.(rendezvous.Creator)
	if !ok {
		return nil, fmt.Errorf("rendezvous: the store (%T) cannot create keys atomically", k.Store)
	}
	return cr.Create(ctx, key, value)
}

// isKnown reports whether err is the loss of a rank in known (any rank
// when known is nil: a joiner's, none of whose business they are).
func (k knownLosses) isKnown(err error) bool {
	var lost *rendezvous.RankLostError
	return errors.As(err, &lost) && (k.known == nil || slices.Contains(k.known, lost.Rank))
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
