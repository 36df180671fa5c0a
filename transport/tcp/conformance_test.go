package tcp

import (
	"testing"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/linktest"
)

// tcpSizes are the message sizes where a TCP link changes how it moves a
// message: staging pieces, chunks, striping and TrySend's limits.
var tcpSizes = []int{pieceSize - 1, pieceSize + 1, chunkSize - 1, chunkSize + 1,
	trySendLimit, trySendLimit + 1, stripeMin, stripeMin + 1, 3*chunkSize + 64, trySendMax, trySendMax + 1}

// TestLinkConformance runs the transport.Link suite over plain links with
// one socket each way and with three (striped), and over links with
// checksums, TLS and both, with two sockets each way (so that messages up to
// stripeMin go on one socket and larger ones are striped). TLS links
// allocate: crypto/tls allocates once per record it reads
// ((*tls.Conn).readFromUntil, Go 1.26).
func TestLinkConformance(t *testing.T) {
	withTLS := func(t *testing.T) []EndpointOption { return []EndpointOption{jobTLS(t, "tok")} }
	for _, tc := range []struct {
		name   string
		nsocks int
		opts   func(t *testing.T) []EndpointOption
		allocs bool
	}{
		{"socks1", 1, nil, false},
		{"socks3", 3, nil, false},
		{"checksum", 2, func(*testing.T) []EndpointOption { return []EndpointOption{WithChecksum()} }, false},
		{"tls", 2, withTLS, true},
		{"tls+checksum", 2, func(t *testing.T) []EndpointOption { return append(withTLS(t), WithChecksum()) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.RunConfig(t, linktest.Config{
				NewPair: func(t *testing.T) (a, b transport.Link) {
					if tc.opts == nil {
						return connectPair(t, 0, 1, tc.nsocks)
					}
					return connectEndpoints(t, listenOpts(t, 0, tc.opts(t)...), listenOpts(t, 1, tc.opts(t)...), tc.nsocks)
				},
				Sizes:     tcpSizes,
				Allocates: tc.allocs,
			})
		})
	}
}
