package linktest

import (
	"bytes"
	"testing"
)

// TestAddBytes: the suite's folded results are only as good as addBytes.
func TestAddBytes(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 64, 1000} {
		a, b := filled(n, 1), filled(n, 2)
		want := bytes.Clone(a)
		for i := range want {
			want[i] += b[i]
		}
		addBytes(a, b)
		if !bytes.Equal(a, want) {
			t.Fatalf("n=%d: addBytes wrong", n)
		}
	}
}

// TestFill: messages of one seed and length are alike, and others differ.
func TestFill(t *testing.T) {
	const n = 200 << 10
	if !bytes.Equal(filled(n, 1), filled(n, 1)) {
		t.Fatal("fill is not deterministic")
	}
	if bytes.Equal(filled(n, 1), filled(n, 2)) || bytes.Equal(filled(n, 1)[:1000], filled(n+1, 1)[:1000]) {
		t.Fatal("fill does not depend on seed and length")
	}
}

// TestFolderCheck: the reduce-piece check rejects what the contract forbids.
func TestFolderCheck(t *testing.T) {
	const n = 1000
	for _, tc := range []struct {
		name   string
		pieces [][2]int // offset, length in the destination
		srcLen int      // length of src when not the piece's (-1: same)
		ok     bool
	}{
		{"one", [][2]int{{0, n}}, -1, true},
		{"aligned", [][2]int{{0, 128}, {128, 64}, {192, n - 192}}, -1, true},
		{"any order", [][2]int{{192, n - 192}, {0, 128}, {128, 64}}, -1, true},
		{"unaligned", [][2]int{{0, 100}, {100, n - 100}}, -1, false},
		{"gap", [][2]int{{0, 128}, {192, n - 192}}, -1, false},
		{"overlap", [][2]int{{0, 128}, {64, n - 64}}, -1, false},
		{"short", [][2]int{{0, 128}}, -1, false},
		{"lengths differ", [][2]int{{0, n}}, n - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, n)
			f := &folder{buf: buf}
			src := make([]byte, n)
			for _, p := range tc.pieces {
				sl := p[1]
				if tc.srcLen >= 0 {
					sl = tc.srcLen
				}
				f.fold(buf[p[0]:p[0]+p[1]], src[:sl])
			}
			if err := f.check(n); (err == nil) != tc.ok {
				t.Fatalf("check: %v, want ok %v", err, tc.ok)
			}
		})
	}
	// A destination outside the Recv's buffer.
	f := &folder{buf: make([]byte, n)}
	f.fold(make([]byte, n), make([]byte, n))
	if f.check(n) == nil {
		t.Fatal("check accepted a destination outside the buffer")
	}
}
