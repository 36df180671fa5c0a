// Package rdma is goccl's soft RoCE device: a verbs API shaped like
// libibverbs (device, protection domain, memory region with lkey/rkey,
// completion queue, reliable-connection queue pair) driving the pure engine
// of package rdma/qp with the packet format of package rdma/wire. The
// sockets and timers live here, nothing else does.
//
// Open gives a RoCE v2 device: packets travel as UDP payloads (BTH ...
// ICRC) to port 4791 or the port given, so they cross IP routers. OpenV1
// gives a RoCE v1 device: Ethernet frames of Ethertype 0x8915 with a GRH
// through an AF_PACKET socket on a named interface (root or CAP_NET_RAW),
// which reach only the same L2 segment. Either way the ICRC is computed
// over the headers a RoCE NIC would send and checked on receipt: a
// corrupted packet is dropped and counted, like a NIC's ICRC error.
package rdma

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goccl/goccl/rdma/qp"
	"github.com/goccl/goccl/rdma/wire"
)

// DefaultPort is RoCE v2's UDP destination port.
const DefaultPort = wire.UDPPortRoCEv2

// Device is an open soft RoCE device: RoCE v2 bound to one UDP address, or
// RoCE v1 bound to one Ethernet interface.
type Device struct {
	lk      link
	version int            // 1 or 2
	addr    netip.AddrPort // v2: the UDP address; v1: the GID, port 0
	gid     [16]byte
	mtu     int // active path MTU: the largest IB MTU a packet fits in

	mu      sync.Mutex
	qps     map[uint32]*QP
	mrs     map[uint32]*MR // by key (lkey == rkey)
	nextQPN uint32
	nextKey uint32
	closed  bool
	done    chan struct{}
	wg      sync.WaitGroup
	start   time.Time

	stats   DeviceStats
	touched []*MR // regions with Notify that the packet being handled writes

	pcap  *pcapgo.Writer // WithPcap
	frame []byte         // pcap frame buffer

	cc *qp.DCQCN // WithDCQCN: every QP's congestion control
	tc int       // WithTrafficClass: the TOS byte's DSCP bits

	faults   Faults // WithFaults
	rng      *rand.Rand
	held     []byte // a packet held back to be sent after the next one (reordering)
	heldPeer netip.AddrPort
	heldSrc  int

	sources int // WithSourcePorts
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

// transmit sends one datagram from source src through the fault injector
// (device lock held).
func (d *Device) transmit(b []byte, src int, to netip.AddrPort) {
	if d.rng == nil {
		d.write(b, src, to)
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
		d.write(c, src, to)
		return
	case r < f.Drop+f.Corrupt+f.Reorder && d.held == nil:
		d.held, d.heldPeer, d.heldSrc = append([]byte(nil), b...), to, src
		d.stats.InjectedReorders++
		return
	}
	d.write(b, src, to)
	if d.rng.Float64() < f.Duplicate {
		d.stats.InjectedDuplicates++
		d.write(b, src, to)
	}
	if d.held != nil {
		d.write(d.held, d.heldSrc, d.heldPeer)
		d.held = nil
	}
}

// write queues a packet (ib and ICRC); flushTx sends the queues (device
// lock held for both).
func (d *Device) write(b []byte, src int, to netip.AddrPort) { d.lk.queue(b, src, to) }

func (d *Device) flushTx() { d.stats.PacketsSent += uint64(d.lk.flush()) }

// Option configures Open.
type Option func(*Device)

// WithDCQCN runs DCQCN (package qp) on every QP of the device with p, and
// sends ECN-capable (ECT(0)) packets: a switch that marks them CE makes
// the receiving QP send CNPs, and the sending QP's rate falls (RoCE v2).
//
// The pacer's bucket (p.Burst) is raised to 2 ms of the line rate: the
// device's timers tick every 100 µs at best and later on a loaded
// machine, and a bucket smaller than what the rate fills between two
// ticks caps the rate below it (a 64 KiB bucket held a 1 Gbit/s QP to
// 55 MB/s on loopback; 2 ms's, 250 KB, to 118).
func WithDCQCN(p qp.DCQCN) Option {
	p.Burst = max(p.Burst, int(p.LineRate*0.002))
	return func(d *Device) { d.cc = &p }
}

// WithSourcePorts makes a RoCE v2 device send from n UDP source ports:
// its own and n-1 more on its address (ports the kernel picks). A queue
// pair sends everything, requests and acknowledgements, from one of them,
// chosen when it is created (QPSource): as a NIC derives a queue pair's
// UDP source port from its flow label or QP numbers, so that switches
// hashing the 5-tuple (ECMP) spread a host's queue pairs over their paths.
// The destination port stays the peer device's. A v1 device (no UDP) has
// one source whatever n.
func WithSourcePorts(n int) Option {
	return func(d *Device) { d.sources = n }
}

// Sources is how many source ports the device sends from (WithSourcePorts;
// 1 without).
func (d *Device) Sources() int { return d.sources }

// WithTrafficClass gives the device's RoCE v2 packets the traffic class
// tc (the IPv4 TOS byte's DSCP bits, tc >> 2; its ECN bits are the
// device's), as a NIC's traffic class for RoCE (NCCL_IB_TC).
func WithTrafficClass(tc int) Option {
	return func(d *Device) { d.tc = tc & 0xfc }
}

// WithPcap records every packet the device sends and every one it accepts
// as a pcap capture (link type Ethernet) on w: each packet in the frame a
// RoCE NIC would put on the wire, so that tshark dissects it as RRoCE (v2)
// or InfiniBand over Ethernet (v1) and goccl roce check-pcap verifies it.
// For v2 that is Ethernet with MACs made from the IPv4 addresses, IPv4, UDP
// to port 4791 whatever the soft device's real port, and the ICRC of those
// headers; for v1 the frame as sent.
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
	d.frame, err = d.lk.appendFrame(d.frame[:0], src, dst, ib)
	if err != nil {
		return
	}
	d.pcap.WritePacket(gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: len(d.frame), Length: len(d.frame)}, d.frame)
}

// DeviceStats counts the device's packets.
type DeviceStats struct {
	PacketsSent, PacketsReceived uint64
	ICRCErrors, Malformed        uint64 // dropped on receipt
	KernelDrops                  uint64 // dropped by the kernel, the socket's receive buffer full (RoCE v1)
	UnknownQP                    uint64 // for no QP of this device
	ForeignSource                uint64 // for a connected QP, from another address than its peer's
	// CEReceived counts packets that arrived marked CE (congestion
	// experienced); TOSErrors the sockets that refused the TOS byte.
	CEReceived, TOSErrors uint64
	// Faults injected (WithFaults).
	InjectedDrops, InjectedDuplicates, InjectedReorders, InjectedCorruptions uint64
}

// Open opens a soft RoCE v2 device bound to addr ("ip:port"; port 0 picks
// one, DefaultPort is RoCE v2's). Only IPv4 is supported so far.
func Open(addr string, opts ...Option) (*Device, error) {
	l, err := openUDPLink(addr)
	if err != nil {
		return nil, fmt.Errorf("rdma: open %q: %w", addr, err)
	}
	gid := netip.AddrFrom16(l.addr.Addr().As16()).As16()
	mtu := 4096
	if ifMTU := interfaceMTU(l.addr.Addr()); ifMTU > 0 {
		if mtu = V2ActiveMTU(ifMTU); mtu == 0 {
			l.close()
			return nil, fmt.Errorf("rdma: open %q: interface MTU %d is below the smallest IB MTU (256) plus headers", addr, ifMTU)
		}
	}
	d, err := start(l, 2, l.addr, gid, mtu, opts)
	if err != nil {
		return nil, fmt.Errorf("rdma: open %q: %w", addr, err)
	}
	return d, nil
}

// V2ActiveMTU is the largest IB MTU whose RoCE v2 datagrams fit an IP MTU
// of ifMTU bytes without fragmenting, 0 if none: IPv4 (20), UDP (8), BTH
// (12), RETH (16) and ImmDt (4), payload and ICRC (4) — as rxe derives its
// active MTU from its netdev's.
func V2ActiveMTU(ifMTU int) int {
	for _, m := range []int{4096, 2048, 1024, 512, 256} {
		if 20+8+wire.BTHSize+16+4+m+wire.ICRCSize <= ifMTU {
			return m
		}
	}
	return 0
}

// interfaceMTU is the MTU of the interface holding ip, 0 when none does
// (an unspecified address).
func interfaceMTU(ip netip.Addr) int {
	ifs, err := net.Interfaces()
	if err != nil || ip.IsUnspecified() {
		return 0
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == ip.Unmap() {
					return ifc.MTU
				}
			}
		}
	}
	return 0
}

// OpenV1 opens a soft RoCE v1 device on the Ethernet interface ifname
// (AF_PACKET; root or CAP_NET_RAW). Its GID is the interface's link-local
// GID (wire.LinkLocalGID of its MAC), and its active MTU the largest IB MTU
// whose frames fit the interface's MTU (1024 for 1500).
func OpenV1(ifname string, opts ...Option) (*Device, error) {
	l, err := openPacketLink(ifname)
	if err != nil {
		return nil, fmt.Errorf("rdma: open RoCE v1 on %q: %w", ifname, err)
	}
	mtu := V1ActiveMTU(l.ifMTU)
	if mtu == 0 {
		l.close()
		return nil, fmt.Errorf("rdma: open RoCE v1 on %q: interface MTU %d is below the smallest IB MTU (256) plus headers", ifname, l.ifMTU)
	}
	return start(l, 1, netip.AddrPortFrom(netip.AddrFrom16(l.gid), 0), l.gid, mtu, opts)
}

// V1ActiveMTU is the largest IB MTU (4096, 2048, 1024, 512 or 256) whose
// RoCE v1 frames fit an Ethernet MTU of ifMTU bytes, 0 if none: GRH (40),
// BTH (12), the largest first-packet headers (RETH 16 and ImmDt 4 of an
// RDMA WRITE ONLY with immediate), payload and ICRC (4).
func V1ActiveMTU(ifMTU int) int {
	for _, m := range []int{4096, 2048, 1024, 512, 256} {
		if wire.GRHSize+wire.BTHSize+16+4+m+wire.ICRCSize <= ifMTU {
			return m
		}
	}
	return 0
}

func start(l link, version int, addr netip.AddrPort, gid [16]byte, mtu int, opts []Option) (*Device, error) {
	d := &Device{lk: l, version: version, addr: addr, gid: gid, mtu: mtu, qps: map[uint32]*QP{}, mrs: map[uint32]*MR{},
		nextQPN: 0x11, nextKey: 0x100, done: make(chan struct{}), start: time.Now()}
	if version == 1 {
		// Every process on an interface has its own RoCE v1 device with
		// the interface's GID and sees every frame: QP numbers must differ
		// across them, as on one HCA, or a frame for one process's QP
		// would reach another's. A random base (24-bit QPNs) does that.
		d.nextQPN = 0x100 + rand.Uint32N(0xfe0000)
	}
	for _, o := range opts {
		o(d)
	}
	if u, ok := l.(*udpLink); ok && d.sources > 1 {
		if d.sources > maxSources {
			l.close()
			return nil, fmt.Errorf("%d source ports: at most %d", d.sources, maxSources)
		}
		if err := u.addSources(d.sources - 1); err != nil {
			l.close()
			return nil, fmt.Errorf("opening its source ports: %w", err)
		}
	} else {
		d.sources = 1
	}
	if d.cc != nil || d.tc != 0 {
		tos := d.tc &^ ecnMask
		if d.cc != nil {
			tos |= ecnECT0 // ECN-capable, as RoCE NICs with DCQCN send
		}
		if err := l.setTOS(tos); err != nil {
			d.stats.TOSErrors++
		}
	}
	d.wg.Add(2)
	go func() {
		defer d.wg.Done()
		l.readLoop(d)
	}()
	go d.timerLoop()
	return d, nil
}

// maxSources bounds WithSourcePorts (a socket each).
const maxSources = 64

// Version is the device's RoCE version, 1 or 2.
func (d *Device) Version() int { return d.version }

// ActiveMTU is the path MTU the device's packets fit in (Connect's
// default): the largest IB MTU whose packets fit the interface unfragmented
// (4096 on loopback and with jumbo frames, 1024 at MTU 1500; 4096 for a v2
// device bound to the unspecified address).
func (d *Device) ActiveMTU() int { return d.mtu }

// Addr is the device's address: for v2 its UDP address, what peers put in
// their address vector (the IPv4 address as an IPv4-mapped GID, the port as
// DPort); for v1 its GID with port 0.
func (d *Device) Addr() netip.AddrPort { return d.addr }

// GID is the device's GID: for v2 its IPv4 address mapped into IPv6, as
// RoCE v2 GIDs of IPv4 addresses are; for v1 its interface's link-local
// GID.
func (d *Device) GID() [16]byte { return d.gid }

// Stats returns the device's packet counters.
func (d *Device) Stats() DeviceStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	if k, ok := d.lk.(interface{ kernelDrops() uint64 }); ok {
		d.stats.KernelDrops += k.kernelDrops()
	}
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
	err := d.lk.close()
	d.wg.Wait()
	return err
}

func (d *Device) now() time.Duration { return time.Since(d.start) }

// receiveLocked handles one packet (BTH to the end of the pad) whose ICRC
// the link has checked (icrcOK) from the peer from (device lock held).
func (d *Device) receiveLocked(ib []byte, icrcOK bool, from netip.AddrPort, ce bool) {
	d.stats.PacketsReceived++
	if ce {
		d.stats.CEReceived++
	}
	if !icrcOK {
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
	if q.peer.IsValid() && (from.Port() != q.peerSrc || from.Addr().Unmap() != q.peer.Addr().Unmap()) {
		// An RC QP takes packets from its peer only (a v1 frame meant for
		// another process's device on this interface, a stale peer).
		d.stats.ForeignSource++
		return
	}
	q.eng.Tick(d.now())
	if ce {
		q.eng.ReceiveCE(&p)
	} else {
		q.eng.Receive(&p)
	}
	q.flushLocked()
	for _, mr := range d.touched {
		select {
		case mr.notify <- struct{}{}:
		default:
		}
	}
	d.touched = d.touched[:0]
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
