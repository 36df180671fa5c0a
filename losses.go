package goccl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/goccl/goccl/rendezvous"
)

// The store tells each client of each lost rank once (a
// rendezvous.RankLostError on a Get or Wait that has to wait), numbering
// ranks as the job's first communicator does (its "root" ranks). The
// communicators a process derives from it (Split, Shrink, Grow, Join)
// number their ranks otherwise, and the news may come on any later wait,
// so every communicator keeps its ranks' root ranks (Comm.rootRanks: -1
// for a rank that joined, whose death the store cannot report) and the
// process keeps one book of the root ranks it learnt are dead.

// lossBook is the root ranks a process learnt are dead, shared by the
// communicators it derived from one root.
type lossBook struct {
	mu   sync.Mutex
	dead map[int]bool
}

func (b *lossBook) add(root int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dead == nil {
		b.dead = map[int]bool{}
	}
	b.dead[root] = true
}

func (b *lossBook) has(root int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return root >= 0 && b.dead[root]
}

// memberLosses is a communicator's view of the store: a Get or Wait that
// the store fails with the loss of a rank notes it in the book, and fails
// only when that rank is one of members (root ranks); otherwise it waits
// on.
type memberLosses struct {
	rendezvous.Store
	book    *lossBook
	members []int
	// initing: the view of an Init, which fails at once while the book
	// holds a member (the store told this process of it once, maybe on
	// another view's wait, and will not again); the communicator keeps a
	// copy without it (Comm.rdv, after Init), whose readers (Agree, the
	// health reports) deal with known losses themselves.
	initing bool
}

func (m memberLosses) Get(ctx context.Context, key string) ([]byte, error) {
	for {
		if err := m.deadMember(); err != nil {
			return nil, err
		}
		v, err := m.Store.Get(ctx, key)
		if !m.ignore(err) {
			return v, err
		}
	}
}

func (m memberLosses) Wait(ctx context.Context, keys ...string) error {
	for {
		if err := m.deadMember(); err != nil {
			return err
		}
		if err := m.Store.Wait(ctx, keys...); !m.ignore(err) {
			return err
		}
	}
}

// deadMember is, while initing, the loss of a member that the book knows of.
func (m memberLosses) deadMember() error {
	if !m.initing {
		return nil
	}
	for _, r := range m.members {
		if m.book.has(r) {
			return &rendezvous.RankLostError{Rank: r, Reason: "known lost earlier"}
		}
	}
	return nil
}

// Create implements rendezvous.Creator when the store does.
func (m memberLosses) Create(ctx context.Context, key string, value []byte) ([]byte, error) {
	cr, ok := m.Store.(rendezvous.Creator)
	if !ok {
		return nil, fmt.Errorf("rendezvous: the store (%T) cannot create keys atomically", m.Store)
	}
	return cr.Create(ctx, key, value)
}

// ignore reports whether err is the loss of a rank that is none of this
// view's business (noting it in the book).
func (m memberLosses) ignore(err error) bool {
	var lost *rendezvous.RankLostError
	if !errors.As(err, &lost) {
		return false
	}
	m.book.add(lost.Rank)
	return !slices.Contains(m.members, lost.Rank)
}

// derivedStore is the store of a communicator derived from c under prefix,
// whose members have root ranks roots.
func (c *Comm) derivedStore(prefix string, roots []int) rendezvous.Store {
	return memberLosses{rendezvous.PrefixStore(c.root, prefix), c.book, roots, true}
}

// rootsOf is the root ranks of c's ranks in ranks.
func (c *Comm) rootsOf(ranks []int) []int {
	roots := make([]int, len(ranks))
	for i, r := range ranks {
		roots[i] = c.rootRanks[r]
	}
	return roots
}

// derived sets what a communicator derived from c inherits: the root
// store, its ranks' root ranks, the book of losses, the job id.
func derived(root rendezvous.Store, book *lossBook, roots []int, jobID string) Option {
	return func(cfg *options) {
		cfg.root, cfg.book, cfg.rootRanks, cfg.jobID, cfg.split = root, book, roots, jobID, true
	}
}
