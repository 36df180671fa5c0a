package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/goccl/goccl/doctor"
	"github.com/goccl/goccl/doctor/host"
	"github.com/goccl/goccl/doctor/nccltests"
)

func TestDoctorHostJSON(t *testing.T) {
	for _, flagName := range []string{"--json", "-json"} {
		var o, e bytes.Buffer
		code := cli([]string{"doctor", "host", flagName}, &o, &e)
		var rep host.Report
		if err := json.Unmarshal(o.Bytes(), &rep); err != nil {
			t.Fatalf("%s: not JSON (%v):\n%s\nstderr: %s", flagName, err, o.String(), e.String())
		}
		found := false
		for _, c := range rep.Checks {
			found = found || c.Name == "shm"
		}
		if !found {
			t.Errorf("%s: no shm check in %+v", flagName, rep.Checks)
		}
		if want := 0; doctor.HasErrors(rep.Findings) {
			want = 1
			if code != want {
				t.Errorf("%s: exit %d with error findings", flagName, code)
			}
		} else if code != want {
			t.Errorf("%s: exit %d without error findings; stderr %s", flagName, code, e.String())
		}
	}
}

func TestDoctorHostText(t *testing.T) {
	var o, e bytes.Buffer
	code := cli([]string{"doctor", "host"}, &o, &e)
	if code != 0 && code != 1 || !strings.Contains(o.String(), "shm") || !strings.Contains(o.String(), "errors,") {
		t.Errorf("exit %d\n%s\nstderr: %s", code, o.String(), e.String())
	}
}

func TestDoctorUsage(t *testing.T) {
	for _, args := range [][]string{
		{"doctor"},
		{"doctor", "nosuch"},
		{"doctor", "host", "extra"},
		{"doctor", "host", "--nosuchflag"},
	} {
		var o, e bytes.Buffer
		if code := cli(args, &o, &e); code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %s)", args, code, e.String())
		}
		if e.Len() == 0 {
			t.Errorf("%q: no usage on stderr", args)
		}
	}
	var o, e bytes.Buffer
	if code := cli([]string{"doctor", "-h"}, &o, &e); code != 0 {
		t.Errorf("-h: exit %d", code)
	}
	for _, sub := range []string{"host", "nccl-log FILE|-", "nccl-tests FILE|- [--expect-busbw GBPS]", "topo FILE|-", "ibv FILE|-", "flight-recorder DUMP|DIR...", "k8s FILE|DIR...", "trace TRACE|DIR..."} {
		if !strings.Contains(o.String(), "goccl doctor "+sub) {
			t.Errorf("usage lacks %q:\n%s", sub, o.String())
		}
	}
	o.Reset()
	if code := cli([]string{"help", "doctor"}, &o, &e); code != 0 || !strings.Contains(o.String(), "goccl doctor host") {
		t.Errorf("help doctor: exit %d\n%s", code, o.String())
	}
	o.Reset()
	e.Reset()
	if code := cli([]string{"doctor", "host", "-h"}, &o, &e); code != 0 || !strings.Contains(e.String(), "-json") {
		t.Errorf("host -h: exit %d\n%s", code, e.String())
	}
}

// TestDoctorInputTable plugs a FILE|- row into the table, as the readers
// will, and checks flags after FILE, stdin, exit statuses and usage errors.
func TestDoctorInputTable(t *testing.T) {
	saved, savedStdin := doctorSubs, doctorStdin
	t.Cleanup(func() { doctorSubs, doctorStdin = saved, savedStdin })
	var gotLimit float64
	doctorSubs = append(append([]doctorSub(nil), saved...), doctorSub{name: "echo", input: true,
		setup: func(fs *pflag.FlagSet) doctorRunFunc {
			limit := fs.Float64("expect-busbw", 0, "GB/s")
			return func(ctx context.Context, in io.Reader) (doctorResult, error) {
				b, err := io.ReadAll(in)
				if err != nil {
					return doctorResult{}, err
				}
				gotLimit = *limit
				var fs []doctor.Finding
				if strings.Contains(string(b), "bad") {
					fs = append(fs, doctor.Finding{Severity: doctor.SevError, Code: "bad", Message: "bad input"})
				}
				text := string(b)
				return doctorResult{report: map[string]string{"text": text}, findings: fs,
					text: func(w io.Writer) error { _, err := io.WriteString(w, text); return err }}, nil
			}
		}})
	file := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(file, []byte("fine"), 0o644); err != nil {
		t.Fatal(err)
	}
	var o, e bytes.Buffer
	if code := cli([]string{"doctor", "echo", file, "--expect-busbw", "12.5", "--json"}, &o, &e); code != 0 {
		t.Fatalf("exit %d: %s", code, e.String())
	}
	var m map[string]string
	if err := json.Unmarshal(o.Bytes(), &m); err != nil || m["text"] != "fine" || gotLimit != 12.5 {
		t.Errorf("json %q (%v), limit %v", o.String(), err, gotLimit)
	}
	doctorStdin = strings.NewReader("bad")
	o.Reset()
	if code := cli([]string{"doctor", "echo", "-"}, &o, &e); code != 1 || o.String() != "bad" {
		t.Errorf("stdin: exit %d out %q", code, o.String())
	}
	for _, args := range [][]string{
		{"doctor", "echo"},
		{"doctor", "echo", file, file},
		{"doctor", "echo", filepath.Join(t.TempDir(), "missing")},
	} {
		if code := cli(args, &o, &e); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

func TestDoctorParse(t *testing.T) {
	for _, c := range []struct {
		args []string
		pos  []string
		json bool
	}{
		{[]string{"f", "--json"}, []string{"f"}, true},
		{[]string{"-json", "-"}, []string{"-"}, true},
		{[]string{"--", "-json"}, []string{"-json"}, false},
		{[]string{"f", "-json=false"}, []string{"f"}, false},
		{nil, []string{}, false},
	} {
		fs := newFlags("t", io.Discard, nil)
		j := fs.Bool("json", false, "")
		err := fs.parse(c.args)
		pos := fs.Args()
		if err != nil || !reflect.DeepEqual(pos, c.pos) || *j != c.json {
			t.Errorf("%q: pos %q json %v err %v", c.args, pos, *j, err)
		}
	}
	if _, err := doctorReadInput("-", nil); err == nil {
		t.Error("- without stdin: no error")
	}
}

// TestDoctorReaders runs the file readers through the CLI: exit status 1
// exactly when a finding is an error (#wrong > 0 here), --json decodes, "-"
// reads standard input.
func TestDoctorReaders(t *testing.T) {
	savedStdin := doctorStdin
	t.Cleanup(func() { doctorStdin = savedStdin })
	td := filepath.Join("..", "..", "doctor")
	var out, errb bytes.Buffer
	st := cli([]string{"doctor", "nccl-tests", filepath.Join(td, "nccltests", "testdata", "mpirun-reduce_scatter.txt"), "--json"}, &out, &errb)
	var rep nccltests.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || st != 1 || len(rep.Tests) == 0 || rep.Tests[0].Collective != "reduce_scatter" {
		t.Fatalf("nccl-tests: status %d (want 1: #wrong > 0), err %v, %s\n%s", st, err, errb.String(), out.String())
	}
	topo, err := os.ReadFile(filepath.Join(td, "topo", "testdata", "no-local-nic.txt"))
	if err != nil {
		t.Fatal(err)
	}
	doctorStdin = bytes.NewReader(topo)
	out.Reset()
	if st := cli([]string{"doctor", "topo", "-"}, &out, &errb); st != 0 || !strings.Contains(out.String(), "gpu-no-local-nic") {
		t.Fatalf("topo from stdin: status %d\n%s", st, out.String())
	}
	out.Reset()
	if st := cli([]string{"doctor", "ibv", filepath.Join(td, "ibv", "testdata", "devinfo-v-down-mtu.txt")}, &out, &errb); st > 1 || !strings.Contains(out.String(), "ibv-port-not-active") {
		t.Fatalf("ibv: status %d\n%s", st, out.String())
	}
	errb.Reset()
	if st := cli([]string{"doctor", "nccl-tests", "--expect-busbw", "-5", filepath.Join(td, "nccltests", "testdata", "mpirun-reduce_scatter.txt")}, io.Discard, &errb); st != 2 || !strings.Contains(errb.String(), "expect-busbw") {
		t.Fatalf("negative --expect-busbw: status %d, %s", st, errb.String())
	}
}

// doctorFailingReader returns some text, then an I/O error.
type doctorFailingReader struct{ text string }

func (r *doctorFailingReader) Read(p []byte) (int, error) {
	if r.text == "" {
		return 0, errors.New("input/output error")
	}
	n := copy(p, r.text)
	r.text = r.text[n:]
	return n, nil
}

// TestDoctorReadError: a reader failing while reading exits 2 (unreadable
// input, as the usage says), for every FILE|- subcommand.
func TestDoctorReadError(t *testing.T) {
	savedStdin := doctorStdin
	t.Cleanup(func() { doctorStdin = savedStdin })
	for _, sub := range []string{"nccl-tests", "topo", "ibv", "nccl-log"} {
		doctorStdin = &doctorFailingReader{text: "# nThread 1 nGpus 1\n\tGPU0\tCPU Affinity\nhca_id:\tmlx5_0\n"}
		var o, e bytes.Buffer
		if st := cli([]string{"doctor", sub, "-"}, &o, &e); st != 2 || !strings.Contains(e.String(), "reading -: input/output error") {
			t.Errorf("%s: exit %d, stderr %q", sub, st, e.String())
		}
	}
}

// TestDoctorNCCLLog: the analyser through the CLI on a real log (NCCL over
// loopback in a 2-node job): exit status 1, the JSON fields issue 6 names.
func TestDoctorNCCLLog(t *testing.T) {
	var out, errb bytes.Buffer
	st := cli([]string{"doctor", "nccl-log", "--json", filepath.Join("..", "..", "doctor", "nccllog", "testdata", "real-inputs", "nccl-log-22.txt")}, &out, &errb)
	var rep map[string]any
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || st != 1 {
		t.Fatalf("status %d (want 1), %v: %s\n%s", st, err, errb.String(), out.String())
	}
	for _, k := range []string{"nccl_version", "net", "net_plugin", "gdrdma", "intra_node", "nvls", "collnet", "interfaces", "hcas", "nranks", "findings"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if rep["net"] != "Socket" || !strings.Contains(out.String(), "socket-on-loopback") {
		t.Errorf("net %v, findings %v", rep["net"], rep["findings"])
	}
}

// TestDoctorFlightRecorder runs `goccl doctor flight-recorder` on the
// PyTorch pickle dumps of doctor/flightrec's testdata (a folder, then its
// files with --json): rank 2 is named as missing from all_reduce #3 (exit
// 1); no argument or an unreadable dump is a usage error (exit 2).
func TestDoctorFlightRecorder(t *testing.T) {
	dir := filepath.Join("..", "..", "doctor", "flightrec", "testdata", "torch", "dumps")
	var o, e bytes.Buffer
	if code := cli([]string{"doctor", "flight-recorder", dir}, &o, &e); code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, e.String())
	}
	if !strings.Contains(o.String(), "ERROR fr-missing-rank: process group 0 (default_pg), collective #3 all_reduce: culprit rank(s) 2") {
		t.Errorf("text report:\n%s", o.String())
	}
	o.Reset()
	files := []string{"doctor", "flight-recorder", "--json"}
	for r := range 3 {
		files = append(files, filepath.Join(dir, fmt.Sprintf("nccl_trace_rank_%d", r)))
	}
	if code := cli(files, &o, &e); code != 1 {
		t.Fatalf("--json: exit %d: %s", code, e.String())
	}
	var rep struct {
		Groups []struct {
			Mismatch struct {
				Kind     string `json:"kind"`
				Culprits []int  `json:"culprits"`
			} `json:"mismatch"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(o.Bytes(), &rep); err != nil || len(rep.Groups) != 1 || rep.Groups[0].Mismatch.Kind != "MISSING_RANKS" ||
		fmt.Sprint(rep.Groups[0].Mismatch.Culprits) != "[2]" {
		t.Errorf("json %v: %s", err, o.String())
	}
	bad := filepath.Join(t.TempDir(), "x-0.json")
	os.WriteFile(bad, []byte("not a dump"), 0o644)
	for _, args := range [][]string{{"doctor", "flight-recorder"}, {"doctor", "flight-recorder", bad}} {
		if code := cli(args, &o, &e); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

// TestDoctorK8s runs `goccl doctor k8s` on a folder of real pod outputs
// (doctor/k8s/testdata, each file's header holds its thread): the
// unschedulable pods are errors (exit 1), the JSON lists every pod.
func TestDoctorK8s(t *testing.T) {
	dir := filepath.Join("..", "..", "doctor", "k8s", "testdata")
	var o, e bytes.Buffer
	if code := cli([]string{"doctor", "k8s", dir}, &o, &e); code != 1 {
		t.Fatalf("exit %d, want 1 (errors found): %s", code, e.String())
	}
	for _, want := range []string{"ERROR unschedulable: pod nvidia/cuda-vector-add", "WARN  no-ipc-lock: pod default/nccl-sleep", "pod jsh/rdma-test-node7"} {
		if !strings.Contains(o.String(), want) {
			t.Errorf("no %q in\n%s", want, o.String())
		}
	}
	o.Reset()
	if code := cli([]string{"doctor", "k8s", "--json", dir}, &o, &e); code != 1 {
		t.Fatalf("--json: exit %d", code)
	}
	var rep struct {
		Pods []struct {
			Name string `json:"name"`
		} `json:"pods"`
		Findings []struct {
			Code string `json:"code"`
		} `json:"findings"`
	}
	if err := json.Unmarshal(o.Bytes(), &rep); err != nil || len(rep.Pods) != 13 || len(rep.Findings) == 0 {
		t.Errorf("json: %v, %d pods, %d findings", err, len(rep.Pods), len(rep.Findings))
	}
}

// TestDoctorTrace runs `goccl doctor trace` on HTA's two-rank trace_filter
// folder: both ranks' overlap as HTA computes it (11.81 and 20.05 %), the
// JSON form, and a missing file as a usage error (exit 2); then the steps
// of trace_diff.
func TestDoctorTrace(t *testing.T) {
	dir := filepath.Join("..", "..", "doctor", "trace", "testdata", "hta", "trace_filter")
	var o, e bytes.Buffer
	if code := cli([]string{"doctor", "trace", dir}, &o, &e); code != 0 {
		t.Fatalf("exit %d, want 0: %s", code, e.String())
	}
	if !strings.Contains(o.String(), "11.81") || !strings.Contains(o.String(), "WARN  exposed-communication: rank 1") {
		t.Errorf("text report:\n%s", o.String())
	}
	o.Reset()
	if code := cli([]string{"doctor", "trace", "--json", dir}, &o, &e); code != 0 {
		t.Fatalf("--json: exit %d: %s", code, e.String())
	}
	var rep struct {
		Ranks []struct {
			Rank       int      `json:"rank"`
			OverlapPct *float64 `json:"overlap_pct"`
		} `json:"ranks"`
	}
	if err := json.Unmarshal(o.Bytes(), &rep); err != nil || len(rep.Ranks) != 2 || rep.Ranks[1].OverlapPct == nil || *rep.Ranks[1].OverlapPct != 20.05 {
		t.Errorf("json %v: %s", err, o.String())
	}
	if code := cli([]string{"doctor", "trace", filepath.Join(t.TempDir(), "none.json")}, &o, &e); code != 2 {
		t.Errorf("a missing file: exit %d, want 2", code)
	}
	// Steps: trace_diff's 5 steps each printed, 4 summarized after one
	// skipped, with its .item() calls found.
	diff := filepath.Join("..", "..", "doctor", "trace", "testdata", "hta", "trace_diff")
	o.Reset()
	if code := cli([]string{"doctor", "trace", "--skip", "1", "--per-step", diff}, &o, &e); code != 0 {
		t.Fatalf("--skip 1 --per-step: exit %d: %s", code, e.String())
	}
	for _, want := range []string{"after the first 1 skipped", "     1      4  ", "  1013  ", "WARN  host-sync: rank 1: 11.0 host synchronizations per step (item ×20, stream-synchronize ×24 over 4 steps)"} {
		if !strings.Contains(o.String(), want) {
			t.Errorf("--skip 1 --per-step: no %q in\n%s", want, o.String())
		}
	}
	if code := cli([]string{"doctor", "trace", "--skip", "-1", diff}, &o, &e); code != 2 || !strings.Contains(e.String(), "--skip -1") {
		t.Errorf("--skip -1: exit %d, %q; want 2 and the flag named", code, e.String())
	}
}
