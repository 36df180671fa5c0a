package goccl

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/reduce"
	"github.com/goccl/goccl/transport"
)

// GOCCL_DEBUG_CHECK=1 makes every collective start with an all-gather of
// each rank's fingerprint of the call (operation, element type, reduction,
// root, count and the operation's sequence number on the communicator), the
// idea of TORCH_DISTRIBUTED_DEBUG=DETAIL. Every rank compares them and, if
// any rank disagrees with rank 0, every rank fails with ErrMismatch naming
// the first such rank and both calls. Without it, disagreements are still
// caught from the header every message carries, but only by a rank that
// receives a message: when Broadcast or Reduce roots differ so that no rank
// receives one from a rank with the other root (two ranks that both pass
// themselves as root), the call returns nil and the next operation that
// reads the message left over reports it, naming the earlier operation.
//
// Fingerprint (little-endian, fingerprintSize bytes):
//
//	0  u8  operation     1  u8 element type   2 u8 reduction   3 u8 zero
//	4  i32 root (-1: none)
//	8  u64 count (elements, as passed by the caller)
//	16 u64 sequence number
//	24 [8] zero
const fingerprintSize = 32

type fingerprint struct {
	kind         opKind
	dtype, redop uint8
	root         int32
	count, seq   uint64
}

func (f *fingerprint) put(b []byte) {
	clear(b[:fingerprintSize])
	b[0], b[1], b[2] = uint8(f.kind), f.dtype, f.redop
	binary.LittleEndian.PutUint32(b[4:], uint32(f.root))
	binary.LittleEndian.PutUint64(b[8:], f.count)
	binary.LittleEndian.PutUint64(b[16:], f.seq)
}

func getFingerprint(b []byte) fingerprint {
	return fingerprint{
		kind: opKind(b[0]), dtype: b[1], redop: b[2],
		root:  int32(binary.LittleEndian.Uint32(b[4:])),
		count: binary.LittleEndian.Uint64(b[8:]),
		seq:   binary.LittleEndian.Uint64(b[16:]),
	}
}

func (f fingerprint) String() string {
	s := fmt.Sprintf("%v #%d (count %d, %v", f.kind, f.seq, f.count, DataType(f.dtype))
	if f.kind == opAllReduce || f.kind == opReduce || f.kind == opReduceScatter {
		s += fmt.Sprintf(", %v", RedOp(reduce.Op(f.redop)))
	}
	if f.root >= 0 {
		s += fmt.Sprintf(", root %d", f.root)
	}
	return s + ")"
}

// checkFingerprints runs the GOCCL_DEBUG_CHECK exchange for the operation
// begin has just set up in c.op.
func (c *Comm) checkFingerprints(ctx context.Context) error {
	h := c.op.Header
	mine := fingerprint{kind: opKind(h.Op), dtype: h.DType, redop: h.RedOp, root: h.Root, count: h.Count, seq: h.Seq}
	if mine.kind == opBarrier {
		mine.dtype = 0
	}
	P := c.size
	if len(c.checkBuf) != fingerprintSize*P {
		c.checkBuf = make([]byte, fingerprintSize*P)
	}
	mine.put(c.checkBuf[c.rank*fingerprintSize:])
	// The exchange's own header is the same on every rank whatever each
	// called, so that it completes and the comparison can name the culprit.
	saved := c.op
	c.op.Header = transport.Header{Op: uint8(opCheck), Root: -1, Count: fingerprintSize}
	c.op.ElemSize, c.op.Reduce, c.op.Reduce3 = 1, nil, nil
	own := c.checkBuf[c.rank*fingerprintSize : (c.rank+1)*fingerprintSize]
	var tmp [fingerprintSize]byte
	copy(tmp[:], own)
	err := c.group.AllGather(ctx, &c.op, tmp[:], c.checkBuf, fingerprintSize)
	c.op = saved
	if err != nil {
		return fmt.Errorf("%s exchange: %w", config.DebugCheck.Name, err)
	}
	ref := getFingerprint(c.checkBuf)
	for r := 1; r < P; r++ {
		if f := getFingerprint(c.checkBuf[r*fingerprintSize:]); f != ref {
			return fmt.Errorf("%w (%s): rank %d called %v, rank 0 called %v", ErrMismatch, config.DebugCheck.Name, r, f, ref)
		}
	}
	return nil
}
