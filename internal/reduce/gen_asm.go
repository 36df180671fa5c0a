//go:build ignore

// gen_asm writes asm_amd64.s and asm_amd64.go: the AVX2 and AVX-512 kernels
// and their Go declarations. Run it with `go generate` in this directory.
//
// Every binary kernel has the signature
//
//	func name(dst, a, b *byte, n int)
//
// and computes dst = a op b over n bytes of input, n a multiple of the
// kernel's vector step (the Go wrapper hands the rest to the pure-Go kernels).
// The main loop processes `unroll` vectors per iteration, then a loop takes the
// remaining whole vectors one at a time. Loads and stores are unaligned
// (VMOVDQU and memory operands of VEX/EVEX instructions need no alignment).
//
// The division kernels (DivideBy) have the signature
//
//	func name(dst *byte, n int, q float32) // float64 for Float64
//
// and compute dst = dst / q the same way.
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"log"
	"os"
	"slices"
	"strings"
)

type isa struct {
	name   string // "AVX2", "AVX512"
	reg    string // "Y" or "Z"
	vbytes int    // bytes per vector register
	nregs  int    // vector registers
	avx512 bool
}

var (
	avx2   = isa{"AVX2", "Y", 32, 16, false}
	avx512 = isa{"AVX512", "Z", 64, 32, true}
)

// class describes how elements are loaded into float32/integer lanes and stored back.
type class int

const (
	plain class = iota // the lanes are the elements
	bf16               // widened to float32 lanes
	f16                // widened to float32 lanes with VCVTPH2PS
)

type dtype struct {
	goName string // DType constant
	prefix string // kernel name prefix
	size   int
	class  class
	kind   byte // 'i' signed, 'u' unsigned, 'f' float
	bits   int  // lane bits (32 for the half types, which compute in float32)
}

var dtypes = []dtype{
	{"Int8", "i8", 1, plain, 'i', 8},
	{"Uint8", "u8", 1, plain, 'u', 8},
	{"Int32", "i32", 4, plain, 'i', 32},
	{"Uint32", "u32", 4, plain, 'u', 32},
	{"Int64", "i64", 8, plain, 'i', 64},
	{"Uint64", "u64", 8, plain, 'u', 64},
	{"Float16", "f16", 2, f16, 'f', 32},
	{"BFloat16", "bf16", 2, bf16, 'f', 32},
	{"Float32", "f32", 4, plain, 'f', 32},
	{"Float64", "f64", 8, plain, 'f', 64},
}

var ops = []string{"Sum", "Prod", "Min", "Max"}

type gen struct {
	s    bytes.Buffer // assembly
	g    bytes.Buffer // Go declarations
	tab  bytes.Buffer // Go table of binary kernels
	dtab bytes.Buffer // Go table of division kernels
}

func (g *gen) p(format string, args ...any) { fmt.Fprintf(&g.s, format+"\n", args...) }

// kernel is one function being generated.
type kernel struct {
	isa    isa
	dt     dtype
	op     string // one of ops, or "Div"
	step   int    // input bytes per vector
	unroll int
	perVec int            // vector registers per unrolled vector
	consts map[string]int // named constants, in the highest numbered registers
}

func (k *kernel) v(i int) string { return fmt.Sprintf("%s%d", k.isa.reg, i) }
func (k *kernel) x(i int) string { return fmt.Sprintf("X%d", i) }
func (k *kernel) y(i int) string { return fmt.Sprintf("Y%d", i) }

// c names the register of a constant made by setupConsts.
func (k *kernel) c(name string) string {
	i, ok := k.consts[name]
	if !ok {
		panic("no constant " + name)
	}
	return k.v(i)
}
func (k *kernel) ps() string      { return map[int]string{32: "PS", 64: "PD"}[k.dt.bits] }
func (k *kernel) intSfx() string  { return map[int]string{8: "B", 32: "D", 64: "Q"}[k.dt.bits] }
func (k *kernel) signSfx() string { return map[byte]string{'i': "S", 'u': "U"}[k.dt.kind] }

// opTemps is how many scratch registers (besides a and b) the op needs.
func (k *kernel) opTemps() int {
	switch k.op {
	case "Sum", "Div":
		return 0
	case "Prod":
		if k.dt.kind != 'f' && k.dt.bits != 32 && !(k.dt.bits == 64 && k.isa.avx512) {
			return 2
		}
		return 0
	case "Min", "Max":
		if k.dt.kind == 'f' || (k.dt.bits == 64 && !k.isa.avx512) {
			return 2
		}
		return 0
	}
	panic(k.op)
}

func mem(base string, off int) string {
	if off == 0 {
		return fmt.Sprintf("(%s)(AX*1)", base)
	}
	return fmt.Sprintf("%d(%s)(AX*1)", off, base)
}

func (g *gen) movu(k *kernel, src, dst string) {
	if k.isa.avx512 {
		g.p("\tVMOVDQU64 %s, %s", src, dst)
	} else {
		g.p("\tVMOVDQU %s, %s", src, dst)
	}
}

// load loads the vector at byte offset off of base into register r.
// (bf16 is loaded by bf16Vector.)
func (g *gen) load(k *kernel, base string, off, r int) {
	m := mem(base, off)
	switch k.dt.class {
	case plain:
		g.movu(k, m, k.v(r))
	case f16:
		g.p("\tVCVTPH2PS %s, %s", m, k.v(r))
	}
}

// store stores register r at byte offset off of DI. (bf16: see bf16Vector.)
func (g *gen) store(k *kernel, off, r int) {
	m := mem("DI", off)
	switch k.dt.class {
	case plain:
		g.movu(k, k.v(r), m)
	case f16:
		g.p("\tVCVTPS2PH $0, %s, %s", k.v(r), m) // imm 0: round to nearest-even
	}
}

// bf16Round rounds the float32 lanes of r to bfloat16 in their low 16 bits,
// clobbering the three scratch registers t: x + 0x7fff + ((x>>16)&1), keep the
// top 16 bits, to nearest-even; a NaN becomes (x>>16)|0x40 (quiet, payload
// kept), as in the Go code.
func (g *gen) bf16Round(k *kernel, r int, t []int, kr string) {
	R, T, U := k.v(r), k.v(t[0]), k.v(t[1])
	and, or := "VPAND", "VPOR"
	if k.isa.avx512 {
		and, or = "VPANDD", "VPORD"
		g.p("\tVCMPPS $3, %s, %s, %s", R, R, kr)
	} else {
		g.p("\tVCMPPS $3, %s, %s, %s", R, R, k.v(t[2]))
	}
	g.p("\tVPSRLD $16, %s, %s", R, T)
	g.p("\t%s %s, %s, %s", and, k.c("one"), T, U)
	g.p("\tVPADDD %s, %s, %s", k.c("bias"), U, U)
	g.p("\tVPADDD %s, %s, %s", U, R, R)
	g.p("\tVPSRLD $16, %s, %s", R, R)
	g.p("\t%s %s, %s, %s", or, k.c("qnan"), T, T)
	if k.isa.avx512 {
		g.p("\tVMOVDQA32 %s, %s, %s", T, kr, R) // R = NaN ? T : R
	} else {
		g.p("\tVBLENDVPS %s, %s, %s, %s", k.v(t[2]), T, R, R)
	}
}

// op computes a op b into a register, which it returns; t are scratch registers.
func (g *gen) op(k *kernel, a, b int, t []int, kr string) int {
	A := k.v(a)
	avx512 := k.isa.avx512
	if k.op == "Div" {
		g.p("\tVDIV%s %s, %s, %s", k.ps(), k.c("q"), A, A)
		return a
	}
	B := k.v(b)
	if k.dt.kind == 'f' {
		ps := k.ps()
		switch k.op {
		case "Sum":
			g.p("\tVADD%s %s, %s, %s", ps, B, A, A)
			return a
		case "Prod":
			g.p("\tVMUL%s %s, %s, %s", ps, B, A, A)
			return a
		case "Min":
			// min(a,b) | min(b,a): MIN returns its second operand on NaN or
			// equality, so a NaN in either survives the OR (NaN | x is NaN)
			// and min(±0, ∓0) is -0.
			T := k.v(t[0])
			g.p("\tVMIN%s %s, %s, %s", ps, B, A, T)
			g.p("\tVMIN%s %s, %s, %s", ps, A, B, B)
			if avx512 {
				g.p("\tVPORQ %s, %s, %s", T, B, A)
			} else {
				g.p("\tVOR%s %s, %s, %s", ps, T, B, A)
			}
			return a
		case "Max":
			// max(a,b) & max(b,a) gives +0 for ±0; NaN lanes are then set
			// to all ones (AVX2) or to a+b (AVX-512), a NaN either way.
			T, U := k.v(t[0]), k.v(t[1])
			if avx512 {
				g.p("\tVCMP%s $3, %s, %s, %s", ps, B, A, kr)
			} else {
				g.p("\tVCMP%s $3, %s, %s, %s", ps, B, A, U)
			}
			g.p("\tVMAX%s %s, %s, %s", ps, B, A, T)
			if avx512 {
				g.p("\tVMAX%s %s, %s, %s", ps, A, B, U)
				g.p("\tVPANDQ %s, %s, %s", U, T, T)
				g.p("\tVADD%s %s, %s, %s, %s", ps, B, A, kr, T)
				return t[0]
			}
			g.p("\tVMAX%s %s, %s, %s", ps, A, B, B)
			g.p("\tVAND%s %s, %s, %s", ps, T, B, A)
			g.p("\tVOR%s %s, %s, %s", ps, U, A, A)
			return a
		}
	}
	is, ss := k.intSfx(), k.signSfx()
	and, andn, or, xor := "VPAND", "VPANDN", "VPOR", "VPXOR"
	if avx512 {
		and, andn, or, xor = "VPANDQ", "VPANDNQ", "VPORQ", "VPXORQ"
	}
	switch k.op {
	case "Sum":
		g.p("\tVPADD%s %s, %s, %s", is, B, A, A)
		return a
	case "Prod":
		switch {
		case k.dt.bits == 32:
			g.p("\tVPMULLD %s, %s, %s", B, A, A)
		case k.dt.bits == 64 && avx512:
			g.p("\tVPMULLQ %s, %s, %s", B, A, A)
		case k.dt.bits == 64:
			// a*b mod 2^64 = lo(a)*lo(b) + (hi(a)*lo(b) + lo(a)*hi(b)) << 32
			T, U := k.v(t[0]), k.v(t[1])
			g.p("\tVPSRLQ $32, %s, %s", A, T)
			g.p("\tVPMULUDQ %s, %s, %s", B, T, T)
			g.p("\tVPSRLQ $32, %s, %s", B, U)
			g.p("\tVPMULUDQ %s, %s, %s", A, U, U)
			g.p("\tVPADDQ %s, %s, %s", U, T, T)
			g.p("\tVPSLLQ $32, %s, %s", T, T)
			g.p("\tVPMULUDQ %s, %s, %s", B, A, A)
			g.p("\tVPADDQ %s, %s, %s", T, A, A)
		case k.dt.bits == 8:
			// Bytes have no multiply: the low byte of a 16-bit product
			// depends only on the low bytes, so multiply words twice, once
			// for the even bytes and once for the odd ones.
			M := k.c("lowbytes") // 0x00ff in every word
			T, U := k.v(t[0]), k.v(t[1])
			g.p("\tVPMULLW %s, %s, %s", B, A, T)
			g.p("\tVPSRLW $8, %s, %s", A, A)
			g.p("\t%s %s, %s, %s", andn, B, M, U)
			g.p("\tVPMULLW %s, %s, %s", U, A, A)
			g.p("\t%s %s, %s, %s", and, M, T, T)
			g.p("\t%s %s, %s, %s", or, T, A, A)
		}
		return a
	case "Min", "Max":
		if k.dt.bits < 64 || avx512 {
			g.p("\tVP%s%s%s %s, %s, %s", strings.ToUpper(k.op), ss, is, B, A, A)
			return a
		}
		// AVX2 has no 64-bit min/max: compare (after flipping the sign bits
		// for unsigned) and blend.
		T := k.v(t[0])
		if k.dt.kind == 'u' {
			U := k.v(t[1])
			g.p("\t%s %s, %s, %s", xor, k.c("sign64"), A, T)
			g.p("\t%s %s, %s, %s", xor, k.c("sign64"), B, U)
			g.p("\tVPCMPGTQ %s, %s, %s", U, T, T) // T = a > b
		} else {
			g.p("\tVPCMPGTQ %s, %s, %s", B, A, T)
		}
		if k.op == "Min" {
			g.p("\tVPBLENDVB %s, %s, %s, %s", T, B, A, A) // a > b ? b : a
		} else {
			g.p("\tVPBLENDVB %s, %s, %s, %s", T, A, B, A) // a > b ? a : b
		}
		return a
	}
	panic(k.op)
}

// setupConsts loads the constants the kernel needs into the highest
// numbered vector registers and returns how many there are.
func (g *gen) setupConsts(k *kernel) int {
	k.consts = map[string]int{}
	next := k.isa.nregs - 1
	alloc := func(name string) int {
		k.consts[name] = next
		next--
		return k.consts[name]
	}
	bcast := func(name string, v uint64, w string) {
		r := alloc(name)
		g.p("\tMOVQ $0x%x, R8", v)
		g.p("\tVMOVQ R8, X%d", r)
		g.p("\tVPBROADCAST%s X%d, %s", w, r, k.v(r))
	}
	if k.op == "Div" {
		r := alloc("q")
		if k.dt.bits == 64 {
			g.p("\tVBROADCASTSD q+16(FP), %s", k.v(r))
		} else {
			g.p("\tVBROADCASTSS q+16(FP), %s", k.v(r))
		}
	}
	if k.dt.class == bf16 {
		bcast("one", 1, "D")
		bcast("bias", 0x7fff, "D")
		bcast("qnan", 0x40, "D")
		r, xor := alloc("zero"), "VPXOR"
		if k.isa.avx512 {
			xor = "VPXORQ"
		}
		g.p("\t%s %s, %s, %s", xor, k.v(r), k.v(r), k.v(r))
	}
	if k.op == "Prod" && k.dt.bits == 8 {
		bcast("lowbytes", 0x00ff, "W")
	}
	if (k.op == "Min" || k.op == "Max") && k.dt.bits == 64 && k.dt.kind == 'u' && !k.isa.avx512 {
		bcast("sign64", 1<<63, "Q")
	}
	return len(k.consts)
}

func (g *gen) kernel(is isa, dt dtype, op string) {
	k := &kernel{isa: is, dt: dt, op: op}
	switch dt.class {
	case bf16:
		// A vector is one register of input (vbytes), widened into two
		// registers of float32 by interleaving with zero words.
		k.step = is.vbytes
		k.perVec = 4 + max(3, k.opTemps()+1)
		if op == "Div" {
			k.perVec = 2 + 3
		}
	default:
		lanes := is.vbytes * 8 / dt.bits
		k.step = lanes * dt.size
		k.perVec = 2 + k.opTemps()
		if op == "Div" {
			k.perVec = 1
		}
	}
	name := fmt.Sprintf("%s%s%s", dt.prefix, op, is.name)

	if op == "Div" {
		goType, frame, fn := "float32", 20, "fn32"
		if dt.bits == 64 {
			goType, frame, fn = "float64", 24, "fn64"
		}
		fmt.Fprintf(&g.g, "//go:noescape\nfunc %s(dst *byte, n int, q %s)\n\n", name, goType)
		fmt.Fprintf(&g.dtab, "\t{impl: %s, dt: %s, step: %d, %s: %s},\n", is.name, dt.goName, k.step, fn, name)
		g.p("// func %s(dst *byte, n int, q %s)", name, goType)
		g.p("TEXT ·%s(SB), NOSPLIT, $0-%d", name, frame)
		g.p("\tMOVQ dst+0(FP), DI")
		g.p("\tMOVQ DI, SI")
		g.p("\tMOVQ n+8(FP), CX")
	} else {
		fmt.Fprintf(&g.g, "//go:noescape\nfunc %s(dst, a, b *byte, n int)\n\n", name)
		fmt.Fprintf(&g.tab, "\t{%s, %s, %s, %d, %s},\n", is.name, dt.goName, op, k.step, name)
		g.p("// func %s(dst, a, b *byte, n int)", name)
		g.p("TEXT ·%s(SB), NOSPLIT, $0-32", name)
		g.p("\tMOVQ dst+0(FP), DI")
		g.p("\tMOVQ a+8(FP), SI")
		g.p("\tMOVQ b+16(FP), DX")
		g.p("\tMOVQ n+24(FP), CX")
	}
	nconst := g.setupConsts(k)
	k.unroll = min(4, (is.nregs-nconst)/k.perVec)
	if k.unroll < 1 {
		log.Fatalf("%s: not enough registers", name)
	}
	g.p("\tXORQ AX, AX")
	g.p("\tMOVQ CX, BX")
	g.p("\tSUBQ $%d, BX", k.unroll*k.step)
	g.p("\tJLT %s_one", name)
	g.p("%s_loop:", name)
	if pf := prefetchAhead(k); pf > 0 {
		for off := 0; off < k.unroll*k.step; off += 64 {
			g.p("\tPREFETCHT0 %s", mem("SI", off+pf))
			if op != "Div" {
				g.p("\tPREFETCHT0 %s", mem("DX", off+pf))
			}
		}
	}
	g.body(k, k.unroll)
	g.p("\tADDQ $%d, AX", k.unroll*k.step)
	g.p("\tCMPQ AX, BX")
	g.p("\tJLE %s_loop", name)
	g.p("%s_one:", name)
	g.p("\tCMPQ AX, CX")
	g.p("\tJGE %s_done", name)
	g.body(k, 1)
	g.p("\tADDQ $%d, AX", k.step)
	g.p("\tJMP %s_one", name)
	g.p("%s_done:", name)
	g.p("\tVZEROUPPER")
	g.p("\tRET")
	g.p("")
}

// body emits u vectors: the loads of all, then the ops, then the stores, so
// that the loads of the block are in flight together.
func (g *gen) body(k *kernel, u int) {
	reg := func(vec, i int) int { return vec*k.perVec + i }
	kreg := func(vec, i int) string { return fmt.Sprintf("K%d", 1+(vec*2+i)%7) }
	if k.dt.class == bf16 {
		for j := range u {
			g.bf16Vector(k, j*k.step, func(i int) int { return reg(j, i) }, kreg(j, 0), kreg(j, 1))
		}
		return
	}
	for j := range u {
		g.load(k, "SI", j*k.step, reg(j, 0))
		if k.op != "Div" {
			g.load(k, "DX", j*k.step, reg(j, 1))
		}
	}
	res := make([]int, u)
	for j := range u {
		if k.op == "Div" {
			res[j] = g.op(k, reg(j, 0), -1, nil, "")
			continue
		}
		res[j] = g.op(k, reg(j, 0), reg(j, 1), []int{reg(j, 2), reg(j, 3)}, kreg(j, 0))
	}
	for j := range u {
		g.store(k, j*k.step, res[j])
	}
}

// bf16Vector emits one bfloat16 vector: load a register of a (and b), widen
// each into two registers of float32 lanes by interleaving zero words below
// the elements (words 0-3 and 8-11 of a 256-bit register go to the low
// result, 4-7 and 12-15 to the high one, per 128-bit lane), combine, round,
// and pack back with VPACKUSDW, whose per-lane order undoes the interleave.
func (g *gen) bf16Vector(k *kernel, off int, reg func(int) int, k0, k1 string) {
	Z := k.c("zero")
	aHi, bHi, aLo, bLo := reg(0), reg(1), reg(2), reg(3)
	g.movu(k, mem("SI", off), k.v(aHi))
	if k.op != "Div" {
		g.movu(k, mem("DX", off), k.v(bHi))
	}
	g.p("\tVPUNPCKLWD %s, %s, %s", k.v(aHi), Z, k.v(aLo))
	g.p("\tVPUNPCKHWD %s, %s, %s", k.v(aHi), Z, k.v(aHi))
	var lo, hi int
	if k.op == "Div" {
		lo = g.op(k, aLo, -1, nil, "")
		hi = g.op(k, aHi, -1, nil, "")
	} else {
		g.p("\tVPUNPCKLWD %s, %s, %s", k.v(bHi), Z, k.v(bLo))
		g.p("\tVPUNPCKHWD %s, %s, %s", k.v(bHi), Z, k.v(bHi))
		lo = g.op(k, aLo, bLo, []int{reg(4), reg(5)}, k0)
		// the low result is aLo or reg(4); keep it
		hi = g.op(k, aHi, bHi, []int{reg(5), reg(6)}, k1)
	}
	free := func(keep ...int) []int {
		var t []int
		for i := range k.perVec {
			if r := reg(i); !slices.Contains(keep, r) {
				t = append(t, r)
			}
		}
		return t
	}
	g.bf16Round(k, lo, free(lo, hi), k0)
	g.bf16Round(k, hi, free(lo, hi), k1)
	g.p("\tVPACKUSDW %s, %s, %s", k.v(hi), k.v(lo), k.v(lo))
	g.movu(k, k.v(lo), mem("DI", off))
}

// pays512 reports whether the AVX-512 kernel for dt and op is worth having
// next to the AVX2 one. Where a kernel is bound by loads and stores (plain
// sums, products, min and max of 32-bit lanes, ...) 512-bit vectors gain
// nothing: on an Ice Lake Xeon both sit at memory bandwidth on large buffers,
// and AVX2 is faster in L1 (about 90 against 79 GB/s), without the risk of
// 512-bit frequency drops. AVX-512 pays where there is arithmetic to halve:
// the half-precision conversions (1.5-2x in cache), 64-bit multiply, min and
// max (native instead of emulated, 1.3-2.5x), byte multiply (2.5x), and the
// NaN-propagating float min/max (1.5x in L1). The AVX512 implementation uses
// these and the AVX2 kernels for the rest.
func pays512(dt dtype, op string) bool {
	switch {
	case dt.class != plain: // Float16, BFloat16
		return true
	case dt.bits == 64 && dt.kind != 'f':
		return op == "Prod" || op == "Min" || op == "Max"
	case dt.bits == 8:
		return op == "Prod"
	case dt.kind == 'f':
		return op == "Min" || op == "Max"
	}
	return false
}

func main() {
	g := new(gen)
	g.p("// Code generated by gen_asm.go; DO NOT EDIT.")
	g.p("")
	g.p("//go:build amd64 && !purego")
	g.p("")
	g.p("#include \"textflag.h\"")
	g.p("")
	for _, is := range []isa{avx2, avx512} {
		for _, dt := range dtypes {
			for _, op := range append(ops, "Div") {
				if (op == "Div" && dt.kind != 'f') || (is.avx512 && !pays512(dt, op)) {
					continue
				}
				g.kernel(is, dt, op)
			}
		}
	}

	var goSrc bytes.Buffer
	goSrc.WriteString("// Code generated by gen_asm.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\npackage reduce\n\n")
	goSrc.Write(g.g.Bytes())
	goSrc.WriteString("// asmKernels lists the binary kernels: implementation, type, operator,\n// bytes of input per vector, function.\nvar asmKernels = [...]asmKernel{\n")
	goSrc.Write(g.tab.Bytes())
	goSrc.WriteString("}\n\n// asmDivKernels lists the division kernels.\nvar asmDivKernels = [...]asmDivKernel{\n")
	goSrc.Write(g.dtab.Bytes())
	goSrc.WriteString("}\n")
	src, err := format.Source(goSrc.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("asm_amd64.go", src, 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("asm_amd64.s", g.s.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}

// prefetchAhead is how far ahead (bytes) the main loop of k prefetches its
// inputs into L1, or 0 for none. The half-precision kernels, which spend
// several instructions per element converting, did not overlap that work
// with their misses (bfloat16 sum at 64 MiB ran at 5.2-5.9 GB/s against
// 15-16 GB/s in L2, about the sum of the two times); prefetching 1 KiB
// ahead raised half and bfloat16 sum, min and max at 64 MiB from 5.1-6.4 to
// 6.3-7.2 GB/s (512 and 2048 bytes ahead did no better). The other kernels
// stay at memory speed without it.
func prefetchAhead(k *kernel) int {
	if k.dt.class == plain {
		return 0
	}
	return 1024
}
