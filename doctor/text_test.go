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
