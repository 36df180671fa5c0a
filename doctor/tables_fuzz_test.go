package doctor

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tablesSeed adds the verbatim parts of the real inputs with the given
// prefix and every file of testdata/dir to f's corpus.
func tablesSeed(f *testing.F, prefix, dir string) {
	real, _ := filepath.Glob(filepath.Join("testdata", "real-inputs", prefix+"*.txt"))
	for _, p := range real {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if _, after, ok := strings.Cut(string(b), verbatimMarker); ok {
			f.Add([]byte(after))
		}
	}
	own, _ := filepath.Glob(filepath.Join("testdata", dir, "*"))
	for _, p := range own {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// tablesFuzzInvariants checks that a report prints and marshals and that
// its findings are complete.
func tablesFuzzInvariants(t *testing.T, rep any, write func(*bytes.Buffer) error, fs []Finding) {
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

func FuzzReadNCCLTests(f *testing.F) {
	tablesSeed(f, "nccl-tests-", "nccltests")
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := ReadNCCLTests(bytes.NewReader(data), NCCLTestsOptions{ExpectBusBW: 50})
		if err != nil {
			t.Fatal(err)
		}
		tablesFuzzInvariants(t, rep, func(b *bytes.Buffer) error { return rep.WriteText(b) }, rep.Findings)
		for _, tt := range rep.Tests {
			if len(tt.Rows) == 0 {
				t.Fatal("table without rows")
			}
			for _, r := range tt.Rows {
				if r.Size < 0 || r.Count < 0 {
					t.Fatalf("negative size/count %+v", r)
				}
			}
		}
	})
}

func FuzzParseTopo(f *testing.F) {
	tablesSeed(f, "topo-", "topo")
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := ParseTopo(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		tablesFuzzInvariants(t, rep, func(b *bytes.Buffer) error { return rep.WriteText(b) }, rep.Findings)
		if len(rep.Locality) != len(rep.GPUs) {
			t.Fatalf("locality %d for %d GPUs", len(rep.Locality), len(rep.GPUs))
		}
		for _, l := range rep.Locality {
			if len(l.NICs) != len(l.NICDevices) {
				t.Fatalf("nics/devices %+v", l)
			}
		}
	})
}

func FuzzParseIBV(f *testing.F) {
	tablesSeed(f, "ibv-", "ibv")
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := ParseIBV(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		tablesFuzzInvariants(t, rep, func(b *bytes.Buffer) error { return rep.WriteText(b) }, rep.Findings)
		for _, d := range rep.Devices {
			for _, p := range d.Ports {
				if p.GIDs == nil {
					t.Fatalf("nil GIDs on %s", d.Name)
				}
			}
		}
	})
}
