package sim

import (
	"cmp"
	"fmt"
	"slices"
)

// PlanSpace is what Plan searches: every split of each topology's GPUs into
// TP × PP × CP × DP (EP within DP × CP for a model with experts), with the
// micro-batches, recomputation, ZeRO stages and virtual stages listed
// here. The zero value of a list takes its default.
type PlanSpace struct {
	GBS       int      // global batch, sequences (required)
	MaxTP     int      // the largest TP; 0: the GPUs of a node (TP stays inside a node, as Megatron advises)
	MBS       []int    // default 1, 2, 4
	Recompute []string // default none, selective, full
	ZeRO      []int    // default 0, 1
	CP        []int    // default 1, 2
	MaxVP     int      // the most virtual stages tried (interleaved 1F1B); default 4
	Flash     bool     // fused attention, as current stacks run
	SP        bool     // sequence parallelism with TP > 1
	// Objective ranks the plans: "time" (step time, the default) or
	// "gpu-seconds" (step time × GPUs: the cost of a step).
	Objective string
}

// PlanEntry is one split that fits in memory, with its prediction.
type PlanEntry struct {
	Topology string     `json:"topology"`
	GPUs     int        `json:"gpus"`
	Parallel Parallel   `json:"parallel"`
	Result   StepResult `json:"result"`
	Cost     float64    `json:"gpu_seconds"` // StepS × GPUs
}

// PlanReport is the ranked plans and what was tried.
type PlanReport struct {
	Plans     []PlanEntry `json:"plans"`     // fitting, ranked best first
	Tried     int         `json:"tried"`     // splits predicted
	Invalid   int         `json:"invalid"`   // splits Step refused (a value that does not divide)
	NotFit    int         `json:"not_fit"`   // predicted but over the GPU's memory
	Objective string      `json:"objective"` // "time" or "gpu-seconds"
}

// Plan predicts every split of space on each topology and ranks those
// that fit in the GPUs' memory by the objective (ties: fewer GPUs, then
// smaller TP × PP). It errors only on a bad space.
func Plan(topos []*Topology, m Model, space PlanSpace, o StepOptions) (*PlanReport, error) {
	sp, err := space.defaults()
	if err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	rep := &PlanReport{Objective: sp.Objective}
	for _, t := range topos {
		for _, p := range sp.splits(t, m) {
			rep.Tried++
			r, err := Step(t, Workload{Model: m, Parallel: p}, o)
			switch {
			case err != nil:
				rep.Invalid++
			case !r.Memory.Fits:
				rep.NotFit++
			default:
				rep.Plans = append(rep.Plans, PlanEntry{Topology: t.Name, GPUs: t.GPUs(), Parallel: p, Result: r, Cost: r.StepS * float64(t.GPUs())})
			}
		}
	}
	key := func(e PlanEntry) float64 { return e.Result.StepS }
	if sp.Objective == "gpu-seconds" {
		key = func(e PlanEntry) float64 { return e.Cost }
	}
	slices.SortStableFunc(rep.Plans, func(a, b PlanEntry) int {
		return cmp.Or(cmp.Compare(key(a), key(b)), cmp.Compare(a.GPUs, b.GPUs),
			cmp.Compare(a.Parallel.TP*a.Parallel.PP, b.Parallel.TP*b.Parallel.PP))
	})
	return rep, nil
}

func (s PlanSpace) defaults() (PlanSpace, error) {
	if s.GBS < 1 {
		return s, fmt.Errorf("sim: plan: global batch %d: want 1 or more sequences", s.GBS)
	}
	if len(s.MBS) == 0 {
		s.MBS = []int{1, 2, 4}
	}
	if len(s.Recompute) == 0 {
		s.Recompute = []string{"none", "selective", "full"}
	}
	if len(s.ZeRO) == 0 {
		s.ZeRO = []int{0, 1}
	}
	if len(s.CP) == 0 {
		s.CP = []int{1, 2}
	}
	if s.MaxVP == 0 {
		s.MaxVP = 4
	}
	switch s.Objective {
	case "":
		s.Objective = "time"
	case "time", "gpu-seconds":
	default:
		return s, fmt.Errorf("sim: plan: objective %q: want time or gpu-seconds", s.Objective)
	}
	return s, nil
}

// splits lists the candidate splits of t's GPUs for m: those that divide
// (Step checks the rest).
func (s PlanSpace) splits(t *Topology, m Model) []Parallel {
	g := t.GPUs()
	maxTP := t.GPUsPerNode
	if s.MaxTP > 0 {
		maxTP = min(maxTP, s.MaxTP)
	}
	var out []Parallel
	for tp := 1; tp <= maxTP; tp *= 2 {
		for pp := 1; pp <= m.Layers && tp*pp <= g; pp++ {
			if m.Layers%pp != 0 {
				continue
			}
			for _, cp := range s.CP {
				mp := tp * pp * cp
				if g%mp != 0 {
					continue
				}
				dp := g / mp
				for _, ep := range expertSplits(m, dp*cp) {
					out = s.each(out, Parallel{TP: tp, PP: pp, CP: cp, DP: dp, EP: ep, GBS: s.GBS, SP: s.SP && tp > 1}, m)
				}
			}
		}
	}
	return out
}

// each appends base with every micro-batch, recomputation, ZeRO stage and
// virtual-stage count whose batch divides.
func (s PlanSpace) each(out []Parallel, base Parallel, m Model) []Parallel {
	for _, mbs := range s.MBS {
		if s.GBS%(base.DP*mbs) != 0 {
			continue
		}
		for vp := 1; vp <= s.MaxVP; vp++ {
			micro := s.GBS / (base.DP * mbs)
			if vp > 1 && (base.PP == 1 || m.Layers%(base.PP*vp) != 0 || micro%base.PP != 0) {
				continue
			}
			for _, rc := range s.Recompute {
				for _, z := range s.ZeRO {
					p := base
					p.MBS, p.VP, p.Recompute, p.ZeRO = mbs, vp, rc, z
					if vp > 1 {
						p.Schedule = "interleaved"
					}
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// expertSplits are the EP degrees tried: 1 for a dense model, else the
// powers of two dividing both the experts and the ranks that hold them.
func expertSplits(m Model, ranks int) []int {
	if m.Experts == 0 {
		return []int{1}
	}
	var eps []int
	for ep := 1; ep <= m.Experts && ep <= ranks; ep *= 2 {
		if m.Experts%ep == 0 && ranks%ep == 0 {
			eps = append(eps, ep)
		}
	}
	return eps
}
