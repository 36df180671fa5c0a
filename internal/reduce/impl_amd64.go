//go:build amd64 && !purego

package reduce

import "golang.org/x/sys/cpu"

//go:generate go run gen_asm.go

// asmKernel is a generated binary kernel: dst = a op b over n bytes of input,
// n a multiple of step.
type asmKernel struct {
	impl Impl
	dt   DType
	op   Op
	step int
	fn   func(dst, a, b *byte, n int)
}

// asmDivKernel is a generated division kernel: dst = dst / q over n bytes.
type asmDivKernel struct {
	impl Impl
	dt   DType
	step int
	fn32 func(dst *byte, n int, q float32)
	fn64 func(dst *byte, n int, q float64)
}

// archInit installs the assembly kernels the CPU (and OS) support. Every
// kernel of an implementation is replaced, so a test that selects it covers
// all of them; the pure-Go kernels finish the elements after the last vector.
func archInit() {
	x := &cpu.X86
	avail := [numImpls]bool{
		AVX2:   x.HasAVX && x.HasAVX2 && x.HasF16C,
		AVX512: x.HasAVX && x.HasAVX2 && x.HasF16C && x.HasAVX512F && x.HasAVX512BW && x.HasAVX512DQ,
	}
	// The AVX512 set is the AVX2 set with the kernels where AVX-512 pays
	// (see pays512 in gen_asm.go) replaced.
	base := impls[Generic]
	for im := AVX2; im < numImpls; im++ {
		if !avail[im] {
			continue
		}
		s := new(kernelSet)
		*s = *base
		for _, k := range asmKernels {
			if k.impl != im {
				continue
			}
			tail := impls[Generic].f3[k.dt][k.op]
			size := k.dt.Size()
			s.f3[k.dt][k.op] = asm3(k.fn, k.step, size, tail)
			s.f2[k.dt][k.op] = asm2(k.fn, k.step, size, tail)
		}
		for _, k := range asmDivKernels {
			if k.impl == im {
				s.div[k.dt] = asmDiv(k, impls[Generic].div[k.dt])
			}
		}
		impls[im] = s
		base = s
	}
}

// asm3 wraps an assembly kernel as dst = a op b: the assembly takes the whole
// vectors, tail (pure Go) the elements after them.
func asm3(fn func(dst, a, b *byte, n int), step, size int, tail func(dst, a, b []byte)) func(dst, a, b []byte) {
	return func(dst, a, b []byte) {
		n := min(len(dst), len(a), len(b)) &^ (size - 1)
		v := n &^ (step - 1)
		if v > 0 {
			fn(&dst[0], &a[0], &b[0], v)
		}
		if v < n {
			tail(dst[v:n], a[v:n], b[v:n])
		}
	}
}

// asm2 wraps an assembly kernel as dst = dst op src.
func asm2(fn func(dst, a, b *byte, n int), step, size int, tail func(dst, a, b []byte)) func(dst, src []byte) {
	return func(dst, src []byte) {
		n := min(len(dst), len(src)) &^ (size - 1)
		v := n &^ (step - 1)
		if v > 0 {
			fn(&dst[0], &dst[0], &src[0], v)
		}
		if v < n {
			d := dst[v:n]
			tail(d, d, src[v:n])
		}
	}
}

func asmDiv(k asmDivKernel, tail func(buf []byte, n int)) func(buf []byte, n int) {
	step := k.step
	return func(buf []byte, n int) {
		v := len(buf) &^ (step - 1)
		if v > 0 {
			if k.fn64 != nil {
				k.fn64(&buf[0], v, float64(n))
			} else {
				k.fn32(&buf[0], v, float32(n))
			}
		}
		if v < len(buf) {
			tail(buf[v:], n)
		}
	}
}
