package transport

import (
	"math"
	"testing"
)

// TestArrivalMerge: Merge keeps the later entry (the higher rank on a tie)
// and the earlier first entry, whatever the order of the merges.
func TestArrivalMerge(t *testing.T) {
	const ms = int64(1e6)
	base := int64(1_767_225_600) * 1e9
	me := Arrival{Rank: 0, At: base}
	for _, tc := range []struct {
		name      string
		a, o      Arrival
		want      Arrival
		symmetric bool
	}{
		{"nothing known", Arrival{}, me, me, true},
		{"nothing sent", me, Arrival{}, me, true},
		{"the same", me, me, me, true},
		{"later entry", me, Arrival{Rank: 5, At: base + 3*ms}, Arrival{Rank: 5, Spread: 3000, At: base + 3*ms}, true},
		{"earlier first", Arrival{Rank: 5, Spread: 1000, At: base + 3*ms}, Arrival{Rank: 2, Spread: 0, At: base - 2*ms},
			Arrival{Rank: 5, Spread: 5000, At: base + 3*ms}, true},
		{"tie: higher rank", Arrival{Rank: 1, At: base}, Arrival{Rank: 3, At: base}, Arrival{Rank: 3, At: base}, true},
		{"saturates", Arrival{Rank: 1, At: base}, Arrival{Rank: 2, At: base + 5000*1e9}, Arrival{Rank: 2, Spread: math.MaxUint32, At: base + 5000*1e9}, true},
	} {
		got := tc.a
		got.Merge(tc.o)
		if got != tc.want {
			t.Errorf("%s: %+v merged with %+v = %+v, want %+v", tc.name, tc.a, tc.o, got, tc.want)
		}
		got = tc.o
		got.Merge(tc.a)
		if tc.symmetric && got != tc.want {
			t.Errorf("%s: %+v merged with %+v = %+v, want %+v", tc.name, tc.o, tc.a, got, tc.want)
		}
	}
	// Eight ranks entering 1 ms apart, merged in two different orders.
	var up, down Arrival
	for r := range 8 {
		up.Merge(Arrival{Rank: int32(r), At: base + int64(r)*ms})
		down.Merge(Arrival{Rank: int32(7 - r), At: base + int64(7-r)*ms})
	}
	if want := (Arrival{Rank: 7, Spread: 7000, At: base + 7*ms}); up != want || down != want {
		t.Errorf("eight ranks: %+v and %+v, want %+v", up, down, want)
	}
}
