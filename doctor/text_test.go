package doctor

import (
	"strconv"
	"strings"
	"testing"
)

// TestSortFindings: errors, then warnings, then notes, input order kept
// within a severity (also for 2000 findings with every error behind every
// note).
func TestSortFindings(t *testing.T) {
	fs := []Finding{
		{Severity: SevInfo, Code: "i1"}, {Severity: SevWarn, Code: "w1"}, {Severity: SevError, Code: "e1"},
		{Severity: SevInfo, Code: "i2"}, {Severity: SevError, Code: "e2"}, {Severity: SevWarn, Code: "w2"},
	}
	SortFindings(fs)
	var got []string
	for _, f := range fs {
		got = append(got, f.Code)
	}
	if strings.Join(got, ",") != "e1,e2,w1,w2,i1,i2" {
		t.Errorf("order %v", got)
	}
	const n = 2000
	big := make([]Finding, n)
	for i := range big {
		big[i] = Finding{Severity: SevInfo, Code: "i"}
		if i >= n/2 {
			big[i] = Finding{Severity: SevError, Code: "e", Message: strconv.Itoa(i)}
		}
	}
	SortFindings(big)
	for i := 0; i < n/2; i++ {
		if big[i].Severity != SevError || big[i].Message != strconv.Itoa(i+n/2) || big[i+n/2].Severity != SevInfo {
			t.Fatalf("position %d: %+v", i, big[i])
		}
	}
}

// TestFolder: findings that differ only in their numbers fold into the
// first, with the count and the first and last lines; others stay apart
// and in order; a finding seen once comes back unchanged and prints as
// before.
func TestFolder(t *testing.T) {
	var fo Folder
	fo.Add(Finding{Severity: SevInfo, Code: "avg", Message: "table 1 (line 10): 70.742 GB/s", Fix: "f"}, 10)
	fo.Add(Finding{Severity: SevWarn, Code: "low", Message: "table 1: 3 sizes"}, 10)
	fo.Add(Finding{Severity: SevInfo, Code: "avg", Message: "table 2 (line 74): 68.5 GB/s", Fix: "g"}, 74)
	fo.Add(Finding{Severity: SevInfo, Code: "avg", Message: "table 3 (all_gather): 1 GB/s"}, 80)
	fo.Add(Finding{Severity: SevError, Code: "avg", Message: "table 4 (line 90): 70 GB/s"}, 90)
	fo.Add(Finding{Severity: SevInfo, Code: "avg", Message: "table 5 (line 138): 7 GB/s"}, 138)
	fs := fo.Findings()
	if len(fs) != 4 {
		t.Fatalf("%d findings: %+v", len(fs), fs)
	}
	if f := fs[0]; f.Message != "table 1 (line 10): 70.742 GB/s" || f.Fix != "f" || f.Count != 3 || f.FirstLine != 10 || f.LastLine != 138 {
		t.Errorf("folded %+v", f)
	}
	for _, f := range fs[1:] {
		if f.Count != 0 || f.FirstLine != 0 || f.LastLine != 0 {
			t.Errorf("single finding with count or lines: %+v", f)
		}
	}
	var b strings.Builder
	if err := WriteFindings(&b, fs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  INFO  avg: table 1 (line 10): 70.742 GB/s (×3, lines 10–138)\n        fix: f\n",
		"  WARN  low: table 1: 3 sizes\n",
		"  INFO  avg: table 3 (all_gather): 1 GB/s\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
	if got := messageShape("mlx5_0 port 1: 4096 < 8.5, v1.2.3 at 10.0.0.1."); got != "mlx#_# port #: # < #, v# at #." {
		t.Errorf("shape %q", got)
	}
	// Bounded: past foldMaxShapes shapes, a code folds into one finding.
	var many Folder
	for i := 0; i < 3*foldMaxShapes; i++ {
		many.Add(Finding{Severity: SevWarn, Code: "c", Message: strings.Repeat("x", i%(2*foldMaxShapes))}, i+1)
	}
	if n := len(many.Findings()); n != foldMaxShapes+1 {
		t.Errorf("%d findings for %d distinct messages, want %d", n, 2*foldMaxShapes, foldMaxShapes+1)
	}
}

// TestParseNCCLInt: integers as strtoll(s, &end, 0) reads them, the
// trailing "." of NCCL's log lines and other text ignored.
func TestParseNCCLInt(t *testing.T) {
	for _, c := range []struct {
		in string
		n  int64
		ok bool
	}{
		{"1", 1, true}, {"1.", 1, true}, {"2.", 2, true}, {"-1.", -1, true}, {" 1", 1, true}, {"1 ", 1, true},
		{"0x1", 1, true}, {"0X1f", 31, true}, {"0x", 0, true}, {"0x0", 0, true}, {"010", 8, true}, {"09", 0, true},
		{"0.", 0, true}, {"00", 0, true}, {"+7", 7, true}, {"99999999999999999999", 1 << 62, true},
		{"", 0, false}, {"no", 0, false}, {"yes", 0, false}, {"-", 0, false}, {".5", 0, false},
	} {
		if n, ok := ParseNCCLInt(c.in); n != c.n || ok != c.ok {
			t.Errorf("ParseNCCLInt(%q) = %d, %t; want %d, %t", c.in, n, ok, c.n, c.ok)
		}
	}
}
