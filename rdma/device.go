// Package rdma is goccl's soft RoCE v2 device: a verbs API shaped like
// libibverbs (device, protection domain, memory region with lkey/rkey,
// completion queue, reliable-connection queue pair) over UDP port 4791,
// driving the pure engine of package rdma/qp with the packet format of
// package rdma/wire. The sockets and timers live here, nothing else does.
//
// Packets travel as RoCE v2 UDP payloads (BTH ... ICRC). A user-space
// socket sees neither the IP header nor the UDP checksum the kernel sends,
// so the ICRC is computed over the IPv4/UDP headers a RoCE NIC would send
// for the same addresses (ID 0, DF, TTL 64, UDP checksum 0; the fields
// routers change are masked out of the ICRC anyway), and checked the same
// way on receipt: a corrupted packet is dropped and counted, like a NIC's
// ICRC error.
package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"golang.org/x/net/ipv4"

	"github.com/goccl/goccl/rdma/qp"
	"github.com/goccl/goccl/rdma/wire"
)

// DefaultPort is RoCE v2's UDP destination port.
const DefaultPort = wire.UDPPortRoCEv2

// Device is an open soft RoCE device bound to one UDP address.
type Device struct {
	conn *net.UDPConn
	addr netip.AddrPort

	mu      sync.Mutex
	qps     map[uint32]*QP
	mrs     map[uint32]*MR // by key (lkey == rkey)
	nextQPN uint32
	nextKey uint32
	closed  bool
	done    chan struct{}
	wg      sync.WaitGroup
	start   time.Time

	stats    DeviceStats
	pc       *ipv4.PacketConn
	txq      []ipv4.Message // datagrams queued for the next sendmmsg
	txBufs   [][]byte
	udpAddrs map[netip.AddrPort]*net.UDPAddr

	pcap  *pcapgo.Writer // WithPcap
	frame []byte         // pcap frame buffer

	faults   Faults // WithFaults
	rng      *rand.Rand
	held     []byte // a packet held back to be sent after the next one (reordering)
	heldPeer netip.AddrPort
}

// Faults makes the device misbehave on purpose, for tests: each packet it
// sends is dropped, duplicated, held back behind the next one (reordered) or
// has one byte flipped (which the receiver's ICRC check catches), with these
// probabilities. The link is then lossy the way a congested or faulty
// fabric is, and RC's retransmission has to repair it.
type Faults struct {
	Drop, Duplicate, Reorder, Corrupt float64
	Seed                              uint64
}

// WithFaults injects faults into every packet the device sends.
func WithFaults(f Faults) Option {
	return func(d *Device) {
		d.faults = f
		d.rng = rand.New(rand.NewPCG(f.Seed, 0x6f63636c))
	}
}

// transmit sends one datagram through the fault injector (device lock held).
func (d *Device) transmit(b []byte, to netip.AddrPort) {
	if d.rng == nil {
		d.write(b, to)
		return
	}
	f := &d.faults
	switch r := d.rng.Float64(); {
	case r < f.Drop:
		d.stats.InjectedDrops++
		return
	case r < f.Drop+f.Corrupt:
		c := append([]byte(nil), b...)
		c[d.rng.IntN(len(c))] ^= 0x10
		d.stats.InjectedCorruptions++
		d.write(c, to)
		return
	case r < f.Drop+f.Corrupt+f.Reorder && d.held == nil:
		d.held, d.heldPeer = append([]byte(nil), b...), to
		d.stats.InjectedReorders++
		return
	}
	d.write(b, to)
	if d.rng.Float64() < f.Duplicate {
		d.stats.InjectedDuplicates++
		d.write(b, to)
	}
	if d.held != nil {
		d.write(d.held, d.heldPeer)
		d.held = nil
	}
}

// write queues a datagram; flushTx sends the queue with one sendmmsg per
// batch (device lock held for both).
func (d *Device) write(b []byte, to netip.AddrPort) {
	k := len(d.txq)
	if k == cap(d.txq) {
		d.flushTx()
		k = 0
	}
	if k == len(d.txBufs) {
		d.txBufs = append(d.txBufs, make([]byte, 0, 4200))
	}
	d.txBufs[k] = append(d.txBufs[k][:0], b...)
	ua, ok := d.udpAddrs[to]
	if !ok {
		ua = net.UDPAddrFromAddrPort(to)
		d.udpAddrs[to] = ua
	}
	d.txq = d.txq[:k+1]
	m := &d.txq[k]
	if m.Buffers == nil {
		m.Buffers = make([][]byte, 1)
	}
	m.Buffers[0], m.Addr = d.txBufs[k], ua
}

// flushTx sends the queued datagrams.
func (d *Device) flushTx() {
	for q := d.txq; len(q) > 0; {
		n, err := d.pc.WriteBatch(q, 0)
		if err != nil {
			// Dropped like a lost packet; RC retransmits.
			n = max(n, 1)
		} else {
			d.stats.PacketsSent += uint64(n)
		}
		q = q[n:]
	}
	d.txq = d.txq[:0]
}

// Option configures Open.
type Option func(*Device)

// WithPcap records every packet the device sends and every one it accepts
// as a pcap capture (link type Ethernet) on w: each packet in the frame a
// RoCE v2 NIC would put on the wire (Ethernet with MACs made from the IPv4
// addresses, IPv4, UDP to port 4791 whatever the soft device's real port,
// and the ICRC of those headers), so that tshark dissects it as RRoCE and
// goccl roce check-pcap verifies it.
func WithPcap(w io.Writer) Option {
	return func(d *Device) {
		pw := pcapgo.NewWriter(w)
		if err := pw.WriteFileHeader(65536, layers.LinkTypeEthernet); err == nil {
			d.pcap = pw
		}
	}
}

// record writes ib, sent from src to dst, to the capture (device lock held).
func (d *Device) record(src, dst netip.AddrPort, ib []byte) {
	if d.pcap == nil {
		return
	}
	var err error
	d.frame, err = wire.AppendFrameV2(d.frame[:0], macFor(src.Addr()), macFor(dst.Addr()),
		src, netip.AddrPortFrom(dst.Addr(), DefaultPort), ib)
	if err != nil {
		return
	}
	d.pcap.WritePacket(gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: len(d.frame), Length: len(d.frame)}, d.frame)
}

// macFor is a locally administered MAC made from an IPv4 address.
func macFor(a netip.Addr) [6]byte {
	v4 := a.Unmap().As4()
	return [6]byte{0x02, 0x00, v4[0], v4[1], v4[2], v4[3]}
}

// DeviceStats counts the device's packets.
type DeviceStats struct {
	PacketsSent, PacketsReceived uint64
	ICRCErrors, Malformed        uint64 // dropped on receipt
	UnknownQP                    uint64 // for no QP of this device
	// Faults injected (WithFaults).
	InjectedDrops, InjectedDuplicates, InjectedReorders, InjectedCorruptions uint64
}

// Open binds a soft RoCE device to addr ("ip:port"; port 0 picks one,
// DefaultPort is RoCE v2's). Only IPv4 is supported so far.
func Open(addr string, opts ...Option) (*Device, error) {
	ua, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return nil, fmt.Errorf("rdma: open %q: %w", addr, err)
	}
	conn, err := net.ListenUDP("udp4", ua)
	if err != nil {
		return nil, fmt.Errorf("rdma: open %q: %w", addr, err)
	}
	conn.SetReadBuffer(8 << 20)
	conn.SetWriteBuffer(8 << 20)
	d := &Device{conn: conn, addr: conn.LocalAddr().(*net.UDPAddr).AddrPort(), qps: map[uint32]*QP{}, mrs: map[uint32]*MR{},
		nextQPN: 0x11, nextKey: 0x100, done: make(chan struct{}), start: time.Now()}
	d.pc, d.txq, d.udpAddrs = ipv4.NewPacketConn(conn), make([]ipv4.Message, 0, txBatch), map[netip.AddrPort]*net.UDPAddr{}
	for _, o := range opts {
		o(d)
	}
	d.wg.Add(2)
	go d.receiveLoop()
	go d.timerLoop()
	return d, nil
}

// Addr is the device's UDP address: what peers put in their address
// vector (the IPv4 address as an IPv4-mapped GID, the port as DPort).
func (d *Device) Addr() netip.AddrPort { return d.addr }

// GID is the device's GID: its IPv4 address mapped into IPv6, as RoCE v2
// GIDs of IPv4 addresses are.
func (d *Device) GID() [16]byte { return netip.AddrFrom16(d.addr.Addr().As16()).As16() }

// Stats returns the device's packet counters.
func (d *Device) Stats() DeviceStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// Close stops the device: every QP goes to ERR (its WRs are flushed) and the
// socket closes.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	for _, q := range d.qps {
		q.eng.Modify(&qp.Attr{State: qp.StateErr}, qp.AttrState)
		q.deliverLocked()
	}
	close(d.done)
	d.mu.Unlock()
	err := d.conn.Close()
	d.wg.Wait()
	return err
}

func (d *Device) now() time.Duration { return time.Since(d.start) }

// receiveLoop reads packets and hands them to their QP's engine.
func (d *Device) receiveLoop() {
	defer d.wg.Done()
	msgs := make([]ipv4.Message, rxBatch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 9216)}
	}
	for {
		// recvmmsg: every datagram that is waiting, up to rxBatch, for
		// one wake-up and one lock.
		n, err := d.pc.ReadBatch(msgs, 0)
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
			d.receive(m.Buffers[0][:m.N], ua.AddrPort())
		}
		d.flushTx()
		d.mu.Unlock()
	}
}

// rxBatch and txBatch bound the datagrams per recvmmsg and sendmmsg.
const (
	rxBatch = 64
	txBatch = 64
)

// receive handles one datagram (device lock held).
func (d *Device) receive(b []byte, from netip.AddrPort) {
	d.stats.PacketsReceived++
	if len(b) < wire.BTHSize+wire.ICRCSize {
		d.stats.Malformed++
		return
	}
	ib := b[:len(b)-wire.ICRCSize]
	want, err := icrcFor(from, d.addr, ib)
	if err != nil || want != binary.LittleEndian.Uint32(b[len(b)-wire.ICRCSize:]) {
		d.stats.ICRCErrors++
		return
	}
	var p wire.Packet
	if err := p.Decode(ib); err != nil {
		d.stats.Malformed++
		return
	}
	d.record(from, d.addr, ib)
	q, ok := d.qps[p.BTH.DestQP]
	if !ok {
		d.stats.UnknownQP++
		return
	}
	q.eng.Tick(d.now())
	q.eng.Receive(&p)
	q.flushLocked()
}

// timerLoop ticks the engines so that retry timers and RNR waits fire.
func (d *Device) timerLoop() {
	defer d.wg.Done()
	t := time.NewTicker(100 * time.Microsecond)
	defer t.Stop()
	for {
		select {
		case <-d.done:
			return
		case <-t.C:
		}
		d.mu.Lock()
		now := d.now()
		for _, q := range d.qps {
			if dl := q.eng.NextDeadline(); dl != 0 && dl <= now {
				q.eng.Tick(now)
				q.flushLocked()
			}
		}
		d.flushTx()
		d.mu.Unlock()
	}
}

// icrcFor computes the ICRC of ib as sent from src to dst (see the package
// comment for the headers assumed).
func icrcFor(src, dst netip.AddrPort, ib []byte) (uint32, error) {
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
	udp[0], udp[1] = byte(src.Port()>>8), byte(src.Port())
	udp[2], udp[3] = byte(dst.Port()>>8), byte(dst.Port())
	ulen := 8 + len(ib) + wire.ICRCSize
	udp[4], udp[5] = byte(ulen>>8), byte(ulen)
	return wire.ICRCv2(ip, udp, ib)
}

// errClosed is returned by calls on a closed device.
var errClosed = errors.New("rdma: device closed")

// ctxWait is a helper for blocking calls.
func ctxWait(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ch:
		return nil
	}
}
