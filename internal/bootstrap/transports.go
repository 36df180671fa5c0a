package bootstrap

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/transport/roce"
)

// table is the transports in order of preference (NCCL's ncclTransports):
// each peer is linked by the first whose usable says yes; one that hands a
// peer back (shared memory whose rings could not be made) passes it on to
// the next usable one. Each entry reads its own variables (internal/config).
var table = []func() (provider, error){
	shmFromEnv,
	roceFromEnv,
	tcpFromEnv,
}

// A provider is one transport, a row of the table, configured from the
// environment. It holds settings only: what one Connect makes lives in boot.
type provider interface {
	// usable reports whether it can link this rank (card me) to peer.
	usable(me, peer card) bool
	// connect links this rank to the peers marked in peers (b.links) and
	// clears the marks of those it hands back. Every rank calls it, with
	// or without peers, at the same point of Connect (a row may meet its
	// peers in the store). It records what it opened in b.closers and
	// what it offers besides links in b.caps.
	connect(ctx context.Context, b *boot, peers []bool) error
}

// Transports is the table configured from the environment by FromEnv.
type Transports struct{ rows []provider }

// FromEnv reads every transport's variables. An error names the variable
// and its value.
func FromEnv() (*Transports, error) {
	t := &Transports{}
	for _, row := range table {
		tr, err := row()
		if err != nil {
			return nil, err
		}
		t.rows = append(t.rows, tr)
	}
	return t, nil
}

// link runs the table over b.cards: it gives each peer to the first usable
// row and connects row by row.
func (t *Transports) link(ctx context.Context, b *boot, me card) error {
	cards := b.cards
	pending := make([]bool, len(cards)) // peers not linked yet
	for r := range pending {
		pending[r] = r != b.p.Rank
	}
	for _, tr := range t.rows {
		peers := make([]bool, len(cards))
		for r, ok := range pending {
			peers[r] = ok && tr.usable(me, cards[r])
		}
		if err := tr.connect(ctx, b, peers); err != nil {
			return err
		}
		for r, ok := range peers {
			if ok {
				pending[r] = false
			}
		}
	}
	for r, ok := range pending {
		if ok {
			return fmt.Errorf("no transport links rank %d to rank %d", b.p.Rank, r)
		}
	}
	return nil
}

// Caps is what the transports offer besides links, asked for by type with
// Cap: a Registrar (memory registration), a *OneSided (one-sided access to
// peers' memory).
type Caps []any

// Cap returns the first of caps that is a T.
func Cap[T any](caps Caps) (T, bool) {
	for _, c := range caps {
		if v, ok := c.(T); ok {
			return v, true
		}
	}
	var zero T
	return zero, false
}

// Registrar registers memory with a transport, whose links then send from
// and receive into it without staging copies (NCCL's ncclCommRegister).
type Registrar interface {
	// Register registers b; the error wraps ErrOverlap when b overlaps a
	// registered buffer.
	Register(b []byte) (Region, error)
}

// Region is memory a Registrar registered.
type Region interface {
	// Deregister ends the registration; the error wraps ErrInUse while an
	// operation sends from or receives into it.
	Deregister() error
}

// The errors a Registrar's registrations wrap.
var (
	ErrOverlap = roce.ErrOverlap
	ErrInUse   = roce.ErrInUse
)

// OneSided is one-sided access to peers' memory over RoCE (symmetric
// windows, in-network aggregation): the device's domain and the peers whose
// links run over it.
type OneSided struct {
	Domain *roce.Domain
	Peers  []bool // by rank
}
