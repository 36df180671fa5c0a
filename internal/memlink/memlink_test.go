package memlink

import (
	"testing"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/linktest"
)

// The links copy every message, so they allocate.
func TestLinkConformance(t *testing.T) {
	for name, mesh := range map[string]func(n, depth int) [][]transport.Link{
		"Mesh": Mesh, "MeshInline": MeshInline, "MeshDirect": MeshDirect,
	} {
		t.Run(name, func(t *testing.T) {
			linktest.RunConfig(t, linktest.Config{
				NewPair: func(t *testing.T) (a, b transport.Link) {
					m := mesh(2, 4)
					return m[0][1], m[1][0]
				},
				Allocates: true,
			})
		})
	}
}
