package goccl

import (
	"fmt"
	"unsafe"

	"github.com/goccl/goccl/internal/reduce"
	"github.com/x448/float16"
)

// Float16 is the IEEE 754 binary16 element type (from github.com/x448/float16).
type Float16 = float16.Float16

// BFloat16 is the bfloat16 element type: the upper 16 bits of an IEEE 754
// binary32 value (1 sign, 8 exponent, 7 mantissa bits).
type BFloat16 uint16

// BFloat16From converts f to bfloat16 with round-to-nearest-even (NaN stays NaN).
func BFloat16From(f float32) BFloat16 {
	b := *(*uint32)(unsafe.Pointer(&f))
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and non-zero
		return BFloat16(b>>16 | 0x40)
	}
	b += 0x7fff + (b>>16)&1
	return BFloat16(b >> 16)
}

// Float32 widens b to float32 exactly.
func (b BFloat16) Float32() float32 {
	u := uint32(b) << 16
	return *(*float32)(unsafe.Pointer(&u))
}

// Element lists the Go types goccl collectives accept.
type Element interface {
	int8 | uint8 | int32 | uint32 | int64 | uint64 | Float16 | BFloat16 | float32 | float64
}

// DataType names an element type on the wire (the ncclDataType_t idea).
type DataType uint8

// Element types. Values are part of the wire format; do not reorder.
const (
	Int8 DataType = iota
	Uint8
	Int32
	Uint32
	Int64
	Uint64
	Float16Type
	BFloat16Type
	Float32
	Float64
	numDataTypes
)

// String returns the nccl-tests name of the type ("float", "half", "int32", ...).
func (d DataType) String() string {
	if d < numDataTypes {
		return reduce.DType(d).String()
	}
	return fmt.Sprintf("DataType(%d)", uint8(d))
}

// Size is the element size in bytes (0 for an unknown type).
func (d DataType) Size() int { return reduce.DType(d).Size() }

// IsFloat reports whether d is a floating-point type.
func (d DataType) IsFloat() bool { return reduce.DType(d).IsFloat() }

// Valid reports whether d is a known type.
func (d DataType) Valid() bool { return d < numDataTypes }

// DataTypes lists every element type in wire order.
func DataTypes() []DataType {
	return []DataType{Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16Type, BFloat16Type, Float32, Float64}
}

// ParseDataType accepts nccl-tests names (int8, uint8, int32, uint32, int64,
// uint64, half, bfloat16, float, double) and the aliases float16, float32, float64.
func ParseDataType(s string) (DataType, error) {
	for d := DataType(0); d < numDataTypes; d++ {
		if d.String() == s {
			return d, nil
		}
	}
	switch s {
	case "float16", "fp16":
		return Float16Type, nil
	case "bf16":
		return BFloat16Type, nil
	case "float32", "fp32":
		return Float32, nil
	case "float64", "fp64":
		return Float64, nil
	}
	return 0, fmt.Errorf("goccl: unknown data type %q", s)
}

// TypeOf returns the DataType of the element type T.
func TypeOf[T Element]() DataType {
	var z T
	switch any(z).(type) {
	case int8:
		return Int8
	case uint8:
		return Uint8
	case int32:
		return Int32
	case uint32:
		return Uint32
	case int64:
		return Int64
	case uint64:
		return Uint64
	case Float16:
		return Float16Type
	case BFloat16:
		return BFloat16Type
	case float32:
		return Float32
	default:
		return Float64
	}
}

// RedOp is a reduction operator (the ncclRedOp_t idea).
type RedOp uint8

// Reduction operators. Values are part of the wire format; do not reorder.
const (
	Sum RedOp = iota
	Prod
	Min
	Max
	Avg // sum divided by the world size; floating-point types only, as in NCCL
	numRedOps
)

var redOpNames = [...]string{"sum", "prod", "min", "max", "avg"}

// String returns the nccl-tests name ("sum", "prod", "min", "max", "avg").
func (o RedOp) String() string {
	if o < numRedOps {
		return redOpNames[o]
	}
	return fmt.Sprintf("RedOp(%d)", uint8(o))
}

// Valid reports whether o is a known operator.
func (o RedOp) Valid() bool { return o < numRedOps }

// RedOps lists every reduction operator.
func RedOps() []RedOp { return []RedOp{Sum, Prod, Min, Max, Avg} }

// ParseRedOp accepts "sum", "prod", "min", "max", "avg".
func ParseRedOp(s string) (RedOp, error) {
	for i, n := range redOpNames {
		if n == s {
			return RedOp(i), nil
		}
	}
	return 0, fmt.Errorf("goccl: unknown reduction op %q", s)
}

// asBytes views a typed slice as bytes without copying.
func asBytes[T Element](s []T) []byte {
	if len(s) == 0 {
		if s == nil {
			return nil
		}
		return []byte{}
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}
