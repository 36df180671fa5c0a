package goccl

import (
	"context"
	"fmt"
	"github.com/goccl/goccl/internal/collnet"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/internal/algo"
	"github.com/goccl/goccl/internal/bootstrap"
	"github.com/goccl/goccl/internal/trace"
	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport"
)

// DefaultTimeout bounds every operation whose context has no deadline, unless
// GOCCL_TIMEOUT or WithTimeout says otherwise.
const DefaultTimeout = 5 * time.Minute

// Comm is a communicator: a group of ranks that run collectives together.
//
// A Comm runs one operation at a time, in the order they are issued: calls
// from several goroutines are serialized, non-blocking operations (the I
// forms, which return a Request) run in the background in issue order, and
// every rank must issue the same collectives in the same order.
// After an operation fails the communicator is poisoned: later calls return an
// error wrapping the first failure.
type Comm struct {
	rank, size, localRank int
	timeout               time.Duration
	timeoutFrom           string         // where timeout was set, for its errors (timeoutSource)
	progressNice          int            // nice value of the non-blocking worker's thread (GOCCL_PROGRESS_NICE; 0: unchanged)
	sel                   *algo.Selector // chooses each collective's schedule (GOCCL_ALGO, the tuner's facts; tuner.go)

	// The operation recorder (GOCCL_TRACE_FILE, GOCCL_FLIGHT_RECORDER; nil:
	// off) and the running operation's start, bytes (sent plus received for
	// a group) and schedule.
	rec      *trace.Recorder
	recStart time.Time
	recBytes int64
	recAlgo  string
	recName  string     // the event's name when not the operation kind's ("Group")
	met      *metrics   // Prometheus series (WithMetrics, GOCCL_METRICS_ADDR; nil: off)
	skew     *skewStats // arrival skew of the last operations (GOCCL_ARRIVAL_SKEW; nil: off; skew.go)
	skewSkip bool       // the running operation sends no arrival across the hosts (CollNet, an empty hierarchical AllReduce)

	// The health query's view (GOCCL_RAS_ADDR; nil: off; health.go) and
	// the hosts the ranks run on (the Inspector series' n_nodes).
	ras   *rasState
	hosts int

	// The flight recorder in PyTorch's schema (flightrec.go; nil: off), the
	// running operation's id in it, the dump file written on the first
	// failure (GOCCL_FLIGHT_RECORDER_DUMP; "": none) and whether it was.
	fr       *trace.Flight
	frID     uint64
	frDump   string
	frDumped bool
	log      *logger

	mu          sync.Mutex
	group       *algo.Group // nil when size == 1
	seq         uint64      // collective sequence number
	sendSeq     []uint64    // point-to-point sequence numbers per peer
	recvSeq     []uint64
	op          algo.Op
	octx        opContext
	clock0      time.Time // Init's clock reading: the base of the monotonic readings of operations (begin)
	scratch     []byte
	stageMu     sync.Mutex // held by a coalesced call while it uses stage
	stage       []byte     // coalesced calls' packed buffers (coalesced.go)
	displs      [2][]int   // packed AllToAllv displacements, send and receive (vcoll.go)
	premulMu    sync.Mutex
	premul      []preMulOp // operators CreatePreMulSum made, from preMulBase (premul.go)
	poison      error
	closed      bool
	release     func()           // closes what the bootstrap made besides the links (nil: nothing)
	caps        bootstrap.Caps   // what the transports offer besides links (bootstrap.Cap: a Registrar, a *OneSided)
	collnet     *collnet.Client  // GOCCL_COLLNET_ENABLE=1: the attachment to the aggregation tree (nil: none)
	rdv         rendezvous.Store // the store it rendezvoused through (for Split)
	jobID       string
	splits      atomic.Int64     // Split calls so far
	agrees      atomic.Int64     // Agree calls so far
	shrinks     atomic.Int64     // Shrink attempts so far
	grows       atomic.Int64     // Grow calls so far
	root        rendezvous.Store // the store of the job's first Init, where joiners meet (grow.go)
	rootRanks   []int            // each rank's rank in the root communicator, -1 for a joiner (losses.go)
	book        *lossBook        // the root ranks this process learnt are dead (losses.go)
	agreeMu     sync.Mutex
	agreeFailed []bool                    // ranks an agreement counted failed, or seen dead during one (agree.go)
	splitOpts   []Option                  // options a Split's communicator inherits
	loggedOp    [numOpKinds]uint8         // bit i set: the kind's schedule i (Schedule.Bit) already logged
	past        [pastOps]transport.Header // the last collectives' headers, at Seq % pastOps (explainMismatch)

	debugCheck bool   // GOCCL_DEBUG_CHECK=1: fingerprints exchanged before each collective
	topoDump   string // GOCCL_TOPO_DUMP_FILE ("": no topology exchanged at Init; topodump.go)
	checkBuf   []byte // fingerprintSize * size bytes

	aborted   atomic.Bool
	revokedBy atomic.Int64 // the rank that revoked the communicator + 1 (0: not revoked; revoke.go)
	// opState is the running or last collective's sequence number << 1,
	// | 1 once it has ended; the health watcher reads it (health.go).
	opState  atomic.Uint64
	health   *health // nil: a single rank, no store or no timeout
	asyncMu  sync.Mutex
	asyncErr error // the first failure, for Err (any goroutine)

	q opQueue // non-blocking operations (nonblocking.go)
}

// Rank is this process's rank in [0, Size()); -1 for a nil *Comm.
//
// Every method may be called on a nil *Comm (an Init or Split whose error
// was ignored): those that return an error return one wrapping
// ErrInvalidArgument, Rank and LocalRank return -1, Size 0, PeerBytes 0, 0,
// and Abort and TraceSpan do nothing.
func (c *Comm) Rank() int {
	if c == nil {
		return -1
	}
	return c.rank
}

// Size is the world size; 0 for a nil *Comm.
func (c *Comm) Size() int {
	if c == nil {
		return 0
	}
	return c.size
}

// PeerBytes returns the payload bytes this rank has sent to and received
// from peer over their link since Init: what the algorithms moved (a ring
// AllReduce of S bytes moves about 2(n-1)/n·S each way per rank), headers
// and checksums left out. It is 0, 0 for this rank itself and for a peer
// out of range. Across hosts, Init's tuner probe (GOCCL_TUNER_PROBE) counts
// too: about 0.7 MiB from rank 0 to host 0's second rank and 1 MiB to host
// 1's first. Safe to call from any goroutine, also during operations.
func (c *Comm) PeerBytes(peer int) (sent, received uint64) {
	if c == nil || peer < 0 || peer >= c.size || c.group == nil {
		return 0, 0
	}
	l := c.group.Link(peer)
	if l == nil {
		return 0, 0
	}
	return l.Counters().Sent(), l.Counters().Received()
}

// links returns the link to each peer (nil for this rank; nil slice for a
// communicator of one rank).
func (c *Comm) links() []transport.Link {
	if c.group == nil {
		return nil
	}
	ls := make([]transport.Link, c.size)
	for p := range ls {
		ls[p] = c.group.Link(p)
	}
	return ls
}

// LocalRank is the rank among the ranks on this host; -1 for a nil *Comm.
func (c *Comm) LocalRank() int {
	if c == nil {
		return -1
	}
	return c.localRank
}

// Close releases the communicator's links and files. Messages already sent are
// still delivered to peers. A non-blocking operation that is running when
// Close is called finishes first (Abort does not wait); those queued behind
// it fail with an error wrapping ErrClosed. Close is idempotent.
func (c *Comm) Close() error {
	if c == nil {
		return nilComm("Close")
	}
	c.closeRAS()
	c.stopQueue(ErrClosed)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.health != nil && c.poison == nil && !c.aborted.Load() {
		// Peers still waiting on this rank learn that it closed.
		c.health.publishWait(report{State: stClosed, Seq: c.seq, Origin: c.rank})
	}
	c.health.close()
	var err error
	if c.collnet != nil {
		c.collnet.Close()
	}
	if c.group != nil {
		err = c.group.Close()
	}
	if c.release != nil {
		c.release()
	}
	c.met.close()
	if terr := c.rec.Close(); err == nil && terr != nil {
		err = &Error{Rank: c.rank, Op: "Close", Err: terr}
	}
	return err
}

// Abort makes the communicator unusable at once: pending and later operations
// return an error wrapping ErrAborted, and every peer's pending and later
// operations fail (with ErrClosed) instead of waiting for this rank. It may be
// called from any goroutine, never blocks on a pending operation, and is
// idempotent (the ncclCommAbort idea). Close must still be called to release
// the communicator's resources; a new communicator (Init) rebuilds the group.
func (c *Comm) Abort() {
	if c == nil || !c.aborted.CompareAndSwap(false, true) {
		return
	}
	c.setAsyncErr(&Error{Rank: c.rank, Op: "Abort", Err: ErrAborted})
	if h := c.health; h != nil {
		// Never blocks: the peers wait a little for this report.
		go h.publishWait(report{State: stFailed, Seq: c.opState.Load() >> 1, Origin: c.rank,
			Cause: fmt.Sprintf("rank %d aborted its communicator (Comm.Abort)", c.rank)})
	}
	if c.group != nil {
		c.group.Abort()
	}
	c.q.stop(c, ErrAborted)
}

// Err returns the error that made the communicator unusable (a failed
// operation, a lost peer, or Abort), or nil while it is healthy. It may be
// called from any goroutine, also while an operation is running (the
// ncclCommGetAsyncError idea).
func (c *Comm) Err() error {
	if c == nil {
		return nilComm("Err")
	}
	c.asyncMu.Lock()
	defer c.asyncMu.Unlock()
	return c.asyncErr
}

// setAsyncErr records err for Err unless an earlier failure is recorded.
func (c *Comm) setAsyncErr(err error) {
	c.asyncMu.Lock()
	if c.asyncErr == nil {
		c.asyncErr = err
	}
	c.asyncMu.Unlock()
}

// agreeDirect enables the direct (single-copy) schedules when every rank can
// read every peer's memory; it runs once, at the end of Init.
func (c *Comm) agreeDirect(ctx context.Context) error {
	if c.group == nil {
		return nil
	}
	ctx, err := c.begin(ctx, opBarrier, Uint8, 0, -1, 1)
	if err != nil {
		return err
	}
	ok, err := c.group.AgreeDirect(ctx, &c.op)
	if err == nil {
		c.log.Infof(subInit, "single-copy (direct read) schedules: %v", map[bool]string{true: "on", false: "off (a peer on another host, or Cross Memory Attach refused or disabled)"}[ok])
		c.setFacts(func(f *algo.Facts) { f.Direct = ok })
		c.warnForced()
	}
	return c.end(opBarrier, err)
}

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier(ctx context.Context) error {
	a := barrierCall()
	return c.do(ctx, &a)
}

// barrier runs a Barrier (run).
func (c *Comm) barrier(ctx context.Context) error {
	ctx, err := c.begin(ctx, opBarrier, Uint8, 0, -1, 0)
	if err != nil {
		return err
	}
	if c.group != nil {
		err = c.group.Barrier(ctx, &c.op)
	}
	return c.end(opBarrier, err)
}
