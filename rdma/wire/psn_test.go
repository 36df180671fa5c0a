package wire

import "testing"

func TestPSNArithmetic(t *testing.T) {
	for _, tc := range []struct {
		a, b uint32
		diff int32
	}{
		{5, 3, 2}, {3, 5, -2}, {0, PSNMask, 1}, {PSNMask, 0, -1}, {1, 0xfffffe, 3},
		{psnHalf - 1, 0, psnHalf - 1}, {psnHalf, 0, -psnHalf}, {7, 7, 0},
	} {
		if got := PSNDiff(tc.a, tc.b); got != tc.diff {
			t.Errorf("PSNDiff(%#x, %#x) = %d, want %d", tc.a, tc.b, got, tc.diff)
		}
		if got := PSNBefore(tc.a, tc.b); got != (tc.diff < 0) {
			t.Errorf("PSNBefore(%#x, %#x) = %v", tc.a, tc.b, got)
		}
	}
	if PSNAdd(PSNMask, 1) != 0 || PSNAdd(0, -1) != PSNMask || PSNAdd(0xfffff0, 0x20) != 0x10 {
		t.Error("PSNAdd does not wrap at 2^24")
	}
	for _, start := range []uint32{0, 0x7fffff, 0xfffff0} {
		for n := -1000; n <= 1000; n += 37 {
			if d := PSNDiff(PSNAdd(start, n), start); int(d) != n {
				t.Errorf("PSNDiff(PSNAdd(%#x, %d)) = %d", start, n, d)
			}
		}
	}
}
