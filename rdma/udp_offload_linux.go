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

// setDontFragment makes the kernel set DF on conn's datagrams and not
// ignore it (IP_PMTUDISC_PROBE: the device's MTU bounds a datagram, as a
// RoCE NIC's configured MTU does, and nothing is fragmented). Linux then
// gives them the IPv4 ID 0, and the segments of a UDP_SEGMENT buffer 0, 1,
// 2, ...: the IDs the device computes their ICRCs with (wire.ICRCv2IDDelta).
// Under the default (IP_PMTUDISC_WANT) the kernel ignores DF on UDP
// sockets and draws each ID from a counter that nothing in user space can
// predict.
func setDontFragment(conn *net.UDPConn) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE)
	}); err != nil {
		return err
	}
	return serr
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

// recvCmsgs reads oob's UDP_GRO segment size (0: one datagram) and IP_TOS
// byte (-1: none; the socket asks for it with setTOS's IP_RECVTOS).
func recvCmsgs(oob []byte) (seg, tos int) {
	tos = -1
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, tos
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_UDP && m.Header.Type == unix.UDP_GRO && len(m.Data) >= 4:
			seg = int(binary.NativeEndian.Uint32(m.Data))
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) >= 1:
			tos = int(m.Data[0])
		}
	}
	return seg, tos
}

// setTOS gives conn's datagrams the IPv4 TOS byte tos (DSCP and ECN
// field) and has the kernel report each received datagram's (IP_RECVTOS).
func setTOS(conn *net.UDPConn, tos int) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos); serr == nil {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		}
	}); err != nil {
		return err
	}
	return serr
}

// setRecvErr has the kernel report a datagram that the host's own egress
// queue (the interface's qdisc) dropped as ENOBUFS from the send call
// (IP_RECVERR; without it UDP drops such datagrams silently), so that the
// device can hold them back and send them again, as a NIC's send queue
// never loses what its host posted. ICMP errors then queue on the socket
// too (drainErrors reads them).
func setRecvErr(conn *net.UDPConn) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVERR, 1)
	}); err != nil {
		return err
	}
	return serr
}

// drainErrors reads and discards the errors queued on conn (IP_RECVERR's
// queue: ICMP port unreachable from a peer whose device closed, ...),
// which would otherwise take room from its receive buffer.
func drainErrors(conn *net.UDPConn) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return
	}
	var b [256]byte
	var oob [256]byte
	rc.Read(func(fd uintptr) bool {
		for {
			if _, _, _, _, err := unix.Recvmsg(int(fd), b[:], oob[:], unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT); err != nil {
				return true // EAGAIN: empty
			}
		}
	})
}
