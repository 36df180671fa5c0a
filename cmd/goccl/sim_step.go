package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/goccl/goccl/sim"
)

var simStepUsage = `usage: goccl sim step [-t PRESET | --topology FILE.json] [--nodes N] --workload "SPEC"
                       [--compute-eff F] [--mem-eff F] [--bucket-mb MB] [--overlap-slowdown F]
                       [--imbalance F] [--straggler F] [--json] [--trace FILE.json]

step predicts one training iteration (one global batch) of the workload on
the topology's GPUs (nodes × GPUs per node = TP × PP × CP × DP) and prints
its breakdown: compute, pipeline bubble, exposed communication by kind (TP,
PP, DP, CP, EP), optimizer, MFU, tokens/s and the memory per GPU.
The workload is the validation CSV's column: a name, then L, h, ffn, a,
kv, vocab, seq, mbs, gbs, TP, PP, VP, CP, DP, EP, ZeRO, experts, topk,
moeevery, "full recompute" or "selective recompute", fp16/bf16/fp8,
swiglu, interleaved/gpipe, flash, sp. docs/sim.md ("Training step") has
the model and its sources. --trace writes a Chrome/Perfetto trace of one
pipeline's step (open it in ui.perfetto.dev).

`

func runSimStep(name string, args []string, stdout, stderr io.Writer) int {
	fs := newFlags(name, stderr, func(fs *cliFlags) {
		fmt.Fprintf(fs.Output(), "%sFlags of %s:\n", simStepUsage, name)
		fs.PrintDefaults()
	})
	preset := fs.StringP("preset", "t", "", "a preset (goccl sim presets lists them; default dgx-h100 unless --topology)")
	topoFile := fs.String("topology", "", "a topology JSON file (docs/sim.md has the schema)")
	fs.StringVar(topoFile, "topo", "", "the same as --topology")
	nodes := fs.Int("nodes", 0, "scale the topology to N nodes (0: as it is)")
	spec := fs.StringP("workload", "w", "", `the training configuration, e.g. "GPT-175B L96 h12288 a96 seq2048 mbs1 gbs64 TP8 PP8 full recompute fp16"`)
	var o sim.StepOptions
	fs.Float64Var(&o.ComputeEff, "compute-eff", 0, "share of the peak TFLOPS the matmuls reach (0: the GPU generation's measured MAMF)")
	fs.Float64Var(&o.MemEff, "mem-eff", 0, "share of the HBM bandwidth the memory-bound kernels reach (0: 0.9)")
	bucketMB := fs.Float64("bucket-mb", 0, "data-parallel gradient bucket, MiB (0: 25, PyTorch DDP's)")
	fs.Float64Var(&o.OverlapSlowdown, "overlap-slowdown", 0, "compute slowdown while DP communication overlaps it (0: 1.1)")
	fs.Float64Var(&o.Imbalance, "imbalance", 0, "MoE load imbalance: multiplies the all-to-alls (0: 1)")
	fs.Float64Var(&o.Straggler, "straggler", 0, "one rank's compute slower by this factor (0: 1)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	traceFile := fs.String("trace", "", "write a Chrome/Perfetto trace (JSON) of one pipeline's step to this file")
	if status, exit := simParse(fs, args, stderr); exit {
		return status
	}
	usageErr := simUsageErr(stderr, name, false)
	if strings.TrimSpace(*spec) == "" {
		return usageErr("--workload \"SPEC\" is required (e.g. \"GPT-175B L96 h12288 a96 seq2048 mbs1 gbs64 TP8 PP8 full recompute fp16\")")
	}
	topo, err := simTopology(*preset, *topoFile, *nodes)
	if err != nil {
		return usageErr("%v", err)
	}
	w, err := sim.ParseWorkload(*spec)
	if err != nil {
		return usageErr("--workload: %v", err)
	}
	o.BucketBytes = *bucketMB * (1 << 20)
	res, err := sim.Step(topo, w, o)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	if *traceFile != "" {
		if err := writeStepTrace(*traceFile, res); err != nil {
			fmt.Fprintf(stderr, "%s: --trace: %v\n", name, err)
			return 1
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(struct {
			Topology *sim.Topology  `json:"topology"`
			Workload sim.Workload   `json:"workload"`
			Result   sim.StepResult `json:"result"`
		}{topo, w, res})
	} else {
		err = writeStepTable(stdout, topo, w, res)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// writeStepTable prints the breakdown: seconds and share of the step.
func writeStepTable(out io.Writer, topo *sim.Topology, w sim.Workload, r sim.StepResult) error {
	sp := r.Split
	fmt.Fprintf(out, "# goccl sim step: predicted by the closed-form model, not measured\n")
	fmt.Fprintf(out, "# topology: %s\n", simDescribe(topo))
	fmt.Fprintf(out, "# %s: TP %d PP %d VP %d CP %d DP %d EP %d, %d micro-batches per replica, schedule %s\n",
		w.Model.Name, sp.TP, sp.PP, sp.VP, sp.CP, sp.DP, sp.EP, sp.MicroBatches, sp.Schedule)
	fmt.Fprintf(out, "# matmuls at %.1f %% of %g TFLOP/s, memory-bound kernels at %.0f %% of %g GB/s\n",
		100*sp.ComputeEff, topo.GPU.TFLOPS, 100*sp.MemEff, topo.GPU.HBMGBps)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "part\tseconds\tshare\t")
	row := func(name string, v float64) { fmt.Fprintf(tw, "%s\t%.4f\t%.1f %%\t\n", name, v, 100*v/r.StepS) }
	row("compute", r.ComputeS)
	row("pipeline bubble", r.BubbleS)
	for _, c := range []struct {
		kind          string
		exposed, full float64
	}{{"TP", r.Exposed.TP, r.Comm.TP}, {"PP", r.Exposed.PP, r.Comm.PP}, {"DP", r.Exposed.DP, r.Comm.DP}, {"CP", r.Exposed.CP, r.Comm.CP}, {"EP", r.Exposed.EP, r.Comm.EP}} {
		if c.full > 0 {
			row(c.kind+" comm exposed", c.exposed)
		}
	}
	row("overlap slowdown", r.SlowdownS)
	row("optimizer", r.OptimizerS)
	row("step", r.StepS)
	if err := tw.Flush(); err != nil {
		return err
	}
	m := r.Memory
	fmt.Fprintf(out, "communication %.4f s in all, %.4f s exposed\n", r.Comm.Sum(), r.ExposedS)
	fmt.Fprintf(out, "MFU %.1f %%, HFU %.1f %%, %.0f tokens/s\n", 100*r.MFU, 100*r.HFU, r.TokensPerS)
	fmt.Fprintf(out, "memory per GPU %.1f GB: params %.1f, grads %.1f, optimizer %.1f, activations %.1f (capacity %g GB)\n",
		m.Total/1e9, m.Params/1e9, m.Grads/1e9, m.Optimizer/1e9, m.Activations/1e9, m.CapacityGB)
	if r.Note != "" {
		fmt.Fprintf(out, "warning: %s\n", r.Note)
	}
	return nil
}

// writeStepTrace writes the trace as {"traceEvents": [...]}.
func writeStepTrace(path string, r sim.StepResult) error {
	ev, err := sim.StepTrace(r)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	if err := enc.Encode(map[string]any{"traceEvents": ev, "displayTimeUnit": "ms"}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
