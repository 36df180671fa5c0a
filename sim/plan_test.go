package sim

import (
	"strings"
	"testing"
)

// TestPlan: every ranked split fits, multiplies out to the GPUs, is
// predicted as Step predicts it alone, and comes in objective order; the
// counts add up; a split the search lists but Step refuses is counted.
func TestPlan(t *testing.T) {
	w, err := ParseWorkload("GPT-13B L40 h5120 a40 seq2048 fp16")
	if err != nil {
		t.Fatal(err)
	}
	one, _ := Preset("dgx-a100")
	two := one.WithNodes(2)
	rep, err := Plan([]*Topology{one, two}, w.Model, PlanSpace{GBS: 64}, StepOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Plans) == 0 || rep.Tried != len(rep.Plans)+rep.Invalid+rep.NotFit {
		t.Fatalf("%d plans of %d tried, %d invalid, %d not fitting", len(rep.Plans), rep.Tried, rep.Invalid, rep.NotFit)
	}
	if rep.NotFit == 0 {
		t.Errorf("no split over memory: the 13B model without ZeRO on TP1 PP1 needs ~210 GB, more than 80")
	}
	for i, e := range rep.Plans {
		p := e.Parallel
		if p.TP*p.PP*p.CP*p.DP != e.GPUs || !e.Result.Memory.Fits {
			t.Fatalf("plan %d: %+v on %d GPUs", i, p, e.GPUs)
		}
		if i > 0 && e.Result.StepS < rep.Plans[i-1].Result.StepS {
			t.Fatalf("plan %d (%.4g s) ranked after %.4g s", i, e.Result.StepS, rep.Plans[i-1].Result.StepS)
		}
	}
	best := rep.Plans[0]
	topo := one
	if best.GPUs == 16 {
		topo = two
	}
	alone, err := Step(topo, Workload{Model: w.Model, Parallel: best.Parallel}, StepOptions{})
	if err != nil || alone.StepS != best.Result.StepS {
		t.Errorf("best plan %+v: %v s in the plan, %v s alone (%v)", best.Parallel, best.Result.StepS, alone.StepS, err)
	}
	// Cost: step time × GPUs, in order.
	rep, err = Plan([]*Topology{one, two}, w.Model, PlanSpace{GBS: 64, Objective: "gpu-seconds"}, StepOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(rep.Plans); i++ {
		if rep.Plans[i].Cost < rep.Plans[i-1].Cost {
			t.Fatalf("gpu-seconds: plan %d costs %.4g after %.4g", i, rep.Plans[i].Cost, rep.Plans[i-1].Cost)
		}
	}
	for _, tc := range []struct {
		space PlanSpace
		want  string
	}{
		{PlanSpace{}, "global batch 0"},
		{PlanSpace{GBS: 8, Objective: "cheap"}, `objective "cheap"`},
	} {
		if _, err := Plan([]*Topology{one}, w.Model, tc.space, StepOptions{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.space, err, tc.want)
		}
	}
}

// BenchmarkPlan is a search over 64 DGX H100 nodes for Llama-3.1-70B:
// every split the space holds, predicted and ranked.
func BenchmarkPlan(b *testing.B) {
	w, _ := ParseWorkload("Llama-3.1-70B L80 h8192 ffn28672 heads64 kv8 vocab128256 seq8192 BF16 flash")
	p, _ := Preset("dgx-h100")
	topo := p.WithNodes(64)
	var tried int
	for b.Loop() {
		rep, err := Plan([]*Topology{topo}, w.Model, PlanSpace{GBS: 512, SP: true}, StepOptions{})
		if err != nil {
			b.Fatal(err)
		}
		tried = rep.Tried
	}
	b.ReportMetric(float64(tried), "splits/op")
}
