package xfer

import (
	"encoding/binary"
	"fmt"
	"io"
)

// The TCP protocol between an initiator and a target agent. A connection
// opens with a hello each way, then carries frames: a 40-byte header,
// little-endian, and for some kinds a payload of Len bytes.
//
//	initiator → target:
//	  fWrite  token, type, addr, dev, len, [crc]   + payload: store it at (type, dev, addr)
//	  fRead   token, type, addr, dev, len          : send those bytes back
//	  fNotif  len                                  + payload: a notification
//	target → initiator:
//	  fAck    token                                : the fWrite's bytes are in memory
//	  fData   token, len, [crc]                    + payload: the fRead's bytes
//	  fErr    token, len                           + payload: why token's chunk failed
//
// Tokens are the initiator's, per connection; the target answers every
// fWrite and fRead, in order.
const (
	fWrite = 1 + iota
	fRead
	fNotif
	fAck
	fData
	fErr
	fQP     // initiator → target, token, len + payload: its queue pair (rdma.ConnInfo, JSON)
	fQPInfo // target → initiator, token, len + payload: the target's queue pair, connected
)

// request reports a kind an initiator sends.
func (f *frame) request() bool {
	return f.kind == fWrite || f.kind == fRead || f.kind == fNotif || f.kind == fQP
}

const (
	frameSize = 40
	flagCRC   = 1 // the header's CRC field holds the payload's CRC-32C

	// maxChunk bounds one frame's payload: a target refuses larger frames
	// (a corrupt or foreign stream) instead of allocating or reading on.
	maxChunk = 64 << 20
	// maxNotif bounds a notification.
	maxNotif = 1 << 20

	helloMagic = "GXF1"
	maxName    = 255
)

type frame struct {
	kind  uint8
	typ   MemType
	flags uint8
	crc   uint32
	token uint64
	addr  uint64
	dev   uint64
	len   uint64
}

func (f *frame) encode(b []byte) {
	_ = b[frameSize-1]
	b[0] = f.kind
	b[1] = uint8(f.typ)
	b[2] = f.flags
	b[3] = 0
	binary.LittleEndian.PutUint32(b[4:], f.crc)
	binary.LittleEndian.PutUint64(b[8:], f.token)
	binary.LittleEndian.PutUint64(b[16:], f.addr)
	binary.LittleEndian.PutUint64(b[24:], f.dev)
	binary.LittleEndian.PutUint64(b[32:], f.len)
}

// decode parses a header and checks what a receiver relies on: a known
// kind and a payload length within bounds.
func (f *frame) decode(b []byte) error {
	f.kind = b[0]
	f.typ = MemType(b[1])
	f.flags = b[2]
	f.crc = binary.LittleEndian.Uint32(b[4:])
	f.token = binary.LittleEndian.Uint64(b[8:])
	f.addr = binary.LittleEndian.Uint64(b[16:])
	f.dev = binary.LittleEndian.Uint64(b[24:])
	f.len = binary.LittleEndian.Uint64(b[32:])
	switch f.kind {
	case fWrite, fRead, fData:
		if f.len > maxChunk {
			return fmt.Errorf("%w: frame of kind %d with %d bytes (at most %d)", ErrProtocol, f.kind, f.len, maxChunk)
		}
		if f.kind != fData && f.typ != DRAM && f.typ != FILE {
			return fmt.Errorf("%w: memory type %d", ErrProtocol, f.typ)
		}
	case fNotif, fErr, fQP, fQPInfo:
		if f.len > maxNotif {
			return fmt.Errorf("%w: frame of kind %d with %d bytes (at most %d)", ErrProtocol, f.kind, f.len, maxNotif)
		}
	case fAck:
	default:
		return fmt.Errorf("%w: unknown frame kind %d", ErrProtocol, f.kind)
	}
	return nil
}

// writeHello sends the opening: magic, then the sender's agent name.
func writeHello(w io.Writer, name string) error {
	b := make([]byte, 0, 5+len(name))
	b = append(b, helloMagic...)
	b = append(b, byte(len(name)))
	b = append(b, name...)
	_, err := w.Write(b)
	return err
}

// readHello reads a peer's opening and returns its agent name.
func readHello(r io.Reader) (string, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return "", err
	}
	if string(h[:4]) != helloMagic {
		return "", fmt.Errorf("%w: not an xfer agent (hello %q)", ErrProtocol, h[:4])
	}
	name := make([]byte, h[4])
	if _, err := io.ReadFull(r, name); err != nil {
		return "", err
	}
	if len(name) == 0 {
		return "", fmt.Errorf("%w: hello without an agent name", ErrProtocol)
	}
	return string(name), nil
}
