package sim

import (
	"fmt"
	"math"
)

// stepCalc is one Step in progress.
type stepCalc struct {
	topo *Topology
	w    Workload
	o    StepOptions
	sp   StepSplit
	p    split
	r    StepResult
}

func (c *stepCalc) run() (StepResult, error) {
	m, sp := &c.w.Model, &c.sp
	per := float64(m.Layers) / float64(sp.PP) // layers per stage (all its virtual chunks)
	moe := 0.0
	if m.Experts > 0 {
		moe = float64(m.moeLayers()) / float64(sp.PP)
	}
	c.p = split{b: float64(c.w.Parallel.MBS), s: float64(m.Seq), sq: float64(m.Seq) / float64(sp.CP),
		h: float64(m.Hidden), a: float64(m.Heads), kv: float64(m.kvHeads()), f: float64(m.ffn()),
		v: float64(m.vocab()), d: float64(m.dtype()), t: float64(sp.TP), seqPar: c.w.Parallel.SP,
		flash: m.FlashAttention, gated: m.GatedMLP, topk: float64(m.topK()), experts: float64(m.Experts),
		recompute: c.w.Parallel.Recompute, moe: moe, dense: per - moe}
	sp.ComputeEff, sp.MemEff = c.o.ComputeEff, c.o.MemEff
	lf, lb := c.p.stagePasses()
	lg := c.p.logits()
	fwd, bwd := lf.add(lg, 1), lb.add(lg, 2) // the last stage: the critical one
	tf, tb := c.kernels(fwd), c.kernels(bwd)
	comm, err := c.layerComm(per, moe)
	if err != nil {
		return StepResult{}, err
	}
	mb := float64(sp.MicroBatches)
	sp.FwdS, sp.BwdS = tf+comm.fwd, tb+comm.bwd
	r := &c.r
	r.ComputeS = mb * (tf + tb)
	r.Exposed.TP, r.Exposed.CP, r.Exposed.EP = mb*comm.tp, mb*comm.cp, mb*comm.ep
	r.Comm.TP, r.Comm.CP, r.Comm.EP = mb*comm.tpAll, mb*comm.cpAll, mb*comm.ep
	r.BubbleS = c.bubble() * (sp.FwdS + sp.BwdS)
	if err := c.pipeline(); err != nil {
		return StepResult{}, err
	}
	if err := c.dataParallel(tb + comm.bwd); err != nil {
		return StepResult{}, err
	}
	c.optimizer()
	r.ExposedS = r.Exposed.Sum()
	r.StepS = r.ComputeS + r.BubbleS + r.OptimizerS + r.SlowdownS + r.ExposedS
	c.flopsAndMemory(lf, lb)
	r.Split = *sp
	return *r, nil
}

// kernels is a pass's time: matmuls at the compute efficiency, memory-bound
// kernels at the memory efficiency (separate kernels: the times add), times
// the straggler's factor.
func (c *stepCalc) kernels(p passCost) float64 {
	g := c.topo.GPU
	return c.o.Straggler * (g.Roofline(p.flops, 0, c.o.ComputeEff, 1) + g.Roofline(0, p.bytes, 1, c.o.MemEff))
}

// bubble is the pipeline bubble in units of one micro-batch's forward and
// backward (Narayanan §2.2): PP−1 for GPipe and 1F1B, (PP−1)/VP
// interleaved.
func (c *stepCalc) bubble() float64 {
	return float64(c.sp.PP-1) / float64(c.sp.VP)
}

// microComm is one micro-batch's communication through the stage.
type microComm struct {
	fwd, bwd     float64 // exposed, in the forward and in the backward
	tp, cp, ep   float64 // exposed by kind, forward and backward together
	tpAll, cpAll float64 // all of it
}

// layerComm is the TP, CP and EP communication of one micro-batch through
// the stage's layers. TP: 2 all-reduces of the b·sq·h activations in the
// forward and 2 in the backward (Narayanan §2.3; with sequence
// parallelism an all-gather and a reduce-scatter each, the same ring
// traffic: Korthikanti §4.2.2), 2 more when full recomputation reruns the
// forward; none overlapped. CP: ring attention (Liu et al. 2023, arXiv
// 2310.01889): each layer passes its K and V blocks CP−1 times round the
// ring, each hop overlapped with one block of attention; the backward
// passes K, V and their gradients. EP: two all-to-alls of the b·sq·h·topk
// routed tokens (dispatch, combine) in the forward and two in the
// backward, times the imbalance factor, not overlapped.
func (c *stepCalc) layerComm(layers, moe float64) (microComm, error) {
	p, sp := &c.p, &c.sp
	act := p.b * p.sq * p.h * p.d
	var mc microComm
	ar, err := c.topo.groupTime("all_reduce", act, sp.TP, 1)
	if err != nil {
		return mc, err
	}
	nb := 2.0
	if p.recompute == "full" {
		nb = 4
	}
	mc.tp, mc.tpAll = layers*(2+nb)*ar, layers*(2+nb)*ar
	mc.fwd, mc.bwd = layers*2*ar, layers*nb*ar
	if sp.CP > 1 {
		kv := 2 * p.b * p.sq * p.h * p.kv / p.a * p.d / p.t
		hop, err := c.topo.groupTime("sendrecv", kv, sp.CP, sp.TP)
		if err != nil {
			return mc, err
		}
		att := c.topo.GPU.Roofline(p.layerForward(false).attFlops, 0, c.o.ComputeEff, 1) / float64(sp.CP)
		hops := float64(sp.CP - 1)
		f, b := hops*math.Max(0, hop-att), hops*math.Max(0, 2*hop-2*att)
		rf := 0.0
		if p.recompute == "full" {
			rf = f
		}
		mc.cp, mc.cpAll = layers*(f+b+rf), layers*hops*(hop+2*hop)
		mc.fwd += layers * f
		mc.bwd += layers * (b + rf)
	}
	if moe > 0 && sp.EP > 1 {
		a2a, err := c.topo.groupTime("alltoall", act*p.topk, sp.EP, sp.TP*sp.CP)
		if err != nil {
			return mc, err
		}
		a2a *= c.o.Imbalance
		mc.ep = moe * (2 + nb) * a2a
		mc.fwd += moe * 2 * a2a
		mc.bwd += moe * nb * a2a
	}
	return mc, nil
}

// pipeline is the exposed p2p between stages: each micro-batch sends its
// activations forward and receives its gradients back at every chunk
// boundary, b·sq·h/TP bytes per TP rank (Narayanan §4.1's scatter/gather),
// not overlapped with compute (1F1B's blocking send/receive pairs).
func (c *stepCalc) pipeline() error {
	sp, p := &c.sp, &c.p
	if sp.PP < 2 {
		return nil
	}
	bytes := p.b * p.sq * p.h * p.d / p.t
	t, err := c.topo.groupTime("sendrecv", bytes, sp.PP, sp.TP*sp.CP*sp.DP)
	if err != nil {
		return err
	}
	sp.P2PS = t
	n := 2 * float64(sp.MicroBatches*sp.VP)
	c.r.Exposed.PP, c.r.Comm.PP = n*t, n*t
	return nil
}

// paramsPerGPU is the parameters of the critical (last) stage on one GPU:
// its layers over TP (experts over EP too) and the output layer.
func (c *stepCalc) paramsPerGPU() float64 {
	p := &c.p
	h := p.h
	attn := 2*h*h + 2*h*h*p.kv/p.a
	mats := 2.0
	if p.gated {
		mats = 3
	}
	mlp := mats * h * p.f
	experts := p.experts * mlp / float64(c.sp.EP)
	dense := p.dense*(attn+mlp) + p.moe*(attn+experts+h*p.experts)
	return (dense + p.v*h) / p.t
}

// dataParallel is the gradient reduction over DP × CP (Megatron reduces
// over both): ZeRO 0 all-reduces the gradients, ZeRO 1 and 2
// reduce-scatter them and all-gather the updated parameters after the
// optimizer (Rajbhandari et al. 2020, arXiv 1910.02054 §5, §7: the same
// volume as one all-reduce), ZeRO 3 also all-gathers the parameters
// before each micro-batch's forward and backward (§5.3: 1.5× the
// volume). The gradient buckets overlap the last micro-batch's backward
// (window seconds); the parameter gathers are exposed.
func (c *stepCalc) dataParallel(window float64) error {
	sp, r := &c.sp, &c.r
	n := sp.DP * sp.CP
	if n < 2 {
		return nil
	}
	grads := c.paramsPerGPU() * c.p.d
	kind := "all_reduce"
	if c.w.Parallel.ZeRO > 0 {
		kind = "reduce_scatter"
	}
	bucket := math.Min(c.o.BucketBytes, grads)
	last := grads - bucket*(math.Ceil(grads/bucket)-1)
	full, err := c.topo.groupTime(kind, bucket, n, sp.TP)
	if err != nil {
		return err
	}
	lastT, err := c.topo.groupTime(kind, last, n, sp.TP)
	if err != nil {
		return err
	}
	exposed, hidden, total := bucketOverlap(grads, bucket, window, full, lastT)
	r.SlowdownS = (c.o.OverlapSlowdown - 1) * hidden
	sp.DPExposedS = exposed
	if c.w.Parallel.ZeRO > 0 {
		ag, err := c.topo.groupTime("all_gather", grads, n, sp.TP)
		if err != nil {
			return err
		}
		sp.ParamGatherS = ag
		exposed += ag
		total += ag
		if c.w.Parallel.ZeRO == 3 {
			gathers := 2 * float64(sp.MicroBatches) * ag
			exposed += gathers
			total += gathers
		}
	}
	r.Exposed.DP, r.Comm.DP = exposed, total
	return nil
}

// optimizer is the Adam update, memory-bound: per parameter it reads and
// writes the fp32 master weight, momentum and variance (24 bytes), reads
// the gradient and writes the low-precision weight (2 × element size);
// ZeRO ≥ 1 updates a 1/(DP·CP) shard.
func (c *stepCalc) optimizer() {
	n := c.paramsPerGPU()
	if c.w.Parallel.ZeRO > 0 {
		n /= float64(c.sp.DP * c.sp.CP)
	}
	c.r.OptimizerS = c.topo.GPU.Roofline(0, n*(24+2*c.p.d), 1, c.o.MemEff)
}

// flopsAndMemory fills MFU, HFU, tokens/s and the memory from the
// passes of the stage's layers (fwd, bwd: without the output layer).
func (c *stepCalc) flopsAndMemory(fwd, bwd passCost) {
	r, sp, p := &c.r, &c.sp, &c.p
	peak := c.topo.GPU.TFLOPS * 1e12
	gpus := float64(sp.GPUs)
	mb := float64(sp.MicroBatches)
	// Model FLOPs: forward and backward (3 × forward), no recomputation,
	// the full attention (as NVIDIA's and Korthikanti's MFU count it).
	full := *p
	full.flash, full.recompute = false, "none"
	mf, mbw := full.stagePasses()
	lg := full.logits()
	model := (mf.flops + mbw.flops) * float64(sp.PP) * sp.modelRanks() * mb
	model += 3 * lg.flops * sp.modelRanks() * mb
	hw := (fwd.flops+bwd.flops)*mb*gpus + 3*c.p.logits().flops*sp.modelRanks()*mb
	r.MFU = model / (r.StepS * gpus * peak)
	r.HFU = hw / (r.StepS * gpus * peak)
	r.TokensPerS = float64(c.w.Parallel.GBS*c.w.Model.Seq) / r.StepS
	c.memory()
}

// modelRanks is the number of GPUs one layer's work is split over, DP
// replicas included (TP × CP × DP).
func (s *StepSplit) modelRanks() float64 { return float64(s.TP * s.CP * s.DP) }

// memory is the critical stage's memory per GPU: 16-bit weights and
// gradients and 12 bytes of Adam state per parameter (fp32 master,
// momentum, variance: Rajbhandari et al. §3.1), sharded over DP × CP by
// ZeRO's stage (1: the optimizer state, 2: and the gradients, 3: and the
// weights), and the activations in flight: 1F1B keeps min(PP, m)
// micro-batches on the first stage (Korthikanti §4.2.3), interleaving
// 1 + (PP−1)/(PP·VP) times that, GPipe all m.
func (c *stepCalc) memory() {
	sp, p := &c.sp, &c.p
	n := c.paramsPerGPU()
	shard := float64(sp.DP * sp.CP)
	mem := StepMemory{Params: n * p.d, Grads: n * p.d, Optimizer: n * 12}
	z := c.w.Parallel.ZeRO
	if z >= 1 {
		mem.Optimizer /= shard
	}
	if z >= 2 {
		mem.Grads /= shard
	}
	if z >= 3 {
		mem.Params /= shard
	}
	inFlight := float64(min(sp.PP, sp.MicroBatches))
	switch sp.Schedule {
	case "gpipe":
		inFlight = float64(sp.MicroBatches)
	case "interleaved":
		inFlight *= 1 + float64(sp.PP-1)/float64(sp.PP*sp.VP)
	}
	mem.Activations = p.activationBytes() * (p.dense + p.moe) * inFlight
	mem.Total = mem.Params + mem.Grads + mem.Optimizer + mem.Activations
	mem.CapacityGB = c.topo.GPU.MemGB
	mem.Fits = mem.CapacityGB == 0 || mem.Total <= mem.CapacityGB*1e9
	if !mem.Fits {
		c.r.Note = fmt.Sprintf("does not fit: %.1f GB per GPU (params %.1f, grads %.1f, optimizer %.1f, activations %.1f) > %s's %g GB",
			mem.Total/1e9, mem.Params/1e9, mem.Grads/1e9, mem.Optimizer/1e9, mem.Activations/1e9, c.topo.GPU.Name, mem.CapacityGB)
	}
	c.r.Memory = mem
}
