package reduce

import "fmt"

// ScaleInto writes src times s into dst (the same length; they may be the
// same slice), both holding elements of the floating-point type dt: the
// pre-multiplication of PreMulSum. Float16 and BFloat16 elements are
// multiplied in float32 and rounded back to nearest-even, Float32 in float32
// (s rounded to it), Float64 in float64.
func ScaleInto(dt DType, dst, src []byte, s float64) error {
	if dt >= numDTypes || !dt.IsFloat() {
		return fmt.Errorf("reduce: premulsum is only defined for floating-point types, got %v", dt)
	}
	if len(dst) != len(src) || len(src)%dt.Size() != 0 {
		return fmt.Errorf("reduce: scale of %d bytes into %d bytes of %v", len(src), len(dst), dt)
	}
	switch dt {
	case Float32:
		d, x, q := view[float32](dst), view[float32](src), float32(s)
		for i := range x {
			d[i] = x[i] * q
		}
	case Float64:
		d, x := view[float64](dst), view[float64](src)
		for i := range x {
			d[i] = x[i] * s
		}
	case Float16:
		d, x, q := view[uint16](dst), view[uint16](src), float32(s)
		for i := range x {
			d[i] = f32ToF16(f16ToF32(x[i]) * q)
		}
	case BFloat16:
		d, x, q := view[uint16](dst), view[uint16](src), float32(s)
		for i := range x {
			d[i] = f32ToBF16(bf16ToF32(x[i]) * q)
		}
	}
	return nil
}
