package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

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
	// device's source src to the peer to, over the headers this link puts
	// in front.
	icrc(src int, to netip.AddrPort, ib []byte) (uint32, error)
	// queue copies pkt (ib and its ICRC) into source src's send queue for
	// to.
	queue(pkt []byte, src int, to netip.AddrPort)
	// source is the address source src sends from: src 0 is the
	// device's own (Device.Addr), the others WithSourcePorts' (v2 only;
	// v1 has one source).
	source(src int) netip.AddrPort
	// flush sends the queue and returns how many packets left.
	flush() int
	// appendFrame appends the Ethernet frame a NIC would send for ib
	// (from src to dst, ICRC included), for pcap recording.
	appendFrame(b []byte, src, dst netip.AddrPort, ib []byte) ([]byte, error)
	// readLoop receives packets until close, handing each to
	// d.receiveLocked in batches under the device lock.
	readLoop(d *Device)
	// setTOS sets the traffic class and ECN field of what the link sends
	// and has it report the ECN field of what it receives (RoCE v2; a
	// v1 link does nothing).
	setTOS(tos int) error
	close() error
}

// udpLink carries RoCE v2: each packet is one UDP datagram, batched through
// sendmmsg and recvmmsg. A user-space socket sees neither the IP header nor
// the UDP checksum the kernel sends, so the ICRC is computed over the
// IPv4/UDP headers the kernel will send (DF, TTL 64, UDP checksum 0; the
// fields routers change are masked out of the ICRC anyway) with the IPv4 ID
// the kernel gives the datagram: the socket sets DF and keeps it
// (setDontFragment), so that ID is 0 for a lone datagram and i for segment
// i of a UDP_SEGMENT run. Packets are built with the ICRC for ID 0; queue
// corrects it for the place a packet takes in its run (CRC-32 is affine:
// wire.ICRCv2IDDelta), which also keeps a corrupted packet corrupted.
// A receiver checks a GRO buffer's segments with IDs 0, 1, 2, ...; where
// that fails (a run split between GRO buffers on a real path, or lone
// datagrams that GRO merged, all with ID 0), the ID is searched among a
// run's 64 (so a corrupted packet passes with odds of 64 in 2^32) and the
// next segments counted on from it. Every frame on the wire therefore
// carries the ICRC that a RoCE NIC (rxe, ConnectX) computes over its real
// headers.
//
// Where the kernel offers UDP segmentation offload (Linux 4.18+), runs of
// datagrams to one peer of one size (the last may be shorter) leave as one
// buffer with a UDP_SEGMENT control message, up to 64 KiB: the kernel
// splits it into the same datagrams on the wire, walking its UDP/IP stack
// once per buffer instead of once per packet. With UDP_GRO set (Linux
// 5.0+) the receiving socket gets such runs back as one buffer and the
// segment size; over loopback they are never split at all.
type udpLink struct {
	conn        *net.UDPConn
	pc          *ipv4.PacketConn
	addr        netip.AddrPort
	txq         []ipv4.Message // super-datagrams queued for the next sendmmsg
	txSegs      []udpRun       // what each of txq holds
	txBufs      [][]byte
	txOOB       [][]byte
	udpAddrs    map[netip.AddrPort]*net.UDPAddr
	gso         bool                    // send runs with UDP_SEGMENT
	hdr         [28]byte                // IPv4 and UDP headers for the ICRC (device lock held)
	noGSO       map[netip.AddrPort]bool // peers whose path refused a run
	idDelta     map[int]*idDeltas       // by packet length: wire.ICRCv2IDDelta of the IDs of a run
	sent        int                     // datagrams sent since the last flush returned
	runsSent    int                     // buffers of more than one datagram sent (for tests)
	egressWaits int                     // sends the host's egress queue refused, retried (ENOBUFS)
	sendOnly    bool                    // one of extra
	// extra are WithSourcePorts' sockets, send-only, on the same IPv4
	// address and ports of their own: sources 1, 2, ... (this link is
	// source 0).
	extra []*udpLink
}

// idDeltas caches wire.ICRCv2IDDelta for one packet length: the term for
// ID i is d[i] once bit i of have is set.
type idDeltas struct {
	have uint64
	d    [gsoMaxSegs]uint32
}

// delta is wire.ICRCv2IDDelta for a packet of n bytes (BTH to ICRC) with
// ID id < gsoMaxSegs, over a 20-byte IPv4 header.
func (l *udpLink) delta(n, id int) uint32 {
	if id == 0 {
		return 0
	}
	t := l.idDelta[n]
	if t == nil {
		if l.idDelta == nil {
			l.idDelta = map[int]*idDeltas{}
		}
		t = &idDeltas{}
		l.idDelta[n] = t
	}
	if t.have&(1<<id) == 0 {
		t.d[id] = wire.ICRCv2IDDelta(20, n-wire.ICRCSize, uint16(id))
		t.have |= 1 << id
	}
	return t.d[id]
}

// patchID changes the ICRC of pkt (BTH to ICRC) by the term of ID id.
func (l *udpLink) patchID(pkt []byte, id int) {
	if id == 0 {
		return
	}
	c := pkt[len(pkt)-wire.ICRCSize:]
	binary.LittleEndian.PutUint32(c, binary.LittleEndian.Uint32(c)^l.delta(len(pkt), id))
}

// udpRun describes one queued buffer: segs datagrams of segSize bytes (the
// last possibly shorter; closed once a shorter one is added).
type udpRun struct {
	to      netip.AddrPort
	segSize int
	segs    int
	closed  bool
}

const (
	// rxBatch and txBatch bound the buffers per recvmmsg and sendmmsg.
	rxBatch = 64
	txBatch = 64
	// gsoMaxBytes and gsoMaxSegs bound a UDP_SEGMENT buffer (the kernel's
	// limits are a 64 KiB IP datagram and UDP_MAX_SEGMENTS).
	gsoMaxBytes = 65507
	gsoMaxSegs  = 64
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
	if err := setDontFragment(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("rdma: setting DF on the UDP socket (IP_MTU_DISCOVER): %w", err)
	}
	setRecvErr(conn) // best effort: without it a full egress queue loses packets, which RC resends
	l := &udpLink{conn: conn, pc: ipv4.NewPacketConn(conn), addr: conn.LocalAddr().(*net.UDPAddr).AddrPort(),
		txq: make([]ipv4.Message, 0, txBatch), udpAddrs: map[netip.AddrPort]*net.UDPAddr{}}
	l.gso = udpOffload(conn)
	return l, nil
}

// addSources opens n more sockets to send from, on l's IPv4 address and
// ports the kernel picks (WithSourcePorts).
func (l *udpLink) addSources(n int) error {
	for range n {
		e, err := openUDPLink(netip.AddrPortFrom(l.addr.Addr(), 0).String())
		if err != nil {
			return err
		}
		e.sendOnly = true
		l.extra = append(l.extra, e)
	}
	return nil
}

// src is source i's socket (i < 1+len(l.extra); the device checks).
func (l *udpLink) src(i int) *udpLink {
	if i == 0 {
		return l
	}
	return l.extra[i-1]
}

func (l *udpLink) source(i int) netip.AddrPort { return l.src(i).addr }

func (l *udpLink) icrc(src int, to netip.AddrPort, ib []byte) (uint32, error) {
	s := l.src(src)
	return icrcV2(&s.hdr, s.addr, to, ib)
}

func (l *udpLink) queue(b []byte, src int, to netip.AddrPort) { l.src(src).queueOwn(b, to) }

// queueOwn queues b on this socket.
func (l *udpLink) queueOwn(b []byte, to netip.AddrPort) {
	if k := len(l.txq) - 1; l.gso && k >= 0 && !l.noGSO[to] {
		r := &l.txSegs[k]
		if r.to == to && !r.closed && len(b) <= r.segSize && r.segs < gsoMaxSegs && len(l.txBufs[k])+len(b) <= gsoMaxBytes {
			l.txBufs[k] = append(l.txBufs[k], b...)
			l.patchID(l.txBufs[k][len(l.txBufs[k])-len(b):], r.segs) // segment r.segs leaves with that ID
			l.txq[k].Buffers[0] = l.txBufs[k]
			r.segs++
			r.closed = len(b) < r.segSize
			l.setSegment(k)
			return
		}
	}
	k := len(l.txq)
	if k == cap(l.txq) {
		l.flushSome()
		k = 0
	}
	if k == len(l.txBufs) {
		l.txBufs = append(l.txBufs, make([]byte, 0, 4200))
		l.txOOB = append(l.txOOB, make([]byte, 0, 32))
		l.txSegs = append(l.txSegs, udpRun{})
	}
	l.txBufs[k] = append(l.txBufs[k][:0], b...)
	l.txSegs[k] = udpRun{to: to, segSize: len(b), segs: 1}
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
	m.Buffers[0], m.Addr, m.OOB = l.txBufs[k], ua, nil
}

// setSegment gives buffer k of several datagrams its UDP_SEGMENT control
// message.
func (l *udpLink) setSegment(k int) {
	if l.txSegs[k].segs == 2 {
		l.txOOB[k] = appendSegmentCmsg(l.txOOB[k][:0], l.txSegs[k].segSize)
		l.txq[k].OOB = l.txOOB[k]
	}
}

func (l *udpLink) flush() int {
	n := l.flushOwn()
	for _, e := range l.extra {
		n += e.flushOwn()
	}
	return n
}

// flushOwn sends this socket's queue.
func (l *udpLink) flushOwn() int {
	l.flushSome()
	n := l.sent
	l.sent = 0
	return n
}

// flushSome sends the queue (also when queue finds it full), adding to
// l.sent.
func (l *udpLink) flushSome() {
	var waited time.Duration
	wait := egressPoll
	for q, runs := l.txq, l.txSegs; len(q) > 0; {
		n, err := l.pc.WriteBatch(q, 0)
		if err != nil && l.gso && n <= 0 && q[0].OOB != nil && l.refused(err, runs[0]) {
			l.requeue(q, runs)
			return
		}
		switch {
		case err == nil:
		case errors.Is(err, syscall.ENOBUFS) && waited < egressWait:
			// The host's egress queue is full: wait for it to drain
			// and send the rest again, as a NIC holds its send queue.
			q, runs = l.sentOK(q, runs, max(n, 0))
			d := min(wait, egressWait-waited)
			time.Sleep(d)
			waited, wait = waited+d, min(2*wait, egressPollMax)
			l.egressWaits++
			continue
		default:
			// Dropped like a lost packet; RC retransmits. (WriteBatch
			// says -1 when the first message failed.) An ICMP error
			// reported here (IP_RECVERR: a peer's port closed) leaves
			// its copy queued on the socket; a send-only source has no
			// read loop to drain it (source 0's, which does, holds the
			// socket's read lock while it waits).
			if l.sendOnly {
				drainErrors(l.conn)
			}
			q, runs = q[max(n, 1):], runs[max(n, 1):]
			continue
		}
		q, runs = l.sentOK(q, runs, n)
	}
	l.txq = l.txq[:0]
}

// sentOK counts the first n of q (and runs) as sent and returns the rest.
func (l *udpLink) sentOK(q []ipv4.Message, runs []udpRun, n int) ([]ipv4.Message, []udpRun) {
	for _, r := range runs[:n] {
		l.sent += r.segs
		if r.segs > 1 {
			l.runsSent++
		}
	}
	return q[n:], runs[n:]
}

// egressPoll, egressPollMax and egressWait pace the retries of a send the
// host's egress queue refused (ENOBUFS): the first after egressPoll, then
// twice as long each time up to egressPollMax, giving up (the packets are
// lost, and RC resends them) after egressWait in all. 64 KiB leave a
// 100 Mbit/s link in 5 ms.
const (
	egressPoll    = 20 * time.Microsecond
	egressPollMax = time.Millisecond
	egressWait    = 20 * time.Millisecond
)

// refused decides what a failed send of run r means: the path to r's peer
// cannot take runs (EMSGSIZE; EINVAL from kernels before 6.14 when a
// segment and its headers exceed the path MTU, told apart by a segment
// too large for a 1500-byte Ethernet MTU), so that peer's packets go one
// datagram each from now on (the kernel fragments those); or the kernel
// cannot segment at all (EIO without checksum offload, EINVAL for small
// segments), so runs stop for every peer. It reports whether it was either;
// other errors (ENOBUFS, EPERM from a firewall, ...) lose the message like
// a dropped packet, which RC retransmits.
func (l *udpLink) refused(err error, r udpRun) bool {
	switch {
	case errors.Is(err, syscall.EMSGSIZE), errors.Is(err, syscall.EINVAL) && r.segSize > 1500-20-8:
		if l.noGSO == nil {
			l.noGSO = map[netip.AddrPort]bool{}
		}
		l.noGSO[r.to] = true
	case errors.Is(err, syscall.EIO), errors.Is(err, syscall.EINVAL):
		l.gso = false
	default:
		return false
	}
	return true
}

// requeue queues the datagrams of q again, one by one (so that runs form
// only where still allowed), and sends them.
func (l *udpLink) requeue(q []ipv4.Message, runs []udpRun) {
	var pending [][]byte
	var to []netip.AddrPort
	for i, m := range q {
		b := m.Buffers[0]
		for j := 0; len(b) > 0; j++ {
			n := min(runs[i].segSize, len(b))
			p := append([]byte(nil), b[:n]...)
			l.patchID(p, j) // back to ID 0's ICRC: queue sets it for the packet's new place
			pending = append(pending, p)
			to = append(to, runs[i].to)
			b = b[n:]
		}
	}
	l.txq = l.txq[:0]
	for i, b := range pending {
		l.queueOwn(b, to[i])
	}
	l.flushSome()
}

func (l *udpLink) appendFrame(b []byte, src, dst netip.AddrPort, ib []byte) ([]byte, error) {
	return wire.AppendFrameV2(b, macFor(src.Addr()), macFor(dst.Addr()), src, netip.AddrPortFrom(dst.Addr(), DefaultPort), ib)
}

func (l *udpLink) readLoop(d *Device) {
	msgs := make([]ipv4.Message, rxBatch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 65536)}
		msgs[i].OOB = make([]byte, 64)
	}
	for {
		// recvmmsg: every datagram that is waiting, up to rxBatch, for
		// one wake-up and one lock.
		n, err := l.pc.ReadBatch(msgs, 0)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			drainErrors(l.conn) // an ICMP error reported (IP_RECVERR)
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
			seg, tos := recvCmsgs(m.OOB[:m.NN])
			ce := tos >= 0 && tos&ecnMask == ecnCE // GRO keeps one TOS per buffer
			if seg <= 0 {
				seg = len(b)
			}
			next := 0 // the ID the next segment should carry
			for len(b) > 0 {
				pkt := b[:min(seg, len(b))]
				b = b[len(pkt):]
				if len(pkt) < wire.BTHSize+wire.ICRCSize {
					d.stats.PacketsReceived++
					d.stats.Malformed++
					continue
				}
				ib := pkt[:len(pkt)-wire.ICRCSize]
				icrc0, err := icrcV2(&l.hdr, from, l.addr, ib)
				off := icrc0 ^ binary.LittleEndian.Uint32(pkt[len(ib):]) // the ID's term, if intact
				ok := err == nil && next < gsoMaxSegs && off == l.delta(len(pkt), next)
				if !ok && err == nil {
					next, ok = l.findID(len(pkt), off)
				}
				next++
				d.receiveLocked(ib, ok, from, ce)
			}
		}
		d.flushTx()
		d.mu.Unlock()
	}
}

// findID is the ID among a run's whose ICRC term is off for packets of n
// bytes (BTH to ICRC), if any.
func (l *udpLink) findID(n int, off uint32) (int, bool) {
	for id := range gsoMaxSegs {
		if l.delta(n, id) == off {
			return id, true
		}
	}
	return 0, false
}

func (l *udpLink) close() error {
	for _, e := range l.extra {
		e.close()
	}
	return l.conn.Close()
}

func (l *udpLink) setTOS(tos int) error {
	for _, e := range l.extra {
		if err := setTOS(e.conn, tos); err != nil {
			return err
		}
	}
	return setTOS(l.conn, tos)
}

// The IPv4 ECN field (RFC 3168): the TOS byte's low two bits.
const (
	ecnMask = 0x03
	ecnECT0 = 0x02
	ecnCE   = 0x03
)

// icrcV2 computes the ICRC of ib as sent from src to dst over IPv4/UDP
// (see udpLink for the headers assumed), building them in hdr (a scratch
// buffer that outlives the call: one on the stack would escape, as crc32
// takes slices).
func icrcV2(hdr *[28]byte, src, dst netip.AddrPort, ib []byte) (uint32, error) {
	*hdr = [28]byte{}
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
