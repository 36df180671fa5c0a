package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/goccl/goccl/sim"
)

var simPlanUsage = `usage: goccl sim plan [-t PRESET]... [--topo FILE]... [--nodes N[,N...]] --model "SPEC" --gbs N
                       [--max-tp N] [--mbs LIST] [--recompute LIST] [--zero LIST] [--cp LIST]
                       [--max-vp N] [--flash] [--sp] [--objective time|gpu-seconds] [--top N] [--json]

plan searches the splits of a training job (TP × PP × CP × DP, EP for a
model with experts, micro-batch, recomputation, ZeRO stage, virtual stages)
on each topology (every -t and --topo, at every --nodes count), predicts
each with goccl sim step's model, drops those over the GPUs' memory and
prints the best --top ranked by step time or by GPU-seconds per step (step
time × GPUs: the cost). The model is goccl sim step's workload text
without the split: "Llama-3.1-70B L80 h8192 ffn28672 heads64 kv8
vocab128256 seq8192 BF16".

`

func runSimPlan(name string, args []string, stdout, stderr io.Writer) int {
	fs := newFlags(name, stderr, func(fs *cliFlags) {
		fmt.Fprintf(fs.Output(), "%sFlags of %s:\n", simPlanUsage, name)
		fs.PrintDefaults()
	})
	presets := fs.StringArrayP("preset", "t", nil, "a preset (repeatable; default dgx-h100 unless --topo)")
	files := fs.StringArray("topo", nil, "a topology file, JSON or XML (repeatable)")
	nodes := fs.IntSlice("nodes", nil, "node counts to try on each topology (default: as it is)")
	spec := fs.StringP("model", "m", "", "the model: goccl sim step's workload text without the split")
	var sp sim.PlanSpace
	fs.IntVar(&sp.GBS, "gbs", 0, "global batch, sequences (required)")
	fs.IntVar(&sp.MaxTP, "max-tp", 0, "the largest TP (0: a node's GPUs)")
	fs.IntSliceVar(&sp.MBS, "mbs", nil, "micro-batches to try (default 1,2,4)")
	fs.StringSliceVar(&sp.Recompute, "recompute", nil, "recomputation to try: none, selective, full (default all three)")
	fs.IntSliceVar(&sp.ZeRO, "zero", nil, "ZeRO stages to try (default 0,1)")
	fs.IntSliceVar(&sp.CP, "cp", nil, "context-parallel degrees to try (default 1,2)")
	fs.IntVar(&sp.MaxVP, "max-vp", 0, "the most virtual stages per pipeline rank (default 4)")
	fs.BoolVar(&sp.Flash, "flash", false, "fused attention")
	fs.BoolVar(&sp.SP, "sp", false, "sequence parallelism where TP > 1")
	fs.StringVar(&sp.Objective, "objective", "time", "rank by step time (time) or by step time × GPUs (gpu-seconds)")
	top := fs.Int("top", 10, "print the best N plans")
	asJSON := fs.Bool("json", false, "print the report as JSON (every fitting plan)")
	if status, exit := simParse(fs, args, stderr); exit {
		return status
	}
	usageErr := simUsageErr(stderr, name, true)
	if strings.TrimSpace(*spec) == "" {
		return usageErr("--model is required")
	}
	w, err := sim.ParseWorkload(*spec)
	if err != nil {
		return usageErr("--model: %v", err)
	}
	w.Model.FlashAttention = w.Model.FlashAttention || sp.Flash
	if *top < 1 {
		return usageErr("--top %d: want 1 or more", *top)
	}
	topos, err := simPlanTopologies(*presets, *files, *nodes)
	if err != nil {
		return usageErr("%v", err)
	}
	rep, err := sim.Plan(topos, w.Model, sp, sim.StepOptions{})
	if err != nil {
		return usageErr("%v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = writeSimPlan(stdout, w.Model, rep, *top)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	if len(rep.Plans) == 0 {
		fmt.Fprintf(stderr, "%s: none of the %d splits fits (%d over the GPUs' memory, %d that do not divide)\n", name, rep.Tried, rep.NotFit, rep.Invalid)
		return 1
	}
	return 0
}

// simPlanTopologies is every preset and file at every node count.
func simPlanTopologies(presets, files []string, nodes []int) ([]*sim.Topology, error) {
	if len(presets) == 0 && len(files) == 0 {
		presets = []string{"dgx-h100"}
	}
	if len(nodes) == 0 {
		nodes = []int{0}
	}
	var out []*sim.Topology
	for _, n := range nodes {
		if n < 0 {
			return nil, fmt.Errorf("--nodes %d: want 1 or more", n)
		}
		for _, p := range presets {
			t, err := simTopology(p, "", n)
			if err != nil {
				return nil, err
			}
			out = append(out, t)
		}
		for _, f := range files {
			t, err := simTopology("", f, n)
			if err != nil {
				return nil, err
			}
			out = append(out, t)
		}
	}
	return out, nil
}

// writeSimPlan prints the best plans as a table.
func writeSimPlan(w io.Writer, m sim.Model, rep *sim.PlanReport, top int) error {
	fmt.Fprintf(w, "# goccl sim plan: %s, %.4g B parameters; %d splits predicted, %d fit, %d over memory, %d do not divide; by %s\n",
		m.Name, m.Params()/1e9, rep.Tried, len(rep.Plans), rep.NotFit, rep.Invalid, rep.Objective)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "rank\ttopology\tGPUs\tTP\tPP\tVP\tCP\tDP\tEP\tMBS\trecompute\tZeRO\tstep (s)\tMFU\texposed comm (s)\tbubble (s)\tmemory (GB)\tGPU-s")
	for i, e := range rep.Plans[:min(top, len(rep.Plans))] {
		p, r := e.Parallel, e.Result
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%.4g\t%.1f%%\t%.3g\t%.3g\t%.1f\t%.4g\n", i+1, e.Topology, e.GPUs,
			p.TP, p.PP, max(p.VP, 1), p.CP, p.DP, max(p.EP, 1), p.MBS, p.Recompute, p.ZeRO, r.StepS, 100*r.MFU, r.ExposedS, r.BubbleS, r.Memory.Total/1e9, e.Cost)
	}
	return tw.Flush()
}
