package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

func replayTopo(t *testing.T, nodes int) *Topology {
	t.Helper()
	topo, err := Preset("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	return topo.WithNodes(nodes)
}

// collTime is the level below: what Collective predicts for one call.
func collTime(t *testing.T, topo *Topology, kind string, bytes int64, ranks int) float64 {
	t.Helper()
	r, err := topo.Collective(Collective{Kind: kind, Bytes: bytes, Ranks: ranks})
	if err != nil {
		t.Fatal(err)
	}
	return r.TimeUs
}

func replayNear(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func mustReplay(t *testing.T, topo *Topology, ranks [][]Op) *ReplayResult {
	t.Helper()
	res, err := Replay(topo, ranks, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Compute, then all_reduce, then compute on two ranks: nothing overlaps,
// so the time is the sum and all of the communication is exposed.
func TestReplaySerial(t *testing.T) {
	topo := replayTopo(t, 1)
	const mib = 1 << 20
	ar := collTime(t, topo, "all_reduce", mib, 2)
	rank := []Op{
		{ID: 1, Name: "fwd", Kind: OpCompute, DurationUs: 100},
		{ID: 2, Name: "ar", Kind: OpColl, Coll: "all_reduce", Bytes: mib, Deps: []uint64{1}},
		{ID: 3, Name: "opt", Kind: OpCompute, DurationUs: 50, Deps: []uint64{2}},
	}
	res := mustReplay(t, topo, [][]Op{rank, rank})
	if want := 150 + ar; !replayNear(res.TotalUs, want) {
		t.Fatalf("total %g µs, want 100 + %g + 50", res.TotalUs, ar)
	}
	for _, rt := range res.Ranks {
		if !replayNear(rt.ComputeUs, 150) || !replayNear(rt.CommUs, ar) || !replayNear(rt.ExposedCommUs, ar) {
			t.Errorf("rank %d: %+v, want compute 150, comm and exposed %g", rt.Rank, rt, ar)
		}
	}
	var ids []uint64
	for _, s := range res.CriticalPath {
		ids = append(ids, s.ID)
	}
	if len(ids) != 3 || ids[0] != 1 || ids[1] != 2 || ids[2] != 3 {
		t.Errorf("critical path %v, want 1 2 3", ids)
	}
}

// The all_reduce on the communication stream runs beside independent
// compute: the step is the longer of the two and no communication is
// exposed.
func TestReplayOverlap(t *testing.T) {
	topo := replayTopo(t, 1)
	const bytes = 64 << 20
	ar := collTime(t, topo, "all_reduce", bytes, 2)
	if ar >= 2000 {
		t.Fatalf("all_reduce %g µs: the test needs it under the 2000 µs of compute", ar)
	}
	rank := []Op{
		{ID: 1, Name: "bwd layer 2", Kind: OpCompute, DurationUs: 100},
		{ID: 2, Name: "ar grads 2", Kind: OpColl, Coll: "all_reduce", Bytes: bytes, Deps: []uint64{1}},
		{ID: 3, Name: "bwd layer 1", Kind: OpCompute, DurationUs: 2000, Deps: []uint64{1}},
	}
	res := mustReplay(t, topo, [][]Op{rank, rank})
	if !replayNear(res.TotalUs, 2100) || res.Ranks[0].ExposedCommUs != 0 || !replayNear(res.Ranks[0].CommUs, ar) {
		t.Fatalf("total %g µs (want 2100), rank 0 %+v (want exposed 0)", res.TotalUs, res.Ranks[0])
	}
	// Compute shorter than the all_reduce: the rest is exposed.
	rank[2].DurationUs = ar / 4
	res = mustReplay(t, topo, [][]Op{rank, rank})
	if !replayNear(res.TotalUs, 100+ar) || !replayNear(res.Ranks[1].ExposedCommUs, ar-ar/4) {
		t.Fatalf("total %g µs (want %g), exposed %g (want %g)", res.TotalUs, 100+ar, res.Ranks[1].ExposedCommUs, ar-ar/4)
	}
}

// A collective starts when its last rank arrives: the slow rank's compute
// is on the critical path.
func TestReplayStraggler(t *testing.T) {
	topo := replayTopo(t, 1)
	ar := collTime(t, topo, "all_reduce", 4096, 2)
	mk := func(d float64) []Op {
		return []Op{{ID: 1, Kind: OpCompute, DurationUs: d}, {ID: 2, Kind: OpColl, Coll: "all_reduce", Bytes: 4096, Deps: []uint64{1}}}
	}
	res := mustReplay(t, topo, [][]Op{mk(100), mk(300)})
	if !replayNear(res.Ranks[0].EndUs, 300+ar) || !replayNear(res.TotalUs, 300+ar) {
		t.Fatalf("ends %g, %g; want both %g", res.Ranks[0].EndUs, res.Ranks[1].EndUs, 300+ar)
	}
	if cp := res.CriticalPath; len(cp) != 2 || cp[0].Rank != 1 || cp[0].ID != 1 {
		t.Fatalf("critical path %+v, want rank 1's compute then the all_reduce", cp)
	}
}

// A send and its receive start together, when the later one is ready,
// and take a sendrecv's time: inside a node, or across nodes.
func TestReplaySendRecv(t *testing.T) {
	topo := replayTopo(t, 2)
	intra := collTime(t, topo, "sendrecv", 1<<20, 2)
	inter := collTime(t, topo, "sendrecv", 1<<20, 9)
	if !(inter > intra) {
		t.Fatalf("across nodes %g µs, inside %g: want slower across", inter, intra)
	}
	for _, c := range []struct {
		peer int
		want float64
	}{{1, intra}, {8, inter}} {
		ranks := make([][]Op, c.peer+1)
		ranks[0] = []Op{{ID: 1, Kind: OpCompute, DurationUs: 10}, {ID: 2, Kind: OpSend, Peer: c.peer, Bytes: 1 << 20, Deps: []uint64{1}}}
		ranks[c.peer] = []Op{{ID: 5, Kind: OpCompute, DurationUs: 40}, {ID: 6, Kind: OpRecv, Peer: 0, Bytes: 1 << 20, Deps: []uint64{5}},
			{ID: 7, Kind: OpCompute, DurationUs: 5, Deps: []uint64{6}}}
		res := mustReplay(t, topo, ranks)
		if !replayNear(res.Ranks[c.peer].EndUs, 45+c.want) || !replayNear(res.Ranks[0].EndUs, 40+c.want) {
			t.Errorf("peer %d: ends %g and %g, want %g and %g", c.peer, res.Ranks[0].EndUs, res.Ranks[c.peer].EndUs, 40+c.want, 45+c.want)
		}
	}
}

func TestReplayRoofline(t *testing.T) {
	topo := replayTopo(t, 1)
	res, err := Replay(topo, [][]Op{{{ID: 1, Kind: OpCompute, FLOPs: 1e12}}}, ReplayOptions{ComputeEff: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if want := 1e12 / (topo.GPU.TFLOPS * 1e12 * 0.5) * 1e6; !replayNear(res.TotalUs, want) {
		t.Fatalf("%g µs, want %g", res.TotalUs, want)
	}
}

func TestReplayErrors(t *testing.T) {
	topo := replayTopo(t, 1)
	ar := func(id uint64, kind string, deps ...uint64) Op {
		return Op{ID: id, Name: "c", Kind: OpColl, Coll: kind, Bytes: 8, Deps: deps}
	}
	for _, c := range []struct {
		name  string
		ranks [][]Op
		want  string
	}{
		{"cycle", [][]Op{{{ID: 1, Kind: OpCompute, Deps: []uint64{3}}, {ID: 2, Kind: OpCompute, Deps: []uint64{1}}, {ID: 3, Kind: OpCompute, Deps: []uint64{2}}, {ID: 4, Kind: OpCompute}}},
			"rank 0: dependency cycle through ops 1 → 3 → 2 → 1"},
		{"missing", [][]Op{{{ID: 1, Kind: OpCompute}, {ID: 2, Kind: OpCompute, Deps: []uint64{7}}}}, "rank 0 op 2 (): dependency 7 is not an op"},
		{"duplicate", [][]Op{{{ID: 1, Kind: OpCompute}, {ID: 1, Kind: OpCompute}}}, "op id 1 appears twice"},
		{"kind", [][]Op{{{ID: 1, Kind: "gpu"}}}, `kind "gpu"`},
		{"coll", [][]Op{{ar(1, "allreduce")}}, `collective "allreduce"`},
		{"peer", [][]Op{{{ID: 1, Kind: OpSend, Peer: 0}}, {}}, "send peer 0"},
		{"mismatch", [][]Op{{ar(1, "all_reduce")}, {ar(1, "all_gather")}}, "is all_reduce"},
		{"deadlock", [][]Op{{ar(1, "all_reduce"), ar(2, "all_reduce", 1)}, {ar(1, "all_reduce")}},
			`rank 0 op 2 (c) waits in collective 1 of group "" for rank(s) 1`},
		{"no recv", [][]Op{{{ID: 1, Kind: OpSend, Peer: 1}}, {{ID: 1, Kind: OpCompute}}}, "waits in message 0→1 tag 0 #0 for rank(s) 1"},
		{"too many", make([][]Op, 9), "9 ranks"},
		{"roofline", [][]Op{{{ID: 1, Kind: OpCompute, FLOPs: 1}}}, ""},
	} {
		top := topo
		if c.name == "roofline" {
			cp := *topo
			cp.GPU.TFLOPS = 0
			top, c.want = &cp, "need the topology's gpu.tflops"
		}
		_, err := Replay(top, c.ranks, ReplayOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
}

func TestReplayChromeTrace(t *testing.T) {
	topo := replayTopo(t, 1)
	rank := []Op{{ID: 1, Name: "fwd", Kind: OpCompute, DurationUs: 10}, {ID: 2, Name: "ar", Kind: OpColl, Coll: "all_reduce", Bytes: 64, Deps: []uint64{1}},
		{ID: 3, Kind: OpNop, Deps: []uint64{2}}}
	res := mustReplay(t, topo, [][]Op{rank, rank})
	var b bytes.Buffer
	if err := res.WriteChromeTrace(&b); err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name, Ph string
			Pid, Tid int
			Ts, Dur  float64
			Args     map[string]any
		}
	}
	if err := json.Unmarshal(b.Bytes(), &tr); err != nil {
		t.Fatal(err)
	}
	x, crit := 0, 0
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" {
			x++
			if e.Args["critical"] == true {
				crit++
			}
			if e.Name == "ar" && (e.Tid != streamComm || !replayNear(e.Ts, 10) || e.Args["algo"] == "") {
				t.Errorf("all_reduce event %+v", e)
			}
		}
	}
	if x != 4 || crit != 2 {
		t.Fatalf("%d complete events (want 4: no nops), %d critical (want 2)", x, crit)
	}
}

func TestGocclTraceOps(t *testing.T) {
	ev := func(s string) json.RawMessage { return json.RawMessage(s) }
	file := func(pid string) []json.RawMessage {
		return []json.RawMessage{
			ev(`{"name":"process_name","ph":"M","pid":` + pid + `,"tid":0,"args":{"name":"rank"}}`),
			ev(`{"name":"AllReduce","ph":"X","pid":` + pid + `,"tid":0,"ts":1000,"dur":50,"args":{"seq":1,"bytes":1024}}`),
			ev(`{"name":"fwd","ph":"X","pid":` + pid + `,"tid":1,"ts":1060,"dur":100,"args":{}}`),
			ev(`{"name":"ReduceScatter","ph":"X","pid":` + pid + `,"tid":0,"ts":1200,"dur":80,"args":{"seq":2,"bytes":256}}`),
			ev(`{"name":"SendRecv","ph":"X","pid":` + pid + `,"tid":0,"ts":1230,"dur":10,"args":{"seq":0,"bytes":64}}`),
		}
	}
	ranks, err := GocclTraceOps([][]json.RawMessage{file("1"), file("0")})
	if err != nil {
		t.Fatal(err)
	}
	// 1000: AllReduce (1); 1050–1200 compute 150 (2); ReduceScatter (3)
	// overlapped by the SendRecv that starts at 1230: compute 30 after the
	// ReduceScatter's start (4), then the SendRecv (5) as recorded.
	want := []Op{
		{ID: 1, Name: "AllReduce", Kind: OpColl, Coll: "all_reduce", Bytes: 1024},
		{ID: 2, Name: "compute", Kind: OpCompute, DurationUs: 150, Deps: []uint64{1}},
		{ID: 3, Name: "ReduceScatter", Kind: OpColl, Coll: "reduce_scatter", Bytes: 512, Deps: []uint64{2}},
		{ID: 4, Name: "compute", Kind: OpCompute, DurationUs: 30, Deps: []uint64{2}},
		{ID: 5, Name: "SendRecv", Kind: OpComm, DurationUs: 10, Bytes: 64, Deps: []uint64{4}},
	}
	if len(ranks) != 2 || !reflect.DeepEqual(ranks[0], want) {
		t.Fatalf("rank 0:\n got %+v\nwant %+v", ranks[0], want)
	}
	if _, err := GocclTraceOps([][]json.RawMessage{file("0"), file("0")}); err == nil || !strings.Contains(err.Error(), "pid 0") {
		t.Errorf("two files of rank 0: %v", err)
	}
	if _, err := GocclTraceOps([][]json.RawMessage{file("2")}); err == nil || !strings.Contains(err.Error(), "pid 2") {
		t.Errorf("rank 2 of 1: %v", err)
	}
}

// Op.Bytes is each rank's input: an all_gather's is asked for as the
// whole output (nccl-tests' size column), members × Bytes.
func TestReplayAllGatherBytes(t *testing.T) {
	topo := replayTopo(t, 1)
	rank := []Op{{ID: 1, Kind: OpColl, Coll: "all_gather", Bytes: 1 << 20}}
	res := mustReplay(t, topo, [][]Op{rank, rank, rank, rank})
	if want := collTime(t, topo, "all_gather", 4<<20, 4); !replayNear(res.TotalUs, want) {
		t.Fatalf("%g µs, want all_gather of 4 MiB on 4 ranks, %g", res.TotalUs, want)
	}
}

// TestSameCompute: each gap becomes the median over ranks of the compute
// before the same op (a rank without one counts 0), split over a rank's
// compute ops there in their proportions; ranks whose other ops differ are
// refused.
func TestSameCompute(t *testing.T) {
	coll := Op{Name: "AllReduce", Kind: OpColl, Coll: "all_reduce", Bytes: 8}
	comp := func(us float64) Op { return Op{Name: "compute", Kind: OpCompute, DurationUs: us} }
	ranks := [][]Op{
		{comp(10), coll, comp(4)},
		{comp(30), comp(10), coll}, // 40 before the collective, none after
		{comp(20), coll, comp(1)},
	}
	if err := SameCompute(ranks); err != nil {
		t.Fatal(err)
	}
	// Before: median of 10, 40, 20 = 20; after: median of 4, 0, 1 = 1.
	want := [][]float64{{20, 0, 1}, {15, 5, 0}, {20, 0, 1}}
	for r, ops := range ranks {
		for i, o := range ops {
			if o.Kind == OpCompute && math.Abs(o.DurationUs-want[r][i]) > 1e-9 {
				t.Errorf("rank %d op %d: %g µs, want %g", r, i, o.DurationUs, want[r][i])
			}
		}
	}
	bad := [][]Op{{comp(1), coll}, {comp(1), {Name: "Broadcast", Kind: OpColl, Coll: "broadcast"}}}
	if err := SameCompute(bad); err == nil || !strings.Contains(err.Error(), `"Broadcast" on rank 1`) {
		t.Errorf("different ops: %v", err)
	}
	if err := SameCompute([][]Op{{coll}, {coll, coll}}); err == nil || !strings.Contains(err.Error(), "rank 1 has 2 ops") {
		t.Errorf("different counts: %v", err)
	}
}
