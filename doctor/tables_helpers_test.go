package doctor

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// verbatimMarker separates the attribution header of a real input (source,
// hardware, the diagnosis stated in the thread) from the text exactly as
// posted.
const verbatimMarker = "# ===== VERBATIM BELOW =====\n"

// realInput returns the verbatim part of testdata/real-inputs/name.
func realInput(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "real-inputs", name))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), verbatimMarker)
	if !ok {
		t.Fatalf("%s: no verbatim marker", name)
	}
	return after
}

// tablesFile returns testdata/dir/name.
func tablesFile(t testing.TB, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tablesCodes returns the codes of the findings with the given severity
// ("" for any).
func tablesCodes(fs []Finding, sev Severity) map[string]int {
	m := map[string]int{}
	for _, f := range fs {
		if sev == "" || f.Severity == sev {
			m[f.Code]++
		}
	}
	return m
}

// tablesFindingWith returns the first finding with code whose message
// contains sub.
func tablesFindingWith(fs []Finding, code, sub string) (Finding, bool) {
	for _, f := range fs {
		if f.Code == code && strings.Contains(f.Message+" "+f.Fix, sub) {
			return f, true
		}
	}
	return Finding{}, false
}

// tablesCheckFindings checks the invariants every report's findings keep.
func tablesCheckFindings(t testing.TB, fs []Finding) {
	t.Helper()
	for _, f := range fs {
		if f.Severity != SevError && f.Severity != SevWarn && f.Severity != SevInfo {
			t.Errorf("bad severity %q in %+v", f.Severity, f)
		}
		if f.Code == "" || f.Message == "" || strings.ToLower(f.Code) != f.Code || strings.ContainsAny(f.Code, " _") {
			t.Errorf("bad code/message in %+v", f)
		}
	}
	for i := 1; i < len(fs); i++ {
		if severityRank(fs[i].Severity) < severityRank(fs[i-1].Severity) {
			t.Errorf("findings not sorted by severity: %v before %v", fs[i-1].Severity, fs[i].Severity)
		}
	}
}

// tablesJSON marshals v and fails the test on error.
func tablesJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTablesSortFindings: errors, then warnings, then notes, input order
// kept within a severity (also for 2000 findings with every error behind
// every note).
func TestTablesSortFindings(t *testing.T) {
	fs := []Finding{
		{Severity: SevInfo, Code: "i1"}, {Severity: SevWarn, Code: "w1"}, {Severity: SevError, Code: "e1"},
		{Severity: SevInfo, Code: "i2"}, {Severity: SevError, Code: "e2"}, {Severity: SevWarn, Code: "w2"},
	}
	sortFindings(fs)
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
	sortFindings(big)
	for i := 0; i < n/2; i++ {
		if big[i].Severity != SevError || big[i].Message != strconv.Itoa(i+n/2) || big[i+n/2].Severity != SevInfo {
			t.Fatalf("position %d: %+v", i, big[i])
		}
	}
}

// TestFindingCodesDocumented: every finding code a reader's source emits
// has a row in that file's list of codes ("//\tcode  severity  meaning").
func TestFindingCodesDocumented(t *testing.T) {
	emit := regexp.MustCompile(`(?:Code:\s*|add\(\w+,\s*|Host(?:Error|Warn|Info),\s*)"([a-z0-9]+(?:-[a-z0-9]+)+)"`)
	for _, file := range []string{"nccltests.go", "topo.go", "ibv.go", "host.go"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		n := 0
		for _, m := range emit.FindAllStringSubmatch(src, -1) {
			n++
			if !regexp.MustCompile(`(?m)^//\t` + regexp.QuoteMeta(m[1]) + ` +(error|warn|info)`).MatchString(src) {
				t.Errorf("%s: code %s is not in the file's list of codes", file, m[1])
			}
		}
		if n < 5 {
			t.Errorf("%s: only %d codes found: the pattern no longer matches the source", file, n)
		}
	}
}

// tablesCheckReport runs the checks every reader's report must pass (valid
// findings, WriteText and JSON succeed) and logs the text with -v.
func tablesCheckReport(t *testing.T, rep interface{ WriteText(io.Writer) error }, findings []Finding) {
	t.Helper()
	tablesCheckFindings(t, findings)
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	tablesJSON(t, rep)
	if testing.Verbose() {
		t.Log("\n" + b.String())
	}
}
