package goccl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rendezvous"
)

// Keys of the root store (the store of the job's first Init) that joiners
// and growing communicators meet under.
const (
	joinTickets  = "goccl/join/tickets"  // counter: a joiner's ticket
	joinAdmitted = "goccl/join/admitted" // counter: tickets Grow has admitted
	joinTicket   = "goccl/join/ticket/"  // + ticket: where and as what rank it joins
)

// Grow makes a communicator of c's ranks and n new ones (ncclCommGrow,
// MPI_Comm_spawn's merge): c's ranks keep their numbers and the new ranks
// are c.Size() to c.Size()+n-1, in the order the joining processes called
// Join. Every live rank of c must call it; the n processes that join call
// Join against the same store (the job's: the store address and token of
// its environment, or WithStore). c stays as it was.
//
// The new communicator makes links of its own, as Split does, with c's
// options. Its result is the same on every rank of c: after the new
// communicator is made, c's ranks agree (Agree) that every one of them
// made it, else they all close it and fail, and they tell the joiners so.
// It waits for the joiners until ctx's deadline (else c's timeout).
func (c *Comm) Grow(ctx context.Context, n int) (*Comm, error) {
	if c == nil {
		return nil, nilComm("Grow")
	}
	fail := func(err error) (*Comm, error) { return nil, &Error{Rank: c.rank, Op: "Grow", Err: err} }
	if n < 1 {
		return fail(fmt.Errorf("%w: grow by %d ranks", ErrInvalidArgument, n))
	}
	if c.root == nil {
		return fail(fmt.Errorf("%w: a communicator of one rank made without a store cannot grow (give it one: WithStore or %s)", ErrInvalidArgument, config.StoreAddr.Name))
	}
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	g := c.grows.Add(1)
	base := fmt.Sprintf("goccl/grow/%s/%d/", c.jobID, g)
	jobID := shortJobID(fmt.Sprintf("%s-g%d", c.jobID, g))
	size := c.size + n
	// The new communicator's Init gets 3/4 of the time left, the
	// joiners' the same (admit tells them), so that a rank that died
	// leaves time to agree.
	dl, _ := ctx.Deadline()
	budget := time.Until(dl) * 3 / 4
	ictx, cancel := context.WithTimeout(ctx, budget)
	if c.rank == 0 {
		if err := c.admit(ctx, base, jobID, n, budget); err != nil {
			cancel()
			return fail(err)
		}
	}
	roots := append(slices.Clone(c.rootRanks), slices.Repeat([]int{-1}, n)...)
	nc, ierr := Init(ictx, append(slices.Clone(c.splitOpts), WithRank(c.rank), WithWorldSize(size),
		WithStore(c.derivedStore(base+"init/", roots)), derived(c.root, c.book, roots, jobID))...)
	cancel()
	ok := uint64(1)
	if ierr != nil {
		ok = 0
	}
	all, failed, err := c.Agree(ctx, ok)
	outcome := "ok"
	switch {
	case err != nil:
		outcome = fmt.Sprintf("rank %d: %v", c.rank, err)
	case all != 1 || len(failed) > 0:
		outcome = fmt.Sprintf("not every rank of the communicator made the new one (failed ranks %s; this rank: %v)", joinInts(failed), ierr)
	}
	if cr, isCr := c.root.(rendezvous.Creator); isCr {
		cr.Create(ctx, base+"outcome", []byte(outcome)) // the joiners learn the first outcome stored
	}
	if outcome != "ok" {
		if nc != nil {
			nc.Close()
		}
		return fail(errors.New(outcome))
	}
	return nc, nil
}

// JoinersWaiting is how many processes have called Join against c's job
// store and not yet been admitted by a Grow: a training loop's cue to grow
// (ddp's ShouldCommit asks it on rank 0). It reads two counters of the
// store.
func (c *Comm) JoinersWaiting(ctx context.Context) (int, error) {
	if c == nil {
		return 0, nilComm("JoinersWaiting")
	}
	if c.root == nil {
		return 0, nil
	}
	tickets, err := c.root.Add(ctx, joinTickets, 0)
	if err != nil {
		return 0, &Error{Rank: c.rank, Op: "JoinersWaiting", Err: c.storeErr("reading the joiners' tickets", err)}
	}
	admitted, err := c.root.Add(ctx, joinAdmitted, 0)
	if err != nil {
		return 0, &Error{Rank: c.rank, Op: "JoinersWaiting", Err: c.storeErr("reading the joiners admitted", err)}
	}
	return int(max(tickets-admitted, 0)), nil
}

// admit gives the next n joiners' tickets their place in grow base and
// the time their Init has (budget), and tells them the members' root ranks.
func (c *Comm) admit(ctx context.Context, base, jobID string, n int, budget time.Duration) error {
	if err := c.root.Set(ctx, base+"roots", []byte(joinInts(c.rootRanks))); err != nil {
		return c.storeErr("admitting the joiners", err)
	}
	last, err := c.root.Add(ctx, joinAdmitted, int64(n))
	if err != nil {
		return c.storeErr("admitting the joiners", err)
	}
	for i := range n {
		t := last - int64(n) + 1 + int64(i)
		v := fmt.Sprintf("%s;%d;%d;%s;%d", base, c.size+i, c.size+n, jobID, budget.Milliseconds())
		if err := c.root.Set(ctx, joinTicket+strconv.FormatInt(t, 10), []byte(v)); err != nil {
			return c.storeErr("admitting the joiners", err)
		}
	}
	return nil
}

// Joining reports whether this process was started to join a running job
// rather than to start one: goccl run --max-restarts starts a replacement
// for a failed rank with GOCCL_JOIN=1. Such a process calls Join, not Init,
// and the job's live ranks, having shrunk past the failure (Comm.Shrink),
// call Grow to take it in:
//
//	var c *goccl.Comm
//	if goccl.Joining() {
//		c, err = goccl.Join(ctx) // then receive the state from a live rank
//	} else {
//		c, err = goccl.Init(ctx)
//	}
//
// Init fails in such a process (unless given a store: WithStore).
func Joining() bool {
	b, err := config.Join.Bool()
	return err == nil && b
}

// Join makes this process a new rank of a communicator that grows (the
// ranks of a live communicator call Grow). It takes a ticket in the job's
// store, waits until a Grow admits it, and returns the grown communicator,
// in which it has rank c.Size()+i for the i-th joiner Grow admitted. The
// store is the one WithStore gives, else the job's at WithStoreAddr or
// GOCCL_STORE_ADDR, proving WithJobToken's or GOCCL_JOB_TOKEN's token.
// WithTimeout (else GOCCL_TIMEOUT, else the default) bounds the wait when
// ctx has no deadline. Once admitted, its Init has the time the growing
// ranks' has (3/4 of Grow's deadline), so that when their Grow fails this
// one fails with them, with their outcome. A joiner's death is not
// reported by the store (it has no rank there): a Grow whose joiner dies
// before the new communicator is made fails at the end of that time.
func Join(ctx context.Context, opts ...Option) (*Comm, error) {
	cfg := options{rank: -1, size: -1, localRank: -1}
	for _, o := range opts {
		o(&cfg)
	}
	fail := func(err error) (*Comm, error) { return nil, &Error{Rank: -1, Op: "Join", Err: err} }
	if _, ok := ctx.Deadline(); !ok {
		d := cfg.timeout
		if d <= 0 {
			d = DefaultTimeout
			if e, set, err := config.Timeout.Duration(); err == nil && set && e > 0 {
				d = e
			}
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	store, release, err := joinStore(ctx, &cfg)
	if err != nil {
		return fail(err)
	}
	t, err := store.Add(ctx, joinTickets, 1)
	if err != nil {
		release()
		return fail(fmt.Errorf("taking a ticket: %w", err))
	}
	// The losses of the communicator's ranks before this joiner came are
	// not its concern: it waits on past them.
	book := &lossBook{}
	v, err := memberLosses{store, book, nil, false}.Get(ctx, joinTicket+strconv.FormatInt(t, 10))
	if err != nil {
		release()
		return fail(fmt.Errorf("ticket %d: waiting for a communicator to grow (Comm.Grow): %w", t, err))
	}
	base, rank, size, jobID, budget, err := parseTicket(string(v))
	if err != nil {
		release()
		return fail(fmt.Errorf("ticket %d: %w", t, err))
	}
	var nc *Comm
	roots, err := joinRoots(ctx, store, base, size)
	if err == nil {
		// The growing ranks' Init has a deadline (Grow's); this one ends
		// about when theirs does, so that a Grow that failed (a joiner
		// died: the store cannot report its loss) fails here too.
		ictx, cancel := context.WithTimeout(ctx, budget)
		nc, err = Init(ictx, append(slices.Clone(opts), WithRank(rank), WithWorldSize(size),
			WithStore(memberLosses{rendezvous.PrefixStore(store, base+"init/"), book, roots, true}), derived(store, book, roots, jobID))...)
		cancel()
	}
	// The growing ranks' verdict, whether this rank's Init worked or not.
	if out, oerr := (memberLosses{store, book, nil, false}).Get(ctx, base+"outcome"); oerr != nil && err == nil {
		err = oerr
	} else if oerr == nil && string(out) != "ok" {
		err = fmt.Errorf("the communicator's ranks gave up: %s (this rank: %v)", out, err)
	}
	if err != nil {
		if nc != nil {
			nc.Close()
		}
		release()
		return fail(err)
	}
	nc.release = chainRelease(nc.release, release)
	return nc, nil
}

// joinStore is Join's store: WithStore's, or a client of the job's.
func joinStore(ctx context.Context, cfg *options) (rendezvous.Store, func(), error) {
	if cfg.store != nil {
		return cfg.store, func() {}, nil
	}
	addr := cmp.Or(cfg.storeAddr, config.StoreAddr.Get())
	if addr == "" {
		return nil, nil, fmt.Errorf("%w: no store to join through: WithStore, WithStoreAddr or %s", ErrInvalidArgument, config.StoreAddr.Name)
	}
	var ropts []rendezvous.Option
	if tok := cmp.Or(cfg.token, config.JobToken.Get()); tok != "" {
		ropts = append(ropts, rendezvous.WithToken([]byte(tok)))
	}
	s, err := rendezvous.DialTCP(ctx, addr, ropts...)
	if err != nil {
		return nil, nil, err
	}
	return s, func() { s.Close() }, nil
}

// joinRoots reads the root ranks of a grown communicator's size ranks
// (admit wrote those of the old ranks; the joiners' are -1).
func joinRoots(ctx context.Context, store rendezvous.Store, base string, size int) ([]int, error) {
	v, err := store.Get(ctx, base+"roots")
	if err != nil {
		return nil, err
	}
	roots := slices.Repeat([]int{-1}, size)
	for i, f := range strings.Split(string(v), ",") {
		r, err := strconv.Atoi(f)
		if err != nil || i >= size {
			return nil, fmt.Errorf("malformed root ranks %q in the store", v)
		}
		roots[i] = r
	}
	return roots, nil
}

// parseTicket reads what admit wrote: where and as what rank the joiner
// joins, and how long its Init may take.
func parseTicket(v string) (base string, rank, size int, jobID string, budget time.Duration, err error) {
	f := strings.Split(v, ";")
	if len(f) == 5 {
		rank, err = strconv.Atoi(f[1])
		if err == nil {
			size, err = strconv.Atoi(f[2])
		}
		var ms int64
		if err == nil {
			ms, err = strconv.ParseInt(f[4], 10, 64)
		}
		if err == nil && rank >= 0 && rank < size && ms > 0 {
			return f[0], rank, size, f[3], time.Duration(ms) * time.Millisecond, nil
		}
	}
	return "", 0, 0, "", 0, fmt.Errorf("malformed admission %q in the store", v)
}

// chainRelease is a release function that runs a, then b (either may be nil).
func chainRelease(a, b func()) func() {
	return func() {
		if a != nil {
			a()
		}
		if b != nil {
			b()
		}
	}
}
