package ibv

import (
	"testing"

	"github.com/goccl/goccl/doctor/internal/doctortest"
)

func FuzzParseIBV(f *testing.F) {
	doctortest.Fuzz(f, "ibv-", Parse, func(t *testing.T, rep *Report) {
		for _, d := range rep.Devices {
			for _, p := range d.Ports {
				if p.GIDs == nil {
					t.Fatalf("nil GIDs on %s", d.Name)
				}
			}
		}
	})
}
