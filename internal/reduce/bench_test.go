package reduce

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchData returns 64 MiB dst and src buffers of dt for op: random ints,
// or floats of magnitude in [1, 2) (for Prod, src is ±1 so that repeated
// products neither overflow nor underflow: subnormal operands would make the
// FPU take microcode assists and measure those instead).
func benchData(dt DType, op Op) (dst, src []byte) {
	dst, src = make([]byte, 64<<20), make([]byte, 64<<20)
	r := rand.New(rand.NewPCG(1, uint64(dt)))
	if !dt.IsFloat() {
		for i := 0; i < len(dst); i += 8 {
			ne.PutUint64(dst[i:], r.Uint64())
			ne.PutUint64(src[i:], r.Uint64())
		}
		return dst, src
	}
	sz := dt.Size()
	for i := 0; i < len(dst); i += sz {
		x, y := 1+r.Float64(), 1+r.Float64()
		if op == Prod {
			y = 1
		}
		if r.IntN(2) == 0 {
			y = -y
		}
		putFloat(dt, dst[i:], x)
		putFloat(dt, src[i:], y)
	}
	return dst, src
}

// BenchmarkFunc measures dst[i] op= src[i] for every implementation, type and
// operator on 64 MiB buffers (memory bound) and on 256 KiB buffers (cache
// resident). b.SetBytes is the size of dst, so MB/s reads as dst bytes/s.
// Filter with -bench, e.g. 'Func/avx512/64MiB/float/sum'.
func BenchmarkFunc(b *testing.B) {
	for _, im := range Impls() {
		for _, size := range benchSizes {
			for _, dt := range allDTypes {
				for _, op := range []Op{Sum, Prod, Min, Max} {
					name := fmt.Sprintf("%v/%dKiB/%v/%v", im, size>>10, dt, op)
					if size >= 1<<20 {
						name = fmt.Sprintf("%v/%dMiB/%v/%v", im, size>>20, dt, op)
					}
					b.Run(name, func(b *testing.B) {
						prev, _ := SetImpl(im)
						f, _ := Func(dt, op)
						SetImpl(prev)
						dst, src := benchData(dt, op)
						dst, src = dst[:size], src[:size]
						b.SetBytes(int64(size))
						for b.Loop() {
							f(dst, src)
						}
					})
				}
			}
		}
	}
}

// BenchmarkDivideBy measures the Avg division on 64 MiB.
func BenchmarkDivideBy(b *testing.B) {
	buf := make([]byte, 64<<20)
	for _, im := range Impls() {
		for _, dt := range []DType{Float16, BFloat16, Float32, Float64} {
			b.Run(fmt.Sprintf("%v/%v", im, dt), func(b *testing.B) {
				prev, _ := SetImpl(im)
				defer SetImpl(prev)
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					_ = DivideBy(dt, buf, 3)
				}
			})
		}
	}
}

// benchSizes are the buffer sizes of BenchmarkFunc: memory bound and L2 resident.
var benchSizes = []int{64 << 20, 256 << 10}
