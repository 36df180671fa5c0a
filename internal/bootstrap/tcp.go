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
		return b.dialRails(ctx, r, func(ctx context.Context, i int) (transport.Link, error) {
			return b.rails[i].ep.Connect(ctx, r, b.railAddr(r, i), t.nsocks)
		})
	})
}

// dialRails makes the link to peer: dial's link over rail 0, or, where
// both ranks have several rails, a rails.Link over dial's link on each
// (rail i to the peer's rail i).
func (b *boot) dialRails(ctx context.Context, peer int, dial func(ctx context.Context, i int) (transport.Link, error)) (transport.Link, error) {
	n := b.railsTo(peer)
	if n == 1 {
		return dial(ctx, 0)
	}
	rs := make([]rails.Rail, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs[i].Iface = b.rails[i].iface.Name
			rs[i].Link, errs[i] = dial(ctx, i)
		}()
	}
	wg.Wait()
	err := errors.Join(errs...)
	var l *rails.Link
	if err == nil {
		l, err = rails.New(rs, rails.Options{Log: func(level slog.Level, msg string) {
			b.p.Log(level, "NET", []slog.Attr{slog.Int("peer", peer)}, "%s", msg)
		}})
	}
	if err != nil {
		for _, r := range rs {
			if r.Link != nil {
				r.Link.Close()
			}
		}
		return nil, err
	}
	return l, nil
}

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
