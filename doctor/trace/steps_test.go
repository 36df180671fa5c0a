package trace

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

// kineto is a Kineto trace of rank with the events given (JSON objects).
func kineto(rank int, events ...string) string {
	return fmt.Sprintf(`{"distributedInfo": {"rank": %d}, "traceEvents": [%s]}`, rank, strings.Join(events, ",\n"))
}

// host is a host event; gpu a kernel or copy on stream 7 (launch
// correlation corr).
func host(name string, ts, dur float64, corr int) string {
	return fmt.Sprintf(`{"ph":"X","cat":"cpu_op","name":%q,"ts":%g,"dur":%g,"args":{"correlation":%d}}`, name, ts, dur, corr)
}

func gpu(name string, ts, dur float64, corr int) string {
	return fmt.Sprintf(`{"ph":"X","cat":"kernel","name":%q,"ts":%g,"dur":%g,"args":{"stream":7,"correlation":%d}}`, name, ts, dur, corr)
}

func analyzeDocs(t *testing.T, opt Options, docs ...string) *Report {
	t.Helper()
	var rks []*Rank
	for i, d := range docs {
		rk, err := Read(strings.NewReader(d), fmt.Sprintf("rank%d.json", i))
		if err != nil {
			t.Fatal(err)
		}
		rks = append(rks, rk)
	}
	return Analyze(rks, opt)
}

func codes(rep *Report) map[string]int {
	m := map[string]int{}
	for _, f := range rep.Findings {
		m[f.Code]++
	}
	return m
}

// TestStepsKineto: per ProfilerStep, the GPU work launched in it (compute,
// communication, overlap, the communication's exposed tail), the host's
// synchronizations (nested ones once, cudaMemcpy only device to host) and
// the data loader's time; the last step is dropped as HTA drops it; the
// summary skips the warm-up.
func TestStepsKineto(t *testing.T) {
	doc := kineto(0,
		host("ProfilerStep#1", 0, 1000, -1), host("ProfilerStep#2", 1000, 1000, -1), host("ProfilerStep#3", 2000, 500, -1),
		host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 200, -1),
		host("cudaLaunchKernel", 210, 5, 1), gpu("gemm", 300, 300, 1), // compute 300-600
		host("cudaLaunchKernel", 220, 5, 2), gpu("ncclKernel_AllReduce_RING_LL_Sum_float", 400, 500, 2), // 400-900: 200 overlapped, 300 tail
		host("aten::item", 910, 40, -1), host("aten::_local_scalar_dense", 911, 38, -1), host("cudaStreamSynchronize", 912, 36, 9),
		host("cudaMemcpy", 955, 10, 4), gpu("Memcpy DtoH (Device -> Pageable)", 956, 8, 4),
		host("cudaMemcpy", 970, 10, 5), gpu("Memcpy HtoD (Pageable -> Device)", 971, 8, 5),
		host("cudaLaunchKernel", 1010, 5, 6), gpu("gemm", 1100, 400, 6), // compute 1100-1500
		host("cudaLaunchKernel", 1020, 5, 7), gpu("ncclKernel_AllReduce_RING_LL_Sum_float", 1200, 200, 7), // hidden
		host("cudaDeviceSynchronize", 1600, 100, 8),
		host("cudaLaunchKernel", 2010, 5, 10), gpu("gemm", 2100, 100, 10),
	)
	rep := analyzeDocs(t, Options{}, doc)
	b := rep.Ranks[0]
	if !rep.StepsFiltered || len(b.Steps) != 2 {
		t.Fatalf("filtered %v, steps %+v: want the first 2 of 3", rep.StepsFiltered, b.Steps)
	}
	want := []Step{
		{Index: 1, Start: 0, Dur: 1000, Compute: 300, Comm: 500, Overlap: 200, ExposedComm: 300, Tail: 300,
			Syncs: map[string]int{"item": 1, "memcpy": 1}, SyncTime: 50, Loader: 200},
		{Index: 2, Start: 1000, Dur: 1000, Compute: 400, Comm: 200, Overlap: 200, ExposedComm: 0, Tail: 0,
			Syncs: map[string]int{"device-synchronize": 1}, SyncTime: 100, Loader: 0},
	}
	if !reflect.DeepEqual(b.Steps, want) {
		t.Errorf("steps\n%+v\nwant\n%+v", b.Steps, want)
	}
	s := b.Summary
	if s.Steps != 2 || s.Dur != 1000 || s.Comm != 350 || s.OverlapPct != 57.14 || s.Tail != 150 || s.Syncs != 1.5 || s.Loader != 100 ||
		!reflect.DeepEqual(s.SyncKinds, map[string]int{"item": 1, "memcpy": 1, "device-synchronize": 1}) {
		t.Errorf("summary %+v", s)
	}
	if c := codes(rep); c["host-sync"] != 1 || c["data-loader"] != 1 || c["comm-tail"] != 1 {
		t.Errorf("findings %v: want host-sync, data-loader and comm-tail", c)
	}
	// After a warm-up of one step only the second counts: one sync, no
	// tail, no loader.
	rep = analyzeDocs(t, Options{Skip: 1}, doc)
	if s := rep.Ranks[0].Summary; s.Steps != 1 || s.Skipped != 1 || s.Syncs != 1 || s.Tail != 0 || s.OverlapPct != 100 {
		t.Errorf("skip 1: summary %+v", s)
	}
	if c := codes(rep); c["data-loader"] != 0 || c["comm-tail"] != 0 || c["host-sync"] != 1 {
		t.Errorf("skip 1: findings %v", c)
	}
	var text strings.Builder
	rep.PerStep = true
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "Per step") || !strings.Contains(text.String(), "start µs") {
		t.Errorf("text:\n%s", text.String())
	}
}

// TestStepsRealTrace: HTA's trace_diff trace (one rank, 6 profiler steps
// of a training loop that calls .item() five times a step and reads from
// a multi-process DataLoader).
func TestStepsRealTrace(t *testing.T) {
	rks, err := ReadPaths([]string{"testdata/hta/trace_diff"})
	if err != nil {
		t.Fatal(err)
	}
	rep := Analyze(rks, Options{})
	b := rep.Ranks[0]
	if len(b.Steps) != 5 || b.Steps[0].Index != 1009 || b.Steps[4].Index != 1013 {
		t.Fatalf("steps %+v: want 1009-1013 (1014, the last, dropped)", b.Steps)
	}
	for _, st := range b.Steps {
		if st.Syncs["item"] != 5 || st.Loader <= 0 || st.Comm <= 0 || st.Overlap > st.Comm {
			t.Errorf("step %d: %+v; want 5 .item() calls, data-loader time and communication", st.Index, st)
		}
	}
	if c := codes(rep); c["host-sync"] != 1 {
		t.Errorf("findings %v: want host-sync", c)
	}
}

// TestArrivalsKineto: the k-th collective kernel of each rank is one
// collective when they end together; the rank that starts last is the
// straggler. Point-to-point kernels are left out, and kernels matched by
// order that end apart are not counted as arrivals at all.
func TestArrivalsKineto(t *testing.T) {
	rank := func(r int, late float64, ends []float64) string {
		var evs []string
		for k, end := range ends {
			start := end - 3000
			if r == 1 && k < 3 {
				start = end - 3000 + late // rank 1 arrives late at 3 of 4
			}
			evs = append(evs, host("cudaLaunchKernel", float64(10000*k), 5, k+1),
				gpu("ncclKernel_AllReduce_RING_LL_Sum_float", start, end-start, k+1))
		}
		evs = append(evs, host("cudaLaunchKernel", 50000, 5, 99), gpu("ncclKernel_SendRecv_RING_SIMPLE", 50000+float64(r)*2000, 10000-float64(r)*2000, 99))
		return kineto(r, evs...)
	}
	ends := []float64{10000, 20000, 30000, 40000}
	rep := analyzeDocs(t, Options{}, rank(0, 0, ends), rank(1, 2000, ends), rank(2, 0, ends), rank(3, 0, ends))
	a := rep.Arrivals
	if a == nil || a.Collectives != 4 || a.Source != ArrivalStarts {
		t.Fatalf("arrivals %+v", a)
	}
	if r := a.Ranks[1]; r.Last != 3 || r.MeanLag != 2000 || r.MaxLag != 2000 {
		t.Errorf("rank 1: %+v; want last at 3, 2 ms late", r)
	}
	if c := codes(rep); c["straggler"] != 1 || !strings.Contains(rep.Findings[len(rep.Findings)-1].Message, "rank 1 reached 3 of 4") {
		t.Errorf("findings %+v", rep.Findings)
	}
	other := []float64{15000, 25000, 35000, 45000} // rank 1's kernels end 5 ms after the others'
	if rep := analyzeDocs(t, Options{}, rank(0, 0, ends), rank(1, 0, other)); rep.Arrivals != nil {
		t.Errorf("kernels that end apart matched: %+v", rep.Arrivals)
	}
}

// TestStepsGoccl: a goccl trace's steps are ddp's (compute, then wait);
// what each holds is clipped to its window, and the arrivals are the ones
// the communicator recorded.
func TestStepsGoccl(t *testing.T) {
	doc := func(r int) string {
		return fmt.Sprintf(`[
{"name":"ddp compute","ph":"X","pid":%[1]d,"tid":1,"ts":0,"dur":100},
{"name":"AllReduce","ph":"X","pid":%[1]d,"tid":0,"ts":60,"dur":60,"args":{"seq":1,"bytes":4,"last_rank":1,"lag_us":30}},
{"name":"ddp wait","ph":"X","pid":%[1]d,"tid":1,"ts":100,"dur":20},
{"name":"AllReduce","ph":"X","pid":%[1]d,"tid":0,"ts":125,"dur":10,"args":{"seq":2,"bytes":4,"last_rank":0,"lag_us":5}},
{"name":"ddp compute","ph":"X","pid":%[1]d,"tid":1,"ts":120,"dur":80},
{"name":"AllReduce","ph":"X","pid":%[1]d,"tid":0,"ts":190,"dur":40,"args":{"seq":3,"bytes":4,"last_rank":1,"lag_us":10}},
{"name":"ddp wait","ph":"X","pid":%[1]d,"tid":1,"ts":200,"dur":30}
]`, r)
	}
	rep := analyzeDocs(t, Options{Skip: 1}, doc(0), doc(1))
	b := rep.Ranks[0]
	if len(b.Steps) != 2 {
		t.Fatalf("steps %+v", b.Steps)
	}
	// Step 1 (0-120): AllReduce 60-120, 40 of it in compute. Step 2
	// (120-230): 125-135 and 190-230, 20 of their 50 in compute.
	if st := b.Steps[0]; st.Dur != 120 || st.Comm != 60 || st.Overlap != 40 || st.Tail != 20 {
		t.Errorf("step 1: %+v", st)
	}
	if st := b.Steps[1]; st.Dur != 110 || st.Comm != 50 || st.Overlap != 20 || st.Tail != 30 {
		t.Errorf("step 2: %+v", st)
	}
	if s := b.Summary; s.Steps != 1 || s.OverlapPct != 40 {
		t.Errorf("summary after 1 skipped: %+v", s)
	}
	a := rep.Arrivals
	if a == nil || a.Source != ArrivalRecorded || a.Collectives != 3 || a.Ranks[1].Last != 2 || a.Ranks[1].MeanLag != 20 || a.Ranks[0].Last != 1 {
		t.Errorf("arrivals %+v", a)
	}
	if math.IsNaN(b.OverlapPct) {
		t.Error("whole-trace overlap NaN")
	}
}

// TestServing: serving spans (a request's prefill, KV transfer with its
// path, decode steps, its number as seq) give the time to first token,
// the transfer's share of it and the time per output token by path; a
// path far slower than the fastest is named.
func TestServing(t *testing.T) {
	span := func(name string, seq, ts, dur int, path string) string {
		p := ""
		if path != "" {
			p = fmt.Sprintf(`,"path":%q`, path)
		}
		return fmt.Sprintf(`{"name":%q,"ph":"X","pid":9,"tid":1,"ts":%d,"dur":%d,"args":{"seq":%d,"bytes":0%s}}`, name, ts, dur, seq, p)
	}
	doc := "[\n" + strings.Join([]string{
		span("request", 1, 0, 1000, ""), span("prefill", 1, 0, 200, ""), span("kv transfer", 1, 200, 300, "direct"),
		span("decode", 1, 500, 100, ""), span("decode", 1, 600, 100, ""), span("decode", 1, 700, 100, ""),
		span("request", 2, 1000, 2000, ""), span("prefill", 2, 1000, 200, ""), span("kv transfer", 2, 1200, 1500, "staging"),
		span("decode", 2, 2700, 100, ""),
		span("request", 3, 3000, 100, ""), // no transfer or decode: not counted
	}, ",\n") + "\n]\n"
	rep := analyzeDocs(t, Options{}, doc)
	if len(rep.Serving) != 2 {
		t.Fatalf("serving %+v", rep.Serving)
	}
	d, s := rep.Serving[0], rep.Serving[1]
	if d.Path != "direct" || d.Requests != 1 || d.TTFTP50 != 0.6 || d.TransferP50 != 0.3 || d.ShareP50 != 50 || d.TPOTP50 != 0.1 || d.PrefillP50 != 0.2 {
		t.Errorf("direct: %+v", d)
	}
	if s.Path != "staging" || s.TTFTP99 != 1.8 || math.Abs(s.ShareP99-100*1500.0/1800) > 1e-9 || !math.IsNaN(s.TPOTP50) {
		t.Errorf("staging: %+v", s)
	}
	if c := codes(rep); c["slow-path"] != 1 || c["kv-transfer-dominates"] != 2 {
		t.Errorf("findings %+v", rep.Findings)
	}
	js, err := json.Marshal(rep.Serving)
	if err != nil || !strings.Contains(string(js), `"tpot_p50_ms":null`) {
		t.Errorf("json %s %v", js, err)
	}
}
