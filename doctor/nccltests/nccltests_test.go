package nccltests

import (
	"io"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/goccl/goccl/doctor"
	"github.com/goccl/goccl/doctor/internal/doctortest"
)

func testsRead(t *testing.T, text string, opt Options) *Report {
	t.Helper()
	return doctortest.Read(t, func(r io.Reader) (*Report, error) { return Read(r, opt) }, text)
}

// testsRowAt returns the row of size in test tt.
func testsRowAt(t *testing.T, tt Test, size int64) Row {
	t.Helper()
	for _, r := range tt.Rows {
		if r.Size == size {
			return r
		}
	}
	t.Fatalf("no row of size %d", size)
	return Row{}
}

func TestNCCLTestsReal01AllReduce16Ranks(t *testing.T) {
	rep := testsRead(t, doctortest.RealInput(t, "nccl-tests-01.txt"), Options{})
	if len(rep.Tests) != 1 {
		t.Fatalf("tests = %d, want 1", len(rep.Tests))
	}
	tt := rep.Tests[0]
	if tt.Collective != "all_reduce" || tt.CollectiveFrom != "command" {
		t.Errorf("collective %q from %q", tt.Collective, tt.CollectiveFrom)
	}
	if tt.Ranks != 16 || tt.RanksFrom != "devices" {
		t.Errorf("ranks %d from %q, want 16 from devices", tt.Ranks, tt.RanksFrom)
	}
	if len(tt.Rows) != 31 {
		t.Errorf("rows = %d, want 31", len(tt.Rows))
	}
	r := testsRowAt(t, tt, 8589934592)
	if r.OutOfPlace.BusBW != 338.82 || r.InPlace == nil || r.InPlace.BusBW != 337.35 {
		t.Errorf("8 GiB row busbw %v / %+v", r.OutOfPlace.BusBW, r.InPlace)
	}
	if r.Count != 2147483648 || r.Type != "float" || r.Redop != "sum" || !r.HasRoot || r.Root != -1 {
		t.Errorf("8 GiB row params %+v", r)
	}
	if r := testsRowAt(t, tt, 2147483648); r.OutOfPlace.TimeUS != 12646 || r.InPlace.TimeUS != 12641 {
		t.Errorf("time without decimals: %v %v", r.OutOfPlace.TimeUS, r.InPlace.TimeUS)
	}
	if tt.PeakBusBW != 338.82 || tt.PeakSize != 8589934592 {
		t.Errorf("peak %v at %d", tt.PeakBusBW, tt.PeakSize)
	}
	if !tt.HasAvg || tt.AvgBusBW != 70.742 || tt.OutOfBounds != 0 {
		t.Errorf("footer avg %v (%v) oob %d", tt.AvgBusBW, tt.HasAvg, tt.OutOfBounds)
	}
	for _, r := range tt.Rows {
		if r.OutOfPlace.Wrong != 0 || r.InPlace.Wrong != 0 || r.BusBWMismatch {
			t.Errorf("row %d: wrong %d/%d mismatch %v", r.Size, r.OutOfPlace.Wrong, r.InPlace.Wrong, r.BusBWMismatch)
		}
	}
	codes := doctortest.Codes(rep.Findings, "")
	if doctor.HasErrors(rep.Findings) || codes["busbw-mismatch"] != 0 || codes["avg-busbw-mismatch"] != 0 || codes["avg-busbw"] != 1 {
		t.Errorf("findings %v", rep.Findings)
	}
	// expectation: 400 GB/s -> sizes >= 64 MiB below 320 flagged: all 8 of them
	rep = testsRead(t, doctortest.RealInput(t, "nccl-tests-01.txt"), Options{ExpectBusBW: 400})
	// 4 GiB (330.58) and 8 GiB (338.82) reach 320
	f, ok := doctortest.FindingWith(rep.Findings, "busbw-below-expected", "6 of 8 sizes")
	if !ok || f.Severity != doctor.SevWarn {
		t.Errorf("expect 400: %v", rep.Findings)
	}
	// 380 GB/s: 80 % = 304 -> 2 GiB (318.40), 4 GiB, 8 GiB pass; 64 MiB .. 1 GiB (5 sizes) fail
	rep = testsRead(t, doctortest.RealInput(t, "nccl-tests-01.txt"), Options{ExpectBusBW: 380})
	if _, ok := doctortest.FindingWith(rep.Findings, "busbw-below-expected", "5 of 8 sizes"); !ok {
		t.Errorf("expect 380: %v", rep.Findings)
	}
	// 300 -> 240: 64, 128 and 256 MiB (213.28) are below
	rep = testsRead(t, doctortest.RealInput(t, "nccl-tests-01.txt"), Options{ExpectBusBW: 300})
	if _, ok := doctortest.FindingWith(rep.Findings, "busbw-below-expected", "3 of 8 sizes"); !ok {
		t.Errorf("expect 300: %v", rep.Findings)
	}
	// 100 -> 80: 64 MiB reaches 99.74, and 32 MiB (59.69) is too small to count
	rep = testsRead(t, doctortest.RealInput(t, "nccl-tests-01.txt"), Options{ExpectBusBW: 100})
	if doctortest.Codes(rep.Findings, "")["busbw-below-expected"] != 0 {
		t.Errorf("expect 100: %v", rep.Findings)
	}
}

func TestNCCLTestsReal03AllGatherSizeZero(t *testing.T) {
	rep := testsRead(t, doctortest.RealInput(t, "nccl-tests-03.txt"), Options{})
	if len(rep.Tests) != 1 {
		t.Fatalf("tests = %d", len(rep.Tests))
	}
	tt := rep.Tests[0]
	if tt.Collective != "all_gather" || tt.Ranks != 2 || tt.RanksFrom != "devices" {
		t.Errorf("%s %d %s", tt.Collective, tt.Ranks, tt.RanksFrom)
	}
	if len(tt.Rows) != 28 || tt.Rows[0].Size != 0 || tt.Rows[1].Size != 0 || tt.Rows[0].Count != 0 {
		t.Errorf("rows %d, first %+v", len(tt.Rows), tt.Rows[0])
	}
	r := testsRowAt(t, tt, 1073741824)
	if r.OutOfPlace.BusBW != 3.79 || r.InPlace.BusBW != 3.84 || r.Redop != "none" {
		t.Errorf("1 GiB row %+v %+v", r.OutOfPlace, r.InPlace)
	}
	if tt.PeakBusBW != 3.84 || tt.AvgBusBW != 1.6651 {
		t.Errorf("peak %v avg %v", tt.PeakBusBW, tt.AvgBusBW)
	}
	// busbw = algbw/2 holds within the printed rounding on every row
	if c := doctortest.Codes(rep.Findings, ""); c["busbw-mismatch"] != 0 || c["avg-busbw-mismatch"] != 0 {
		t.Errorf("findings %v", rep.Findings)
	}
	// Without the device block the rank count comes from size/count.
	text := doctortest.RealInput(t, "nccl-tests-03.txt")
	var kept []string
	for _, l := range strings.Split(text, "\n") {
		if !strings.Contains(l, "Rank") && !strings.Contains(l, "nThread") && !strings.Contains(l, "_perf") {
			kept = append(kept, l)
		}
	}
	rep = testsRead(t, strings.Join(kept, "\n"), Options{})
	tt = rep.Tests[0]
	if tt.Collective != "all_gather" || tt.CollectiveFrom != "layout" || tt.Ranks != 2 || tt.RanksFrom != "size-count" {
		t.Errorf("stripped: %s from %s, %d ranks from %s", tt.Collective, tt.CollectiveFrom, tt.Ranks, tt.RanksFrom)
	}
}

func TestNCCLTestsReal07SendRecvNA(t *testing.T) {
	rep := testsRead(t, doctortest.RealInput(t, "nccl-tests-07.txt"), Options{})
	if len(rep.Tests) != 1 {
		t.Fatalf("tests = %d", len(rep.Tests))
	}
	tt := rep.Tests[0]
	if tt.Collective != "sendrecv" || tt.CollectiveFrom != "command" || tt.Ranks != 8 || tt.RanksFrom != "command" {
		t.Errorf("%s from %s, %d ranks from %s", tt.Collective, tt.CollectiveFrom, tt.Ranks, tt.RanksFrom)
	}
	if len(tt.Rows) != 4 || tt.HasAvg {
		t.Errorf("rows %d avg %v", len(tt.Rows), tt.HasAvg)
	}
	for _, r := range tt.Rows {
		if r.InPlace.Wrong != -1 || r.OutOfPlace.Wrong != 0 || r.OutOfPlace.BusBW != r.OutOfPlace.AlgBW {
			t.Errorf("row %+v", r)
		}
	}
	r := testsRowAt(t, tt, 1073741824)
	if r.OutOfPlace.BusBW != 195.10 || r.InPlace.BusBW != 195.56 || tt.PeakBusBW != 195.56 {
		t.Errorf("1 GiB %+v %+v peak %v", r.OutOfPlace, r.InPlace, tt.PeakBusBW)
	}
	if _, ok := doctortest.FindingWith(rep.Findings, "peak-busbw", "195.56"); !ok || doctor.HasErrors(rep.Findings) {
		t.Errorf("findings %v", rep.Findings)
	}
	// Without the command line the all-N/A in-place column says sendrecv.
	rep = testsRead(t, strings.SplitN(doctortest.RealInput(t, "nccl-tests-07.txt"), "\n", 2)[1], Options{})
	if rep.Tests[0].Collective != "sendrecv" || rep.Tests[0].CollectiveFrom != "layout" {
		t.Errorf("layout guess %s", rep.Tests[0].Collective)
	}
}

func TestNCCLTestsReal11OldFormat(t *testing.T) {
	rep := testsRead(t, doctortest.RealInput(t, "nccl-tests-11.txt"), Options{})
	if len(rep.Tests) != 2 {
		t.Fatalf("tests = %d, want 2 (13-field and 10-field tables)", len(rep.Tests))
	}
	a, b := rep.Tests[0], rep.Tests[1]
	if len(a.Rows) != 12 || len(b.Rows) != 12 || a.Format != "old" || b.Format != "old" {
		t.Errorf("rows %d/%d formats %s/%s", len(a.Rows), len(b.Rows), a.Format, b.Format)
	}
	if a.Rows[0].Redop != "sum" || !a.Rows[0].HasRoot || a.Rows[0].Root != 0 || a.Collective != "reduce" {
		t.Errorf("table A: %+v coll %s", a.Rows[0], a.Collective)
	}
	if b.Rows[0].Redop != "" || b.Rows[0].HasRoot || b.Rows[0].Size != 65536 || b.Rows[0].OutOfPlace.TimeUS != 16.57 {
		t.Errorf("table B first row %+v", b.Rows[0])
	}
	// busbw == algbw with size = 2*count*4: no collective fits
	if b.Collective != "unknown" {
		t.Errorf("table B collective %s", b.Collective)
	}
	if !b.HasAvg || b.AvgBusBW != 6.6972 || a.HasAvg {
		t.Errorf("avg A %v B %v %v", a.HasAvg, b.HasAvg, b.AvgBusBW)
	}
	r := testsRowAt(t, b, 67108864)
	if r.OutOfPlace.BusBW != 21.40 || r.InPlace.BusBW != 21.50 {
		t.Errorf("64 MiB %+v %+v", r.OutOfPlace, r.InPlace)
	}
	// The header says in-place peaks at 64 MiB, but the 128 MiB row reads 21.86.
	if b.PeakBusBW != 21.86 || b.PeakSize != 134217728 {
		t.Errorf("peak %v at %d", b.PeakBusBW, b.PeakSize)
	}
	for _, tt := range rep.Tests {
		for _, r := range tt.Rows {
			if r.OutOfPlace.Wrong != 0 || r.InPlace.Wrong != 0 {
				t.Errorf("0e+00 read as wrong: %+v", r)
			}
		}
	}
	c := doctortest.Codes(rep.Findings, "")
	// the excerpt starts at 64 KiB, so the rows cannot average to the footer
	if c["avg-busbw-mismatch"] != 1 || c["collective-unknown"] != 1 || doctor.HasErrors(rep.Findings) {
		t.Errorf("findings %v", rep.Findings)
	}
}

func TestNCCLTestsOldFormatErrors(t *testing.T) {
	rep := testsRead(t, doctortest.File(t, "old-format-all_reduce.txt"), Options{})
	if len(rep.Tests) != 1 {
		t.Fatalf("tests %d", len(rep.Tests))
	}
	tt := rep.Tests[0]
	if tt.Collective != "all_reduce" || tt.CollectiveFrom != "layout" || tt.Ranks != 4 || tt.Format != "old" || len(tt.Rows) != 9 {
		t.Errorf("%s from %s, %d ranks, %s, %d rows", tt.Collective, tt.CollectiveFrom, tt.Ranks, tt.Format, len(tt.Rows))
	}
	r := testsRowAt(t, tt, 2097152)
	if r.InPlace.Wrong != 1 || math.Abs(r.InPlace.Error-0.02) > 1e-12 || r.OutOfPlace.Wrong != 0 || r.HasRoot {
		t.Errorf("2 MiB row %+v", r)
	}
	if _, ok := doctortest.FindingWith(rep.Findings, "wrong-results", "first at size 2097152"); !ok {
		t.Errorf("no wrong-results: %v", rep.Findings)
	}
	c := doctortest.Codes(rep.Findings, doctor.SevError)
	if c["out-of-bounds-values"] != 1 || doctortest.Codes(rep.Findings, "")["busbw-mismatch"] != 0 {
		t.Errorf("findings %v", rep.Findings)
	}
}

func TestNCCLTestsMpirunPrefixesInfoLines(t *testing.T) {
	rep := testsRead(t, doctortest.File(t, "mpirun-reduce_scatter.txt"), Options{ExpectBusBW: 100})
	if len(rep.Tests) != 1 {
		t.Fatalf("tests %d", len(rep.Tests))
	}
	tt := rep.Tests[0]
	if tt.Collective != "reduce_scatter" || tt.CollectiveFrom != "banner" || tt.Ranks != 8 || tt.RanksFrom != "devices" {
		t.Errorf("%s from %s, %d from %s", tt.Collective, tt.CollectiveFrom, tt.Ranks, tt.RanksFrom)
	}
	if len(tt.Rows) != 9 || tt.Rows[0].Size != 0 {
		t.Errorf("rows %d", len(tt.Rows))
	}
	for _, r := range tt.Rows {
		if r.BusBWMismatch != (r.Size == 2097152) {
			t.Errorf("size %d mismatch flag %v", r.Size, r.BusBWMismatch)
		}
	}
	if f, ok := doctortest.FindingWith(rep.Findings, "busbw-mismatch", "1 row(s)"); !ok || f.Severity != doctor.SevWarn {
		t.Errorf("busbw-mismatch: %v", rep.Findings)
	}
	if _, ok := doctortest.FindingWith(rep.Findings, "wrong-results", "first at size 16777216"); !ok {
		t.Errorf("wrong-results: %v", rep.Findings)
	}
	// 100 GB/s expected, 80 % = 80: the 128 MiB row (77.20) is below.
	if _, ok := doctortest.FindingWith(rep.Findings, "busbw-below-expected", "1 of 1 sizes"); !ok {
		t.Errorf("expect: %v", rep.Findings)
	}
	c := doctortest.Codes(rep.Findings, "")
	if c["out-of-bounds-values"] != 1 || c["avg-busbw-mismatch"] != 1 {
		t.Errorf("findings %v", rep.Findings)
	}
	// The same without prefixes and INFO lines gives the same rows.
	var plain []string
	for _, l := range strings.Split(doctortest.File(t, "mpirun-reduce_scatter.txt"), "\n") {
		if strings.Contains(l, "NCCL INFO") {
			l = "" // keep the line numbers
		}
		plain = append(plain, strings.TrimPrefix(l, "[1,0]<stdout>:"))
	}
	rep2 := testsRead(t, strings.Join(plain, "\n"), Options{ExpectBusBW: 100})
	if doctortest.JSON(t, rep2) != doctortest.JSON(t, rep) {
		t.Errorf("prefixed and plain reports differ")
	}
}

func TestNCCLTestsTwoCollectivesSrun(t *testing.T) {
	rep := testsRead(t, doctortest.File(t, "srun-broadcast-alltoall.txt"), Options{ExpectBusBW: 120})
	if len(rep.Tests) != 2 {
		t.Fatalf("tests %d", len(rep.Tests))
	}
	bc, a2a := rep.Tests[0], rep.Tests[1]
	if bc.Collective != "broadcast" || len(bc.Rows) != 5 || bc.Rows[0].Type != "bfloat16" || bc.Rows[0].Root != 0 || bc.Ranks != 8 || bc.RanksFrom != "config" {
		t.Errorf("broadcast %+v", bc)
	}
	if a2a.Collective != "alltoall" || len(a2a.Rows) != 6 || a2a.Ranks != 8 || a2a.Rows[0].Size != 0 {
		t.Errorf("alltoall %s %d rows %d ranks", a2a.Collective, len(a2a.Rows), a2a.Ranks)
	}
	for _, r := range a2a.Rows {
		if r.OutOfPlace.Wrong != -1 || r.InPlace.Wrong != -1 || r.BusBWMismatch {
			t.Errorf("alltoall row %+v", r)
		}
	}
	c := doctortest.Codes(rep.Findings, "")
	if c["busbw-mismatch"] != 0 || c["avg-busbw-mismatch"] != 0 || doctor.HasErrors(rep.Findings) {
		t.Errorf("findings %v", rep.Findings)
	}
	// 120 expected -> 96: broadcast (100..110) passes, alltoall (<= 53.44) all 5 sizes >= 64 MiB fail
	if _, ok := doctortest.FindingWith(rep.Findings, "busbw-below-expected", "alltoall"); !ok || c["busbw-below-expected"] != 1 {
		t.Errorf("expect: %v", rep.Findings)
	}
}

func TestNCCLTestsGocclPerf(t *testing.T) {
	rep := testsRead(t, doctortest.File(t, "goccl-perf-all_reduce.txt"), Options{ExpectBusBW: 10})
	if len(rep.Tests) != 1 {
		t.Fatalf("tests %d", len(rep.Tests))
	}
	tt := rep.Tests[0]
	if tt.Collective != "all_reduce" || tt.Ranks != 2 || tt.RanksFrom != "devices" || len(tt.Rows) != 9 || !tt.HasAvg {
		t.Errorf("%s %d %s rows %d", tt.Collective, tt.Ranks, tt.RanksFrom, len(tt.Rows))
	}
	c := doctortest.Codes(rep.Findings, "")
	if c["busbw-mismatch"] != 0 || c["avg-busbw-mismatch"] != 0 || c["expect-busbw-unchecked"] != 1 {
		t.Errorf("findings %v", rep.Findings)
	}
}

func TestNCCLTestsEmptyAndGarbage(t *testing.T) {
	for _, in := range []string{"", "hello\nworld\n", "# Avg bus bandwidth : nan\n", "1 2 float sum -1 x y z 0\n", strings.Repeat("9", 100000)} {
		rep := testsRead(t, in, Options{ExpectBusBW: 1})
		if len(rep.Tests) != 0 || doctortest.Codes(rep.Findings, "")["no-results"] != 1 {
			t.Errorf("%.20q: %+v", in, rep)
		}
	}
}

// testsLaunchTable is an all_reduce table of 16 ranks (busbw = algbw x
// 2*15/16) under a command line and a "# nThread 1 nGpus G" line.
func testsLaunchTable(cmd string, gpus int) string {
	return cmd + "\n" +
		"# nThread 1 nGpus " + strconv.Itoa(gpus) + " minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n" +
		"#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n" +
		"   536870912     134217728     float     sum      -1   10737.4   50.00   93.75      0   10737.4   50.00   93.75      0\n" +
		"  1073741824     268435456     float     sum      -1   10737.4  100.00  187.50      0   10737.4  100.00  187.50      0\n"
}

// TestNCCLTestsLauncherRanks: only the launcher's flags before the program
// count; -n/-np/--ntasks are total processes, srun's -N is nodes and
// mpirun's -N processes per node; nccl-tests' own -n (iterations) is not a
// process count.
func TestNCCLTestsLauncherRanks(t *testing.T) {
	for _, c := range []struct {
		cmd   string
		gpus  int
		ranks int // 0: unknown
	}{
		{"srun -N 2 -n 16 ./build/all_reduce_perf -b 8 -e 1G -g 1", 1, 16},
		{"srun --nodes=2 --ntasks-per-node=8 ./build/all_reduce_perf -g 1", 1, 16},
		{"srun -N2 -n16 ./build/all_reduce_perf -g 1", 1, 16},
		{"srun --nodes=2 ./build/all_reduce_perf -g 8 -n 100", 8, 16},
		{"srun -N 2 ./build/all_reduce_perf -b 8 -e 1G -g 8 -n 100", 8, 16},
		{"mpirun -N 8 -H node1,node2 ./build/all_reduce_perf -g 1", 1, 16},
		{"mpirun --map-by ppr:8:node --host node1:8,node2:8 ./build/all_reduce_perf -g 1", 1, 16},
		{"mpirun -np 2 -npernode 1 ./build/all_reduce_perf -g 8", 8, 16},
		{"$ mpirun -np 16 -N 8 ./build/all_reduce_perf -g 1 -n 50", 1, 16},
		{"mpirun \\\n  -N 8 \\\n  --host a:8,b:8 \\\n  ./build/all_reduce_perf -g 1 -n 5", 1, 16},
		{"> mpirun --hostfile h \\\n>   -np 2 \\\n>   ./build/all_reduce_perf -g 8 -n 4", 8, 16},
		// counts the command line does not give
		{"srun ./build/all_reduce_perf -g 8 -n 100", 8, 0},
		{"mpirun -N 8 ./build/all_reduce_perf -g 1", 1, 0},
		{"mpirun --hostfile h ./build/all_reduce_perf -g 1 -n 16", 1, 0},
	} {
		rep := testsRead(t, testsLaunchTable(c.cmd, c.gpus), Options{})
		if len(rep.Tests) != 1 {
			t.Fatalf("%q: %d tests", c.cmd, len(rep.Tests))
		}
		tt := rep.Tests[0]
		codes := doctortest.Codes(rep.Findings, "")
		if tt.Collective != "all_reduce" || tt.Ranks != c.ranks || codes["busbw-mismatch"] != 0 {
			t.Errorf("%q: %s, %d ranks from %q, want %d; %v", c.cmd, tt.Collective, tt.Ranks, tt.RanksFrom, c.ranks, rep.Findings)
		}
		if c.ranks == 0 && codes["ranks-unknown"] != 1 {
			t.Errorf("%q: no ranks-unknown: %v", c.cmd, rep.Findings)
		}
	}
	// A launcher's -np after the program line does not count.
	rep := testsRead(t, testsLaunchTable("./build/all_reduce_perf -g 16\n> -np 4", 16), Options{})
	if tt := rep.Tests[0]; tt.Ranks != 16 || tt.RanksFrom != "config" {
		t.Errorf("quoted line after the program: %d ranks from %s", tt.Ranks, tt.RanksFrom)
	}
}

// TestNCCLTestsHypercube: hypercube_perf's busbw is algbw x (n-1)/n.
func TestNCCLTestsHypercube(t *testing.T) {
	const table = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n" +
		"    16777216       1048576     float    none      -1    419.4   40.00   30.00      0    419.4   40.00   30.00      0\n" +
		"    33554432       2097152     float    none      -1    838.9   40.00   30.00      0    838.9   40.00   30.00      0\n"
	for _, c := range []struct{ pre, from string }{
		{"./build/hypercube_perf -b 16M -e 32M -g 4\n# nThread 1 nGpus 4 minBytes 16777216 maxBytes 33554432 step: 2(factor) warmup iters: 5 iters: 20\n", "config"},
		{"# Collective test starting: hypercube_perf\n", "size-count"},
	} {
		rep := testsRead(t, c.pre+table, Options{})
		tt := rep.Tests[0]
		codes := doctortest.Codes(rep.Findings, "")
		if tt.Collective != "hypercube" || tt.Ranks != 4 || tt.RanksFrom != c.from || codes["ranks-unknown"] != 0 || codes["busbw-mismatch"] != 0 {
			t.Errorf("%s: %s %d ranks from %s; %v", c.from, tt.Collective, tt.Ranks, tt.RanksFrom, rep.Findings)
		}
	}
	// with 8 ranks the same rows disagree
	rep := testsRead(t, "./build/hypercube_perf -g 8\n"+table, Options{})
	if doctortest.Codes(rep.Findings, "")["busbw-mismatch"] != 1 {
		t.Errorf("8 ranks: %v", rep.Findings)
	}
}

// TestFindingCodesDocumented: the package doc lists every finding code the
// package emits, and only those.
func TestFindingCodesDocumented(t *testing.T) {
	doctortest.CodesDocumented(t, 5)
}
