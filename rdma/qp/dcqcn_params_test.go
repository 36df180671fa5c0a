package qp

import (
	"strings"
	"testing"
	"time"
)

// TestDCQCNSet: mlx5's parameter names set the fields in mlx5's units;
// what is not named keeps its value; a bad spec is an error naming the
// parameter.
func TestDCQCNSet(t *testing.T) {
	p := DefaultDCQCN(25e6)
	if err := p.Set("rpg_time_reset=9ms, min_time_between_cnps=4000,rate_reduce_monitor_period=4ms,dce_tcp_rtt=1000,rpg_ai_rate=10,rpg_min_rate=2,rpg_byte_reset=100,dce_tcp_g=1000,rpg_min_dec_fac=25,rpg_threshold=5"); err != nil {
		t.Fatal(err)
	}
	want := DefaultDCQCN(25e6)
	want.TimeReset, want.CNPInterval, want.RateReducePeriod, want.AlphaPeriod = 9*time.Millisecond, 4*time.Millisecond, 4*time.Millisecond, time.Millisecond
	want.AIRate, want.MinRate, want.ByteReset, want.G, want.MinDecrease, want.Threshold = 10e6/8, 2e6/8, 6400, 24.0/1024, 0.25, 5
	if p != want {
		t.Errorf("got %+v\nwant %+v", p, want)
	}
	for _, bad := range []string{"rpg_time_reset", "rpg_time_rest=9", "rpg_ai_rate=fast", "rpg_ai_rate=4ms", "dce_tcp_g=2000", "rpg_min_dec_fac=101", "rpg_time_reset=-1"} {
		q := DefaultDCQCN(25e6)
		err := q.Set(bad)
		name, _, _ := strings.Cut(bad, "=")
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Set(%q): %v, want an error naming %s", bad, err, name)
		}
	}
}
