package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlot: goccl plot draws every table of nccl-tests-format files as a
// curve into a PNG (or SVG) image, and refuses bad input with a message.
func TestPlot(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "busbw.png")
	var stdout, stderr bytes.Buffer
	in := filepath.Join("testdata", "nccl-tests-lines.txt")
	if code := cli([]string{"plot", "-o", out, in + "=nccl-tests", in}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil || cfg.Width < 400 || cfg.Height < 200 {
		t.Fatalf("%s: %v, %dx%d", out, err, cfg.Width, cfg.Height)
	}
	if !strings.Contains(stderr.String(), "6 curve(s)") { // 3 tables, twice
		t.Errorf("stderr: %q", stderr.String())
	}
	svg := filepath.Join(dir, "t.svg")
	stderr.Reset()
	if code := cli([]string{"plot", "-y", "time", "-o", svg, in}, &stdout, &stderr); code != 0 {
		t.Fatalf("-y time, svg: exit %d: %s", code, stderr.String())
	}
	if b, _ := os.ReadFile(svg); !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("time (µs)")) {
		t.Errorf("%s is not the SVG plot of times", svg)
	}
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, []byte("no table here\n"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"plot"}, 2, "no input files"},
		{[]string{"plot", "-y", "speed", in}, 2, `-y "speed"`},
		{[]string{"plot", "-o", filepath.Join(dir, "x.png"), filepath.Join(dir, "missing.txt")}, 1, "missing.txt"},
		{[]string{"plot", "-o", filepath.Join(dir, "x.png"), empty}, 1, "no nccl-tests result table"},
	} {
		stderr.Reset()
		if code := cli(c.args, &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}

// TestPerfPlot: goccl perf -plot draws rank 0's table.
func TestPerfPlot(t *testing.T) {
	out := filepath.Join(t.TempDir(), "busbw.png")
	var stdout, stderr bytes.Buffer
	if code := cli([]string{"perf", "all_reduce", "-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-w", "1", "-plot", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatalf("no plot: %v (stderr %q)", err, stderr.String())
	}
	defer f.Close()
	if _, err := png.DecodeConfig(f); err != nil {
		t.Errorf("%s: %v", out, err)
	}
}

// TestPlotPerfJSON: goccl plot reads the JSON file goccl perf -J writes
// (one curve, named by the collective and the ranks), and nccl-tests' own
// JSON, whose collective is in the program's name.
func TestPlotPerfJSON(t *testing.T) {
	dir := t.TempDir()
	js := filepath.Join(dir, "perf.json")
	var stdout, stderr bytes.Buffer
	if code := cli([]string{"perf", "all_reduce", "-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-w", "1", "-J", js}, &stdout, &stderr); code != 0 {
		t.Fatalf("perf -J: exit %d: %s", code, stderr.String())
	}
	svg := filepath.Join(dir, "busbw.svg")
	stderr.Reset()
	if code := cli([]string{"plot", "-o", svg, js + "=goccl"}, &stdout, &stderr); code != 0 {
		t.Fatalf("plot of perf -J: exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "1 curve(s)") {
		t.Errorf("stderr: %q", stderr.String())
	}
	if b, _ := os.ReadFile(svg); !bytes.Contains(b, []byte("goccl: all_reduce, 1 ranks")) {
		t.Errorf("%s lacks the curve's label", svg)
	}

	// nccl-tests' JSON: no "goccl" section; two reports in one file.
	nccl := `{"version": 3, "args": ["./build/all_gather_perf", "-b", "8"], "config": {"devices": [{"rank": 0}, {"rank": 1}]},
 "results": [{"size": 8, "count": 1, "type": "float", "redop": "none", "root": "    -1",
   "out_of_place": {"time": 10.5, "alg_bw": 0.5, "bus_bw": 0.25, "nwrong": 0},
   "in_place": {"time": 9.5, "alg_bw": 0.6, "bus_bw": 0.3, "nwrong": null}},
  {"size": 1024, "count": 128, "type": "float", "redop": "none", "root": "    -1",
   "out_of_place": {"time": 20, "alg_bw": 50, "bus_bw": 25, "nwrong": 0},
   "in_place": {"time": 19, "alg_bw": 52, "bus_bw": 26, "nwrong": 0}}]}
{"version": 3, "args": ["all_reduce_perf"], "results": [{"size": 64, "out_of_place": {"cpu_time": 3, "alg_bw": 1, "bus_bw": 1}, "in_place": {"cpu_time": 3, "alg_bw": 1, "bus_bw": 1}}]}
`
	tests, err := readTests(strings.NewReader(nccl))
	if err != nil {
		t.Fatal(err)
	}
	if len(tests) != 2 || tests[0].Collective != "all_gather" || tests[0].Ranks != 2 || len(tests[0].Rows) != 2 ||
		tests[1].Collective != "all_reduce" || tests[1].Rows[0].OutOfPlace.TimeUS != 3 {
		t.Fatalf("tables %+v", tests)
	}
	if r := tests[0].Rows[1]; r.Size != 1024 || r.OutOfPlace.BusBW != 25 || r.InPlace == nil || r.InPlace.TimeUS != 19 {
		t.Errorf("row %+v", r)
	}
	if _, err := readTests(strings.NewReader(`{"version": 3, "results": [`)); err == nil || !strings.Contains(err.Error(), "JSON report 1") {
		t.Errorf("truncated JSON: %v", err)
	}
}
