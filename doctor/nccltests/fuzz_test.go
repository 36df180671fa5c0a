package nccltests

import (
	"bytes"
	"testing"

	"github.com/goccl/goccl/doctor/internal/doctortest"
)

func FuzzReadNCCLTests(f *testing.F) {
	doctortest.Seed(f, "nccl-tests-")
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := Read(bytes.NewReader(data), Options{ExpectBusBW: 50})
		if err != nil {
			t.Fatal(err)
		}
		doctortest.FuzzInvariants(t, rep, func(b *bytes.Buffer) error { return rep.WriteText(b) }, rep.Findings)
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
