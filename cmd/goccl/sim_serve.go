package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/goccl/goccl/sim"
)

// simServeModel is --model's default: the published Llama 3.1 70B shape.
const simServeModel = "Llama-3.1-70B L80 h8192 ffn28672 heads64 kv8 vocab128256 seq8192 BF16"

// simServeJSON is goccl sim serve --json.
type simServeJSON struct {
	Args     []string        `json:"args"`
	Topology *sim.Topology   `json:"topology"`
	Result   sim.ServeResult `json:"result"`
}

func runSimServe(name string, args []string, stdout, stderr io.Writer) int {
	fs := simFlags(name, stderr)
	preset := fs.StringP("preset", "t", "", "a preset (goccl sim presets lists them; default dgx-h100 unless --topology)")
	var topoFile string
	fs.StringVar(&topoFile, "topology", "", "a topology file (docs/sim.md has the schema)")
	fs.StringVar(&topoFile, "topo", "", "the same as --topology")
	nics := fs.Int("nics", 0, "NICs per node (0: the topology's)")
	nicGbps := fs.Float64("nic-gbps", 0, "Gbit/s per NIC (0: the topology's)")
	modelStr := fs.String("model", simServeModel, "the model: a name and its dimensions, as the validation CSV's workloads (L, h, ffn, heads, kv, vocab, bf16/fp16/fp8/fp32)")
	var o sim.ServeOptions
	fs.IntVar(&o.Prompt, "prompt", 8192, "prompt tokens per request (P)")
	fs.IntVar(&o.Output, "output", 256, "tokens generated per request (D)")
	fs.IntVar(&o.Batch, "batch", 8, "requests prefilled and decoded together (B)")
	fs.IntVar(&o.TP, "tp", 8, "GPUs per instance (tensor parallel), in one node")
	fs.BoolVar(&o.Disaggregated, "disaggregated", false, "prefill and decode on two instances; the KV cache moves between them")
	fs.StringVar(&o.KVPath, "kv-path", "", "with --disaggregated: network (two nodes, the default) or node (two instances in one node)")
	fs.BoolVar(&o.Overlap, "overlap", false, "with --disaggregated: send each layer's KV cache as prefill finishes it")
	fs.StringVar(&o.Wire, "wire", "ib", "the NICs' link layer for the KV transfer: ib or roce")
	fs.Float64Var(&o.ComputeEff, "compute-eff", sim.ServeComputeEff, "share of the GPU's peak FLOP/s reached (prefill)")
	fs.Float64Var(&o.MemEff, "mem-eff", sim.ServeMemEff, "share of the GPU's peak HBM bandwidth reached (decode)")
	fs.Float64Var(&o.SetupUs, "setup-us", sim.DefaultKVSetupUs, "fixed cost of one KV transfer, µs")
	asJSON := fs.Bool("json", false, "print the prediction as JSON")
	if status, exit := simParse(fs, args, stderr); exit {
		return status
	}
	usageErr := simUsageErr(stderr, name, false)
	if msg := simServeCheck(&o); msg != "" {
		return usageErr("%s", msg)
	}
	topo, err := simTopology(*preset, topoFile, 0)
	if err != nil {
		return usageErr("%v", err)
	}
	if err := simServeNICs(topo, *nics, *nicGbps); err != nil {
		return usageErr("%v", err)
	}
	w, err := sim.ParseWorkload(*modelStr)
	if err != nil {
		return usageErr("--model %q: %v", *modelStr, err)
	}
	res, err := sim.Serve(topo, w.Model, o)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(simServeJSON{Args: append(strings.Fields(name), args...), Topology: topo, Result: res})
	} else {
		err = writeServeTable(stdout, topo, &res)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// simServeNICs applies --nics and --nic-gbps to t.
func simServeNICs(t *sim.Topology, nics int, gbps float64) error {
	switch {
	case nics < 0:
		return fmt.Errorf("--nics %d: want 1 or more (0: the topology's %d)", nics, t.NICsPerNode)
	case !(gbps >= 0) || gbps > 1e6:
		return fmt.Errorf("--nic-gbps %g: want a rate in Gbit/s (0: the topology's %g)", gbps, t.NICGbps)
	}
	if nics > 0 {
		t.NICsPerNode = nics
	}
	if gbps > 0 {
		t.NICGbps = gbps
	}
	if nics > 0 || gbps > 0 {
		t.Name += fmt.Sprintf(" (%d × %g Gbit/s NICs)", t.NICsPerNode, t.NICGbps)
	}
	return t.Validate()
}

// simServeCheck names the first flag whose value cannot be used.
func simServeCheck(o *sim.ServeOptions) string {
	for _, c := range []struct {
		flag string
		v    int
	}{{"--prompt", o.Prompt}, {"--output", o.Output}, {"--batch", o.Batch}, {"--tp", o.TP}} {
		if c.v < 1 {
			return fmt.Sprintf("%s %d: want 1 or more", c.flag, c.v)
		}
	}
	for _, c := range []struct {
		flag string
		v    float64
	}{{"--compute-eff", o.ComputeEff}, {"--mem-eff", o.MemEff}} {
		if !(c.v > 0 && c.v <= 1) {
			return fmt.Sprintf("%s %g: want a share in (0, 1]", c.flag, c.v)
		}
	}
	switch {
	case !(o.SetupUs >= 0) || o.SetupUs > 1e9:
		return fmt.Sprintf("--setup-us %g: want 0 or more µs", o.SetupUs)
	case !slices.Contains(sim.Wires(), o.Wire):
		return fmt.Sprintf("--wire %q: want one of %s", o.Wire, strings.Join(sim.Wires(), ", "))
	case o.KVPath != "" && !slices.Contains(sim.KVPaths, o.KVPath):
		return fmt.Sprintf("--kv-path %q: want one of %s", o.KVPath, strings.Join(sim.KVPaths, ", "))
	case !o.Disaggregated && o.KVPath != "":
		return fmt.Sprintf("--kv-path %s: only with --disaggregated", o.KVPath)
	case !o.Disaggregated && o.Overlap:
		return "--overlap: only with --disaggregated"
	}
	return ""
}

// writeServeTable prints the prediction: what was predicted, then one
// quantity a line with its value and how it came about.
func writeServeTable(w io.Writer, topo *sim.Topology, r *sim.ServeResult) error {
	o := r.Options
	mode := "colocated (prefill and decode on one instance)"
	if o.Disaggregated {
		mode = "disaggregated, KV cache over the intra-node fabric (both instances in one node)"
		if r.Transfer.Path == sim.KVPathNetwork {
			mode = "disaggregated, KV cache over the NICs (instances on two nodes)"
		}
		if o.Overlap {
			mode += ", layer by layer during prefill"
		}
	}
	fmt.Fprintf(w, "# goccl sim serve: predicted by the closed-form model, not measured\n")
	fmt.Fprintf(w, "# topology: %s\n", simDescribe(topo))
	fmt.Fprintf(w, "# model: %s, %.4g B parameters, %s of KV cache per token\n", r.Model, r.Params/1e9, simServeBytes(r.KVBytesPerToken))
	fmt.Fprintf(w, "# prompt %d, output %d, batch %d, tp %d; %s\n", o.Prompt, o.Output, o.Batch, o.TP, mode)
	fmt.Fprintf(w, "# efficiencies: compute %g of %g TFLOP/s, memory %g of %g GB/s\n", o.ComputeEff, topo.GPU.TFLOPS, o.MemEff, topo.GPU.HBMGBps)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v, note string) { fmt.Fprintf(tw, "%s\t%s\t%s\n", k, v, note) }
	row("TTFT", simServeTime(r.TTFTS), "prefill + exposed KV transfer + first decode step")
	row("  prefill", simServeTime(r.PrefillS), fmt.Sprintf("%s-bound, %.3g PFLOP; TP all-reduces %s", r.PrefillBound, r.PrefillFLOPs/1e15, simServeTime(r.PrefillCommS)))
	row("  KV transfer", simServeTime(r.TransferExposedS), "exposed (waited for)")
	row("  first step", simServeTime(r.FirstStepS), fmt.Sprintf("%s-bound, %s per GPU from HBM", r.StepBound, simServeBytes(r.StepBytes)))
	row("TPOT", simServeTime(r.TPOTS), fmt.Sprintf("mean of decode steps 2..%d; TP all-reduces %s a step", o.Output, simServeTime(r.StepCommS)))
	row("tokens/s", fmt.Sprintf("%.4g", r.TokensPerS), fmt.Sprintf("batch × output / end to end (%s)", simServeTime(r.E2ES)))
	row("decode tokens/s", fmt.Sprintf("%.4g", r.DecodeTokensPerS), "batch / TPOT")
	row("KV bytes", simServeBytes(r.KVBytes), fmt.Sprintf("batch × prompt × %s", simServeBytes(r.KVBytesPerToken)))
	xfer, xnote := "-", "colocated: none"
	if x := r.Transfer; x != nil {
		xfer = simServeTime(x.Seconds)
		xnote = fmt.Sprintf("%.4g GB/s over %d × %.4g GB/s", x.GBps, x.Links, x.LinkGBps)
		if x.Wire != "" {
			xnote += fmt.Sprintf(" (%s, %.4f of the line rate)", x.Wire, x.WireEff)
		}
	}
	row("KV transfer", xfer, xnote)
	row("KV share of TTFT", fmt.Sprintf("%.1f %%", 100*r.KVShare), "exposed KV transfer / TTFT")
	row("memory per GPU", simServeBytes(r.MemPerGPU), fmt.Sprintf("weights %s + KV cache %s, of %g GB", simServeBytes(r.WeightsPerGPU), simServeBytes(r.KVPerGPU), topo.GPU.MemGB))
	return tw.Flush()
}

// simServeTime prints seconds as s, ms or µs.
func simServeTime(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.4g s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.4g ms", s*1e3)
	}
	return fmt.Sprintf("%.4g µs", s*1e6)
}

// simServeBytes prints bytes in GB (1e9), MB or, under 1 MB, KiB.
func simServeBytes(b float64) string {
	switch {
	case b >= 1e9:
		return fmt.Sprintf("%.4g GB", b/1e9)
	case b >= 1e6:
		return fmt.Sprintf("%.4g MB", b/1e6)
	}
	return fmt.Sprintf("%.4g KiB", b/1024)
}
