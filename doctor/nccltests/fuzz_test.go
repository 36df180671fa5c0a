package nccltests

import (
	"io"
	"testing"

	"github.com/goccl/goccl/doctor/internal/doctortest"
)

func FuzzReadNCCLTests(f *testing.F) {
	read := func(r io.Reader) (*Report, error) { return Read(r, Options{ExpectBusBW: 50}) }
	doctortest.Fuzz(f, "nccl-tests-", read, func(t *testing.T, rep *Report) {
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
