package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/goccl/goccl/sim"
)

const stepSpec = "GPT-175B L96 h12288 a96 seq2048 mbs1 gbs64 TP8 PP8 VP3 full recompute fp16"

// TestSimStepTable: the breakdown's parts add up to the step, as sim.Step
// predicts it.
func TestSimStepTable(t *testing.T) {
	out, errOut, code := simCLI("sim", "step", "-t", "dgx-a100", "--nodes", "8", "--workload", stepSpec)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	topo, _ := sim.Preset("dgx-a100")
	w, _ := sim.ParseWorkload(stepSpec)
	r, err := sim.Step(topo.WithNodes(8), w, sim.StepOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"TP 8 PP 8 VP 3 CP 1 DP 1", "schedule interleaved", "pipeline bubble", "TP comm exposed", "MFU"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	var stepLine string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "step" {
			stepLine = f[1]
		}
	}
	if got, err := strconv.ParseFloat(stepLine, 64); err != nil || math.Abs(got-r.StepS) > 1e-4 {
		t.Errorf("step row %q, sim.Step says %v", stepLine, r.StepS)
	}
}

// TestSimStepJSONTrace: --json carries the result; --trace writes
// traceEvents of ph "X" with every micro-batch's forward and backward.
func TestSimStepJSONTrace(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "step.json")
	out, errOut, code := simCLI("sim", "step", "-t", "dgx-a100", "--nodes", "8", "--workload", stepSpec, "--json", "--trace", trace)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Result sim.StepResult `json:"result"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || !(rep.Result.StepS > 0) || rep.Result.Split.PP != 8 {
		t.Fatalf("JSON: %v, %+v", err, rep.Result.Split)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []sim.TraceEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range tr.TraceEvents {
		if e.Ph != "X" {
			t.Fatalf("event %+v: ph %q", e, e.Ph)
		}
		if e.Name[0] == 'F' || e.Name[0] == 'B' {
			n++
		}
	}
	if want := 2 * 8 * 64; n != want {
		t.Errorf("%d forward/backward events, want %d", n, want)
	}
}

// TestSimStepErrors: usage errors exit 2 and name the value.
func TestSimStepErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sim", "step", "-t", "dgx-a100"}, 2, "--workload"},
		{[]string{"sim", "step", "-t", "dgx-a100", "--workload", "G L8 h64 a3 seq8"}, 2, "heads = 3"},
		{[]string{"sim", "step", "-t", "dgx-a100", "--workload", "G L8 h64 a4 seq8 mbs1 gbs8 TP3"}, 1, "TP 3"},
		{[]string{"sim", "step", "-t", "nope", "--workload", "G L8 h64 a4 seq8"}, 2, "no preset"},
	} {
		_, errOut, code := simCLI(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}
