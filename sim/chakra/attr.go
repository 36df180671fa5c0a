package chakra

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Attr is an AttributeProto: a name and one value of the oneof "value".
// Field says which member holds it (et_def.proto's field numbers, the
// Field* constants; 0: none). The scalars are decoded into Int (signed
// integers and bool), Uint (unsigned), Float (double, float) or Str
// (string, bytes); the list members (the even fields 4 to 32) stay as the
// list message's encoded bytes in Raw.
type Attr struct {
	Name, Doc string
	Field     protowire.Number
	Int       int64
	Uint      uint64
	Float     float64
	Str       string
	Raw       []byte
}

// The scalar members of AttributeProto's oneof, by field number.
const (
	FieldDouble   protowire.Number = 3
	FieldFloat    protowire.Number = 5
	FieldInt32    protowire.Number = 7
	FieldInt64    protowire.Number = 9
	FieldUint32   protowire.Number = 11
	FieldUint64   protowire.Number = 13
	FieldSint32   protowire.Number = 15
	FieldSint64   protowire.Number = 17
	FieldFixed32  protowire.Number = 19
	FieldFixed64  protowire.Number = 21
	FieldSfixed32 protowire.Number = 23
	FieldSfixed64 protowire.Number = 25
	FieldBool     protowire.Number = 27
	FieldString   protowire.Number = 29
	FieldBytes    protowire.Number = 31
	fieldLast     protowire.Number = 32 // bytes_list
)

// attrWire is the wire type of each scalar member; the list members (even
// numbers 4 to 32) are length-delimited messages.
var attrWire = map[protowire.Number]protowire.Type{
	FieldDouble: protowire.Fixed64Type, FieldFloat: protowire.Fixed32Type,
	FieldInt32: protowire.VarintType, FieldInt64: protowire.VarintType,
	FieldUint32: protowire.VarintType, FieldUint64: protowire.VarintType,
	FieldSint32: protowire.VarintType, FieldSint64: protowire.VarintType,
	FieldFixed32: protowire.Fixed32Type, FieldFixed64: protowire.Fixed64Type,
	FieldSfixed32: protowire.Fixed32Type, FieldSfixed64: protowire.Fixed64Type,
	FieldBool: protowire.VarintType, FieldString: protowire.BytesType, FieldBytes: protowire.BytesType,
}

func attrWireType(f protowire.Number) protowire.Type {
	if t, ok := attrWire[f]; ok {
		return t
	}
	return protowire.BytesType // a list
}

// Int64Attr is an int64_val attribute (comm_type, comm_size, num_ops).
func Int64Attr(name string, v int64) Attr { return Attr{Name: name, Field: FieldInt64, Int: v} }

// Int32Attr is an int32_val attribute (comm_src, comm_dst, comm_tag).
func Int32Attr(name string, v int32) Attr { return Attr{Name: name, Field: FieldInt32, Int: int64(v)} }

// Uint64Attr is a uint64_val attribute (tensor_size).
func Uint64Attr(name string, v uint64) Attr { return Attr{Name: name, Field: FieldUint64, Uint: v} }

// BoolAttr is a bool_val attribute (is_cpu_op).
func BoolAttr(name string, v bool) Attr {
	a := Attr{Name: name, Field: FieldBool}
	if v {
		a.Int = 1
	}
	return a
}

// StringAttr is a string_val attribute (pg_name).
func StringAttr(name, v string) Attr { return Attr{Name: name, Field: FieldString, Str: v} }

// AsInt is a's value as an int64 when it is an integer or a bool.
func (a Attr) AsInt() (int64, bool) {
	switch a.Field {
	case FieldInt32, FieldInt64, FieldSint32, FieldSint64, FieldSfixed32, FieldSfixed64, FieldBool:
		return a.Int, true
	case FieldUint32, FieldUint64, FieldFixed32, FieldFixed64:
		if a.Uint > math.MaxInt64 {
			return 0, false
		}
		return int64(a.Uint), true
	}
	return 0, false
}

// setScalar decodes a scalar member's wire value v (varint or fixed bits).
func (a *Attr) setScalar(v uint64) {
	switch a.Field {
	case FieldDouble:
		a.Float = math.Float64frombits(v)
	case FieldFloat:
		a.Float = float64(math.Float32frombits(uint32(v)))
	case FieldInt32, FieldSfixed32:
		a.Int = int64(int32(v))
	case FieldInt64, FieldSfixed64:
		a.Int = int64(v)
	case FieldSint32:
		a.Int = int64(int32(protowire.DecodeZigZag(v & math.MaxUint32)))
	case FieldSint64:
		a.Int = protowire.DecodeZigZag(v)
	case FieldBool:
		a.Int = int64(min(v, 1))
	}
	switch a.Field {
	case FieldUint32, FieldFixed32:
		a.Uint = uint64(uint32(v))
	case FieldUint64, FieldFixed64:
		a.Uint = v
	}
}

// scalarBits is the wire value of a scalar member (the inverse of setScalar).
func (a *Attr) scalarBits() uint64 {
	switch a.Field {
	case FieldDouble:
		return math.Float64bits(a.Float)
	case FieldFloat:
		return uint64(math.Float32bits(float32(a.Float)))
	case FieldInt32, FieldInt64, FieldSfixed64:
		return uint64(a.Int)
	case FieldSfixed32:
		return uint64(uint32(int32(a.Int)))
	case FieldSint32:
		return protowire.EncodeZigZag(int64(int32(a.Int))) & math.MaxUint32
	case FieldSint64:
		return protowire.EncodeZigZag(a.Int)
	case FieldBool:
		return uint64(min(max(a.Int, 0), 1))
	case FieldUint32, FieldFixed32:
		return uint64(uint32(a.Uint))
	}
	return a.Uint // uint64, fixed64
}
