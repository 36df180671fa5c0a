package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/goccl/goccl/doctor/nccltests"
	"github.com/goccl/goccl/sim"
)

// TestSimCollectiveFlowLevel: --level flow prints an nccl-tests table of
// the flow level's predictions (here a non-blocking rail-optimized
// network, where they match the closed form's), with the busiest links
// and the critical flows after it.
func TestSimCollectiveFlowLevel(t *testing.T) {
	out, errOut, code := simCLI("sim", "collective", "-t", "hgx-h100", "--nodes", "4", "-b", "1G", "-e", "1G", "--level", "flow")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	rep, err := nccltests.Read(strings.NewReader(out), nccltests.Options{})
	if err != nil || len(rep.Tests) != 1 || len(rep.Tests[0].Rows) != 1 {
		t.Fatalf("read back: %v\n%s", err, out)
	}
	topo, _ := sim.Preset("hgx-h100")
	want, _, err := topo.WithNodes(4).FlowCollective(sim.Collective{Kind: "all_reduce", Bytes: 1 << 30}, sim.FlowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Tests[0].Rows[0].OutOfPlace.TimeUS; math.Abs(got-want.TimeUs) > 0.5 {
		t.Errorf("time %v µs, want the flow level's %.1f", got, want.TimeUs)
	}
	for _, s := range []string{"predicted by the flow level", "routing ecmp", "# busiest links", "# critical path:"} {
		if !strings.Contains(out, s) {
			t.Errorf("no %q in\n%s", s, out)
		}
	}
	for _, c := range []sim.Collective{{Kind: "broadcast"}, {Kind: "sendrecv"}, {Kind: "all_reduce", Algo: "tree"}} {
		args := []string{"sim", "collective", "-t", "hgx-h100", "--nodes", "4", "-b", "1G", "-e", "1G", "--level", "flow", "-c", c.Kind}
		if c.Algo != "" {
			args = append(args, "-a", c.Algo)
		}
		out, errOut, code := simCLI(args...)
		rep, err := nccltests.Read(strings.NewReader(out), nccltests.Options{})
		c.Bytes = 1 << 30
		want, _, werr := topo.WithNodes(4).FlowCollective(c, sim.FlowOptions{})
		if code != 0 || err != nil || werr != nil || len(rep.Tests) != 1 || len(rep.Tests[0].Rows) != 1 ||
			math.Abs(rep.Tests[0].Rows[0].OutOfPlace.TimeUS-want.TimeUs) > 0.5 {
			t.Errorf("%s %s: exit %d (%s), %v %v, want %.1f µs:\n%s", c.Kind, c.Algo, code, errOut, err, werr, want.TimeUs, out)
		}
	}
	js, _, code := simCLI("sim", "collective", "-t", "dgx-h100", "--nodes", "2", "-b", "1M", "-e", "1M", "--level", "flow", "--routing", "spread", "--json")
	var doc struct {
		Sim struct {
			Level string `json:"level"`
		} `json:"sim"`
	}
	if code != 0 || json.Unmarshal([]byte(js), &doc) != nil || doc.Sim.Level != "flow" {
		t.Errorf("--json: exit %d, level %q", code, doc.Sim.Level)
	}
}

// TestSimCollectiveFlowErrors: bad --level, --routing and what the flow
// level does not run are errors naming the value.
func TestSimCollectiveFlowErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--level", "packet"}, 2, `--level "packet"`},
		{[]string{"--level", "flow", "--routing", "random"}, 2, `--routing "random"`},
		{[]string{"--level", "flow", "-a", "rhd"}, 1, `algo "rhd"`},
		{[]string{"--level", "flow", "-c", "broadcast", "-a", "tree"}, 1, `algo "tree"`},
	} {
		args := append([]string{"sim", "collective", "-t", "dgx-h100", "-b", "1M", "-e", "1M"}, c.args...)
		_, errOut, code := simCLI(args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
}
