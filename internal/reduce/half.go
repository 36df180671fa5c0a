package reduce

import "math"

// Scalar conversions for the pure-Go kernels. The half-precision ones are
// branch-light bit manipulations (after F. Giesen's public-domain
// half<->float code) checked against github.com/x448/float16 in the tests:
// exhaustively for widening, and on every rounding boundary for narrowing.

// bf16ToF32 widens a bfloat16 exactly.
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f32ToBF16 rounds f to bfloat16, to nearest-even; NaN stays NaN (quieted,
// keeping the top of its payload), as goccl.BFloat16From does.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16 | 0x40)
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// f16ToF32 widens an IEEE binary16 exactly; a NaN keeps its payload and is
// quieted, as x448/float16 and VCVTPH2PS do. It has no calls so that it is
// inlined into the kernels' loops.
func f16ToF32(h uint16) float32 {
	o := uint32(h&0x7fff) << 13 // exponent and mantissa in float32 position
	if h&0x7c00 == 0x7c00 {     // Inf or NaN: exponent all ones, NaN quieted
		o |= 0x7f800000 | ((o&0x7fffff+0x7fffff)>>1)&0x400000
	} else { // scaling by 2^112 rebiases the exponent (and normalizes subnormals)
		o = math.Float32bits(math.Float32frombits(o) * 0x1p112)
	}
	return math.Float32frombits(o | uint32(h&0x8000)<<16)
}

// f32ToF16 rounds f to IEEE binary16, to nearest-even; overflow gives ±Inf
// and NaN stays NaN (quieted, keeping the top of its payload, as x448/float16
// and VCVTPS2PH do). It has no calls so that it is inlined.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	a := b & 0x7fffffff
	h := b >> 16 & 0x8000 // sign
	if a < 113<<23 {
		// Below 2^-14, the smallest normal half: adding 0.5 makes the
		// half's subnormal quantum (2^-24) float32's last bit, so the FPU
		// rounds to nearest-even, and the low bits are the result.
		h |= math.Float32bits(math.Float32frombits(a)+0.5) - 0x3f000000
	} else if a <= 0x7f800000 {
		// Normal half: rebias and round to nearest-even. Too large and
		// Inf are clamped to 2^16, which gives Inf.
		h |= (min(a, 143<<23) - (127-15)<<23 + 0xfff + (a>>13)&1) >> 13
	} else { // NaN
		h |= 0x7e00 | (a>>13)&0x3ff
	}
	return uint16(h)
}
