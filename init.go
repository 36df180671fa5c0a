package goccl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/goccl/goccl/internal/algo"
	"github.com/goccl/goccl/internal/bootstrap"
	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rendezvous"
)

// defaultNSocks is the TCP sockets per peer and direction without
// GOCCL_NSOCKS_PERPEER (TestConfigDefaults).
const defaultNSocks = bootstrap.DefaultNSocks

// Init joins the communicator described by opts and the environment.
//
// Rank and world size come from the options, else from the environment, in
// this order: GOCCL_RANK/GOCCL_WORLD_SIZE/GOCCL_LOCAL_RANK/GOCCL_STORE_ADDR
// (set by `goccl run`), torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT), OpenMPI (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID). With none of them the communicator has one
// rank. See package rendezvous for how ranks find the store under mpirun;
// GOCCL_STORE=etcd://host:2379/prefix makes every rank a client of an etcd
// cluster instead of rank 0 serving the store (the program imports
// _ "github.com/goccl/goccl/rendezvous/etcd" for that; the goccl command
// does).
//
// Init connects every pair of ranks: shared memory (/dev/shm) when both run on
// the same host, TCP otherwise (GOCCL_SHM_DISABLE=1 forces TCP;
// GOCCL_SOCKET_IFNAME picks the interface, GOCCL_NSOCKS_PERPEER the sockets
// per peer and direction, default 2; messages above 2 MiB are striped over
// them). It returns an error naming the missing ranks when the world does
// not assemble before ctx's deadline, or the operation timeout when ctx has
// none.
//
// A process may Init again, after Close or not, to make another
// communicator from the environment, provided every rank calls Init as many
// times (as every rank calls ncclCommInitRank for each communicator): rank
// 0 serves a new store at the same address each time, and the other ranks
// wait for it rather than use its previous one (see
// rendezvous.WithGeneration).
func Init(ctx context.Context, opts ...Option) (*Comm, error) {
	start := time.Now()
	cfg := options{rank: -1, size: -1, localRank: -1}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.store == nil && Joining() {
		return nil, &Error{Rank: cfg.rank, Op: "Init", Err: fmt.Errorf("%w: this process replaces a failed rank of a running job (%s=1, set by goccl run --max-restarts): call goccl.Join, not Init (goccl.Joining reports it)",
			ErrInvalidArgument, config.Join.Name)}
	}
	env, haveEnv, err := rendezvous.FromEnv()
	if err != nil && !(cfg.store != nil && cfg.rank >= 0 && cfg.size > 0) {
		// (With its store, rank and size given, as Join and Split give
		// them, Init needs nothing of the launcher's environment.)
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
		env.StoreAddr, env.StoreAddrFrom = cfg.storeAddr, "WithStoreAddr"
	}
	c := &Comm{rank: cfg.rank, size: cfg.size, localRank: cfg.localRank, log: newLogger(cfg.rank, cfg.logger), clock0: time.Now()}
	var abandon func(error) // once linked: tell the others this Init failed
	fail := func(err error) (*Comm, error) {
		if abandon != nil {
			abandon(err)
		}
		c.Close()
		var e *Error
		if errors.As(err, &e) {
			return nil, err
		}
		return nil, &Error{Rank: c.rank, Op: "Init", Err: err}
	}
	if cfg.size < 1 {
		return fail(fmt.Errorf("%w: world size %d", ErrInvalidArgument, cfg.size))
	}
	if cfg.rank >= cfg.size {
		return fail(fmt.Errorf("%w: rank %d is outside [0, %d)", ErrInvalidArgument, cfg.rank, cfg.size))
	}
	p := bootstrap.Params{Rank: c.rank, Size: c.size, LocalRank: c.localRank, Store: cfg.store, Env: env,
		JobID: cmp.Or(cfg.jobID, env.JobID), Reuse: cfg.reuse, Log: c.log.bootstrapLog}
	if err := c.fromEnv(&cfg, &p); err != nil {
		return fail(err)
	}
	c.sendSeq = make([]uint64, c.size)
	c.hosts = 1
	c.recvSeq = make([]uint64, c.size)
	if c.size == 1 {
		if c.localRank < 0 {
			c.localRank = 0
		}
		if err := c.setupMetrics(&cfg); err != nil {
			return fail(err)
		}
		c.writeTopology(ctx, nil, c.detectTopology())
		return c, nil
	}
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}

	// Phases 1 to 3: the store, the address cards, the links.
	res, err := bootstrap.Connect(ctx, p)
	if err != nil {
		return fail(err)
	}
	abandon = func(err error) { bootstrap.Abandon(res.Store, res.JobID, c.rank, err) }
	c.group = algo.NewGroup(c.rank, c.size, res.Links)
	if err := c.setupHier(res.HostKeys); err != nil {
		c.group.Close()
		res.Release()
		return fail(err)
	}
	c.release, c.rdv, c.jobID, c.localRank, c.caps = res.Release, res.Store, res.JobID, res.LocalRank, res.Caps
	if m, ok := c.rdv.(memberLosses); ok {
		m.initing = false // see memberLosses
		c.rdv = m
	}
	c.root, c.rootRanks, c.book = cfg.root, cfg.rootRanks, cfg.book
	if c.root == nil {
		c.root, c.rootRanks, c.book = c.rdv, make([]int, c.size), &lossBook{}
		for r := range c.rootRanks {
			c.rootRanks[r] = r
		}
	}
	c.splitOpts = []Option{WithTimeout(c.timeout), WithJobToken(p.Token), WithTLS(res.TLSServer, res.TLSClient)}
	if p.Checksum {
		c.splitOpts = append(c.splitOpts, WithChecksum())
	}
	if cfg.logger != nil {
		c.splitOpts = append(c.splitOpts, WithLogger(cfg.logger))
	}
	tLinks := time.Now()
	c.publishTopology(ctx, res.Store) // GOCCL_TOPO_DUMP_FILE only
	c.hosts = countHosts(res.HostKeys)
	c.setupRAS(ctx, res.Store, res.HostKeys[c.rank], p.Token) // GOCCL_RAS_ADDR only

	// Phase 4: everyone is connected.
	if err := c.Barrier(ctx); err != nil {
		return fail(err)
	}
	// Phase 5: single-copy schedules only if every rank can read every
	// peer's memory (all peers on this host, Cross Memory Attach allowed).
	if err := c.agreeDirect(ctx); err != nil {
		return fail(err)
	}
	// Phase 6: across hosts, the tuner's probe of the links.
	if err := c.tune(ctx); err != nil {
		return fail(err)
	}
	// Phase 7: in-network aggregation (GOCCL_COLLNET_ENABLE).
	if err := c.setupCollNet(ctx); err != nil {
		return fail(err)
	}
	c.writeTopology(ctx, res.Store, nil) // rank 0, GOCCL_TOPO_DUMP_FILE only
	// From here on, the operations' arrivals are recorded (not Init's own).
	if c.skew, err = newSkewStats(c.size, c.clock0); err != nil {
		return fail(fmt.Errorf("%w: %v", ErrInvalidArgument, err))
	}
	c.log.Infof(subInit, "init: %d ranks, store %v, address exchange %v, links %v, barrier %v, total %v",
		c.size, res.StoreReady.Sub(start).Round(time.Microsecond), res.CardsRead.Sub(res.StoreReady).Round(time.Microsecond),
		tLinks.Sub(res.CardsRead).Round(time.Microsecond), time.Since(tLinks).Round(time.Microsecond), time.Since(start).Round(time.Microsecond))
	if err := c.setupMetrics(&cfg); err != nil {
		return fail(err)
	}
	c.health = startHealth(c, res.HostKeys, res.Pids, c.rank == 0 && cfg.store == nil)
	return c, nil
}

// setupMetrics registers the communicator's Prometheus series with
// WithMetrics's registerer or, with GOCCL_METRICS_ADDR, the process's
// /metrics server's registry; neither: no metrics.
func (c *Comm) setupMetrics(cfg *options) error {
	reg := cfg.metrics
	if reg == nil {
		addr := config.MetricsAddr.Get()
		if addr == "" {
			return nil
		}
		r, err := serveMetrics(addr, c.localRank)
		if err != nil {
			return err
		}
		reg = r
	}
	links := c.links()
	m, err := newMetrics(reg, c.rank, c.size, c.hosts, c.localRank, cmp.Or(c.jobID, "local"), links, c)
	if err != nil {
		return err
	}
	for p, l := range links {
		if l != nil {
			m.links.WithLabelValues(strconv.Itoa(p), l.Name()).Set(1)
		}
	}
	c.met = m
	return nil
}

// countHosts is how many distinct hosts keys names.
func countHosts(keys []string) int {
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		seen[k] = true
	}
	return max(len(seen), 1)
}
