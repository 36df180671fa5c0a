package rdma

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"

	"golang.org/x/net/ipv4"

	"github.com/goccl/goccl/rdma/wire"
)

// link is the device's I/O layer: RoCE v2 over a UDP socket (udpLink) or
// RoCE v1 over an AF_PACKET socket (packetLink). Peers are named by a
// netip.AddrPort: the peer's IPv4 address and UDP port for v2, its GID (as
// an IPv6 address, port 0) for v1. Every method but readLoop and close runs
// with the device lock held.
type link interface {
	// icrc is the ICRC of ib (BTH to the end of the pad) sent from this
	// device to the peer to, over the headers this link puts in front.
	icrc(to netip.AddrPort, ib []byte) (uint32, error)
	// queue copies pkt (ib and its ICRC) into the send queue for to.
	queue(pkt []byte, to netip.AddrPort)
	// flush sends the queue and returns how many packets left.
	flush() int
	// appendFrame appends the Ethernet frame a NIC would send for ib
	// (from src to dst, ICRC included), for pcap recording.
	appendFrame(b []byte, src, dst netip.AddrPort, ib []byte) ([]byte, error)
	// readLoop receives packets until close, handing each to
	// d.receiveLocked in batches under the device lock.
	readLoop(d *Device)
	close() error
}

// udpLink carries RoCE v2: each packet is one UDP datagram, batched through
// sendmmsg and recvmmsg. A user-space socket sees neither the IP header nor
// the UDP checksum the kernel sends, so the ICRC is computed over the
// IPv4/UDP headers a RoCE NIC would send for the same addresses (ID 0, DF,
// TTL 64, UDP checksum 0; the fields routers change are masked out of the
// ICRC anyway), and checked the same way on receipt.
type udpLink struct {
	conn     *net.UDPConn
	pc       *ipv4.PacketConn
	addr     netip.AddrPort
	txq      []ipv4.Message // datagrams queued for the next sendmmsg
	txBufs   [][]byte
	udpAddrs map[netip.AddrPort]*net.UDPAddr
	sent     int // datagrams sent since the last flush returned
}

// rxBatch and txBatch bound the datagrams per recvmmsg and sendmmsg.
const (
	rxBatch = 64
	txBatch = 64
)

func openUDPLink(addr string) (*udpLink, error) {
	ua, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp4", ua)
	if err != nil {
		return nil, err
	}
	conn.SetReadBuffer(8 << 20)
	conn.SetWriteBuffer(8 << 20)
	return &udpLink{conn: conn, pc: ipv4.NewPacketConn(conn), addr: conn.LocalAddr().(*net.UDPAddr).AddrPort(),
		txq: make([]ipv4.Message, 0, txBatch), udpAddrs: map[netip.AddrPort]*net.UDPAddr{}}, nil
}

func (l *udpLink) icrc(to netip.AddrPort, ib []byte) (uint32, error) { return icrcV2(l.addr, to, ib) }

func (l *udpLink) queue(b []byte, to netip.AddrPort) {
	k := len(l.txq)
	if k == cap(l.txq) {
		l.flushSome()
		k = 0
	}
	if k == len(l.txBufs) {
		l.txBufs = append(l.txBufs, make([]byte, 0, 4200))
	}
	l.txBufs[k] = append(l.txBufs[k][:0], b...)
	ua, ok := l.udpAddrs[to]
	if !ok {
		ua = net.UDPAddrFromAddrPort(to)
		l.udpAddrs[to] = ua
	}
	l.txq = l.txq[:k+1]
	m := &l.txq[k]
	if m.Buffers == nil {
		m.Buffers = make([][]byte, 1)
	}
	m.Buffers[0], m.Addr = l.txBufs[k], ua
}

func (l *udpLink) flush() int {
	l.flushSome()
	n := l.sent
	l.sent = 0
	return n
}

// flushSome sends the queue (also when queue finds it full), adding to
// l.sent.
func (l *udpLink) flushSome() {
	for q := l.txq; len(q) > 0; {
		n, err := l.pc.WriteBatch(q, 0)
		if err != nil {
			// Dropped like a lost packet; RC retransmits.
			n = max(n, 1)
		} else {
			l.sent += n
		}
		q = q[n:]
	}
	l.txq = l.txq[:0]
}

func (l *udpLink) appendFrame(b []byte, src, dst netip.AddrPort, ib []byte) ([]byte, error) {
	return wire.AppendFrameV2(b, macFor(src.Addr()), macFor(dst.Addr()), src, netip.AddrPortFrom(dst.Addr(), DefaultPort), ib)
}

func (l *udpLink) readLoop(d *Device) {
	msgs := make([]ipv4.Message, rxBatch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 9216)}
	}
	for {
		// recvmmsg: every datagram that is waiting, up to rxBatch, for
		// one wake-up and one lock.
		n, err := l.pc.ReadBatch(msgs, 0)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		d.mu.Lock()
		for _, m := range msgs[:n] {
			ua, ok := m.Addr.(*net.UDPAddr)
			if !ok {
				continue
			}
			from := ua.AddrPort()
			b := m.Buffers[0][:m.N]
			if len(b) < wire.BTHSize+wire.ICRCSize {
				d.stats.PacketsReceived++
				d.stats.Malformed++
				continue
			}
			ib := b[:len(b)-wire.ICRCSize]
			want, err := icrcV2(from, l.addr, ib)
			d.receiveLocked(ib, err == nil && want == binary.LittleEndian.Uint32(b[len(ib):]), from)
		}
		d.flushTx()
		d.mu.Unlock()
	}
}

func (l *udpLink) close() error { return l.conn.Close() }

// icrcV2 computes the ICRC of ib as sent from src to dst over IPv4/UDP
// (see udpLink for the headers assumed).
func icrcV2(src, dst netip.AddrPort, ib []byte) (uint32, error) {
	var hdr [28]byte
	ip := hdr[:20]
	ip[0] = 0x45
	total := 20 + 8 + len(ib) + wire.ICRCSize
	ip[2], ip[3] = byte(total>>8), byte(total)
	ip[6] = 0x40
	ip[8], ip[9] = 64, 17
	s, dd := src.Addr().Unmap().As4(), dst.Addr().Unmap().As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], dd[:])
	udp := hdr[20:28]
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(ib)+wire.ICRCSize))
	return wire.ICRCv2(ip, udp, ib)
}

// macFor is a locally administered MAC made from an IPv4 address (pcap
// frames of RoCE v2, whose real MACs the UDP socket never sees).
func macFor(a netip.Addr) [6]byte {
	v4 := a.Unmap().As4()
	return [6]byte{0x02, 0x00, v4[0], v4[1], v4[2], v4[3]}
}
