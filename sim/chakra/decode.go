package chakra

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of et_def.proto's messages.
const (
	metaVersion, metaAttr = 1, 2

	nodeID, nodeName, nodeType, nodeCtrlDeps, nodeDataDeps     = 1, 2, 3, 4, 5
	nodeStart, nodeDuration, nodeInputs, nodeOutputs, nodeAttr = 6, 7, 8, 9, 10

	ioValues, ioShapes, ioTypes = 1, 2, 3

	attrName, attrDoc = 1, 2
)

func decodeMetadata(b []byte, m *GlobalMetadata) error {
	return fields(b, func(f field) error {
		switch f.num {
		case metaVersion:
			if err := f.want("version", protowire.BytesType); err != nil {
				return err
			}
			m.Version = string(f.b)
		case metaAttr:
			a, err := decodeAttr(f)
			if err != nil {
				return err
			}
			m.Attrs = append(m.Attrs, a)
		}
		return nil
	})
}

func decodeNode(b []byte, n *Node) error {
	return fields(b, func(f field) error {
		var err error
		switch f.num {
		case nodeID:
			err = f.varint("id", &n.ID)
		case nodeName:
			if err = f.want("name", protowire.BytesType); err == nil {
				n.Name = string(f.b)
			}
		case nodeType:
			var v uint64
			if err = f.varint("type", &v); err == nil {
				n.Type = NodeType(int32(v))
			}
		case nodeCtrlDeps:
			n.CtrlDeps, err = f.uint64s("ctrl_deps", n.CtrlDeps)
		case nodeDataDeps:
			n.DataDeps, err = f.uint64s("data_deps", n.DataDeps)
		case nodeStart:
			err = f.varint("start_time_micros", &n.StartTimeMicros)
		case nodeDuration:
			err = f.varint("duration_micros", &n.DurationMicros)
		case nodeInputs:
			n.Inputs, err = decodeIO(f, "inputs")
		case nodeOutputs:
			n.Outputs, err = decodeIO(f, "outputs")
		case nodeAttr:
			var a Attr
			if a, err = decodeAttr(f); err == nil {
				n.Attrs = append(n.Attrs, a)
			}
		}
		return err
	})
}

func (f field) varint(name string, v *uint64) error {
	if err := f.want(name, protowire.VarintType); err != nil {
		return err
	}
	*v = f.v
	return nil
}

// uint64s appends a repeated uint64: one varint, or a packed run.
func (f field) uint64s(name string, to []uint64) ([]uint64, error) {
	if f.typ == protowire.VarintType {
		return append(to, f.v), nil
	}
	if err := f.want(name, protowire.BytesType); err != nil {
		return to, err
	}
	for b := f.b; len(b) > 0; {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return to, fmt.Errorf("%s: packed value %d: %w", name, len(to), protowire.ParseError(n))
		}
		to, b = append(to, v), b[n:]
	}
	return to, nil
}

func decodeIO(f field, name string) (*IOInfo, error) {
	if err := f.want(name, protowire.BytesType); err != nil {
		return nil, err
	}
	io := new(IOInfo)
	err := fields(f.b, func(g field) error {
		var s *string
		switch g.num {
		case ioValues:
			s = &io.Values
		case ioShapes:
			s = &io.Shapes
		case ioTypes:
			s = &io.Types
		default:
			return nil
		}
		if err := g.want("string", protowire.BytesType); err != nil {
			return err
		}
		*s = string(g.b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return io, nil
}

func decodeAttr(f field) (Attr, error) {
	var a Attr
	if err := f.want("attr", protowire.BytesType); err != nil {
		return a, err
	}
	err := fields(f.b, func(g field) error {
		switch {
		case g.num == attrName || g.num == attrDoc:
			if err := g.want("name", protowire.BytesType); err != nil {
				return err
			}
			if g.num == attrName {
				a.Name = string(g.b)
			} else {
				a.Doc = string(g.b)
			}
		case g.num >= FieldDouble && g.num <= fieldLast:
			if err := g.want("value", attrWireType(g.num)); err != nil {
				return err
			}
			a = Attr{Name: a.Name, Doc: a.Doc, Field: g.num} // the oneof's last member wins
			switch {
			case g.num == FieldString || g.num == FieldBytes:
				a.Str = string(g.b)
			case g.typ == protowire.BytesType:
				a.Raw = append([]byte(nil), g.b...)
			default:
				a.setScalar(g.v)
			}
		}
		return nil
	})
	if err != nil {
		return a, fmt.Errorf("attr %q: %w", a.Name, err)
	}
	return a, nil
}
