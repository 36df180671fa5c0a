//go:build !linux

package rdma

import "net"

func udpOffload(conn *net.UDPConn) bool        { return false }
func appendSegmentCmsg(b []byte, _ int) []byte { return b }
func setDontFragment(*net.UDPConn) error       { return nil }
func recvCmsgs(oob []byte) (seg, tos int)      { return 0, -1 }
func setTOS(*net.UDPConn, int) error           { return nil }
func setRecvErr(*net.UDPConn) error            { return nil }
func drainErrors(*net.UDPConn)                 {}
