package algo

import "testing"

// TestScheduleTable: each kind with rows has a flat row (no Pick, always
// usable) for the tuner to fall back on; no two rows share a kind and a
// name; a kind's rows fit the log's 8 bits; the algorithms AllReduceHier
// runs among the hosts are always-usable AllReduce rows.
func TestScheduleTable(t *testing.T) {
	var flat [NumKinds]bool
	var rows [NumKinds]int
	type name struct {
		k Kind
		a Algorithm
	}
	seen := map[name]bool{}
	for i := range schedules {
		r := &schedules[i]
		key := name{r.Kind, r.Algo}
		if seen[key] {
			t.Errorf("two rows of %d named %s", r.Kind, r.Algo)
		}
		seen[key] = true
		if r.Run == nil || r.Kind == 0 || r.Kind >= NumKinds || r.Algo == "" {
			t.Errorf("row %d (%d %q): incomplete", i, r.Kind, r.Algo)
		}
		if r.Pick == nil && r.Usable == nil && !r.OutOfPlace {
			flat[r.Kind] = true
		}
		if r.Bit() != rows[r.Kind] || r.Bit() >= 8 {
			t.Errorf("row %d (%d %s): bit %d, want %d below 8", i, r.Kind, r.Algo, r.Bit(), rows[r.Kind])
		}
		rows[r.Kind]++
	}
	for k := range rows {
		if rows[k] > 0 && !flat[k] {
			t.Errorf("kind %d has no flat row", k)
		}
	}
	for _, a := range []Algorithm{RD, RHD, Ring} {
		if r := Lookup(KindAllReduce, a); r == nil || r.Usable != nil {
			t.Errorf("AllReduce %s: %+v, want an always-usable row", a, r)
		}
	}
}
