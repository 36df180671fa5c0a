package textdist

import "testing"

func TestDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"run", "run", 0}, {"", "run", 3}, {"run", "", 3},
		{"rnu", "run", 1}, {"pref", "perf", 1}, {"rn", "run", 1}, {"runn", "run", 1},
		{"rxn", "run", 1}, {"ca", "abc", 3}, {"nproc-per-nod", "nproc-per-node", 1},
		{"kitten", "sitting", 3}, {"np", "n", 1}, {"GOCCL_TIMEUOT", "GOCCL_TIMEOUT", 1},
	} {
		if d := Distance(tt.a, tt.b); d != tt.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", tt.a, tt.b, d, tt.d)
		}
		if d := Distance(tt.b, tt.a); d != tt.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", tt.b, tt.a, d, tt.d)
		}
	}
}
