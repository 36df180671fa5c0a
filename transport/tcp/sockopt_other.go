//go:build !linux

package tcp

import "net"

// setCongestion leaves the system's congestion control alone outside Linux.
func setCongestion(c *net.TCPConn, name string) {}

type roomQuery struct{}

func (q *roomQuery) init(c *net.TCPConn) {}

// has is not known outside Linux: TrySend sends at most 64 KiB.
func (q *roomQuery) has(n int) bool { return false }

func (s *sock) sendRoom(n int) bool { return s.conn.room(n) }

// newTCPStream is a netStream outside Linux.
func newTCPStream(c *net.TCPConn) stream { return newNetStream(c) }
