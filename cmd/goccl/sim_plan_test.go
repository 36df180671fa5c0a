package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/goccl/goccl/sim"
)

// TestSimPlan: the table's best row is the JSON's first plan; two node
// counts are both searched; bad flags are named.
func TestSimPlan(t *testing.T) {
	args := []string{"-t", "dgx-a100", "--nodes", "1,2", "--model", "GPT-13B L40 h5120 a40 seq2048 fp16", "--gbs", "64", "--top", "3"}
	var out, errb bytes.Buffer
	if code := runSimPlan("goccl sim plan", args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "# goccl sim plan: GPT-13B") || !strings.HasPrefix(lines[2], "1 ") {
		t.Fatalf("table:\n%s", out.String())
	}
	out.Reset()
	if code := runSimPlan("goccl sim plan", append(args, "--json"), &out, &errb); code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errb.String())
	}
	var rep sim.PlanReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	gpus := map[int]bool{}
	for _, p := range rep.Plans {
		gpus[p.GPUs] = true
	}
	if !gpus[8] || !gpus[16] || !strings.Contains(lines[2], rep.Plans[0].Topology) {
		t.Errorf("plans on %v GPUs; best %+v; table row %q", gpus, rep.Plans[0].Parallel, lines[2])
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gbs", "8"}, "--model is required"},
		{[]string{"--model", "X L2 h64 a4 seq8"}, "global batch 0"},
		{[]string{"--model", "X L2 h64 a4 seq8 wibble", "--gbs", "8"}, `word "wibble"`},
		{[]string{"--model", "X L2 h64 a4 seq8", "--gbs", "8", "--objective", "cheap"}, `objective "cheap"`},
		{[]string{"--model", "X L2 h64 a4 seq8", "--gbs", "8", "-t", "nosuch"}, `no preset "nosuch"`},
	} {
		errb.Reset()
		if code := runSimPlan("goccl sim plan", tc.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, %s; want %q", tc.args, code, errb.String(), tc.want)
		}
	}
}
