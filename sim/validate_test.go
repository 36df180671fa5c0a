package sim

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
)

const csvHeader = "system,gpus,nodes,workload,algo,bytes,metric,value,source\n"

func readCSV(t *testing.T, body string) []Published {
	t.Helper()
	rows, err := ReadPublished(strings.NewReader(body))
	if err != nil {
		t.Fatalf("ReadPublished: %v", err)
	}
	return rows
}

// readCSVFile reads a validation CSV of testdata.
func readCSVFile(t *testing.T, path string) []Published {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return readCSV(t, string(b))
}

// TestValidatePublishedFile: every row of the repository's file is read
// and either predicted or reported as not modelled (never an error), and
// the rows the model covers are exactly the collective ones.
func TestValidatePublishedFile(t *testing.T) {
	rows := readCSVFile(t, "testdata/published.csv")
	rep := ValidatePublished(rows)
	if len(rep.Rows) != len(rows) || rep.Summary.Rows != len(rows) {
		t.Fatalf("%d rows in, %d results, summary %d", len(rows), len(rep.Rows), rep.Summary.Rows)
	}
	ok, steps, transfers := 0, 0, 0
	for _, r := range rep.Rows {
		if r.Metric == "step_s" && r.Status == StatusOK {
			steps++
		}
		if r.Metric == "GBps" && r.Status == StatusOK {
			transfers++
		}
		collective := r.Metric == "time_us" || r.Metric == "busbw_GBps" || r.Metric == "step_s" || r.Metric == "GBps"
		switch {
		case r.Status == StatusError:
			t.Errorf("line %d (%s, %s): error: %s", r.Line, r.System, r.Workload, r.Reason)
		case collective && r.Status != StatusOK:
			t.Errorf("line %d (%s): status %s (%s), want ok", r.Line, r.Workload, r.Status, r.Reason)
		case !collective && (r.Status != StatusNotModelled || r.Reason == ""):
			t.Errorf("line %d (%s): status %s reason %q, want not-modelled with a reason", r.Line, r.Workload, r.Status, r.Reason)
		case r.Status == StatusOK:
			ok++
			want := (r.Predicted - r.Value) / r.Value
			if !(r.Predicted > 0) || math.IsInf(r.Predicted, 0) || r.Error != want || r.ModelAlgo == "" || r.Model == "" {
				t.Errorf("line %d: predicted %v error %v (want %v) algo %q model %q", r.Line, r.Predicted, r.Error, want, r.ModelAlgo, r.Model)
			}
		}
		if r.Metric == "step_s" && !strings.Contains(r.Model, "micro-batches") {
			t.Errorf("line %d: model %q, want the training step's split named", r.Line, r.Model)
		}
	}
	s := rep.Summary
	if s.OK != ok || s.OK+s.NotModelled+s.Errors != s.Rows || s.Large.Rows+s.Small.Rows != ok-steps-transfers ||
		s.Steps.Rows != steps || s.Transfers.Rows != transfers || s.Small.Rows == 0 || s.Large.Rows == 0 || steps == 0 {
		t.Errorf("summary %+v with %d ok rows", s, ok)
	}
}

// TestValidateError: the error is (predicted − published)/published, with
// the row mapped to the preset its system names (checked by predicting
// the same collective directly).
func TestValidateError(t *testing.T) {
	topo, err := Preset("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	want, err := topo.Collective(Collective{Kind: "all_reduce", Bytes: 1 << 20, Ranks: 8})
	if err != nil {
		t.Fatal(err)
	}
	ring, err := topo.Collective(Collective{Kind: "all_reduce", Bytes: 1 << 20, Algo: "ring", Ranks: 8})
	if err != nil {
		t.Fatal(err)
	}
	body := csvHeader + fmt.Sprintf(
		"H100-DGX-NVSwitch,8,1,all_reduce float sum,default (NVLS),1048576,time_us,%v,s\n"+
			"H100-DGX,8,1,allreduce,default,1048576,busbw_GBps,%v,s\n"+
			"h100-dgx-nvswitch,8,1,all_reduce float sum,ring (NCCL_ALGO=Ring),1048576,algbw_GBps,%v,s\n",
		want.TimeUs, want.BusBW*1.25, ring.AlgBW)
	rep := ValidatePublished(readCSV(t, body))
	checks := []struct {
		pred, err float64
		algo      string
	}{{want.TimeUs, 0, want.Algo}, {want.BusBW, -0.2, want.Algo}, {ring.AlgBW, 0, "ring"}}
	for i, c := range checks {
		r := rep.Rows[i]
		if r.Status != StatusOK || r.Predicted != c.pred || math.Abs(r.Error-c.err) > 1e-12 || r.ModelAlgo != c.algo {
			t.Errorf("row %d: %+v, want predicted %v error %v algo %s", i, r, c.pred, c.err, c.algo)
		}
	}
	if s := rep.Summary.Large; s.Rows != 3 || math.Abs(s.MedianAbs) > 1e-12 || math.Abs(s.P95Abs-0.2) > 1e-12 || !s.Met {
		t.Errorf("summary %+v: want 3 rows, median 0, p95 0.2, met", s)
	}
}

// TestValidateSystems: every system maps to an existing preset, with the
// row's GPUs spread over its nodes and the NIC changes of the table.
func TestValidateSystems(t *testing.T) {
	for _, s := range validationSystems {
		if _, err := Preset(s.preset); err != nil {
			t.Errorf("system %q: %v", s.name, err)
		}
		if s.note == "" {
			t.Errorf("system %q: no note", s.name)
		}
	}
	cases := []struct {
		system        string
		gpus, nodes   int
		perNode, nics int
		gbps          float64
	}{
		{"A100 4x HDR 200G per node", 24, 3, 8, 4, 200},
		{"NDR-400G-ConnectX-7", 2, 2, 1, 1, 400},
		{"DGX-A100 8x200G HDR IB", 16, 2, 8, 8, 200},
		{"H100-HGX-NVSwitch", 4, 1, 8, 8, 400},
	}
	for _, c := range cases {
		s, ok := lookupSystem(c.system)
		if !ok {
			t.Fatalf("system %q not found", c.system)
		}
		topo, err := s.topology(c.gpus, c.nodes)
		if err != nil {
			t.Fatalf("%s: %v", c.system, err)
		}
		if topo.Nodes != c.nodes || topo.GPUsPerNode != c.perNode || topo.NICsPerNode != c.nics || topo.NICGbps != c.gbps {
			t.Errorf("%s on %d GPUs, %d nodes: %d nodes × %d GPUs, %d × %g Gbit/s; want %d × %d, %d × %g",
				c.system, c.gpus, c.nodes, topo.Nodes, topo.GPUsPerNode, topo.NICsPerNode, topo.NICGbps, c.nodes, c.perNode, c.nics, c.gbps)
		}
	}
}

// TestValidateRowErrors: rows the tool cannot map are reported with why.
func TestValidateRowErrors(t *testing.T) {
	cases := []struct{ row, status, reason string }{
		{"Cray-XYZ,8,1,all_reduce float sum,default,1024,time_us,10,s", StatusError, `unknown system "Cray-XYZ"`},
		{"H100-DGX,8,1,all_reduce float sum,default,1024,latency_ms,10,s", StatusError, `unknown metric "latency_ms"`},
		{"H100-DGX,8,1,allgatherv float,default,1024,time_us,10,s", StatusError, `unknown workload "allgatherv float"`},
		{"H100-DGX,8,1,all_reduce float sum,bogus,1024,time_us,10,s", StatusError, `"bogus"`},
		{"H100-DGX,8,1,all_reduce float sum,default,,time_us,10,s", StatusError, "no bytes"},
		{"H100-DGX,12,1,all_reduce float sum,default,1024,time_us,10,s", StatusError, "12 GPUs on one node"},
		{"H100-DGX,9,2,all_reduce float sum,default,1024,time_us,10,s", StatusError, "9 GPUs do not spread evenly over 2 nodes"},
		{"H100-DGX,64,8,GPT-3 TP8,megatron,,step_s,1.5,s", StatusError, "layers = 0"},
		{"RoCE 4x200G per host,2,2,KV-cache transfer 1 GB,x,,GBps,80,s", StatusError, "no bytes"},
	}
	for _, c := range cases {
		rep := ValidatePublished(readCSV(t, csvHeader+c.row+"\n"))
		r := rep.Rows[0]
		if r.Status != c.status || !strings.Contains(r.Reason, c.reason) || r.Predicted != 0 || r.Error != 0 {
			t.Errorf("%s:\n got status %s reason %q predicted %v, want %s with %q", c.row, r.Status, r.Reason, r.Predicted, c.status, c.reason)
		}
		if s := rep.Summary; s.Large.Rows+s.Small.Rows != 0 || s.Errors+s.NotModelled != 1 {
			t.Errorf("%s: summary %+v counts it as modelled", c.row, s)
		}
	}
}

// TestReadPublishedErrors: bad files fail with the line and the column.
func TestReadPublishedErrors(t *testing.T) {
	row := "H100-DGX,8,1,all_reduce float sum,default,1024,time_us,10,s\n"
	cases := []struct{ body, want string }{
		{"", "empty file"},
		{csvHeader, "line 1: a header and no rows"},
		{"system,gpus,nodes,workload,algo,bytes,metric,value\n" + row, `line 1: no column "source"`},
		{"system,gpus,nodes,workload,algo,bytes,metric,value,source,extra\n" + row, `line 1, column 10: unknown column "extra"`},
		{"system,gpus,gpus,workload,algo,bytes,metric,value,source\n" + row, `line 1, column 3: column "gpus" appears twice`},
		{csvHeader + "H100-DGX,8,1\n", "line 2: 3 fields, the header has 9"},
		{csvHeader + "H100-DGX,eight,1,all_reduce,default,1024,time_us,10,s\n", `line 2, column gpus: "eight"`},
		{csvHeader + "H100-DGX,8,0,all_reduce,default,1024,time_us,10,s\n", `line 2, column nodes: "0"`},
		{csvHeader + row + "H100-DGX,8,1,all_reduce,default,1K,time_us,10,s\n", `line 3, column bytes: "1K"`},
		{csvHeader + "H100-DGX,8,1,all_reduce,default,1024,time_us,0,s\n", `line 2, column value: "0" is not a positive number`},
		{csvHeader + "H100-DGX,8,1,all_reduce,default,1024,time_us,NaN,s\n", `line 2, column value: "NaN"`},
		{csvHeader + ",8,1,all_reduce,default,1024,time_us,1,s\n", `line 2, column system: "" is empty`},
		{csvHeader + "H100-DGX,8,1,\"all_reduce,default,1024,time_us,1,s\n", "line 2"},
	}
	for _, c := range cases {
		_, err := ReadPublished(strings.NewReader(c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.body, err, c.want)
		}
	}
}

// TestReadPublishedLayout: comment lines, columns in another order and a
// byte-order mark are read, with the file's line numbers.
func TestReadPublishedLayout(t *testing.T) {
	body := "\ufeff# a comment\n# another, with commas\nsource,value,metric,bytes,algo,workload,nodes,gpus,system\n" +
		"paper,12.5,time_us,large,ring,all_gather float,2,16,DGX-A100 8x200G HDR IB\n"
	rows := readCSV(t, body)
	want := Published{Line: 4, System: "DGX-A100 8x200G HDR IB", GPUs: 16, Nodes: 2, Workload: "all_gather float", Algo: "ring",
		Bytes: "large", Metric: "time_us", Value: 12.5, Source: "paper"}
	if len(rows) != 1 || rows[0] != want {
		t.Fatalf("rows %+v, want %+v", rows, want)
	}
	r := ValidatePublished(rows).Rows[0]
	if r.Status != StatusOK || r.ModelAlgo != "ring" || !strings.Contains(r.Model, fmt.Sprint(PlateauBytes)) {
		t.Errorf("%+v: want ok, ring, at %d bytes", r, PlateauBytes)
	}
}

func TestErrorStats(t *testing.T) {
	cases := []struct {
		abs         []float64
		median, p95 float64
	}{
		{[]float64{0.04, 0.01, 0.03, 0.02}, 0.025, 0.04},
		{[]float64{0.3, 0.1, 0.2}, 0.2, 0.3},
		{[]float64{0.5}, 0.5, 0.5},
	}
	for _, c := range cases {
		s := errorStats(append([]float64(nil), c.abs...), 0.2)
		if s.Rows != len(c.abs) || math.Abs(s.MedianAbs-c.median) > 1e-12 || s.P95Abs != c.p95 || s.Met != (c.median <= 0.2) {
			t.Errorf("%v: %+v, want median %v p95 %v", c.abs, s, c.median, c.p95)
		}
	}
	// 20 values 0.01 … 0.20: the nearest-rank 95th percentile is the 19th.
	var v []float64
	for i := 20; i >= 1; i-- {
		v = append(v, float64(i)/100)
	}
	if s := errorStats(v, 0.05); math.Abs(s.P95Abs-0.19) > 1e-12 || math.Abs(s.MedianAbs-0.105) > 1e-12 || s.Met {
		t.Errorf("0.01…0.20: %+v, want median 0.105, p95 0.19, missed", s)
	}
	if s := errorStats(nil, 0.05); s.Rows != 0 || s.Met {
		t.Errorf("no rows: %+v", s)
	}
}

// TestValidateNetns: goccl's own runs on namespace clusters
// (testdata/netns.csv, scripts/sim-netns.sh) are all predicted, with the
// calibration measured apart (send/recv only) applied to every row.
func TestValidateNetns(t *testing.T) {
	rows := readCSVFile(t, "testdata/netns.csv")
	cf, err := os.Open("testdata/netns-calibration.json")
	if err != nil {
		t.Fatal(err)
	}
	defer cf.Close()
	cal, err := LoadCalibration(cf)
	if err != nil {
		t.Fatal(err)
	}
	rep := ValidatePublished(rows, cal)
	for _, r := range rep.Rows {
		if r.Status != StatusOK || !strings.HasPrefix(r.Model, "calibrated goccl-netns") || !(r.Predicted > 0) {
			t.Fatalf("line %d: %s %q %v (%s)", r.Line, r.Status, r.Model, r.Predicted, r.Reason)
		}
	}
	if s := rep.Summary; s.OK != len(rows) || s.Large.Rows == 0 || s.Small.Rows == 0 {
		t.Errorf("summary %+v", s)
	}
}
