package trace

import (
	"math"
	"sort"
	"strings"
)

// Kind is a GPU event's class, by its name alone, as HTA classifies
// kernels (hta/utils/utils.py get_kernel_type).
type Kind int8

// Kinds.
const (
	Computation Kind = iota
	Communication
	Memory
	Other
)

// kindOf classifies a GPU event by name: communication (NCCL, RCCL, HCCL
// kernels), memory (copies and sets), computation (anything not on HTA's
// list of non-compute names), or other (synchronizations, waits).
func kindOf(name string) Kind {
	switch {
	case strings.HasPrefix(name, "nccl"), strings.HasPrefix(name, "hip"), strings.HasPrefix(name, "hccl"),
		strings.Contains(name, "ncclKernel"):
		return Communication
	case strings.HasPrefix(name, "Memcpy"), strings.HasPrefix(name, "Memset"), strings.HasPrefix(name, "dma"):
		return Memory
	}
	first, _, _ := strings.Cut(name, "\n") // HTA's patterns do not cross a newline
	for _, s := range []string{"Memcpy", "Memset", "dma", "Sync"} {
		if strings.Contains(first, s) {
			return Other
		}
	}
	for _, p := range []string{"Stream Wait Event", "runFunction", "job_exe", "packet", "pe_exe", "cpum_exe_subgraph", "collective_subgraph_execution"} {
		if strings.HasPrefix(name, p) {
			return Other
		}
	}
	if rest, ok := strings.CutPrefix(first, "cuda"); ok && strings.Contains(rest, "LaunchKernel") {
		return Other
	}
	return Computation
}

// interval is [lo, hi] in µs.
type interval struct{ lo, hi float64 }

// merge is the union of ivs as disjoint intervals in order (touching ones
// joined), as HTA merges: ivs is sorted in place.
func merge(ivs []interval) []interval {
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].lo < ivs[j].lo })
	out := ivs[:0] // in place: each write is at or before the read
	for _, iv := range ivs {
		if n := len(out); n > 0 && iv.lo <= out[n-1].hi {
			out[n-1].hi = max(out[n-1].hi, iv.hi)
			continue
		}
		out = append(out, iv)
	}
	return out
}

func total(ivs []interval) float64 {
	var t float64
	for _, iv := range ivs {
		t += iv.hi - iv.lo
	}
	return t
}

// intersect is the length of the intersection of two unions.
func intersect(a, b []interval) float64 {
	var t float64
	for i, j := 0, 0; i < len(a) && j < len(b); {
		lo, hi := max(a[i].lo, b[j].lo), min(a[i].hi, b[j].hi)
		if hi > lo {
			t += hi - lo
		}
		if a[i].hi < b[j].hi {
			i++
		} else {
			j++
		}
	}
	return t
}

// Breakdown is one rank's GPU time, HTA's temporal breakdown and
// communication/computation overlap (µs; percentages of Window, HTA's
// kernel_time, rounded to 2 decimals as numpy rounds).
type Breakdown struct {
	Rank        int     `json:"rank"`
	File        string  `json:"file"`
	Window      float64 `json:"window_us"` // first GPU event start to last end
	Idle        float64 `json:"idle_us"`
	Compute     float64 `json:"compute_us"`
	NonCompute  float64 `json:"non_compute_us"` // busy, no compute running: communication, memory, syncs alone
	Comm        float64 `json:"communication_us"`
	Overlap     float64 `json:"overlap_us"` // communication while some computation runs
	IdlePct     float64 `json:"idle_pct"`
	ComputePct  float64 `json:"compute_pct"`
	NonCompPct  float64 `json:"non_compute_pct"`
	OverlapPct  float64 `json:"overlap_pct"`     // of communication time; NaN without communication (JSON: null)
	ExposedComm float64 `json:"exposed_comm_us"` // communication with no computation beside it
	Events      int     `json:"gpu_events"`
	// Goccl says the trace is goccl's (GOCCL_TRACE_FILE): the window is
	// the program's, its spans the computation and the operations the
	// communication, and Events counts both.
	Goccl     bool `json:"goccl,omitempty"`
	Truncated bool `json:"truncated,omitempty"` // a goccl trace cut short (Rank.Truncated)
	// Steps are the rank's training steps (steps.go), Summary their means
	// after the warm-up; none without step annotations.
	Steps   []Step       `json:"steps,omitempty"`
	Summary *StepSummary `json:"step_summary,omitempty"`
}

// breakdown computes rk's breakdown over events evs (after the step
// filter).
func breakdown(rk *Rank, evs []event) Breakdown {
	b := Breakdown{Rank: rk.Rank, File: rk.File, Events: len(evs), OverlapPct: math.NaN(), Goccl: rk.goccl, Truncated: rk.Truncated}
	var all, comp, comm []interval
	for _, e := range evs {
		iv := interval{e.ts, e.end}
		all = append(all, iv)
		switch e.kind {
		case Computation:
			comp = append(comp, iv)
		case Communication:
			comm = append(comm, iv)
		}
	}
	all, comp, comm = merge(all), merge(comp), merge(comm)
	if len(all) == 0 {
		return b
	}
	b.Window = all[len(all)-1].hi - all[0].lo
	busy := total(all)
	b.Idle = b.Window - busy
	b.Compute = total(comp)
	b.NonCompute = busy - b.Compute
	b.Comm = total(comm)
	b.Overlap = intersect(comm, comp)
	b.ExposedComm = b.Comm - b.Overlap
	if b.Window > 0 {
		b.IdlePct, b.ComputePct, b.NonCompPct = pct(b.Idle/b.Window), pct(b.Compute/b.Window), pct(b.NonCompute/b.Window)
	}
	if b.Comm > 0 {
		b.OverlapPct = pct(b.Overlap / b.Comm)
	}
	return b
}

// pct is 100·f rounded to 2 decimals as numpy's round does (half to even
// on the binary value).
func pct(f float64) float64 { return math.RoundToEven(100*f*100) / 100 }

// stepFilter is HTA's default filter on load when the traces hold two or
// more profiler steps: the last step is dropped, and with it every GPU
// event not launched before the last step began. It returns rk's GPU
// events that remain.
func stepFilter(rk *Rank, on bool) []event {
	if !on || !rk.hostAny {
		return rk.gpu
	}
	last := rk.hostMin // no step on this rank: HTA keeps nothing launched before its first host event
	for i, s := range rk.steps {
		if i == 0 || s.ts > last {
			last = s.ts
		}
	}
	out := make([]event, 0, len(rk.gpu))
	for _, e := range rk.gpu {
		if e.correlation == -2 {
			if e.ts < last {
				out = append(out, e)
			}
			continue
		}
		if ts, ok := rk.launchAt(e.correlation); ok && ts < last {
			out = append(out, e)
		}
	}
	return out
}

// stepNames counts the distinct profiler steps across ranks (HTA filters
// when there are two or more).
func stepNames(rks []*Rank) int {
	seen := map[string]bool{}
	for _, rk := range rks {
		for _, s := range rk.steps {
			seen[s.name] = true
		}
	}
	return len(seen)
}
