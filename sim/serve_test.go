package sim

import (
	"math"
	"strings"
	"testing"
)

const llama70B = "Llama-3.1-70B L80 h8192 ffn28672 heads64 kv8 vocab128256 seq8192 BF16"

func llama70BModel(t *testing.T) Model {
	t.Helper()
	w, err := ParseWorkload(llama70B)
	if err != nil {
		t.Fatal(err)
	}
	return w.Model
}

func nearRel(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

func mustPreset(t *testing.T, name string) *Topology {
	t.Helper()
	p, err := Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServeKVBytes: Llama-3.1-70B keeps 2 (K, V) × 80 layers × 8 KV heads
// × 128 dims × 2 bytes = 327,680 bytes (320 KiB) per token, and a batch's
// cache is B × P of them.
func TestServeKVBytes(t *testing.T) {
	m := llama70BModel(t)
	if got := m.KVBytesPerToken(); got != 320<<10 {
		t.Fatalf("KV bytes per token %v, want %d", got, 320<<10)
	}
	r, err := Serve(mustPreset(t, "dgx-h100"), m, ServeOptions{Prompt: 8192, Output: 16, Batch: 8, TP: 8})
	if err != nil {
		t.Fatal(err)
	}
	if r.KVBytes != 8*8192*327680 || r.KVBytesPerToken != 327680 {
		t.Errorf("KV bytes %v (per token %v), want %d", r.KVBytes, r.KVBytesPerToken, 8*8192*327680)
	}
}

// TestServeDecodeStep: the first decode step of B = 8, P = 8192 at TP 8
// reads per GPU the weights (69,501,714,432 parameters × 2 bytes, counted
// by hand: 80 × (2·8192² + 2·8192·1024 + 3·8192·28672) + 128256·8192) and
// 8 × 8193 tokens × 327,680 bytes, all over 8; memory-bound at 0.7 of
// 3,350 GB/s, plus 160 all-reduces of 8 × 8192 × 2 bytes as the
// collective model times them.
func TestServeDecodeStep(t *testing.T) {
	topo := mustPreset(t, "dgx-h100")
	m := llama70BModel(t)
	if m.Params() != 69501714432 {
		t.Fatalf("params %v, want 69501714432", m.Params())
	}
	r, err := Serve(topo, m, ServeOptions{Prompt: 8192, Output: 64, Batch: 8, TP: 8})
	if err != nil {
		t.Fatal(err)
	}
	wantBytes := (69501714432*2.0 + 8*8193*327680.0) / 8 // 20,060,110,848
	if r.StepBytes != wantBytes || r.StepBytes != 20060110848 {
		t.Errorf("step bytes per GPU %v, want %v", r.StepBytes, wantBytes)
	}
	ar, err := topo.Collective(Collective{Kind: "all_reduce", Bytes: 8 * 8192 * 2, Ranks: 8})
	if err != nil {
		t.Fatal(err)
	}
	if !nearRel(r.StepCommS, 160*ar.TimeUs*1e-6, 1e-12) {
		t.Errorf("step comm %v s, want 160 × %v µs", r.StepCommS, ar.TimeUs)
	}
	if mem := wantBytes / (3350e9 * ServeMemEff); r.StepBound != "memory" || !nearRel(r.FirstStepS-r.StepCommS, mem, 1e-12) {
		t.Errorf("first step %v s (%s-bound), want %v s of HBM + %v s comm", r.FirstStepS, r.StepBound, mem, r.StepCommS)
	}
	// Later steps read more cache: TPOT lies between the first step and
	// the last one's (context P + D), and E2E adds D − 1 of them.
	last := (69501714432*2.0+8*(8192+64)*327680.0)/8/(3350e9*ServeMemEff) + r.StepCommS
	if !(r.TPOTS > r.FirstStepS && r.TPOTS < last) || !nearRel(r.E2ES, r.TTFTS+63*r.TPOTS, 1e-12) {
		t.Errorf("TPOT %v (first %v, last %v), E2E %v", r.TPOTS, r.FirstStepS, last, r.E2ES)
	}
	if !nearRel(r.TokensPerS, 8*64/r.E2ES, 1e-12) || !nearRel(r.DecodeTokensPerS, 8/r.TPOTS, 1e-12) {
		t.Errorf("tokens/s %v, decode %v", r.TokensPerS, r.DecodeTokensPerS)
	}
}

// TestServePrefill: FLOPs 2·params·P·B + L·B·4·P²·h/2, compute-bound on
// the roofline at TP 1 (no all-reduce).
func TestServePrefill(t *testing.T) {
	m := Model{Name: "small", Layers: 4, Hidden: 1024, Heads: 16, Seq: 2048}
	r, err := Serve(mustPreset(t, "dgx-h100"), m, ServeOptions{Prompt: 2048, Output: 1, Batch: 2, TP: 1, ComputeEff: 0.4})
	if err != nil {
		t.Fatal(err)
	}
	n := m.Params()
	flops := 2*n*2048*2 + 4*2*4*2048.0*2048*1024/2
	if r.PrefillFLOPs != flops || r.PrefillCommS != 0 || r.PrefillBound != "compute" {
		t.Fatalf("prefill %v FLOPs (comm %v, %s-bound), want %v", r.PrefillFLOPs, r.PrefillCommS, r.PrefillBound, flops)
	}
	if want := flops / (989e12 * 0.4); !nearRel(r.PrefillS, want, 1e-12) {
		t.Errorf("prefill %v s, want %v", r.PrefillS, want)
	}
	if r.TPOTS != 0 || r.TTFTS != r.PrefillS+r.FirstStepS || r.Transfer != nil || r.KVShare != 0 {
		t.Errorf("one output token, colocated: TPOT %v, TTFT %v, transfer %v, share %v", r.TPOTS, r.TTFTS, r.Transfer, r.KVShare)
	}
}

// TestTransferKV4NICs: 40 GB between two hosts of 4 × 200 Gbit/s RoCE
// NICs: 4 × 25 GB/s × 4096/4178 (82 bytes of Ethernet, IPv4, UDP and IB
// transport headers per 4096-byte packet) = 98.04 GB/s, 0.408008 s, plus
// the setup and the network's latency.
func TestTransferKV4NICs(t *testing.T) {
	topo := mustPreset(t, "dgx-a100")
	topo.NICsPerNode, topo.NICGbps = 4, 200
	x, err := topo.TransferKV(40e9, KVPathNetwork, 8, "roce", 20)
	if err != nil {
		t.Fatal(err)
	}
	eff := 4096.0 / 4178
	want := 40e9/(4*25e9*eff) + (20+0.7)*1e-6
	if x.Links != 4 || x.WireEff != eff || !nearRel(x.Seconds, want, 1e-12) || !nearRel(x.Seconds, 0.4080285, 1e-6) {
		t.Errorf("%+v: want 4 links at %v, %v s", x, eff, want)
	}
	if !nearRel(x.GBps, 40/x.Seconds, 1e-12) {
		t.Errorf("GB/s %v, want %v", x.GBps, 40/x.Seconds)
	}
	// Half the node's GPUs use half its NICs; InfiniBand's headers are the
	// collective model's (ibPayload).
	half, _ := topo.TransferKV(40e9, "", 4, "", 0)
	if half.Links != 2 || half.Wire != "ib" || half.WireEff != ibPayload {
		t.Errorf("4 GPUs: %+v, want 2 NICs of ib at %v", half, ibPayload)
	}
	// Inside a node: one NVLink per GPU at NCCL's 0.8 of 450 GB/s.
	in, _ := topo.TransferKV(36e9, KVPathNode, 4, "", 0)
	if in.Links != 4 || !nearRel(in.Seconds, 36e9/(4*300e9*0.8), 1e-12) {
		t.Errorf("node path: %+v", in)
	}
}

// TestServeDisaggregated: disaggregated TTFT = colocated TTFT + the
// transfer; layer by layer, only the last layer's share (a fast link) or
// all but the first layer's prefill (a slow one) stays exposed.
func TestServeDisaggregated(t *testing.T) {
	topo := mustPreset(t, "dgx-h100")
	m := llama70BModel(t)
	o := ServeOptions{Prompt: 8192, Output: 8, Batch: 1, TP: 8}
	col, err := Serve(topo, m, o)
	if err != nil {
		t.Fatal(err)
	}
	o.Disaggregated, o.Wire, o.SetupUs = true, "roce", 20
	dis, err := Serve(topo, m, o)
	if err != nil {
		t.Fatal(err)
	}
	x := dis.Transfer
	if x == nil || x.Bytes != 8192*327680 || !nearRel(dis.TTFTS, col.TTFTS+x.Seconds, 1e-12) || dis.TransferExposedS != x.Seconds {
		t.Fatalf("TTFT %v, colocated %v, transfer %+v", dis.TTFTS, col.TTFTS, x)
	}
	if !nearRel(dis.KVShare, x.Seconds/dis.TTFTS, 1e-12) || dis.TPOTS != col.TPOTS {
		t.Errorf("share %v, TPOT %v vs %v", dis.KVShare, dis.TPOTS, col.TPOTS)
	}
	o.Overlap = true
	ov, _ := Serve(topo, m, o)
	if want := (x.Seconds-x.FixedS)/80 + x.FixedS; !nearRel(ov.TransferExposedS, want, 1e-9) {
		t.Errorf("overlapped, fast link: exposed %v, want %v", ov.TransferExposedS, want)
	}
	slow := *topo
	slow.NICsPerNode, slow.NICGbps = 1, 1
	sl, _ := Serve(&slow, m, o)
	xs := sl.Transfer
	if want := sl.PrefillS/80 + (xs.Seconds - xs.FixedS) + xs.FixedS - sl.PrefillS; !nearRel(sl.TransferExposedS, want, 1e-9) || xs.Seconds < sl.PrefillS {
		t.Errorf("overlapped, slow link: exposed %v, want %v (transfer %v, prefill %v)", sl.TransferExposedS, want, xs.Seconds, sl.PrefillS)
	}
}

// TestServeErrors: bad options name the field and the value.
func TestServeErrors(t *testing.T) {
	m := llama70BModel(t)
	ok := ServeOptions{Prompt: 8192, Output: 16, Batch: 1, TP: 8}
	with := func(f func(*ServeOptions)) ServeOptions { o := ok; f(&o); return o }
	netns := mustPreset(t, "goccl-netns")
	for _, c := range []struct {
		topo *Topology
		o    ServeOptions
		want string
	}{
		{nil, with(func(o *ServeOptions) { o.Prompt = 0 }), "prompt = 0"},
		{nil, with(func(o *ServeOptions) { o.Output = -1 }), "output = -1"},
		{nil, with(func(o *ServeOptions) { o.Batch = 0 }), "batch = 0"},
		{nil, with(func(o *ServeOptions) { o.TP = 16 }), "tp = 16"},
		{nil, with(func(o *ServeOptions) { o.TP = 3 }), "a divisor of the model's 64 attention heads"},
		{nil, with(func(o *ServeOptions) { o.MemEff = 1.5 }), "memory efficiency = 1.5"},
		{nil, with(func(o *ServeOptions) { o.Overlap = true }), "only with disaggregated"},
		{nil, with(func(o *ServeOptions) { o.Disaggregated, o.KVPath = true, KVPathNode }), "2 × tp ≤ 8"},
		{nil, with(func(o *ServeOptions) { o.Disaggregated, o.KVPath = true, "pcie" }), `KV path "pcie"`},
		{nil, with(func(o *ServeOptions) { o.Disaggregated, o.Wire = true, "eth" }), `wire "eth"`},
		{nil, with(func(o *ServeOptions) { o.Prompt, o.Batch = 131072, 16 }), "exceed gpu.mem_GB = 80"},
		{netns, with(func(o *ServeOptions) { o.TP = 2 }), "gpu.tflops = 0"},
	} {
		topo := c.topo
		if topo == nil {
			topo = mustPreset(t, "dgx-h100")
		}
		if _, err := Serve(topo, m, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.o, err, c.want)
		}
	}
}

// TestValidateKVTransferRow: the Mooncake row is predicted by TransferKV
// (RoCE, all 4 NICs, the default setup) and compared, not fitted.
func TestValidateKVTransferRow(t *testing.T) {
	rep := ValidatePublished(readCSV(t, csvHeader+
		"RoCE 4x200G per host,2,2,KV-cache transfer 40 GB (LLaMA3-70B ~128k tokens),Mooncake Transfer Engine,40000000000,GBps,87,s\n"))
	r := rep.Rows[0]
	topo := mustPreset(t, "dgx-a100")
	topo.NICsPerNode, topo.NICGbps, topo.GPUsPerNode = 4, 200, 1
	x, err := topo.TransferKV(40e9, KVPathNetwork, 1, "roce", DefaultKVSetupUs)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != StatusOK || r.Predicted != x.GBps || r.Error != (x.GBps-87)/87 || !strings.Contains(r.Model, "roce") {
		t.Errorf("row: %+v, want %v GB/s", r, x.GBps)
	}
	if !nearRel(r.Predicted, 98.03, 1e-3) {
		t.Errorf("predicted %v GB/s, want 98.03 (4 × 25 GB/s × 4096/4178)", r.Predicted)
	}
}
