// Package transport defines the point-to-point link that every goccl transport
// (shared memory, TCP, and later RoCE) implements, and the message header that
// travels with each message so that ranks disagreeing about an operation get an
// error instead of a hang or garbage.
//
// A Link connects this rank to exactly one peer, in both directions. Messages on a
// link are delivered in order. Algorithms (internal/algo) only ever see Links.
package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"

	"github.com/goccl/goccl/internal/closed"
)

// Header describes the operation a message belongs to. The sender puts its own
// view of the operation in the header; the receiver compares it with its own
// view and fails with a *MismatchError on any difference. Arrival is not
// compared: it is what the sender knows of who entered the operation last,
// which the receiver learns (see Link.Recv).
type Header struct {
	Seq     uint64  // operation sequence number on the communicator (starts at 1)
	Op      uint8   // collective kind (goccl's opcode; opaque here)
	DType   uint8   // element type (goccl's DataType; opaque here)
	RedOp   uint8   // reduction operator (goccl's RedOp; opaque here)
	Root    int32   // root rank, or -1 when the operation has none
	Count   uint64  // element count of the operation as the caller gave it
	Bytes   uint64  // bytes in this message
	Arrival Arrival // the latest entry into the operation the sender knew of
}

// Arrival is the latest entry into an operation that a rank knows of: the
// rank that entered last and when, and how long after the earliest entry it
// knows of. Every rank starts an operation with its own entry, sends what it
// knows in each message's header and merges what each message brings, so
// that the knowledge travels with the data: a rank whose result depends on
// every rank's data (AllReduce, AllGather, ...) ends the operation knowing
// the last of all. The zero value (At == 0) knows nothing.
type Arrival struct {
	Rank   int32  // the rank that entered last
	Spread uint32 // microseconds from the earliest entry known to At (saturates at about 71 minutes)
	At     int64  // when Rank entered, wall clock, Unix nanoseconds (0: nothing known)
}

// Merge folds o into a: the later entry (the higher rank on a tie) and the
// earlier first entry of the two.
func (a *Arrival) Merge(o Arrival) {
	if o.At == 0 {
		return
	}
	if a.At == 0 {
		*a = o
		return
	}
	first := min(a.first(), o.first())
	if o.At > a.At || o.At == a.At && o.Rank > a.Rank {
		a.Rank, a.At = o.Rank, o.At
	}
	a.Spread = spreadMicros(a.At - first)
}

// first is the earliest entry a knows of.
func (a *Arrival) first() int64 { return a.At - int64(a.Spread)*1000 }

// spreadMicros is ns in whole microseconds, within uint32.
func spreadMicros(ns int64) uint32 {
	return uint32(min(max(ns/1000, 0), math.MaxUint32))
}

// HeaderSize is the size of a Header on the wire.
const HeaderSize = 56

// Encode writes h into b (len(b) >= HeaderSize), little-endian.
func (h *Header) Encode(b []byte) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint64(b[0:], h.Seq)
	b[8] = h.Op
	b[9] = h.DType
	b[10] = h.RedOp
	b[11] = 0
	binary.LittleEndian.PutUint32(b[12:], uint32(h.Root))
	binary.LittleEndian.PutUint64(b[16:], h.Count)
	binary.LittleEndian.PutUint64(b[24:], h.Bytes)
	arr := h.Arrival.word()
	binary.LittleEndian.PutUint64(b[32:], headerMagic^h.Seq^h.Count^h.Bytes^arr^uint64(h.Arrival.At)) // integrity word
	binary.LittleEndian.PutUint64(b[40:], arr)
	binary.LittleEndian.PutUint64(b[48:], uint64(h.Arrival.At))
}

// word packs a's rank and spread into the header's bytes 40 to 47.
func (a *Arrival) word() uint64 { return uint64(uint32(a.Rank)) | uint64(a.Spread)<<32 }

// Decode reads a Header from b (len(b) >= HeaderSize). It returns an error when
// the integrity word does not match (a torn or foreign frame).
func (h *Header) Decode(b []byte) error {
	if len(b) < HeaderSize {
		return fmt.Errorf("transport: header needs %d bytes, got %d", HeaderSize, len(b))
	}
	h.Seq = binary.LittleEndian.Uint64(b[0:])
	h.Op = b[8]
	h.DType = b[9]
	h.RedOp = b[10]
	h.Root = int32(binary.LittleEndian.Uint32(b[12:]))
	h.Count = binary.LittleEndian.Uint64(b[16:])
	h.Bytes = binary.LittleEndian.Uint64(b[24:])
	arr, at := binary.LittleEndian.Uint64(b[40:]), binary.LittleEndian.Uint64(b[48:])
	h.Arrival = Arrival{Rank: int32(uint32(arr)), Spread: uint32(arr >> 32), At: int64(at)}
	if binary.LittleEndian.Uint64(b[32:]) != headerMagic^h.Seq^h.Count^h.Bytes^arr^at {
		return errors.New("transport: corrupt message header (bad integrity word)")
	}
	return nil
}

// headerMagic seeds the integrity word; its low bytes are the header's
// version, so that a peer speaking another one fails every message.
const headerMagic = 0x6c63636f67_0002 // "goccl" v2: v1 was 40 bytes, without Arrival

// Check compares the header a peer sent (got) with the one this rank expects
// (want) and returns a *MismatchError naming the first field that differs.
func Check(peer int, want, got *Header) error {
	switch {
	case got.Op != want.Op:
		return mismatch(peer, "op", uint64(want.Op), uint64(got.Op), want, got)
	case got.Seq != want.Seq:
		return mismatch(peer, "sequence", want.Seq, got.Seq, want, got)
	case got.DType != want.DType:
		return mismatch(peer, "dtype", uint64(want.DType), uint64(got.DType), want, got)
	case got.RedOp != want.RedOp:
		return mismatch(peer, "redop", uint64(want.RedOp), uint64(got.RedOp), want, got)
	case got.Root != want.Root:
		return mismatch(peer, "root", uint64(int64(want.Root)), uint64(int64(got.Root)), want, got)
	case got.Count != want.Count:
		return mismatch(peer, "count", want.Count, got.Count, want, got)
	case got.Bytes != want.Bytes:
		return mismatch(peer, "message bytes", want.Bytes, got.Bytes, want, got)
	}
	return nil
}

// mismatch builds Check's error, out of line: Check runs on every message.
//
//go:noinline
func mismatch(peer int, field string, w, g uint64, want, got *Header) error {
	return &MismatchError{Peer: peer, Field: field, Want: w, Got: g, Expected: *want, Sent: *got}
}

// MismatchError reports that a peer's message belongs to a different operation
// than the one this rank is running (different count, dtype, op, root or order).
type MismatchError struct {
	Peer      int
	Field     string // "op", "sequence", "dtype", "redop", "root", "count" or "message bytes"
	Want, Got uint64 // this rank's and the peer's value of Field
	// Expected is the header this rank expected, Sent the one the peer sent.
	Expected, Sent Header
	// WantName and GotName, when set, are printed instead of Want and Got
	// (the communicator sets the names of operations, types and reductions).
	WantName, GotName string
	// Of, when set, names the operation Field, Want and Got are about when it
	// is not the one running (for example an earlier operation that left
	// the peer's message unread: "Broadcast (op #3)").
	Of string
}

func (e *MismatchError) Error() string {
	field, want, got := e.Field, e.WantName, e.GotName
	if e.Of != "" {
		field += " of " + e.Of
	}
	if want == "" {
		want = strconv.FormatInt(int64(e.Want), 10)
	}
	if got == "" {
		got = strconv.FormatInt(int64(e.Got), 10)
	}
	return fmt.Sprintf("peer %d disagrees on %s: this rank has %s, peer sent %s", e.Peer, field, want, got)
}

// ErrCorrupt is wrapped by errors that say a message arrived damaged: its
// checksum (GOCCL_CHECKSUM=1 on TCP links) does not match the data.
var ErrCorrupt = errors.New("transport: data corrupted in transit")

// ErrClosed is returned by a Link used after Close, or whose peer closed it.
// errors.Is treats it, goccl.ErrClosed and rendezvous.ErrClosed as one.
var ErrClosed = closed.New("transport: link closed")

// ErrPeerLost is wrapped by errors that say a rank's process died or its
// connection broke: a link whose peer vanished without closing it (EOF or a
// reset on TCP, a dead process behind a shared-memory ring), or a link whose
// peer closed it because that peer lost a rank. errors.As with *LostError
// names the rank.
var ErrPeerLost = errors.New("transport: peer lost")

// LostError reports a lost rank. Via is the peer that reported the loss when
// the lost rank is not the link's own peer (a relayed loss), else -1.
type LostError struct {
	Rank  int
	Via   int
	Cause error // what showed the loss: io.EOF, ECONNRESET, "process exited", ...
}

func (e *LostError) Error() string {
	if e.Via >= 0 {
		return fmt.Sprintf("rank %d lost (reported by rank %d)", e.Rank, e.Via)
	}
	if e.Cause != nil {
		return fmt.Sprintf("rank %d lost: %v", e.Rank, e.Cause)
	}
	return fmt.Sprintf("rank %d lost", e.Rank)
}
func (e *LostError) Unwrap() error        { return e.Cause }
func (e *LostError) Is(target error) bool { return target == ErrPeerLost }

// LostRank returns the rank an error says was lost, or -1.
func LostRank(err error) int {
	var l *LostError
	if errors.As(err, &l) {
		return l.Rank
	}
	return -1
}

// Closing reasons a link passes to its peer with Abort.
const (
	// NoLostRank: the link is closed because of an error on this side, not
	// because a rank was lost.
	NoLostRank = -1
)

// PeerError wraps a failure of the link to a given peer.
type PeerError struct {
	Peer int
	Op   string // "send", "recv", "connect"
	Err  error
}

func (e *PeerError) Error() string { return fmt.Sprintf("%s peer %d: %v", e.Op, e.Peer, e.Err) }
func (e *PeerError) Unwrap() error { return e.Err }

// ReduceFunc folds src into dst element by element (dst[i] = dst[i] op src[i]).
// len(dst) == len(src) and both are whole elements. A transport may call it
// several times per message, on consecutive pieces, as data arrives, and on
// disjoint pieces concurrently (a TCP link striped over several sockets);
// pieces are always cut at multiples of 64 bytes so elements are never split.
type ReduceFunc func(dst, src []byte)

// Link is an ordered, reliable, bidirectional message channel to one peer.
//
// Send and Recv may be called concurrently with each other (one sender and one
// receiver goroutine at a time), never two Sends or two Recvs at once.
// Every blocking method returns ctx.Err() (wrapped) once ctx is done, which a
// link learns from ctx.Err and ctx.Deadline as well as ctx.Done: goccl's
// operation context has a deadline but no Done channel of its own. A call
// whose ctx is done when it starts fails at once, moving nothing; a call that
// ctx ends before any byte of its message moved leaves the link usable; one
// that ctx ends in the middle of a message may close the link.
// Errors of Send, TrySend and Recv on a closed link, and ctx's errors, are
// *PeerError values naming the peer and "send" or "recv".
// Hot paths must not allocate.
//
// Package transport/linktest checks an implementation against this contract.
type Link interface {
	// Peer is the rank at the other end.
	Peer() int
	// Send transmits h and buf (h.Bytes == len(buf)) and returns once buf may
	// be reused.
	Send(ctx context.Context, h *Header, buf []byte) error
	// TrySend transmits h and buf only if it can do so without waiting for the
	// peer (enough free buffer space now). It reports whether it sent; when it
	// did, buf may be reused.
	TrySend(h *Header, buf []byte) (bool, error)
	// Recv receives the next message, checks its header against want
	// (transport.Check) and stores its payload into buf (len(buf) == want.Bytes):
	// copied when reduce is nil, else folded in with reduce(buf[i:j], payload[i:j]).
	// It sets want.Arrival to the Arrival the sender's header carried
	// (after a failure want.Arrival may hold anything).
	// A header that differs fails Recv with a *MismatchError and closes
	// the link, so that the peer fails too instead of waiting for a reply.
	Recv(ctx context.Context, want *Header, buf []byte, reduce ReduceFunc) error
	// Close releases the link. Pending and later calls on either side fail,
	// with errors that wrap ErrClosed. Close may be called more than once,
	// and from any goroutine, also while a Send or Recv is in flight.
	Close() error
	// Abort is Close, telling the peer why: lost is the rank this side lost
	// (the peer's pending and later calls then fail with a *LostError naming
	// it), or NoLostRank (they fail with ErrClosed). It never blocks for
	// long and may be called from any goroutine, also while a Send or Recv
	// is in flight.
	Abort(lost int) error
	// Name is a short description for logs, e.g. "shm" or "tcp/2 socks 10.0.0.2:41000".
	Name() string
	// Counters counts the payload bytes this link has sent and received
	// (headers and checksums left out): messages whose Send, TrySend or
	// Recv succeeded, and ReadPeer/WritePeer copies on links that offer
	// PeerMemory. It is never nil and safe to read from any goroutine.
	Counters() *Counters
}

// LossWatcher is implemented by links that can tell, while no call is in
// progress on them, that a rank is lost: the peer's host stopped answering
// (the path to it is gone), or the peer gave up on the job because it lost
// a rank (the reason its Abort sent). WatchLoss arranges for f to be called
// once, from another goroutine, with a *PeerError (Op "link") wrapping a
// *LostError when that happens; not after the link is closed, and not for
// a peer that closed the link without losing a rank or whose process
// ended (the next call on the link reports those, as it always has). The
// group of links uses it to fail a rank that is waiting on another peer,
// or idle, as soon as the job is broken.
type LossWatcher interface {
	WatchLoss(f func(error))
}

// LossMarker is implemented by links whose goodbye (see Abort) can name a
// lost rank even when they close for another reason: MarkLost(lost) makes
// every later Close or Abort of the link tell the peer that this side lost
// rank lost. A group that aborts because a rank was lost marks every link
// first, then aborts them: a call that fails in between (its context
// cancelled part-way through a message) and closes its link must not tell
// the peer "closed, no loss".
type LossMarker interface {
	MarkLost(lost int)
}

// Counters are a link's byte counters (see Link.Counters). The zero value
// is ready; adding costs one atomic add and no allocation.
type Counters struct {
	sent, received atomic.Uint64
}

// AddSent counts n payload bytes sent.
func (c *Counters) AddSent(n int) { c.sent.Add(uint64(n)) }

// AddReceived counts n payload bytes received.
func (c *Counters) AddReceived(n int) { c.received.Add(uint64(n)) }

// Sent is the number of payload bytes sent so far.
func (c *Counters) Sent() uint64 { return c.sent.Load() }

// Received is the number of payload bytes received so far.
func (c *Counters) Received() uint64 { return c.received.Load() }

// Region names a buffer of one rank that its peer may read directly with
// PeerMemory.ReadPeer. It is opaque to everything but the link that made it
// (Expose) and its peer's link (ReadPeer): for shared-memory links it is the
// buffer's address and length in the exposing process. Algorithms carry
// Regions to the peer inside their own messages (EncodeRegion, DecodeRegion).
type Region struct {
	Addr uint64 // link-specific handle, e.g. a virtual address
	Len  uint64 // bytes
}

// RegionSize is the size of an encoded Region.
const RegionSize = 16

// Encode writes r into b (len(b) >= RegionSize), little-endian.
func (r Region) Encode(b []byte) {
	_ = b[RegionSize-1]
	binary.LittleEndian.PutUint64(b[0:], r.Addr)
	binary.LittleEndian.PutUint64(b[8:], r.Len)
}

// DecodeRegion reads a Region written by Region.Encode.
func DecodeRegion(b []byte) Region {
	_ = b[RegionSize-1]
	return Region{Addr: binary.LittleEndian.Uint64(b[0:]), Len: binary.LittleEndian.Uint64(b[8:])}
}

// PeerMemory is implemented by links through which this rank can read and
// write its peer's memory directly: one copy, straight from or into the
// peer's buffer, with no work on the peer's side (the RDMA READ and WRITE
// idea; shared-memory links do it with Linux Cross Memory Attach,
// process_vm_readv and process_vm_writev). The algorithms that use it
// (internal/algo's direct schedules) send each peer the Regions of their
// buffers in ordinary messages, read, and tell the peer when they are done;
// an exposed buffer must stay alive and unchanged until then.
type PeerMemory interface {
	// PeerReadable reports whether ReadPeer and WritePeer work on this link: both sides
	// allow it and a probe read of the peer's memory succeeded. It may run
	// that probe; call it where a Recv could run, not concurrently with one.
	PeerReadable() bool
	// Expose returns the Region of buf that the peer's ReadPeer takes. buf
	// must stay alive and unmodified until the peer says it has finished
	// reading, and must not be on a goroutine stack (a buffer that has
	// passed through an interface, as every collective's has, is on the heap).
	Expose(buf []byte) Region
	// ReadPeer copies len(dst) bytes from offset off of the peer's region r
	// into dst. It counts as a receive: it never runs concurrently with Recv
	// on the same link. Reading outside r is an error; a failure (also ctx
	// expiring between pieces, or either side closing the link during the
	// read) closes the link. When the peer closes the link because of an
	// error, its Abort waits (briefly) until a read or write in progress
	// has ended, so that it never returns a buffer the peer is still using.
	ReadPeer(ctx context.Context, r Region, off int, dst []byte) error
	// WritePeer copies src into the peer's region r at offset off, under
	// the same rules as ReadPeer. The peer must not touch that part of r
	// until this rank says it has finished writing.
	WritePeer(ctx context.Context, r Region, off int, src []byte) error
}
