package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ep"
	"github.com/goccl/goccl/examples/internal/mnist"
	"github.com/goccl/goccl/examples/internal/nn"
	"github.com/goccl/goccl/fsdp"
)

// shape is the model's sizes: in -> hidden (ReLU) -> hidden + FFN(hidden)
// -> classes, the FFN hidden -> ffn (ReLU) -> hidden either one dense
// block (experts 0) or a mixture of experts blocks with a top-k gate.
type shape struct {
	in, hidden, ffn, classes int
	experts, k               int
}

// ffnLen is the length of one FFN block's flat parameters: Wa (ffn x
// hidden) | ba (ffn) | Wb (hidden x ffn) | bb (hidden).
func (s shape) ffnLen() int { return 2*s.ffn*s.hidden + s.ffn + s.hidden }

// ffnViews cuts an FFN block's flat parameters (or gradient) p.
func (s shape) ffnViews(p []float32) (wa, ba, wb, bb []float32) {
	h, f := s.hidden, s.ffn
	wa, p = p[:f*h], p[f*h:]
	ba, p = p[:f], p[f:]
	wb, p = p[:h*f], p[h*f:]
	return wa, ba, wb, p[:h]
}

// Model is one rank's part of the MoE network. The layers outside the
// experts (input layer, gate, output layer; the FFN too when dense) are
// replicated on every rank and trained data-parallel: their gradients are
// summed with one AllReduce per step. Experts are sharded: rank r holds
// experts r*E/P to (r+1)*E/P-1, and each expert's gradient is whole on its
// rank, because every token routed to it, from any rank, went through it.
type Model struct {
	c          *goccl.Comm
	rank, size int
	s          shape
	local      int     // experts on this rank
	capFactor  float64 // capacity = ceil(capFactor * n*k / E) tokens per rank per expert (0: no limit)
	auxCoef    float32 // weight of the load-balancing loss

	// rep holds the replicated parameters, repGrad their gradient followed
	// by the per-step counters reduced with it (see stepTail).
	rep, repGrad           []float32
	w1, b1, wg, bg, w2, b2 []float32 // views of rep
	dense                  []float32 // the dense FFN (experts 0), a view of rep
	exp, expGrad           [][]float32
	opt                    *fsdp.Adam

	plan ep.Plan
	st   stats
	// activations and gradients of the step, reused
	h, logits, m, dm, dh, dx                           []float32
	probs, gate, dg, wt, dwt, frac                     []float32
	choices                                            []int
	xe, a, ye, yc, dyc, dye, da, dxe, dxc, fa, fy, dfx []float32
}

// stats are a step's figures.
type stats struct {
	a2a, allreduce time.Duration // blocked in the token exchanges, in the replicated gradients' AllReduce
	load           []float32     // tokens each expert processed this step, over all ranks
	dropped        int           // choices the capacity dropped, over all ranks
	choices        int           // choices made, over all ranks
}

// Counters reduced with the replicated gradient, after it: the tokens per
// expert (E), the dropped choices, the choices made.
func (m *Model) stepTail() int { return m.s.experts + 2 }

func newModel(c *goccl.Comm, s shape, seed uint64, capFactor float64, auxCoef float32, lr float64) (*Model, error) {
	m := &Model{c: c, rank: c.Rank(), size: c.Size(), s: s, capFactor: capFactor, auxCoef: auxCoef, opt: fsdp.NewAdam(lr)}
	if s.experts > 0 && (s.experts%m.size != 0 || s.k < 1 || s.k > s.experts) {
		return nil, fmt.Errorf("%d experts, top %d, on %d ranks: want experts a multiple of the ranks and 1 <= k <= experts", s.experts, s.k, m.size)
	}
	m.local = s.experts / m.size
	// The replicated vector: W1 | b1 | Wg | bg | W2 | b2 | dense FFN.
	sizes := []int{s.hidden * s.in, s.hidden, s.experts * s.hidden, s.experts, s.classes * s.hidden, s.classes}
	if s.experts == 0 {
		sizes = append(sizes, s.ffnLen())
	}
	total := 0
	for _, n := range sizes {
		total += n
	}
	m.rep = make([]float32, total)
	m.repGrad = make([]float32, total+m.stepTail())
	var views [][]float32
	off := 0
	for _, n := range sizes {
		views = append(views, m.rep[off:off+n:off+n])
		off += n
	}
	m.w1, m.b1, m.wg, m.bg, m.w2, m.b2 = views[0], views[1], views[2], views[3], views[4], views[5]
	// Every tensor has its own generator, so a model is the same whatever
	// the world size: an expert's initial weights do not depend on where it
	// lives.
	gen := func(tag uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, tag)) }
	nn.InitLinear(gen(1), m.w1, m.b1)
	if s.experts > 0 {
		nn.InitLinear(gen(2), m.wg, m.bg)
		for i := range m.wg {
			m.wg[i] *= 0.1 // a gate close to uniform at the start
		}
	}
	nn.InitLinear(gen(3), m.w2, m.b2)
	initFFN := func(p []float32, tag uint64) {
		wa, ba, wb, bb := s.ffnViews(p)
		nn.InitLinear(gen(tag), wa, ba)
		nn.InitLinear(gen(tag+1), wb, bb)
		for i := range wb {
			wb[i] *= 0.5 // the block adds to a residual
		}
	}
	if s.experts == 0 {
		m.dense = views[6]
		initFFN(m.dense, 100)
	}
	for e := range m.local {
		p := make([]float32, s.ffnLen())
		initFFN(p, 100+2*uint64(m.rank*m.local+e))
		m.exp = append(m.exp, p)
		m.expGrad = append(m.expGrad, make([]float32, s.ffnLen()))
	}
	return m, nil
}

// ffnForward runs the FFN block p on the n x hidden rows x: a (n x ffn)
// gets the ReLU's output, y (n x hidden) the block's.
func (m *Model) ffnForward(p, x []float32, n int, a, y []float32) {
	wa, ba, wb, bb := m.s.ffnViews(p)
	nn.Linear(x, n, wa, ba, a)
	nn.ReLU(a)
	nn.Linear(a, n, wb, bb, y)
}

// ffnBackward is ffnForward's backward for dy: it writes the block's
// gradient into dp and the input's into dx; da is scratch (n x ffn).
func (m *Model) ffnBackward(p, x []float32, n int, a, dy, da, dp, dx []float32) {
	wa, _, wb, _ := m.s.ffnViews(p)
	dwa, dba, dwb, dbb := m.s.ffnViews(dp)
	nn.LinearBackward(a, n, wb, dy, dwb, dbb, da)
	nn.ReLUBackward(a, da)
	nn.LinearBackward(x, n, wa, da, dwa, dba, dx)
}

// a2a times an exchange of the plan.
func (m *Model) a2a(err error, t0 time.Time) error {
	m.st.a2a += time.Since(t0)
	return err
}

// forward runs the n x in batch x through the model up to the logits
// (m.logits). capacity is the most tokens this rank sends one expert (0:
// no limit). It keeps what backward needs.
func (m *Model) forward(ctx context.Context, x []float32, n, capacity int) error {
	s := m.s
	h := s.hidden
	m.h = nn.Grow(m.h, n*h)
	nn.Linear(x, n, m.w1, m.b1, m.h)
	nn.ReLU(m.h)
	m.m = nn.Grow(m.m, n*h)
	copy(m.m, m.h) // the residual
	if s.experts == 0 {
		m.fa, m.fy = nn.Grow(m.fa, n*s.ffn), nn.Grow(m.fy, n*h)
		m.ffnForward(m.dense, m.h, n, m.fa, m.fy)
		for i, v := range m.fy {
			m.m[i] += v
		}
	} else if err := m.moeForward(ctx, n, capacity); err != nil {
		return err
	}
	m.logits = nn.Grow(m.logits, n*s.classes)
	nn.Linear(m.m, n, m.w2, m.b2, m.logits)
	return nil
}

// moeForward adds the experts' weighted outputs for m.h to m.m: the gate
// (softmax over the experts, then the top k renormalised over themselves),
// dispatch, the local experts, combine.
func (m *Model) moeForward(ctx context.Context, n, capacity int) error {
	s := m.s
	h, k, E := s.hidden, s.k, s.experts
	m.gate, m.probs = nn.Grow(m.gate, n*E), nn.Grow(m.probs, n*E)
	nn.Linear(m.h, n, m.wg, m.bg, m.gate)
	m.choices = m.choices[:0]
	m.wt = nn.Grow(m.wt, n*k)
	for t := range n {
		g, p := m.gate[t*E:(t+1)*E], m.probs[t*E:(t+1)*E]
		softmax(g, p)
		// Top k by probability, the first expert winning ties.
		first := len(m.choices)
		for range k {
			best := -1
			for e := range E {
				if (best < 0 || p[e] > p[best]) && !chosen(m.choices[first:], e) {
					best = e
				}
			}
			m.choices = append(m.choices, best)
		}
		// The weights: softmax over the chosen logits.
		w := m.wt[t*k : (t+1)*k]
		for j, e := range m.choices[first:] {
			w[j] = g[e]
		}
		softmax(w, w)
	}
	t0 := time.Now()
	if err := m.a2a(m.plan.Reset(ctx, m.c, m.choices, k, E, capacity, h), t0); err != nil {
		return err
	}
	r := m.plan.Received()
	m.xe, m.ye, m.a = nn.Grow(m.xe, r*h), nn.Grow(m.ye, r*h), nn.Grow(m.a, r*s.ffn)
	t0 = time.Now()
	if err := m.a2a(m.plan.Dispatch(ctx, m.h, m.xe), t0); err != nil {
		return err
	}
	for e := range m.local {
		lo, hi := m.plan.Expert(e)
		m.ffnForward(m.exp[e], m.xe[lo*h:hi*h], hi-lo, m.a[lo*s.ffn:hi*s.ffn], m.ye[lo*h:hi*h])
	}
	m.yc = nn.Grow(m.yc, n*k*h)
	t0 = time.Now()
	if err := m.a2a(m.plan.CombineChoices(ctx, m.ye, m.yc), t0); err != nil {
		return err
	}
	for i, w := range m.wt {
		o, y := m.m[(i/k)*h:(i/k+1)*h], m.yc[i*h:(i+1)*h]
		for j := range o {
			o[j] += w * y[j]
		}
	}
	return nil
}

func chosen(cs []int, e int) bool {
	for _, c := range cs {
		if c == e {
			return true
		}
	}
	return false
}

// softmax writes the softmax of z into p (which may be z).
func softmax(z, p []float32) {
	zmax := z[0]
	for _, v := range z {
		zmax = max(zmax, v)
	}
	var sum float64
	for i, v := range z {
		e := math.Exp(float64(v - zmax))
		p[i] = float32(e)
		sum += e
	}
	for i := range p {
		p[i] = float32(float64(p[i]) / sum)
	}
}

// backward computes the gradient of the loss whose gradient for the logits
// is in m.logits, for the batch x of the last forward: the replicated part
// into repGrad, the local experts' into expGrad.
func (m *Model) backward(ctx context.Context, x []float32, n int) error {
	s := m.s
	h, E := s.hidden, s.experts
	rest := m.repGrad
	cut := func(l int) []float32 { v := rest[:l]; rest = rest[l:]; return v }
	dw1, db1, dwg, dbg, dw2, db2 := cut(len(m.w1)), cut(len(m.b1)), cut(len(m.wg)), cut(len(m.bg)), cut(len(m.w2)), cut(len(m.b2))
	m.dm, m.dh, m.dfx = nn.Grow(m.dm, n*h), nn.Grow(m.dh, n*h), nn.Grow(m.dfx, n*h)
	nn.LinearBackward(m.m, n, m.w2, m.logits, dw2, db2, m.dm)
	copy(m.dh, m.dm) // the residual
	// m.dfx: the gradient of h through the FFN block, or through the gate.
	if E == 0 {
		m.da = nn.Grow(m.da, n*s.ffn)
		m.ffnBackward(m.dense, m.h, n, m.fa, m.dm, m.da, cut(s.ffnLen()), m.dfx)
	} else {
		if err := m.moeBackward(ctx, n); err != nil {
			return err
		}
		nn.LinearBackward(m.h, n, m.wg, m.dg, dwg, dbg, m.dfx)
	}
	for i, v := range m.dfx {
		m.dh[i] += v
	}
	nn.ReLUBackward(m.h, m.dh)
	nn.LinearBackward(x, n, m.w1, m.dh, dw1, db1, nil)
	return nil
}

// moeBackward sends the gradient of the experts' outputs to the experts,
// runs their backward, brings the gradient of their inputs back into m.dh,
// and computes the gate's logits' gradient (the combine weights' and the
// load-balancing loss's) into m.dg.
func (m *Model) moeBackward(ctx context.Context, n int) error {
	s := m.s
	h, k, E := s.hidden, s.k, s.experts
	m.dwt, m.dyc = nn.Grow(m.dwt, n*k), nn.Grow(m.dyc, n*k*h)
	for i, w := range m.wt {
		dm, y, dy := m.dm[(i/k)*h:(i/k+1)*h], m.yc[i*h:(i+1)*h], m.dyc[i*h:(i+1)*h]
		var dot float32
		for j := range dm {
			dot += dm[j] * y[j]
			dy[j] = w * dm[j]
		}
		m.dwt[i] = dot
	}
	r := m.plan.Received()
	m.dye, m.dxe, m.da = nn.Grow(m.dye, r*h), nn.Grow(m.dxe, r*h), nn.Grow(m.da, r*s.ffn)
	t0 := time.Now()
	if err := m.a2a(m.plan.DispatchChoices(ctx, m.dyc, m.dye), t0); err != nil {
		return err
	}
	for e := range m.local {
		lo, hi := m.plan.Expert(e)
		m.ffnBackward(m.exp[e], m.xe[lo*h:hi*h], hi-lo, m.a[lo*s.ffn:hi*s.ffn], m.dye[lo*h:hi*h], m.da[lo*s.ffn:hi*s.ffn], m.expGrad[e], m.dxe[lo*h:hi*h])
	}
	m.dxc = nn.Grow(m.dxc, n*k*h)
	t0 = time.Now()
	if err := m.a2a(m.plan.CombineChoices(ctx, m.dxe, m.dxc), t0); err != nil {
		return err
	}
	for i := range n * k {
		dh, dx := m.dh[(i/k)*h:(i/k+1)*h], m.dxc[i*h:(i+1)*h]
		for j := range dh {
			dh[j] += dx[j]
		}
	}
	// The gate. Combine weights w = softmax of the chosen logits:
	// dg[e_j] = w_j (dw_j - sum_i w_i dw_i). The load-balancing loss
	// (Switch Transformer, Fedus et al. 2021, eq. 4) of this rank, averaged
	// over the ranks: aux = coef/P * E * sum_e f_e P_e, f_e the share of
	// the rank's choices that went to e (not differentiated), P_e the mean
	// gate probability of e: d aux / d p[t][e] = coef/P * E * f_e / n,
	// through the softmax: dg += p (dp - <p, dp>).
	m.dg = nn.Grow(m.dg, n*E)
	clear(m.dg)
	m.frac = nn.Grow(m.frac, E)
	f := m.frac
	clear(f)
	for _, e := range m.choices {
		f[e] += 1 / float32(n*k)
	}
	for t := range n {
		w, dw, dg := m.wt[t*k:(t+1)*k], m.dwt[t*k:(t+1)*k], m.dg[t*E:(t+1)*E]
		var wdw float32
		for j := range w {
			wdw += w[j] * dw[j]
		}
		for j, e := range m.choices[t*k : (t+1)*k] {
			dg[e] += w[j] * (dw[j] - wdw)
		}
		if m.auxCoef == 0 {
			continue
		}
		p := m.probs[t*E : (t+1)*E]
		scale := m.auxCoef / float32(m.size) * float32(E) / float32(n)
		var pdp float32
		for e := range E {
			pdp += p[e] * scale * f[e]
		}
		for e := range E {
			dg[e] += p[e] * (scale*f[e] - pdp)
		}
	}
	return nil
}

// capacity is the most tokens a rank of n tokens sends one expert:
// ceil(capFactor * n*k / E), as GShard's expert capacity per group (0: no
// limit).
func (m *Model) capacity(n int) int {
	if m.capFactor <= 0 || m.s.experts == 0 {
		return 0
	}
	return max(1, int(math.Ceil(m.capFactor*float64(n*m.s.k)/float64(m.s.experts))))
}

// gradient runs forward and backward on this rank's n samples x (n x in)
// with labels, of a global batch of batch samples (the loss is the mean
// over it), reduces the replicated gradient and the step's counters over
// the ranks, and returns this rank's summed loss and correct predictions.
func (m *Model) gradient(ctx context.Context, x []float32, labels []uint8, batch int) (lossSum float64, correct int, err error) {
	n := len(labels)
	m.st.a2a, m.st.allreduce = 0, 0
	if err := m.forward(ctx, x, n, m.capacity(n)); err != nil {
		return 0, 0, fmt.Errorf("forward: %w", err)
	}
	lossSum, correct = nn.SoftmaxCrossEntropy(m.logits, m.s.classes, labels, 1/float32(batch))
	if err := m.backward(ctx, x, n); err != nil {
		return 0, 0, fmt.Errorf("backward: %w", err)
	}
	tail := m.repGrad[len(m.rep):]
	clear(tail)
	if m.s.experts > 0 {
		for e := range m.local {
			lo, hi := m.plan.Expert(e)
			tail[m.rank*m.local+e] = float32(hi - lo)
		}
		tail[m.s.experts] = float32(m.plan.Dropped())
		tail[m.s.experts+1] = float32(n * m.s.k)
	}
	t0 := time.Now()
	err = goccl.AllReduce(ctx, m.c, m.repGrad, m.repGrad, len(m.repGrad), goccl.Sum)
	m.st.allreduce = time.Since(t0)
	if err != nil {
		return 0, 0, fmt.Errorf("gradient allreduce: %w", err)
	}
	m.st.load = tail[:m.s.experts]
	m.st.dropped, m.st.choices = int(tail[m.s.experts]), int(tail[m.s.experts+1])
	return lossSum, correct, nil
}

// update applies Adam with learning rate lr: the replicated parameters
// are unit 0, local expert e unit 1+e.
func (m *Model) update(lr float64) {
	m.opt.LR = lr
	m.opt.Step(0, m.rep, m.repGrad[:len(m.rep)])
	for e := range m.exp {
		m.opt.Step(1+e, m.exp[e], m.expGrad[e])
	}
}

// imbalance is the step's load imbalance: the busiest expert's tokens over
// the mean (1: perfectly balanced).
func (st *stats) imbalance() float64 {
	var sum, most float32
	for _, l := range st.load {
		sum += l
		most = max(most, l)
	}
	if sum == 0 {
		return 1
	}
	return float64(most) / float64(sum/float32(len(st.load)))
}

// evaluate returns the share of d's samples the model classifies right
// (mnist.Accuracy), without a capacity limit.
func (m *Model) evaluate(ctx context.Context, d *mnist.Dataset) (float64, error) {
	return mnist.Accuracy(ctx, m.c, d, func(x []float32, n int) ([]float32, error) {
		return m.logits, m.forward(ctx, x, n, 0)
	})
}
