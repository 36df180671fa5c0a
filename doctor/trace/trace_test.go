package trace

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHTAAgreement: on traces from HTA's own tests, every rank's temporal
// breakdown (µs and percentages) and communication/computation overlap
// equal what HTA computes on the same folder (testdata/hta/README.md).
func TestHTAAgreement(t *testing.T) {
	type want struct {
		rank                            int
		idle, compute, nonCompute, win  float64
		idlePct, compPct, ncPct, ovrPct float64 // ovrPct NaN: HTA's NaN (no communication)
	}
	nan := math.NaN()
	for _, tc := range []struct {
		dir   string
		ranks []want
	}{
		{"trace_filter", []want{
			{0, 321378, 106252, 172428, 600058, 53.56, 17.71, 28.74, 11.81},
			{1, 328671, 135548, 136455, 600674, 54.72, 22.57, 22.72, 20.05}}},
		{"nccl_parser_config", []want{{0, 338781, 75169, 21636, 435586, 77.78, 17.26, 4.97, 14.31}}},
		{"amd_trace", []want{{0, 8780, 96, 35, 8911, 98.53, 1.08, 0.39, nan}}},
		{"alexnet", []want{{0, 12929684, 10630, 55697, 12996011, 99.49, 0.08, 0.43, nan}}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			rks, err := ReadPaths([]string{filepath.Join("testdata/hta", tc.dir)})
			if err != nil {
				t.Fatal(err)
			}
			rep := Analyze(rks, Options{})
			if len(rep.Ranks) != len(tc.ranks) {
				t.Fatalf("%d ranks, want %d", len(rep.Ranks), len(tc.ranks))
			}
			for i, w := range tc.ranks {
				b := rep.Ranks[i]
				got := []float64{float64(b.Rank), b.Idle, b.Compute, b.NonCompute, b.Window, b.IdlePct, b.ComputePct, b.NonCompPct, b.OverlapPct}
				exp := []float64{float64(w.rank), w.idle, w.compute, w.nonCompute, w.win, w.idlePct, w.compPct, w.ncPct, w.ovrPct}
				for j := range got {
					if got[j] != exp[j] && !(math.IsNaN(got[j]) && math.IsNaN(exp[j])) {
						t.Errorf("rank %d: got %v, HTA %v", w.rank, got, exp)
						break
					}
				}
			}
		})
	}
}

// TestKinds: HTA's classification by name.
func TestKinds(t *testing.T) {
	for name, want := range map[string]Kind{
		"ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)":                 Communication,
		"void ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)":           Communication,
		"ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long)": Communication,
		"void ncclDevKernel_Generic(ncclDevComm*)":                             Computation, // HTA's quirk: prefixed, no ncclKernel
		"Memcpy DtoD (Device -> Device)":                                       Memory,
		"Memset (Device)":                                                      Memory,
		"void at::native::vectorized_elementwise_kernel<4>":                    Computation,
		"Stream Sync":             Other,
		"Context Sync":            Other,
		"Stream Wait Event":       Other,
		"void cutlass_dma_kernel": Other,
		"hipMemcpyWithStream":     Communication, // HTA's quirk: every hip prefix
	} {
		if got := kindOf(name); got != want {
			t.Errorf("%q: kind %d, want %d", name, got, want)
		}
	}
}

// gz compresses s.
func gz(s string) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.Bytes()
}

// TestReadEdges: a small trace, plain and gzipped, the rank from
// distributedInfo, streams as strings, events without dur or cat left out;
// bad input is an error naming the file, not a panic.
func TestReadEdges(t *testing.T) {
	const doc = `{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 4},
 "traceEvents": [
  {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 100, "dur": 50, "args": {"stream": 7, "correlation": 1}},
  {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "ts": 120, "dur": 60, "args": {"stream": "13", "correlation": 2}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 90, "dur": 5, "args": {"correlation": 1}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 95, "dur": 5, "args": {"correlation": 2}},
  {"ph": "f", "cat": "ac2g", "name": "flow", "ts": 100, "args": {"stream": 7}},
  {"ph": "X", "name": "no cat", "ts": 0, "dur": 1000, "args": {"stream": 7}},
  {"ph": "X", "cat": "kernel", "name": "idle later", "ts": 300, "dur": 20, "args": {"stream": "0x0", "correlation": 3}}
 ]}`
	for _, in := range [][]byte{[]byte(doc), gz(doc)} {
		rk, err := Read(bytes.NewReader(in), "r3.json")
		if err != nil {
			t.Fatal(err)
		}
		b := Analyze([]*Rank{rk}, Options{}).Ranks[0]
		// gemm 100-150, nccl 120-180: window 80, compute 50, comm 60 of which 30 overlap.
		if b.Rank != 3 || b.Window != 80 || b.Compute != 50 || b.NonCompute != 30 || b.Comm != 60 || b.Overlap != 30 || b.OverlapPct != 50 || b.Events != 2 {
			t.Errorf("%+v", b)
		}
		js, err := json.Marshal(b)
		if err != nil || !strings.Contains(string(js), `"overlap_pct":50`) {
			t.Errorf("JSON %s, %v", js, err)
		}
	}
	noComm, err := Read(strings.NewReader(`{"traceEvents":[{"cat":"kernel","name":"k","ts":1,"dur":1,"args":{"stream":7,"correlation":1}}]}`), "x")
	if err != nil {
		t.Fatal(err)
	}
	if js, err := json.Marshal(Analyze([]*Rank{noComm}, Options{})); err != nil || !strings.Contains(string(js), `"overlap_pct":null`) {
		t.Errorf("no communication: JSON %s, %v; want overlap_pct null", js, err)
	}
	for _, bad := range []string{"", `[{"ph": "X", "pid": "x", "ts": 1, "dur": 1}]`, `[{"ph": "X", "pid": 0, "ts": 1, "dur": 1}, {"ph": "X", "pid": 1, "ts": 1, "dur": 1}]`, `{"traceEvents": {}}`, `{"traceEvents": [{"ts": "x", "dur": 1, "cat": "k"}]}`, `{"traceEvents": [`, `{"distributedInfo": {"rank": -1}}`} {
		if _, err := Read(strings.NewReader(bad), "bad.json"); err == nil || !strings.Contains(err.Error(), "bad.json") {
			t.Errorf("%q: error %v, want one naming the file", bad, err)
		}
	}
	dir := t.TempDir()
	for _, f := range []string{"a.json", "b.json"} {
		os.WriteFile(filepath.Join(dir, f), []byte(doc), 0o644)
	}
	if _, err := ReadPaths([]string{dir}); err == nil || !strings.Contains(err.Error(), "rank 3") {
		t.Errorf("two files of rank 3: %v, want an error", err)
	}
}

// TestFindings: HTA's trace_filter job (two ranks of 128, GPU idle more
// than half its window, about an eighth to a fifth of its communication
// overlapped) gets gpu-idle and exposed-communication for each rank.
func TestFindings(t *testing.T) {
	rks, err := ReadPaths([]string{"testdata/hta/trace_filter"})
	if err != nil {
		t.Fatal(err)
	}
	rep := Analyze(rks, Options{})
	count := map[string]int{}
	for _, f := range rep.Findings {
		count[f.Code]++
		if f.Message == "" || f.Fix == "" || f.Severity == "" {
			t.Errorf("finding %+v: want a severity, message and fix", f)
		}
	}
	if count["gpu-idle"] != 2 || count["exposed-communication"] != 2 {
		t.Errorf("findings %v: want gpu-idle and exposed-communication for both ranks", count)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil || !strings.Contains(text.String(), "11.81") || !strings.Contains(text.String(), "20.05") {
		t.Errorf("text %q, %v: want both ranks' overlap", text.String(), err)
	}
}

// TestGocclTrace: goccl's own trace (GOCCL_TRACE_FILE's array form): the
// operations are the communication, the program's spans the computation
// but for ddp's wait. AllReduce 100-200 beside backward 50-150 and a ddp
// wait 150-200: 50 of its 100 µs overlap, 50 exposed.
func TestGocclTrace(t *testing.T) {
	const doc = `[
{"name":"process_name","ph":"M","pid":2,"tid":0,"args":{"name":"rank 2"}},
{"name":"forward","ph":"X","pid":2,"tid":1,"ts":1000000000000000.000,"dur":50.000},
{"name":"backward","ph":"X","pid":2,"tid":1,"ts":1000000000000050.000,"dur":100.000},
{"name":"AllReduce","ph":"X","pid":2,"tid":0,"ts":1000000000000100.000,"dur":100.000,"args":{"seq":1,"bytes":4096}},
{"name":"ddp wait","ph":"X","pid":2,"tid":1,"ts":1000000000000150.000,"dur":50.000}
]
`
	rk, err := Read(strings.NewReader(doc), "trace-2.json")
	if err != nil {
		t.Fatal(err)
	}
	rep := Analyze([]*Rank{rk}, Options{})
	b := rep.Ranks[0]
	if b.Rank != 2 || !b.Goccl || b.Window != 200 || b.Comm != 100 || b.Overlap != 50 || b.OverlapPct != 50 || b.ExposedComm != 50 || b.Compute != 150 || b.Idle != 0 {
		t.Errorf("%+v", b)
	}
	var text strings.Builder
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "goccl traces") {
		t.Errorf("text:\n%s", text.String())
	}
	// A killed process's file: no closing bracket, or cut inside an event.
	for _, cut := range []string{doc[:strings.LastIndex(doc, "]")], doc[:strings.LastIndex(doc, "dur")]} {
		rk, err := Read(strings.NewReader(cut), "trace-2.json")
		if err != nil {
			t.Fatalf("a trace cut short: %v", err)
		}
		rep := Analyze([]*Rank{rk}, Options{})
		if !rk.Truncated || rep.Ranks[0].Comm != 100 || len(rep.Findings) == 0 || rep.Findings[0].Code != "trace-truncated" {
			t.Errorf("cut at %d bytes: truncated %v, %+v, findings %+v", len(cut), rk.Truncated, rep.Ranks[0], rep.Findings)
		}
	}
}
