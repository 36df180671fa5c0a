package doctortest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccl/goccl/doctor"
)

// Seed adds to f's corpus the verbatim parts of the real inputs whose
// names start with prefix (testdata/real-inputs) and every testdata/*.txt.
func Seed(f *testing.F, prefix string) {
	real, _ := filepath.Glob(filepath.Join("testdata", "real-inputs", prefix+"*.txt"))
	for _, p := range real {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if _, after, ok := strings.Cut(string(b), VerbatimMarker); ok {
			f.Add([]byte(after))
		}
	}
	own, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, p := range own {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzInvariants checks that a report prints and marshals and that its
// findings are complete.
func FuzzInvariants(t *testing.T, rep any, write func(*bytes.Buffer) error, fs []doctor.Finding) {
	t.Helper()
	var b bytes.Buffer
	if err := write(&b); err != nil {
		t.Fatal(err)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Severity == "" || f.Code == "" || f.Message == "" {
			t.Fatalf("incomplete finding %+v", f)
		}
	}
}
