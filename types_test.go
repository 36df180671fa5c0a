package goccl_test

import (
	"testing"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/reduce"
)

// The public enums and the kernels' enums are the same wire values.
func TestEnumsMatchKernels(t *testing.T) {
	pairs := []struct {
		pub goccl.DataType
		k   reduce.DType
	}{
		{goccl.Int8, reduce.Int8}, {goccl.Uint8, reduce.Uint8}, {goccl.Int32, reduce.Int32}, {goccl.Uint32, reduce.Uint32},
		{goccl.Int64, reduce.Int64}, {goccl.Uint64, reduce.Uint64}, {goccl.Float16Type, reduce.Float16},
		{goccl.BFloat16Type, reduce.BFloat16}, {goccl.Float32, reduce.Float32}, {goccl.Float64, reduce.Float64},
	}
	for _, p := range pairs {
		if uint8(p.pub) != uint8(p.k) {
			t.Errorf("%v = %d, kernel %v = %d", p.pub, p.pub, p.k, p.k)
		}
		if back, err := goccl.ParseDataType(p.pub.String()); err != nil || back != p.pub {
			t.Errorf("ParseDataType(%q) = %v, %v", p.pub.String(), back, err)
		}
	}
	ops := []struct {
		pub goccl.RedOp
		k   reduce.Op
	}{{goccl.Sum, reduce.Sum}, {goccl.Prod, reduce.Prod}, {goccl.Min, reduce.Min}, {goccl.Max, reduce.Max}, {goccl.Avg, reduce.Avg}}
	for _, p := range ops {
		if uint8(p.pub) != uint8(p.k) {
			t.Errorf("%v = %d, kernel op = %d", p.pub, p.pub, p.k)
		}
	}
	if goccl.BFloat16From(1.5).Float32() != 1.5 || goccl.TypeOf[goccl.BFloat16]() != goccl.BFloat16Type {
		t.Error("bfloat16 helpers")
	}
}
