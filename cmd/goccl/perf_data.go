package main

import (
	"bytes"
	"math"
	"unsafe"

	"github.com/goccl/goccl"
)

// Data patterns and the checker. Every rank fills its send buffer with small
// integers that depend on (rank, element index) and on the operation, chosen
// so that the exact result is representable in every type for up to dozens
// of ranks (sums stay within half's and bfloat16's exact-integer ranges,
// products are powers of two). The checker recomputes each expected element
// on its own, with plain loops over the ranks' values in int64 (wrapping like
// the element type) or float64: goccl's reduction code is never used.

// patKind selects a value pattern.
type patKind int

const (
	patCopy patKind = iota // data movement: broadcast, gathers, alltoall, sendrecv
	patSum                 // sum and avg
	patProd
	patMinMax
)

// sentinel fills receive buffers and guard regions before a checked run.
const sentinel = 0xA5

// elemCodec reads and writes elements of one data type in native byte order.
type elemCodec struct {
	dt   goccl.DataType
	size int
}

func newCodec(dt goccl.DataType) elemCodec { return elemCodec{dt: dt, size: dt.Size()} }

// storeInt writes the integer v into element i, truncating like a C cast to
// the element type (exact for the small values floats get).
func (c elemCodec) storeInt(b []byte, i int, v int64) {
	p := unsafe.Pointer(&b[i*c.size])
	switch c.dt {
	case goccl.Int8, goccl.Uint8:
		*(*uint8)(p) = uint8(v)
	case goccl.Int32, goccl.Uint32:
		*(*uint32)(p) = uint32(v)
	case goccl.Int64, goccl.Uint64:
		*(*uint64)(p) = uint64(v)
	case goccl.Float16Type:
		*(*uint16)(p) = halfFromFloat64(float64(v))
	case goccl.BFloat16Type:
		*(*goccl.BFloat16)(p) = goccl.BFloat16From(float32(v))
	case goccl.Float32:
		*(*float32)(p) = float32(v)
	case goccl.Float64:
		*(*float64)(p) = float64(v)
	}
}

// loadInt reads integer element i, sign- or zero-extended (uint64 as its bits).
func (c elemCodec) loadInt(b []byte, i int) int64 {
	p := unsafe.Pointer(&b[i*c.size])
	switch c.dt {
	case goccl.Int8:
		return int64(*(*int8)(p))
	case goccl.Uint8:
		return int64(*(*uint8)(p))
	case goccl.Int32:
		return int64(*(*int32)(p))
	case goccl.Uint32:
		return int64(*(*uint32)(p))
	}
	return *(*int64)(p)
}

// loadFloat reads floating-point element i.
func (c elemCodec) loadFloat(b []byte, i int) float64 {
	p := unsafe.Pointer(&b[i*c.size])
	switch c.dt {
	case goccl.Float16Type:
		return halfToFloat64(*(*uint16)(p))
	case goccl.BFloat16Type:
		return float64((*(*goccl.BFloat16)(p)).Float32())
	case goccl.Float32:
		return float64(*(*float32)(p))
	}
	return *(*float64)(p)
}

// normInt truncates v to the element type and extends it back, the value
// an element holding v reads as.
func (c elemCodec) normInt(v int64) int64 {
	switch c.dt {
	case goccl.Int8:
		return int64(int8(v))
	case goccl.Uint8:
		return int64(uint8(v))
	case goccl.Int32:
		return int64(int32(v))
	case goccl.Uint32:
		return int64(uint32(v))
	}
	return v
}

// roundFloat rounds v to the element type (what storing it would keep).
func (c elemCodec) roundFloat(v float64) float64 {
	switch c.dt {
	case goccl.Float16Type:
		return halfToFloat64(halfFromFloat64(v))
	case goccl.BFloat16Type:
		return float64(goccl.BFloat16From(float32(v)).Float32())
	case goccl.Float32:
		return float64(float32(v))
	}
	return v
}

// exactIntLimit is the largest integer up to which the type holds every integer.
func exactIntLimit(dt goccl.DataType) float64 {
	switch dt {
	case goccl.Float16Type:
		return 2048
	case goccl.BFloat16Type:
		return 256
	case goccl.Float32:
		return 1 << 24
	}
	return 1 << 53
}

// epsilon is the type's relative rounding step at 1.
func epsilon(dt goccl.DataType) float64 {
	switch dt {
	case goccl.Float16Type:
		return 0x1p-10
	case goccl.BFloat16Type:
		return 0x1p-7
	case goccl.Float32:
		return 0x1p-23
	}
	return 0x1p-52
}

// pattern generates input values and expected results for one data type,
// operation and world size.
type pattern struct {
	codec   elemCodec
	isFloat bool
	signed  bool
	kind    patKind
	op      goccl.RedOp
	nranks  int
	sumMag  int64   // float sums: inputs are in [-sumMag, sumMag]
	exact   bool    // float results must match exactly
	tol     float64 // otherwise: the allowed absolute difference

	inputs   []*periodic // per rank, built on demand
	reducedS *periodic
}

func newPattern(dt goccl.DataType, kind patKind, op goccl.RedOp, nranks int) *pattern {
	p := &pattern{
		codec:   newCodec(dt),
		isFloat: dt.IsFloat(),
		signed:  dt.IsFloat() || dt == goccl.Int8 || dt == goccl.Int32 || dt == goccl.Int64,
		kind:    kind,
		op:      op,
		nranks:  nranks,
		exact:   true,
	}
	if p.isFloat && kind == patSum {
		limit := exactIntLimit(dt)
		p.sumMag = 7
		if float64(nranks)*7 > limit {
			p.sumMag = max(1, int64(limit)/int64(nranks))
		}
		if float64(nranks)*float64(p.sumMag) > limit {
			p.exact = false
		}
		if op == goccl.Avg {
			// sum/n is generally not representable, and NCCL-like libraries
			// may divide before or after summing: allow a few roundings.
			p.exact = false
		}
		p.tol = epsilon(dt) * float64(nranks+2) * float64(p.sumMag) * 2
		if !p.exact && op != goccl.Avg {
			p.tol *= float64(nranks)
		}
	}
	return p
}

// value is rank r's input element i, as an integer.
func (p *pattern) value(r, i int) int64 {
	ur, ui := uint64(r), uint64(i)
	switch p.kind {
	case patSum:
		if p.isFloat {
			m := uint64(p.sumMag)
			return int64((ur*7+ui*3+1)%(2*m+1)) - int64(m)
		}
	case patProd:
		if p.isFloat {
			// At most one rank in four contributes a 2: products are powers
			// of two, with signs.
			switch (ur + ui) % 4 {
			case 0:
				return 2
			case 1:
				return -1
			}
			return 1
		}
		v := int64((ur*5+ui*3)%6) + 1
		if p.signed && (ur+ui)%3 == 0 {
			v = -v
		}
		return v
	case patMinMax:
		if p.isFloat {
			return int64((ur*37+ui*11+5)%61) - 30
		}
	}
	// Copies, and integer sums and min/max: all bit patterns of int8.
	return int64((ur*131+ui*17+7)%251) - 125
}

// store writes rank r's input element idx into element i of b.
func (p *pattern) store(b []byte, i, r, idx int) {
	p.codec.storeInt(b, i, p.value(r, idx))
}

// matchesInput reports whether element i of b still holds rank r's input idx.
func (p *pattern) matchesInput(b []byte, i, r, idx int) bool {
	if p.isFloat {
		return p.codec.loadFloat(b, i) == float64(p.value(r, idx))
	}
	return p.codec.loadInt(b, i) == p.codec.normInt(p.value(r, idx))
}

// reduced returns the expected reduction over all ranks of input element idx.
func (p *pattern) reduced(idx int) (int64, float64) {
	n := p.nranks
	if p.isFloat {
		acc := float64(p.value(0, idx))
		for r := 1; r < n; r++ {
			v := float64(p.value(r, idx))
			switch p.op {
			case goccl.Sum, goccl.Avg:
				acc += v
			case goccl.Prod:
				acc *= v
			case goccl.Min:
				acc = math.Min(acc, v)
			case goccl.Max:
				acc = math.Max(acc, v)
			}
		}
		if p.op == goccl.Avg {
			acc /= float64(n)
		}
		return 0, p.codec.roundFloat(acc)
	}
	c := p.codec
	acc := c.normInt(p.value(0, idx))
	for r := 1; r < n; r++ {
		v := c.normInt(p.value(r, idx))
		switch p.op {
		case goccl.Sum:
			acc += v
		case goccl.Prod:
			acc *= v
		case goccl.Min:
			if intLess(c.dt, v, acc) {
				acc = v
			}
		case goccl.Max:
			if intLess(c.dt, acc, v) {
				acc = v
			}
		}
	}
	return c.normInt(acc), 0
}

// intLess compares normalised integers of type dt.
func intLess(dt goccl.DataType, a, b int64) bool {
	if dt == goccl.Uint64 {
		return uint64(a) < uint64(b)
	}
	return a < b
}

// copied returns the expected value of a plain copy of rank r's input idx.
func (p *pattern) copied(r, idx int) (int64, float64) {
	v := p.value(r, idx)
	if p.isFloat {
		return 0, float64(v)
	}
	return p.codec.normInt(v), 0
}

// matches reports whether element i of b holds the expected value.
func (p *pattern) matches(b []byte, i int, wantI int64, wantF float64) bool {
	if !p.isFloat {
		return p.codec.loadInt(b, i) == wantI
	}
	got := p.codec.loadFloat(b, i)
	if got == wantF {
		return true
	}
	if p.exact || p.kind != patSum {
		return false
	}
	return math.Abs(got-wantF) <= p.tol // NaN fails
}

// fillSentinel sets b to the sentinel byte.
func fillSentinel(b []byte) {
	if len(b) == 0 {
		return
	}
	b[0] = sentinel
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

var sentinelBlock = bytes.Repeat([]byte{sentinel}, 64<<10)

// allSentinel reports whether every byte of b is the sentinel.
func allSentinel(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(sentinelBlock))
		if !bytes.Equal(b[:n], sentinelBlock[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// countModified counts elements of b (element size sz) whose bytes are not
// all the sentinel; a trailing partial element counts as one.
func countModified(b []byte, sz int) int64 {
	var n int64
	for i := 0; i < len(b); i += sz {
		end := min(i+sz, len(b))
		for _, x := range b[i:end] {
			if x != sentinel {
				n++
				break
			}
		}
	}
	return n
}

// halfFromFloat64 converts to IEEE binary16 with round-to-nearest-even.
func halfFromFloat64(v float64) uint16 {
	bits := math.Float64bits(v)
	sign := uint16(bits>>48) & 0x8000
	if math.IsNaN(v) {
		return sign | 0x7e00
	}
	a := math.Abs(v)
	if a >= 65520 { // rounds to infinity
		return sign | 0x7c00
	}
	if a < 0x1p-25 { // rounds to zero (0x1p-25 itself is a tie, to even = 0)
		return sign
	}
	e := math.Ilogb(a)
	if e < -14 {
		// Subnormal: units of 2^-24.
		m := math.RoundToEven(a * 0x1p24)
		return sign | uint16(m)
	}
	m := math.RoundToEven(math.Ldexp(a, 10-e)) // in [1024, 2048]
	if m == 2048 {
		m = 1024
		e++
	}
	if e > 15 {
		return sign | 0x7c00
	}
	return sign | uint16(e+15)<<10 | (uint16(m) - 1024)
}

// halfToFloat64 converts IEEE binary16 bits exactly.
func halfToFloat64(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	frac := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 0x1f:
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	}
	return sign * math.Ldexp(1024+frac, exp-25)
}

// storeFloat writes v, rounded to the element type, into element i.
func (c elemCodec) storeFloat(b []byte, i int, v float64) {
	p := unsafe.Pointer(&b[i*c.size])
	switch c.dt {
	case goccl.Float16Type:
		*(*uint16)(p) = halfFromFloat64(v)
	case goccl.BFloat16Type:
		*(*goccl.BFloat16)(p) = goccl.BFloat16From(float32(v))
	case goccl.Float32:
		*(*float32)(p) = float32(v)
	case goccl.Float64:
		*(*float64)(p) = v
	}
}

// period is the number of elements after which every rank's input values,
// and so the expected results, repeat.
func (p *pattern) period() int {
	switch {
	case p.kind == patSum && p.isFloat:
		return int(2*p.sumMag + 1)
	case p.kind == patProd && p.isFloat:
		return 4
	case p.kind == patProd:
		return 6
	case p.kind == patMinMax && p.isFloat:
		return 61
	}
	return 251
}

// periodic holds the encoded values of a periodic sequence (an input or the
// expected results) for fast filling and comparing: buffers are compared
// chunk by chunk with bytes.Equal, and only a chunk that differs is checked
// element by element (with value semantics: 0 == -0, avg's tolerance).
type periodic struct {
	elt, period, chunk int
	data               []byte // elements for indices [0, period+chunk)
}

func newPeriodic(elt, period int, enc func(b []byte, i int)) *periodic {
	chunk := max(period, 16384/elt)
	s := &periodic{elt: elt, period: period, chunk: chunk, data: make([]byte, (period+chunk)*elt)}
	for i := 0; i < period+chunk; i++ {
		enc(s.data, i)
	}
	return s
}

// fill writes the sequence's elements start .. start+count-1 into dst.
func (s *periodic) fill(dst []byte, count, start int) {
	for i := 0; i < count; {
		c := min(s.chunk, count-i)
		ph := (start + i) % s.period
		copy(dst[i*s.elt:(i+c)*s.elt], s.data[ph*s.elt:(ph+c)*s.elt])
		i += c
	}
}

// mismatches compares buf's first count elements with the sequence from
// start; for each element of a chunk that differs, ok(k) (k relative to
// buf) decides, and mismatches counts the elements it rejects.
func (s *periodic) mismatches(buf []byte, count, start int, ok func(k int) bool) int64 {
	var bad int64
	for i := 0; i < count; {
		c := min(s.chunk, count-i)
		ph := (start + i) % s.period
		if !bytes.Equal(buf[i*s.elt:(i+c)*s.elt], s.data[ph*s.elt:(ph+c)*s.elt]) {
			for k := i; k < i+c; k++ {
				if !ok(k) {
					bad++
				}
			}
		}
		i += c
	}
	return bad
}

// inputSeq is rank r's input sequence (cached).
func (p *pattern) inputSeq(r int) *periodic {
	if p.inputs == nil {
		p.inputs = make([]*periodic, p.nranks)
	}
	if p.inputs[r] == nil {
		p.inputs[r] = newPeriodic(p.codec.size, p.period(), func(b []byte, i int) { p.store(b, i, r, i) })
	}
	return p.inputs[r]
}

// reducedSeq is the sequence of expected reductions (cached).
func (p *pattern) reducedSeq() *periodic {
	if p.reducedS == nil {
		p.reducedS = newPeriodic(p.codec.size, p.period(), func(b []byte, i int) {
			wi, wf := p.reduced(i)
			if p.isFloat {
				p.codec.storeFloat(b, i, wf)
			} else {
				p.codec.storeInt(b, i, wi)
			}
		})
	}
	return p.reducedS
}
