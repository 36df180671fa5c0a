package doctortest

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

// Fuzz is a reader's fuzz target: it seeds f (Seed with prefix) and
// checks, for any input, that read returns a report without error, that
// the report prints and marshals, that its findings are complete, and
// check (nil for none).
func Fuzz[R Report](f *testing.F, prefix string, read func(io.Reader) (R, error), check func(t *testing.T, rep R)) {
	Seed(f, prefix)
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := read(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteText(io.Discard); err != nil {
			t.Fatal(err)
		}
		if _, err := json.Marshal(rep); err != nil {
			t.Fatal(err)
		}
		for _, f := range findingsOf(t, rep) {
			if f.Severity == "" || f.Code == "" || f.Message == "" {
				t.Fatalf("incomplete finding %+v", f)
			}
		}
		if check != nil {
			check(t, rep)
		}
	})
}
