package memcpy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestCopy checks Copy against copy for sizes around MinBytes and odd
// alignments, short destinations and sources, and overlapping ranges both ways.
func TestCopy(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 3<<20)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for _, n := range []int{0, 1, 7, MinBytes - 1, MinBytes, MinBytes + 1, 65537, 1<<20 + 3} {
		for _, off := range []int{0, 1, 13, 64} {
			src := buf[off : off+n]
			dst := make([]byte, n+off+5)[off : off+n]
			if got := Copy(dst, src); got != n || !bytes.Equal(dst, src) {
				t.Fatalf("n %d off %d: copied %d, equal %v", n, off, got, bytes.Equal(dst, src))
			}
			short := make([]byte, n/2)
			if got := Copy(short, src); got != n/2 || !bytes.Equal(short, src[:n/2]) {
				t.Fatalf("n %d into %d bytes: %d", n, n/2, got)
			}
		}
	}
	for _, shift := range []int{-4097, -1, 1, 8192} {
		a := append([]byte(nil), buf[:1<<20]...)
		b := append([]byte(nil), buf[:1<<20]...)
		lo, hi := 100000, 100000+shift
		n := 300000
		Copy(a[hi:hi+n], a[lo:lo+n])
		copy(b[hi:hi+n], b[lo:lo+n])
		if !bytes.Equal(a, b) {
			t.Fatalf("overlap shifted by %d differs from copy", shift)
		}
	}
}

func bench(b *testing.B, n int, f func(dst, src []byte) int) {
	src, dst := make([]byte, 64<<20), make([]byte, 64<<20)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	b.SetBytes(int64(n))
	for b.Loop() {
		f(dst[:n], src[:n])
	}
}

func builtin(dst, src []byte) int { return copy(dst, src) }

func BenchmarkCopy(b *testing.B) {
	// 64 MiB: past any cache, the machine's one-core copy ceiling
	// (scripts/compare-peers.sh reports it).
	for _, n := range []int{64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20} {
		b.Run(sizeName(n)+"/memcpy", func(b *testing.B) { bench(b, n, Copy) })
		b.Run(sizeName(n)+"/builtin", func(b *testing.B) { bench(b, n, builtin) })
	}
}

func sizeName(n int) string { return fmt.Sprintf("%dKiB", n>>10) }
