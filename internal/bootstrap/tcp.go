package bootstrap

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/rails"
)

// DefaultNSocks is the TCP sockets per peer and direction without
// GOCCL_NSOCKS_PERPEER (its declared default must agree). Two sockets each way: a 16 MiB AllReduce over
// loopback took a median 10 ms with 2 against 13-15 ms with 1 (4 was no
// better than 2).
const DefaultNSocks = 2

// tcpNet links any pair of ranks over the TCP endpoint whose address the
// cards carry (transport/tcp); it is the table's last row.
type tcpNet struct{ nsocks int }

func tcpFromEnv() (provider, error) {
	n, err := nsocksFromEnv()
	return tcpNet{nsocks: n}, err
}

// nsocksFromEnv reads GOCCL_NSOCKS_PERPEER: the sockets per peer and
// direction of every TCP link (also RoCE's control links).
func nsocksFromEnv() (int, error) {
	n, ok, err := config.NSocksPerPeer.Int()
	if !ok {
		n = DefaultNSocks
	}
	return n, err
}

func (tcpNet) usable(_, _ card) bool { return true }

func (t tcpNet) connect(ctx context.Context, b *boot, peers []bool) error {
	return b.dialEach(ctx, peers, func(ctx context.Context, r int) (transport.Link, error) {
		return b.dialRails(ctx, r, t.nsocks, func(ctx context.Context, i int, tag uint16) (transport.Link, error) {
			return b.rails[i].ep.ConnectTag(ctx, r, b.railAddr(r, i), t.nsocks, tag)
		})
	})
}

// dialRails makes the link to peer: dial's link over rail 0, or, where
// both ranks have several rails, a rails.Link over dial's link on each
// (rail i to the peer's rail i), with a control link per rail (TCP, nsocks
// sockets) for failover. A rail's traffic that moves dials its new link
// with a tag of its own (railTag): the rail's own kind of link when it
// moves back to its rail, a TCP link over the other rail's endpoint else.
func (b *boot) dialRails(ctx context.Context, peer, nsocks int, dial func(ctx context.Context, i int, tag uint16) (transport.Link, error)) (transport.Link, error) {
	n := b.railsTo(peer)
	if n == 1 {
		return dial(ctx, 0, 0)
	}
	rs := make([]rails.Rail, n)
	ctl := make([]transport.Link, n)
	errs := make([]error, 2*n)
	var wg sync.WaitGroup
	for i := range rs {
		rs[i].Iface = b.rails[i].iface.Name
		wg.Go(func() { rs[i].Link, errs[i] = dial(ctx, i, 0) })
		wg.Go(func() {
			ctl[i], errs[n+i] = b.rails[i].ep.ConnectTag(ctx, peer, b.railAddr(peer, i), 1, railControlTag)
		})
	}
	wg.Wait()
	err := errors.Join(errs...)
	var l *rails.Link
	if err == nil {
		l, err = rails.New(rs, rails.Options{
			Self:    b.p.Rank,
			Control: ctl,
			Dial: func(ctx context.Context, lane, rail, gen int) (transport.Link, error) {
				tag := railTag(lane, gen, n)
				if rail == lane {
					return dial(ctx, rail, tag)
				}
				return b.rails[rail].ep.ConnectTag(ctx, peer, b.railAddr(peer, rail), nsocks, tag)
			},
			Log: func(level slog.Level, msg string) {
				b.p.Log(level, "NET", []slog.Attr{slog.Int("peer", peer)}, "%s", msg)
			},
		})
	}
	if err != nil {
		for i, r := range rs {
			for _, l := range []transport.Link{r.Link, ctl[i]} {
				if l != nil {
					l.Close()
				}
			}
		}
		return nil, err
	}
	return l, nil
}

// railControlTag tags a rails link's control links (tcp.ConnectTag; 0 is
// the ordinary links').
const railControlTag = 1

// railTag tags the link of lane's gen-th move, of n lanes: a tag no other
// link of the pair uses while it is dialed.
func railTag(lane, gen, n int) uint16 { return uint16(2 + (gen*n+lane)%(1<<16-2)) }

// dialEach runs dial, in parallel, for every peer marked in peers and
// keeps the links in b.links; a peer lost or giving up meanwhile ends it
// (watched).
func (b *boot) dialEach(ctx context.Context, peers []bool, dial func(ctx context.Context, r int) (transport.Link, error)) error {
	if !slices.Contains(peers, true) {
		return nil
	}
	return b.watched(ctx, func(ctx context.Context) error { return b.dialAll(ctx, peers, dial) })
}

func (b *boot) dialAll(ctx context.Context, peers []bool, dial func(ctx context.Context, r int) (transport.Link, error)) error {
	var wg sync.WaitGroup
	errs := make([]error, len(peers))
	for r, ok := range peers {
		if !ok {
			continue
		}
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			b.links[r], errs[r] = dial(ctx, r)
		}(r)
	}
	wg.Wait()
	return errors.Join(errs...)
}
