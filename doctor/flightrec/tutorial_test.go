package flightrec

import (
	"slices"
	"strings"
	"testing"
)

// TestTorchTutorialDumps reads testdata/torch/tutorial: the two ranks'
// dumps of the end-to-end example of PyTorch's tutorial "Flight Recorder
// for Debugging Stuck Jobs" (pytorch/tutorials,
// prototype_source/flight_recorder_tutorial.rst), in its version-2.5 form
// with the published entry as rank 0's first (make_dumps.py tells the
// story). torchfrtrace's published output for them:
//
//	Not all ranks joining collective 5 at entry 4
//	collective: nccl:all_reduce, missing ranks: {1},
//	input sizes: [[3, 4]], output sizes: [[3, 4]], collective state: scheduled
//
// The doctor reports that collective the same way, as the hang that
// follows the first mismatch. Where they differ: fr_trace's code (of 2.5
// and now) first reports collective 3, rank 0's [[4, 5]] against rank 1's
// [[3, 4]], "Culprit rank 1; SIZE_OR_SYNTAX_MISMATCH" (it blames the rank
// compared with the first; the tutorial shows only the lines of #5), and
// its #5 line says rank 1 is missing. The doctor blames rank 0 at #3: rank
// 0's #4 and #5 line up with rank 1's #3 and #4, so rank 0 issued one
// collective more, which is what crash.py does.
func TestTorchTutorialDumps(t *testing.T) {
	dumps, err := ReadPaths([]string{"testdata/torch/tutorial"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dumps) != 2 || dumps[0].Rank != 0 || dumps[1].Rank != 1 {
		t.Fatalf("dumps %+v", dumps)
	}
	for _, d := range dumps {
		if d.Format != "pickle" || d.Version != "2.5" || d.Lib != "" || !slices.Equal(d.Groups["0"].Ranks, []int{0, 1}) || d.Groups["0"].Desc != "default_pg" {
			t.Errorf("rank %d: %+v", d.Rank, d)
		}
	}
	if n0, n1 := len(dumps[0].Entries), len(dumps[1].Entries); n0 != 5 || n1 != 4 {
		t.Fatalf("entries %d and %d, want 5 and 4", n0, n1)
	}
	// The published entry, null times and the tuple process group included.
	e0 := dumps[0].Entries[0]
	if e0.RecordID != 0 || e0.CollectiveSeqID != 1 || e0.ProfilingName != "nccl:all_reduce" || !slices.Equal(e0.ProcessGroup, []string{"0", "default_pg"}) ||
		e0.TimeCreatedNs != 1724779239936775119 || e0.State != "completed" || !e0.Retired || e0.IsP2P ||
		len(e0.InputSizes) != 1 || !slices.Equal(e0.InputSizes[0], []int64{3, 4}) || !slices.Equal(e0.OutputDtypes, []string{"Float"}) {
		t.Errorf("published entry read as %+v", e0)
	}

	rep := Analyze(dumps)
	g := rep.Groups[0]
	m, h := g.Mismatch, g.Hang
	if m == nil || m.Seq != 3 || m.Kind != "SIZE_OR_SYNTAX_MISMATCH" || !slices.Equal(m.Culprits, []int{0}) || !m.Shift ||
		!strings.Contains(m.Detail, "rank(s) 0 issued one collective more, #3 all_reduce (input sizes [[4 5]])") {
		t.Errorf("first mismatch %+v, want #3's sizes, rank 0 one collective ahead", m)
	}
	// torchfrtrace's report: collective 5, rank 1 missing, [[3, 4]], scheduled.
	if h == nil || h.Seq != 5 || h.Op != "all_reduce" || h.Kind != "MISSING_RANKS" || !slices.Equal(h.Culprits, []int{1}) ||
		!strings.Contains(h.Detail, "scheduled on 0; input sizes [[3 4]], output sizes [[3 4]]") {
		t.Errorf("hang %+v, want #5 all_reduce, rank 1 missing, [[3 4]], scheduled", h)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Code != "fr-size-mismatch" ||
		!strings.Contains(rep.Findings[0].Message, "then collective #5 all_reduce: rank(s) 1 never entered it") ||
		!strings.Contains(rep.Findings[0].Fix, "one collective more or fewer") {
		t.Errorf("findings %+v", rep.Findings)
	}
}

// TestShift: ranks that skipped a collective the most ranks issued are
// blamed, and the collective the others then wait in is named; where the
// later collectives do not line up there is no shift and no hang.
func TestShift(t *testing.T) {
	ok := func(seq int64) map[string]any { return e(seq, "all_reduce", 8, 8, "Float", "completed") }
	bc := e(2, "broadcast", 8, 8, "Float", "completed")
	wait := e(3, "all_reduce", 8, 8, "Float", "scheduled")
	rep := Analyze(dumpsOf(t, "goccl", []map[string]any{ok(1), bc, wait}, []map[string]any{ok(1), ok(2)}, []map[string]any{ok(1), bc, wait}))
	m, h := rep.Groups[0].Mismatch, rep.Groups[0].Hang
	if m == nil || m.Kind != "COLLECTIVE_TYPE_MISMATCH" || !m.Shift || !slices.Equal(m.Culprits, []int{1}) || !strings.Contains(m.Detail, "rank(s) 1 skipped #2 broadcast") {
		t.Errorf("skipped broadcast: %+v", m)
	}
	if h == nil || h.Seq != 3 || !slices.Equal(h.Culprits, []int{1}) {
		t.Errorf("hang %+v, want #3 without rank 1", h)
	}
	// Rank 1 ran a broadcast where the others ran an all_reduce, then
	// went on in step: no shift.
	rep = Analyze(dumpsOf(t, "goccl", []map[string]any{ok(1), ok(2), ok(3)}, []map[string]any{ok(1), bc, ok(3)}))
	if m := rep.Groups[0].Mismatch; m == nil || m.Shift || rep.Groups[0].Hang != nil {
		t.Errorf("in step: %+v, hang %+v", m, rep.Groups[0].Hang)
	}
}
