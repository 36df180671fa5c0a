package gloo

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goccl/goccl/rendezvous"
)

// Group is this process's membership, as one rank, of a torch.distributed
// process group of the Gloo backend (torch's ProcessGroupGloo). It is safe
// for concurrent use; its operations run one at a time, in call order, as
// they must be called in the same order on every rank.
type Group struct {
	rank, size int
	pairs      []*pair // by rank, nil at this rank
	hostname   string
	localRank  int
	seqNum     uint64

	mu     sync.Mutex // serializes operations
	tag    uint32     // the next collective's tag (torch's collectiveCounter_)
	failed error      // the error that ended the group

	closers []func() error // stores this group owns (JoinEnv)
}

// Option configures Join.
type Option func(*options)

type options struct {
	ip         net.IP
	ifname     string
	groupName  string
	barrierKey string
	maxMsg     uint64
}

// WithListenIP makes this rank's pairs listen on ip instead of the address
// chosen as torch chooses it (see Join).
func WithListenIP(ip net.IP) Option { return func(o *options) { o.ip = ip } }

// WithInterface makes this rank's pairs listen on the first address of the
// named network interface, as GLOO_SOCKET_IFNAME does for Python ranks.
func WithInterface(name string) Option { return func(o *options) { o.ifname = name } }

// WithGroupName sets the name torch gave the process group, the prefix of
// its keys in the store: "0" (the default) is the first group a job creates,
// the default group of init_process_group.
func WithGroupName(name string) Option { return func(o *options) { o.groupName = name } }

// WithBarrierKey sets the key of torch's store-based barrier that ends the
// group's creation: "store_based_barrier_key:1" (the default) for the
// default group.
func WithBarrierKey(key string) Option { return func(o *options) { o.barrierKey = key } }

// WithMaxMessage bounds the payload of one message a peer may send (default
// 1 GiB); a larger announced size fails the pair instead of being read.
func WithMaxMessage(n uint64) Option { return func(o *options) { o.maxMsg = n } }

// Join makes this process rank `rank` of a Gloo process group of `size`
// ranks whose other ranks are PyTorch processes (init_process_group with
// backend "gloo") or other Go processes calling Join, and returns once
// every rank has joined.
//
// store must be the store the Python ranks' init_process_group works on:
// for init_method "env://" or "tcp://", the c10d TCPStore wrapped in
// PrefixStore("default_pg") (so pass rendezvous.PrefixStore(tcpStore,
// "default_pg/"), or use JoinEnv, which does all of this); for
// init_process_group(store=s), s itself. It follows torch 1.13's
// ProcessGroupGloo and Gloo's rendezvous::Context::connectFullMesh:
//
//   - under "<group>/0/" it sets "rank_<rank>" to this host's name and
//     "<rank>" to the addresses of its listening sockets, one per peer
//     (136-byte tcp::Address records), then connects to each peer's
//     socket or accepts the peer's connection (the side with the larger
//     address connects);
//   - it then joins torch's store-based barrier (Add 1 to
//     "store_based_barrier_key:1", then waits for the count to reach size)
//     and, on rank 0, sets "<group>/SEQ_NUM_STORE_KEY" (other ranks read it).
//
// The listening address is, as torch chooses it: WithListenIP, else the
// interface WithInterface or GLOO_SOCKET_IFNAME names (one interface: a
// list of several, which makes torch open several Gloo devices, is an
// error), else the first address this host's name resolves to that can be
// bound, else 127.0.0.1.
//
// Gloo's protocol has no authentication: run it on a network you trust,
// as torch does.
func Join(ctx context.Context, store rendezvous.Store, rank, size int, opts ...Option) (*Group, error) {
	o := options{groupName: "0", barrierKey: "store_based_barrier_key:1", maxMsg: 1 << 30}
	for _, f := range opts {
		f(&o)
	}
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("gloo: join: rank %d of world size %d: %w", rank, size, ErrInvalidArgument)
	}
	if store == nil {
		return nil, fmt.Errorf("gloo: join: rank %d: nil store: %w", rank, ErrInvalidArgument)
	}
	g := &Group{rank: rank, size: size, pairs: make([]*pair, size)}
	fail := func(step string, err error) (*Group, error) {
		for _, p := range g.pairs {
			if p != nil {
				p.shutdown(ErrClosed)
			}
		}
		return nil, fmt.Errorf("gloo: join: rank %d of %d: %s: %w", rank, size, step, err)
	}
	ip, err := listenIP(o)
	if err != nil {
		return fail("listen address", err)
	}
	g.hostname, _ = os.Hostname()
	dev := rendezvous.PrefixStore(store, o.groupName+"/0/")
	if err := dev.Set(ctx, "rank_"+strconv.Itoa(rank), []byte(g.hostname)); err != nil {
		return fail("store", err)
	}
	for i := 0; i < rank; i++ {
		h, err := dev.Get(ctx, "rank_"+strconv.Itoa(i))
		if err != nil {
			return fail(fmt.Sprintf("host name of rank %d", i), err)
		}
		if string(h) == g.hostname {
			g.localRank++
		}
	}
	if err := g.connectFullMesh(ctx, dev, ip, o.maxMsg); err != nil {
		return fail("connect", err)
	}
	if err := storeBarrier(ctx, store, o.barrierKey, size); err != nil {
		return fail("store-based barrier", err)
	}
	grp := rendezvous.PrefixStore(store, o.groupName+"/")
	const seqKey = "SEQ_NUM_STORE_KEY"
	if rank == 0 {
		var b [8]byte
		rand.Read(b[:4]) // torch draws a 32-bit random number
		g.seqNum = binary.LittleEndian.Uint64(b[:])
		err = grp.Set(ctx, seqKey, b[:])
	} else {
		var b []byte
		if b, err = grp.Get(ctx, seqKey); err == nil && len(b) == 8 {
			g.seqNum = binary.LittleEndian.Uint64(b)
		}
	}
	if err != nil {
		return fail("sequence number", err)
	}
	return g, nil
}

// connectFullMesh publishes a listening socket per peer and connects every
// pair, all peers at once (a Python rank connects its pairs one at a time in
// rank order; doing ours concurrently keeps that order from deadlocking).
func (g *Group) connectFullMesh(ctx context.Context, dev rendezvous.Store, ip net.IP, maxMsg uint64) error {
	lns := make([]*net.TCPListener, g.size)
	defer func() {
		for _, ln := range lns {
			if ln != nil {
				ln.Close()
			}
		}
	}()
	var all []byte
	self := make([]pairAddr, g.size)
	for i := 0; i < g.size; i++ {
		if i == g.rank {
			continue
		}
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip})
		if err != nil {
			return fmt.Errorf("listen on %s for peer rank %d: %w", ip, i, err)
		}
		lns[i] = ln
		port := ln.Addr().(*net.TCPAddr).Port
		b := encodeAddr(ip, port)
		self[i], _ = decodeAddr(b)
		all = append(all, b...)
	}
	if g.size == 1 {
		return nil
	}
	if err := dev.Set(ctx, strconv.Itoa(g.rank), all); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, g.size)
	conns := make([]net.Conn, g.size)
	var wg sync.WaitGroup
	for i := 0; i < g.size; i++ {
		if i == g.rank {
			continue
		}
		wg.Add(1)
		go func(peer int) {
			defer wg.Done()
			c, err := g.connectPair(ctx, dev, peer, self[peer], lns[peer])
			if err != nil {
				errs[peer] = fmt.Errorf("peer rank %d: %w", peer, err)
				cancel()
				return
			}
			conns[peer] = c
		}(i)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return err
	}
	for i, c := range conns {
		if c != nil {
			g.pairs[i] = newPair(g.rank, i, c, maxMsg)
		}
	}
	return nil
}

// connectPair reads the peer's addresses and connects to the peer's socket
// for this rank, or accepts the peer's connection on ln.
func (g *Group) connectPair(ctx context.Context, dev rendezvous.Store, peer int, self pairAddr, ln *net.TCPListener) (net.Conn, error) {
	all, err := dev.Get(ctx, strconv.Itoa(peer))
	if err != nil {
		return nil, fmt.Errorf("its addresses: %w", err)
	}
	addr, err := extractAddr(all, peer, g.rank, g.size)
	if err != nil {
		return nil, err
	}
	client, err := connects(self, addr)
	if err != nil {
		return nil, err
	}
	if client {
		var d net.Dialer
		for {
			c, err := d.DialContext(ctx, "tcp", addr.String())
			if err == nil {
				return c, nil
			}
			// The peer's socket listens from before it published its
			// address, so a refusal is final unless ctx allows a retry
			// (a restarted listener); retry briefly.
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("connect to %s: %w (last error: %v)", addr, ctx.Err(), err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	stop := context.AfterFunc(ctx, func() { ln.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("wait for its connection to %s: %w", ln.Addr(), ctx.Err())
		}
		return nil, err
	}
	return c, nil
}

// storeBarrier is torch's _store_based_barrier: every rank adds one to key,
// then polls the count (Add 0) every 10 ms until it reaches size.
func storeBarrier(ctx context.Context, store rendezvous.Store, key string, size int) error {
	n, err := store.Add(ctx, key, 1)
	for err == nil && n < int64(size) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d ranks arrived at %q: %w", n, size, key, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
		n, err = store.Add(ctx, key, 0)
	}
	return err
}

// listenIP picks the address this rank's pairs listen on (see Join).
func listenIP(o options) (net.IP, error) {
	if o.ip != nil {
		return o.ip, nil
	}
	ifname := o.ifname
	if ifname == "" {
		ifname = os.Getenv("GLOO_SOCKET_IFNAME")
		if strings.Contains(ifname, ",") {
			return nil, fmt.Errorf("GLOO_SOCKET_IFNAME=%q names several interfaces (several Gloo devices); goccl's gloo joins groups of one device: set one interface", ifname)
		}
	}
	if ifname != "" {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return nil, fmt.Errorf("interface %q: %w", ifname, err)
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("interface %q: %w", ifname, err)
		}
		var v6 net.IP
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if n.IP.To4() != nil {
					return n.IP.To4(), nil
				}
				if v6 == nil {
					v6 = n.IP
				}
			}
		}
		if v6 != nil {
			return v6, nil
		}
		return nil, fmt.Errorf("interface %q has no IP address", ifname)
	}
	// torch's createDefaultDevice: the host name's address if one can be
	// bound, else the loopback address.
	if h, err := os.Hostname(); err == nil {
		if ips, err := net.LookupIP(h); err == nil {
			for _, ip := range ips {
				if ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip}); err == nil {
					ln.Close()
					if ip4 := ip.To4(); ip4 != nil {
						return ip4, nil
					}
					return ip, nil
				}
			}
		}
	}
	return net.IPv4(127, 0, 0, 1).To4(), nil
}

// Rank is this process's rank in the group.
func (g *Group) Rank() int { return g.rank }

// Size is the number of ranks in the group.
func (g *Group) Size() int { return g.size }

// LocalRank is the number of lower ranks whose host name is this host's
// (what Gloo computes from the "rank_<r>" keys).
func (g *Group) LocalRank() int { return g.localRank }

// BytesSent and BytesReceived count the payload bytes this rank sent to and
// received from peer (0 for itself).
func (g *Group) BytesSent(peer int) uint64 {
	if peer < 0 || peer >= g.size || g.pairs[peer] == nil {
		return 0
	}
	return g.pairs[peer].sent.Load()
}

// BytesReceived: see BytesSent.
func (g *Group) BytesReceived(peer int) uint64 {
	if peer < 0 || peer >= g.size || g.pairs[peer] == nil {
		return 0
	}
	return g.pairs[peer].received.Load()
}

// Close closes every connection (peers see this rank leave) and the stores
// JoinEnv opened. Operations in progress fail with ErrClosed.
func (g *Group) Close() error {
	g.abort(ErrClosed)
	var errs []error
	for i := len(g.closers) - 1; i >= 0; i-- {
		errs = append(errs, g.closers[i]())
	}
	g.closers = nil
	return errors.Join(errs...)
}

// abort ends every pair with err and waits for their goroutines, so no
// buffer of a failed operation is touched after its call returns.
func (g *Group) abort(err error) {
	for _, p := range g.pairs {
		if p != nil {
			p.fail(err)
		}
	}
	for _, p := range g.pairs {
		if p != nil {
			p.wg.Wait()
		}
	}
}
