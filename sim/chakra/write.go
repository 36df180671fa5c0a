package chakra

import (
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// Version is the GlobalMetadata version Write puts in a file whose
// metadata is empty (Chakra's Python reader, protolib.decodeMessage, takes a
// message of length 0 for the end of the file): Chakra's own (pyproject.toml at the commit read; its
// generator, src/generator/generator.py, writes the same).
const Version = "1.0.0"

// Writer writes a file one node at a time.
type Writer struct {
	w   io.Writer
	buf []byte
	msg []byte
}

// NewWriter writes meta to w (with Version when meta is empty) and
// returns a Writer for the nodes.
func NewWriter(w io.Writer, meta GlobalMetadata) (*Writer, error) {
	if meta.Version == "" && len(meta.Attrs) == 0 {
		meta.Version = Version
	}
	wr := &Writer{w: w}
	b := appendString(nil, metaVersion, meta.Version)
	for i := range meta.Attrs {
		b = appendAttr(b, metaAttr, &meta.Attrs[i])
	}
	return wr, wr.put(b)
}

// Write writes one node.
func (w *Writer) Write(n *Node) error {
	w.msg = appendNode(w.msg[:0], n)
	if err := w.put(w.msg); err != nil {
		return fmt.Errorf("chakra: node %d: %w", n.ID, err)
	}
	return nil
}

// Write writes a whole file.
func Write(w io.Writer, t *Trace) error {
	wr, err := NewWriter(w, t.Metadata)
	if err != nil {
		return err
	}
	for _, n := range t.Nodes {
		if err := wr.Write(n); err != nil {
			return err
		}
	}
	return nil
}

// put writes msg with its length in front.
func (w *Writer) put(msg []byte) error {
	if len(msg) > MaxMessage {
		return fmt.Errorf("chakra: message of %d bytes: over the %d-byte limit readers accept", len(msg), MaxMessage)
	}
	w.buf = protowire.AppendVarint(w.buf[:0], uint64(len(msg)))
	w.buf = append(w.buf, msg...)
	_, err := w.w.Write(w.buf)
	return err
}

// appendNode encodes n as proto3 does: zero scalars left out, deps packed.
func appendNode(b []byte, n *Node) []byte {
	b = appendVarint(b, nodeID, n.ID)
	b = appendString(b, nodeName, n.Name)
	b = appendVarint(b, nodeType, uint64(int64(n.Type)))
	b = appendPacked(b, nodeCtrlDeps, n.CtrlDeps)
	b = appendPacked(b, nodeDataDeps, n.DataDeps)
	b = appendVarint(b, nodeStart, n.StartTimeMicros)
	b = appendVarint(b, nodeDuration, n.DurationMicros)
	b = appendIO(b, nodeInputs, n.Inputs)
	b = appendIO(b, nodeOutputs, n.Outputs)
	for i := range n.Attrs {
		b = appendAttr(b, nodeAttr, &n.Attrs[i])
	}
	return b
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendPacked(b []byte, num protowire.Number, vs []uint64) []byte {
	if len(vs) == 0 {
		return b
	}
	size := 0
	for _, v := range vs {
		size += protowire.SizeVarint(v)
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	for _, v := range vs {
		b = protowire.AppendVarint(b, v)
	}
	return b
}

func appendIO(b []byte, num protowire.Number, io *IOInfo) []byte {
	if io == nil {
		return b
	}
	var m []byte
	m = appendString(m, ioValues, io.Values)
	m = appendString(m, ioShapes, io.Shapes)
	m = appendString(m, ioTypes, io.Types)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// appendAttr encodes a; its value member is written whenever Field is set
// (a oneof member has presence, zero or not).
func appendAttr(b []byte, num protowire.Number, a *Attr) []byte {
	var m []byte
	m = appendString(m, attrName, a.Name)
	m = appendString(m, attrDoc, a.Doc)
	if a.Field >= FieldDouble && a.Field <= fieldLast {
		t := attrWireType(a.Field)
		m = protowire.AppendTag(m, a.Field, t)
		switch {
		case a.Field == FieldString || a.Field == FieldBytes:
			m = protowire.AppendString(m, a.Str)
		case t == protowire.BytesType:
			m = protowire.AppendBytes(m, a.Raw)
		case t == protowire.VarintType:
			m = protowire.AppendVarint(m, a.scalarBits())
		case t == protowire.Fixed32Type:
			m = protowire.AppendFixed32(m, uint32(a.scalarBits()))
		default:
			m = protowire.AppendFixed64(m, a.scalarBits())
		}
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}
