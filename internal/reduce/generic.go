package reduce

import (
	"unsafe"
)

// The pure-Go kernels. They run on every architecture, on amd64 CPUs without
// AVX2, and for the few elements after the last whole vector of the assembly
// kernels. The plain loops walk unsafe pointers over 8 elements per iteration
// (no bounds checks, no per-element loop overhead); the slices were trimmed to
// a common length first, so nothing is read or written outside them.

type integer interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64
}

type number interface {
	integer | ~float32 | ~float64
}

// view reinterprets the whole elements of b as a []T without copying.
func view[T any](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// common trims d, a and b to their common length.
func common[T any](d, a, b []T) ([]T, []T, []T, int) {
	n := min(len(d), len(a), len(b))
	return d[:n], a[:n], b[:n], n
}

const unroll = 8

func sumN[T number](d, a, b []T) {
	d, a, b, n := common(d, a, b)
	if n == 0 {
		return
	}
	pd, pa, pb := unsafe.Pointer(&d[0]), unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0])
	stride := unroll * unsafe.Sizeof(d[0])
	i := 0
	for ; i+unroll <= n; i += unroll {
		dd, aa, bb := (*[unroll]T)(pd), (*[unroll]T)(pa), (*[unroll]T)(pb)
		dd[0] = aa[0] + bb[0]
		dd[1] = aa[1] + bb[1]
		dd[2] = aa[2] + bb[2]
		dd[3] = aa[3] + bb[3]
		dd[4] = aa[4] + bb[4]
		dd[5] = aa[5] + bb[5]
		dd[6] = aa[6] + bb[6]
		dd[7] = aa[7] + bb[7]
		pd, pa, pb = unsafe.Add(pd, stride), unsafe.Add(pa, stride), unsafe.Add(pb, stride)
	}
	for ; i < n; i++ {
		d[i] = a[i] + b[i]
	}
}

func prodN[T number](d, a, b []T) {
	d, a, b, n := common(d, a, b)
	if n == 0 {
		return
	}
	pd, pa, pb := unsafe.Pointer(&d[0]), unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0])
	stride := unroll * unsafe.Sizeof(d[0])
	i := 0
	for ; i+unroll <= n; i += unroll {
		dd, aa, bb := (*[unroll]T)(pd), (*[unroll]T)(pa), (*[unroll]T)(pb)
		dd[0] = aa[0] * bb[0]
		dd[1] = aa[1] * bb[1]
		dd[2] = aa[2] * bb[2]
		dd[3] = aa[3] * bb[3]
		dd[4] = aa[4] * bb[4]
		dd[5] = aa[5] * bb[5]
		dd[6] = aa[6] * bb[6]
		dd[7] = aa[7] * bb[7]
		pd, pa, pb = unsafe.Add(pd, stride), unsafe.Add(pa, stride), unsafe.Add(pb, stride)
	}
	for ; i < n; i++ {
		d[i] = a[i] * b[i]
	}
}

// minN and maxN use the built-in min and max, which for floats propagate NaN
// and order -0 below +0 (on amd64: MINSS/MAXSS pairs, no branches).
func minN[T number](d, a, b []T) {
	d, a, b, n := common(d, a, b)
	if n == 0 {
		return
	}
	pd, pa, pb := unsafe.Pointer(&d[0]), unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0])
	stride := unroll * unsafe.Sizeof(d[0])
	i := 0
	for ; i+unroll <= n; i += unroll {
		dd, aa, bb := (*[unroll]T)(pd), (*[unroll]T)(pa), (*[unroll]T)(pb)
		dd[0] = min(aa[0], bb[0])
		dd[1] = min(aa[1], bb[1])
		dd[2] = min(aa[2], bb[2])
		dd[3] = min(aa[3], bb[3])
		dd[4] = min(aa[4], bb[4])
		dd[5] = min(aa[5], bb[5])
		dd[6] = min(aa[6], bb[6])
		dd[7] = min(aa[7], bb[7])
		pd, pa, pb = unsafe.Add(pd, stride), unsafe.Add(pa, stride), unsafe.Add(pb, stride)
	}
	for ; i < n; i++ {
		d[i] = min(a[i], b[i])
	}
}

func maxN[T number](d, a, b []T) {
	d, a, b, n := common(d, a, b)
	if n == 0 {
		return
	}
	pd, pa, pb := unsafe.Pointer(&d[0]), unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0])
	stride := unroll * unsafe.Sizeof(d[0])
	i := 0
	for ; i+unroll <= n; i += unroll {
		dd, aa, bb := (*[unroll]T)(pd), (*[unroll]T)(pa), (*[unroll]T)(pb)
		dd[0] = max(aa[0], bb[0])
		dd[1] = max(aa[1], bb[1])
		dd[2] = max(aa[2], bb[2])
		dd[3] = max(aa[3], bb[3])
		dd[4] = max(aa[4], bb[4])
		dd[5] = max(aa[5], bb[5])
		dd[6] = max(aa[6], bb[6])
		dd[7] = max(aa[7], bb[7])
		pd, pa, pb = unsafe.Add(pd, stride), unsafe.Add(pa, stride), unsafe.Add(pb, stride)
	}
	for ; i < n; i++ {
		d[i] = max(a[i], b[i])
	}
}

// min8 and max8 compare in int32: the compiler has no 8-bit conditional move
// and would branch (mispredicting on random data).
func min8[T ~int8 | ~uint8](d, a, b []T) {
	d, a, b, n := common(d, a, b)
	if n == 0 {
		return
	}
	pd, pa, pb := unsafe.Pointer(&d[0]), unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0])
	stride := unroll * unsafe.Sizeof(d[0])
	i := 0
	for ; i+unroll <= n; i += unroll {
		dd, aa, bb := (*[unroll]T)(pd), (*[unroll]T)(pa), (*[unroll]T)(pb)
		dd[0] = T(min(int32(aa[0]), int32(bb[0])))
		dd[1] = T(min(int32(aa[1]), int32(bb[1])))
		dd[2] = T(min(int32(aa[2]), int32(bb[2])))
		dd[3] = T(min(int32(aa[3]), int32(bb[3])))
		dd[4] = T(min(int32(aa[4]), int32(bb[4])))
		dd[5] = T(min(int32(aa[5]), int32(bb[5])))
		dd[6] = T(min(int32(aa[6]), int32(bb[6])))
		dd[7] = T(min(int32(aa[7]), int32(bb[7])))
		pd, pa, pb = unsafe.Add(pd, stride), unsafe.Add(pa, stride), unsafe.Add(pb, stride)
	}
	for ; i < n; i++ {
		d[i] = T(min(int32(a[i]), int32(b[i])))
	}
}

func max8[T ~int8 | ~uint8](d, a, b []T) {
	d, a, b, n := common(d, a, b)
	if n == 0 {
		return
	}
	pd, pa, pb := unsafe.Pointer(&d[0]), unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0])
	stride := unroll * unsafe.Sizeof(d[0])
	i := 0
	for ; i+unroll <= n; i += unroll {
		dd, aa, bb := (*[unroll]T)(pd), (*[unroll]T)(pa), (*[unroll]T)(pb)
		dd[0] = T(max(int32(aa[0]), int32(bb[0])))
		dd[1] = T(max(int32(aa[1]), int32(bb[1])))
		dd[2] = T(max(int32(aa[2]), int32(bb[2])))
		dd[3] = T(max(int32(aa[3]), int32(bb[3])))
		dd[4] = T(max(int32(aa[4]), int32(bb[4])))
		dd[5] = T(max(int32(aa[5]), int32(bb[5])))
		dd[6] = T(max(int32(aa[6]), int32(bb[6])))
		dd[7] = T(max(int32(aa[7]), int32(bb[7])))
		pd, pa, pb = unsafe.Add(pd, stride), unsafe.Add(pa, stride), unsafe.Add(pb, stride)
	}
	for ; i < n; i++ {
		d[i] = T(max(int32(a[i]), int32(b[i])))
	}
}

// sum8 adds bytes (int8 or uint8: wrapping addition is the same) eight at a
// time in 64-bit words: the low 7 bits of each byte are added without
// carrying into the next byte, then the top bits are fixed up with xor.
func sum8(d, a, b []byte) {
	d, a, b, n := common(d, a, b)
	w := n / 8
	dw, aw, bw := view[uint64](d[:w*8]), view[uint64](a[:w*8]), view[uint64](b[:w*8])
	aw, bw = aw[:len(dw)], bw[:len(dw)]
	const h = 0x8080808080808080
	for i := range dw {
		x, y := aw[i], bw[i]
		dw[i] = (x&^h + y&^h) ^ ((x ^ y) & h)
	}
	for i := w * 8; i < n; i++ {
		d[i] = a[i] + b[i]
	}
}

// Half-precision kernels: widen to float32, combine, round back to nearest-even.

func bf16Sum(d, a, b []uint16) {
	d, a, b, n := common(d, a, b)
	for i := 0; i < n; i++ {
		d[i] = f32ToBF16(bf16ToF32(a[i]) + bf16ToF32(b[i]))
	}
}

func bf16Prod(d, a, b []uint16) {
	d, a, b, n := common(d, a, b)
	for i := 0; i < n; i++ {
		d[i] = f32ToBF16(bf16ToF32(a[i]) * bf16ToF32(b[i]))
	}
}

func bf16Min(d, a, b []uint16) {
	d, a, b, n := common(d, a, b)
	for i := 0; i < n; i++ {
		d[i] = f32ToBF16(min(bf16ToF32(a[i]), bf16ToF32(b[i])))
	}
}

func bf16Max(d, a, b []uint16) {
	d, a, b, n := common(d, a, b)
	for i := 0; i < n; i++ {
		d[i] = f32ToBF16(max(bf16ToF32(a[i]), bf16ToF32(b[i])))
	}
}

func f16Sum(d, a, b []uint16) {
	d, a, b, n := common(d, a, b)
	for i := 0; i < n; i++ {
		d[i] = f32ToF16(f16ToF32(a[i]) + f16ToF32(b[i]))
	}
}

func f16Prod(d, a, b []uint16) {
	d, a, b, n := common(d, a, b)
	for i := 0; i < n; i++ {
		d[i] = f32ToF16(f16ToF32(a[i]) * f16ToF32(b[i]))
	}
}

func f16Min(d, a, b []uint16) {
	d, a, b, n := common(d, a, b)
	for i := 0; i < n; i++ {
		d[i] = f32ToF16(min(f16ToF32(a[i]), f16ToF32(b[i])))
	}
}

func f16Max(d, a, b []uint16) {
	d, a, b, n := common(d, a, b)
	for i := 0; i < n; i++ {
		d[i] = f32ToF16(max(f16ToF32(a[i]), f16ToF32(b[i])))
	}
}

// Division (DivideBy).

func divF32(buf []byte, n int) {
	x, q := view[float32](buf), float32(n)
	for i := range x {
		x[i] /= q
	}
}

func divF64(buf []byte, n int) {
	x, q := view[float64](buf), float64(n)
	for i := range x {
		x[i] /= q
	}
}

func divBF16(buf []byte, n int) {
	x, q := view[uint16](buf), float32(n)
	for i := range x {
		x[i] = f32ToBF16(bf16ToF32(x[i]) / q)
	}
}

func divF16(buf []byte, n int) {
	x, q := view[uint16](buf), float32(n)
	for i := range x {
		x[i] = f32ToF16(f16ToF32(x[i]) / q)
	}
}

// Byte-slice adapters.

// typed3 adapts a typed kernel to byte slices.
func typed3[T any](k func(d, a, b []T)) func(dst, a, b []byte) {
	return func(dst, a, b []byte) { k(view[T](dst), view[T](a), view[T](b)) }
}

// as2 makes the in-place kernel dst = dst op src of an out-of-place one.
func as2(k func(dst, a, b []byte)) func(dst, src []byte) {
	return func(dst, src []byte) { k(dst, dst, src) }
}

func numberKernels[T number](s *kernelSet, dt DType) {
	s.f3[dt][Sum] = typed3(sumN[T])
	s.f3[dt][Prod] = typed3(prodN[T])
	s.f3[dt][Min] = typed3(minN[T])
	s.f3[dt][Max] = typed3(maxN[T])
}

func genericKernels() *kernelSet {
	s := new(kernelSet)
	numberKernels[int32](s, Int32)
	numberKernels[uint32](s, Uint32)
	numberKernels[int64](s, Int64)
	numberKernels[uint64](s, Uint64)
	numberKernels[float32](s, Float32)
	numberKernels[float64](s, Float64)
	s.f3[Int8] = [numKernelOps]func(dst, a, b []byte){sum8, typed3(prodN[int8]), typed3(min8[int8]), typed3(max8[int8])}
	s.f3[Uint8] = [numKernelOps]func(dst, a, b []byte){sum8, typed3(prodN[uint8]), typed3(min8[uint8]), typed3(max8[uint8])}
	s.f3[Float16] = [numKernelOps]func(dst, a, b []byte){typed3(f16Sum), typed3(f16Prod), typed3(f16Min), typed3(f16Max)}
	s.f3[BFloat16] = [numKernelOps]func(dst, a, b []byte){typed3(bf16Sum), typed3(bf16Prod), typed3(bf16Min), typed3(bf16Max)}
	for dt := range numDTypes {
		for op := range Op(numKernelOps) {
			s.f2[dt][op] = as2(s.f3[dt][op])
		}
	}
	s.div[Float16] = divF16
	s.div[BFloat16] = divBF16
	s.div[Float32] = divF32
	s.div[Float64] = divF64
	return s
}
