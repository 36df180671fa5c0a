package goccl

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/goccl/goccl/rendezvous"
)

// SplitNoColor is the color of a rank that takes part in Split but joins no
// new communicator (MPI_UNDEFINED, NCCL_SPLIT_NOCOLOR).
const SplitNoColor = -1

// Split makes new communicators from c's ranks (MPI_Comm_split,
// ncclCommSplit): every rank of c must call it, in the same order relative
// to other Splits; the ranks that pass the same color >= 0 form one new
// communicator, ranked by key, ties broken by their rank in c. A rank that
// passes SplitNoColor (or any negative color) gets (nil, nil).
//
// The new communicator has its own links (new connections and shared-memory
// rings, with c's link options: job token, TLS, checksums, timeout), so it
// runs independently of c. The ranks exchange (color, key) through c's
// rendezvous store, not through c's links: Split also works on a
// communicator that an error or Abort poisoned, which is how a job rebuilds
// after a failure while every rank is still alive (a lost rank never calls
// Split, so the others fail at ctx's deadline, or the default timeout,
// naming it; rebuild without it through a new Init). c, and c's rank 0 that
// serves the store, must stay open until every Split has returned.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	if c == nil {
		return nil, nilComm("Split")
	}
	fail := func(err error) (*Comm, error) {
		return nil, &Error{Rank: c.rank, Op: "Split", Err: err}
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return fail(ErrClosed)
	}
	if color < 0 {
		color = SplitNoColor
	}
	gen := c.splits.Add(1)
	if c.size == 1 {
		if color < 0 {
			return nil, nil
		}
		return Init(ctx, WithRank(0), WithWorldSize(1))
	}
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	prefix := fmt.Sprintf("goccl/split/%d/", gen)
	me := strconv.Itoa(color) + "," + strconv.Itoa(key)
	if err := c.rdv.Set(ctx, prefix+"ck/"+strconv.Itoa(c.rank), []byte(me)); err != nil {
		return fail(err)
	}
	type member struct{ rank, key int }
	var group []member
	for r := 0; r < c.size; r++ {
		v, err := c.rdv.Get(ctx, prefix+"ck/"+strconv.Itoa(r))
		if err != nil {
			return fail(fmt.Errorf("waiting for rank %d's color and key: %w", r, err))
		}
		rc, rk, ok := strings.Cut(string(v), ",")
		col, err1 := strconv.Atoi(rc)
		k, err2 := strconv.Atoi(rk)
		if !ok || err1 != nil || err2 != nil {
			return fail(fmt.Errorf("rank %d published a bad color and key %q", r, v))
		}
		if col == color {
			group = append(group, member{r, k})
		}
	}
	if color < 0 {
		return nil, nil
	}
	sort.SliceStable(group, func(i, j int) bool { return group[i].key < group[j].key })
	newRank := -1
	for i, m := range group {
		if m.rank == c.rank {
			newRank = i
		}
	}
	store := rendezvous.PrefixStore(c.rdv, prefix+"color/"+strconv.Itoa(color)+"/")
	// A job id of its own keeps the new communicator's shared-memory files
	// and TCP handshakes apart from c's and from the other colors'.
	jobID := shortJobID(fmt.Sprintf("%s-s%dc%d", c.jobID, gen, color))
	ranks := make([]int, len(group))
	for i, m := range group {
		ranks[i] = m.rank
	}
	opts := append([]Option{WithRank(newRank), WithWorldSize(len(group)), WithStore(store),
		derived(c.root, c.book, c.rootsOf(ranks), jobID)}, c.splitOpts...)
	nc, err := Init(ctx, opts...)
	if err != nil {
		return fail(err)
	}
	return nc, nil
}
