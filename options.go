package goccl

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport"
)

// Option configures Init.
type Option func(*options)

// options is what the Options set; Init completes it from the environment.
type options struct {
	rank, size, localRank int
	storeAddr             string
	timeout               time.Duration
	store                 rendezvous.Store
	token                 string
	checksum              bool
	jobID                 string           // set by Split: the new communicator's job id
	split                 bool             // set by Split: no GOCCL_TOPO_DUMP_FILE (the parent's Init wrote the job's)
	root                  rendezvous.Store // set by Split, Shrink, Grow, Join (derived): the job's first store (Comm.root)
	rootRanks             []int            // set by derived: the ranks' root ranks (Comm.rootRanks)
	book                  *lossBook        // set by derived: the process's book of lost root ranks
	reuse                 []transport.Link // set by Shrink: the survivors' links to take back (bootstrap.Params.Reuse)
	tlsServer, tlsClient  *tls.Config
	metrics               prometheus.Registerer // WithMetrics (nil: GOCCL_METRICS_ADDR's, or none)
	logger                *slog.Logger
}

// WithStore makes Init rendezvous through an existing store (for example one
// shared by goroutine ranks in a test) instead of the environment's.
func WithStore(s rendezvous.Store) Option { return func(c *options) { c.store = s } }

// WithRank sets this process's rank (overrides the environment).
func WithRank(r int) Option { return func(c *options) { c.rank = r } }

// WithWorldSize sets the number of ranks (overrides the environment).
func WithWorldSize(n int) Option { return func(c *options) { c.size = n } }

// WithLocalRank sets the rank among the ranks on this host (default: computed
// from the ranks that report the same host).
func WithLocalRank(r int) Option { return func(c *options) { c.localRank = r } }

// WithStoreAddr sets the host:port of the rendezvous store that rank 0 serves.
func WithStoreAddr(addr string) Option { return func(c *options) { c.storeAddr = addr } }

// WithJobToken sets the job's shared secret (as GOCCL_JOB_TOKEN does): the
// rendezvous store and every TCP link between ranks then prove it with an
// HMAC challenge-response, and refuse (and log) connections that do not.
// All ranks must use the same token; goccl run makes one per job.
func WithJobToken(token string) Option { return func(c *options) { c.token = token } }

// WithChecksum makes every TCP link append a CRC32C (Castagnoli) to each
// chunk of up to 512 KiB it sends and check it on receipt, as
// GOCCL_CHECKSUM=1 does: a corrupted chunk fails the operation with an error
// wrapping ErrCorrupt that names the sending peer. All ranks must agree.
func WithChecksum() Option { return func(c *options) { c.checksum = true } }

// WithTLS runs the TCP links over TLS with these configurations (server for
// accepted connections, client for dialed ones), as GOCCL_TLS=1 does with
// configurations made from the job token or from GOCCL_TLS_CERT,
// GOCCL_TLS_KEY and GOCCL_TLS_CA (see transport/tcp JobTLS and FileTLS).
// All ranks must agree. Shared-memory links are not affected.
func WithTLS(server, client *tls.Config) Option {
	return func(c *options) { c.tlsServer, c.tlsClient = server, client }
}

// WithTimeout sets the default operation timeout (as GOCCL_TIMEOUT does).
func WithTimeout(d time.Duration) Option { return func(c *options) { c.timeout = d } }

// WithLogger sends goccl's log records to l instead of stderr: the program's
// logger wins over GOCCL_DEBUG_FILE, which is then ignored. Each record
// carries the attributes rank and subsys (INIT, BOOTSTRAP, ENV, NET, SHM,
// P2P or COLL), and peer or op where they apply; goccl's TRACE level is
// LevelTrace (slog.LevelDebug). Warnings are always sent; INFO and TRACE
// records are sent for the subsystems of GOCCL_DEBUG_SUBSYS, at the level
// GOCCL_DEBUG sets, or, when GOCCL_DEBUG is unset, at the least level l's
// handler is enabled for when Init runs. A Split's communicator inherits
// the logger. A nil l restores the default.
func WithLogger(l *slog.Logger) Option { return func(c *options) { c.logger = l } }
