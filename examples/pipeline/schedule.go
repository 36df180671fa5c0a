package main

import (
	"fmt"
	"strings"
)

// Schedule is a pipeline schedule: the order in which every stage runs the
// forward and backward passes of the micro-batches.
type Schedule int

const (
	// GPipe runs every micro-batch's forward pass, then every backward
	// pass (Huang et al., "GPipe", 2019).
	GPipe Schedule = iota
	// OneFOneB is PipeDream-Flush (Narayanan et al., "PipeDream", 2019;
	// "Efficient large-scale language model training on GPU clusters using
	// Megatron-LM", 2021): stage s runs min(p-s-1, m) warm-up forwards,
	// then alternates one forward and one backward, then runs the
	// remaining backwards (cool-down).
	OneFOneB
)

func (s Schedule) String() string {
	switch s {
	case GPipe:
		return "GPipe"
	case OneFOneB:
		return "1F1B"
	}
	return fmt.Sprintf("Schedule(%d)", int(s))
}

// Op is one step of a stage's schedule: the forward (Backward false) or
// backward pass of micro-batch MB.
type Op struct {
	Backward bool
	MB       int
}

func (o Op) String() string {
	if o.Backward {
		return fmt.Sprintf("B%d", o.MB)
	}
	return fmt.Sprintf("F%d", o.MB)
}

// formatOps writes ops as "F0 F1 B0 ...".
func formatOps(ops []Op) string {
	var b strings.Builder
	for i, o := range ops {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(o.String())
	}
	return b.String()
}

// stageOps is the sequence of operations stage s (0 <= s < p) runs under
// schedule sch with m micro-batches. Every stage runs micro-batches' forward
// passes in order 0..m-1 and their backward passes in the same order, which
// is what lets each pair of neighbouring stages exchange their messages in
// the same order on both sides.
func stageOps(sch Schedule, p, m, s int) ([]Op, error) {
	if p < 1 || m < 1 || s < 0 || s >= p {
		return nil, fmt.Errorf("schedule: need p >= 1, m >= 1 and 0 <= stage < p (p=%d m=%d stage=%d)", p, m, s)
	}
	ops := make([]Op, 0, 2*m)
	switch sch {
	case GPipe:
		for i := range m {
			ops = append(ops, Op{MB: i})
		}
		for i := range m {
			ops = append(ops, Op{Backward: true, MB: i})
		}
	case OneFOneB:
		warmup := min(p-s-1, m)
		f, b := 0, 0
		for ; f < warmup; f++ {
			ops = append(ops, Op{MB: f})
		}
		for ; f < m; f, b = f+1, b+1 {
			ops = append(ops, Op{MB: f}, Op{Backward: true, MB: b})
		}
		for ; b < m; b++ {
			ops = append(ops, Op{Backward: true, MB: b})
		}
	default:
		return nil, fmt.Errorf("schedule: unknown schedule %d", int(sch))
	}
	return ops, nil
}

// maxInFlight is the largest number of micro-batches whose forward pass ops
// has run and whose backward pass it has not yet run: the activations the
// stage must hold at once.
func maxInFlight(ops []Op) int {
	live, most := 0, 0
	for _, o := range ops {
		if o.Backward {
			live--
		} else {
			live++
			most = max(most, live)
		}
	}
	return most
}

// bubbleFormula is the idle share of a pipeline of p stages with m
// micro-batches when forward and backward passes take the same time on every
// stage and communication is free: (p-1)/(m+p-1), for GPipe and 1F1B alike.
func bubbleFormula(p, m int) float64 {
	return float64(p-1) / float64(m+p-1)
}

// simulate runs the schedules of p stages as a discrete-event model in which
// a forward pass takes fwd, a backward pass bwd, communication takes no time
// and a message is only exchanged when both neighbours have reached it
// (rendezvous: a send does not complete before the matching receive is
// posted, the strictest semantics a transport can have). Between two
// operations a stage posts the send of the previous operation's output and
// the receive of the next one's input together, as pipelinePass does with SendRecv.
// It returns each stage's idle share of the makespan, or an error if the
// schedules deadlock.
func simulate(sch Schedule, p, m int, fwd, bwd float64) ([]float64, error) {
	all := make([][]Op, p)
	for s := range p {
		ops, err := stageOps(sch, p, m, s)
		if err != nil {
			return nil, err
		}
		all[s] = ops
	}
	idle, err := simulateOps(all, fwd, bwd)
	if err != nil {
		return nil, fmt.Errorf("schedule %v p=%d m=%d: %w", sch, p, m, err)
	}
	return idle, nil
}

// simulateOps is simulate for the operations all[s] of each stage s.
func simulateOps(all [][]Op, fwd, bwd float64) ([]float64, error) {
	p := len(all)
	type msg struct {
		from, to int
		grad     bool // a gradient (backward), else an activation
		mb       int
	}
	type stageState struct {
		ops        []Op
		next       int     // index of the next op to run
		stepStart  float64 // when the current comm step began
		stepEnd    float64 // when its matched halves completed so far
		send, recv *msg    // halves of the current comm step not yet matched
		finished   bool
		busy       float64
	}
	input := func(s int, o Op) *msg {
		switch {
		case !o.Backward && s > 0:
			return &msg{from: s - 1, to: s, mb: o.MB}
		case o.Backward && s < p-1:
			return &msg{from: s + 1, to: s, grad: true, mb: o.MB}
		}
		return nil
	}
	output := func(s int, o Op) *msg {
		switch {
		case !o.Backward && s < p-1:
			return &msg{from: s, to: s + 1, mb: o.MB}
		case o.Backward && s > 0:
			return &msg{from: s, to: s - 1, grad: true, mb: o.MB}
		}
		return nil
	}
	st := make([]*stageState, p)
	for s, ops := range all {
		// Every stage starts in the comm step before its first op.
		st[s] = &stageState{ops: ops}
		if len(ops) > 0 {
			st[s].recv = input(s, ops[0])
		}
	}
	for progress := true; progress; {
		progress = false
		// A message passes when its sender and its receiver have both
		// posted it, at the later of the two posting times.
		for _, x := range st {
			if x.finished || x.send == nil {
				continue
			}
			y := st[x.send.to]
			if y.finished || y.recv == nil || *y.recv != *x.send {
				continue
			}
			t := max(x.stepStart, y.stepStart)
			x.stepEnd, y.stepEnd = max(x.stepEnd, t), max(y.stepEnd, t)
			x.send, y.recv = nil, nil
			progress = true
		}
		// A comm step with both halves done ends; the next op runs.
		for s, x := range st {
			if x.finished || x.send != nil || x.recv != nil {
				continue
			}
			progress = true
			if x.next == len(x.ops) {
				x.finished = true
				continue
			}
			o := x.ops[x.next]
			x.next++
			d := fwd
			if o.Backward {
				d = bwd
			}
			x.busy += d
			x.stepStart = x.stepEnd + d
			x.stepEnd = x.stepStart
			x.send = output(s, o)
			if x.next < len(x.ops) {
				x.recv = input(s, x.ops[x.next])
			}
		}
	}
	makespan := 1e-300
	for s, x := range st {
		if !x.finished {
			return nil, fmt.Errorf("deadlock: stage %d stuck after op %d of %d (%s)", s, x.next, len(x.ops), formatOps(x.ops))
		}
		makespan = max(makespan, x.stepEnd)
	}
	idle := make([]float64, p)
	for s, x := range st {
		idle[s] = 1 - x.busy/makespan
	}
	return idle, nil
}
