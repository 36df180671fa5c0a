package main

import (
	"context"
	"io"
	"testing"

	"github.com/goccl/goccl"
)

func TestPeriodic(t *testing.T) {
	p := newPattern(goccl.Int32, patCopy, goccl.Sum, 3)
	s := p.inputSeq(2)
	buf := make([]byte, 4*100000)
	s.fill(buf, 100000, 7)
	for i := 0; i < 100000; i += 997 {
		if !p.matchesInput(buf, i, 2, 7+i) {
			t.Fatalf("element %d", i)
		}
	}
	if n := s.mismatches(buf, 100000, 7, func(int) bool { return false }); n != 0 {
		t.Errorf("%d mismatches", n)
	}
	buf[4*5000+1] ^= 1
	buf[4*99999] ^= 1
	var seen []int
	n := s.mismatches(buf, 100000, 7, func(k int) bool {
		ok := p.matchesInput(buf, k, 2, 7+k)
		if !ok {
			seen = append(seen, k)
		}
		return ok
	})
	if n != 2 || len(seen) != 2 || seen[0] != 5000 || seen[1] != 99999 {
		t.Errorf("mismatches %d at %v", n, seen)
	}
}

func TestAvgTolerance(t *testing.T) {
	for _, dt := range []goccl.DataType{goccl.Float16Type, goccl.BFloat16Type, goccl.Float32, goccl.Float64} {
		p := newPattern(dt, patSum, goccl.Avg, 3)
		buf := make([]byte, 8)
		for i := 0; i < 100; i++ {
			_, want := p.reduced(i)
			var sum float64
			for r := 0; r < 3; r++ {
				sum += float64(p.value(r, i))
			}
			// A library that premultiplies by 1/3 in the element type.
			var pre float64
			for r := 0; r < 3; r++ {
				pre = p.codec.roundFloat(pre + p.codec.roundFloat(float64(p.value(r, i))*p.codec.roundFloat(1.0/3)))
			}
			p.codec.storeFloat(buf, 0, pre)
			if !p.matches(buf, 0, 0, want) {
				t.Errorf("%s i=%d: premultiplied avg %v rejected (want %v, tol %v)", dt, i, p.codec.loadFloat(buf, 0), want, p.tol)
			}
			if sum != 0 {
				p.codec.storeFloat(buf, 0, sum) // forgot to divide
				if p.matches(buf, 0, 0, want) {
					t.Errorf("%s i=%d: sum %v accepted as avg %v", dt, i, sum, want)
				}
			}
		}
	}
}

// BenchmarkCheck measures initData + verify of a correct 16 MB all_reduce.
func BenchmarkCheck(bm *testing.B) {
	for _, dt := range []goccl.DataType{goccl.Float32, goccl.BFloat16Type, goccl.Int8} {
		bm.Run(dt.String(), func(bm *testing.B) {
			cfg, _ := parsePerfArgs([]string{"all_reduce", "-e", "16M"}, io.Discard)
			b := newBench(context.Background(), cfg, nopComm{}, io.Discard, io.Discard)
			b.dt, b.op, b.root, b.elt = dt, goccl.Sum, 0, dt.Size()
			b.pat = newPattern(dt, patSum, goccl.Sum, 2)
			b.setup(16 << 20)
			bm.SetBytes(16 << 20)
			for i := 0; i < bm.N; i++ {
				b.initData(false)
				b.pat.reducedSeq().fill(b.recvBuf, b.lay.recvCount, 0) // what a correct library writes
				if w, o := b.verify(16<<20, false); w != 0 || o != 0 {
					bm.Fatal(w, o)
				}
			}
		})
	}
}
