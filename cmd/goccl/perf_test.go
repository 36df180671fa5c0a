package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/goccl/goccl"
)

// runFake runs perfRank on every rank of a fake world and returns rank 0's
// stdout, all ranks' stderr and the exit statuses.
func runFake(t *testing.T, n int, args []string, bug func(op string, rank int, recv []byte, extent int, dt goccl.DataType)) (string, string, []int) {
	t.Helper()
	cfg, err := parsePerfArgs(args, io.Discard)
	if err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	comms := newFakeWorld(n)
	comms[0].w.bug = bug
	outs := make([]bytes.Buffer, n)
	var errMu sync.Mutex
	var errb bytes.Buffer
	status := make([]int, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ew := writerFunc(func(p []byte) (int, error) {
				errMu.Lock()
				defer errMu.Unlock()
				return errb.Write(p)
			})
			st, err := perfRank(context.Background(), cfg, comms[r], &outs[r], ew)
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
			status[r] = st
		}()
	}
	wg.Wait()
	for r := 1; r < n; r++ {
		if outs[r].Len() != 0 {
			t.Errorf("rank %d printed %q", r, outs[r].String())
		}
	}
	return outs[0].String(), errb.String(), status
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

var rowRE = regexp.MustCompile(`^ *(\d+) +(\d+) +(\S+) +(\S+) +(-?\d+) +(\S+) +(\S+) +(\S+) +(\S+) +(\S+) +(\S+) +(\S+) +(\S+)$`)

type parsedRow struct {
	size, count           int64
	typ, op               string
	root                  int
	wrongOOP, wrongIP     string
	algOOP, busOOP, busIP float64
}

// parseReport checks the report's structure and returns its rows.
func parseReport(t *testing.T, out string, n int) ([]parsedRow, []string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	// Lines between the configuration line and "#" (-z, ignored flags)
	// are checked by the tests that ask for them.
	if len(lines) > 1 {
		k := 1
		for k < len(lines) && lines[k] != "#" && strings.HasPrefix(lines[k], "# ") {
			k++
		}
		lines = append(lines[:1], lines[k:]...)
	}
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "# nThread 1 nGpus 1 minBytes ") || lines[1] != "#" || lines[2] != "# Using devices" {
		t.Fatalf("bad report head:\n%s", out)
	}
	for r := 0; r < n; r++ {
		if !regexp.MustCompile(`^#  Rank +` + strconv.Itoa(r) + ` Group  0 Pid +\d+ on +\S+ device +` + strconv.Itoa(r) + ` \[cpu\] goccl$`).MatchString(lines[3+r]) {
			t.Errorf("device line %q", lines[3+r])
		}
	}
	hdr := columnHeader()
	if strings.Contains(lines[5+n], "cputime") {
		hdr = columnHeaderTime("cputime")
	}
	if lines[3+n] != "#" || lines[4+n] != hdr[0] || lines[5+n] != hdr[1] || lines[6+n] != hdr[2] {
		t.Errorf("bad column header:\n%s", out)
	}
	var rows []parsedRow
	i := 7 + n
	for ; i < len(lines) && !strings.HasPrefix(lines[i], "#"); i++ {
		m := rowRE.FindStringSubmatch(lines[i])
		if m == nil {
			t.Fatalf("bad row %q", lines[i])
		}
		pi := func(k int) int64 { v, _ := strconv.ParseInt(m[k], 10, 64); return v }
		pf := func(k int) float64 { v, _ := strconv.ParseFloat(m[k], 64); return v }
		rows = append(rows, parsedRow{size: pi(1), count: pi(2), typ: m[3], op: m[4], root: int(pi(5)),
			algOOP: pf(7), busOOP: pf(8), wrongOOP: m[9], busIP: pf(12), wrongIP: m[13]})
	}
	tail := lines[i:]
	if len(tail) != 5 || tail[2] != "#" || tail[3] != "" || tail[4] != "" || !strings.HasPrefix(tail[1], "# Avg bus bandwidth    : ") {
		t.Errorf("bad tail %q", tail)
	}
	return rows, tail
}

func TestPerfFakeAllCollectives(t *testing.T) {
	for _, n := range []int{1, 3, 4} {
		for _, c := range colls {
			args := []string{c.name, "-b", "8", "-e", "4K", "-f", "4", "-n", "2", "-w", "1", "-d", "all", "-o", "all", "-r", "-1"}
			out, errs, status := runFake(t, n, args, nil)
			rows, tail := parseReport(t, out, n)
			for r, st := range status {
				if st != 0 {
					t.Errorf("%s n=%d: rank %d status %d\n%s", c.name, n, r, st, errs)
				}
			}
			if errs != "" {
				t.Errorf("%s n=%d: stderr:\n%s", c.name, n, errs)
			}
			if tail[0] != "# Out of bounds values : 0 OK" {
				t.Errorf("%s n=%d: %q", c.name, n, tail[0])
			}
			// Row count: 5 sizes (8 to 2048) x types x ops x roots.
			nTypes, nOps, nRoots := 10, 1, 1
			if c.reduces {
				nOps = 0
				for _, dt := range allTypes {
					if dt.IsFloat() {
						nOps += 5
					} else {
						nOps += 4
					}
				}
				nTypes = 1
			} else if c.opColumn {
				nOps = 5
			}
			if c.rooted {
				nRoots = n
			}
			if want := 5 * nTypes * nOps * nRoots; len(rows) != want {
				t.Errorf("%s n=%d: %d rows, want %d", c.name, n, len(rows), want)
			}
			for _, r := range rows {
				if r.wrongOOP != "0" || (r.wrongIP != "0" && !(c.kind == collSendRecv && r.wrongIP == "N/A")) {
					t.Errorf("%s n=%d: row %+v", c.name, n, r)
				}
				wantOp := "none"
				if c.reduces || c.opColumn {
					wantOp = r.op // any op
				}
				if r.op != wantOp || (c.rooted != (r.root >= 0)) {
					t.Errorf("%s n=%d: op/root columns %+v", c.name, n, r)
				}
			}
		}
	}
}

func TestPerfDetectsWrongAndOutOfBounds(t *testing.T) {
	cases := []struct {
		name, coll string
		bug        func(op string, rank int, recv []byte, extent int, dt goccl.DataType)
		wantWrong  bool
		wantOOB    bool
	}{
		{"wrong element", "all_reduce", func(op string, rank int, recv []byte, extent int, dt goccl.DataType) {
			if rank == 1 && extent > 0 {
				recv[extent-1] ^= 0x40
			}
		}, true, false},
		{"past the end", "all_gather", func(op string, rank int, recv []byte, extent int, dt goccl.DataType) {
			if rank == 2 && len(recv) > extent {
				recv[extent] = 0
			}
		}, false, true},
		{"non-root reduce writes", "reduce", func(op string, rank int, recv []byte, extent int, dt goccl.DataType) {
			if rank == 1 && extent > 0 {
				recv[0] ^= 1
			}
		}, false, true},
		{"reduce_scatter wrong block", "reduce_scatter", func(op string, rank int, recv []byte, extent int, dt goccl.DataType) {
			if rank == 0 && extent > 0 {
				recv[0] ^= 0x10
			}
		}, true, false},
	}
	for _, c := range cases {
		// Corrupt only the benchmarked int32 data, not perf's own reductions.
		bug := func(op string, rank int, recv []byte, extent int, dt goccl.DataType) {
			if dt == goccl.Int32 {
				c.bug(op, rank, recv, extent, dt)
			}
		}
		out, errs, status := runFake(t, 3, []string{c.coll, "-b", "64", "-e", "256", "-n", "1", "-w", "0", "-d", "int32", "-o", "sum"}, bug)
		rows, tail := parseReport(t, out, 3)
		var anyWrong bool
		for _, r := range rows {
			anyWrong = anyWrong || r.wrongOOP != "0" || r.wrongIP != "0"
		}
		if c.wantWrong {
			for _, r := range rows {
				if r.wrongOOP != "1" || r.wrongIP != "1" {
					t.Errorf("%s: row %+v, want 1 wrong element in and out of place", c.name, r)
				}
			}
		}
		if anyWrong != c.wantWrong {
			t.Errorf("%s: wrong elements reported %v, want %v\n%s", c.name, anyWrong, c.wantWrong, out)
		}
		if tail[0] == "# Out of bounds values : 0 OK" {
			t.Errorf("%s: footer %q", c.name, tail[0])
		}
		if c.wantOOB != strings.Contains(errs, "overwritten") {
			t.Errorf("%s: stderr:\n%s", c.name, errs)
		}
		for r, st := range status {
			if st != 1 {
				t.Errorf("%s: rank %d status %d, want 1", c.name, r, st)
			}
		}
	}
}

func TestPerfNoCheck(t *testing.T) {
	out, _, status := runFake(t, 2, []string{"all_reduce", "-b", "1K", "-e", "1K", "-c", "0", "-n", "1"}, nil)
	rows, _ := parseReport(t, out, 2)
	if len(rows) != 1 || rows[0].wrongOOP != "N/A" || rows[0].wrongIP != "N/A" || status[0] != 0 {
		t.Errorf("rows %+v status %v", rows, status)
	}
}

func TestPerfSizesAndColumns(t *testing.T) {
	// all_gather with 2 ranks, as in nccl-tests' output: tiny sizes round to 0.
	out, _, _ := runFake(t, 2, []string{"all_gather", "-b", "8", "-e", "64", "-n", "1", "-w", "0"}, nil)
	rows, _ := parseReport(t, out, 2)
	want := [][2]int64{{0, 0}, {0, 0}, {32, 4}, {64, 8}}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v", rows)
	}
	for i, r := range rows {
		if r.size != want[i][0] || r.count != want[i][1] || r.op != "none" || r.root != -1 || r.typ != "float" {
			t.Errorf("row %d: %+v, want size %d count %d", i, r, want[i][0], want[i][1])
		}
	}
	// broadcast prints its root; stepping by bytes.
	out, _, _ = runFake(t, 3, []string{"broadcast", "-b", "1K", "-e", "3K", "-f", "1", "-i", "1K", "-r", "2", "-d", "half", "-n", "1"}, nil)
	rows, _ = parseReport(t, out, 3)
	if len(rows) != 3 || rows[2].size != 3072 || rows[2].count != 1536 || rows[0].root != 2 || rows[0].op != "none" || rows[0].typ != "half" {
		t.Errorf("broadcast rows %+v", rows)
	}
	if !strings.Contains(out, "step: 1024(bytes)") {
		t.Errorf("header: %s", out)
	}
}

func TestPerfJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.json")
	out, _, _ := runFake(t, 2, []string{"sendrecv", "-b", "1K", "-e", "2K", "-n", "1", "-J", path}, nil)
	rows, _ := parseReport(t, out, 2)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep jsonReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Version != 3 || rep.Goccl.Collective != "sendrecv" || rep.Goccl.NRanks != 2 || len(rep.Results) != len(rows) ||
		len(rep.Config.Devices) != 2 || !bool(rep.OutOfBounds.Okay) || rep.OutOfBounds.Count != 0 || rep.AvgBusBW.Okay != "unchecked" ||
		rep.Config.StepFactor == nil || *rep.Config.StepFactor != 2 || rep.Config.StepBytes != nil || rep.Config.AggregatedIterations != 1 {
		t.Fatalf("report %s", data)
	}
	r := rep.Results[1]
	if r.Size != 2048 || r.Count != 512 || r.Type != "float" || r.Redop != "sum" || r.Root != "    -1" || r.ActualIterations != 1 ||
		r.OutOfPlace.NWrong == nil || *r.OutOfPlace.NWrong != 0 || r.InPlace.NWrong != nil || r.OutOfPlace.Time == nil || *r.OutOfPlace.Time <= 0 ||
		r.OutOfPlace.CPUTime != nil {
		t.Errorf("record %s", data)
	}
	if !strings.Contains(string(data), `"nwrong": null`) || !strings.Contains(string(data), `"blocking_collectives": "false"`) {
		t.Errorf("json:\n%s", data)
	}
	checkNcclTestsJSONKeys(t, data)

	// -C 1 names the time cpu_time; -m and -z show in the config.
	out, _, _ = runFake(t, 2, []string{"all_reduce", "-b", "1K", "-e", "1K", "-n", "1", "-C", "1", "-m", "3", "-z", "1", "-f", "1", "-J", path}, nil)
	parseReport(t, out, 2)
	data, _ = os.ReadFile(path)
	rep = jsonReport{}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 || rep.Results[0].OutOfPlace.CPUTime == nil || rep.Results[0].OutOfPlace.Time != nil ||
		rep.Config.AggregatedIterations != 3 || !bool(rep.Config.BlockingCollectives) || rep.Config.StepBytes == nil {
		t.Errorf("-C 1 -m 3 -z 1: %s", data)
	}
	checkNcclTestsJSONKeys(t, data)
}

// checkNcclTestsJSONKeys checks that data has the keys, in the order, of
// nccl-tests' JSON output (src/util.cu, version 3), goccl's additions aside.
func checkNcclTestsJSONKeys(t *testing.T, data []byte) {
	t.Helper()
	keys := func(obj json.RawMessage) []string {
		dec := json.NewDecoder(bytes.NewReader(obj))
		var ks []string
		depth := 0
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			switch v := tok.(type) {
			case json.Delim:
				if v == '{' || v == '[' {
					depth++
				} else {
					depth--
				}
			case string:
				if depth == 1 {
					ks = append(ks, v)
					// Skip the value.
					var skip json.RawMessage
					if err := dec.Decode(&skip); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		return ks
	}
	want := map[string]string{
		"top":    "version start_time args env nccl_version config results out_of_bounds average_bus_bandwidth errors goccl end_time",
		"config": "nthreads ngpus minimum_bytes maximum_bytes STEP warmup_iters iterations aggregated_iterations validation graph blocking_collectives per_iter_timing per_iter_skip parallel_init devices",
		"device": "rank group pid hostname device device_hex device_info",
		"result": "size count type redop root out_of_place in_place actual_iterations experiment_name",
		"place":  "TIME alg_bw bus_bw nwrong goccl_out_of_bounds",
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatal(err)
	}
	var results []json.RawMessage
	json.Unmarshal(top["results"], &results)
	var cfg map[string]json.RawMessage
	json.Unmarshal(top["config"], &cfg)
	var devs []json.RawMessage
	json.Unmarshal(cfg["devices"], &devs)
	if len(results) == 0 || len(devs) == 0 {
		t.Fatalf("no results or devices: %s", data)
	}
	var res map[string]json.RawMessage
	json.Unmarshal(results[0], &res)
	got := map[string]string{
		"top":    strings.Join(keys(data), " "),
		"config": strings.Join(keys(top["config"]), " "),
		"device": strings.Join(keys(devs[0]), " "),
		"result": strings.Join(keys(results[0]), " "),
		"place":  strings.Join(keys(res["in_place"]), " "),
	}
	got["config"] = regexp.MustCompile(`step_factor|step_bytes`).ReplaceAllString(got["config"], "STEP")
	got["place"] = regexp.MustCompile(`^(cpu_)?time`).ReplaceAllString(got["place"], "TIME")
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s keys:\ngot  %s\nwant %s", k, got[k], w)
		}
	}
}

// nopComm accepts every call and does nothing.
type nopComm struct{}

func (nopComm) Rank() int                         { return 0 }
func (nopComm) Size() int                         { return 2 }
func (nopComm) LocalRank() int                    { return 0 }
func (nopComm) Barrier(ctx context.Context) error { return nil }
func (nopComm) AllReduceBytes(context.Context, []byte, []byte, int, goccl.DataType, goccl.RedOp) error {
	return nil
}
func (nopComm) BroadcastBytes(context.Context, []byte, []byte, int, goccl.DataType, int) error {
	return nil
}
func (nopComm) ReduceBytes(context.Context, []byte, []byte, int, goccl.DataType, goccl.RedOp, int) error {
	return nil
}
func (nopComm) AllGatherBytes(context.Context, []byte, []byte, int, goccl.DataType) error { return nil }
func (nopComm) ReduceScatterBytes(context.Context, []byte, []byte, int, goccl.DataType, goccl.RedOp) error {
	return nil
}
func (nopComm) AllToAllBytes(context.Context, []byte, []byte, int, goccl.DataType) error { return nil }
func (nopComm) SendRecvBytes(context.Context, []byte, int, []byte, int, int, goccl.DataType) error {
	return nil
}

func TestHotLoopAllocatesNothing(t *testing.T) {
	for _, c := range colls {
		cfg, err := parsePerfArgs([]string{c.name, "-e", "1M"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		b := newBench(context.Background(), cfg, nopComm{}, io.Discard, io.Discard)
		b.dt, b.op, b.root, b.elt = goccl.Float32, goccl.Sum, 0, 4
		b.setup(1 << 20)
		for _, ip := range []bool{false, true} {
			if a := testing.AllocsPerRun(100, func() { b.runOnce(ip) }); a != 0 {
				t.Errorf("%s in-place %v: %v allocations per call", c.name, ip, a)
			}
		}
		if a := testing.AllocsPerRun(100, func() { b.combineTime(1) }); a != 0 {
			t.Errorf("combineTime: %v allocations", a)
		}
	}
}
