package trace

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Step is one training step of a rank: its window and what filled it (µs).
// For a Kineto trace the step is a ProfilerStep#N annotation on the host
// and its GPU work the events launched during it; for a goccl trace it is
// one of ddp's steps ("ddp compute" then "ddp wait") and everything
// recorded within it.
type Step struct {
	Index       int     `json:"step"` // N of ProfilerStep#N; goccl: the step's number from 1
	Start       float64 `json:"start_us"`
	Dur         float64 `json:"dur_us"` // the host's step (Kineto) or ddp's
	Compute     float64 `json:"compute_us"`
	Comm        float64 `json:"communication_us"`
	Overlap     float64 `json:"overlap_us"`
	ExposedComm float64 `json:"exposed_comm_us"`
	// Tail is the communication still running, alone, after the last
	// computation before it ended: the last gradient bucket's AllReduce
	// exposed at the end of backward.
	Tail float64 `json:"tail_us"`
	// Syncs counts the host's blocking waits on the GPU that began in the
	// step by kind (syncKind; one nested in another counts once, as the
	// outer), SyncTime their time.
	Syncs    map[string]int `json:"syncs,omitempty"`
	SyncTime float64        `json:"sync_us"`
	Loader   float64        `json:"data_loader_us"` // the data loader's host time in the step
}

// StepSummary is a rank's steps after the warm-up: means per step, and
// the overlap over all of them.
type StepSummary struct {
	Steps       int            `json:"steps"`   // counted
	Skipped     int            `json:"skipped"` // warm-up steps left out (Options.Skip)
	Dur         float64        `json:"step_us"`
	Comm        float64        `json:"communication_us"`
	OverlapPct  float64        `json:"overlap_pct"` // of the steps' communication; NaN without (JSON: null)
	ExposedComm float64        `json:"exposed_comm_us"`
	Tail        float64        `json:"tail_us"`
	Syncs       float64        `json:"syncs_per_step"`
	SyncTime    float64        `json:"sync_us"`
	Loader      float64        `json:"data_loader_us"`
	SyncKinds   map[string]int `json:"sync_kinds,omitempty"` // over the counted steps
}

// syncKind is the kind of host synchronization a host event is, "" for
// none: the calls that block the host until the GPU catches up, which
// serialize the next step's launches behind this one's kernels.
func syncKind(name string) string {
	switch name {
	case "cudaStreamSynchronize", "hipStreamSynchronize":
		return "stream-synchronize"
	case "cudaDeviceSynchronize", "hipDeviceSynchronize":
		return "device-synchronize"
	case "cudaEventSynchronize", "hipEventSynchronize":
		return "event-synchronize"
	case "aten::item", "aten::_local_scalar_dense":
		return "item" // .item(), .tolist(), printing a CUDA tensor
	case "cudaMemcpy", "hipMemcpy":
		return "memcpy" // synchronous; counted when device to host
	}
	return ""
}

// steps computes rk's steps from its events (gpu: after the step filter).
// dropLast leaves out the last ProfilerStep, as the filter does.
func (rk *Rank) stepFigures(gpu []event, dropLast bool) []Step {
	if rk.goccl {
		return rk.gocclSteps()
	}
	steps := slices.Clone(rk.steps)
	sort.Slice(steps, func(i, j int) bool { return steps[i].ts < steps[j].ts })
	if dropLast && len(steps) > 0 {
		steps = steps[:len(steps)-1]
	}
	if len(steps) == 0 {
		return nil
	}
	dtoh := map[int64]bool{} // correlations of device-to-host copies
	for _, e := range rk.gpu {
		if e.dtoh {
			dtoh[e.correlation] = true
		}
	}
	out := make([]Step, len(steps))
	per := make([][]event, len(steps))
	for _, e := range gpu {
		launch, ok := rk.launchAt(e.correlation)
		if !ok {
			continue
		}
		if i := stepAt(steps, launch); i >= 0 {
			per[i] = append(per[i], e)
		}
	}
	for i, s := range steps {
		st := &out[i]
		st.Index, st.Start, st.Dur = stepIndex(s.name, i+1), s.ts, s.end-s.ts
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, e := range per[i] {
			lo, hi = min(lo, e.ts), max(hi, e.end)
		}
		st.fill(per[i], lo, hi)
		st.countSyncs(rk.syncs, s.ts, s.end, dtoh)
		var loader []interval
		for _, e := range clipEvents(rk.loader, s.ts, s.end, nil) {
			loader = append(loader, interval{e.ts, e.end})
		}
		st.Loader = total(merge(loader))
	}
	return out
}

// stepAt is the index of the step whose host window holds ts, -1 for none.
func stepAt(steps []event, ts float64) int {
	i := sort.Search(len(steps), func(i int) bool { return steps[i].ts > ts }) - 1
	if i >= 0 && ts < steps[i].end {
		return i
	}
	return -1
}

// stepIndex is N of ProfilerStep#N, or def.
func stepIndex(name string, def int) int {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "ProfilerStep#"))
	if err != nil || !isStep(name) {
		return def
	}
	return n
}

// gocclSteps are a goccl trace's ddp steps: the k-th "ddp compute" span
// and the k-th "ddp wait" span, from the start of one to the end of the
// other; the step's figures count what was recorded within that window.
func (rk *Rank) gocclSteps() []Step {
	var comp, wait []event
	for _, e := range rk.gpu {
		switch e.name {
		case "ddp compute":
			comp = append(comp, e)
		case "ddp wait":
			wait = append(wait, e)
		}
	}
	byTS := func(s []event) { sort.Slice(s, func(i, j int) bool { return s[i].ts < s[j].ts }) }
	byTS(comp)
	byTS(wait)
	n := min(len(comp), len(wait))
	out := make([]Step, n)
	for i := range n {
		lo, hi := comp[i].ts, wait[i].end
		st := &out[i]
		st.Index, st.Start, st.Dur = i+1, lo, hi-lo
		st.fill(clipEvents(rk.gpu, lo, hi, nil), lo, hi)
	}
	return out
}

// clipEvents appends to dst the events of evs that overlap [lo, hi], cut
// to it.
func clipEvents(evs []event, lo, hi float64, dst []event) []event {
	for _, e := range evs {
		if e.end <= lo || e.ts >= hi {
			continue
		}
		e.ts, e.end = max(e.ts, lo), min(e.end, hi)
		dst = append(dst, e)
	}
	return dst
}

// fill sets the step's computation, communication, overlap and tail from
// its events.
func (st *Step) fill(evs []event, lo, hi float64) {
	var comp, comm []interval
	for _, e := range evs {
		switch e.kind {
		case Computation:
			comp = append(comp, interval{e.ts, e.end})
		case Communication:
			comm = append(comm, interval{e.ts, e.end})
		}
	}
	comp, comm = merge(comp), merge(comm)
	st.Compute, st.Comm = total(comp), total(comm)
	st.Overlap = intersect(comm, comp)
	st.ExposedComm = st.Comm - st.Overlap
	if len(comm) == 0 {
		return
	}
	// The tail: back from the communication's end to the last computation
	// before it.
	end := comm[len(comm)-1].hi
	from := comm[0].lo
	for _, c := range comp {
		if c.lo < end {
			from = max(from, c.hi)
		}
	}
	for i := len(comm) - 1; i >= 0 && comm[i].hi > from; i-- {
		st.Tail += comm[i].hi - max(comm[i].lo, from)
	}
}

// countSyncs counts the sync events that start in [lo, hi): the outermost
// of nested ones, and cudaMemcpy only when it copied device to host.
func (st *Step) countSyncs(syncs []event, lo, hi float64, dtoh map[int64]bool) {
	var in []event
	for _, e := range syncs {
		if e.ts >= lo && e.ts < hi {
			in = append(in, e)
		}
	}
	sort.Slice(in, func(i, j int) bool {
		if in[i].ts != in[j].ts {
			return in[i].ts < in[j].ts
		}
		return in[i].end > in[j].end
	})
	outerEnd := math.Inf(-1)
	for _, e := range in {
		if e.ts < outerEnd && e.end <= outerEnd {
			continue // inside the last one counted (item's stream sync)
		}
		k := syncKind(e.name)
		if k == "memcpy" && !dtoh[e.correlation] {
			continue
		}
		if st.Syncs == nil {
			st.Syncs = map[string]int{}
		}
		st.Syncs[k]++
		st.SyncTime += e.end - e.ts
		outerEnd = e.end
	}
}

// summarize is the summary of steps after skipping the first skip.
func summarize(steps []Step, skip int) *StepSummary {
	if len(steps) == 0 {
		return nil
	}
	skip = min(skip, len(steps))
	sum := &StepSummary{Skipped: skip, OverlapPct: math.NaN()}
	var overlap float64
	for _, st := range steps[skip:] {
		sum.Steps++
		sum.Dur += st.Dur
		sum.Comm += st.Comm
		overlap += st.Overlap
		sum.ExposedComm += st.ExposedComm
		sum.Tail += st.Tail
		sum.SyncTime += st.SyncTime
		sum.Loader += st.Loader
		for k, n := range st.Syncs {
			if sum.SyncKinds == nil {
				sum.SyncKinds = map[string]int{}
			}
			sum.SyncKinds[k] += n
			sum.Syncs += float64(n)
		}
	}
	if sum.Comm > 0 {
		sum.OverlapPct = pct(overlap / sum.Comm)
	}
	if n := float64(sum.Steps); n > 0 {
		sum.Dur /= n
		sum.Comm /= n
		sum.ExposedComm /= n
		sum.Tail /= n
		sum.Syncs /= n
		sum.SyncTime /= n
		sum.Loader /= n
	}
	return sum
}
