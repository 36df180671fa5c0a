// Package trace is goccl's doctor for training traces: PyTorch profiler
// (Kineto) Chrome traces, one file per rank, plain or gzipped, and
// goccl's own (GOCCL_TRACE_FILE).
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
// Per step (steps.go: ProfilerStep#N, or ddp's steps in a goccl trace):
// compute, communication, overlap, the exposed tail of the communication,
// the host's synchronizations with the GPU and the data loader's time,
// summarized after a warm-up (Options.Skip). Across ranks (arrival.go):
// the last rank to reach each collective and how late.
//
// Finding codes: exposed-communication (warn), gpu-idle (warn; Kineto only),
// trace-truncated (info; a goccl trace cut short),
// rank-imbalance (warn), no-gpu-events (error), host-sync, data-loader,
// comm-tail, straggler (warn); for xfer agents' traces (transfer.go, the
// requests by path: rdma, tcp, shm, local) slow-path (warn: TCP to an agent
// others reached by RDMA) and transfer-failed (error); for serving spans
// (serving.go: TTFT, its KV transfer share at p50 and p99, TPOT, by KV
// path) kv-transfer-dominates and slow-path (warn: a path 1.5× slower
// than the fastest, e.g. staging).
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
	StepsFiltered bool      `json:"steps_filtered"`
	Arrivals      *Arrivals `json:"arrivals,omitempty"` // the stragglers, with two ranks or more
	// Transfers are the xfer agents' requests by path (their traces:
	// xfer.Options.TraceFile).
	Transfers []PathStats `json:"transfers,omitempty"`
	// Serving sums the inference requests of serving spans by KV path.
	Serving []ServingStats `json:"serving,omitempty"`
	// PerStep says WriteText prints every step (Options.PerStep).
	PerStep  bool             `json:"-"`
	Findings []doctor.Finding `json:"findings"`
}

// Options are the analysis' choices.
type Options struct {
	// Skip is how many first steps of each rank the step summary leaves
	// out (the warm-up).
	Skip int
	// PerStep makes WriteText print every step's figures.
	PerStep bool
}

// Analyze computes the breakdown of every rank, its steps, the arrivals at
// the collectives, and the findings.
func Analyze(rks []*Rank, opt Options) *Report {
	rep := &Report{StepsFiltered: stepNames(rks) >= 2, PerStep: opt.PerStep}
	for _, rk := range rks {
		gpu := stepFilter(rk, rep.StepsFiltered)
		b := breakdown(rk, gpu)
		b.Steps = rk.stepFigures(gpu, rep.StepsFiltered)
		b.Summary = summarize(b.Steps, opt.Skip)
		rep.Ranks = append(rep.Ranks, b)
	}
	sort.SliceStable(rep.Ranks, func(i, j int) bool { return rep.Ranks[i].Rank < rep.Ranks[j].Rank })
	rep.Arrivals = arrivals(rks)
	rep.Transfers = pathStats(rks)
	rep.Serving = servingStats(rks)
	rep.find(rks)
	return rep
}

// Thresholds of the findings.
const (
	exposedMin   = 50 // % of communication overlapped below which it is exposed
	exposedShare = 10 // % of the window that communication must take to matter
	idleMin      = 30 // % of the window idle
	imbalanceMin = 10 // percentage points of compute between ranks
)

// Thresholds of the step findings.
const (
	syncsMin     = 1    // host synchronizations per step
	loaderShare  = 10   // % of the step in the data loader
	tailShare    = 10   // % of the step in the exposed tail
	stragglerMin = 4    // collectives matched
	stragglerLag = 1000 // µs, mean lag when last
)

type addFunc func(sev doctor.Severity, code, fix, format string, a ...any)

// findSteps adds the findings of b's steps after the warm-up.
func (rep *Report) findSteps(add addFunc, b Breakdown) {
	s := b.Summary
	if s == nil || s.Steps == 0 {
		return
	}
	if s.Syncs >= syncsMin {
		add(doctor.SevWarn, "host-sync",
			"take .item(), printing or logging of CUDA tensors and torch.cuda.synchronize() out of the step (accumulate metrics on the GPU, read them every N steps): each sync stalls the host until the GPU drains, so the next launches cannot run ahead",
			"rank %d: %.1f host synchronizations per step (%s over %d steps), %.2f ms per step blocked",
			b.Rank, s.Syncs, kindsText(s.SyncKinds), s.Steps, s.SyncTime/1e3)
	}
	if s.Dur > 0 && 100*s.Loader/s.Dur >= loaderShare {
		add(doctor.SevWarn, "data-loader",
			"the input pipeline holds the step: more DataLoader workers (num_workers), pin_memory=True, a larger prefetch_factor, faster storage or cached, pre-decoded samples",
			"rank %d: the data loader takes %.2f ms of each %.2f ms step (%.1f %%)", b.Rank, s.Loader/1e3, s.Dur/1e3, 100*s.Loader/s.Dur)
	}
	if s.Dur > 0 && 100*s.Tail/s.Dur >= tailShare {
		add(doctor.SevWarn, "comm-tail",
			"the last gradient bucket's AllReduce runs alone after backward: a smaller bucket_cap_mb (the last bucket reduced holds the first layers), or overlap it with the optimizer step",
			"rank %d: %.2f ms of communication per step runs after the last computation (%.1f %% of the %.2f ms step)", b.Rank, s.Tail/1e3, 100*s.Tail/s.Dur, s.Dur/1e3)
	}
}

// kindsText is "item ×5, stream-synchronize ×1", by kind's name.
func kindsText(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func (rep *Report) find(rks []*Rank) {
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
	for _, b := range rep.Ranks {
		rep.findSteps(add, b)
	}
	if a := rep.Arrivals; a != nil && a.Collectives >= stragglerMin {
		for _, r := range a.Ranks {
			if 2*r.Last >= a.Collectives && r.MeanLag >= stragglerLag {
				add(doctor.SevWarn, "straggler",
					"the other ranks wait for this one at every collective: look at its host (CPU load, data loading, throttling, a slower device) and its share of the work",
					"rank %d reached %d of %d collectives last, %.2f ms after the first rank on average (at most %.2f ms; %s)",
					r.Rank, r.Last, a.Collectives, r.MeanLag/1e3, r.MaxLag/1e3, a.Source)
			}
		}
	}
	rep.findTransfers(rks, add)
	rep.findServing(add)
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
		fmt.Fprintf(tw, "%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.0f\t%s\t%.0f\t%d\t\n", b.Rank, b.Window, b.IdlePct, b.ComputePct, b.NonCompPct, b.Comm, pctText(b.OverlapPct), b.ExposedComm, b.Events)
	}
	tw.Flush()
	rep.writeSteps(w)
	if a := rep.Arrivals; a != nil {
		fmt.Fprintf(w, "\nThe last rank to reach each of %d collectives (%s)\n", a.Collectives, a.Source)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "rank\tlast in\tmean lag ms\tmax lag ms\t")
		for _, r := range a.Ranks {
			fmt.Fprintf(tw, "%d\t%d\t%.3f\t%.3f\t\n", r.Rank, r.Last, r.MeanLag/1e3, r.MaxLag/1e3)
		}
		tw.Flush()
	}
	if len(rep.Transfers) > 0 {
		fmt.Fprintf(w, "\nTransfers of the xfer agents, by path (post to end)\n")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "file\tpath\ttransfers\tfailed\tbytes\tp50 ms\tp99 ms\tGB/s\tmedian GB/s\t")
		for _, s := range rep.Transfers {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t\n", s.File, s.Path, s.Count, s.Failed, s.Bytes, s.P50/1e3, s.P99/1e3, s.GBps, s.MedGBps)
		}
		tw.Flush()
	}
	if len(rep.Serving) > 0 {
		fmt.Fprintf(w, "\nInference requests by KV transfer path (ms; share: the transfer's part of the time to first token)\n")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "file\tpath\trequests\tTTFT p50\tTTFT p99\tprefill p50\tKV p50\tKV p99\tshare p50 %\tshare p99 %\tTPOT p50\t")
		for _, s := range rep.Serving {
			tpot := "-"
			if !math.IsNaN(s.TPOTP50) {
				tpot = fmt.Sprintf("%.3f", s.TPOTP50)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t%.1f\t%s\t\n", s.File, orNone(s.Path), s.Requests, s.TTFTP50, s.TTFTP99,
				s.PrefillP50, s.TransferP50, s.TransferP99, s.ShareP50, s.ShareP99, tpot)
		}
		tw.Flush()
	}
	return doctor.WriteFindings(w, rep.Findings)
}

// MarshalJSON writes TPOTP50 as null where it is NaN.
func (s ServingStats) MarshalJSON() ([]byte, error) {
	type plain ServingStats
	return json.Marshal(struct {
		plain
		TPOTP50 *float64 `json:"tpot_p50_ms"`
	}{plain(s), nanNull(s.TPOTP50)})
}

// writeSteps prints the step summaries and, with PerStep, every step.
func (rep *Report) writeSteps(w io.Writer) {
	var with []Breakdown
	for _, b := range rep.Ranks {
		if b.Summary != nil {
			with = append(with, b)
		}
	}
	if len(with) == 0 {
		return
	}
	fmt.Fprintf(w, "\nPer step (ms; means over the steps after the first %d skipped)\n", with[0].Summary.Skipped)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\tsteps\tstep\tcommunication\toverlap %\texposed comm\ttail\tsyncs\tsync\tdata loader\t")
	for _, b := range with {
		s := b.Summary
		fmt.Fprintf(tw, "%d\t%d\t%.3f\t%.3f\t%s\t%.3f\t%.3f\t%.1f\t%.3f\t%.3f\t\n", b.Rank, s.Steps, s.Dur/1e3, s.Comm/1e3, pctText(s.OverlapPct),
			s.ExposedComm/1e3, s.Tail/1e3, s.Syncs, s.SyncTime/1e3, s.Loader/1e3)
	}
	tw.Flush()
	if !rep.PerStep {
		return
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "rank\tstep\tstart µs\tstep\tcompute\tcommunication\toverlap %\texposed comm\ttail\tsyncs\tdata loader\t")
	for _, b := range with {
		for _, st := range b.Steps {
			ov := math.NaN()
			if st.Comm > 0 {
				ov = pct(st.Overlap / st.Comm)
			}
			n := 0
			for _, c := range st.Syncs {
				n += c
			}
			fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.3f\t%.3f\t%.3f\t%s\t%.3f\t%.3f\t%d\t%.3f\t\n", b.Rank, st.Index, st.Start, st.Dur/1e3, st.Compute/1e3, st.Comm/1e3, pctText(ov),
				st.ExposedComm/1e3, st.Tail/1e3, n, st.Loader/1e3)
		}
	}
	tw.Flush()
}

// pctText prints a percentage, "-" for NaN.
func pctText(p float64) string {
	if math.IsNaN(p) {
		return "-"
	}
	return fmt.Sprintf("%.2f", p)
}

// MarshalJSON writes OverlapPct as null where it is NaN (no communication).
func (s StepSummary) MarshalJSON() ([]byte, error) {
	type plain StepSummary
	return json.Marshal(struct {
		plain
		OverlapPct *float64 `json:"overlap_pct"`
	}{plain(s), nanNull(s.OverlapPct)})
}

// nanNull is &f, or nil for NaN.
func nanNull(f float64) *float64 {
	if math.IsNaN(f) {
		return nil
	}
	return &f
}

// MarshalJSON writes OverlapPct as null where it is NaN (no communication).
func (b Breakdown) MarshalJSON() ([]byte, error) {
	type plain Breakdown
	return json.Marshal(struct {
		plain
		OverlapPct *float64 `json:"overlap_pct"`
	}{plain(b), nanNull(b.OverlapPct)})
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
