package ddp

import "testing"

// TestCommitAfterAgree: the fallback's decision, case by case.
func TestCommitAfterAgree(t *testing.T) {
	const all, even, odd = ^uint64(0), ^uint64(4), ^uint64(2) // one parity voted
	for _, c := range []struct {
		name      string
		and       uint64
		failed    int
		pendingOK bool
		want      bool
	}{
		{"every rank holds the step, none failed", even, 0, true, true},
		{"every rank holds the step, one failed", even, 1, true, false},
		{"some rank's step failed", odd &^ 1, 0, true, false},
		{"this rank's step failed", odd &^ 1, 0, false, false},
		{"others committed it and moved on", all &^ 6 &^ 1, 1, true, true},
		{"this rank moved on: its next step failed", all &^ 6 &^ 1, 1, false, false},
	} {
		if got := commitAfterAgree(c.and, c.failed, c.pendingOK); got != c.want {
			t.Errorf("%s: commit %v, want %v", c.name, got, c.want)
		}
	}
}
