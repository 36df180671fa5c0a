package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/rdma/wire"
)

// packetLink carries RoCE v1: Ethernet frames of Ethertype 0x8915 (GRH,
// BTH ... ICRC; IBTA vol. 1 annex A16) through an AF_PACKET socket bound to
// one interface. The device's GID is the interface's link-local GID (made
// from its MAC, as a RoCE NIC's GID index 0), and a peer's MAC is read back
// from its GID, so no neighbour resolution is needed: RoCE v1 is an L2
// protocol and reaches only hosts on the same Ethernet segment.
type packetLink struct {
	f       *os.File
	ifname  string
	ifindex int
	mac     [6]byte
	gid     [16]byte
	ifMTU   int
	txq     [][]byte // frames queued for flush
	n       int      // frames in txq
	sent    int
}

func openPacketLink(ifname string) (*packetLink, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("interface %s has no Ethernet address (RoCE v1 runs over Ethernet)", ifname)
	}
	proto := int(htons(wire.EthertypeRoCEv1))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("RoCE v1 needs a raw packet socket on %s: run as root or with CAP_NET_RAW: %w", ifname, err)
		}
		return nil, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(wire.EthertypeRoCEv1), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding a packet socket to %s: %w", ifname, err)
	}
	// Our own frames would otherwise come back to us (Linux 4.20+; older
	// kernels fall back on the source GID check in readLoop).
	unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
	// A window of frames must fit the receive buffer, or a slow reader
	// loses them in the kernel and RC spends its retries on that: the
	// FORCE variants (root, which AF_PACKET needs anyway) pass
	// net.core.rmem_max's cap.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 8<<20) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 8<<20)
	}
	l := &packetLink{f: os.NewFile(uintptr(fd), "packet:"+ifname), ifname: ifname, ifindex: ifi.Index, ifMTU: ifi.MTU}
	copy(l.mac[:], ifi.HardwareAddr)
	l.gid = wire.LinkLocalGID(l.mac)
	return l, nil
}

// htons is v in network byte order, as sockaddr_ll and socket(2) take the
// protocol.
func htons(v uint16) uint16 { return binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, v)) }

// grh is the GRH of a packet of ib's length from this device to dgid.
func (l *packetLink) grh(dgid [16]byte, ibLen int) wire.GRH {
	return wire.GRH{IPVer: 6, PayLen: uint16(ibLen + wire.ICRCSize), NextHeader: wire.NextHeaderBTH, HopLimit: 1, SGID: l.gid, DGID: dgid}
}

func (l *packetLink) source(int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16(l.gid), 0)
}

func (l *packetLink) icrc(_ int, to netip.AddrPort, ib []byte) (uint32, error) {
	g := l.grh(to.Addr().As16(), len(ib))
	var hdr [wire.GRHSize]byte
	return wire.ICRCv1(g.Append(hdr[:0]), ib)
}

func (l *packetLink) queue(pkt []byte, _ int, to netip.AddrPort) {
	dgid := to.Addr().As16()
	dmac, ok := wire.MACFromLinkLocalGID(dgid)
	if !ok {
		return // refused when the QP's address vector was set
	}
	if l.n == len(l.txq) {
		l.txq = append(l.txq, make([]byte, 0, 4200))
	}
	b := append(l.txq[l.n][:0], dmac[:]...)
	b = append(b, l.mac[:]...)
	b = binary.BigEndian.AppendUint16(b, wire.EthertypeRoCEv1)
	g := l.grh(dgid, len(pkt)-wire.ICRCSize)
	b = g.Append(b)
	l.txq[l.n] = append(b, pkt...)
	l.n++
}

func (l *packetLink) flush() int {
	for _, fr := range l.txq[:l.n] {
		// A frame the socket refuses is lost like a dropped one; RC
		// retransmits.
		if _, err := l.f.Write(fr); err == nil {
			l.sent++
		}
	}
	l.n = 0
	n := l.sent
	l.sent = 0
	return n
}

func (l *packetLink) appendFrame(b []byte, src, dst netip.AddrPort, ib []byte) ([]byte, error) {
	smac, _ := wire.MACFromLinkLocalGID(src.Addr().As16())
	dmac, _ := wire.MACFromLinkLocalGID(dst.Addr().As16())
	return wire.AppendFrameV1(b, smac, dmac, src.Addr().As16(), dst.Addr().As16(), ib)
}

func (l *packetLink) readLoop(d *Device) {
	buf := make([]byte, 65536)
	const hdr = 14 + wire.GRHSize
	for {
		n, err := l.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			continue
		}
		fr := buf[:n]
		if n < hdr || binary.BigEndian.Uint16(fr[12:]) != wire.EthertypeRoCEv1 {
			continue
		}
		var g wire.GRH
		g.Decode(fr[14:])
		if g.DGID != l.gid || g.SGID == l.gid {
			continue // another port's frame, or our own looped back
		}
		d.mu.Lock()
		// The GRH's payload length says where the packet ends: bytes
		// after it (an FCS some drivers leave) are not the packet's.
		end := hdr + int(g.PayLen)
		if g.NextHeader != wire.NextHeaderBTH || end > n || int(g.PayLen) < wire.BTHSize+wire.ICRCSize {
			d.stats.PacketsReceived++
			d.stats.Malformed++
			d.mu.Unlock()
			continue
		}
		ib := fr[hdr : end-wire.ICRCSize]
		want, err := wire.ICRCv1(fr[14:hdr], ib)
		d.receiveLocked(ib, err == nil && want == binary.LittleEndian.Uint32(fr[end-wire.ICRCSize:end]), netip.AddrPortFrom(netip.AddrFrom16(g.SGID), 0), false)
		d.flushTx()
		d.mu.Unlock()
	}
}

func (l *packetLink) close() error { return l.f.Close() }

// kernelDrops is how many frames for this socket the kernel dropped (its
// receive buffer full) since the last call (PACKET_STATISTICS tp_drops,
// which reading resets).
func (l *packetLink) kernelDrops() uint64 {
	rc, err := l.f.SyscallConn()
	if err != nil {
		return 0
	}
	var n uint64
	rc.Control(func(fd uintptr) {
		if st, err := unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
			n = uint64(st.Drops)
		}
	})
	return n
}

// setTOS does nothing: RoCE v1 frames have no IP header (their GRH's
// traffic class is not set by this device).
func (l *packetLink) setTOS(int) error { return nil }
