// Package trace is goccl's doctor for training traces: PyTorch profiler
// (Kineto) Chrome traces, one file per rank, plain or gzipped.
//
// Per rank it gives the GPU time's temporal breakdown and the share of
// communication that overlaps computation, with the definitions of Meta's
// Holistic Trace Analysis (HTA, github.com/facebookresearch/
// HolisticTraceAnalysis: get_temporal_breakdown, get_comm_comp_overlap),
// so that its figures agree with HTA's on the same files:
//
//   - the events are those with a dur and a cat (not "Trace") and a stream
//     other than -1 (kernels, memory copies and sets, stream syncs);
//     pandas' to_numeric reading of args.stream (a non-numeric stream is
//     -1);
//   - a kernel's kind comes from its name: communication when it starts
//     with nccl, hip or hccl or holds ncclKernel; memory when it starts
//     with Memcpy, Memset or dma; computation unless it is on HTA's list
//     of non-compute names (syncs, waits, copies, launches);
//   - the window is the union's first start to last end over all streams;
//     idle the window less the union; compute the union of computation;
//     non-compute the rest of the busy time; overlap the intersection of
//     the communication and computation unions over the communication
//     union; percentages rounded to 2 decimals as numpy does;
//   - with two or more ProfilerStep#N names among the files, the last step
//     is dropped: a GPU event stays only if a host event with its
//     correlation id started before the last step began;
//   - a trace with any fractional ts has every start rounded up and end
//     down to the µs (HTA's handling of nanosecond traces).
//
// goccl's own traces (GOCCL_TRACE_FILE, the JSON array form) are read
// too: there the operations are the communication and the program's spans
// (forward, backward, optimizer, ddp's "ddp compute"; not those ending in
// "wait") the computation, over the window of everything recorded.
//
// Differences from HTA: the rank is distributedInfo.rank (HTA matches
// "rank": followed by whitespace in the text, which Kineto writes the
// same); an MTIA trace's own filter is not modelled.
//
// Finding codes: exposed-communication (warn), gpu-idle (warn; Kineto only),
// trace-truncated (info; a goccl trace cut short),
// rank-imbalance (warn), no-gpu-events (error).
package trace

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/goccl/goccl/doctor"
)

// Report is the analysis of a job's traces, one per rank.
type Report struct {
	Ranks []Breakdown `json:"ranks"`
	// StepsFiltered says the last profiler step was dropped (two or more
	// steps in the traces, HTA's default).
	StepsFiltered bool             `json:"steps_filtered"`
	Findings      []doctor.Finding `json:"findings"`
}

// Analyze computes the breakdown of every rank and the findings.
func Analyze(rks []*Rank) *Report {
	rep := &Report{StepsFiltered: stepNames(rks) >= 2}
	for _, rk := range rks {
		b := breakdown(rk, stepFilter(rk, rep.StepsFiltered))
		rep.Ranks = append(rep.Ranks, b)
	}
	sort.SliceStable(rep.Ranks, func(i, j int) bool { return rep.Ranks[i].Rank < rep.Ranks[j].Rank })
	rep.find()
	return rep
}

// Thresholds of the findings.
const (
	exposedMin   = 50 // % of communication overlapped below which it is exposed
	exposedShare = 10 // % of the window that communication must take to matter
	idleMin      = 30 // % of the window idle
	imbalanceMin = 10 // percentage points of compute between ranks
)

func (rep *Report) find() {
	add := func(sev doctor.Severity, code, fix, format string, a ...any) {
		rep.Findings = append(rep.Findings, doctor.Finding{Severity: sev, Code: code, Message: fmt.Sprintf(format, a...), Fix: fix})
	}
	lo, hi := -1, -1
	for i, b := range rep.Ranks {
		if b.Truncated {
			add(doctor.SevInfo, "trace-truncated", "the rank's process probably died: its flight-recorder dump (goccl doctor flight-recorder) says what it was doing",
				"rank %d (%s): the trace ends without its closing bracket; read up to the cut", b.Rank, b.File)
		}
		if b.Events == 0 {
			add(doctor.SevError, "no-gpu-events", "profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] and keep at least one step after the warm-up",
				"rank %d (%s): no GPU events to analyse", b.Rank, b.File)
			continue
		}
		if b.Comm > 0 && b.OverlapPct < exposedMin && 100*b.Comm/b.Window >= exposedShare {
			add(doctor.SevWarn, "exposed-communication",
				"let gradients communicate during backward: DDP buckets (bucket_cap_mb) or FSDP prefetch; check that no synchronize or .item() serializes the communication stream with compute",
				"rank %d: communication takes %.1f %% of the GPU window and only %.2f %% of it overlaps computation (%.1f ms exposed)",
				b.Rank, 100*b.Comm/b.Window, b.OverlapPct, b.ExposedComm/1e3)
		}
		if b.IdlePct >= idleMin && !b.Goccl { // a goccl trace's gaps are untraced program work
			add(doctor.SevWarn, "gpu-idle",
				"look at the host side of the idle gaps: data loading (more DataLoader workers, pinned memory), a synchronize or .item() each step, many small kernels (CUDA graphs)",
				"rank %d: the GPU is idle %.2f %% of its window (%.1f ms of %.1f)", b.Rank, b.IdlePct, b.Idle/1e3, b.Window/1e3)
		}
		if lo < 0 || b.ComputePct < rep.Ranks[lo].ComputePct {
			lo = i
		}
		if hi < 0 || b.ComputePct > rep.Ranks[hi].ComputePct {
			hi = i
		}
	}
	if lo >= 0 && rep.Ranks[hi].ComputePct-rep.Ranks[lo].ComputePct >= imbalanceMin {
		add(doctor.SevWarn, "rank-imbalance",
			"give the ranks equal work (shard sizes, sequence lengths); the others wait for the busiest at every collective",
			"compute is %.2f %% of the window on rank %d but %.2f %% on rank %d", rep.Ranks[hi].ComputePct, rep.Ranks[hi].Rank, rep.Ranks[lo].ComputePct, rep.Ranks[lo].Rank)
	}
}

// WriteText prints the per-rank table and the findings.
func (rep *Report) WriteText(w io.Writer) error {
	goccl := len(rep.Ranks) > 0
	for _, b := range rep.Ranks {
		goccl = goccl && b.Goccl
	}
	if goccl {
		fmt.Fprintf(w, "Time per rank in goccl traces (the program's spans are the computation, goccl's operations the communication; µs)")
	} else {
		fmt.Fprintf(w, "GPU time per rank (HTA's temporal breakdown and communication/computation overlap; µs)")
	}
	if rep.StepsFiltered {
		fmt.Fprintf(w, ", the last profiler step dropped")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\twindow\tidle %\tcompute %\tnon-compute %\tcommunication\toverlap %\texposed comm\tGPU events\t")
	for _, b := range rep.Ranks {
		ov := "-"
		if !math.IsNaN(b.OverlapPct) {
			ov = fmt.Sprintf("%.2f", b.OverlapPct)
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.0f\t%s\t%.0f\t%d\t\n", b.Rank, b.Window, b.IdlePct, b.ComputePct, b.NonCompPct, b.Comm, ov, b.ExposedComm, b.Events)
	}
	tw.Flush()
	return doctor.WriteFindings(w, rep.Findings)
}

// MarshalJSON writes OverlapPct as null where it is NaN (no communication).
func (b Breakdown) MarshalJSON() ([]byte, error) {
	type plain Breakdown
	var ov *float64
	if !math.IsNaN(b.OverlapPct) {
		ov = &b.OverlapPct
	}
	return json.Marshal(struct {
		plain
		OverlapPct *float64 `json:"overlap_pct"`
	}{plain(b), ov})
}

// ReadPaths reads the traces named: files, or folders whose .json and .gz
// files are read (as HTA reads a trace folder).
func ReadPaths(paths []string) ([]*Rank, error) {
	files, err := doctor.ExpandPaths(paths, func(name string) bool {
		return strings.HasSuffix(name, ".json") || strings.HasSuffix(name, ".gz")
	})
	if err != nil {
		return nil, err
	}
	var rks []*Rank
	seen := map[int]string{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		rk, err := Read(fh, f)
		fh.Close()
		if err != nil {
			return nil, err
		}
		if other, dup := seen[rk.Rank]; dup {
			return nil, fmt.Errorf("%s and %s are both rank %d: give one trace per rank", other, f, rk.Rank)
		}
		seen[rk.Rank] = f
		rks = append(rks, rk)
	}
	return rks, nil
}
