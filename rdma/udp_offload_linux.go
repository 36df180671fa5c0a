package rdma

import (
	"encoding/binary"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// udpOffload turns on UDP_GRO for conn and reports whether UDP_SEGMENT can
// be used for sending (both Linux socket options of the UDP level, udp(7)).
func udpOffload(conn *net.UDPConn) bool {
	rc, err := conn.SyscallConn()
	if err != nil {
		return false
	}
	gso := false
	rc.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1)
		// The option exists where getsockopt knows it; its value (0:
		// the segment size comes with each send) is not needed.
		_, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT)
		gso = err == nil
	})
	return gso
}

// appendSegmentCmsg appends a UDP_SEGMENT control message carrying the
// segment size (a uint16 in host order).
func appendSegmentCmsg(b []byte, segSize int) []byte {
	n := unix.CmsgSpace(2)
	start := len(b)
	b = append(b, make([]byte, n)...)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[start]))
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[start+unix.CmsgLen(0):], uint16(segSize))
	return b
}

// grSegmentSize is the segment size of a UDP_GRO control message in oob,
// or 0 when there is none (the buffer is one datagram).
func grSegmentSize(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.IPPROTO_UDP && m.Header.Type == unix.UDP_GRO && len(m.Data) >= 4 {
			return int(binary.NativeEndian.Uint32(m.Data))
		}
	}
	return 0
}
