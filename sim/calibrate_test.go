package sim

import (
	"math"
	"strings"
	"testing"
)

// TestFitHockney: exact points give back α and β; noisy ones a small
// median error; bad points are named.
func TestFitHockney(t *testing.T) {
	var pts []Point
	for n := int64(8); n <= 64<<20; n *= 8 {
		pts = append(pts, Point{Bytes: n, TimeUs: 12 + float64(n)/2e3}) // 12 µs, 2 GB/s
	}
	f, err := FitHockney(pts)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(f.LatencyUs-12) > 1e-6 || math.Abs(f.GBps-2) > 1e-9 || f.MedianAbsError > 1e-9 {
		t.Errorf("fit %+v, want 12 µs and 2 GB/s exactly", f)
	}
	// ±5 % alternating: the fit's median error stays about 5 %.
	for i := range pts {
		pts[i].TimeUs *= 1 + 0.05*float64(1-2*(i%2))
	}
	f, err = FitHockney(pts)
	if err != nil {
		t.Fatal(err)
	}
	if f.MedianAbsError > 0.06 || math.Abs(f.GBps/2-1) > 0.1 {
		t.Errorf("noisy fit %+v: want about 2 GB/s and a median error near 5 %%", f)
	}
	for _, tc := range []struct {
		pts  []Point
		want string
	}{
		{pts[:1], "1 points"},
		{[]Point{{8, 1}, {8, 2}}, "one size"},
		{[]Point{{8, 5}, {1 << 20, 1}}, "does not grow"},
		{[]Point{{8, 0}, {16, 1}}, "positive time"},
	} {
		if _, err := FitHockney(tc.pts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.pts, err, tc.want)
		}
	}
}

// TestApplyCalibration: a calibration at one rate predicts another by
// its efficiency; the costs goccl's model sees are the measured ones.
func TestApplyCalibration(t *testing.T) {
	base, _ := Preset("goccl-netns")
	base.NICGbps = 0.1 // a cluster shaped to 100 Mbit/s
	cal := &Calibration{
		Intra: &LinkFit{LatencyUs: 3, GBps: 4},
		Inter: &LinkFit{LatencyUs: 50, GBps: 0.117, RateGbps: 1, Efficiency: 0.936},
	}
	got, err := base.Apply(cal)
	if err != nil {
		t.Fatal(err)
	}
	c := got.GocclCosts()
	if math.Abs(c.Intra.Alpha-3e-6) > 1e-12 || math.Abs(1/c.Intra.Beta-4e9) > 1 {
		t.Errorf("intra costs %+v, want 3 µs and 4 GB/s", c.Intra)
	}
	// 93.6 % of 100 Mbit/s = 11.7 MB/s of payload.
	if math.Abs(c.Inter.Alpha-50e-6) > 1e-12 || math.Abs(1/c.Inter.Beta/11.7e6-1) > 1e-9 {
		t.Errorf("inter costs %+v, want 50 µs and 11.7 MB/s", c.Inter)
	}
	nccl, _ := Preset("dgx-h100")
	if _, err := nccl.Apply(cal); err == nil || !strings.Contains(err.Error(), "runtime goccl") {
		t.Errorf("a calibration on an nccl topology: %v", err)
	}
	if _, err := LoadCalibration(strings.NewReader(`{"source":"x","intra":{"latency_us":1,"GBps":0,"median_abs_error":0,"points":null}}`)); err == nil || !strings.Contains(err.Error(), "intra") {
		t.Errorf("a zero rate: %v", err)
	}
}
