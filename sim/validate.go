package sim

// Validation against published measurements: a CSV of figures, each with
// its source, predicted with the closed-form model and compared (goccl sim
// validate; the table is in docs/sim.md). Nothing here is fitted to the
// rows: a prediction uses the preset's published link rates only.

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/goccl/goccl/internal/cluster"
)

// Row statuses of a validation.
const (
	StatusOK          = "ok"           // predicted and compared
	StatusNotModelled = "not-modelled" // a workload the model does not cover yet (Reason says which)
	StatusError       = "error"        // the row names something unknown, or the model refused it
)

// PlateauBytes is the size predicted for a row whose bytes column is
// "large" (the plateau of a sweep): 8 GiB, where nccl-tests sweeps end.
const PlateauBytes int64 = 8 << 30

// SmallBytes splits the summary: rows below it are latency-dominated.
const SmallBytes int64 = 1 << 20

// Goals for the median |error| (issue 29's validation section).
const (
	GoalMedianLarge = 0.05 // rows of SmallBytes and more
	GoalMedianSmall = 0.15 // rows below SmallBytes
	GoalMedianSteps = 0.05 // training-step rows (step_s)
)

// PublishedColumns are the columns of a validation CSV, all required, in
// any order, named by a header line; lines starting with # are comments.
var PublishedColumns = []string{"system", "gpus", "nodes", "workload", "algo", "bytes", "metric", "value", "source"}

// Published is one row of a validation CSV.
type Published struct {
	Line     int     `json:"line"` // in the file, from 1
	System   string  `json:"system"`
	GPUs     int     `json:"gpus"`
	Nodes    int     `json:"nodes"`
	Workload string  `json:"workload"`
	Algo     string  `json:"algo"`  // as published: "default (NVLS)", "ring (NCCL_ALGO=Ring)", ...
	Bytes    string  `json:"bytes"` // as written: an integer, "large" or empty
	Metric   string  `json:"metric"`
	Value    float64 `json:"value"`
	Source   string  `json:"source"`
}

// RowResult is one row's prediction and its error.
type RowResult struct {
	Published
	Status string `json:"status"` // StatusOK, StatusNotModelled, StatusError
	Reason string `json:"reason,omitempty"`
	// Model is what was predicted: the preset with the row's changes and
	// the collective ("dgx-a100, 3 nodes × 8 GPUs, 4 × 200 Gbit/s NICs:
	// all_reduce 8589934592 B").
	Model      string  `json:"model,omitempty"`
	ModelAlgo  string  `json:"model_algo,omitempty"`  // the algorithm the model ran
	ModelProto string  `json:"model_proto,omitempty"` // and its NCCL protocol
	Predicted  float64 `json:"predicted"`             // in the row's metric; 0 unless ok
	Error      float64 `json:"error"`                 // (predicted − published) / published; 0 unless ok
}

// ErrorStats summarises |error| over the ok rows of one size class.
type ErrorStats struct {
	Rows      int     `json:"rows"`
	MedianAbs float64 `json:"median_abs_error"` // fraction: 0.05 is 5 %
	P95Abs    float64 `json:"p95_abs_error"`    // nearest rank
	Goal      float64 `json:"goal_median_abs_error"`
	Met       bool    `json:"goal_met"` // Rows > 0 and MedianAbs ≤ Goal
}

// ValidationSummary counts the rows by status and summarises the errors.
type ValidationSummary struct {
	Rows        int        `json:"rows"`
	OK          int        `json:"ok"`
	NotModelled int        `json:"not_modelled"`
	Errors      int        `json:"errors"`
	Large       ErrorStats `json:"ge_1MiB"`   // collectives (time, busbw, algbw) of bytes ≥ SmallBytes
	Small       ErrorStats `json:"lt_1MiB"`   // collectives of bytes < SmallBytes
	Steps       ErrorStats `json:"steps"`     // training steps (step_s)
	Transfers   ErrorStats `json:"transfers"` // transfer rates (GBps: KV cache, xfer); no goal
}

// ValidationReport is the result of ValidatePublished.
type ValidationReport struct {
	Rows    []RowResult       `json:"rows"`
	Summary ValidationSummary `json:"summary"`
}

// systemMap maps a system column to a preset and the changes the
// published system makes to it. One row per system name; a new system in
// a CSV is one more row here.
type systemMap struct {
	name    string  // the system column, compared without case
	preset  string  // Preset name
	nics    int     // NICs per node; 0 keeps the preset's, -1 one per GPU
	nicGbps float64 // Gbit/s per NIC; 0 keeps the preset's
	note    string  // what the system is, and why that preset
}

// validationSystems are the systems of sim/testdata/published.csv.
var validationSystems = []systemMap{
	{name: "H100-DGX-NVSwitch", preset: "dgx-h100", note: "DGX H100: 8 H100 SXM on NVSwitch with NVLS, 8 × 400G ConnectX-7"},
	{name: "H100-HGX-NVSwitch", preset: "hgx-h100", note: "HGX H100 8-GPU board: NVSwitch with NVLS"},
	{name: "H100-DGX", preset: "dgx-h100", note: "DGX H100 nodes (NVIDIA's DGX Cloud benchmarks)"},
	{name: "A100-80GB-ND-v4 (NVSwitch)", preset: "dgx-a100", note: "Azure ND A100 v4: 8 A100 on NVSwitch, 8 × 200G HDR, as a DGX A100"},
	{name: "A100-Selene", preset: "dgx-a100", note: "Selene: DGX A100 nodes, 8 × 200G HDR"},
	{name: "DGX-A100 8x200G HDR IB", preset: "dgx-a100", note: "DGX A100, 8 × 200G HDR InfiniBand"},
	{name: "A100 4x HDR 200G per node", preset: "dgx-a100", nics: 4, nicGbps: 200, note: "A100 nodes with 4 × 200G HDR (half a DGX A100's NICs)"},
	{name: "NDR-400G-ConnectX-7", preset: "dgx-h100", nics: -1, nicGbps: 400, note: "one 400G NDR ConnectX-7 per GPU"},
	{name: "RoCE 4x200G per host", preset: "dgx-a100", nics: 4, nicGbps: 200, note: "hosts with 4 × 200G RoCE NICs, as in the Mooncake row"},
}

// workloadMap maps a workload column that is not "COLLECTIVE [TYPE OP]"
// by its prefix: to a collective, or to the reason it is not modelled.
type workloadMap struct {
	prefix      string // compared without case
	kind        string // the collective predicted; "" when not modelled
	notModelled string
	note        string
}

var validationWorkloads = []workloadMap{
	{prefix: "per-NIC NCCL bandwidth", kind: "all_reduce",
		note: "a ring all_reduce with one GPU (and one NIC) per node: its busbw is the NIC's rate, as a p2p transfer's"},
	{prefix: "KV-cache transfer", kind: kvTransferKind,
		note: "one transfer of the bytes between two nodes over all their NICs (TransferKV; RoCE when the system says so)"},
}

// metricOf reads a metric column: the Result field it compares with, or
// the reason it is not modelled.
func metricOf(metric string) (get func(Result) float64, notModelled string, err error) {
	switch metric {
	case "time_us":
		return func(r Result) float64 { return r.TimeUs }, "", nil
	case "busbw_GBps":
		return func(r Result) float64 { return r.BusBW }, "", nil
	case "algbw_GBps":
		return func(r Result) float64 { return r.AlgBW }, "", nil
	case "step_s":
		return nil, "", nil // validateStep: a training step, not a collective
	case "GBps":
		return func(r Result) float64 { return r.AlgBW }, "", nil
	}
	return nil, "", fmt.Errorf("unknown metric %q (want time_us, busbw_GBps, algbw_GBps, step_s or GBps)", metric)
}

// ReadPublished reads a validation CSV (PublishedColumns). Errors name the
// line and the column.
func ReadPublished(r io.Reader) ([]Published, error) {
	br := bufio.NewReader(r)
	if b, err := br.Peek(3); err == nil && string(b) == "\ufeff" {
		br.Discard(3) // a byte-order mark
	}
	cr := csv.NewReader(br)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1 // checked here, to name the line
	header, err := cr.Read()
	if err == io.EOF {
		return nil, errors.New("empty file: want a header line: " + strings.Join(PublishedColumns, ","))
	}
	if err != nil {
		return nil, err
	}
	hline, _ := cr.FieldPos(0)
	col, err := publishedHeader(header, hline)
	if err != nil {
		return nil, err
	}
	var rows []Published
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != len(header) {
			return nil, fmt.Errorf("line %d: %d fields, the header has %d", line, len(rec), len(header))
		}
		p, err := publishedRow(rec, col, line)
		if err != nil {
			return nil, err
		}
		rows = append(rows, p)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("line %d: a header and no rows", hline)
	}
	return rows, nil
}

// publishedHeader maps each column name to its index.
func publishedHeader(header []string, line int) (map[string]int, error) {
	col := map[string]int{}
	for i, h := range header {
		h = strings.TrimSpace(h)
		known := false
		for _, c := range PublishedColumns {
			known = known || c == h
		}
		switch {
		case !known:
			return nil, fmt.Errorf("line %d, column %d: unknown column %q (want %s)", line, i+1, h, strings.Join(PublishedColumns, ","))
		}
		if _, dup := col[h]; dup {
			return nil, fmt.Errorf("line %d, column %d: column %q appears twice", line, i+1, h)
		}
		col[h] = i
	}
	for _, c := range PublishedColumns {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("line %d: no column %q in the header (want %s)", line, c, strings.Join(PublishedColumns, ","))
		}
	}
	return col, nil
}

// publishedRow reads one record.
func publishedRow(rec []string, col map[string]int, line int) (Published, error) {
	get := func(c string) string { return strings.TrimSpace(rec[col[c]]) }
	bad := func(c, why string) error {
		return fmt.Errorf("line %d, column %s: %q %s", line, c, get(c), why)
	}
	p := Published{Line: line, System: get("system"), Workload: get("workload"), Algo: get("algo"),
		Bytes: get("bytes"), Metric: get("metric"), Source: get("source")}
	var err error
	if p.GPUs, err = strconv.Atoi(get("gpus")); err != nil || p.GPUs < 1 {
		return p, bad("gpus", "is not a GPU count (an integer ≥ 1)")
	}
	if p.Nodes, err = strconv.Atoi(get("nodes")); err != nil || p.Nodes < 1 {
		return p, bad("nodes", "is not a node count (an integer ≥ 1)")
	}
	if p.Bytes != "" && p.Bytes != "large" {
		if n, err := strconv.ParseInt(p.Bytes, 10, 64); err != nil || n < 0 {
			return p, bad("bytes", `is not a byte count (an integer, "large" or empty)`)
		}
	}
	p.Value, err = strconv.ParseFloat(get("value"), 64)
	if err != nil || !(p.Value > 0) || math.IsInf(p.Value, 0) {
		return p, bad("value", "is not a positive number")
	}
	for _, c := range []string{"system", "workload", "metric"} {
		if get(c) == "" {
			return p, bad(c, "is empty")
		}
	}
	return p, nil
}

// ValidatePublished predicts every row and compares. It never skips a
// row: one it cannot predict has StatusNotModelled or StatusError and a
// reason. A calibration (cal, may be nil) applies to the rows of goccl's
// clusters (runtime goccl: the goccl-netns systems).
func ValidatePublished(rows []Published, cal ...*Calibration) *ValidationReport {
	rep := &ValidationReport{Rows: make([]RowResult, 0, len(rows))}
	var c *Calibration
	if len(cal) > 0 {
		c = cal[0]
	}
	for _, p := range rows {
		rep.Rows = append(rep.Rows, validateRow(p, c))
	}
	rep.Summary = summarize(rep.Rows)
	return rep
}

// validateRow predicts one row.
func validateRow(p Published, cal *Calibration) RowResult {
	res := RowResult{Published: p}
	fail := func(status, format string, args ...any) RowResult {
		res.Status, res.Reason = status, fmt.Sprintf(format, args...)
		return res
	}
	sys, ok := lookupSystem(p.System)
	if !ok {
		return fail(StatusError, "unknown system %q (known: %s)", p.System, strings.Join(ValidationSystems(), "; "))
	}
	topo, err := sys.topology(p.GPUs, p.Nodes)
	if err == nil && cal != nil && topo.Runtime == "goccl" {
		topo, err = topo.Apply(cal)
	}
	if err != nil {
		return fail(StatusError, "system %q: %v", p.System, err)
	}
	get, notModelled, err := metricOf(p.Metric)
	if err != nil {
		return fail(StatusError, "%v", err)
	}
	if p.Metric == "step_s" {
		return validateStep(res, sys, topo)
	}
	kind, wlNotModelled, err := workloadKind(p.Workload)
	switch {
	case wlNotModelled != "":
		return fail(StatusNotModelled, "%s", wlNotModelled)
	case notModelled != "":
		return fail(StatusNotModelled, "%s", notModelled)
	case err != nil:
		return fail(StatusError, "%v", err)
	}
	bytes, err := rowBytes(p.Bytes)
	if err != nil {
		return fail(StatusError, "%v", err)
	}
	if kind == kvTransferKind {
		return validateKVTransfer(res, sys, topo, bytes, get)
	}
	c := Collective{Kind: kind, Bytes: bytes, Algo: algoOf(p.Algo), Ranks: p.GPUs}
	res.Model = fmt.Sprintf("%s: %s %d B", describe(sys, topo), kind, bytes)
	if cal != nil && topo.Runtime == "goccl" {
		res.Model = "calibrated " + res.Model
	}
	if c.Algo != "" {
		res.Model += ", " + c.Algo
	}
	r, err := topo.Collective(c)
	if err != nil {
		return fail(StatusError, "%v", err)
	}
	res.Status, res.ModelAlgo, res.ModelProto = StatusOK, r.Algo, r.Proto
	res.Predicted = get(r)
	res.Error = (res.Predicted - p.Value) / p.Value
	return res
}

// ValidationSystems lists the system names a validation CSV may use.
func ValidationSystems() []string {
	names := make([]string, len(validationSystems))
	for i, s := range validationSystems {
		names[i] = s.name
	}
	return names
}

func lookupSystem(name string) (systemMap, bool) {
	if s, ok := netnsSystem(name); ok {
		return s, true
	}
	for _, s := range validationSystems {
		if strings.EqualFold(s.name, strings.TrimSpace(name)) {
			return s, true
		}
	}
	return systemMap{}, false
}

// NetnsSystem is the system column of goccl's own namespace cluster
// (goccl cluster up), followed by its link rate in tc's units:
// "goccl-netns 1gbit", "goccl-netns 100mbit".
const NetnsSystem = "goccl-netns"

// netnsSystem reads "goccl-netns RATE": the goccl-netns preset at that
// rate, one NIC per host.
func netnsSystem(name string) (systemMap, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(name), NetnsSystem+" ")
	if !ok {
		return systemMap{}, false
	}
	rate, err := cluster.ParseRate(rest)
	if err != nil || rate == 0 {
		return systemMap{}, false
	}
	return systemMap{name: name, preset: "goccl-netns", nics: 1, nicGbps: float64(rate) / 1e9,
		note: "goccl's namespace cluster, each host's link shaped by tbf"}, true
}

// topology is the system's preset for a row of gpus GPUs on nodes nodes:
// more than one node spreads the GPUs evenly, as the published runs did.
func (s systemMap) topology(gpus, nodes int) (*Topology, error) {
	base, err := Preset(s.preset)
	if err != nil {
		return nil, err
	}
	t := *base
	switch {
	case nodes > 1 && gpus%nodes != 0:
		return nil, fmt.Errorf("%d GPUs do not spread evenly over %d nodes", gpus, nodes)
	case nodes > 1:
		t.GPUsPerNode = gpus / nodes
	case gpus > t.GPUsPerNode:
		return nil, fmt.Errorf("%d GPUs on one node of preset %s, which has %d", gpus, s.preset, t.GPUsPerNode)
	}
	switch {
	case s.nics < 0:
		t.NICsPerNode = t.GPUsPerNode
	case s.nics > 0:
		t.NICsPerNode = s.nics
	}
	if s.nicGbps > 0 {
		t.NICGbps = s.nicGbps
	}
	scaled := t.WithNodes(nodes)
	if err := scaled.Validate(); err != nil {
		return nil, err
	}
	return scaled, nil
}

// describe is the topology predicted, for RowResult.Model.
func describe(s systemMap, t *Topology) string {
	d := fmt.Sprintf("%s, %d node", s.preset, t.Nodes)
	if t.Nodes != 1 {
		d += "s"
	}
	d += fmt.Sprintf(" × %d GPUs", t.GPUsPerNode)
	if s.nics != 0 || s.nicGbps != 0 {
		d += fmt.Sprintf(", %d × %g Gbit/s NICs", t.NICsPerNode, t.NICGbps)
	}
	return d
}

// workloadKind reads a workload column: "COLLECTIVE [TYPE OP]"
// ("all_reduce float sum") or a validationWorkloads prefix.
func workloadKind(w string) (kind, notModelled string, err error) {
	for _, m := range validationWorkloads {
		if len(w) >= len(m.prefix) && strings.EqualFold(w[:len(m.prefix)], m.prefix) {
			return m.kind, m.notModelled, nil
		}
	}
	fields := strings.Fields(strings.ToLower(w))
	if len(fields) > 0 {
		if k := collectiveKind(fields[0]); k != "" {
			return k, "", nil
		}
	}
	prefixes := make([]string, len(validationWorkloads))
	for i, m := range validationWorkloads {
		prefixes[i] = fmt.Sprintf("%q", m.prefix+"…")
	}
	return "", "", fmt.Errorf("unknown workload %q: want a collective (%s) with its type and op, or %s", w, strings.Join(Kinds, ", "), strings.Join(prefixes, ", "))
}

// collectiveKind accepts "all_reduce", "allreduce", "all-reduce",
// "all_reduce_perf".
func collectiveKind(s string) string {
	norm := strings.NewReplacer("_", "", "-", "").Replace(strings.TrimSuffix(s, "_perf"))
	for _, k := range Kinds {
		if strings.ReplaceAll(k, "_", "") == norm {
			return k
		}
	}
	return ""
}

// algoOf reads an algo column: "" for the runtime's own choice
// ("default", "default (NVLS)": what NCCL picked is compared with the
// model's pick, not forced), else the first word in lower case ("ring
// (NCCL_ALGO=Ring)" is ring, "NVLS" nvls); Collective rejects unknown ones.
func algoOf(a string) string {
	f := strings.Fields(strings.ToLower(a))
	if len(f) == 0 || f[0] == "default" {
		return ""
	}
	return f[0]
}

// rowBytes is the size of a bytes column.
func rowBytes(b string) (int64, error) {
	switch b {
	case "":
		return 0, errors.New(`no bytes: a collective needs a size (an integer or "large")`)
	case "large":
		return PlateauBytes, nil
	}
	return strconv.ParseInt(b, 10, 64) // checked by ReadPublished
}

// summarize counts the statuses and the |error| statistics.
func summarize(rows []RowResult) ValidationSummary {
	s := ValidationSummary{Rows: len(rows)}
	var large, small, steps, transfers []float64
	for _, r := range rows {
		switch r.Status {
		case StatusOK:
			s.OK++
			b, _ := rowBytes(r.Bytes)
			switch {
			case r.Metric == "step_s":
				steps = append(steps, math.Abs(r.Error))
			case r.Metric == "GBps":
				transfers = append(transfers, math.Abs(r.Error))
			case b >= SmallBytes:
				large = append(large, math.Abs(r.Error))
			default:
				small = append(small, math.Abs(r.Error))
			}
		case StatusNotModelled:
			s.NotModelled++
		default:
			s.Errors++
		}
	}
	s.Large = errorStats(large, GoalMedianLarge)
	s.Small = errorStats(small, GoalMedianSmall)
	s.Steps = errorStats(steps, GoalMedianSteps)
	s.Transfers = errorStats(transfers, 0)
	return s
}

// errorStats is the median and the nearest-rank 95th percentile of abs.
func errorStats(abs []float64, goal float64) ErrorStats {
	st := ErrorStats{Rows: len(abs), Goal: goal}
	if len(abs) == 0 {
		return st
	}
	sort.Float64s(abs)
	n := len(abs)
	st.MedianAbs = abs[n/2]
	if n%2 == 0 {
		st.MedianAbs = (abs[n/2-1] + abs[n/2]) / 2
	}
	st.P95Abs = abs[int(math.Ceil(0.95*float64(n)))-1]
	st.Met = st.MedianAbs <= goal
	return st
}
