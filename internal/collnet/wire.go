// Package collnet is in-network aggregation in the role of NVIDIA SHARP
// (NCCL's CollNet): aggregation nodes (`goccl aggd`) that sit where a
// switch would, take a stream of chunks from each child — ranks, or other
// aggregation nodes — reduce each chunk as soon as every child's copy has
// arrived, pass the partial result up to their parent, and send the final
// result from the root back down to every child. Each rank sends its
// buffer once and receives the result once: S bytes each way per rank,
// where a ring AllReduce moves 2(n-1)/n·S.
//
// A tree has two levels at most: a root, and optionally leaves that
// registered with it (`goccl aggd --parent ROOT`). A rank knows only the
// root's address; it attaches there, and the root either takes it (a job
// of at most its fan-in ranks) or redirects it to a leaf (ranks split in
// contiguous blocks, one per leaf, as few leaves as the leaves' fan-in
// allows). A leaf attaches to the root for the job when its first rank
// arrives.
//
// Wire format (little-endian). Every connection opens with a 256-byte
// hello and, to an attach, a 256-byte reply. Then, per operation, each
// child sends a 32-byte operation header and its payload as a raw byte
// stream; the parent answers with frames — an 8-byte frame header (kind,
// length) and the length's bytes — data frames making up the result, or an
// error frame whose bytes are a message (the operation and the job end).
// When the attaching side sets flagRoCE in its hello and the node has a
// RoCE device too, the reply sets it back and both ends move the stream
// onto an RC queue pair right after the reply (transport/roce.Upgrade:
// the same bytes, carried by RDMA WRITE with immediate; the TCP connection
// stays as the control channel).
// Memory is bounded: a node holds at most `window` chunks per child and
// per result, whatever the operation's size.
package collnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/goccl/goccl/internal/reduce"
)

const (
	magic     = 0x314e4347 // "GCN1"
	helloSize = 256
	opSize    = 32
	frameSize = 8
	maxAddr   = 80

	// ChunkBytes is the unit of reduction and of the result frames.
	ChunkBytes = 256 << 10
	// window is the number of chunk buffers per child and for results.
	window = 4
)

// Hello kinds.
const (
	kindAttach   = 1 // a rank or a leaf joins a job at this node
	kindRegister = 2 // a leaf registers with its root at start
)

// Reply statuses.
const (
	replyOK       = 0
	replyRedirect = 1
	replyError    = 2
)

// Hello flags.
const (
	flagRoCE = 1 // the data path over RoCE (request: this side has a device; reply: so does the node)
)

// Frame kinds.
const (
	frameData  = 0
	frameError = 1
)

// JobID names a job (a communicator) at the aggregation nodes.
type JobID [16]byte

// hello opens a connection.
type hello struct {
	kind uint8
	job  JobID
	rank int32 // the attaching rank; -1: a leaf
	// size is the job's world size (a rank to the root); index and group
	// the child's place at this node (group 0: the root decides).
	size, index, group uint32
	// upIndex and upGroup are a leaf's place at the root for this job.
	upIndex, upGroup uint32
	fanin            uint32 // register: the leaf's fan-in
	addr             string // register: the leaf's address; reply: redirect address or error
	status           uint8  // reply
	flags            uint8
}

func (h *hello) encode(b []byte) {
	clear(b[:helloSize])
	le := binary.LittleEndian
	le.PutUint32(b, magic)
	b[4] = h.kind
	b[5] = h.status
	b[6] = h.flags
	copy(b[8:24], h.job[:])
	le.PutUint32(b[24:], uint32(h.rank))
	le.PutUint32(b[28:], h.size)
	le.PutUint32(b[32:], h.index)
	le.PutUint32(b[36:], h.group)
	le.PutUint32(b[40:], h.upIndex)
	le.PutUint32(b[44:], h.upGroup)
	le.PutUint32(b[48:], h.fanin)
	a := h.addr
	if len(a) > helloSize-56 {
		a = a[:helloSize-56]
	}
	b[52] = byte(len(a))
	copy(b[56:], a)
}

func (h *hello) decode(b []byte) error {
	le := binary.LittleEndian
	if m := le.Uint32(b); m != magic {
		return fmt.Errorf("not a collnet peer (magic %#x)", m)
	}
	*h = hello{kind: b[4], status: b[5], flags: b[6]}
	copy(h.job[:], b[8:24])
	h.rank = int32(le.Uint32(b[24:]))
	h.size = le.Uint32(b[28:])
	h.index = le.Uint32(b[32:])
	h.group = le.Uint32(b[36:])
	h.upIndex = le.Uint32(b[40:])
	h.upGroup = le.Uint32(b[44:])
	h.fanin = le.Uint32(b[48:])
	n := int(b[52])
	if n > helloSize-56 {
		return fmt.Errorf("address of %d bytes", n)
	}
	h.addr = string(b[56 : 56+n])
	return nil
}

func writeHello(w io.Writer, h *hello) error {
	var b [helloSize]byte
	h.encode(b[:])
	_, err := w.Write(b[:])
	return err
}

func readHello(r io.Reader) (hello, error) {
	var b [helloSize]byte
	var h hello
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return h, err
	}
	return h, h.decode(b[:])
}

// opHeader starts an operation on a child's stream.
type opHeader struct {
	seq   uint64
	bytes uint64
	dtype uint8
	op    uint8
	elem  uint8 // element size, for chunk alignment
}

func (o *opHeader) encode(b []byte) {
	clear(b[:opSize])
	le := binary.LittleEndian
	le.PutUint64(b, o.seq)
	le.PutUint64(b[8:], o.bytes)
	b[16], b[17], b[18] = o.dtype, o.op, o.elem
}

func (o *opHeader) decode(b []byte) {
	le := binary.LittleEndian
	*o = opHeader{seq: le.Uint64(b), bytes: le.Uint64(b[8:]), dtype: b[16], op: b[17], elem: b[18]}
}

func (o opHeader) String() string {
	return fmt.Sprintf("op #%d of %d bytes (%v, %v)", o.seq, o.bytes, reduce.DType(o.dtype), reduce.Op(o.op))
}

// chunkLen is the length of chunk k of an operation of n bytes.
func chunkLen(n uint64, k int) int {
	return int(min(uint64(ChunkBytes), n-uint64(k)*ChunkBytes))
}

func chunks(n uint64) int { return int((n + ChunkBytes - 1) / ChunkBytes) }

// ErrAggregation is wrapped by the errors of operations that an
// aggregation node failed (or that failed reaching one).
var ErrAggregation = errors.New("in-network aggregation failed")
