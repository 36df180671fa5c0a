// Package ep is expert parallelism's token exchange over goccl: the
// dispatch of a mixture-of-experts layer's tokens to the ranks that hold
// their experts, and the combine of the experts' outputs back to the
// tokens (GShard, Lepikhin et al. 2020; Switch Transformer, Fedus et al.
// 2021), each one AllToAllSingle after the per-expert token counts are
// exchanged with an AllToAll.
//
// Experts are numbered 0 to E-1, E a multiple of the world size P; rank r
// holds experts r*E/P to (r+1)*E/P-1 (its local experts 0 to E/P-1). Each
// token of a rank chose k experts (the gate's top k). A Plan, made once per
// step from the choices, places them: the capacity caps how many tokens
// one rank sends to one expert (the first ones in token order are kept,
// the rest dropped: their share of the output is zero, as in GShard);
// Dispatch sends the kept tokens and hands each local expert a contiguous
// batch; Combine returns the experts' outputs and sums them per token,
// weighted by the gate.
//
// Every rank must make its Plans and call Dispatch and Combine in the same
// order. Elements are float32; a token is dim consecutive elements. A Plan
// reused with Reset allocates nothing once its buffers have grown to the
// step's sizes.
package ep

import (
	"context"
	"fmt"

	"github.com/goccl/goccl"
)

// Plan is one step's exchange (see the package doc).
type Plan struct {
	c                 *goccl.Comm
	p, k, dim, local  int
	n                 int   // tokens on this rank
	slot              []int // per choice (token*k+j): its token's place in the send buffer, or -1 (dropped)
	sendTok, recvTok  []int // tokens to and from each rank
	sendEl, recvEl    []int // the same in elements, for AllToAllSingle
	recvCount         []int // tokens from rank src for local expert e, at src*local+e
	expertOff         []int // where local expert e's batch starts in Dispatch's output, in tokens (len local+1)
	sendBuf, recvBuf  []float32
	dropped, received int
	count, recv       []int64 // per expert: kept tokens sent, tokens received (src*local+e)
	start, next, at   []int   // scratch of Reset and permute
}

// NewPlan places this rank's tokens: choices holds k expert numbers per
// token (token t's at t*k to t*k+k-1), experts is E, capacity the most
// tokens this rank sends one expert (0: no limit), dim the elements per
// token. It exchanges the per-expert counts with the other ranks (an
// AllToAll), so every rank must call it.
func NewPlan(ctx context.Context, c *goccl.Comm, choices []int, k, experts, capacity, dim int) (*Plan, error) {
	pl := &Plan{}
	if err := pl.Reset(ctx, c, choices, k, experts, capacity, dim); err != nil {
		return nil, err
	}
	return pl, nil
}

// resize is s with length n, zeroed, reusing its array when it is large
// enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// Reset makes pl the plan of a new step (NewPlan's arguments), reusing its
// buffers.
func (pl *Plan) Reset(ctx context.Context, c *goccl.Comm, choices []int, k, experts, capacity, dim int) error {
	if c == nil {
		return fmt.Errorf("ep: nil communicator")
	}
	p := c.Size()
	switch {
	case k < 1 || len(choices)%k != 0:
		return fmt.Errorf("ep: rank %d: %d choices are not a whole number of tokens of k=%d", c.Rank(), len(choices), k)
	case experts < p || experts%p != 0:
		return fmt.Errorf("ep: rank %d: %d experts do not divide over %d ranks", c.Rank(), experts, p)
	case capacity < 0 || dim < 1:
		return fmt.Errorf("ep: rank %d: capacity %d, dim %d", c.Rank(), capacity, dim)
	}
	pl.c, pl.p, pl.k, pl.dim, pl.local, pl.n, pl.dropped, pl.received = c, p, k, dim, experts/p, len(choices)/k, 0, 0
	pl.slot = resize(pl.slot, len(choices))
	pl.count = resize(pl.count, experts)
	count := pl.count // kept tokens per expert
	for i, e := range choices {
		if e < 0 || e >= experts {
			return fmt.Errorf("ep: rank %d: token %d chose expert %d, outside [0, %d)", c.Rank(), i/k, e, experts)
		}
		if capacity > 0 && count[e] == int64(capacity) {
			pl.slot[i] = -1
			pl.dropped++
			continue
		}
		count[e]++
	}
	// Send order: by expert (hence by rank, then local expert), tokens in
	// order within an expert.
	pl.start = resize(pl.start, experts+1)
	start := pl.start
	for e := range experts {
		start[e+1] = start[e] + int(count[e])
	}
	pl.next = append(pl.next[:0], start[:experts]...)
	next := pl.next
	for i, e := range choices {
		if pl.slot[i] == -1 {
			continue
		}
		pl.slot[i] = next[e]
		next[e]++
	}
	pl.recv = resize(pl.recv, experts)
	recv := pl.recv // from rank src, for local expert e: at src*local+e
	if err := goccl.AllToAll(ctx, c, count, recv, pl.local); err != nil {
		return fmt.Errorf("ep: rank %d: token counts: %w", c.Rank(), err)
	}
	pl.sendTok, pl.recvTok = resize(pl.sendTok, p), resize(pl.recvTok, p)
	pl.sendEl, pl.recvEl = resize(pl.sendEl, p), resize(pl.recvEl, p)
	pl.recvCount = resize(pl.recvCount, experts)
	pl.expertOff = resize(pl.expertOff, pl.local+1)
	for r := range p {
		for e := range pl.local {
			pl.sendTok[r] += int(count[r*pl.local+e])
			pl.recvTok[r] += int(recv[r*pl.local+e])
			pl.recvCount[r*pl.local+e] = int(recv[r*pl.local+e])
			pl.expertOff[e+1] += int(recv[r*pl.local+e])
		}
		pl.sendEl[r], pl.recvEl[r] = pl.sendTok[r]*dim, pl.recvTok[r]*dim
		pl.received += pl.recvTok[r]
	}
	for e := range pl.local {
		pl.expertOff[e+1] += pl.expertOff[e]
	}
	pl.sendBuf = resize(pl.sendBuf, start[experts]*dim)
	pl.recvBuf = resize(pl.recvBuf, pl.received*dim)
	return nil
}

// Dropped is how many of this rank's choices the capacity dropped.
func (pl *Plan) Dropped() int { return pl.dropped }

// Received is how many tokens this rank's experts get: Dispatch's output
// holds Received()*dim elements.
func (pl *Plan) Received() int { return pl.received }

// Expert is where local expert e's batch lies in Dispatch's output (and
// Combine's input), in tokens: [lo, hi).
func (pl *Plan) Expert(e int) (lo, hi int) { return pl.expertOff[e], pl.expertOff[e+1] }

// Load is the tokens each local expert received: the step's load
// imbalance is their spread across all ranks' experts.
func (pl *Plan) Load() []int {
	l := make([]int, pl.local)
	for e := range l {
		l[e] = pl.expertOff[e+1] - pl.expertOff[e]
	}
	return l
}

// Dispatch sends this rank's kept tokens of x (n*dim elements) to their
// experts' ranks and writes what this rank's experts receive into out
// (Received()*dim elements), expert by expert (see Expert), each expert's
// tokens by source rank, then in the sender's token order.
func (pl *Plan) Dispatch(ctx context.Context, x, out []float32) error {
	if len(x) != pl.n*pl.dim || len(out) != pl.received*pl.dim {
		return fmt.Errorf("ep: rank %d: Dispatch of %d elements into %d, want %d and %d", pl.c.Rank(), len(x), len(out), pl.n*pl.dim, pl.received*pl.dim)
	}
	return pl.dispatch(ctx, x, pl.k, out)
}

// DispatchChoices is Dispatch with a row per choice instead of per token:
// xc holds n*k*dim elements, choice j of token t at (t*k+j)*dim (the rows
// of dropped choices are not read). It is the backward of CombineChoices:
// the gradient of the experts' outputs, weighted per choice, goes back to
// the experts in the order Dispatch put their inputs.
func (pl *Plan) DispatchChoices(ctx context.Context, xc, out []float32) error {
	if len(xc) != pl.n*pl.k*pl.dim || len(out) != pl.received*pl.dim {
		return fmt.Errorf("ep: rank %d: DispatchChoices of %d elements into %d, want %d and %d", pl.c.Rank(), len(xc), len(out), pl.n*pl.k*pl.dim, pl.received*pl.dim)
	}
	return pl.dispatch(ctx, xc, 1, out)
}

// dispatch packs the kept choices' rows of x, row i/per for choice i, and
// exchanges them.
func (pl *Plan) dispatch(ctx context.Context, x []float32, per int, out []float32) error {
	d := pl.dim
	for i, s := range pl.slot {
		if s >= 0 {
			t := i / per
			copy(pl.sendBuf[s*d:(s+1)*d], x[t*d:(t+1)*d])
		}
	}
	if err := goccl.AllToAllSingle(ctx, pl.c, pl.sendBuf, pl.sendEl, pl.recvBuf, pl.recvEl); err != nil {
		return fmt.Errorf("ep: rank %d: dispatch: %w", pl.c.Rank(), err)
	}
	pl.permute(out, pl.recvBuf, true)
	return nil
}

// Combine sends the experts' outputs y (laid out as Dispatch's output) back
// to the tokens' ranks and writes into out (n*dim elements) each token's
// sum of its kept choices' outputs, choice j weighted by weights[t*k+j].
func (pl *Plan) Combine(ctx context.Context, y, weights, out []float32) error {
	if len(y) != pl.received*pl.dim || len(weights) != pl.n*pl.k || len(out) != pl.n*pl.dim {
		return fmt.Errorf("ep: rank %d: Combine of %d elements and %d weights into %d, want %d, %d and %d",
			pl.c.Rank(), len(y), len(weights), len(out), pl.received*pl.dim, pl.n*pl.k, pl.n*pl.dim)
	}
	if err := pl.collect(ctx, y); err != nil {
		return err
	}
	clear(out)
	d := pl.dim
	for i, s := range pl.slot {
		if s < 0 {
			continue
		}
		t, w := i/pl.k, weights[i]
		o, v := out[t*d:(t+1)*d], pl.sendBuf[s*d:(s+1)*d]
		for j := range o {
			o[j] += w * v[j]
		}
	}
	return nil
}

// CombineChoices is Combine without the weighted sum: it writes each
// choice's expert output into its own row of out (n*k*dim elements, choice
// j of token t at (t*k+j)*dim; zeros for a dropped choice). A trainer needs
// the rows apart for the gate's gradient; it is also Dispatch's backward:
// the gradient of the experts' inputs goes back to the tokens' choices, to
// be summed per token.
func (pl *Plan) CombineChoices(ctx context.Context, y, out []float32) error {
	if len(y) != pl.received*pl.dim || len(out) != pl.n*pl.k*pl.dim {
		return fmt.Errorf("ep: rank %d: CombineChoices of %d elements into %d, want %d and %d",
			pl.c.Rank(), len(y), len(out), pl.received*pl.dim, pl.n*pl.k*pl.dim)
	}
	if err := pl.collect(ctx, y); err != nil {
		return err
	}
	d := pl.dim
	for i, s := range pl.slot {
		o := out[i*d : (i+1)*d]
		if s < 0 {
			clear(o)
			continue
		}
		copy(o, pl.sendBuf[s*d:(s+1)*d])
	}
	return nil
}

// collect returns the experts' rows y to the ranks that sent them, into
// sendBuf's places.
func (pl *Plan) collect(ctx context.Context, y []float32) error {
	pl.permute(y, pl.recvBuf, false)
	if err := goccl.AllToAllSingle(ctx, pl.c, pl.recvBuf, pl.recvEl, pl.sendBuf, pl.sendEl); err != nil {
		return fmt.Errorf("ep: rank %d: combine: %w", pl.c.Rank(), err)
	}
	return nil
}

// permute converts between the receive buffer's order (source rank, then
// local expert) and the experts' order (local expert, then source rank):
// into expert order when toExpert, back otherwise.
func (pl *Plan) permute(expertOrder, srcOrder []float32, toExpert bool) {
	d := pl.dim
	pl.at = resize(pl.at, pl.local)
	at := pl.at // tokens of each expert placed so far
	src := 0
	for r := range pl.p {
		for e := range pl.local {
			n := pl.recvCount[r*pl.local+e] * d
			dst := (pl.expertOff[e] + at[e]) * d
			if toExpert {
				copy(expertOrder[dst:dst+n], srcOrder[src:src+n])
			} else {
				copy(srcOrder[src:src+n], expertOrder[dst:dst+n])
			}
			at[e] += pl.recvCount[r*pl.local+e]
			src += n
		}
	}
}
