package sim

import (
	"fmt"
	"math"
	"strings"
)

// StepOptions are the assumptions of a training-step prediction; the zero
// value takes the defaults below.
type StepOptions struct {
	// ComputeEff is the share of the GPU's peak TFLOPS its matmuls reach;
	// 0: the GPU generation's MatmulEff.
	ComputeEff float64
	// MemEff is the share of the HBM bandwidth the memory-bound kernels
	// reach; 0: DefaultMemEff.
	MemEff float64
	// BucketBytes is the data-parallel gradient bucket; 0: DefaultBucketBytes.
	BucketBytes float64
	// OverlapSlowdown multiplies the compute that runs while data-parallel
	// communication overlaps it (≥ 1); 0: DefaultOverlapSlowdown.
	OverlapSlowdown float64
	// Imbalance multiplies an MoE layer's all-to-all time: the busiest
	// expert's rank sets it (≥ 1); 0: 1.
	Imbalance float64
	// Straggler slows one rank's compute by this factor (≥ 1); every
	// synchronisation waits for it, so it gates the step. 0: 1.
	Straggler float64
}

// Defaults of StepOptions.
const (
	// DefaultMemEff: Calculon's A100 system (calculon-ai/calculon
	// examples/a100.json, "mem1") reaches 90 % of the HBM bandwidth for
	// transfers of 10-100 MB, the size of a layer's activations.
	DefaultMemEff = 0.9
	// DefaultBucketBytes: PyTorch DDP's bucket_cap_mb = 25 (MiB).
	DefaultBucketBytes = 25 << 20
	// DefaultOverlapSlowdown: NCCL's kernels occupy 8-16 of an A100's 108
	// SMs while they run (NCCL_MIN/MAX_NCHANNELS, one block per channel):
	// the compute under them runs about 10 % slower.
	DefaultOverlapSlowdown = 1.1
)

// MatmulEff is the measured share of the datasheet's dense BF16 peak that
// large matmuls reach, by GPU generation: the maximum achievable matmul
// FLOPS of stas00/ml-engineering (compute/accelerator/README.md, "Maximum
// Achievable Matmul FLOPS comparison table"): A100 SXM 267.9 of 312
// TFLOPS, H100 SXM 792.1 of 989, B200 SXM 1745 of 2250.
var MatmulEff = map[string]float64{"ampere": 267.9 / 312, "hopper": 792.1 / 989, "blackwell": 1745.0 / 2250}

// CommBreakdown is communication time in seconds by parallelism.
type CommBreakdown struct {
	TP float64 `json:"tp"` // tensor parallel all-reduces (or all-gather + reduce-scatter)
	PP float64 `json:"pp"` // pipeline activations and gradients between stages
	DP float64 `json:"dp"` // data parallel gradients (and ZeRO's parameter gathers)
	CP float64 `json:"cp"` // ring attention's KV exchange
	EP float64 `json:"ep"` // MoE dispatch and combine all-to-alls
}

// Sum is the total of the kinds.
func (c CommBreakdown) Sum() float64 { return c.TP + c.PP + c.DP + c.CP + c.EP }

// StepMemory is one GPU's memory in bytes (the busiest pipeline stage).
type StepMemory struct {
	Params      float64 `json:"params"`
	Grads       float64 `json:"grads"`
	Optimizer   float64 `json:"optimizer"`
	Activations float64 `json:"activations"`
	Total       float64 `json:"total"`
	CapacityGB  float64 `json:"capacity_GB"` // GPU.MemGB; 0: unknown
	Fits        bool    `json:"fits"`        // Total ≤ capacity (true when unknown)
}

// StepResult is one training iteration (one global batch), in seconds.
type StepResult struct {
	StepS      float64       `json:"step_s"`
	ComputeS   float64       `json:"compute_s"`   // the critical stage's kernels, all micro-batches
	BubbleS    float64       `json:"bubble_s"`    // the pipeline's fill and drain
	OptimizerS float64       `json:"optimizer_s"` // the Adam update
	SlowdownS  float64       `json:"overlap_slowdown_s"`
	Exposed    CommBreakdown `json:"exposed"`   // on the critical path
	Comm       CommBreakdown `json:"comm"`      // all communication time, hidden or not
	ExposedS   float64       `json:"exposed_s"` // Exposed.Sum()
	MFU        float64       `json:"mfu"`       // model FLOPs (no recomputation) / (step × GPUs × peak)
	HFU        float64       `json:"hfu"`       // FLOPs run, recomputation included
	TokensPerS float64       `json:"tokens_per_s"`
	Memory     StepMemory    `json:"memory"`
	Note       string        `json:"note,omitempty"` // why the memory does not fit, and other warnings
	Split      StepSplit     `json:"split"`
}

// StepSplit is the resolved split and the per-micro-batch times that the
// pipeline schedule (StepTrace) draws.
type StepSplit struct {
	GPUs, TP, PP, VP, CP, DP, EP, MicroBatches int
	Schedule                                   string
	FwdS, BwdS                                 float64 // one micro-batch through the critical stage, comm included
	P2PS                                       float64 // one activation (or gradient) between stages
	DPExposedS, ParamGatherS                   float64
	ComputeEff, MemEff                         float64
}

// Step predicts one training iteration of w on topo: the critical
// pipeline stage's micro-batches (matmuls on the roofline, memory-bound
// kernels at the HBM rate, exposed TP, CP and EP communication), the
// pipeline bubble, the p2p transfers between stages, the data-parallel
// reduction overlapped with the last backward, and the optimizer. Errors
// name the value that does not fit; a step that does not fit in memory is
// predicted anyway, with Memory.Fits false and a Note.
func Step(topo *Topology, w Workload, opts StepOptions) (StepResult, error) {
	if err := topo.Validate(); err != nil {
		return StepResult{}, err
	}
	if err := w.Model.Validate(); err != nil {
		return StepResult{}, err
	}
	sp, err := resolveSplit(topo, w)
	if err != nil {
		return StepResult{}, err
	}
	o, err := stepDefaults(topo, opts)
	if err != nil {
		return StepResult{}, err
	}
	c := stepCalc{topo: topo, w: w, o: o, sp: sp}
	return c.run()
}

func stepDefaults(topo *Topology, o StepOptions) (StepOptions, error) {
	if o.ComputeEff == 0 {
		e, ok := MatmulEff[generation(topo.GPU.Name)]
		if !ok {
			return o, fmt.Errorf("sim: step: gpu %q: no measured matmul efficiency for its generation (A…, H…, B…); give one (StepOptions.ComputeEff, --compute-eff)", topo.GPU.Name)
		}
		o.ComputeEff = e
	}
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.MemEff, DefaultMemEff)
	def(&o.BucketBytes, DefaultBucketBytes)
	def(&o.OverlapSlowdown, DefaultOverlapSlowdown)
	def(&o.Imbalance, 1)
	def(&o.Straggler, 1)
	for _, f := range []struct {
		name   string
		v, min float64
		max    float64
	}{
		{"compute efficiency", o.ComputeEff, 1e-6, 1}, {"memory efficiency", o.MemEff, 1e-6, 1},
		{"bucket bytes", o.BucketBytes, 1, math.Inf(1)}, {"overlap slowdown", o.OverlapSlowdown, 1, 100},
		{"imbalance", o.Imbalance, 1, 1e6}, {"straggler", o.Straggler, 1, 1e6},
	} {
		if !(f.v >= f.min && f.v <= f.max) {
			return o, fmt.Errorf("sim: step: %s %v: want %g to %g", f.name, f.v, f.min, f.max)
		}
	}
	if !(topo.GPU.TFLOPS > 0) || !(topo.GPU.HBMGBps > 0) {
		return o, fmt.Errorf("sim: step: topology %q: gpu.tflops %v and gpu.hbm_GBps %v: both needed (the roofline)", topo.Name, topo.GPU.TFLOPS, topo.GPU.HBMGBps)
	}
	return o, nil
}

// resolveSplit checks the split against the topology and the model and
// fills in DP, VP, EP and the schedule.
func resolveSplit(topo *Topology, w Workload) (StepSplit, error) {
	p, m := w.Parallel, w.Model
	s := StepSplit{GPUs: topo.GPUs(), TP: max(p.TP, 1), PP: max(p.PP, 1), VP: max(p.VP, 1), CP: max(p.CP, 1), EP: max(p.EP, 1), Schedule: strings.ToLower(p.Schedule)}
	bad := func(format string, a ...any) (StepSplit, error) {
		return s, fmt.Errorf("sim: step: "+format, a...)
	}
	mp := s.TP * s.PP * s.CP
	switch {
	case s.GPUs%mp != 0:
		return bad("TP %d × PP %d × CP %d = %d does not divide the %d GPUs of %s", s.TP, s.PP, s.CP, mp, s.GPUs, topo.Name)
	case p.DP == 0:
		s.DP = s.GPUs / mp
	case p.DP*mp != s.GPUs:
		return bad("TP %d × PP %d × CP %d × DP %d = %d, but %s has %d GPUs", s.TP, s.PP, s.CP, p.DP, p.DP*mp, topo.Name, s.GPUs)
	default:
		s.DP = p.DP
	}
	if s.Schedule == "" {
		s.Schedule = "1f1b"
		if s.VP > 1 {
			s.Schedule = "interleaved"
		}
	}
	switch {
	case s.Schedule != "1f1b" && s.Schedule != "interleaved" && s.Schedule != "gpipe":
		return bad("schedule %q: want 1f1b, interleaved or gpipe", p.Schedule)
	case s.VP > 1 && s.Schedule != "interleaved":
		return bad("VP %d with schedule %s: virtual stages need the interleaved schedule", s.VP, s.Schedule)
	case m.Layers%(s.PP*s.VP) != 0:
		return bad("layers %d: not a multiple of PP %d × VP %d", m.Layers, s.PP, s.VP)
	case m.Heads%s.TP != 0 || m.kvHeads()%s.TP != 0 && s.TP%m.kvHeads() != 0:
		return bad("TP %d: must divide heads %d, and divide or be a multiple of KV heads %d", s.TP, m.Heads, m.kvHeads())
	case m.Seq%s.CP != 0:
		return bad("CP %d: does not divide seq %d", s.CP, m.Seq)
	case p.MBS < 1:
		return bad("MBS %d: want 1 or more", p.MBS)
	case p.GBS < 1:
		return bad("GBS %d: the global batch is needed (gbs N)", p.GBS)
	case p.GBS%(s.DP*p.MBS) != 0:
		return bad("GBS %d: not a multiple of DP %d × MBS %d", p.GBS, s.DP, p.MBS)
	case p.ZeRO < 0 || p.ZeRO > 3:
		return bad("ZeRO %d: want 0 to 3", p.ZeRO)
	case m.Experts == 0 && s.EP > 1:
		return bad("EP %d: the model has no experts", s.EP)
	case m.Experts > 0 && (m.Experts%s.EP != 0 || (s.DP*s.CP)%s.EP != 0):
		return bad("EP %d: must divide experts %d and DP × CP %d", s.EP, m.Experts, s.DP*s.CP)
	}
	switch p.Recompute {
	case "", "none", "selective", "full":
	default:
		return bad("recompute %q: want none, selective or full", p.Recompute)
	}
	s.MicroBatches = p.GBS / (s.DP * p.MBS)
	return s, nil
}
