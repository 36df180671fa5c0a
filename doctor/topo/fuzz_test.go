package topo

import (
	"testing"

	"github.com/goccl/goccl/doctor/internal/doctortest"
)

func FuzzParseTopo(f *testing.F) {
	doctortest.Fuzz(f, "topo-", Parse, func(t *testing.T, rep *Report) {
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
