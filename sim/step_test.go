package sim

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// stepRows are the step_s rows of testdata/published.csv with their
// topologies and workloads.
type stepRow struct {
	p    Published
	topo *Topology
	w    Workload
}

func stepRows(t *testing.T) []stepRow {
	t.Helper()
	rows := readCSVFile(t, "testdata/published.csv")
	var out []stepRow
	for _, p := range rows {
		if p.Metric != "step_s" {
			continue
		}
		sys, ok := lookupSystem(p.System)
		if !ok {
			t.Fatalf("line %d: system %q", p.Line, p.System)
		}
		topo, err := sys.topology(p.GPUs, p.Nodes)
		if err != nil {
			t.Fatal(err)
		}
		w, err := ParseWorkload(p.Workload)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, stepRow{p, topo, w})
	}
	return out
}

// TestStepLeaveOneOut: the compute efficiency calibrated on the other
// rows of the same system (the geometric mean of each one's own), never
// on the row predicted. Prints the table of docs/sim.md ("Training step",
// leave-one-out): go test ./sim -run TestStepLeaveOneOut -v.
func TestStepLeaveOneOut(t *testing.T) {
	rows := stepRows(t)
	if len(rows) != 6 {
		t.Fatalf("%d step_s rows, want 6", len(rows))
	}
	eff := make([]float64, len(rows))
	for i, r := range rows {
		e, err := ComputeEffFor(r.topo, r.w, StepOptions{}, r.p.Value)
		if err != nil {
			t.Fatal(err)
		}
		eff[i] = e
	}
	for i, r := range rows {
		logSum, n := 0.0, 0
		for j, o := range rows {
			if j != i && o.p.System == r.p.System {
				logSum += math.Log(eff[j])
				n++
			}
		}
		e := math.Exp(logSum / float64(n))
		res, err := Step(r.topo, r.w, StepOptions{ComputeEff: e})
		if err != nil {
			t.Fatal(err)
		}
		errPct := 100 * (res.StepS - r.p.Value) / r.p.Value
		t.Logf("| %d | %s | %s | %.3f | %.3f | %.4g | %.4g | %+.1f %% |", r.p.Line, r.p.System, r.w.Model.Name, eff[i], e, res.StepS, r.p.Value, errPct)
		if math.Abs(errPct) > 10 {
			t.Errorf("line %d: leave-one-out error %+.1f %%, over 10 %%", r.p.Line, errPct)
		}
	}
}

func mustWorkload(t testing.TB, s string) Workload {
	t.Helper()
	w, err := ParseWorkload(s)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func mustStep(t testing.TB, topo *Topology, w Workload, o StepOptions) StepResult {
	t.Helper()
	r, err := Step(topo, w, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func a100(t testing.TB, nodes int) *Topology {
	t.Helper()
	p, err := Preset("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	return p.WithNodes(nodes)
}

// TestStepFLOPs: the FLOPs run per step with full recomputation are
// Narayanan et al. 2021's 96·B·s·L·h²·(1 + s/6h + V/16Lh) (arXiv
// 2104.04473 §5.1), and the model FLOPs without recomputation 3/4 of its
// layer part.
func TestStepFLOPs(t *testing.T) {
	const B, s, L, h, V = 32.0, 512.0, 8.0, 1024.0, 51200.0
	topo := a100(t, 2)
	w := mustWorkload(t, "GPT L8 h1024 a16 seq512 mbs2 gbs32 TP2 PP2 full recompute fp16")
	r := mustStep(t, topo, w, StepOptions{})
	peak := topo.GPU.TFLOPS * 1e12 * float64(topo.GPUs()) * r.StepS
	want := 96 * B * s * L * h * h * (1 + s/(6*h) + V/(16*L*h))
	if got := r.HFU * peak; math.Abs(got/want-1) > 1e-9 {
		t.Errorf("FLOPs run %.6g, want Narayanan's %.6g", got, want)
	}
	model := 72 * B * s * L * h * h * (1 + s/(6*h) + V/(12*L*h))
	if got := r.MFU * peak; math.Abs(got/model-1) > 1e-9 {
		t.Errorf("model FLOPs %.6g, want %.6g", got, model)
	}
}

// TestStepBubble: the bubble is (PP−1)/m of the ideal for 1F1B and
// (PP−1)/(VP·m) interleaved (Narayanan §2.2).
func TestStepBubble(t *testing.T) {
	topo := a100(t, 4)
	for _, tc := range []struct {
		spec string
		want float64
	}{
		{"GPT L16 h1024 a16 seq512 mbs1 gbs64 TP2 PP4", 3.0 / 16},     // DP 4: m = 64/4 = 16
		{"GPT L16 h1024 a16 seq512 mbs1 gbs64 TP2 PP4 VP2", 3.0 / 32}, // interleaved: / VP
		{"GPT L16 h1024 a16 seq512 mbs1 gbs64 TP8 PP4", 3.0 / 64},     // DP 1: m = 64
	} {
		r := mustStep(t, topo, mustWorkload(t, tc.spec), StepOptions{})
		m := float64(r.Split.MicroBatches)
		ideal := m * (r.Split.FwdS + r.Split.BwdS)
		if got := r.BubbleS / ideal; math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: bubble %.6f of the ideal, want %.6f (m %v)", tc.spec, got, tc.want, m)
		}
	}
}

// TestBucketOverlap: buckets ready through the backward go out one at a
// time; only what runs past the backward is exposed.
func TestBucketOverlap(t *testing.T) {
	// 4 buckets of 25 in a 4 s backward: ready at 1, 2, 3, 4 s.
	// 0.5 s each: done at 1.5, 2.5, 3.5, 4.5: only the last half-second shows.
	exp, hid, tot := bucketOverlap(100, 25, 4, 0.5, 0.5)
	if exp != 0.5 || hid != 1.5 || tot != 2 {
		t.Errorf("compute-bound: exposed %v hidden %v total %v, want 0.5 1.5 2", exp, hid, tot)
	}
	// 2 s each: 1-3, 3-5, 5-7, 7-9: 5 s past the backward.
	exp, hid, tot = bucketOverlap(100, 25, 4, 2, 2)
	if exp != 5 || hid != 3 || tot != 8 {
		t.Errorf("comm-bound: exposed %v hidden %v total %v, want 5 3 8", exp, hid, tot)
	}
	// 90 bytes: 4 buckets, the last one of 15 (0.3 s).
	exp, _, _ = bucketOverlap(90, 25, 4, 0.5, 0.3)
	if math.Abs(exp-0.3) > 1e-12 {
		t.Errorf("short last bucket: exposed %v, want 0.3", exp)
	}
}

// TestStepZeRO: ZeRO 1's reduce-scatter and all-gather move what ZeRO 0's
// all-reduce moves (ring: the same time within latency); ZeRO 3 adds an
// all-gather of the parameters before each micro-batch's forward and
// backward.
func TestStepZeRO(t *testing.T) {
	topo := a100(t, 8)
	base := "GPT L8 h4096 a32 seq1024 mbs1 gbs32 TP8 PP1"
	one := StepOptions{BucketBytes: 1 << 50} // one bucket: the whole gradient at once
	r0 := mustStep(t, topo, mustWorkload(t, base), one)
	r1 := mustStep(t, topo, mustWorkload(t, base+" ZeRO1"), one)
	r3 := mustStep(t, topo, mustWorkload(t, base+" ZeRO3"), one)
	// The same bytes: the all-reduce's time for ZeRO 0, the
	// reduce-scatter's and the all-gather's for ZeRO 1, as the collective
	// model gives them (NCCL runs other algorithms for the halves: NVLS
	// gather, PAT).
	ar, rs, ag := dpTimes(t, topo, r0)
	if math.Abs(r0.Comm.DP/ar-1) > 1e-9 || math.Abs(r1.Comm.DP/(rs+ag)-1) > 1e-9 {
		t.Errorf("DP comm: ZeRO 0 %.4g s, all-reduce %.4g s; ZeRO 1 %.4g s, reduce-scatter + all-gather %.4g s",
			r0.Comm.DP, ar, r1.Comm.DP, rs+ag)
	}
	m := float64(r3.Split.MicroBatches)
	if got, want := r3.Comm.DP-r1.Comm.DP, 2*m*r3.Split.ParamGatherS; math.Abs(got-want) > 1e-12 {
		t.Errorf("ZeRO 3 adds %.6g s, want 2 × %v micro-batches × %.6g s", got, m, r3.Split.ParamGatherS)
	}
	if !(r1.Memory.Optimizer < r0.Memory.Optimizer/7.9) || r3.Memory.Params > r0.Memory.Params/7.9 {
		t.Errorf("ZeRO memory: optimizer %v → %v, params %v → %v: want /8", r0.Memory.Optimizer, r1.Memory.Optimizer, r0.Memory.Params, r3.Memory.Params)
	}
}

// dpTimes is the all-reduce, reduce-scatter and all-gather of r's whole
// gradient (ZeRO 0: Memory.Grads) over its DP × CP ranks, TP apart.
func dpTimes(t *testing.T, topo *Topology, r StepResult) (ar, rs, ag float64) {
	t.Helper()
	n, g := r.Split.DP*r.Split.CP, r.Memory.Grads
	var errs [3]error
	ar, errs[0] = topo.groupTime("all_reduce", g, n, r.Split.TP)
	rs, errs[1] = topo.groupTime("reduce_scatter", g, n, r.Split.TP)
	ag, errs[2] = topo.groupTime("all_gather", g, n, r.Split.TP)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return ar, rs, ag
}

// TestStepStraggler: one rank twice as slow doubles the compute the step
// waits on, and the bubble with it.
func TestStepStraggler(t *testing.T) {
	topo := a100(t, 2)
	w := mustWorkload(t, "GPT L8 h2048 a16 seq1024 mbs1 gbs16 TP8 PP2")
	r1 := mustStep(t, topo, w, StepOptions{})
	r2 := mustStep(t, topo, w, StepOptions{Straggler: 2})
	if math.Abs(r2.ComputeS/r1.ComputeS-2) > 1e-9 {
		t.Errorf("compute %.4g → %.4g s, want doubled", r1.ComputeS, r2.ComputeS)
	}
	if !(r2.StepS > 1.5*r1.StepS) || !(r2.BubbleS > 1.5*r1.BubbleS) {
		t.Errorf("step %.4g → %.4g s, bubble %.4g → %.4g: want both nearly doubled", r1.StepS, r2.StepS, r1.BubbleS, r2.BubbleS)
	}
}

// TestStepMoE: EP all-to-alls appear with experts and scale with the
// imbalance factor; the parameters count the experts.
func TestStepMoE(t *testing.T) {
	topo := a100(t, 4)
	w := mustWorkload(t, "MoE L8 h2048 a16 seq1024 mbs1 gbs32 TP1 PP1 EP8 experts8 topk2 moeevery2")
	r1 := mustStep(t, topo, w, StepOptions{})
	r2 := mustStep(t, topo, w, StepOptions{Imbalance: 2})
	if !(r1.Exposed.EP > 0) || math.Abs(r2.Exposed.EP/r1.Exposed.EP-2) > 1e-9 {
		t.Errorf("EP exposed %.4g s, with imbalance 2 %.4g s: want > 0 and doubled", r1.Exposed.EP, r2.Exposed.EP)
	}
	dense := mustWorkload(t, "D L8 h2048 a16 seq1024")
	// 4 MoE layers with 8 experts: 7 more MLPs each (2 × h × 4h) and the router.
	h := 2048.0
	if got, want := w.Model.Params()-dense.Model.Params(), 4*(7*8*h*h+8*h); math.Abs(got-want) > 1 {
		t.Errorf("MoE adds %.6g parameters, want %.6g", got, want)
	}
}

// TestStepErrors: splits that do not divide are errors naming the value;
// a step that does not fit in memory is predicted and flagged.
func TestStepErrors(t *testing.T) {
	topo := a100(t, 2)
	for _, tc := range []struct{ spec, want string }{
		{"G L8 h1024 a16 seq512 mbs1 gbs16 TP3", "TP 3 × PP 1 × CP 1 = 3"},
		{"G L8 h1024 a16 seq512 mbs1 gbs16 TP8 PP3", "TP 8 × PP 3"},
		{"G L8 h1024 a16 seq512 mbs1 gbs15 TP8", "GBS 15"},
		{"G L8 h1024 a16 seq512 mbs1 TP8", "GBS 0"},
		{"G L12 h1024 a16 seq512 mbs1 gbs16 TP4 PP4 VP2", "layers 12"},
		{"G L8 h1024 a16 seq512 mbs1 gbs16 TP8 DP4", "DP 4"},
		{"G L8 h1024 a16 seq500 mbs1 gbs16 TP4 CP3", "CP 3"},
		{"G L8 h1024 a16 seq512 mbs1 gbs16 TP8 EP2", "EP 2"},
		{"G L8 h1024 a16 seq512 mbs1 gbs16 TP8 PP2 VP2 gpipe", "VP 2"},
	} {
		_, err := Step(topo, mustWorkload(t, tc.spec), StepOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.spec, err, tc.want)
		}
	}
	if _, err := Step(topo, mustWorkload(t, "G L8 h1024 a16 seq512 mbs1 gbs16"), StepOptions{Straggler: 0.5}); err == nil || !strings.Contains(err.Error(), "straggler 0.5") {
		t.Errorf("straggler 0.5: error %v", err)
	}
	r := mustStep(t, a100(t, 1), mustWorkload(t, "GPT-175B L96 h12288 a96 seq2048 mbs1 gbs8 TP8"), StepOptions{})
	if r.Memory.Fits || !strings.Contains(r.Note, "does not fit") || !(r.StepS > 0) {
		t.Errorf("175B on 8 GPUs: fits %v, note %q, step %v", r.Memory.Fits, r.Note, r.StepS)
	}
}

// TestStepTrace: every micro-batch's forward and backward on every stage,
// and a drawing as long as the closed form's compute and bubble (plus the
// p2p transfers it waits on).
func TestStepTrace(t *testing.T) {
	r := mustStep(t, a100(t, 4), mustWorkload(t, "GPT L16 h2048 a16 seq1024 mbs1 gbs16 TP8 PP4"), StepOptions{})
	ev, err := StepTrace(r)
	if err != nil {
		t.Fatal(err)
	}
	sp := r.Split
	end, n := 0.0, 0
	for _, e := range ev {
		if e.Ph != "X" || e.Dur < 0 {
			t.Fatalf("event %+v", e)
		}
		if e.Cat == "compute" && e.Name != "optimizer" {
			n++
			end = math.Max(end, (e.Ts+e.Dur)/1e6)
		}
	}
	if n != 2*sp.PP*sp.MicroBatches {
		t.Errorf("%d forward/backward events, want %d", n, 2*sp.PP*sp.MicroBatches)
	}
	lo := float64(sp.MicroBatches+sp.PP-1) * (sp.FwdS + sp.BwdS)
	hi := lo + r.Exposed.PP + 2*float64(sp.PP)*sp.P2PS
	if end < lo-1e-9 || end > hi+1e-9 {
		t.Errorf("pipeline drawn in %.6f s, want %.6f to %.6f", end, lo, hi)
	}
}

// BenchmarkStep100k: one step of a 1T-parameter GPT on 98,304 H100s
// (12,288 DGX nodes; goal < 1 s).
func BenchmarkStep100k(b *testing.B) {
	p, _ := Preset("dgx-h100")
	topo := p.WithNodes(12288)
	w := mustWorkload(b, "GPT-1T L128 h25600 a160 seq2048 mbs1 gbs12288 TP8 PP16 full recompute fp16 ZeRO1")
	for b.Loop() {
		mustStep(b, topo, w, StepOptions{})
	}
}

// BenchmarkStepSweep: a sweep over TP, PP, micro-batch, recomputation and
// ZeRO on 64 nodes; reports configurations a minute (goal ≥ 10,000).
func BenchmarkStepSweep(b *testing.B) {
	p, _ := Preset("dgx-h100")
	topo := p.WithNodes(64)
	var ws []Workload
	for _, tp := range []int{1, 2, 4, 8} {
		for _, pp := range []int{1, 2, 4, 8} {
			for _, mbs := range []int{1, 2, 4} {
				for _, rc := range []string{"", " full recompute"} {
					for _, z := range []int{0, 1, 3} {
						ws = append(ws, mustWorkload(b, fmt.Sprintf("GPT L32 h8192 a64 seq4096 mbs%d gbs4096 TP%d PP%d ZeRO%d%s", mbs, tp, pp, z, rc)))
					}
				}
			}
		}
	}
	n := 0
	for b.Loop() {
		for _, w := range ws {
			if _, err := Step(topo, w, StepOptions{}); err != nil {
				b.Fatal(err)
			}
			n++
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Minutes(), "configs/min")
}
