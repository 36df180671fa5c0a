package goccl

import (
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// BenchmarkSkewBookkeeping times what the arrival record adds to one
// 2-rank operation besides the messages' 16 more header bytes: the entry
// (from the clock reading begin takes anyway), one merge of the peer's
// arrival, and the record at the end.
func BenchmarkSkewBookkeeping(b *testing.B) {
	now := time.Now()
	s := &skewStats{size: 8, wall0: now.UnixNano(), mono0: now}
	peer := transport.Arrival{Rank: 3, Spread: 20, At: now.UnixNano() + 2e6}
	for range b.N {
		a := s.entry(1, 5e6)
		a.Merge(peer)
		s.add(a)
	}
}

// TestSkewWindow: the window is the last StragglerWindow operations, all of
// them with the chunk being written (no operation running), the sealed
// chunks' otherwise.
func TestSkewWindow(t *testing.T) {
	s := &skewStats{size: 4}
	check := func(current bool, want int, newest uint32) {
		t.Helper()
		w := s.window(current)
		if len(w) != want {
			t.Fatalf("window(%v): %d entries, want %d", current, len(w), want)
		}
		seen := map[uint32]bool{}
		for _, e := range w {
			if seen[e.lag] || e.lag > newest || newest-e.lag >= uint32(want) {
				t.Fatalf("window(%v): operation %d repeated or not among the last %d", current, e.lag, want)
			}
			seen[e.lag] = true
		}
	}
	check(true, 0, 0)
	n := uint32(0)
	for _, upTo := range []int{1, 255, 256, 257, 999, 1000, 1001, 1024, 1300, 5000} {
		for int(n) < upTo {
			s.add(transport.Arrival{Rank: int32(n % 4), Spread: n})
			n++
		}
		check(true, min(upTo, StragglerWindow), n-1)
		sealed := upTo / skewChunk * skewChunk
		if sealed > 0 {
			check(false, min(sealed, StragglerWindow), uint32(sealed-1))
		} else {
			check(false, 0, 0)
		}
	}
	s.add(transport.Arrival{Rank: 4}) // not a rank: not counted
	s.add(transport.Arrival{Rank: -1})
	check(true, StragglerWindow, n-1)
}
