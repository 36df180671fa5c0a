package flightrec

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goccl/goccl/doctor"
)

// TestTorchPickleDumps reads the pickles of testdata/torch (PyTorch's
// dump_dict structure; see make_dumps.py): rank 2 never reached
// all_reduce #3, and the send and recv between ranks 0 and 1 match.
func TestTorchPickleDumps(t *testing.T) {
	dumps, err := ReadPaths([]string{"testdata/torch/dumps"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dumps) != 3 || dumps[2].Rank != 2 || dumps[0].Format != "pickle" || dumps[0].Version != "2.10" ||
		dumps[0].Entries[0].ProcessGroup[1] != "default_pg" || !slices.Equal(dumps[0].Groups["0"].Ranks, []int{0, 1, 2}) {
		t.Fatalf("dumps: %+v", dumps)
	}
	rep := Analyze(dumps)
	m := rep.Groups[0].Mismatch
	if m == nil || m.Kind != "MISSING_RANKS" || m.Seq != 3 || !slices.Equal(m.Culprits, []int{2}) {
		t.Fatalf("mismatch %+v", m)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Code != "fr-missing-rank" {
		t.Errorf("findings %+v", rep.Findings)
	}
}

// TestTorchRealDump has a real PyTorch write a flight-recorder dump (one
// rank, NCCL) and reads it. It needs python3 with a torch that has the
// flight recorder (2.2 and later) and a GPU; it is skipped, saying why,
// otherwise.
func TestTorchRealDump(t *testing.T) {
	out := filepath.Join(t.TempDir(), "nccl_trace_rank_0")
	script := `
import os, sys
try:
    import torch, torch.distributed as dist
except Exception as e:
    print("SKIP no torch:", e); sys.exit(0)
c10d = torch._C._distributed_c10d
if not hasattr(c10d, "_dump_nccl_trace"):
    print("SKIP torch", torch.__version__, "has no flight recorder (_dump_nccl_trace, torch 2.2 and later)"); sys.exit(0)
if not torch.cuda.is_available() or not dist.is_nccl_available():
    print("SKIP torch", torch.__version__, "has no GPU or NCCL here for its flight recorder"); sys.exit(0)
os.environ["TORCH_NCCL_TRACE_BUFFER_SIZE"] = "100"
dist.init_process_group("nccl", init_method="file://" + sys.argv[1] + ".store", rank=0, world_size=1)
x = torch.ones(64, device="cuda")
dist.all_reduce(x); dist.broadcast(x, 0); torch.cuda.synchronize()
open(sys.argv[1], "wb").write(c10d._dump_nccl_trace())
dist.destroy_process_group()
print("OK", torch.__version__)
`
	var msgs []string
	for _, py := range []string{"python3", "/usr/bin/python3"} { // the first with torch
		if _, err := exec.LookPath(py); err != nil {
			continue
		}
		b, err := exec.Command(py, "-c", script, out).CombinedOutput()
		msg := strings.TrimSpace(string(b))
		if err != nil {
			t.Fatalf("%s: %v\n%s", py, err, msg)
		}
		if !strings.HasPrefix(msg, "SKIP") {
			msgs = nil
			break
		}
		msgs = append(msgs, py+": "+msg)
	}
	if len(msgs) > 0 {
		t.Skip(strings.Join(msgs, "; "))
	}
	if _, err := os.Stat(out); err != nil {
		t.Skip("no python3 wrote a dump")
	}
	dumps, err := ReadPaths([]string{out})
	if err != nil {
		t.Fatal(err)
	}
	rep := Analyze(dumps)
	if doctor.HasErrors(rep.Findings) || rep.Groups[0].Matched < 2 {
		t.Errorf("a one-rank dump of two completed collectives: %+v", rep)
	}
}

// e is an entry of group "0": a collective (seq > 0) or a p2p operation.
func e(seq int64, name string, in, out int64, dtype, state string) map[string]any {
	sizes := func(n int64) [][]int64 {
		if n < 0 {
			return [][]int64{}
		}
		return [][]int64{{n}}
	}
	return map[string]any{"record_id": seq, "process_group": []string{"0", "default_pg"}, "collective_seq_id": seq,
		"p2p_seq_id": 0, "profiling_name": "nccl:" + name, "input_sizes": sizes(in), "output_sizes": sizes(out),
		"input_dtypes": []string{dtype}, "output_dtypes": []string{dtype}, "state": state, "is_p2p": false}
}

func p2p(n int64, name, state string, size int64) map[string]any {
	m := e(0, name, size, size, "Float", state)
	m["is_p2p"], m["p2p_seq_id"], m["collective_seq_id"] = true, n, 0
	return m
}

// dumpsOf makes one JSON dump per rank (goccl's form) of group "0" with
// ranks 0..len(entries)-1 and parses it.
func dumpsOf(t *testing.T, lib string, entries ...[]map[string]any) []*Dump {
	t.Helper()
	var ranks []string
	for r := range entries {
		ranks = append(ranks, fmt.Sprint(r))
	}
	var out []*Dump
	for r, es := range entries {
		b, _ := json.Marshal(map[string]any{"version": "2.10", "comm_lib_version": lib, "rank": r,
			"pg_config": map[string]any{"0": map[string]string{"name": "0", "desc": "default_pg", "ranks": "[" + strings.Join(ranks, ", ") + "]"}},
			"pg_status": map[string]any{}, "entries": es})
		d, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// TestMismatchKinds: each of fr_trace's categories is found at the right
// collective and blames the rank that differs from the others.
func TestMismatchKinds(t *testing.T) {
	ok := func(seq int64) map[string]any { return e(seq, "all_reduce", 8, 8, "Float", "completed") }
	for _, tc := range []struct {
		name     string
		dumps    [][]map[string]any
		kind     string
		seq      int64
		culprits []int
		code     string
	}{
		{"type", [][]map[string]any{{ok(1), ok(2)}, {ok(1), e(2, "broadcast", 8, 8, "Float", "completed")}, {ok(1), ok(2)}},
			"COLLECTIVE_TYPE_MISMATCH", 2, []int{1}, "fr-type-mismatch"},
		{"size", [][]map[string]any{{ok(1)}, {ok(1)}, {e(1, "all_reduce", 7, 7, "Float", "completed")}},
			"SIZE_OR_SYNTAX_MISMATCH", 1, []int{2}, "fr-size-mismatch"},
		{"all_gather syntax", [][]map[string]any{{e(1, "all_gather", 4, 8, "Float", "started")}, {e(1, "all_gather", 4, 4, "Float", "started")}, {e(1, "all_gather", 4, 8, "Float", "started")}},
			"SIZE_OR_SYNTAX_MISMATCH", 1, []int{1}, "fr-size-mismatch"},
		{"dtype", [][]map[string]any{{ok(1)}, {e(1, "all_reduce", 8, 8, "BFloat16", "completed")}, {ok(1)}},
			"COLLECTIVE_DTYPE_MISMATCH", 1, []int{1}, "fr-dtype-mismatch"},
		{"state", [][]map[string]any{{ok(1)}, {ok(1)}, {e(1, "all_reduce", 8, 8, "Float", "started")}},
			"COLLECTIVE_STATE_MISMATCH", 1, []int{2}, "fr-state-mismatch"},
		{"missing", [][]map[string]any{{ok(1), ok(2), ok(3)}, {ok(1), ok(2)}, {ok(1), ok(2), ok(3)}},
			"MISSING_RANKS", 3, []int{1}, "fr-missing-rank"},
		{"not completed", [][]map[string]any{{ok(1), e(2, "all_reduce", 8, 8, "Float", "started")}, {ok(1), e(2, "all_reduce", 8, 8, "Float", "started")}},
			"NOT_COMPLETED", 2, []int{}, "fr-not-completed"},
		// Rank 0's ring dropped #1 and #2: the comparison starts at #3,
		// where rank 2 is the odd one.
		{"window", [][]map[string]any{{ok(3), ok(4)}, {ok(1), ok(2), ok(3), ok(4)}, {ok(1), ok(2), e(3, "all_reduce", 9, 9, "Float", "completed")}},
			"SIZE_OR_SYNTAX_MISMATCH", 3, []int{2}, "fr-size-mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Analyze(dumpsOf(t, "goccl", tc.dumps...))
			m := rep.Groups[0].Mismatch
			if m == nil || m.Kind != tc.kind || m.Seq != tc.seq || !slices.Equal(m.Culprits, tc.culprits) {
				t.Fatalf("mismatch %+v, want %s at #%d blaming %v", m, tc.kind, tc.seq, tc.culprits)
			}
			if rep.Findings[0].Code != tc.code {
				t.Errorf("findings %+v, want %s first", rep.Findings, tc.code)
			}
		})
	}
}

// TestP2P: an unmatched send names the receiver that never posted its
// recv; a send and its recv of different sizes are named both; goccl's
// per-pair numbers and PyTorch's order in the dump both match messages.
func TestP2P(t *testing.T) {
	for _, lib := range []string{"goccl", "2.21.5"} {
		rep := Analyze(dumpsOf(t, lib,
			[]map[string]any{p2p(1, "send 0->1", "completed", 4), p2p(2, "send 0->1", "started", 4)},
			[]map[string]any{p2p(1, "recv 1<-0", "completed", 4)}))
		if len(rep.Findings) != 1 || rep.Findings[0].Code != "fr-p2p-unmatched" || !strings.Contains(rep.Findings[0].Message, "culprit rank 1") {
			t.Errorf("%s: unmatched send: %+v", lib, rep.Findings)
		}
		rep = Analyze(dumpsOf(t, lib,
			[]map[string]any{p2p(1, "send 0->1", "started", 4)},
			[]map[string]any{p2p(1, "recv 1<-0", "started", 3)}))
		if len(rep.Findings) < 1 || rep.Findings[0].Code != "fr-p2p-size-mismatch" {
			t.Errorf("%s: size mismatch: %+v", lib, rep.Findings)
		}
	}
}

// TestNoDump: a member without a dump is reported, and the others are
// compared.
func TestNoDump(t *testing.T) {
	ds := dumpsOf(t, "goccl", []map[string]any{e(1, "barrier", -1, -1, "Float", "completed")}, nil, []map[string]any{e(1, "barrier", -1, -1, "Float", "completed")})
	rep := Analyze([]*Dump{ds[0], ds[2]})
	codes := []string{}
	for _, f := range rep.Findings {
		codes = append(codes, f.Code)
	}
	if !slices.Equal(codes, []string{"fr-no-dump", "fr-all-matched"}) || rep.Groups[0].Matched != 1 {
		t.Errorf("findings %v, groups %+v", codes, rep.Groups)
	}
}

// TestReadErrors: what is not a dump, a pickle cut short or naming other
// classes, and two dumps of one rank are errors, never panics.
func TestReadErrors(t *testing.T) {
	good, err := os.ReadFile("testdata/torch/dumps/nccl_trace_rank_0")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"text":      []byte("hello"),
		"json":      []byte(`{"entries": []}`),
		"cut":       good[:len(good)/2],
		"global":    []byte("\x80\x02cos\nsystem\nq\x00."),
		"empty":     {},
		"bad ranks": []byte(`{"version": "2.10", "pg_config": {"0": {"ranks": "[0, x]"}}}`),
	} {
		if _, err := Parse(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	dir := t.TempDir()
	for _, f := range []string{"a-0.json", "b-0.json"} {
		os.WriteFile(filepath.Join(dir, f), []byte(`{"version": "2.10", "pg_config": {"0": {"name": "0", "ranks": "[0]"}}}`), 0o644)
	}
	if _, err := ReadPaths([]string{dir}); err == nil || !strings.Contains(err.Error(), "both rank 0's dump") {
		t.Errorf("two dumps of rank 0: %v", err)
	}
}
