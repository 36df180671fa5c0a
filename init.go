package goccl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goccl/goccl/internal/algo"
	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm"
	"github.com/goccl/goccl/transport/tcp"
)

// defaultNSocks is the TCP sockets per peer and direction without
// GOCCL_NSOCKS_PERPEER. Two sockets each way: a 16 MiB AllReduce over
// loopback took a median 10 ms with 2 against 13-15 ms with 1 (4 was no
// better than 2).
const defaultNSocks = 2

// Init joins the communicator described by opts and the environment.
//
// Rank and world size come from the options, else from the environment, in
// this order: GOCCL_RANK/GOCCL_WORLD_SIZE/GOCCL_LOCAL_RANK/GOCCL_STORE_ADDR
// (set by `goccl run`), torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT), OpenMPI (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID). With none of them the communicator has one
// rank. See package rendezvous for how ranks find the store under mpirun.
//
// Init connects every pair of ranks: shared memory (/dev/shm) when both run on
// the same host, TCP otherwise (GOCCL_SHM_DISABLE=1 forces TCP;
// GOCCL_SOCKET_IFNAME picks the interface, GOCCL_NSOCKS_PERPEER the sockets
// per peer and direction, default 2; messages above 2 MiB are striped over
// them). It returns an error naming the missing ranks when the world does
// not assemble before ctx's deadline, or the operation timeout when ctx has
// none.
func Init(ctx context.Context, opts ...Option) (*Comm, error) {
	start := time.Now()
	cfg := config{rank: -1, size: -1, localRank: -1}
	for _, o := range opts {
		o(&cfg)
	}
	env, haveEnv, err := rendezvous.FromEnv()
	if err != nil {
		return nil, &Error{Rank: cfg.rank, Op: "Init", Err: err}
	}
	if cfg.rank < 0 {
		cfg.rank = 0
		if haveEnv {
			cfg.rank = env.Rank
		}
	}
	if cfg.size < 0 {
		cfg.size = 1
		if haveEnv {
			cfg.size = env.WorldSize
		}
	}
	if cfg.localRank < 0 && haveEnv && env.Source != "" {
		cfg.localRank = env.LocalRank
	}
	if cfg.storeAddr != "" {
		env.StoreAddr = cfg.storeAddr
	}
	c := &Comm{rank: cfg.rank, size: cfg.size, localRank: cfg.localRank, log: newLogger(cfg.rank)}
	fail := func(err error) (*Comm, error) {
		c.Close()
		var e *Error
		if errors.As(err, &e) {
			return nil, err
		}
		// A rank the store saw die, or rank 0 (which serves the store) gone
		// from under this rank: name it as a lost peer.
		var rl *rendezvous.RankLostError
		switch {
		case errors.Is(err, ErrPeerLost):
		case errors.As(err, &rl):
			err = &PeerLostError{Rank: rl.Rank, Via: -1, Cause: errors.New(rl.Reason)}
		case c.rank != 0 && cfg.store == nil && storeServerGone(err):
			err = &PeerLostError{Rank: 0, Via: -1, Cause: fmt.Errorf("the store it served is gone: %w", err)}
		}
		return nil, &Error{Rank: c.rank, Op: "Init", Err: err}
	}
	if cfg.size < 1 {
		return fail(fmt.Errorf("%w: world size %d", ErrInvalidArgument, cfg.size))
	}
	if cfg.rank >= cfg.size {
		return fail(fmt.Errorf("%w: rank %d is outside [0, %d)", ErrInvalidArgument, cfg.rank, cfg.size))
	}
	c.timeout = DefaultTimeout
	if d, ok, err := envDuration("GOCCL_TIMEOUT"); err != nil {
		return fail(err)
	} else if ok {
		c.timeout = d
	}
	if cfg.timeout > 0 {
		c.timeout = cfg.timeout
	}
	if c.algoForced, err = algoFromEnv(); err != nil {
		return fail(err)
	}
	c.directMin = directMinBytes
	if v := os.Getenv("GOCCL_DIRECT_MIN_BYTES"); v != "" {
		if c.directMin, err = strconv.Atoi(v); err != nil || c.directMin < 0 {
			return fail(fmt.Errorf("%w: GOCCL_DIRECT_MIN_BYTES=%q must be a byte count >= 0", ErrInvalidArgument, v))
		}
	}
	c.debugCheck = os.Getenv("GOCCL_DEBUG_CHECK") == "1"
	c.sendSeq = make([]uint64, c.size)
	c.recvSeq = make([]uint64, c.size)
	if c.size == 1 {
		if c.localRank < 0 {
			c.localRank = 0
		}
		return c, nil
	}
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}

	// Phase 1: the store.
	iface, err := tcp.SelectInterface(os.Getenv("GOCCL_SOCKET_IFNAME"))
	if err != nil {
		return fail(err)
	}
	token := cfg.token
	if token == "" {
		token = os.Getenv("GOCCL_JOB_TOKEN")
	}
	store := cfg.store
	if store == nil {
		env.Rank, env.WorldSize, env.Token = c.rank, c.size, token
		store, err = rendezvous.Connect(ctx, env, iface.IP.String(), rendezvous.WithLog(c.log.Warnf))
		if err != nil {
			return fail(fmt.Errorf("connecting to the rendezvous store: %w", err))
		}
		c.store = store
	}
	tStore := time.Now()

	// Phase 2: publish this rank's address card and read everyone's.
	jobID := env.JobID
	if cfg.jobID != "" {
		jobID = cfg.jobID
	}
	if c.rank == 0 {
		if jobID == "" {
			var b [8]byte
			rand.Read(b[:])
			jobID = hex.EncodeToString(b[:])
		}
		if err := store.Set(ctx, "goccl/jobid", []byte(jobID)); err != nil {
			return fail(err)
		}
	} else {
		v, err := store.Get(ctx, "goccl/jobid")
		if err != nil {
			return fail(c.missingRanks(ctx, store, err))
		}
		jobID = string(v)
	}
	epOpts, err := endpointOptions(&cfg, token, c.log.Warnf)
	if err != nil {
		return fail(err)
	}
	c.rdv, c.jobID = store, jobID
	c.splitOpts = []Option{WithTimeout(c.timeout), WithJobToken(token), WithTLS(cfg.tlsServer, cfg.tlsClient)}
	if cfg.checksum {
		c.splitOpts = append(c.splitOpts, WithChecksum())
	}
	ep, err := tcp.Listen(c.rank, iface.IP, jobID, epOpts...)
	if err != nil {
		return fail(err)
	}
	c.cleanup = append(c.cleanup, func() { ep.Close() })
	me := card{Host: hostIdentity(), Addr: ep.Addr(), Pid: os.Getpid()}
	if err := store.Set(ctx, cardKey(c.rank), []byte(me.String())); err != nil {
		return fail(err)
	}
	cards := make([]card, c.size)
	for r := 0; r < c.size; r++ {
		v, err := store.Get(ctx, cardKey(r))
		if err != nil {
			return fail(c.missingRanks(ctx, store, err))
		}
		if cards[r], err = parseCard(string(v)); err != nil {
			return fail(fmt.Errorf("rank %d published a bad address card: %w", r, err))
		}
	}
	if c.localRank < 0 {
		c.localRank = 0
		for r := 0; r < c.rank; r++ {
			if cards[r].Host == me.Host {
				c.localRank++
			}
		}
	}
	tCards := time.Now()

	// Phase 3: links.
	shmOff := os.Getenv("GOCCL_SHM_DISABLE") == "1"
	nsocks := defaultNSocks
	if v := os.Getenv("GOCCL_NSOCKS_PERPEER"); v != "" {
		if nsocks, err = strconv.Atoi(v); err != nil || nsocks < 1 || nsocks > 64 {
			return fail(fmt.Errorf("%w: GOCCL_NSOCKS_PERPEER=%q must be an integer in [1, 64]", ErrInvalidArgument, v))
		}
	}
	links := make([]transport.Link, c.size)
	useShm := make([]bool, c.size)
	for p := range cards {
		useShm[p] = p != c.rank && !shmOff && cards[p].Host == me.Host
	}
	if err := c.connectShm(ctx, store, jobID, useShm, cards, links); err != nil {
		closeLinks(links)
		return fail(err)
	}
	if err := c.connectTCP(ctx, ep, cards, useShm, nsocks, links); err != nil {
		closeLinks(links)
		return fail(err)
	}
	for p, l := range links {
		if l != nil {
			c.log.Infof("peer %d via %s", p, l.Name())
		}
	}
	c.group = algo.NewGroup(c.rank, c.size, links)
	tLinks := time.Now()

	// Phase 4: everyone is connected.
	if err := c.Barrier(ctx); err != nil {
		return fail(err)
	}
	// Phase 5: single-copy schedules only if every rank can read every
	// peer's memory (all peers on this host, Cross Memory Attach allowed).
	if err := c.agreeDirect(ctx); err != nil {
		return fail(err)
	}
	c.log.Infof("init: %d ranks, store %v, address exchange %v, links %v, barrier %v, total %v",
		c.size, tStore.Sub(start).Round(time.Microsecond), tCards.Sub(tStore).Round(time.Microsecond),
		tLinks.Sub(tCards).Round(time.Microsecond), time.Since(tLinks).Round(time.Microsecond), time.Since(start).Round(time.Microsecond))
	return c, nil
}

// endpointOptions are the TCP endpoint's options: the job token, the log,
// checksums (GOCCL_CHECKSUM=1 or WithChecksum) and TLS (WithTLS, or
// GOCCL_TLS=1 with GOCCL_TLS_CERT/GOCCL_TLS_KEY/GOCCL_TLS_CA files, else
// with keys made from the job token).
func endpointOptions(cfg *config, token string, logf func(string, ...any)) ([]tcp.EndpointOption, error) {
	opts := []tcp.EndpointOption{tcp.WithToken([]byte(token)), tcp.WithLog(logf)}
	switch v := os.Getenv("GOCCL_CHECKSUM"); v {
	case "", "0":
	case "1":
		cfg.checksum = true
	default:
		return nil, fmt.Errorf("%w: GOCCL_CHECKSUM=%q: want 0 or 1", ErrInvalidArgument, v)
	}
	if cfg.checksum {
		opts = append(opts, tcp.WithChecksum())
	}
	server, client := cfg.tlsServer, cfg.tlsClient
	switch v := os.Getenv("GOCCL_TLS"); {
	case server != nil || client != nil:
		if server == nil || client == nil {
			return nil, fmt.Errorf("%w: WithTLS needs both a server and a client configuration", ErrInvalidArgument)
		}
	case v == "" || v == "0":
	case v == "1":
		cert, key, ca := os.Getenv("GOCCL_TLS_CERT"), os.Getenv("GOCCL_TLS_KEY"), os.Getenv("GOCCL_TLS_CA")
		var err error
		switch {
		case cert != "" || key != "" || ca != "":
			if cert == "" || key == "" || ca == "" {
				return nil, fmt.Errorf("%w: GOCCL_TLS_CERT, GOCCL_TLS_KEY and GOCCL_TLS_CA go together (have %q, %q, %q)", ErrInvalidArgument, cert, key, ca)
			}
			server, client, err = tcp.FileTLS(cert, key, ca)
		case token != "":
			server, client, err = tcp.JobTLS([]byte(token))
		default:
			err = fmt.Errorf("%w: GOCCL_TLS=1 needs the job token (GOCCL_JOB_TOKEN, set by goccl run) or certificate files (GOCCL_TLS_CERT, GOCCL_TLS_KEY, GOCCL_TLS_CA)", ErrInvalidArgument)
		}
		if err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%w: GOCCL_TLS=%q: want 0 or 1", ErrInvalidArgument, v)
	}
	if server != nil {
		opts = append(opts, tcp.WithTLS(server, client))
	}
	cfg.tlsServer, cfg.tlsClient = server, client
	return opts, nil
}

func closeLinks(links []transport.Link) {
	for _, l := range links {
		if l != nil {
			l.Close()
		}
	}
}

// connectShm creates this rank's inbound rings from every same-host peer,
// opens the peers' rings for its outbound traffic, and unlinks the files once
// every rank has mapped them (so nothing is left in /dev/shm after a crash).
//
// A ring that cannot be created (typically /dev/shm too small: Docker gives
// containers 64 MiB) is not fatal: the rank logs what is missing and how to
// fix it, and publishes which inbound rings it has; a pair of ranks uses
// shared memory only if both rings between them exist, and TCP otherwise
// (useShm is cleared for it), so both sides always agree.
func (c *Comm) connectShm(ctx context.Context, store rendezvous.Store, jobID string, useShm []bool, cards []card, links []transport.Link) error {
	dir := os.Getenv("GOCCL_SHM_DIR")
	if dir == "" {
		dir = "/dev/shm"
	}
	cfg := shm.Config{Dir: dir}
	path := func(src, dst int) string {
		return filepath.Join(dir, fmt.Sprintf("goccl-%s-%d-%d", jobID, src, dst))
	}
	in := make([]*shm.Ring, c.size)
	have := make([]byte, c.size) // have[p] == '1': the ring from p to this rank exists
	var failed []int
	var firstFail error
	for p, ok := range useShm {
		have[p] = '0'
		if !ok {
			continue
		}
		r, err := shm.CreateRing(path(p, c.rank), cfg)
		if err != nil {
			failed = append(failed, p)
			if firstFail == nil {
				firstFail = err
			}
			continue
		}
		in[p], have[p] = r, '1'
	}
	if len(failed) > 0 {
		c.log.Warnf("%v; using TCP instead of shared memory with rank(s) %v", shmAdvice(dir, cfg, useShm, firstFail), failed)
	}
	if err := store.Set(ctx, fmt.Sprintf("goccl/shm/%d", c.rank), have); err != nil {
		for _, r := range in {
			if r != nil {
				r.Unlink()
				r.Close()
			}
		}
		return err
	}
	var firstErr error
	var peerFailed []int
	for p, ok := range useShm {
		if !ok {
			continue
		}
		var peerHas bool
		if firstErr == nil {
			v, err := store.Get(ctx, fmt.Sprintf("goccl/shm/%d", p))
			switch {
			case err != nil:
				firstErr = fmt.Errorf("waiting for rank %d's shared memory: %w", p, err)
			case len(v) != c.size:
				firstErr = fmt.Errorf("rank %d published a bad shared-memory record %q", p, v)
			default:
				peerHas = v[c.rank] == '1'
			}
		}
		if in[p] == nil || !peerHas {
			// One of the two rings is missing: TCP for this pair.
			useShm[p] = false
			if in[p] != nil {
				in[p].Unlink()
				in[p].Close()
				in[p] = nil
				peerFailed = append(peerFailed, p)
			}
			continue
		}
		var out *shm.Ring
		if firstErr == nil {
			var err error
			if out, err = shm.OpenRing(path(c.rank, p)); err != nil {
				firstErr = fmt.Errorf("shared memory with rank %d: %w", p, err)
			}
		}
		if out != nil {
			// Watching the peer's pid turns its death into an error
			// naming it within one futex timeout (10 ms).
			links[p] = shm.NewLink(c.rank, p, out, in[p], shm.WithPeerPID(cards[p].Pid))
		}
	}
	if len(peerFailed) > 0 {
		c.log.Warnf("rank(s) %v could not create their shared memory for this rank (see their warnings); using TCP with them", peerFailed)
	}
	// Every rank reaches this barrier, with or without shared-memory peers.
	if err := rendezvous.Barrier(ctx, store, "goccl/shm-mapped", c.size); err != nil && firstErr == nil {
		firstErr = err
	}
	for _, r := range in {
		if r != nil {
			r.Unlink()
		}
	}
	return firstErr
}

// shmAdvice explains a failed ring creation: for a full file system, how
// much shared memory the job needs on this host and how to get it.
func shmAdvice(dir string, cfg shm.Config, useShm []bool, err error) error {
	if !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	ring, rerr := cfg.RingBytes()
	if rerr != nil {
		return err
	}
	local := 1
	for _, ok := range useShm {
		if ok {
			local++
		}
	}
	need := int64(local*(local-1)) * ring
	var st syscall.Statfs_t
	size, free := "unknown", "unknown"
	if syscall.Statfs(dir, &st) == nil {
		size = mib(int64(st.Blocks) * st.Bsize)
		free = mib(int64(st.Bavail) * st.Bsize)
	}
	// Room for the rings plus a quarter for whatever else lives there.
	suggest := (need + need/4 + (1<<20 - 1)) >> 20
	return fmt.Errorf("%s is too small: %s, %s free; %d ranks on this host need %s of shared memory (%d rings of %s): "+
		"give the container more (docker run --shm-size=%dm, or a Kubernetes emptyDir with medium: Memory mounted at /dev/shm), "+
		"or set GOCCL_SHM_DISABLE=1 to use TCP (%w)",
		dir, size, free, local, mib(need), local*(local-1), mib(ring), suggest, err)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func (c *Comm) connectTCP(ctx context.Context, ep *tcp.Endpoint, cards []card, useShm []bool, nsocks int, links []transport.Link) error {
	var wg sync.WaitGroup
	errs := make([]error, c.size)
	for p := range cards {
		if p == c.rank || useShm[p] {
			continue
		}
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			links[p], errs[p] = ep.Connect(ctx, p, cards[p].Addr, nsocks)
		}(p)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// missingRanks turns a store timeout into an error that names the ranks whose
// address card never arrived.
func (c *Comm) missingRanks(ctx context.Context, store rendezvous.Store, err error) error {
	if ctx.Err() == nil {
		return err
	}
	var missing []string
	for r := 0; r < c.size && len(missing) < 16; r++ {
		qctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		if _, gerr := store.Get(qctx, cardKey(r)); gerr != nil {
			missing = append(missing, strconv.Itoa(r))
		}
		cancel()
	}
	if len(missing) == 0 {
		return err
	}
	return fmt.Errorf("world size %d not reached: no word from rank(s) %s: %w", c.size, strings.Join(missing, ","), err)
}

func cardKey(r int) string { return "goccl/card/" + strconv.Itoa(r) }

// card is what each rank publishes in the store at Init.
type card struct {
	Host string // host identity: same value means shared memory works
	Addr string // TCP endpoint
	Pid  int
}

func (c card) String() string { return c.Host + "|" + c.Addr + "|" + strconv.Itoa(c.Pid) }

func parseCard(s string) (card, error) {
	f := strings.Split(s, "|")
	if len(f) != 3 {
		return card{}, fmt.Errorf("%q has %d fields, want 3", s, len(f))
	}
	pid, err := strconv.Atoi(f[2])
	if err != nil {
		return card{}, fmt.Errorf("%q: bad pid", s)
	}
	if _, _, err := net.SplitHostPort(f[1]); err != nil {
		return card{}, fmt.Errorf("%q: bad address: %v", s, err)
	}
	return card{Host: f[0], Addr: f[1], Pid: pid}, nil
}

// hostIdentity is equal for two processes exactly when they can share memory
// through the same /dev/shm: the kernel boot id, the hostname, and the device
// number of the /dev/shm mount (different containers on one host differ).
func hostIdentity() string {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	host, _ := os.Hostname()
	var dev uint64
	var st syscall.Stat_t
	if syscall.Stat("/dev/shm", &st) == nil {
		dev = uint64(st.Dev)
	}
	return strings.TrimSpace(string(boot)) + "/" + host + "/" + strconv.FormatUint(dev, 16)
}

// storeServerGone reports whether a store call failed because the
// connection to rank 0's server broke or was refused after it had worked
// (not because a deadline expired first).
func storeServerGone(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}
