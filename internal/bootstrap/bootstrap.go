// Package bootstrap connects one rank of a communicator to every other rank:
// store + rank → one transport.Link per peer, through a table of transports.
//
// Connect publishes the rank's address card (host identity, TCP endpoint,
// process id) in the store, reads everyone's, and gives each peer to the
// first transport of the table (transports.go, NCCL's ncclTransports) that
// can reach it: shared memory on one host (shm.go), RoCE with GOCCL_NET=roce
// (roce.go), TCP (tcp.go). Each transport reads its own GOCCL_* variables
// through internal/config (FromEnv); what one offers besides links (memory
// registration, one-sided access) comes back as Result.Caps. The package
// knows nothing of communicators or collectives: the caller passes plain
// parameters (Params) and gets the links back (Result).
package bootstrap

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/topo"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/tcp"
)

// Params describes this rank and how it links to the others.
type Params struct {
	Rank, Size int
	// LocalRank is the rank among the ranks on this host; -1: this rank's
	// position among the ranks whose address cards name the same host.
	LocalRank int

	// Store is the store the ranks meet through; nil: Connect connects to
	// the one Env names (rank 0 serves it) with Env.Rank, Env.WorldSize
	// and Env.Token set from these Params, and closes it with Result.Release.
	Store rendezvous.Store
	Env   rendezvous.Env
	// Token is the job's shared secret ("": none): the store and every TCP
	// link prove it.
	Token string
	// JobID names the job's shared-memory files and TCP handshakes; rank 0
	// makes a random one when it is empty, and every rank uses rank 0's.
	JobID string

	Iface    string // the network interface to use ("": tcp.SelectInterface's choice)
	HostID   string // this rank's host identity (GOCCL_HOSTID); "" to detect it (hostIdentity)
	Checksum bool   // CRC32C on every TCP chunk
	// Transports is the table of transports with their settings (nil:
	// Connect reads them with FromEnv).
	Transports *Transports

	// TLS for the TCP links: TLSServer and TLSClient when set (both); else,
	// with MakeTLS, configurations made from CertFile, KeyFile and CAFile
	// (all three, or none: then from keys derived from Token).
	TLSServer, TLSClient      *tls.Config
	MakeTLS                   bool
	CertFile, KeyFile, CAFile string

	// Reuse holds, by this job's rank, links of an earlier communicator
	// between this process and that rank's (nil where none): a transport
	// that can take its link back makes the new link over its resources
	// instead of new ones (shared memory: the rings, see connectShm), and
	// the earlier link is closed. Comm.Shrink passes the survivors' links.
	Reuse []transport.Link

	// Log makes a log record (nil: discard) at level (slog.LevelWarn,
	// LevelInfo, or LevelDebug for TRACE) of subsystem sub ("BOOTSTRAP":
	// the store; "NET": TCP links; "SHM": shared memory) with attributes
	// attrs (peer) and the message format and args make.
	Log func(level slog.Level, sub string, attrs []slog.Attr, format string, args ...any)
}

// Result is what a communicator keeps from Connect.
type Result struct {
	Links     []transport.Link // by rank; nil at Rank
	LocalRank int
	// HostKeys holds each rank's host identity: equal for ranks on one host.
	HostKeys []string
	// Pids holds each rank's process id (in its host's view).
	Pids  []int
	JobID string
	// Store is the store the ranks met through (Params.Store or the one
	// Connect made), for later exchanges (Split).
	Store rendezvous.Store
	// Release closes what Connect made besides the links: the TCP endpoint,
	// then the store it connected to, if any. Call it once, after closing
	// the links.
	Release func()
	// TLSServer and TLSClient are the TLS configurations of the TCP links
	// (nil: plain TCP).
	TLSServer, TLSClient *tls.Config
	// Caps is what the transports offer besides links (Cap): a Registrar
	// and a *OneSided with GOCCL_NET=roce and a device opened.
	Caps Caps
	// StoreReady and CardsRead are when the store was reached and when every
	// address card had been read (for the caller's timing log).
	StoreReady, CardsRead time.Time
}

// Connect links this rank to every other rank of the job, or returns an
// error: the ranks whose address cards never arrived before ctx ended, a
// *transport.LostError for a rank the store saw die (or rank 0, when the
// store it serves goes away), or the failure of a store call or a link.
// On failure it closes everything it made.
func Connect(ctx context.Context, p Params) (res *Result, err error) {
	if p.Log == nil {
		p.Log = func(slog.Level, string, []slog.Attr, string, ...any) {}
	}
	b := &boot{p: p, links: make([]transport.Link, p.Size)}
	n := startNotice(ctx, &p)
	defer func() {
		n.done()
		if err != nil {
			err = b.fail(err)
		}
	}()
	tr := p.Transports
	if tr == nil {
		if tr, err = FromEnv(); err != nil {
			return nil, err
		}
	}
	ifaces, err := tcp.SelectInterfaces(p.Iface)
	if err != nil {
		return nil, err
	}
	iface := ifaces[0]
	b.iface = iface

	// The store.
	store := p.Store
	if store == nil {
		env := p.Env
		env.Rank, env.WorldSize, env.Token = p.Rank, p.Size, p.Token
		gen := nextGeneration(env)
		n.phase("%s", storeWhere(env, p.Rank))
		if b.made, err = rendezvous.Connect(ctx, env, iface.IP.String(), rendezvous.WithLog(p.warnf("BOOTSTRAP")), rendezvous.WithGeneration(gen)); err != nil {
			return nil, fmt.Errorf("connecting to the rendezvous store: %w", err)
		}
		store = b.made
	}
	b.store = store
	res = &Result{Store: store, LocalRank: p.LocalRank, StoreReady: time.Now()}

	// The address cards.
	if res.JobID, err = b.makeJobID(ctx, store); err != nil {
		return nil, err
	}
	b.jobID = res.JobID
	epOpts, err := b.endpointOptions(res)
	if err != nil {
		return nil, err
	}
	if b.ep, err = tcp.Listen(p.Rank, iface.IP, res.JobID, epOpts...); err != nil {
		return nil, err
	}
	b.rails = []rail{{b.iface, b.ep}}
	for _, ifc := range ifaces[1:] {
		ep, err := tcp.Listen(p.Rank, ifc.IP, res.JobID, epOpts...)
		if err != nil {
			return nil, fmt.Errorf("rail %s: %w", ifc.Name, err)
		}
		b.rails = append(b.rails, rail{ifc, ep})
	}
	hostID, err := hostIdentity(p.HostID)
	if err != nil {
		return nil, err
	}
	me := card{Host: hostID, Addr: b.ep.Addr(), Pid: os.Getpid()}
	for _, r := range b.rails[1:] {
		me.Rails = append(me.Rails, r.ep.Addr())
	}
	if err := store.Set(ctx, cardKey(p.Rank), []byte(me.String())); err != nil {
		return nil, err
	}
	cards := make([]card, p.Size)
	n.phase("the address cards of the %d ranks in the store", p.Size)
	for r := range cards {
		n.set("the address card of rank %d in the store (%d of %d read; the ranks missing are named at the deadline)", r, r, p.Size)
		v, err := store.Get(ctx, cardKey(r))
		if err != nil {
			return nil, b.missingRanks(ctx, store, err)
		}
		if cards[r], err = parseCard(string(v)); err != nil {
			return nil, fmt.Errorf("rank %d published a bad address card: %w", r, err)
		}
	}
	if res.LocalRank < 0 {
		res.LocalRank = 0
		for r := 0; r < p.Rank; r++ {
			if cards[r].Host == me.Host {
				res.LocalRank++
			}
		}
	}
	res.CardsRead = time.Now()
	res.HostKeys, res.Pids = make([]string, p.Size), make([]int, p.Size)
	for r := range cards {
		res.HostKeys[r], res.Pids[r] = cards[r].Host, cards[r].Pid
	}

	// The links.
	b.cards = cards
	n.phase("links to the %d other ranks", p.Size-1)
	if err := tr.link(ctx, b, me); err != nil {
		return nil, err
	}
	for r, l := range b.links {
		if l != nil {
			sub := "NET"
			if strings.HasPrefix(l.Name(), "shm") {
				sub = "SHM"
			}
			p.Log(slog.LevelInfo, sub, []slog.Attr{slog.Int("peer", r), slog.String("transport", l.Name())}, "peer %d via %s", r, l.Name())
		}
	}
	res.Links, res.Caps = b.links, b.caps
	rails, made, closers := b.rails, b.made, b.closers
	res.Release = func() {
		for _, r := range rails {
			r.ep.Close()
		}
		closeAll(closers)
		if made != nil {
			made.Close()
		}
	}
	return res, nil
}

// warnf is a printf-style logger of warnings of subsystem sub.
func (p *Params) warnf(sub string) func(format string, args ...any) {
	return func(format string, args ...any) { p.Log(slog.LevelWarn, sub, nil, format, args...) }
}

// generations counts, per rendezvous (store address, address file, or etcd
// URL and job id; rank and world size), the Connect calls of this process that made their store.
var generations struct {
	sync.Mutex
	n map[string]uint64
}

// nextGeneration returns the count of this process's Connect calls that
// meet at env's store, this one included (1, 2, ...), for
// rendezvous.WithGeneration. Rank 0 serves every such store at the same
// address, so a rank that connects again (a later Init) may reach rank 0's
// previous store, still up until rank 0's Close; the generation makes it
// wait for the new one. All ranks call Init the same number of times (as
// every rank calls ncclCommInitRank for each communicator), so the counts
// agree. The count is per rank so that ranks run as goroutines of one
// process (tests) each have their own.
func nextGeneration(env rendezvous.Env) uint64 {
	where := env.StoreAddr
	switch {
	case env.Etcd != "":
		where = env.Etcd + "|" + env.JobID
	case where == "":
		where = rendezvous.AddrFilePath(env)
	}
	key := fmt.Sprintf("%s|%d|%d", where, env.Rank, env.WorldSize)
	generations.Lock()
	defer generations.Unlock()
	if generations.n == nil {
		generations.n = make(map[string]uint64)
	}
	generations.n[key]++
	return generations.n[key]
}

// boot is one Connect call's state.
type boot struct {
	p       Params
	made    rendezvous.Store // the store Connect connected to, if any
	store   rendezvous.Store // the store the ranks meet through
	jobID   string
	iface   tcp.Interface // the TCP endpoint's interface (rail 0's)
	ep      *tcp.Endpoint
	rails   []rail // rails[0] is iface and ep
	cards   []card // by rank
	links   []transport.Link
	closers []func() error // what the transports opened besides links (a device)
	caps    Caps
}

// rail is one of this rank's rails (GOCCL_SOCKET_IFNAME naming several
// interfaces): an interface and a TCP endpoint on it.
type rail struct {
	iface tcp.Interface
	ep    *tcp.Endpoint
}

// railsTo is how many rails link this rank to peer: rail i to the peer's
// rail i, as many as both have.
func (b *boot) railsTo(peer int) int { return min(len(b.rails), 1+len(b.cards[peer].Rails)) }

// railAddr is the address of peer's rail i endpoint.
func (b *boot) railAddr(peer, i int) string {
	if i == 0 {
		return b.cards[peer].Addr
	}
	return b.cards[peer].Rails[i-1]
}

// closeAll calls the closers, last first.
func closeAll(closers []func() error) {
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
}

// fail closes what Connect made and names a lost rank in err when it shows
// one: a rank the store saw die, or rank 0 (which serves the store) gone
// from under this rank.
func (b *boot) fail(err error) error {
	Abandon(b.store, b.jobID, b.p.Rank, err) // the others need not wait for this rank's links
	for _, l := range b.links {
		if l != nil {
			l.Close()
		}
	}
	if b.ep != nil && len(b.rails) == 0 {
		b.ep.Close()
	}
	for _, r := range b.rails {
		r.ep.Close()
	}
	closeAll(b.closers)
	if b.made != nil {
		b.made.Close()
	}
	var rl *rendezvous.RankLostError
	switch {
	case errors.Is(err, transport.ErrPeerLost):
	case errors.As(err, &rl):
		err = &transport.LostError{Rank: rl.Rank, Via: -1, Cause: errors.New(rl.Reason)}
	case b.p.Rank != 0 && b.p.Store == nil && storeServerGone(err):
		err = &transport.LostError{Rank: 0, Via: -1, Cause: fmt.Errorf("the store it served is gone: %w", err)}
	}
	return err
}

// makeJobID returns the job id, made by rank 0, published and read by the
// others: Params.JobID with a random suffix, or a random one. The suffix
// makes every Connect's id its own, so that successive or concurrent
// communicators of one job (Init again, Init with WithStore) never share
// shared-memory ring names or TCP handshakes.
func (b *boot) makeJobID(ctx context.Context, store rendezvous.Store) (string, error) {
	if b.p.Rank != 0 {
		v, err := store.Get(ctx, "goccl/jobid")
		if err != nil {
			return "", b.missingRanks(ctx, store, err)
		}
		return string(v), nil
	}
	var r [8]byte
	rand.Read(r[:])
	id := hex.EncodeToString(r[:])
	if b.p.JobID != "" {
		id = b.p.JobID + "-" + id
		if len(id) > 100 { // the TCP handshake takes at most 128 bytes
			sum := sha256.Sum256([]byte(id))
			id = hex.EncodeToString(sum[:16])
		}
	}
	return id, store.Set(ctx, "goccl/jobid", []byte(id))
}

// endpointOptions are the TCP endpoint's options: the job token, the log,
// checksums and TLS. It records the TLS configurations in res.
func (b *boot) endpointOptions(res *Result) ([]tcp.EndpointOption, error) {
	p := &b.p
	opts := []tcp.EndpointOption{tcp.WithToken([]byte(p.Token)), tcp.WithLog(p.warnf("NET")),
		tcp.WithDebugLog(func(format string, args ...any) { p.Log(slog.LevelInfo, "NET", nil, format, args...) })}
	if p.Checksum {
		opts = append(opts, tcp.WithChecksum())
	}
	server, client := p.TLSServer, p.TLSClient
	if server == nil && client == nil && p.MakeTLS {
		var err error
		if p.CertFile != "" {
			server, client, err = tcp.FileTLS(p.CertFile, p.KeyFile, p.CAFile)
		} else {
			server, client, err = tcp.JobTLS([]byte(p.Token))
		}
		if err != nil {
			return nil, err
		}
	}
	if server != nil {
		opts = append(opts, tcp.WithTLS(server, client))
	}
	res.TLSServer, res.TLSClient = server, client
	return opts, nil
}

// missingRanks turns a store timeout into an error that names the ranks whose
// address card never arrived.
func (b *boot) missingRanks(ctx context.Context, store rendezvous.Store, err error) error {
	if ctx.Err() == nil {
		return err
	}
	var missing []string
	for r := 0; r < b.p.Size && len(missing) < 16; r++ {
		qctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		if _, gerr := store.Get(qctx, cardKey(r)); gerr != nil {
			missing = append(missing, strconv.Itoa(r))
		}
		cancel()
	}
	if len(missing) == 0 {
		return err
	}
	return fmt.Errorf("world size %d not reached: no word from rank(s) %s: %w", b.p.Size, strings.Join(missing, ","), err)
}

// storeServerGone reports whether a store call failed because the
// connection to rank 0's server broke or was refused after it had worked,
// or another server now answers at its address (not because a deadline
// expired first).
func storeServerGone(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) || errors.Is(err, rendezvous.ErrReplaced)
}

// cardKey is the store key of rank r's address card.
func cardKey(r int) string { return "goccl/card/" + strconv.Itoa(r) }

// card is what each rank publishes in the store.
type card struct {
	Host  string // host identity: same value means shared memory works
	Addr  string // TCP endpoint (rail 0's)
	Pid   int
	Rails []string // the TCP endpoints of rails 1, 2, ...
}

// String is "host|addr|pid", then "|" and the other rails' addresses,
// comma-separated, when there are any.
func (c card) String() string {
	s := c.Host + "|" + c.Addr + "|" + strconv.Itoa(c.Pid)
	if len(c.Rails) > 0 {
		s += "|" + strings.Join(c.Rails, ",")
	}
	return s
}

// parseCard reads a card written by card.String.
func parseCard(s string) (card, error) {
	f := strings.Split(s, "|")
	if len(f) != 3 && len(f) != 4 {
		return card{}, fmt.Errorf("%q has %d fields, want 3 or 4", s, len(f))
	}
	pid, err := strconv.Atoi(f[2])
	if err != nil {
		return card{}, fmt.Errorf("%q: bad pid", s)
	}
	c := card{Host: f[0], Addr: f[1], Pid: pid}
	if len(f) == 4 {
		c.Rails = strings.Split(f[3], ",")
	}
	for _, a := range append([]string{c.Addr}, c.Rails...) {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return card{}, fmt.Errorf("%q: bad address %q: %v", s, a, err)
		}
	}
	return c, nil
}

// hostIdentity is equal for two processes exactly when they count as one
// host: GOCCL_HOSTID when set (NCCL_HOSTID's idea), else topo.HostID (boot
// id, host name, /dev/shm device, network namespace), so that topology
// dumps group ranks by host as the links do.
func hostIdentity(override string) (string, error) {
	if override != "" {
		if strings.ContainsAny(override, "|\n") {
			return "", fmt.Errorf("host identity %q may not contain '|' or a newline", override)
		}
		return "id:" + override, nil
	}
	return topo.HostID("/"), nil
}
