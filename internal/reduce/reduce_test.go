package reduce

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/x448/float16"
)

// The reference below is written independently of the kernels: elements are
// decoded with encoding/binary into big.Int (integers) or float64 (floats),
// combined there, wrapped or rounded to the element type with code of its own,
// and compared with the kernels' decoded output.

var allDTypes = []DType{Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, BFloat16, Float32, Float64}
var allOps = []Op{Sum, Prod, Min, Max, Avg}

var testLengths = []int{0, 1, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 1000, 4099}

var ne = binary.NativeEndian

func intInfo(dt DType) (bits int, signed bool) {
	switch dt {
	case Int8:
		return 8, true
	case Uint8:
		return 8, false
	case Int32:
		return 32, true
	case Uint32:
		return 32, false
	case Int64:
		return 64, true
	case Uint64:
		return 64, false
	}
	panic("not an integer type")
}

func decodeInt(dt DType, b []byte) *big.Int {
	switch dt {
	case Int8:
		return big.NewInt(int64(int8(b[0])))
	case Uint8:
		return big.NewInt(int64(b[0]))
	case Int32:
		return big.NewInt(int64(int32(ne.Uint32(b))))
	case Uint32:
		return big.NewInt(int64(ne.Uint32(b)))
	case Int64:
		return big.NewInt(int64(ne.Uint64(b)))
	case Uint64:
		return new(big.Int).SetUint64(ne.Uint64(b))
	}
	panic("not an integer type")
}

// wrap reduces x modulo 2^bits into the range of the type (two's complement).
func wrap(x *big.Int, bits int, signed bool) *big.Int {
	m := new(big.Int).Lsh(big.NewInt(1), uint(bits))
	r := new(big.Int).Mod(x, m) // 0 <= r < m
	if signed && r.Cmp(new(big.Int).Rsh(m, 1)) >= 0 {
		r.Sub(r, m)
	}
	return r
}

func refInt(dt DType, op Op, a, b *big.Int) *big.Int {
	bits, signed := intInfo(dt)
	switch op {
	case Sum:
		return wrap(new(big.Int).Add(a, b), bits, signed)
	case Prod:
		return wrap(new(big.Int).Mul(a, b), bits, signed)
	case Min:
		if a.Cmp(b) <= 0 {
			return a
		}
		return b
	case Max:
		if a.Cmp(b) >= 0 {
			return a
		}
		return b
	}
	panic("bad op")
}

// decodeHalf decodes IEEE binary16 by its definition.
func decodeHalf(u uint16) float64 {
	sign := 1.0
	if u&0x8000 != 0 {
		sign = -1
	}
	e, m := int(u>>10)&31, float64(u&1023)
	switch e {
	case 31:
		if m != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	case 0:
		return sign * math.Ldexp(m, -24)
	}
	return sign * math.Ldexp(1024+m, e-25)
}

func decodeFloat(dt DType, b []byte) float64 {
	switch dt {
	case Float16:
		return decodeHalf(ne.Uint16(b))
	case BFloat16:
		return float64(math.Float32frombits(uint32(ne.Uint16(b)) << 16))
	case Float32:
		return float64(math.Float32frombits(ne.Uint32(b)))
	case Float64:
		return math.Float64frombits(ne.Uint64(b))
	}
	panic("not a float type")
}

// roundTo rounds x to nearest-even with p significant bits, normal exponents
// down to emin (below which the quantum stays fixed: subnormals) and the
// largest finite value maxFinite (beyond which it overflows to infinity).
func roundTo(x float64, p, emin int, maxFinite float64) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	_, e := math.Frexp(x) // |x| in [2^(e-1), 2^e)
	e = max(e-1, emin)
	q := math.Ldexp(1, e-p+1)
	r := math.RoundToEven(x/q) * q
	if math.Abs(r) > maxFinite {
		return math.Copysign(math.Inf(1), x)
	}
	return math.Copysign(r, x) // keeps the sign of a result rounded to zero
}

func roundFloat(dt DType, x float64) float64 {
	switch dt {
	case Float16:
		return roundTo(x, 11, -14, 65504)
	case BFloat16:
		return roundTo(x, 8, -126, math.Ldexp(255, 120))
	case Float32:
		return roundTo(x, 24, -126, math.Ldexp(1<<24-1, 104))
	case Float64:
		return x
	}
	panic("not a float type")
}

func refFloat(dt DType, op Op, a, b float64) float64 {
	nan := math.IsNaN(a) || math.IsNaN(b)
	switch op {
	case Sum, Avg:
		// a+b is exact for the half types; for float32 the float64 sum
		// rounded again to float32 is still correctly rounded (53 >= 2*24+2).
		return roundFloat(dt, a+b)
	case Prod:
		return roundFloat(dt, a*b)
	case Min:
		switch {
		case nan:
			return math.NaN()
		case a == b && a == 0:
			if math.Signbit(a) || math.Signbit(b) {
				return math.Copysign(0, -1)
			}
			return 0
		case a < b:
			return a
		}
		return b
	case Max:
		switch {
		case nan:
			return math.NaN()
		case a == b && a == 0:
			if math.Signbit(a) && math.Signbit(b) {
				return math.Copysign(0, -1)
			}
			return 0
		case a > b:
			return a
		}
		return b
	}
	panic("bad op")
}

// sameFloat compares by bits (so -0 != +0), and all NaNs as equal.
func sameFloat(x, y float64) bool {
	if math.IsNaN(x) || math.IsNaN(y) {
		return math.IsNaN(x) && math.IsNaN(y)
	}
	return math.Float64bits(x) == math.Float64bits(y)
}

// checkRef verifies out = a op b element by element.
func checkRef(t *testing.T, what string, dt DType, op Op, out, a, b []byte) {
	t.Helper()
	sz := dt.Size()
	bad := 0
	for i := 0; i+sz <= len(out); i += sz {
		if dt.IsFloat() {
			x, y := decodeFloat(dt, a[i:]), decodeFloat(dt, b[i:])
			want, got := refFloat(dt, op, x, y), decodeFloat(dt, out[i:])
			if !sameFloat(want, got) {
				t.Errorf("%s: element %d: %v %v %v = %v, want %v (bits %x %x -> %x)",
					what, i/sz, x, op, y, got, want, a[i:i+sz], b[i:i+sz], out[i:i+sz])
				bad++
			}
		} else {
			x, y := decodeInt(dt, a[i:]), decodeInt(dt, b[i:])
			want, got := refInt(dt, op, x, y), decodeInt(dt, out[i:])
			if want.Cmp(got) != 0 {
				t.Errorf("%s: element %d: %v %v %v = %v, want %v", what, i/sz, x, op, y, got, want)
				bad++
			}
		}
		if bad > 5 {
			t.Fatalf("%s: too many errors", what)
		}
	}
}

// randElems fills b with random elements of dt: random bit patterns, small
// values, extremes, and for floats NaN, ±Inf, ±0, subnormals and overflows.
func randElems(r *rand.Rand, dt DType, b []byte) {
	sz := dt.Size()
	for i := 0; i+sz <= len(b); i += sz {
		e := b[i : i+sz]
		c := r.IntN(8)
		if c < 2 { // random bits
			for j := range e {
				e[j] = byte(r.Uint32())
			}
			continue
		}
		if !dt.IsFloat() {
			bits, signed := intInfo(dt)
			var v uint64
			switch c {
			case 2, 3, 4: // small, possibly negative
				v = uint64(r.Int64N(21) - 10)
				if !signed {
					v = uint64(r.Int64N(21))
				}
			case 5: // extremes
				ext := []uint64{0, 1, math.MaxUint64, 1<<(bits-1) - 1, 1 << (bits - 1), 1<<(bits-1) + 1}
				v = ext[r.IntN(len(ext))]
			default: // medium
				v = uint64(r.Int64N(1<<(bits/2)) - 1<<(bits/2-1))
			}
			switch sz {
			case 1:
				e[0] = byte(v)
			case 4:
				ne.PutUint32(e, uint32(v))
			case 8:
				ne.PutUint64(e, v)
			}
			continue
		}
		var f float64
		switch c {
		case 2: // specials
			sp := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1, -1,
				65504, -65504, 6e-8, -6e-8, 3e38, -3e38, 1e-40, 1.7e308, 5e-324}
			f = sp[r.IntN(len(sp))]
		case 3: // small integers (ties, exact sums)
			f = float64(r.IntN(9) - 4)
		default:
			scales := []float64{1, 1e3, 1e-3, 1e4, 1e30, 1e-30, 1e300}
			f = r.NormFloat64() * scales[r.IntN(len(scales))]
		}
		putFloat(dt, e, f)
	}
}

// putFloat stores f in e, converted with the package's own conversions (only
// used to make inputs).
func putFloat(dt DType, e []byte, f float64) {
	switch dt {
	case Float16:
		ne.PutUint16(e, f32ToF16(float32(f)))
	case BFloat16:
		ne.PutUint16(e, f32ToBF16(float32(f)))
	case Float32:
		ne.PutUint32(e, math.Float32bits(float32(f)))
	case Float64:
		ne.PutUint64(e, math.Float64bits(f))
	}
}

// fill makes some elements of b equal (or opposite) to those of a, so that
// ties, ±0 pairs and x + -x are common.
func tie(r *rand.Rand, dt DType, a, b []byte) {
	sz := dt.Size()
	for i := 0; i+sz <= len(b) && i+sz <= len(a); i += sz {
		switch r.IntN(10) {
		case 0:
			copy(b[i:i+sz], a[i:i+sz])
		case 1:
			copy(b[i:i+sz], a[i:i+sz])
			if dt.IsFloat() {
				b[i+sz-1] ^= 0x80 // flip the sign bit (little-endian)
			}
		}
	}
}

func forImpls(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for _, im := range Impls() {
		t.Run(im.String(), func(t *testing.T) {
			prev, err := SetImpl(im)
			if err != nil {
				t.Fatal(err)
			}
			defer SetImpl(prev)
			f(t)
		})
	}
}

const guard = 64

// buffers returns a zone of n elements at byte offset off inside a larger
// buffer whose surroundings are filled with a guard pattern.
func guarded(n, off int) (whole, zone []byte) {
	whole = make([]byte, guard+off+n+guard)
	for i := range whole {
		whole[i] = 0xA5
	}
	return whole, whole[guard+off : guard+off+n]
}

func checkGuard(t *testing.T, what string, whole []byte, off, n int) {
	t.Helper()
	for i := range whole {
		if (i < guard+off || i >= guard+off+n) && whole[i] != 0xA5 {
			t.Fatalf("%s: wrote outside the slice at byte %d (zone %d..%d)", what, i, guard+off, guard+off+n)
		}
	}
}

func TestKernelsAgainstReference(t *testing.T) {
	forImpls(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, dt := range allDTypes {
			for _, op := range allOps {
				if op == Avg && !dt.IsFloat() {
					continue
				}
				f2, err := Func(dt, op)
				if err != nil {
					t.Fatal(err)
				}
				f3, err := Func3(dt, op)
				if err != nil {
					t.Fatal(err)
				}
				sz := dt.Size()
				for li, n := range testLengths {
					nb := n * sz
					for _, offs := range [][3]int{{0, 0, 0}, {li % 8, (li*3 + 1) % 8, (li*5 + 2) % 8}, {7, 1, 0}} {
						what := fmt.Sprintf("%v/%v n=%d offsets=%v", dt, op, n, offs)
						_, a := guarded(nb, offs[1])
						_, b := guarded(nb, offs[2])
						randElems(r, dt, a)
						randElems(r, dt, b)
						tie(r, dt, a, b)
						a0, b0 := bytes.Clone(a), bytes.Clone(b)

						// in place: d = d op b
						wd, d := guarded(nb, offs[0])
						copy(d, a)
						f2(d, b)
						checkGuard(t, what+" Func", wd, offs[0], nb)
						checkRef(t, what+" Func", dt, op, d, a0, b0)
						if !bytes.Equal(b, b0) {
							t.Fatalf("%s: Func modified src", what)
						}

						// out of place: d = a op b
						wd, d = guarded(nb, offs[0])
						f3(d, a, b)
						checkGuard(t, what+" Func3", wd, offs[0], nb)
						checkRef(t, what+" Func3", dt, op, d, a0, b0)
						if !bytes.Equal(a, a0) || !bytes.Equal(b, b0) {
							t.Fatalf("%s: Func3 modified an input", what)
						}

						// dst aliasing a, then b
						f3(a, a, b)
						checkRef(t, what+" Func3 dst=a", dt, op, a, a0, b0)
						copy(a, a0)
						f3(b, a, b)
						checkRef(t, what+" Func3 dst=b", dt, op, b, a0, b0)
					}
				}
			}
		}
	})
}

// TestImplsAgree compares every accelerated implementation with the pure-Go
// one explicitly, bit for bit (NaN payloads aside), on long unaligned inputs.
func TestImplsAgree(t *testing.T) {
	if len(Impls()) < 2 {
		t.Skip("only the generic implementation is available on this CPU")
	}
	r := rand.New(rand.NewPCG(3, 4))
	const n = 20011
	for _, dt := range allDTypes {
		sz := dt.Size()
		a, b := make([]byte, n*sz+8), make([]byte, n*sz+8)
		randElems(r, dt, a)
		randElems(r, dt, b)
		tie(r, dt, a, b)
		for _, op := range []Op{Sum, Prod, Min, Max} {
			for _, off := range []int{0, 3} {
				aa, bb := a[off:off+n*sz], b[8-off:8-off+n*sz]
				var want []byte
				for _, im := range Impls() {
					SetImpl(im)
					f3, _ := Func3(dt, op)
					f2, _ := Func(dt, op)
					got := make([]byte, n*sz+1)[1:]
					f3(got, aa, bb)
					got2 := bytes.Clone(aa)
					f2(got2, bb)
					if !sameElems(dt, got, got2) {
						t.Fatalf("%v/%v %v: Func and Func3 disagree", dt, op, im)
					}
					if want == nil {
						want = got
					} else if !sameElems(dt, want, got) {
						t.Errorf("%v/%v off=%d: %v disagrees with generic", dt, op, off, im)
					}
				}
			}
		}
		SetImpl(Impls()[len(Impls())-1])
	}
}

func sameElems(dt DType, x, y []byte) bool {
	if !dt.IsFloat() {
		return bytes.Equal(x, y)
	}
	sz := dt.Size()
	for i := 0; i+sz <= len(x); i += sz {
		if !sameFloat(decodeFloat(dt, x[i:]), decodeFloat(dt, y[i:])) {
			return false
		}
	}
	return len(x) == len(y)
}

// TestSpecialLanes puts NaN, ±0 and ±Inf in every lane position of the vectors.
func TestSpecialLanes(t *testing.T) {
	specials := []float64{math.NaN(), math.Copysign(0, -1), 0, math.Inf(1), math.Inf(-1), 1, -2}
	forImpls(t, func(t *testing.T) {
		for _, dt := range []DType{Float16, BFloat16, Float32, Float64} {
			sz := dt.Size()
			const n = 130
			for _, x := range specials {
				for _, y := range specials {
					a, b := make([]byte, n*sz), make([]byte, n*sz)
					for i := 0; i < n; i++ {
						putFloat(dt, a[i*sz:], float64(i%5))
						putFloat(dt, b[i*sz:], float64(i%3))
						if i%7 == 3 {
							putFloat(dt, a[i*sz:], x)
							putFloat(dt, b[i*sz:], y)
						}
					}
					for _, op := range []Op{Sum, Prod, Min, Max} {
						f3, _ := Func3(dt, op)
						d := make([]byte, n*sz)
						f3(d, a, b)
						checkRef(t, fmt.Sprintf("%v/%v %v,%v", dt, op, x, y), dt, op, d, a, b)
					}
				}
			}
		}
	})
}

// TestLengths checks that kernels take the whole elements the slices share
// and never touch anything else, whatever the lengths.
func TestLengths(t *testing.T) {
	forImpls(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		for _, dt := range allDTypes {
			sz := dt.Size()
			f2, _ := Func(dt, Sum)
			f3, _ := Func3(dt, Sum)
			for _, l := range [][3]int{{0, 5, 5}, {5, 0, 5}, {13, 300, 299}, {301, 300, 512}, {1027, 1025, 1029}, {3, 2, 1}} {
				nd, na, nb := l[0]*sz/2+l[0]%3, l[1]*sz/2, l[2]*sz/2
				wd, d := guarded(nd, 1)
				_, a := guarded(na, 2)
				_, b := guarded(nb, 3)
				randElems(r, dt, d)
				randElems(r, dt, a)
				randElems(r, dt, b)
				d0 := bytes.Clone(d)
				f2(d, b)
				k := min(nd, nb) / sz * sz
				checkGuard(t, "Func", wd, 1, nd)
				checkRef(t, "Func", dt, Sum, d[:k], d0, b)
				if !bytes.Equal(d[k:], d0[k:]) {
					t.Fatalf("%v Func %v: modified bytes past the whole common elements", dt, l)
				}
				copy(d, d0)
				f3(d, a, b)
				k = min(nd, na, nb) / sz * sz
				checkGuard(t, "Func3", wd, 1, nd)
				checkRef(t, "Func3", dt, Sum, d[:k], a, b)
				if !bytes.Equal(d[k:], d0[k:]) {
					t.Fatalf("%v Func3 %v: modified bytes past the whole common elements", dt, l)
				}
			}
			f2(nil, nil)
			f3(nil, nil, nil)
		}
	})
}

func TestErrors(t *testing.T) {
	for _, dt := range allDTypes {
		_, err2 := Func(dt, Avg)
		_, err3 := Func3(dt, Avg)
		errDiv := DivideBy(dt, make([]byte, 8), 2)
		if dt.IsFloat() {
			if err2 != nil || err3 != nil || errDiv != nil {
				t.Errorf("%v: avg: %v, %v, %v", dt, err2, err3, errDiv)
			}
			continue
		}
		want := "avg is only defined for floating-point types, got " + dt.String()
		for _, err := range []error{err2, err3, errDiv} {
			if err == nil || err.Error() != want {
				t.Errorf("%v: avg error %v, want %q", dt, err, want)
			}
		}
	}
	if _, err := Func(numDTypes, Sum); err == nil {
		t.Error("Func accepted an invalid type")
	}
	if _, err := Func3(Float32, numOps); err == nil {
		t.Error("Func3 accepted an invalid op")
	}
	if err := DivideBy(Float32, make([]byte, 8), 0); err == nil {
		t.Error("DivideBy accepted n=0")
	}
	if err := DivideBy(Float32, make([]byte, 7), 2); err == nil {
		t.Error("DivideBy accepted a partial element")
	}
	if err := DivideBy(DType(42), nil, 2); err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Errorf("DivideBy on an invalid type: %v", err)
	}
	if _, err := SetImpl(numImpls); err == nil {
		t.Error("SetImpl accepted an unknown implementation")
	}
	if Int32.String() != "int32" || Float16.String() != "half" || Avg.String() != "avg" || Float64.Size() != 8 {
		t.Error("names or sizes changed")
	}
}

func TestDivideBy(t *testing.T) {
	forImpls(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 8))
		for _, dt := range []DType{Float16, BFloat16, Float32, Float64} {
			sz := dt.Size()
			for li, n := range testLengths {
				for _, div := range []int{1, 2, 3, 7, 8, 1000} {
					off := (li + div) % 8
					w, buf := guarded(n*sz, off)
					randElems(r, dt, buf)
					orig := bytes.Clone(buf)
					if err := DivideBy(dt, buf, div); err != nil {
						t.Fatal(err)
					}
					checkGuard(t, "DivideBy", w, off, n*sz)
					for i := 0; i < n; i++ {
						x := decodeFloat(dt, orig[i*sz:])
						var want float64
						switch dt {
						case Float64:
							want = x / float64(div)
						default:
							// correctly rounded float32 quotient (double rounding through
							// float64 is innocuous for float32 operands), then the type's
							want = roundFloat(dt, roundFloat(Float32, x/float64(div)))
						}
						if got := decodeFloat(dt, buf[i*sz:]); !sameFloat(got, want) {
							t.Fatalf("%v: %v / %d = %v, want %v", dt, x, div, got, want)
						}
					}
				}
			}
		}
	})
}

// TestConversions checks the half-precision conversions exhaustively against
// the definitions above.
func TestConversions(t *testing.T) {
	for u := range 1 << 16 {
		h := uint16(u)
		if !sameFloat(float64(f16ToF32(h)), decodeHalf(h)) {
			t.Fatalf("f16ToF32(%#x) = %v, want %v", h, f16ToF32(h), decodeHalf(h))
		}
		f := f16ToF32(h)
		if back := f32ToF16(f); back != h && !(f != f && back&0x7fff > 0x7c00) {
			t.Fatalf("f32ToF16(f16ToF32(%#x)) = %#x", h, back)
		}
		if back := f32ToBF16(bf16ToF32(h)); back != h && !(bf16ToF32(h) != bf16ToF32(h) && back&0x7fff > 0x7f80) {
			t.Fatalf("f32ToBF16(bf16ToF32(%#x)) = %#x", h, back)
		}
	}
	r := rand.New(rand.NewPCG(9, 10))
	for range 200000 {
		f := math.Float32frombits(r.Uint32())
		for _, dt := range []DType{Float16, BFloat16} {
			var b [2]byte
			putFloat(dt, b[:], float64(f))
			if got, want := decodeFloat(dt, b[:]), roundFloat(dt, float64(f)); !sameFloat(got, want) {
				t.Fatalf("%v(%v) = %v, want %v", dt, f, got, want)
			}
		}
	}
}

func TestNoAllocs(t *testing.T) {
	forImpls(t, func(t *testing.T) {
		for _, dt := range allDTypes {
			d, a, b := make([]byte, 1027*dt.Size()), make([]byte, 1027*dt.Size()), make([]byte, 1027*dt.Size())
			for _, op := range []Op{Sum, Prod, Min, Max} {
				f2, _ := Func(dt, op)
				f3, _ := Func3(dt, op)
				if n := testing.AllocsPerRun(20, func() { f2(d, a) }); n != 0 {
					t.Errorf("%v/%v Func: %v allocs", dt, op, n)
				}
				if n := testing.AllocsPerRun(20, func() { f3(d, a, b) }); n != 0 {
					t.Errorf("%v/%v Func3: %v allocs", dt, op, n)
				}
			}
			if dt.IsFloat() {
				if n := testing.AllocsPerRun(20, func() { _ = DivideBy(dt, d, 3) }); n != 0 {
					t.Errorf("%v DivideBy: %v allocs", dt, n)
				}
			}
		}
	})
}

func TestAvgIsSum(t *testing.T) {
	for _, dt := range []DType{Float16, BFloat16, Float32, Float64} {
		a, b := make([]byte, 64*dt.Size()), make([]byte, 64*dt.Size())
		randElems(rand.New(rand.NewPCG(1, 1)), dt, a)
		randElems(rand.New(rand.NewPCG(2, 2)), dt, b)
		fs, _ := Func3(dt, Sum)
		fa, _ := Func3(dt, Avg)
		x, y := make([]byte, len(a)), make([]byte, len(a))
		fs(x, a, b)
		fa(y, a, b)
		if !sameElems(dt, x, y) {
			t.Errorf("%v: Avg kernel differs from Sum", dt)
		}
	}
}

// TestHalfAgainstX448 checks the float16 conversions against
// github.com/x448/float16: every half widened, and every float32 on or next to
// a rounding boundary (each half, each midpoint between neighbours, ±1 ulp)
// narrowed, plus random float32s.
func TestHalfAgainstX448(t *testing.T) {
	for u := range 1 << 16 {
		h := uint16(u)
		got, want := f16ToF32(h), float16.Frombits(h).Float32()
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("f16ToF32(%#04x) = %#08x, want %#08x", h, math.Float32bits(got), math.Float32bits(want))
		}
	}
	check := func(f float32) {
		if got, want := f32ToF16(f), float16.Fromfloat32(f).Bits(); got != want {
			t.Fatalf("f32ToF16(%v = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
	}
	for u := range 1 << 15 {
		lo := float64(f16ToF32(uint16(u)))
		hi := float64(f16ToF32(uint16(u + 1)))
		if math.IsNaN(lo) {
			continue
		}
		for _, x := range []float64{lo, (lo + hi) / 2} {
			if math.IsInf(x, 0) || math.IsNaN(x) {
				continue
			}
			f := float32(x) // exact: halves and their midpoints fit in float32
			for _, g := range []float32{f, math.Nextafter32(f, 0), math.Nextafter32(f, float32(math.Inf(1)))} {
				check(g)
				check(-g)
			}
		}
	}
	r := rand.New(rand.NewPCG(11, 12))
	for range 1 << 20 {
		check(math.Float32frombits(r.Uint32()))
	}
	for _, f := range []float32{65504, 65519.99, 65520, 1e10, float32(math.Inf(1)), float32(math.NaN()), 0, 5.9604645e-08, 2.9802322e-08, 2.9802326e-08} {
		check(f)
		check(-f)
	}
}
