package sim

import (
	"math"
	"strings"
	"testing"
)

// TestParseWorkload: the published rows' workloads parse, and their
// parameter counts come out as the models' names say (within 3 %: the
// names round, and biases and norms are left out).
func TestParseWorkload(t *testing.T) {
	for _, tc := range []struct {
		s      string
		params float64
		check  func(Workload) bool
	}{
		{"GPT-22B L48 h6144 a64 seq2048 mbs1 TP8 PP1 full recompute fp16", 22e9,
			func(w Workload) bool {
				return w.Parallel.TP == 8 && w.Parallel.PP == 1 && w.Parallel.Recompute == "full"
			}},
		{"GPT-175B L96 h12288 a96 seq2048 mbs1 gbs64 TP8 PP8 full recompute fp16", 175e9,
			func(w Workload) bool { return w.Parallel.GBS == 64 && w.Model.Seq == 2048 }},
		{"GPT-530B L105 h20480 a128 seq2048 mbs1 TP8 PP35 full recompute fp16", 530e9, nil},
		{"GPT-1T L128 h25600 a160 seq2048 mbs1 gbs512 TP8 PP64 full recompute fp16", 1e12, nil},
		{"Llama-3.1-70B L80 h8192 ffn28672 heads64 kv8 vocab128256 seq8192 BF16 TP4 PP4 CP2 VP5 MBS1 GBS128", 70.6e9,
			func(w Workload) bool {
				return w.Model.GatedMLP && w.Model.KVHeads == 8 && w.Parallel.CP == 2 && w.Parallel.VP == 5 && w.Parallel.GBS == 128
			}},
	} {
		w, err := ParseWorkload(tc.s)
		if err != nil {
			t.Errorf("%q: %v", tc.s, err)
			continue
		}
		if got := w.Model.Params(); math.Abs(got/tc.params-1) > 0.03 {
			t.Errorf("%q: %.4g parameters, want %.4g", tc.s, got, tc.params)
		}
		if tc.check != nil && !tc.check(w) {
			t.Errorf("%q: parsed as %+v", tc.s, w)
		}
	}
	// Llama-3.1-70B: 2 × 80 layers × 8 KV heads × 128 × 2 bytes = 320 KiB a token.
	w, _ := ParseWorkload("Llama-3.1-70B L80 h8192 ffn28672 heads64 kv8 vocab128256 seq8192 BF16")
	if got := w.Model.KVBytesPerToken(); got != 327680 {
		t.Errorf("KV bytes per token %v, want 327680", got)
	}
	for _, tc := range []struct{ s, want string }{
		{"", "empty"},
		{"X L2 h64 a3 seq8", "heads = 3"},
		{"X L2 h64 a4 seq8 wibble", `word "wibble"`},
		{"X L2 h64 a4", "seq = 0"},
		{"X L2 h64 a4 seq8 kv3", "kv_heads = 3"},
	} {
		if _, err := ParseWorkload(tc.s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.s, err, tc.want)
		}
	}
}

// TestRoofline: the slower of compute and memory, each at its share of
// the peak; an unknown rate is +Inf only for work that needs it.
func TestRoofline(t *testing.T) {
	g := GPU{TFLOPS: 100, HBMGBps: 1000}
	// 1e12 FLOP at 50 % of 100 TFLOP/s = 20 ms; 1e9 B at 1 TB/s = 1 ms.
	if got := g.Roofline(1e12, 1e9, 0.5, 1); math.Abs(got-0.02) > 1e-12 {
		t.Errorf("compute-bound: %v s, want 0.02", got)
	}
	// 1e9 FLOP = 10 µs; 1e10 B at 80 % of 1 TB/s = 12.5 ms.
	if got := g.Roofline(1e9, 1e10, 1, 0.8); math.Abs(got-0.0125) > 1e-12 {
		t.Errorf("memory-bound: %v s, want 0.0125", got)
	}
	if got := (GPU{HBMGBps: 1000}).Roofline(0, 1e9, 1, 1); got != 1e-3 {
		t.Errorf("no FLOPs on a GPU without a TFLOPS figure: %v s, want 0.001", got)
	}
	if got := (GPU{HBMGBps: 1000}).Roofline(1, 1e9, 1, 1); !math.IsInf(got, 1) {
		t.Errorf("FLOPs on a GPU without a TFLOPS figure: %v s, want +Inf", got)
	}
}
