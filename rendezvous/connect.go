package rendezvous

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/goccl/goccl/internal/config"
)

// nonceKey is the store key under which rank 0 publishes the nonce it also
// writes into the address file; other ranks read it back to check that the
// address file and the server they reached belong to the same launch.
const nonceKey = "goccl/rendezvous/addr-nonce"

// generationKey is the store key under which rank 0's server holds its
// WithGeneration count from its start; other ranks use a store only if it
// holds theirs (checkGeneration).
const generationKey = "goccl/rendezvous/generation"

// AddrFilePath returns the address file Connect uses when env has no
// StoreAddr: <dir>/goccl-store-<JobID>.addr, dir being env.StoreDir or
// os.TempDir(), and the JobID escaped to a safe file name.
func AddrFilePath(env Env) string {
	dir := env.StoreDir
	if dir == "" {
		dir = os.TempDir()
	}
	return filepath.Join(dir, escapeName("goccl-store-", env.JobID)+".addr")
}

// Connect returns the store for this rank. With env.StoreAddr set: rank 0 serves a TCP store on it (binding the port
// of StoreAddr on hostIP, the address of the interface the job uses, or on the given host) and connects to itself;
// other ranks DialTCP it.
// With no StoreAddr (e.g. under mpirun, which gives ranks but no address): rank 0 serves a TCP store on an ephemeral
// port of a routable address it picks (the caller passes it as hostIP) and publishes "host:port" in the address file
// <StoreDir or os.TempDir()>/goccl-store-<JobID>.addr (written atomically, removed when the server closes); other ranks
// poll for that file until ctx ends, then dial. Without a JobID in that case, return an error telling the user to set
// GOCCL_STORE_ADDR or GOCCL_JOB_ID. The returned Store's Close also stops the server on rank 0.
//
// Details: with StoreAddr, rank 0 binds the given host when it is a loopback
// address or "localhost" (a single-host job) or an address of this host
// (also through a host name), every interface when the host is empty
// (":port"), and hostIP otherwise (see storeBinds: a host name may resolve
// here to an address other hosts cannot reach, such as Debian's 127.0.1.1,
// which is then served too); every interface only when hostIP is "" as
// well. With the address file, a stale file from an earlier
// job with the same id is never trusted blindly: rank 0 removes it before
// serving, and the file carries a random nonce that rank 0 also stores in its
// server; other ranks use an address only once they reach a server that holds
// the same nonce, and otherwise keep polling until ctx ends. A job of one
// rank without StoreAddr needs
// neither a JobID nor hostIP: its store is served on 127.0.0.1.
//
// Under torchrun with TORCHELASTIC_USE_AGENT_STORE=True (env.AgentStore
// equal to env.StoreAddr), nobody serves: torchrun's agent already serves a
// c10d TCPStore there, and every rank, rank 0 included, is a client of it
// (DialC10d, see connectAgentStore for the key prefix); no job token, rank
// loss detection or address file is involved then.
//
// With env.Etcd (GOCCL_STORE=etcd://...) nobody serves either: every rank
// is a client of the etcd cluster (package rendezvous/etcd, which the
// program must import to register the etcd:// scheme: Connect fails and
// names the import otherwise; see etcd.JobPrefix for the key prefix); no
// job token or rank loss detection is involved then.
//
// With env.Served (GOCCL_STORE_SERVED=launcher, which goccl run
// --max-restarts sets) nobody serves either: the launcher serves goccl's
// TCP store at env.StoreAddr, with the job token, for as long as the job
// runs, and every rank, rank 0 included, dials it with its rank, so that
// the server reports any rank's loss, rank 0's too, and recovery (goccl's
// Shrink, Grow and Join) outlives rank 0; see connectServed for the keys
// of later Inits.
//
// Rank 0's Close stops the server under every other rank, so close rank 0's
// store last (for example after a Barrier that all ranks pass when done).
//
// Every connection carries env.Rank (so that rank 0's server can tell the
// others when a rank's process dies: RankLostError) and proves the job
// token (see the handshake in handshake.go): env.Token, or without one, when
// the ranks meet through the address file, the token they share through
// the token file next to it (DirToken); opts add to that (WithLog for rank
// 0's server, WithGeneration for successive stores at the same address).
func Connect(ctx context.Context, env Env, hostIP string, opts ...Option) (Store, error) {
	if env.WorldSize < 1 || env.Rank < 0 || env.Rank >= env.WorldSize {
		return nil, fmt.Errorf("rendezvous: connect: rank %d out of range for world size %d", env.Rank, env.WorldSize)
	}
	if env.Etcd != "" {
		return connectScheme(ctx, env, env.Etcd, opts)
	}
	if env.AgentStore != "" && env.AgentStore == env.StoreAddr {
		return connectAgentStore(ctx, env, opts)
	}
	var err error
	if env.Token, err = DirToken(env); err != nil {
		return nil, err
	}
	opts = append([]Option{WithRank(env.Rank)}, opts...)
	if env.Token != "" {
		opts = append(opts, WithToken([]byte(env.Token)))
	}
	if env.StoreAddr != "" && env.Served {
		return connectServed(ctx, env, opts)
	}
	if env.StoreAddr != "" {
		return connectAddr(ctx, env, hostIP, opts)
	}
	if env.WorldSize == 1 {
		// Nobody else needs to find the store: serve it on loopback.
		return serveLocal(ctx, opts)
	}
	if env.JobID == "" {
		return nil, fmt.Errorf("rendezvous: connect: the environment gives no store address and no job id; "+
			"set %s=host:port (rank 0 serves the store there) "+
			"or %s to a value common to all ranks (with %s on a shared file system for multi-host jobs)",
			config.StoreAddr.Name, config.JobID.Name, config.StoreDir.Name)
	}
	if env.Rank == 0 {
		return serveAddrFile(ctx, env, hostIP, opts)
	}
	return dialAddrFile(ctx, env, opts)
}

// connectAgentStore connects every rank, rank 0 included, to the c10d
// TCPStore that torchrun's agent serves at env.AgentStore, under the key
// prefix goccl/torchrun/<attempt>/<generation>/: the attempt
// (TORCHELASTIC_RESTART_COUNT) and the generation (WithGeneration: the
// count of this process's rendezvous) keep a restarted job's and a later
// Init's keys apart from the earlier ones, which the agent's store keeps.
func connectAgentStore(ctx context.Context, env Env, opts []Option) (Store, error) {
	o := makeOptions(opts)
	attempt := env.Attempt
	if attempt == "" {
		attempt = "0"
	}
	prefix := fmt.Sprintf("goccl/torchrun/%s/%d/", attempt, o.generation)
	s, err := DialC10d(ctx, env.AgentStore, prefix)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: connect: rank %d: torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE): %w", env.Rank, err)
	}
	return s, nil
}

// servedPrefix begins the keys of a launcher-served store's later
// generations: goccl/generation/<generation>/.
const servedPrefix = "goccl/generation/"

// connectServed connects this rank, rank 0 included, to the store the
// launcher serves at env.StoreAddr (env.Served: goccl run --max-restarts),
// with its rank and the job token, so that the server reports this rank's
// loss to the others, even rank 0's. That store outlives every Init, so a
// later one (WithGeneration above 1) keeps its keys apart under
// goccl/generation/<generation>/; the first uses the store as it is, where
// goccl.Join meets the job's first communicator.
func connectServed(ctx context.Context, env Env, opts []Option) (Store, error) {
	cl, err := DialTCP(ctx, env.StoreAddr, opts...)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: connect: rank %d: the store goccl run serves (%s=launcher) at %s: %w",
			env.Rank, config.StoreServed.Name, env.StoreAddr, err)
	}
	if g := cl.opts.generation; g > 1 {
		return &ownedPrefix{prefixStore: &prefixStore{s: cl, prefix: fmt.Sprintf("%s%d/", servedPrefix, g)}}, nil
	}
	return cl, nil
}

// ownedPrefix is a prefixStore whose Close closes the store under it.
type ownedPrefix struct{ *prefixStore }

func (p *ownedPrefix) Close() error { return p.s.Close() }

// connectScheme connects through the store kind that another package
// registered for url's scheme (RegisterScheme).
func connectScheme(ctx context.Context, env Env, url string, opts []Option) (Store, error) {
	s, err := lookupScheme(url)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: connect: rank %d: %s: %w", env.Rank, config.Store.Name, err)
	}
	return s.Connect(ctx, env, url, opts...)
}

func connectAddr(ctx context.Context, env Env, hostIP string, opts []Option) (Store, error) {
	if env.Rank != 0 {
		return dialGeneration(ctx, env, opts)
	}
	host, _, err := net.SplitHostPort(env.StoreAddr)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: connect: store address %q: %w", env.StoreAddr, err)
	}
	var resolved []net.IP
	if host != "" {
		addrs, _ := net.DefaultResolver.LookupIPAddr(ctx, host) // none: bind hostIP
		for _, a := range addrs {
			resolved = append(resolved, a.IP)
		}
	}
	binds := storeBinds(env.StoreAddr, hostIP, resolved, localIPs())
	srv, err := newTCPServer(binds, opts...)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: connect: rank 0 cannot serve the store on %s (from %s): %w", strings.Join(binds, " and "), env.StoreAddr, err)
	}
	cl, err := DialTCP(ctx, selfAddr(srv), opts...)
	if err != nil {
		srv.Close()
		return nil, err
	}
	return &servingStore{TCPStore: cl, srv: srv}, nil
}

// dialGeneration dials the store at env.StoreAddr (DialTCP) until it
// reaches one of this rank's generation (WithGeneration; without one, or
// at a store without one, the first store it reaches): a store of an
// earlier generation is the one rank 0 served for a previous rendezvous and
// has not closed yet, so this rank closes its connection and tries again
// until ctx ends.
func dialGeneration(ctx context.Context, env Env, opts []Option) (Store, error) {
	o := makeOptions(opts)
	start := time.Now()
	bo := backoff{cur: 10 * time.Millisecond, max: 200 * time.Millisecond}
	for {
		cl, err := DialTCP(ctx, env.StoreAddr, opts...)
		if err != nil {
			return nil, err
		}
		retry, err := checkGeneration(ctx, cl)
		if err == nil {
			return cl, nil
		}
		cl.Close()
		if !retry {
			return nil, err
		}
		if serr := sleepCtx(ctx, nil, bo.next()); serr != nil {
			return nil, fmt.Errorf("rendezvous: connect: rank %d found no store of its generation %d at %s after %v: %w (last problem: %v)",
				env.Rank, o.generation, env.StoreAddr, time.Since(start).Round(time.Millisecond), serr, err)
		}
	}
}

// checkGeneration returns nil when the store cl reached holds the
// generation of cl's WithGeneration, or when either has none (a store served
// without WithGeneration holds none: its counter reads 0). Otherwise retry
// says whether another attempt may succeed: the store's generation is
// earlier (rank 0's previous store, still up), or the store went away before
// it answered (the previous store, closed just then), not later. A
// TCPServer holds its generation from its start, so the call never waits.
func checkGeneration(ctx context.Context, cl *TCPStore) (retry bool, err error) {
	want := cl.opts.generation
	if want == 0 {
		return false, nil
	}
	got, err := cl.Add(ctx, generationKey, 0)
	switch {
	case err != nil:
		return true, fmt.Errorf("reading the store's generation: %w", err)
	case got == 0:
		return false, nil
	case uint64(got) < want:
		return true, fmt.Errorf("the store at %s is rank 0's generation %d, rank %d's is %d (rank 0 has not closed its previous store yet)",
			cl.addr, got, cl.opts.rank, want)
	case uint64(got) > want:
		return false, fmt.Errorf("rendezvous: connect: the store at %s is rank 0's generation %d, rank %d's is %d: "+
			"every rank must rendezvous as often as rank 0 (call Init as many times)", cl.addr, got, cl.opts.rank, want)
	}
	return false, nil
}

// storeBinds returns the addresses rank 0 serves the store on when the
// environment names storeAddr (host:port), given hostIP (the address of the
// interface the job uses, "" when unknown), the addresses host resolves to
// here, and this host's non-loopback addresses (local):
//
//   - a loopback host or "localhost": storeAddr itself (a single-host job);
//   - an empty host (":port"): every interface, as asked;
//   - a host that is, or resolves to, hostIP or another address of this
//     host: that address;
//   - otherwise (a name that other hosts resolve to this host, through DNS
//     or NAT): hostIP, and also the loopback address the name resolves to
//     here, if any (Debian maps the host name to 127.0.1.1), for the ranks
//     on this host; every interface when hostIP is "".
func storeBinds(storeAddr, hostIP string, resolved, local []net.IP) []string {
	host, port, _ := net.SplitHostPort(storeAddr)
	if ip := net.ParseIP(host); host == "" || host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return []string{storeAddr}
	}
	chosen := net.ParseIP(hostIP)
	var loop net.IP
	for _, ip := range resolved {
		if chosen != nil && ip.Equal(chosen) {
			return []string{net.JoinHostPort(hostIP, port)}
		}
		if ip.IsLoopback() && loop == nil {
			loop = ip
		}
	}
	for _, ip := range resolved {
		for _, l := range local {
			if ip.Equal(l) {
				return []string{net.JoinHostPort(ip.String(), port)}
			}
		}
	}
	if chosen == nil {
		return []string{net.JoinHostPort("", port)}
	}
	binds := []string{net.JoinHostPort(hostIP, port)}
	if loop != nil {
		binds = append(binds, net.JoinHostPort(loop.String(), port))
	}
	return binds
}

// localIPs returns the addresses of this host's interfaces, loopback
// excluded.
func localIPs() []net.IP {
	addrs, _ := net.InterfaceAddrs()
	var ips []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
			ips = append(ips, n.IP)
		}
	}
	return ips
}

func serveLocal(ctx context.Context, opts []Option) (Store, error) {
	srv, err := NewTCPServer("127.0.0.1:0", opts...)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: connect: %w", err)
	}
	cl, err := DialTCP(ctx, srv.Addr(), opts...)
	if err != nil {
		srv.Close()
		return nil, err
	}
	return &servingStore{TCPStore: cl, srv: srv}, nil
}

// selfAddr is an address at which this process reaches srv.
func selfAddr(srv *TCPServer) string {
	a := srv.ln.Addr().(*net.TCPAddr)
	if a.IP.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", fmt.Sprint(a.Port))
	}
	return a.String()
}

func serveAddrFile(ctx context.Context, env Env, hostIP string, opts []Option) (Store, error) {
	if hostIP == "" {
		return nil, errors.New("rendezvous: connect: rank 0 needs a routable host IP to publish when no store address is given")
	}
	path := AddrFilePath(env)
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("rendezvous: connect: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("rendezvous: connect: removing stale address file: %w", err)
	}
	srv, err := NewTCPServer(net.JoinHostPort(hostIP, "0"), opts...)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: connect: rank 0 cannot serve the store on %s: %w", hostIP, err)
	}
	fail := func(err error) (Store, error) {
		srv.Close()
		return nil, err
	}
	cl, err := DialTCP(ctx, srv.Addr(), opts...)
	if err != nil {
		return fail(err)
	}
	nonce := randomHex(16)
	if err := cl.Set(ctx, nonceKey, []byte(nonce)); err != nil {
		cl.Close()
		return fail(err)
	}
	content := []byte(srv.Addr() + "\n" + nonce + "\n")
	if err := writeFileAtomic(dir, filepath.Base(path), content); err != nil {
		cl.Close()
		return fail(fmt.Errorf("rendezvous: connect: publishing the store address: %w", err))
	}
	files := map[string][]byte{path: content}
	if env.Token != "" {
		files[TokenFilePath(env)] = []byte(env.Token + "\n")
	}
	return &servingStore{TCPStore: cl, srv: srv, files: files}, nil
}

// parseAddrFile parses "host:port\nnonce\n".
func parseAddrFile(b []byte) (addr, nonce string, ok bool) {
	lines := strings.Split(string(b), "\n")
	if len(lines) != 3 || lines[2] != "" || lines[1] == "" || checkHostPort(lines[0]) != nil {
		return "", "", false
	}
	return lines[0], lines[1], true
}

func dialAddrFile(ctx context.Context, env Env, opts []Option) (Store, error) {
	path := AddrFilePath(env)
	start := time.Now()
	bo := backoff{cur: 10 * time.Millisecond, max: 200 * time.Millisecond}
	last := "the file does not exist"
	o := makeOptions(opts)
	for {
		cl, err := tryAddrFile(ctx, path, &last, &o)
		if cl != nil || err != nil {
			return cl, err
		}
		if err := sleepCtx(ctx, nil, bo.next()); err != nil {
			return nil, fmt.Errorf("rendezvous: connect: rank %d found no live store through %s after %v: %w (last problem: %s); "+
				"is rank 0 running with the same job id and store directory (%s must be shared by all hosts)?",
				env.Rank, path, time.Since(start).Round(time.Millisecond), err, last, config.StoreDir.Name)
		}
	}
}

// tryAddrFile makes one attempt to use the address file; on failure it
// returns nil and records why in last, or an error when trying again cannot
// help (a store of a later generation). A store that refuses this rank's job
// token (or has none) is retried too: it is most likely another job's, at a
// stale address, like a store that does not hold the file's nonce or holds
// an earlier generation.
func tryAddrFile(ctx context.Context, path string, last *string, o *options) (*TCPStore, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			*last = err.Error()
		}
		return nil, nil
	}
	addr, nonce, ok := parseAddrFile(b)
	if !ok {
		*last = "malformed address file"
		return nil, nil
	}
	// One short attempt: the address may be stale. The nonce check bounds the
	// time spent on a port now owned by something else.
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, br, inst, err := dialOnce(actx, addr, o)
	if errors.Is(err, ErrAuth) {
		*last = fmt.Sprintf("the server at %s is not the one that wrote the file (%v)", addr, err)
		return nil, nil
	}
	if err != nil {
		// A dial cut short by the caller's deadline says nothing about the
		// server: keep what an earlier, completed attempt found. (The
		// dial's own deadline can fire before ctx's timer marks ctx done.)
		dl, hasDL := ctx.Deadline()
		cut := ctx.Err() != nil || hasDL && !time.Now().Before(dl)
		if !cut || !strings.HasPrefix(*last, "the server at") {
			*last = fmt.Sprintf("dial %s: %v", addr, err)
		}
		return nil, nil
	}
	cl := newTCPStore(addr, c, br, inst, *o)
	got, err := cl.Get(actx, nonceKey)
	if err != nil || string(got) != nonce {
		cl.Close()
		*last = fmt.Sprintf("the server at %s is not the one that wrote the file", addr)
		return nil, nil
	}
	if retry, err := checkGeneration(ctx, cl); err != nil {
		cl.Close()
		if !retry {
			return nil, err
		}
		*last = err.Error()
		return nil, nil
	}
	return cl, nil
}

// servingStore is rank 0's store: a client of its own server.
type servingStore struct {
	*TCPStore
	srv *TCPServer
	// files to remove on Close, if they still hold what this job put there
	// (the address file, the token file): path -> content
	files map[string][]byte
}

// Close closes the client, removes the address and token files (when they
// are still this job's) and stops the server. When the server saw a rank
// die, Close first lingers (TCPServer.Linger, at most lingerTimeout) so
// that every other rank learns which one died before the store goes away.
func (s *servingStore) Close() error {
	err := s.TCPStore.Close()
	ctx, cancel := context.WithTimeout(context.Background(), lingerTimeout)
	s.srv.Linger(ctx)
	cancel()
	for path, content := range s.files {
		if b, rerr := os.ReadFile(path); rerr == nil && bytes.Equal(b, content) {
			if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
	}
	return errors.Join(err, s.srv.Close())
}

// Barrier returns once worldSize callers have called it with the same key. It
// uses the keys key+"/count" (an Add counter) and key+"/done" (set by the last
// arrival, awaited by all), so a key can be used for one barrier only.
func Barrier(ctx context.Context, s Store, key string, worldSize int) error {
	if worldSize < 1 {
		return fmt.Errorf("rendezvous: barrier %s: world size %d < 1", quoteKey(key), worldSize)
	}
	n, err := s.Add(ctx, key+"/count", 1)
	if err != nil {
		return err
	}
	if n > int64(worldSize) {
		return fmt.Errorf("rendezvous: barrier %s: %d arrivals for world size %d (key reused?)", quoteKey(key), n, worldSize)
	}
	if n == int64(worldSize) {
		if err := s.Set(ctx, key+"/done", nil); err != nil {
			return err
		}
	}
	return s.Wait(ctx, key+"/done")
}
