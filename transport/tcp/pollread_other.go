//go:build !unix

package tcp

import (
	"io"
	"net"
)

// newPollReader returns the connection itself outside Unix: reads park in
// Go's network poller at once.
func newPollReader(c *net.TCPConn) io.Reader { return c }
