package wire

// PSN arithmetic: packet sequence numbers are 24 bits and wrap around
// (IBTA vol. 1 §9.7.1). A PSN is "ahead" of another when it is less than
// 2^23 steps after it, the half-window rule responders use to tell new
// packets from duplicates.

const psnHalf = 1 << 23

// PSNAdd returns psn + n modulo 2^24.
func PSNAdd(psn uint32, n int) uint32 { return uint32(int64(psn)+int64(n)) & PSNMask }

// PSNDiff returns the signed distance a - b, in [-2^23, 2^23).
func PSNDiff(a, b uint32) int32 {
	d := (a - b) & PSNMask
	if d >= psnHalf {
		return int32(d) - 1<<24
	}
	return int32(d)
}

// PSNBefore reports whether a comes before b (a - b < 0 in PSN arithmetic).
func PSNBefore(a, b uint32) bool { return PSNDiff(a, b) < 0 }
