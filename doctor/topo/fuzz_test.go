package topo

import (
	"bytes"
	"testing"

	"github.com/goccl/goccl/doctor/internal/doctortest"
)

func FuzzParseTopo(f *testing.F) {
	doctortest.Seed(f, "topo-")
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := Parse(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		doctortest.FuzzInvariants(t, rep, func(b *bytes.Buffer) error { return rep.WriteText(b) }, rep.Findings)
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
