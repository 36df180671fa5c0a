package goccl

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/internal/algo"
	"github.com/goccl/goccl/internal/reduce"
	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport"
)

// DefaultTimeout bounds every operation whose context has no deadline, unless
// GOCCL_TIMEOUT or WithTimeout says otherwise.
const DefaultTimeout = 5 * time.Minute

// Comm is a communicator: a group of ranks that run collectives together.
//
// A Comm runs one operation at a time: calls from several goroutines are
// serialized, and every rank must issue the same collectives in the same order.
// After an operation fails the communicator is poisoned: later calls return an
// error wrapping the first failure.
type Comm struct {
	rank, size, localRank int
	timeout               time.Duration
	algoForced            algo.Algorithm
	directMin             int // smallest buffer (bytes) for the direct schedules (GOCCL_DIRECT_MIN_BYTES)
	log                   *logger

	mu        sync.Mutex
	group     *algo.Group // nil when size == 1
	seq       uint64      // collective sequence number
	sendSeq   []uint64    // point-to-point sequence numbers per peer
	recvSeq   []uint64
	op        algo.Op
	octx      opContext
	scratch   []byte
	poison    error
	closed    bool
	store     rendezvous.Store // the store this Comm made (closed by Close)
	rdv       rendezvous.Store // the store it rendezvoused through (for Split)
	jobID     string
	splits    atomic.Int64 // Split calls so far
	splitOpts []Option     // options a Split's communicator inherits
	cleanup   []func()
	loggedOp  [numOpKinds]uint8 // bit a set: algorithm a already logged for this kind

	debugCheck bool   // GOCCL_DEBUG_CHECK=1: fingerprints exchanged before each collective
	checkBuf   []byte // fingerprintSize * size bytes

	aborted  atomic.Bool
	asyncMu  sync.Mutex
	asyncErr error // the first failure, for Err (any goroutine)
}

// Option configures Init.
type Option func(*config)

type config struct {
	rank, size, localRank int
	storeAddr             string
	timeout               time.Duration
	store                 rendezvous.Store
	token                 string
	checksum              bool
	jobID                 string // set by Split: the new communicator's job id
	tlsServer, tlsClient  *tls.Config
}

// WithStore makes Init rendezvous through an existing store (for example one
// shared by goroutine ranks in a test) instead of the environment's.
func WithStore(s rendezvous.Store) Option { return func(c *config) { c.store = s } }

// WithRank sets this process's rank (overrides the environment).
func WithRank(r int) Option { return func(c *config) { c.rank = r } }

// WithWorldSize sets the number of ranks (overrides the environment).
func WithWorldSize(n int) Option { return func(c *config) { c.size = n } }

// WithLocalRank sets the rank among the ranks on this host (default: computed
// from the ranks that report the same host).
func WithLocalRank(r int) Option { return func(c *config) { c.localRank = r } }

// WithStoreAddr sets the host:port of the rendezvous store that rank 0 serves.
func WithStoreAddr(addr string) Option { return func(c *config) { c.storeAddr = addr } }

// WithJobToken sets the job's shared secret (as GOCCL_JOB_TOKEN does): the
// rendezvous store and every TCP link between ranks then prove it with an
// HMAC challenge-response, and refuse (and log) connections that do not.
// All ranks must use the same token; goccl run makes one per job.
func WithJobToken(token string) Option { return func(c *config) { c.token = token } }

// WithChecksum makes every TCP link append a CRC32C (Castagnoli) to each
// chunk of up to 512 KiB it sends and check it on receipt, as
// GOCCL_CHECKSUM=1 does: a corrupted chunk fails the operation with an error
// wrapping ErrCorrupt that names the sending peer. All ranks must agree.
func WithChecksum() Option { return func(c *config) { c.checksum = true } }

// WithTLS runs the TCP links over TLS with these configurations (server for
// accepted connections, client for dialed ones), as GOCCL_TLS=1 does with
// configurations made from the job token or from GOCCL_TLS_CERT,
// GOCCL_TLS_KEY and GOCCL_TLS_CA (see transport/tcp JobTLS and FileTLS).
// All ranks must agree. Shared-memory links are not affected.
func WithTLS(server, client *tls.Config) Option {
	return func(c *config) { c.tlsServer, c.tlsClient = server, client }
}

// WithTimeout sets the default operation timeout (as GOCCL_TIMEOUT does).
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// Rank is this process's rank in [0, Size()).
func (c *Comm) Rank() int { return c.rank }

// Size is the world size.
func (c *Comm) Size() int { return c.size }

// LocalRank is the rank among the ranks on this host.
func (c *Comm) LocalRank() int { return c.localRank }

// Close releases the communicator's links and files. Messages already sent are
// still delivered to peers. Close is idempotent.
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var err error
	if c.group != nil {
		err = c.group.Close()
	}
	for i := len(c.cleanup) - 1; i >= 0; i-- {
		c.cleanup[i]()
	}
	if c.store != nil {
		c.store.Close()
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
	if !c.aborted.CompareAndSwap(false, true) {
		return
	}
	c.setAsyncErr(&Error{Rank: c.rank, Op: "Abort", Err: ErrAborted})
	if c.group != nil {
		c.group.Abort()
	}
}

// Err returns the error that made the communicator unusable (a failed
// operation, a lost peer, or Abort), or nil while it is healthy. It may be
// called from any goroutine, also while an operation is running (the
// ncclCommGetAsyncError idea).
func (c *Comm) Err() error {
	c.asyncMu.Lock()
	defer c.asyncMu.Unlock()
	return c.asyncErr
}

func (c *Comm) setAsyncErr(err error) {
	c.asyncMu.Lock()
	if c.asyncErr == nil {
		c.asyncErr = err
	}
	c.asyncMu.Unlock()
}

// opKind is the collective carried in transport headers.
type opKind uint8

const (
	opAllReduce opKind = iota + 1
	opBroadcast
	opReduce
	opAllGather
	opReduceScatter
	opAllToAll
	opSendRecv
	opBarrier
	opCheck // GOCCL_DEBUG_CHECK fingerprint exchange
	numOpKinds
)

var opNames = [...]string{"", "AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllToAll", "SendRecv", "Barrier", "DebugCheck"}

func (k opKind) String() string {
	if k < numOpKinds {
		return opNames[k]
	}
	return "op(" + strconv.Itoa(int(k)) + ")"
}

// begin locks the communicator and prepares c.op and c.octx for one operation.
// It returns the context the links must use.
func (c *Comm) begin(ctx context.Context, kind opKind, dt DataType, op RedOp, root, count int) (context.Context, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, c.errorf(kind, 0, "%w", ErrClosed)
	}
	if c.aborted.Load() {
		c.mu.Unlock()
		return nil, c.errorf(kind, 0, "%w", ErrAborted)
	}
	if c.poison != nil {
		c.mu.Unlock()
		return nil, c.errorf(kind, 0, "communicator unusable after an earlier error: %w", c.poison)
	}
	if kind != opSendRecv {
		c.seq++
	}
	r := reduce.Op(op)
	c.op.Header = transport.Header{Seq: c.seq, Op: uint8(kind), DType: uint8(dt), RedOp: uint8(r), Root: int32(root), Count: uint64(count)}
	c.op.ElemSize = dt.Size()
	c.op.Reduce, c.op.Reduce3 = nil, nil
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		c.octx.parent = ctx
		c.octx.deadline = time.Now().Add(c.timeout)
		ctx = &c.octx
	}
	if c.debugCheck && c.group != nil && kind != opSendRecv {
		if err := c.checkFingerprints(ctx); err != nil {
			return nil, c.end(kind, err)
		}
	}
	return ctx, nil
}

// end finishes an operation: on failure it poisons the communicator and
// closes its links so that peers waiting on this rank fail fast.
func (c *Comm) end(kind opKind, err error) error {
	if err != nil {
		if c.aborted.Load() {
			err = c.errorf(kind, c.op.Header.Seq, "%w", ErrAborted)
		} else {
			if c.group != nil && kind != opSendRecv && errors.Is(err, context.DeadlineExceeded) {
				if nh := c.group.NotHeard(c.op.Header.Seq); len(nh) > 0 {
					err = fmt.Errorf("%w; no message of this operation yet from rank(s) %s", err, joinInts(nh))
				}
			}
			err = c.wrap(kind, c.op.Header.Seq, err)
		}
		c.poison = err
		c.setAsyncErr(err)
		if c.group != nil {
			// Peers blocked on this rank fail now, told which rank was
			// lost if that is the cause.
			c.group.AbortLost(transport.LostRank(err))
		}
	}
	c.octx.parent = nil
	c.mu.Unlock()
	return err
}

// opContext is a reusable context that adds the communicator's operation
// timeout to a context without one, without allocating per operation. Links
// observe it through Deadline and Err; its Done channel is the parent's.
type opContext struct {
	parent   context.Context
	deadline time.Time
}

func (o *opContext) Deadline() (time.Time, bool) { return o.deadline, true }
func (o *opContext) Done() <-chan struct{}       { return o.parent.Done() }
func (o *opContext) Value(key any) any           { return o.parent.Value(key) }
func (o *opContext) Err() error {
	if err := o.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(o.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *Comm) checkTypes(kind opKind, dt DataType, op RedOp, reducing bool) error {
	if !dt.Valid() {
		return c.errorf(kind, 0, "%w: unknown data type %d", ErrInvalidArgument, uint8(dt))
	}
	if !reducing {
		return nil
	}
	if !op.Valid() {
		return c.errorf(kind, 0, "%w: unknown reduction op %d", ErrInvalidArgument, uint8(op))
	}
	if op == Avg && !dt.IsFloat() {
		return c.errorf(kind, 0, "%w: avg is only defined for floating-point types, got %v", ErrInvalidArgument, dt)
	}
	return nil
}

func (c *Comm) checkLen(kind opKind, name string, buf []byte, elems int, dt DataType) error {
	if elems < 0 {
		return c.errorf(kind, 0, "%w: negative count %d", ErrInvalidArgument, elems)
	}
	if need := elems * dt.Size(); len(buf) < need {
		return c.errorf(kind, 0, "%w: %s holds %d elements of %v, the operation needs %d", ErrInvalidArgument, name, len(buf)/dt.Size(), dt, elems)
	}
	return nil
}

func (c *Comm) checkRoot(kind opKind, root int) error {
	if root < 0 || root >= c.size {
		return c.errorf(kind, 0, "%w: root %d is outside [0, %d)", ErrInvalidArgument, root, c.size)
	}
	return nil
}

func (c *Comm) setReduce(kind opKind, dt DataType, op RedOp) error {
	f, err := reduce.Func(reduce.DType(dt), reduce.Op(op))
	if err != nil {
		return c.errorf(kind, 0, "%w: %v", ErrInvalidArgument, err)
	}
	f3, err := reduce.Func3(reduce.DType(dt), reduce.Op(op))
	if err != nil {
		return c.errorf(kind, 0, "%w: %v", ErrInvalidArgument, err)
	}
	c.op.Reduce, c.op.Reduce3 = f, f3
	return nil
}

func (c *Comm) chooseAllReduce(nbytes int, inPlace bool) algo.Algorithm {
	a := c.algoForced
	if a == algo.Direct && !c.group.Direct() {
		a = algo.Auto
	}
	if a == algo.Auto {
		switch {
		case c.group.Direct() && nbytes >= c.directMin*(c.size-1):
			a = algo.Direct
		case c.size == 2 && (!inPlace || nbytes <= rdMaxBytesInPlace2), nbytes <= rdMaxBytes:
			a = algo.RD
		case nbytes <= rhdMaxBytes:
			a = algo.RHD
		default:
			a = algo.Ring
		}
	}
	return a
}

// The tuner, measured with 2 and (oversubscribed) 4 ranks on a 2-core host
// over shared memory (docs/benchmarks.md, "tuner"):
//   - every collective but Reduce runs a direct (single-copy) schedule when
//     the group allows it (Group.Direct) from directMinBytes*(P-1) bytes of
//     the operation's largest buffer: with 2 ranks the direct schedules won
//     from 16 KiB on (at 16 KiB 1.5-2.6 against 1.8-2.9 µs, at 256 KiB 8-22
//     against 16-26 µs) and lost below; with 4 ranks they lost at 16 KiB
//     (24-32 against 16-17 µs) and won from 128 KiB (AllReduce at 1 MiB 293
//     against 533 µs). Their control rounds grow with P-1.
//
// The AllReduce algorithms below it:
//   - 2 ranks: recursive doubling, one exchange of the whole vector, where
//     ring and halving-doubling are two exchanges of halves: the same bytes
//     moved and one synchronisation fewer (8-byte latency 0.59 µs median
//     against 1.15 µs; equal or better bandwidth from 64 KiB to 64 MiB out
//     of place). In place it folds into the buffer it sends, which is only
//     free once the link has taken the whole message; above
//     rdMaxBytesInPlace2 it then needs a scratch pass and the ring wins
//     (3.4 against 5.5 GB/s at 4 MiB).
//   - more ranks: recursive doubling up to rdMaxBytes (it moves log2 P whole
//     vectors, so it loses once bandwidth dominates), halving-doubling
//     (log2 P latency terms) up to rhdMaxBytes, the ring (P-1 latency terms,
//     no rank sends more than 2n(P-1)/P) above.
const (
	directMinBytes     = 16 << 10
	rdMaxBytes         = 32 << 10
	rdMaxBytesInPlace2 = 2 << 20
	rhdMaxBytes        = 256 << 10
)

// useDirect reports whether a data-movement collective whose largest buffer
// is nbytes runs a direct (single-copy) schedule.
func (c *Comm) useDirect(nbytes int) bool {
	switch c.algoForced {
	case algo.Auto, algo.Direct:
		return c.group.Direct() && (nbytes >= c.directMin*(c.size-1) || c.algoForced == algo.Direct)
	}
	return false
}

// logAlgo reports, once per operation kind and algorithm, which algorithm ran
// (GOCCL_DEBUG=INFO).
func (c *Comm) logAlgo(kind opKind, a algo.Algorithm, name string, nbytes int) {
	if bit := uint8(1) << a; c.loggedOp[kind]&bit == 0 && c.log.info {
		c.loggedOp[kind] |= bit
		c.log.Infof("%v uses %s (first use: %d bytes, %d ranks)", kind, name, nbytes, c.size)
	}
}

// AllReduceBytes is AllReduce on raw bytes: count elements of type dt.
func (c *Comm) AllReduceBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp) error {
	if err := c.checkTypes(opAllReduce, dt, op, true); err != nil {
		return err
	}
	if err := c.checkLen(opAllReduce, "sendbuf", send, count, dt); err != nil {
		return err
	}
	if err := c.checkLen(opAllReduce, "recvbuf", recv, count, dt); err != nil {
		return err
	}
	ctx, err := c.begin(ctx, opAllReduce, dt, op, -1, count)
	if err != nil {
		return err
	}
	if err := c.setReduce(opAllReduce, dt, op); err != nil {
		return c.end(opAllReduce, err)
	}
	n := count * dt.Size()
	if c.group == nil {
		if !sameStart(send, recv) {
			copy(recv[:n], send[:n])
		}
	} else {
		a := c.chooseAllReduce(n, sameStart(send, recv))
		c.logAlgo(opAllReduce, a, a.String(), n)
		err = c.group.AllReduce(ctx, &c.op, send[:n], recv[:n], count, a)
	}
	if err == nil && op == Avg {
		err = reduce.DivideBy(reduce.DType(dt), recv[:n], c.size)
	}
	return c.end(opAllReduce, err)
}

// BroadcastBytes is Broadcast on raw bytes.
func (c *Comm) BroadcastBytes(ctx context.Context, send, recv []byte, count int, dt DataType, root int) error {
	if err := c.checkTypes(opBroadcast, dt, 0, false); err != nil {
		return err
	}
	if err := c.checkRoot(opBroadcast, root); err != nil {
		return err
	}
	if c.rank == root {
		if err := c.checkLen(opBroadcast, "sendbuf", send, count, dt); err != nil {
			return err
		}
	}
	if err := c.checkLen(opBroadcast, "recvbuf", recv, count, dt); err != nil {
		return err
	}
	ctx, err := c.begin(ctx, opBroadcast, dt, 0, root, count)
	if err != nil {
		return err
	}
	n := count * dt.Size()
	if c.group == nil {
		if !sameStart(send, recv) {
			copy(recv[:n], send[:n])
		}
	} else {
		var s []byte
		if c.rank == root {
			s = send[:n]
		}
		if c.useDirect(n) {
			c.logAlgo(opBroadcast, algo.Direct, "direct", n)
			err = c.group.BroadcastDirect(ctx, &c.op, s, recv[:n], count, root)
		} else {
			c.logAlgo(opBroadcast, 0, "tree", n)
			err = c.group.Broadcast(ctx, &c.op, s, recv[:n], count, root)
		}
	}
	return c.end(opBroadcast, err)
}

// ReduceBytes is Reduce on raw bytes.
func (c *Comm) ReduceBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp, root int) error {
	if err := c.checkTypes(opReduce, dt, op, true); err != nil {
		return err
	}
	if err := c.checkRoot(opReduce, root); err != nil {
		return err
	}
	if err := c.checkLen(opReduce, "sendbuf", send, count, dt); err != nil {
		return err
	}
	if c.rank == root {
		if err := c.checkLen(opReduce, "recvbuf", recv, count, dt); err != nil {
			return err
		}
	}
	ctx, err := c.begin(ctx, opReduce, dt, op, root, count)
	if err != nil {
		return err
	}
	if err := c.setReduce(opReduce, dt, op); err != nil {
		return c.end(opReduce, err)
	}
	n := count * dt.Size()
	if c.group == nil {
		copy(recv[:n], send[:n])
	} else {
		c.logAlgo(opReduce, 0, "tree", n)
		var r []byte
		if c.rank == root {
			r = recv[:n]
		}
		err = c.group.Reduce(ctx, &c.op, send[:n], r, count, root)
	}
	if err == nil && op == Avg && c.rank == root {
		err = reduce.DivideBy(reduce.DType(dt), recv[:n], c.size)
	}
	return c.end(opReduce, err)
}

// AllGatherBytes is AllGather on raw bytes; count is per rank.
func (c *Comm) AllGatherBytes(ctx context.Context, send, recv []byte, count int, dt DataType) error {
	if err := c.checkTypes(opAllGather, dt, 0, false); err != nil {
		return err
	}
	if err := c.checkLen(opAllGather, "sendbuf", send, count, dt); err != nil {
		return err
	}
	if err := c.checkLen(opAllGather, "recvbuf", recv, count*c.size, dt); err != nil {
		return err
	}
	ctx, err := c.begin(ctx, opAllGather, dt, 0, -1, count)
	if err != nil {
		return err
	}
	n := count * dt.Size()
	if c.group == nil {
		if mine := recv[:n]; !sameStart(send, mine) {
			copy(mine, send[:n])
		}
	} else {
		if c.useDirect(n * c.size) {
			c.logAlgo(opAllGather, algo.Direct, "direct", n)
			err = c.group.AllGatherDirect(ctx, &c.op, send[:n], recv[:n*c.size], count)
		} else {
			c.logAlgo(opAllGather, 0, "ring", n)
			err = c.group.AllGather(ctx, &c.op, send[:n], recv[:n*c.size], count)
		}
	}
	return c.end(opAllGather, err)
}

// ReduceScatterBytes is ReduceScatter on raw bytes; count is per rank (the
// size of recv).
func (c *Comm) ReduceScatterBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp) error {
	if err := c.checkTypes(opReduceScatter, dt, op, true); err != nil {
		return err
	}
	if err := c.checkLen(opReduceScatter, "sendbuf", send, count*c.size, dt); err != nil {
		return err
	}
	if err := c.checkLen(opReduceScatter, "recvbuf", recv, count, dt); err != nil {
		return err
	}
	ctx, err := c.begin(ctx, opReduceScatter, dt, op, -1, count)
	if err != nil {
		return err
	}
	if err := c.setReduce(opReduceScatter, dt, op); err != nil {
		return c.end(opReduceScatter, err)
	}
	n := count * dt.Size()
	if c.group == nil {
		copy(recv[:n], send[:n])
	} else {
		if c.useDirect(n * c.size) {
			c.logAlgo(opReduceScatter, algo.Direct, "direct", n)
			err = c.group.ReduceScatterDirect(ctx, &c.op, send[:n*c.size], recv[:n], count)
		} else {
			c.logAlgo(opReduceScatter, 0, "ring", n)
			err = c.group.ReduceScatter(ctx, &c.op, send[:n*c.size], recv[:n], count)
		}
	}
	if err == nil && op == Avg {
		err = reduce.DivideBy(reduce.DType(dt), recv[:n], c.size)
	}
	return c.end(opReduceScatter, err)
}

// AllToAllBytes is AllToAll on raw bytes; count is the elements per block.
func (c *Comm) AllToAllBytes(ctx context.Context, send, recv []byte, count int, dt DataType) error {
	if err := c.checkTypes(opAllToAll, dt, 0, false); err != nil {
		return err
	}
	if err := c.checkLen(opAllToAll, "sendbuf", send, count*c.size, dt); err != nil {
		return err
	}
	if err := c.checkLen(opAllToAll, "recvbuf", recv, count*c.size, dt); err != nil {
		return err
	}
	ctx, err := c.begin(ctx, opAllToAll, dt, 0, -1, count)
	if err != nil {
		return err
	}
	n := count * dt.Size() * c.size
	src := send[:n]
	if sameStart(send, recv) && n > 0 {
		if cap(c.scratch) < n {
			c.scratch = make([]byte, n)
		}
		src = c.scratch[:n]
		copy(src, send[:n])
	}
	if c.group == nil {
		copy(recv[:n], src)
	} else {
		// In place, the pairwise exchange from the copy was faster than
		// writing into peers that have just read their own buffers (2
		// ranks, 128 KiB: 11.8 against 16.5 µs).
		if c.useDirect(n) && !sameStart(send, recv) {
			c.logAlgo(opAllToAll, algo.Direct, "direct", n)
			err = c.group.AllToAllDirect(ctx, &c.op, src, recv[:n], count)
		} else {
			c.logAlgo(opAllToAll, 0, "pairwise", n)
			err = c.group.AllToAll(ctx, &c.op, src, recv[:n], count)
		}
	}
	return c.end(opAllToAll, err)
}

// SendRecvBytes is SendRecv on raw bytes. A peer of -1 skips that half.
func (c *Comm) SendRecvBytes(ctx context.Context, send []byte, sendPeer int, recv []byte, recvPeer int, count int, dt DataType) error {
	if err := c.checkTypes(opSendRecv, dt, 0, false); err != nil {
		return err
	}
	for _, p := range [2]int{sendPeer, recvPeer} {
		if p < -1 || p >= c.size {
			return c.errorf(opSendRecv, 0, "%w: peer %d is outside [0, %d)", ErrInvalidArgument, p, c.size)
		}
	}
	if sendPeer >= 0 {
		if err := c.checkLen(opSendRecv, "sendbuf", send, count, dt); err != nil {
			return err
		}
	}
	if recvPeer >= 0 {
		if err := c.checkLen(opSendRecv, "recvbuf", recv, count, dt); err != nil {
			return err
		}
	}
	if (sendPeer == c.rank) != (recvPeer == c.rank) {
		return c.errorf(opSendRecv, 0, "%w: a send to self needs a receive from self (send peer %d, recv peer %d)", ErrInvalidArgument, sendPeer, recvPeer)
	}
	ctx, err := c.begin(ctx, opSendRecv, dt, 0, -1, count)
	if err != nil {
		return err
	}
	n := count * dt.Size()
	if sendPeer == c.rank {
		copy(recv[:n], send[:n])
		return c.end(opSendRecv, nil)
	}
	var s, r []byte
	if sendPeer >= 0 {
		s = send[:n]
	}
	if recvPeer >= 0 {
		r = recv[:n]
	}
	err = c.group.SendRecvP2P(ctx, &c.op, c.nextSend(sendPeer), sendPeer, s, c.nextRecv(recvPeer), recvPeer, r)
	return c.end(opSendRecv, err)
}

func (c *Comm) nextSend(p int) uint64 {
	if p < 0 {
		return 0
	}
	c.sendSeq[p]++
	return c.sendSeq[p]
}

func (c *Comm) nextRecv(p int) uint64 {
	if p < 0 {
		return 0
	}
	c.recvSeq[p]++
	return c.recvSeq[p]
}

// SendBytes sends count elements of buf to peer.
func (c *Comm) SendBytes(ctx context.Context, buf []byte, count int, dt DataType, peer int) error {
	if peer == c.rank {
		return c.errorf(opSendRecv, 0, "%w: Send to self (peer %d) would never complete; use SendRecv", ErrInvalidArgument, peer)
	}
	if peer < 0 {
		return c.errorf(opSendRecv, 0, "%w: peer %d is outside [0, %d)", ErrInvalidArgument, peer, c.size)
	}
	return c.SendRecvBytes(ctx, buf, peer, nil, -1, count, dt)
}

// RecvBytes receives count elements from peer into buf.
func (c *Comm) RecvBytes(ctx context.Context, buf []byte, count int, dt DataType, peer int) error {
	if peer == c.rank {
		return c.errorf(opSendRecv, 0, "%w: Recv from self (peer %d) would never complete; use SendRecv", ErrInvalidArgument, peer)
	}
	if peer < 0 {
		return c.errorf(opSendRecv, 0, "%w: peer %d is outside [0, %d)", ErrInvalidArgument, peer, c.size)
	}
	return c.SendRecvBytes(ctx, nil, -1, buf, peer, count, dt)
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
		c.log.Infof("single-copy (direct read) schedules: %v", map[bool]string{true: "on", false: "off (a peer on another host, or Cross Memory Attach refused or disabled)"}[ok])
	}
	return c.end(opBarrier, err)
}

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier(ctx context.Context) error {
	ctx, err := c.begin(ctx, opBarrier, Uint8, 0, -1, 0)
	if err != nil {
		return err
	}
	if c.group != nil {
		err = c.group.Barrier(ctx, &c.op)
	}
	return c.end(opBarrier, err)
}

// sameStart reports whether a and b start at the same element (true when
// either is empty, so no copy is attempted).
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func sameStart(a, b []byte) bool {
	return len(a) == 0 || len(b) == 0 || &a[0] == &b[0]
}

// envDuration parses GOCCL_TIMEOUT-style values: a Go duration ("90s", "5m")
// or a number of seconds.
func envDuration(name string) (time.Duration, bool, error) {
	v, ok := os.LookupEnv(name)
	if !ok || strings.TrimSpace(v) == "" {
		return 0, false, nil
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(secs * float64(time.Second)), true, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, false, fmt.Errorf("goccl: %s=%q is neither a duration (90s, 5m) nor a number of seconds", name, v)
	}
	return d, true, nil
}

var _ = errors.New
