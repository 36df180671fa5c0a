package sim

// Serving: one model instance's prefill and decode in closed form, and the
// move of the KV cache from a prefill instance to a decode instance when
// the two are disaggregated (DistServe, Zhong et al., OSDI'24; Splitwise,
// Patel et al., ISCA'24; Mooncake, Qin et al., FAST'25). Formulas and
// sources are in docs/sim.md, "Serving and KV-cache transfer".

import (
	"fmt"
	"math"
	"strings"
)

// Defaults of ServeOptions.
const (
	// ServeComputeEff is the share of the GPU's peak FLOP/s a prefill
	// reaches: the order of the model FLOPs utilisation Megatron-LM
	// measured for large GEMM-bound transformer steps (Narayanan et al.
	// 2021, arXiv 2104.04473, Table 1: 44–52 % of an A100's 312 TFLOP/s).
	// Borrowed from training, not measured on a prefill: set your own.
	ServeComputeEff = 0.5
	// ServeMemEff is the share of the datasheet HBM bandwidth a decode
	// step reaches ("model bandwidth utilisation", MBU, as the MosaicML /
	// Databricks post "LLM Inference Performance Engineering: Best
	// Practices", 2023, defines it: (weights + KV bytes) / TPOT over the
	// peak). An assumption, not a published constant: set your own.
	ServeMemEff = 0.7
	// DefaultKVSetupUs is a transfer engine's fixed cost per KV-cache
	// transfer, µs: posting the RDMA work requests and hearing the
	// completion (an assumption of the order of two network round trips
	// and the software around them; at the sizes of a KV cache, GBs, it
	// is under 0.01 % of the time).
	DefaultKVSetupUs = 20.0
	// maxServeOutput bounds ServeOptions.Output (decode steps are summed
	// one by one).
	maxServeOutput = 1 << 22
)

// Where a disaggregated KV cache moves (ServeOptions.KVPath).
const (
	KVPathNetwork = "network" // prefill and decode instances on two nodes: over the NICs
	KVPathNode    = "node"    // both in one node: over the intra-node fabric, GPU to GPU
)

// KVPaths are the values ServeOptions.KVPath accepts ("" is network).
var KVPaths = []string{KVPathNetwork, KVPathNode}

// wire is a link layer's per-packet overhead at wireMTU bytes of payload.
type wire struct {
	name   string
	header int    // bytes on the wire per packet besides the payload
	parts  string // what they are
}

// wireMTU is the RDMA path MTU the wire efficiencies assume (IBTA's
// largest common MTU, the one RoCE NICs and InfiniBand fabrics run).
const wireMTU = 4096

// wires are the link layers a KV transfer may cross. Header sizes: IBTA
// InfiniBand Architecture Specification vol. 1 (LRH §7.7, BTH §9.2, ICRC
// and VCRC §7.8); RoCEv2: the same spec's Annex A17 (BTH and ICRC in a UDP
// datagram, port 4791) over IPv4 (RFC 791) and UDP (RFC 768), and the
// Ethernet frame and its line overhead (IEEE 802.3 clause 3 and 4:
// preamble and SFD, MAC header, FCS, the inter-packet gap). RDMA WRITE's
// RETH (16 bytes, first packet of a message) is left out: < 0.03 % for
// messages of 64 KiB and more.
var wires = []wire{
	{name: "ib", header: 8 + 12 + 4 + 2, parts: "LRH 8 + BTH 12 + ICRC 4 + VCRC 2"},
	{name: "roce", header: 8 + 14 + 4 + 12 + 20 + 8 + 12 + 4,
		parts: "preamble/SFD 8 + Ethernet 14 + FCS 4 + gap 12 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4"},
}

// Wires lists the link layers WireEfficiency knows.
func Wires() []string {
	names := make([]string, len(wires))
	for i, w := range wires {
		names[i] = w.name
	}
	return names
}

// WireEfficiency is the payload share of a link's bit rate for RDMA
// packets of wireMTU bytes: wireMTU / (wireMTU + headers). "" is "ib".
func WireEfficiency(name string) (float64, error) {
	if name == "" {
		name = "ib"
	}
	for _, w := range wires {
		if w.name == name {
			return float64(wireMTU) / float64(wireMTU+w.header), nil
		}
	}
	return 0, fmt.Errorf("sim: wire %q: want one of %s", name, strings.Join(Wires(), ", "))
}

// KVTransfer is the time of one KV-cache transfer between two instances.
type KVTransfer struct {
	Path     string  `json:"path"`      // KVPathNetwork or KVPathNode
	Bytes    float64 `json:"bytes"`     // moved
	Links    int     `json:"links"`     // NICs (network) or GPU links (node) the bytes are striped over
	LinkGBps float64 `json:"link_GBps"` // payload rate of one link, GB/s = 1e9 B/s
	Wire     string  `json:"wire,omitempty"`
	WireEff  float64 `json:"wire_eff,omitempty"` // payload share of the NIC's rate
	FixedS   float64 `json:"fixed_s"`            // setup + one-way latency, s
	Seconds  float64 `json:"seconds"`            // FixedS + Bytes / (Links × LinkGBps)
	GBps     float64 `json:"GBps"`               // Bytes / Seconds / 1e9
}

// TransferKV times moving bytes of KV cache from an instance of gpus GPUs
// to another: over path (KVPathNetwork: the NICs the gpus GPUs of a node
// use, as many as layout gives them, each at NICGbps times the wire's
// efficiency, divided by the oversubscription; KVPathNode: one link per
// GPU at intra.GBps times the fabric's payload share), plus setupUs and the
// path's one-way latency.
func (t *Topology) TransferKV(bytes float64, path string, gpus int, wireName string, setupUs float64) (KVTransfer, error) {
	x := KVTransfer{Path: path, Bytes: bytes}
	switch {
	case !(bytes >= 0) || math.IsInf(bytes, 0):
		return x, fmt.Errorf("sim: KV transfer bytes %v: want a size ≥ 0", bytes)
	case gpus < 1 || gpus > t.GPUsPerNode:
		return x, fmt.Errorf("sim: KV transfer gpus %d: want 1 to %d (gpus_per_node of %q)", gpus, t.GPUsPerNode, t.Name)
	case !(setupUs >= 0) || math.IsInf(setupUs, 0):
		return x, fmt.Errorf("sim: KV transfer setup %v µs: want ≥ 0", setupUs)
	}
	latUs := 0.0
	switch path {
	case KVPathNetwork, "":
		x.Path = KVPathNetwork
		if t.NICsPerNode < 1 || !(t.NICGbps > 0) {
			return x, fmt.Errorf("sim: KV transfer over the network: topology %q has nics_per_node %d at %v Gbit/s", t.Name, t.NICsPerNode, t.NICGbps)
		}
		eff, err := WireEfficiency(wireName)
		if err != nil {
			return x, err
		}
		x.Wire, x.WireEff = orIB(wireName), eff
		x.Links = int(t.layout(gpus).nics)
		x.LinkGBps = t.NICGbps / 8 * eff / math.Max(1, t.Network.Oversubscription)
		latUs = t.Network.LatencyUs
	case KVPathNode:
		x.Links = gpus
		x.LinkGBps = t.Intra.GBps * fabricPayload(t.Intra.Kind)
		latUs = t.Intra.LatencyUs
	default:
		return x, fmt.Errorf("sim: KV path %q: want one of %s", path, strings.Join(KVPaths, ", "))
	}
	x.FixedS = (setupUs + latUs) * 1e-6
	x.Seconds = x.FixedS + bytes/(float64(x.Links)*x.LinkGBps*1e9)
	if x.Seconds > 0 {
		x.GBps = bytes / x.Seconds / 1e9
	}
	return x, nil
}

func orIB(w string) string {
	if w == "" {
		return "ib"
	}
	return w
}

// fabricPayload is the share of an intra-node link's rate that carries
// data: NCCL's topology rates for NVLink and PCIe (nvlinkPayload,
// pciePayload in nccl.go), all of it for shared memory.
func fabricPayload(kind string) float64 {
	switch kind {
	case "nvswitch", "nvlink":
		return nvlinkPayload
	case "pcie":
		return pciePayload
	}
	return 1
}

// ServeOptions is one serving configuration: B requests of P prompt tokens
// each generating D tokens, on instances of TP GPUs of one node.
type ServeOptions struct {
	Prompt        int     `json:"prompt"`        // P: prompt tokens per request
	Output        int     `json:"output"`        // D: tokens generated per request
	Batch         int     `json:"batch"`         // B: requests prefilled and decoded together
	TP            int     `json:"tp"`            // GPUs per instance (tensor parallel), in one node
	Disaggregated bool    `json:"disaggregated"` // prefill and decode on two instances
	KVPath        string  `json:"kv_path"`       // disaggregated: KVPathNetwork ("" too) or KVPathNode
	Overlap       bool    `json:"overlap"`       // disaggregated: each layer's KV sent as prefill finishes it
	Wire          string  `json:"wire"`          // the NICs' link layer: "ib" ("" too) or "roce"
	ComputeEff    float64 `json:"compute_eff"`   // share of peak FLOP/s; 0: ServeComputeEff
	MemEff        float64 `json:"mem_eff"`       // share of peak HBM bandwidth; 0: ServeMemEff
	SetupUs       float64 `json:"setup_us"`      // per KV transfer, µs (0: none; the CLI's default is DefaultKVSetupUs)
}

// ServeResult is a serving prediction. Times are seconds, sizes bytes,
// GB = 1e9 bytes.
type ServeResult struct {
	Options         ServeOptions `json:"options"` // as run: defaults filled in
	Model           string       `json:"model"`
	Params          float64      `json:"params"`
	KVBytesPerToken float64      `json:"kv_bytes_per_token"`
	KVBytes         float64      `json:"kv_bytes"` // the batch's prompt cache: B × P × per token

	PrefillFLOPs     float64     `json:"prefill_flops"`         // whole instance
	PrefillS         float64     `json:"prefill_s"`             // roofline + TP all-reduces
	PrefillCommS     float64     `json:"prefill_comm_s"`        // its TP all-reduces
	PrefillBound     string      `json:"prefill_bound"`         // "compute" or "memory"
	StepBytes        float64     `json:"step_bytes"`            // first decode step, HBM bytes per GPU
	StepFLOPs        float64     `json:"step_flops"`            // first decode step, per GPU
	FirstStepS       float64     `json:"first_step_s"`          // the decode step that yields the first token
	StepCommS        float64     `json:"step_comm_s"`           // TP all-reduces of one decode step
	StepBound        string      `json:"step_bound"`            // first decode step: "compute" or "memory"
	Transfer         *KVTransfer `json:"kv_transfer,omitempty"` // disaggregated only
	TransferExposedS float64     `json:"kv_transfer_exposed_s"` // what TTFT waits for the transfer
	KVShare          float64     `json:"kv_share_of_ttft"`      // TransferExposedS / TTFTS

	TTFTS            float64 `json:"ttft_s"`              // prefill + exposed transfer + first step
	TPOTS            float64 `json:"tpot_s"`              // mean of decode steps 2..D (0 when D = 1)
	E2ES             float64 `json:"e2e_s"`               // TTFT + (D − 1) × TPOT
	TokensPerS       float64 `json:"tokens_per_s"`        // B × D / E2E
	DecodeTokensPerS float64 `json:"decode_tokens_per_s"` // B / TPOT: a decode instance's steady rate

	WeightsPerGPU float64 `json:"weights_bytes_per_gpu"`
	KVPerGPU      float64 `json:"kv_bytes_per_gpu"` // B × (P + D) × per token / TP
	MemPerGPU     float64 `json:"mem_bytes_per_gpu"`
}

// Serve predicts prefill, decode and (disaggregated) the KV-cache transfer
// of opts on topo's GPUs: a closed form, docs/sim.md gives the formulas.
// Errors name the option or field and its value; a configuration whose
// weights and KV cache do not fit gpu.mem_GB is an error.
func Serve(topo *Topology, model Model, opts ServeOptions) (ServeResult, error) {
	if err := topo.Validate(); err != nil {
		return ServeResult{}, err
	}
	if err := model.Validate(); err != nil {
		return ServeResult{}, err
	}
	if err := checkServe(topo, &model, &opts); err != nil {
		return ServeResult{}, err
	}
	c := serveCalc{t: topo, m: &model, o: opts}
	r := ServeResult{Options: opts, Model: model.Name, Params: model.Params(), KVBytesPerToken: model.KVBytesPerToken()}
	r.KVBytes = float64(opts.Batch) * float64(opts.Prompt) * r.KVBytesPerToken
	if err := c.memory(&r); err != nil {
		return ServeResult{}, err
	}
	if err := c.prefill(&r); err != nil {
		return ServeResult{}, err
	}
	if err := c.decode(&r); err != nil {
		return ServeResult{}, err
	}
	if opts.Disaggregated {
		x, err := topo.TransferKV(r.KVBytes, opts.KVPath, opts.TP, opts.Wire, opts.SetupUs)
		if err != nil {
			return ServeResult{}, err
		}
		r.Transfer = &x
		r.TransferExposedS = exposedTransfer(r.PrefillS, x, model.Layers, opts.Overlap)
	}
	r.TTFTS = r.PrefillS + r.TransferExposedS + r.FirstStepS
	r.KVShare = r.TransferExposedS / r.TTFTS
	r.E2ES = r.TTFTS + float64(opts.Output-1)*r.TPOTS
	r.TokensPerS = float64(opts.Batch) * float64(opts.Output) / r.E2ES
	if r.TPOTS > 0 {
		r.DecodeTokensPerS = float64(opts.Batch) / r.TPOTS
	}
	return r, nil
}

// exposedTransfer is the part of a KV transfer TTFT waits for. Sent
// after prefill, all of it. Layer by layer (Overlap), layer l's cache
// leaves when layer l's prefill ends, prefill taking prefillS/L a layer
// and the bytes bytesS/L: a two-stage pipeline of L items, which ends at
// max(prefill + bytesS/L, prefillS/L + bytesS); the fixed costs come once
// at the end.
func exposedTransfer(prefillS float64, x KVTransfer, layers int, overlap bool) float64 {
	if !overlap {
		return x.Seconds
	}
	bytesS := x.Seconds - x.FixedS
	l := float64(layers)
	end := math.Max(prefillS+bytesS/l, prefillS/l+bytesS) + x.FixedS
	return end - prefillS
}

// checkServe checks opts against the topology and the model and fills in
// the defaults.
func checkServe(t *Topology, m *Model, o *ServeOptions) error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("sim: serve: %s = %v: %s", field, v, want)
	}
	if o.ComputeEff == 0 {
		o.ComputeEff = ServeComputeEff
	}
	if o.MemEff == 0 {
		o.MemEff = ServeMemEff
	}
	switch {
	case o.Prompt < 1:
		return bad("prompt", o.Prompt, "at least 1 token")
	case o.Output < 1 || o.Output > maxServeOutput:
		return bad("output", o.Output, fmt.Sprintf("1 to %d tokens", maxServeOutput))
	case o.Batch < 1:
		return bad("batch", o.Batch, "at least 1 request")
	case o.TP < 1 || o.TP > t.GPUsPerNode:
		return bad("tp", o.TP, fmt.Sprintf("1 to %d (an instance is in one node of %q)", t.GPUsPerNode, t.Name))
	case m.Heads%o.TP != 0:
		return bad("tp", o.TP, fmt.Sprintf("a divisor of the model's %d attention heads", m.Heads))
	case !(o.ComputeEff > 0 && o.ComputeEff <= 1):
		return bad("compute efficiency", o.ComputeEff, "in (0, 1]")
	case !(o.MemEff > 0 && o.MemEff <= 1):
		return bad("memory efficiency", o.MemEff, "in (0, 1]")
	case !o.Disaggregated && (o.Overlap || o.KVPath != ""):
		return bad("overlap/kv path", fmt.Sprintf("%v/%q", o.Overlap, o.KVPath), "only with disaggregated")
	case o.Disaggregated && o.KVPath == KVPathNode && 2*o.TP > t.GPUsPerNode:
		return bad("tp", o.TP, fmt.Sprintf("two instances in one node (kv path node) need 2 × tp ≤ %d GPUs", t.GPUsPerNode))
	case !(t.GPU.TFLOPS > 0) || !(t.GPU.HBMGBps > 0):
		return fmt.Errorf("sim: serve: topology %q: gpu.tflops = %v, gpu.hbm_GBps = %v: both needed (a GPU preset or the topology's gpu section)", t.Name, t.GPU.TFLOPS, t.GPU.HBMGBps)
	}
	return nil
}

// serveCalc holds what the phases share.
type serveCalc struct {
	t *Topology
	m *Model
	o ServeOptions
}

// memory fills the bytes per GPU and checks them against gpu.mem_GB
// (skipped when it is 0, unknown): weights / TP + the decode instance's
// cache of P + D tokens per request / TP. Activations and the runtime's
// workspace are left out.
func (c *serveCalc) memory(r *ServeResult) error {
	tp := float64(c.o.TP)
	r.WeightsPerGPU = r.Params * float64(c.m.dtype()) / tp
	r.KVPerGPU = float64(c.o.Batch) * float64(c.o.Prompt+c.o.Output) * r.KVBytesPerToken / tp
	r.MemPerGPU = r.WeightsPerGPU + r.KVPerGPU
	if mem := c.t.GPU.MemGB * 1e9; mem > 0 && r.MemPerGPU > mem {
		return fmt.Errorf("sim: serve: %.1f GB of weights and %.1f GB of KV cache (batch %d × %d tokens) per GPU at tp %d exceed gpu.mem_GB = %g of %q",
			r.WeightsPerGPU/1e9, r.KVPerGPU/1e9, c.o.Batch, c.o.Prompt+c.o.Output, c.o.TP, c.t.GPU.MemGB, c.t.Name)
	}
	return nil
}

// allReduces is the time of n TP all-reduces of bytes each on the
// instance's GPUs (the collective model of package sim; 0 at TP 1).
func (c *serveCalc) allReduces(n int, bytes float64) (float64, error) {
	if c.o.TP == 1 || n == 0 {
		return 0, nil
	}
	if bytes > math.MaxInt64/2 {
		return 0, fmt.Errorf("sim: serve: all-reduce of %.3g bytes: too large", bytes)
	}
	res, err := c.t.Collective(Collective{Kind: "all_reduce", Bytes: int64(bytes), Ranks: c.o.TP})
	if err != nil {
		return 0, fmt.Errorf("sim: serve: TP all-reduce: %w", err)
	}
	return float64(n) * res.TimeUs * 1e-6, nil
}

// prefill: FLOPs 2·params·P·B (Kaplan et al. 2020, arXiv 2001.08361
// §2.1: 2 FLOPs per parameter per token) plus attention, 4·P²·h per layer
// and sequence for QKᵀ and AV (Narayanan et al. 2021 §5.1's 4·s²·h term)
// halved by the causal mask; HBM bytes: the weights once and the cache
// written; on the roofline with the TP shares; then 2 all-reduces per
// layer of B·P·h elements (Megatron's TP: Shoeybi et al. 2019 §3).
func (c *serveCalc) prefill(r *ServeResult) error {
	p, b, h, l := float64(c.o.Prompt), float64(c.o.Batch), float64(c.m.Hidden), float64(c.m.Layers)
	dt, tp := float64(c.m.dtype()), float64(c.o.TP)
	r.PrefillFLOPs = 2*r.Params*p*b + l*b*4*p*p*h/2
	bytes := r.Params*dt + r.KVBytes
	g := c.t.GPU
	r.PrefillS = g.Roofline(r.PrefillFLOPs/tp, bytes/tp, c.o.ComputeEff, c.o.MemEff)
	r.PrefillBound = bound(g, r.PrefillFLOPs/tp, bytes/tp, c.o)
	comm, err := c.allReduces(2*c.m.Layers, b*p*h*dt)
	if err != nil {
		return err
	}
	r.PrefillCommS = comm
	r.PrefillS += comm
	return nil
}

// step is one decode step with ctx tokens cached per request: FLOPs
// 2·params·B plus attention 4·ctx·h per layer and request; HBM bytes:
// the weights plus B·ctx tokens of cache, both read once; per GPU.
func (c *serveCalc) step(ctx float64, params, kvPerToken float64) (flops, bytes, secs float64) {
	b, h, l, tp := float64(c.o.Batch), float64(c.m.Hidden), float64(c.m.Layers), float64(c.o.TP)
	flops = (2*params*b + l*b*4*ctx*h) / tp
	bytes = (params*float64(c.m.dtype()) + b*ctx*kvPerToken) / tp
	return flops, bytes, c.t.GPU.Roofline(flops, bytes, c.o.ComputeEff, c.o.MemEff)
}

// decode fills the first step (context P + 1: the prompt and the token
// being made) and TPOT, the mean of steps 2..D (context P + i), each
// with its 2 all-reduces per layer of B·h elements.
func (c *serveCalc) decode(r *ServeResult) error {
	comm, err := c.allReduces(2*c.m.Layers, float64(c.o.Batch)*float64(c.m.Hidden)*float64(c.m.dtype()))
	if err != nil {
		return err
	}
	r.StepCommS = comm
	p := float64(c.o.Prompt)
	var first float64
	r.StepFLOPs, r.StepBytes, first = c.step(p+1, r.Params, r.KVBytesPerToken)
	r.StepBound = bound(c.t.GPU, r.StepFLOPs, r.StepBytes, c.o)
	r.FirstStepS = first + comm
	sum := 0.0
	for i := 2; i <= c.o.Output; i++ {
		_, _, s := c.step(p+float64(i), r.Params, r.KVBytesPerToken)
		sum += s + comm
	}
	if c.o.Output > 1 {
		r.TPOTS = sum / float64(c.o.Output-1)
	}
	return nil
}

// bound says which roof limits a kernel.
func bound(g GPU, flops, bytes float64, o ServeOptions) string {
	if flops/(g.TFLOPS*1e12*o.ComputeEff) >= bytes/(g.HBMGBps*1e9*o.MemEff) {
		return "compute"
	}
	return "memory"
}

// kvTransferKind is the workload kind of a validation row that is a
// KV-cache transfer rather than a collective.
const kvTransferKind = "kv_transfer"

// validateKVTransfer predicts a KV-cache transfer row: the bytes from one
// node to another over all of a node's NICs (the transfer engine stripes
// one request over them), on RoCE when the system's name says so, else
// InfiniBand, with DefaultKVSetupUs; get reads the rate (GBps: bytes /
// time).
func validateKVTransfer(res RowResult, sys systemMap, topo *Topology, bytes int64, get func(Result) float64) RowResult {
	wireName := "ib"
	if strings.Contains(strings.ToLower(sys.name), "roce") {
		wireName = "roce"
	}
	x, err := topo.TransferKV(float64(bytes), KVPathNetwork, topo.GPUsPerNode, wireName, DefaultKVSetupUs)
	if err != nil {
		res.Status, res.Reason = StatusError, err.Error()
		return res
	}
	res.Model = fmt.Sprintf("%s: KV transfer %d B over %d × %.4g GB/s (%s, %.4f of the line rate)",
		describe(sys, topo), bytes, x.Links, x.LinkGBps, x.Wire, x.WireEff)
	r := Result{Algo: "kv-transfer", TimeUs: x.Seconds * 1e6, AlgBW: x.GBps, BusBW: x.GBps}
	res.Status, res.ModelAlgo = StatusOK, r.Algo
	res.Predicted = get(r)
	res.Error = (res.Predicted - res.Value) / res.Value
	return res
}
