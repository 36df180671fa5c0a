package reduce

import (
	"fmt"
	"testing"
)

var benchBufs [2][]byte

// BenchmarkFunc measures dst[i] op= src[i] for every implementation, type and
// operator on 64 MiB buffers (memory bound) and on 256 KiB buffers (cache
// resident). b.SetBytes is the size of dst, so MB/s reads as dst bytes/s.
// Filter with -bench, e.g. 'Func/avx512/64MiB/float/sum'.
func BenchmarkFunc(b *testing.B) {
	if benchBufs[0] == nil {
		for i := range benchBufs {
			benchBufs[i] = make([]byte, 64<<20)
			for j := range benchBufs[i] {
				benchBufs[i][j] = byte(j*7 + i) // non-zero pages, finite values
			}
		}
	}
	for _, im := range Impls() {
		for _, size := range []int{64 << 20, 256 << 10} {
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
						dst, src := benchBufs[0][:size], benchBufs[1][:size]
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
