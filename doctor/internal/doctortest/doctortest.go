// Package doctortest holds the test helpers the doctor readers share:
// reading test inputs, checking findings and reports, seeding fuzz
// corpora and checking that finding codes are documented.
package doctortest

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/goccl/goccl/doctor"
)

// VerbatimMarker separates the attribution header of a real input (source,
// hardware, the diagnosis stated in the thread) from the text exactly as
// posted.
const VerbatimMarker = "# ===== VERBATIM BELOW =====\n"

// Verbatim returns the verbatim part of the real input at path.
func Verbatim(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), VerbatimMarker)
	if !ok {
		t.Fatalf("%s: no verbatim marker", path)
	}
	return after
}

// RealInput returns the verbatim part of testdata/real-inputs/name.
func RealInput(t testing.TB, name string) string {
	t.Helper()
	return Verbatim(t, filepath.Join("testdata", "real-inputs", name))
}

// File returns testdata/name.
func File(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Codes returns the codes of the findings with the given severity ("" for
// any) and how often each occurs.
func Codes(fs []doctor.Finding, sev doctor.Severity) map[string]int {
	m := map[string]int{}
	for _, f := range fs {
		if sev == "" || f.Severity == sev {
			m[f.Code]++
		}
	}
	return m
}

// FindingWith returns the first finding with code whose message or fix
// contains sub.
func FindingWith(fs []doctor.Finding, code, sub string) (doctor.Finding, bool) {
	for _, f := range fs {
		if f.Code == code && strings.Contains(f.Message+" "+f.Fix, sub) {
			return f, true
		}
	}
	return doctor.Finding{}, false
}

// CheckFindings checks the invariants every report's findings keep: a
// known severity, a kebab-case code, a message, errors first.
func CheckFindings(t testing.TB, fs []doctor.Finding) {
	t.Helper()
	for _, f := range fs {
		if f.Severity != doctor.SevError && f.Severity != doctor.SevWarn && f.Severity != doctor.SevInfo {
			t.Errorf("bad severity %q in %+v", f.Severity, f)
		}
		if f.Code == "" || f.Message == "" || strings.ToLower(f.Code) != f.Code || strings.ContainsAny(f.Code, " _") {
			t.Errorf("bad code/message in %+v", f)
		}
	}
	for i := 1; i < len(fs); i++ {
		if fs[i].Severity.Rank() < fs[i-1].Severity.Rank() {
			t.Errorf("findings not sorted by severity: %v before %v", fs[i-1].Severity, fs[i].Severity)
		}
	}
}

// JSON marshals v and fails the test on error.
func JSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Report is what every reader's report has; its findings are its
// Findings field.
type Report interface{ WriteText(io.Writer) error }

// Read runs read on text, fails the test on an error, checks the report
// with CheckReport and returns it.
func Read[R Report](t testing.TB, read func(io.Reader) (R, error), text string) R {
	t.Helper()
	rep, err := read(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	CheckReport(t, rep, findingsOf(t, rep))
	return rep
}

// findingsOf returns the Findings field of the report rep points to.
func findingsOf(t testing.TB, rep any) []doctor.Finding {
	t.Helper()
	v := reflect.Indirect(reflect.ValueOf(rep))
	if v.Kind() == reflect.Struct {
		if f := v.FieldByName("Findings"); f.IsValid() {
			if fs, ok := f.Interface().([]doctor.Finding); ok {
				return fs
			}
		}
	}
	t.Fatalf("%T has no Findings field", rep)
	return nil
}

// CheckReport runs the checks every reader's report must pass (valid
// findings, WriteText and JSON succeed) and logs the text with -v.
func CheckReport(t testing.TB, rep Report, findings []doctor.Finding) {
	t.Helper()
	CheckFindings(t, findings)
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	JSON(t, rep)
	if testing.Verbose() {
		t.Log("\n" + b.String())
	}
}

// emitRe matches a finding code where a reader emits one: a Finding
// literal's "Code:", a call add(sev, "code", ...), or host's check(name,
// StatusWarn, "code", ...).
var emitRe = regexp.MustCompile(`(?:Code:\s*|add\([\w.]+,\s*|Status(?:Error|Warn|Info),\s*)"([a-z0-9]+(?:-[a-z0-9]+)+)"`)

// listedRe matches a row of a package doc's list of finding codes, as
// ast.CommentGroup.Text gives it: "\tcode  severity  meaning" (severity
// error, warn or info, possibly followed by others).
var listedRe = regexp.MustCompile(`(?m)^\t([a-z0-9]+(?:-[a-z0-9]+)+) +(?:error|warn|info)`)

// CodesDocumented checks the package in the current directory (a test's
// own): every finding code its source files emit has a row in its package
// doc's list of codes, every row names a code the source emits, and at
// least min codes were found (else the pattern no longer matches the
// source). Codes are found where emitRe says, and where the patterns also
// (one submatch: the code) match for a package with its own way. It
// returns the codes emitted.
func CodesDocumented(t testing.TB, min int, also ...string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	emits := []*regexp.Regexp{emitRe}
	for _, p := range also {
		emits = append(emits, regexp.MustCompile(p))
	}
	listed := map[string]bool{}
	emitted := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil {
			for _, m := range listedRe.FindAllStringSubmatch(f.Doc.Text(), -1) {
				listed[m[1]] = true
			}
		}
		for _, re := range emits {
			for _, m := range re.FindAllStringSubmatch(string(src), -1) {
				emitted[m[1]] = true
			}
		}
	}
	for c := range emitted {
		if !listed[c] {
			t.Errorf("code %s is emitted but not in the package doc's list of codes", c)
		}
	}
	for c := range listed {
		if !emitted[c] {
			t.Errorf("code %s is in the package doc's list of codes but never emitted", c)
		}
	}
	if len(emitted) < min {
		t.Errorf("only %d codes found: the pattern no longer matches the source", len(emitted))
	}
	return emitted
}

// AllocBytes returns the bytes allocated while fn runs (all goroutines:
// call it from tests that do not run in parallel).
func AllocBytes(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
