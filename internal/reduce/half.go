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

// f16ToF32 widens an IEEE binary16 exactly. A NaN keeps its payload and is
// quieted, as x448/float16 and VCVTPH2PS do.
func f16ToF32(h uint16) float32 {
	const expMask = 0x7c00 << 13
	o := uint32(h&0x7fff) << 13 // exponent and mantissa in float32 position
	exp := o & expMask
	o += (127 - 15) << 23 // rebias the exponent
	switch exp {
	case expMask: // Inf or NaN: exponent all ones
		o += (128 - 16) << 23
		if o&0x7fffff != 0 {
			o |= 0x400000
		}
	case 0: // zero or subnormal: renormalize with a float subtraction (exact)
		o += 1 << 23
		o = math.Float32bits(math.Float32frombits(o) - math.Float32frombits(113<<23))
	}
	return math.Float32frombits(o | uint32(h&0x8000)<<16)
}

// f32ToF16 rounds f to IEEE binary16, to nearest-even; overflow gives ±Inf
// and NaN stays NaN (quieted, keeping the top of its payload, as x448/float16
// and VCVTPS2PH do).
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	b &= 0x7fffffff
	switch {
	case b >= (127+16)<<23: // too large for a half, Inf or NaN
		if b > 0x7f800000 {
			return sign | 0x7e00 | uint16(b>>13)&0x3ff
		}
		return sign | 0x7c00
	case b < 113<<23: // below the smallest normal half: let the FPU round
		// Adding 0.5 shifts the value so that the half's subnormal
		// quantum (2^-24) becomes float32's last bit; the FPU rounds to
		// nearest-even and the low bits are the result.
		const magic = ((127 - 15) + (23 - 10) + 1) << 23
		r := math.Float32bits(math.Float32frombits(b) + math.Float32frombits(magic))
		return sign | uint16(r-magic)
	}
	odd := (b >> 13) & 1
	b = b - (127-15)<<23 + 0xfff + odd // rebias and round to nearest-even
	return sign | uint16(b>>13)
}
