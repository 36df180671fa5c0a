package sim

// The work of one transformer layer on one GPU for one micro-batch: the
// matmul FLOPs from the dimensions and the bytes of the memory-bound
// kernels between them, after Narayanan et al. 2021 (arXiv 2104.04473
// §5.1: the FLOPs) and Korthikanti et al. 2022 (arXiv 2205.05198 §4.1:
// the tensors each kernel reads and writes).

// split is the share of the model one GPU holds and the micro-batch it
// works on.
type split struct {
	b, s, sq   float64 // micro-batch (sequences), sequence, the GPU's queries (s/CP)
	h, a, kv   float64 // hidden, heads, KV heads
	f, v, d    float64 // FFN width, vocabulary, bytes per element
	t          float64 // TP
	seqPar     bool    // sequence parallelism: norms and dropouts split over TP
	flash      bool
	gated      bool
	topk       float64 // experts per token in an MoE layer
	experts    float64
	recompute  string
	moe, dense float64 // MoE and dense layers on one stage
}

// passCost is one pass (forward, backward or recompute) of one layer.
type passCost struct {
	flops    float64 // matmul FLOPs: compute-bound
	attFlops float64 // of which the attention core (scores and values)
	bytes    float64 // HBM bytes of the memory-bound kernels
	attBytes float64 // of which the s×s scores' softmax and dropout
}

func (c passCost) add(o passCost, k float64) passCost {
	return passCost{c.flops + k*o.flops, c.attFlops + k*o.attFlops, c.bytes + k*o.bytes, c.attBytes + k*o.attBytes}
}

// layerForward is the forward pass of one layer (moe: an MoE layer).
// FLOPs: QKV 2·T·h·(h+2h·kv/a), output projection 2·T·h², attention
// scores and values 2·2·b·sq·s·h (half with a causal fused kernel), MLP
// 2 or 3 matrices 2·T·h·f (top-k of them in an MoE layer, plus the
// router 2·T·h·E), all over TP; T = b·sq tokens. Bytes (Korthikanti §4.1's
// kernels): two layer norms (read, write T·h), two bias-dropout-adds (read
// 2·T·h, write T·h, a 1-byte mask), the MLP activation (GeLU: read and
// write T·f/TP; SwiGLU: read 2, write 1), and without a fused attention
// kernel the softmax (read, write the b·(a/TP)·sq·s scores) and its
// dropout (read, write, a 1-byte mask).
func (p *split) layerForward(moe bool) passCost {
	T := p.b * p.sq
	h := p.h
	proj := 2*T*h*(h+2*h*p.kv/p.a) + 2*T*h*h
	mats, actRW := 2.0, 2.0
	if p.gated {
		mats, actRW = 3, 3
	}
	mlp := mats * 2 * T * h * p.f
	act := actRW * T * p.f * p.d
	if moe {
		mlp = p.topk*mlp + 2*T*h*p.experts
		act *= p.topk
	}
	att := 4 * p.b * p.sq * p.s * h
	if p.flash {
		att /= 2
	}
	var c passCost
	c.attFlops = att / p.t
	c.flops = (proj+mlp)/p.t + c.attFlops
	r := 1.0 // norms and dropouts run replicated on each TP rank ...
	if p.seqPar {
		r = 1 / p.t // ... or split along the sequence
	}
	norms := 2 * 2 * T * h * p.d * r
	bda := 2 * (3*T*h*p.d + T*h) * r
	c.bytes = norms + bda + act/p.t
	if !p.flash {
		scores := p.b * (p.a / p.t) * p.sq * p.s
		c.attBytes = 4*scores*p.d + scores
		c.bytes += c.attBytes
	}
	return c
}

// stagePasses is one micro-batch through the stage's layers: forward,
// and backward with its recomputation. The backward does twice the
// forward's matmul FLOPs (the gradients of the input and of the weights:
// Narayanan §5.1) and moves twice its bytes (it reads the saved input and
// the incoming gradient and writes the outgoing one). Full recomputation
// runs the forward again before the backward; selective recomputes the
// attention core (Korthikanti §5).
func (p *split) stagePasses() (fwd, bwd passCost) {
	dense, moe := p.layerForward(false), p.layerForward(true)
	fwd = fwd.add(dense, p.dense).add(moe, p.moe)
	bwd = bwd.add(fwd, 2)
	switch p.recompute {
	case "full":
		bwd = bwd.add(fwd, 1)
	case "selective":
		n := p.dense + p.moe
		bwd = bwd.add(passCost{flops: dense.attFlops, attFlops: dense.attFlops, bytes: dense.attBytes, attBytes: dense.attBytes}, n)
	}
	return fwd, bwd
}

// logits is the last stage's output layer: the 2·T·h·V/TP matmul and the
// cross-entropy over the T·V/TP logits (written, then read and written by
// the softmax); never recomputed.
func (p *split) logits() passCost {
	T := p.b * p.sq
	return passCost{flops: 2 * T * p.h * p.v / p.t, bytes: 3 * T * p.v / p.t * p.d}
}

// activationBytes is the activation memory of one layer and one
// micro-batch on one GPU (Korthikanti §4.1-4.2, 16-bit elements, scaled
// to the element size): s·b·h·(10 + 24/t + 5·a·s/(h·t)) bytes with TP,
// s·b·h·(34 + 5·a·s/h)/t with sequence parallelism too; the a·s/h term
// (the s×s scores) is gone with selective recomputation or a fused
// attention kernel; full recomputation keeps the layer's input only,
// 2·s·b·h (/t with sequence parallelism).
func (p *split) activationBytes() float64 {
	sbh := p.sq * p.b * p.h
	scores := 5 * p.a * p.s / p.h
	if p.flash || p.recompute == "selective" {
		scores = 0
	}
	var per float64
	switch {
	case p.recompute == "full" && p.seqPar:
		per = 2 * sbh / p.t
	case p.recompute == "full":
		per = 2 * sbh
	case p.seqPar:
		per = sbh * (34 + scores) / p.t
	default:
		per = sbh * (10 + 24/p.t + scores/p.t)
	}
	return per * p.d / 2
}
