package ibv

import (
	"bytes"
	"testing"

	"github.com/goccl/goccl/doctor/internal/doctortest"
)

func FuzzParseIBV(f *testing.F) {
	doctortest.Seed(f, "ibv-")
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := Parse(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		doctortest.FuzzInvariants(t, rep, func(b *bytes.Buffer) error { return rep.WriteText(b) }, rep.Findings)
		for _, d := range rep.Devices {
			for _, p := range d.Ports {
				if p.GIDs == nil {
					t.Fatalf("nil GIDs on %s", d.Name)
				}
			}
		}
	})
}
