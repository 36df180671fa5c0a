package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/goccl/goccl/doctor"
	"github.com/goccl/goccl/doctor/nccltests"
	"github.com/goccl/goccl/sim"
)

// simCLI runs goccl ARGS... in this process.
func simCLI(args ...string) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	code = cli(args, &o, &e)
	return o.String(), e.String(), code
}

// TestSimCollectiveTable: goccl sim collective prints an nccl-tests table
// that the nccl-tests reader reads as the collective on the topology's
// ranks, with the model's predictions in its columns, and goccl plot
// draws it.
func TestSimCollectiveTable(t *testing.T) {
	out, errOut, code := simCLI("sim", "collective", "-t", "dgx-a100", "--nodes", "2", "-c", "all_gather", "-b", "8", "-e", "64M", "-f", "8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	rep, err := nccltests.Read(strings.NewReader(out), nccltests.Options{})
	if err != nil || len(rep.Tests) != 1 {
		t.Fatalf("read back: %v, %d tables\n%s", err, len(rep.Tests), out)
	}
	for _, f := range rep.Findings {
		if f.Severity == doctor.SevError || f.Severity == doctor.SevWarn {
			t.Errorf("finding on the table: %s: %s", f.Code, f.Message)
		}
	}
	tab := rep.Tests[0]
	if tab.Collective != "all_gather" || tab.Ranks != 16 {
		t.Errorf("read as %s on %d ranks, want all_gather on 16", tab.Collective, tab.Ranks)
	}
	topo, err := sim.Preset("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	topo = topo.WithNodes(2)
	ag, _ := lookupColl("all_gather")
	var want []int64 // nccl-tests' size column: 16 ranks × a 16-byte-aligned block
	for s := int64(8); s <= 64<<20; s *= 8 {
		want = append(want, ag.layoutFor(int(s/4), 4, 16).printedSize(4))
	}
	if len(tab.Rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(tab.Rows), len(want))
	}
	for i, r := range tab.Rows {
		if r.Size != want[i] {
			t.Errorf("row %d: size %d, want %d", i, r.Size, want[i])
		}
		pred, err := topo.Collective(sim.Collective{Kind: "all_gather", Bytes: r.Size, Ranks: 16})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := strconv.ParseFloat(strings.TrimSpace(formatTime(pred.TimeUs)), 64)
		if r.OutOfPlace.TimeUS != got || math.Abs(r.OutOfPlace.BusBW-pred.BusBW) > 0.006 || r.InPlace == nil || r.InPlace.TimeUS != got {
			t.Errorf("size %d: time %v busbw %v, want the model's %v and %.2f", r.Size, r.OutOfPlace.TimeUS, r.OutOfPlace.BusBW, got, pred.BusBW)
		}
	}
	if !strings.Contains(out, "# algorithm and protocol by size:") {
		t.Errorf("no algorithm list:\n%s", out)
	}
	dir := t.TempDir()
	table := filepath.Join(dir, "sim.txt")
	if err := os.WriteFile(table, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	png := filepath.Join(dir, "sim.png")
	if _, errOut, code := simCLI("plot", "-o", png, table+"=predicted"); code != 0 || !strings.Contains(errOut, "1 curve(s)") {
		t.Errorf("goccl plot of the table: exit %d: %s", code, errOut)
	}
}

// TestSimCollectiveJSON: --json is goccl perf -J's JSON, which goccl plot
// reads, with the per-size algorithm in its "sim" section; --topo reads a
// topology file, and --ranks and -a reach the model.
func TestSimCollectiveJSON(t *testing.T) {
	topo, err := sim.Preset("goccl-netns")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "topo.json")
	b, _ := json.Marshal(topo)
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := simCLI("sim", "collective", "--topo", file, "--ranks", "3", "-c", "reduce_scatter", "-a", "ring", "-b", "1K", "-e", "1M", "-f", "4", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep simJSONReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Goccl.Collective != "reduce_scatter" || rep.Goccl.NRanks != 3 || len(rep.Results) != 6 || len(rep.Sim.Rows) != 6 || rep.Sim.Topology.Name != topo.Name {
		t.Fatalf("report: %s, %d ranks, %d results, %d sim rows, topology %q", rep.Goccl.Collective, rep.Goccl.NRanks, len(rep.Results), len(rep.Sim.Rows), rep.Sim.Topology.Name)
	}
	for i, r := range rep.Results {
		pred, err := topo.Collective(sim.Collective{Kind: "reduce_scatter", Bytes: r.Size, Algo: "ring", Ranks: 3})
		if err != nil {
			t.Fatal(err)
		}
		if *r.OutOfPlace.Time != pred.TimeUs || r.OutOfPlace.BusBW != pred.BusBW || rep.Sim.Rows[i].Algo != pred.Algo || pred.Algo != "ring" {
			t.Errorf("size %d: %v µs %v GB/s %s, want %v µs %v GB/s %s", r.Size, *r.OutOfPlace.Time, r.OutOfPlace.BusBW, rep.Sim.Rows[i].Algo, pred.TimeUs, pred.BusBW, pred.Algo)
		}
	}
	jf := filepath.Join(dir, "sim.json")
	if err := os.WriteFile(jf, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := simCLI("plot", "-y", "time", "-o", filepath.Join(dir, "t.png"), jf); code != 0 || !strings.Contains(errOut, "1 curve(s)") {
		t.Errorf("goccl plot of the JSON: exit %d: %s", code, errOut)
	}
}

// TestSimCollectiveErrors: bad flags and topologies exit 2 with a message
// naming the value.
func TestSimCollectiveErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"name":"x","nodes":1,"gpus_per_node":8,"speed":3}`), 0o644)
	invalid := filepath.Join(dir, "invalid.json")
	os.WriteFile(invalid, []byte(`{"name":"x","nodes":1,"gpus_per_node":8,"intra":{"kind":"nvswitch","GBps":-1},"runtime":"nccl"}`), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-t", "dgx-z900"}, `no preset "dgx-z900"`},
		{[]string{"-t", "dgx-h100", "--topo", bad}, "give one"},
		{[]string{"--topo", bad}, `"speed"`},
		{[]string{"--topo", invalid}, "intra.GBps = -1"},
		{[]string{"--topo", filepath.Join(dir, "missing.json")}, "missing.json"},
		{[]string{"-c", "allfoo"}, `unknown collective "allfoo"`},
		{[]string{"-b", "1M", "-e", "1K"}, "-b 1048576 is larger than -e 1024"},
		{[]string{"-f", "1", "-i", "0"}, "-f must be > 1"},
		{[]string{"-b", "0", "-e", "8G", "-f", "1", "-i", "1"}, "8589934593 sizes from -b 0 to -e 8589934592: at most 100000"},
		{[]string{"--ranks", "9"}, "--ranks 9: the topology dgx-h100 has 8 GPUs"},
		{[]string{"--nodes", "-1"}, "--nodes -1"},
		{[]string{"-a", "zigzag"}, `-a "zigzag"`},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--nodez", "2"}, `did you mean "--nodes"`},
	} {
		_, errOut, code := simCLI(append([]string{"sim", "collective"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
	if _, errOut, code := simCLI("sim", "colective"); code != 2 || !strings.Contains(errOut, `did you mean "collective"`) {
		t.Errorf("misspelt subcommand: exit %d, %q", code, errOut)
	}
	if out, _, code := simCLI("help"); code != 0 || !strings.Contains(out, "\tsim ") {
		t.Errorf("help: exit %d, sim not listed\n%s", code, out)
	}
	if _, errOut, code := simCLI("sim"); code != 2 || !strings.Contains(errOut, "usage: goccl sim collective") {
		t.Errorf("sim alone: exit %d\n%s", code, errOut)
	}
	if out, _, code := simCLI("help", "sim"); code != 0 || !strings.Contains(out, "goccl sim validate --csv FILE") {
		t.Errorf("help sim: exit %d\n%s", code, out)
	}
}

// TestSimPresets: every preset is listed, as text and as topology JSON
// that sim.Load reads back.
func TestSimPresets(t *testing.T) {
	out, errOut, code := simCLI("sim", "presets")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, p := range sim.Presets() {
		if !strings.Contains(out, "\n"+p+" ") {
			t.Errorf("preset %s not listed:\n%s", p, out)
		}
	}
	out, errOut, code = simCLI("sim", "presets", "--json")
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errOut)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil || len(raw) != len(sim.Presets()) {
		t.Fatalf("--json: %v, %d presets, want %d", err, len(raw), len(sim.Presets()))
	}
	for i, r := range raw {
		topo, err := sim.Load(bytes.NewReader(r))
		if err != nil || topo.Name != sim.Presets()[i] {
			t.Errorf("preset %d: %v, %+v", i, err, topo)
		}
	}
}

// TestSimValidate: goccl sim validate prints every row of the
// repository's published measurements with its status, then the summary;
// --json holds the same rows; bad input exits 2.
func TestSimValidate(t *testing.T) {
	file := filepath.Join("..", "..", "sim", "testdata", "published.csv")
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := sim.ReadPublished(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := simCLI("sim", "validate", "--csv", file)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	lines := strings.Split(out, "\n")
	for _, r := range rows {
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, fmt.Sprintf("%d ", r.Line)) && strings.Contains(l, r.System)
		}
		if !found {
			t.Errorf("line %d (%s) not printed:\n%s", r.Line, r.System, out)
		}
	}
	rep := sim.ValidatePublished(rows)
	want := fmt.Sprintf("%d rows: %d ok, %d not modelled, 0 errors", len(rows), rep.Summary.OK, rep.Summary.NotModelled)
	if !strings.Contains(out, want) || !strings.Contains(out, "kv-transfer") || !strings.Contains(out, "collectives ≥ 1 MiB: ") || !strings.Contains(out, "training steps: 6 rows") {
		t.Errorf("want %q, the KV and step rows and the summary:\n%s", want, out)
	}
	out, errOut, code = simCLI("sim", "validate", "--csv", file, "--json")
	var got sim.ValidationReport
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got.Rows) != len(rows) || got.Summary != rep.Summary {
		t.Errorf("--json: exit %d %s: %d rows, summary %+v, want %+v", code, errOut, len(got.Rows), got.Summary, rep.Summary)
	}

	dir := t.TempDir()
	unknown := filepath.Join(dir, "unknown.csv")
	os.WriteFile(unknown, []byte("system,gpus,nodes,workload,algo,bytes,metric,value,source\nCray-XYZ,8,1,all_reduce,default,8,time_us,10,s\n"), 0o644)
	badCol := filepath.Join(dir, "bad.csv")
	os.WriteFile(badCol, []byte("system,gpus,nodes,workload,algo,bytes,metric,value\nH100-DGX,8,1,all_reduce,default,8,time_us,10\n"), 0o644)
	for _, c := range []struct {
		args    []string
		code    int
		out, in string // in stdout, in stderr
	}{
		{[]string{"--csv", unknown}, 2, `unknown system "Cray-XYZ"`, "1 row(s) could not be read"},
		{[]string{"--csv", badCol}, 2, "", `line 1: no column "source"`},
		{[]string{"--csv", filepath.Join(dir, "missing.csv")}, 2, "", "missing.csv"},
		{nil, 2, "", "--csv FILE is required"},
	} {
		out, errOut, code := simCLI(append([]string{"sim", "validate"}, c.args...)...)
		if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(errOut, c.in) {
			t.Errorf("%q: exit %d\nstdout %q\nstderr %q\nwant %d, %q, %q", c.args, code, out, errOut, c.code, c.out, c.in)
		}
	}
	simValidateInput = strings.NewReader("system,gpus,nodes,workload,algo,bytes,metric,value,source\nH100-DGX,8,1,all_reduce float sum,ring,large,busbw_GBps,300,s\n")
	defer func() { simValidateInput = os.Stdin }()
	if out, errOut, code := simCLI("sim", "validate", "--csv", "-"); code != 0 || !strings.Contains(out, "1 rows: 1 ok") {
		t.Errorf("--csv -: exit %d %s\n%s", code, errOut, out)
	}
}

// TestSimSizeCount: the count matches the sizes goccl perf lists.
func TestSimSizeCount(t *testing.T) {
	for _, s := range []perfConfig{
		{minBytes: 8, maxBytes: 8 << 30, stepFactor: 2},
		{minBytes: 8, maxBytes: 8<<30 - 1, stepFactor: 2},
		{minBytes: 1, maxBytes: 1<<62 + 5, stepFactor: 3},
		{minBytes: 5, maxBytes: 5, stepFactor: 7},
		{minBytes: 0, maxBytes: 1000, stepFactor: 1, stepBytes: 7},
		{minBytes: 100, maxBytes: 100, stepBytes: 1},
	} {
		if n, want := simSizeCount(&s), int64(len(s.sizes())); n != want {
			t.Errorf("%d to %d, factor %d, step %d: %d sizes, want %d", s.minBytes, s.maxBytes, s.stepFactor, s.stepBytes, n, want)
		}
	}
}
