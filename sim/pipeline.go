package sim

import "fmt"

// TraceEvent is one Chrome/Perfetto trace event ("X": a complete event;
// Trace Event Format, ph "X", ts and dur in µs).
type TraceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// MaxTraceOps bounds the forward and backward ops StepTrace draws.
const MaxTraceOps = 1 << 20

// pipeOp is one micro-batch's forward or backward on a stage.
type pipeOp struct {
	fwd bool
	mb  int
}

// stageOrder is a stage's op order: GPipe runs every forward, then every
// backward; 1F1B (Narayanan §2.2) runs PP−stage−1 forwards, then
// alternates one forward and one backward, then drains the backwards.
func stageOrder(schedule string, stage, stages, m int) []pipeOp {
	ops := make([]pipeOp, 0, 2*m)
	warm := m
	if schedule != "gpipe" {
		warm = min(stages-stage-1, m)
	}
	f, b := 0, 0
	for ; f < warm; f++ {
		ops = append(ops, pipeOp{true, f})
	}
	for ; f < m; f++ {
		ops = append(ops, pipeOp{true, f}, pipeOp{false, b})
		b++
	}
	for ; b < m; b++ {
		ops = append(ops, pipeOp{false, b})
	}
	return ops
}

// StepTrace draws one pipeline of r's step (tid = stage): each
// micro-batch's forward and backward on every stage, ordered by the
// schedule and waiting for the neighbouring stage and the p2p transfer,
// then the exposed data-parallel reduction, the parameter gather and the
// optimizer. The interleaved schedule is drawn in 1F1B order (its bubble
// is in r.BubbleS, not in the drawing).
func StepTrace(r StepResult) ([]TraceEvent, error) {
	sp := r.Split
	p, m := sp.PP, sp.MicroBatches
	if 2*p*m > MaxTraceOps {
		return nil, fmt.Errorf("sim: trace: PP %d × %d micro-batches × 2 = %d ops, over %d", p, m, 2*p*m, MaxTraceOps)
	}
	const us = 1e6
	orders := make([][]pipeOp, p)
	for s := range orders {
		orders[s] = stageOrder(sp.Schedule, s, p, m)
	}
	fDone := make([][]float64, p) // end of each micro-batch's forward, per stage
	bDone := make([][]float64, p)
	for s := range fDone {
		fDone[s], bDone[s] = make([]float64, m), make([]float64, m)
		for i := range fDone[s] {
			fDone[s][i], bDone[s][i] = -1, -1
		}
	}
	next, free := make([]int, p), make([]float64, p)
	var ev []TraceEvent
	for left := 2 * p * m; left > 0; {
		progressed := false
		for s := 0; s < p; s++ {
			for next[s] < len(orders[s]) {
				op := orders[s][next[s]]
				ready, ok := opReady(op, s, p, fDone, bDone, sp.P2PS)
				if !ok {
					break
				}
				start := max(ready, free[s])
				dur, name, done := sp.BwdS, "B", bDone[s]
				if op.fwd {
					dur, name, done = sp.FwdS, "F", fDone[s]
				}
				free[s] = start + dur
				done[op.mb] = free[s]
				ev = append(ev, TraceEvent{Name: fmt.Sprintf("%s%d", name, op.mb), Cat: "compute", Ph: "X",
					Ts: start * us, Dur: dur * us, Tid: s, Args: map[string]any{"stage": s, "micro_batch": op.mb}})
				next[s]++
				left--
				progressed = true
			}
		}
		if !progressed {
			return nil, fmt.Errorf("sim: trace: schedule %s deadlocked", sp.Schedule)
		}
	}
	for s := 0; s < p; s++ {
		t := free[s]
		for _, tail := range []struct {
			name, cat string
			dur       float64
		}{{"dp reduce (exposed)", "comm", sp.DPExposedS}, {"param all-gather", "comm", sp.ParamGatherS}, {"optimizer", "compute", r.OptimizerS}} {
			if tail.dur > 0 {
				ev = append(ev, TraceEvent{Name: tail.name, Cat: tail.cat, Ph: "X", Ts: t * us, Dur: tail.dur * us, Tid: s})
				t += tail.dur
			}
		}
	}
	return ev, nil
}

// opReady is when op on stage s may start: a forward after the previous
// stage's forward of the micro-batch and the p2p, a backward after the
// next stage's backward and the p2p (the last stage: after its forward).
func opReady(op pipeOp, s, p int, fDone, bDone [][]float64, p2p float64) (float64, bool) {
	switch {
	case op.fwd && s == 0:
		return 0, true
	case op.fwd:
		t := fDone[s-1][op.mb]
		return t + p2p, t >= 0
	case s == p-1:
		t := fDone[s][op.mb]
		return t, t >= 0
	}
	t := bDone[s+1][op.mb]
	return t + p2p, t >= 0
}
