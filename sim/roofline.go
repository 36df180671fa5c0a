package sim

import "math"

// Roofline is the time in seconds of a kernel that does flops
// floating-point operations and moves bytes through HBM on g: the slower
// of the two at the GPU's peak rates scaled by the achieved fractions
// (computeEff of TFLOPS, memEff of HBMGBps; 1 is the datasheet peak),
// after Williams, Waterman and Patterson, "Roofline", CACM 52(4), 2009.
// A rate the topology leaves 0 (unknown) gives +Inf for work that needs
// it.
func (g GPU) Roofline(flops, bytes, computeEff, memEff float64) float64 {
	var tc, tm float64
	if flops > 0 {
		tc = flops / (g.TFLOPS * 1e12 * computeEff)
	}
	if bytes > 0 {
		tm = bytes / (g.HBMGBps * 1e9 * memEff)
	}
	if math.IsNaN(tc) {
		tc = math.Inf(1)
	}
	if math.IsNaN(tm) {
		tm = math.Inf(1)
	}
	return math.Max(tc, tm)
}
