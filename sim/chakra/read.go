package chakra

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// MaxMessage bounds one message of a file (bytes). The largest node of the
// traces Chakra's converter writes is some kilobytes; a longer length is
// read as corruption.
const MaxMessage = 64 << 20

// Trace is a whole file.
type Trace struct {
	Metadata GlobalMetadata
	Nodes    []*Node
}

// Reader reads a file one node at a time.
type Reader struct {
	br   *bufio.Reader
	off  int64 // bytes read so far (of the decompressed stream)
	meta GlobalMetadata
	buf  []byte
}

// NewReader reads the GlobalMetadata at the start of r (plain, or gzip:
// detected by its magic bytes 1f 8b).
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReader(r)
	if b, err := br.Peek(2); err == nil && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("chakra: gzip: %w", err)
		}
		br = bufio.NewReader(zr)
	}
	rd := &Reader{br: br}
	start := rd.off
	b, err := rd.message()
	if err == io.EOF {
		return nil, errors.New("chakra: empty file: no GlobalMetadata")
	}
	if err != nil {
		return nil, err
	}
	if err := decodeMetadata(b, &rd.meta); err != nil {
		return nil, fmt.Errorf("chakra: offset %d: GlobalMetadata: %w", start, err)
	}
	return rd, nil
}

// Metadata is the file's GlobalMetadata.
func (r *Reader) Metadata() GlobalMetadata { return r.meta }

// Next reads the next node; io.EOF after the last.
func (r *Reader) Next() (*Node, error) {
	start := r.off
	b, err := r.message()
	if err != nil {
		return nil, err
	}
	n := new(Node)
	if err := decodeNode(b, n); err != nil {
		return nil, fmt.Errorf("chakra: offset %d: node (%d bytes): %w", start, len(b), err)
	}
	return n, nil
}

// Read reads a whole file.
func Read(r io.Reader) (*Trace, error) {
	rd, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	t := &Trace{Metadata: rd.Metadata()}
	for {
		n, err := rd.Next()
		if err == io.EOF {
			return t, nil
		}
		if err != nil {
			return nil, err
		}
		t.Nodes = append(t.Nodes, n)
	}
}

// message reads one length-delimited message into r.buf; io.EOF at a
// clean end. The buffer grows with the bytes that arrive, not with the
// length the file claims.
func (r *Reader) message() ([]byte, error) {
	start := r.off
	var size uint64
	for shift := uint(0); ; shift += 7 {
		c, err := r.br.ReadByte()
		if err == io.EOF && shift == 0 {
			return nil, io.EOF
		}
		if err != nil {
			return nil, fmt.Errorf("chakra: offset %d: message length: %w", start, noEOF(err))
		}
		r.off++
		if shift == 63 && c > 1 || shift > 63 {
			return nil, fmt.Errorf("chakra: offset %d: message length: varint overflows 64 bits", start)
		}
		size |= uint64(c&0x7f) << shift
		if c < 0x80 {
			break
		}
	}
	if size > MaxMessage {
		return nil, fmt.Errorf("chakra: offset %d: message length %d: over the %d-byte limit (a corrupt file?)", start, size, MaxMessage)
	}
	r.buf = r.buf[:0]
	for left := int(size); left > 0; {
		chunk := min(left, 1<<20)
		n := len(r.buf)
		r.buf = append(r.buf, make([]byte, chunk)...)
		got, err := io.ReadFull(r.br, r.buf[n:])
		r.off += int64(got)
		if err != nil {
			return nil, fmt.Errorf("chakra: offset %d: message of %d bytes: only %d before the end: %w", start, size, len(r.buf)-chunk+got, noEOF(err))
		}
		left -= chunk
	}
	return r.buf, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// field is one field of a message: its number and wire type, and its
// value (v for varint and fixed, b for length-delimited).
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

// fields calls fn on each field of msg in order; malformed wire data is an
// error naming the field's offset in msg.
func fields(msg []byte, fn func(f field) error) error {
	for off := 0; off < len(msg); {
		num, typ, n := protowire.ConsumeTag(msg[off:])
		if n < 0 {
			return fmt.Errorf("byte %d: tag: %w", off, protowire.ParseError(n))
		}
		f := field{num: num, typ: typ}
		body := msg[off+n:]
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(body)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(body)
			f.v = uint64(v)
		case protowire.Fixed64Type:
			f.v, n = protowire.ConsumeFixed64(body)
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(body)
		default:
			n = protowire.ConsumeFieldValue(num, typ, body)
		}
		if n < 0 {
			return fmt.Errorf("byte %d: field %d: %w", off, num, protowire.ParseError(n))
		}
		if err := fn(f); err != nil {
			return fmt.Errorf("byte %d: field %d: %w", off, num, err)
		}
		off += len(msg[off:]) - len(body) + n
	}
	return nil
}

// want reports a known field with the wrong wire type.
func (f field) want(name string, t protowire.Type) error {
	if f.typ != t {
		return fmt.Errorf("%s: wire type %d, want %d", name, f.typ, t)
	}
	return nil
}
