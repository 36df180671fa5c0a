package rdma

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/goccl/goccl/rdma/qp"
	"github.com/goccl/goccl/rdma/wire"
)

// Access flags of memory regions and QPs (ibv_access_flags).
const (
	AccessLocalWrite   = qp.AccessLocalWrite
	AccessRemoteWrite  = qp.AccessRemoteWrite
	AccessRemoteRead   = qp.AccessRemoteRead
	AccessRemoteAtomic = qp.AccessRemoteAtomic
)

// WC is a work completion (struct ibv_wc).
type WC = qp.CQE

// WROpcode is a send work request's operation (enum ibv_wr_opcode).
type WROpcode = qp.WROpcode

// Send work request operations (SendWR.Opcode).
const (
	WRSend        = qp.WRSend
	WRSendImm     = qp.WRSendImm
	WRWrite       = qp.WRWrite
	WRWriteImm    = qp.WRWriteImm
	WRRead        = qp.WRRead
	WRCompareSwap = qp.WRCompareSwap
	WRFetchAdd    = qp.WRFetchAdd
)

// WCStatus is a work completion's status (WC.Status, enum ibv_wc_status).
type WCStatus = qp.Status

// Work completion statuses (IBV_WC_*).
const (
	WCSuccess        = qp.StatusSuccess
	WCLocLenErr      = qp.StatusLocLenErr
	WCLocQPOpErr     = qp.StatusLocQPOpErr
	WCLocProtErr     = qp.StatusLocProtErr
	WCWRFlushErr     = qp.StatusWRFlushErr
	WCRemInvReqErr   = qp.StatusRemInvReqErr
	WCRemAccessErr   = qp.StatusRemAccessErr
	WCRemOpErr       = qp.StatusRemOpErr
	WCRetryExcErr    = qp.StatusRetryExcErr
	WCRNRRetryExcErr = qp.StatusRNRRetryExcErr
)

// PD is a protection domain: memory regions are usable only by QPs of the
// same domain.
type PD struct{ d *Device }

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() *PD { return &PD{d: d} }

// Device is the device the domain belongs to.
func (pd *PD) Device() *Device { return pd.d }

// MR is a registered memory region over a Go byte slice (ibv_reg_mr). Its
// address (VA) is the slice's address in this process, as with verbs; the
// slice must stay referenced (and not be resized) while registered.
type MR struct {
	pd     *PD
	buf    []byte
	va     uint64
	key    uint32
	access int
	notify chan struct{} // Notify's (nil: not asked for)
}

// Pass puts a notice in Notify's channel (when it has room): a waiter that
// took one it did not need hands it on to another.
func (m *MR) Pass() {
	m.Notify()
	select {
	case m.notify <- struct{}{}:
	default:
	}
}

// Notify returns a channel that receives (at most one value pending) after
// a remote WRITE or atomic has landed in the region. It is the soft
// device's stand-in for a CPU polling its memory: a process waiting for a
// signal word that a peer updates by RDMA sleeps on it instead of spinning.
// It may fire early (at the first packet of a multi-packet WRITE): check
// the memory and wait again.
func (m *MR) Notify() <-chan struct{} {
	d := m.pd.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if m.notify == nil {
		m.notify = make(chan struct{}, 1)
	}
	return m.notify
}

// RegMR registers buf with the given access flags.
func (pd *PD) RegMR(buf []byte, access int) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("rdma: RegMR: empty buffer")
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return nil, fmt.Errorf("rdma: RegMR: remote write or atomic access needs local write access (as ibv_reg_mr requires)")
	}
	d := pd.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errClosed
	}
	mr := &MR{pd: pd, buf: buf, va: uint64(uintptr(unsafe.Pointer(&buf[0]))), key: d.nextKey, access: access}
	d.nextKey++
	d.mrs[mr.key] = mr
	return mr, nil
}

// PD is the protection domain the region belongs to.
func (m *MR) PD() *PD { return m.pd }

// LKey and RKey name the region in local and remote work requests.
func (m *MR) LKey() uint32 { return m.key }
func (m *MR) RKey() uint32 { return m.key }

// Addr is the region's virtual address (for remote peers' RETH).
func (m *MR) Addr() uint64 { return m.va }

// Bytes is the registered buffer. Remote WRITEs and atomics land in it from
// the device's goroutine: read what a peer wrote after a completion that
// orders it (the receive completion of a SEND or of a WRITE with
// immediate), as with verbs.
func (m *MR) Bytes() []byte { return m.buf }

// Dereg deregisters the region (ibv_dereg_mr): later requests naming it
// fail with an access error.
func (m *MR) Dereg() {
	m.pd.d.mu.Lock()
	delete(m.pd.d.mrs, m.key)
	m.pd.d.mu.Unlock()
}

// pdMemory serves a QP's responder from its domain's regions; called with
// the device lock held.
type pdMemory struct{ pd *PD }

func (m pdMemory) Remote(rkey uint32, va uint64, n int, access uint32) ([]byte, error) {
	mr, ok := m.pd.d.mrs[rkey]
	switch {
	case !ok || mr.pd != m.pd:
		return nil, fmt.Errorf("rkey %#x is not a region of this protection domain", rkey)
	case uint32(mr.access)&access != access:
		return nil, fmt.Errorf("region %#x lacks access %#x", rkey, access)
	case n < 0 || va < mr.va || va-mr.va > uint64(len(mr.buf)) || uint64(n) > uint64(len(mr.buf))-(va-mr.va):
		return nil, fmt.Errorf("[%#x, +%d) is outside region %#x", va, n, rkey)
	}
	if mr.notify != nil && access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 {
		m.pd.d.touched = append(m.pd.d.touched, mr)
	}
	off := va - mr.va
	return mr.buf[off : off+uint64(n)], nil
}

// cqSpin is how long Wait polls before it sleeps.
const cqSpin = 50 * time.Microsecond

// CQ is a completion queue (ibv_create_cq).
type CQ struct {
	mu      sync.Mutex
	entries []WC
	signal  chan struct{}
}

// CreateCQ creates a completion queue.
func (d *Device) CreateCQ() *CQ { return &CQ{signal: make(chan struct{}, 1)} }

func (c *CQ) push(wc WC) {
	c.mu.Lock()
	c.entries = append(c.entries, wc)
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// Poll returns up to max completions without waiting (ibv_poll_cq).
func (c *CQ) Poll(max int) []WC {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(max, len(c.entries))
	out := append([]WC(nil), c.entries[:n]...)
	c.entries = c.entries[n:]
	return out
}

// PollInto moves up to len(dst) completions into dst without waiting and
// returns how many (ibv_poll_cq without an allocation).
func (c *CQ) PollInto(dst []WC) int {
	c.mu.Lock()
	n := copy(dst, c.entries)
	c.entries = c.entries[:copy(c.entries, c.entries[n:])]
	c.mu.Unlock()
	return n
}

// Ready is signalled (one buffered token) whenever a completion is added:
// a waiter polls, then waits on Ready, then polls again (the completion
// channel of ibv_req_notify_cq, without the re-arming).
func (c *CQ) Ready() <-chan struct{} { return c.signal }

// Wait returns at least one completion (up to max), waiting until there is
// one or ctx is done.
func (c *CQ) Wait(ctx context.Context, max int) ([]WC, error) {
	// Spin briefly (yielding the processor) before sleeping: a completion
	// usually follows within microseconds, and a goroutine woken from a
	// channel takes longer than that to run.
	for spin := time.Now(); time.Since(spin) < cqSpin; runtime.Gosched() {
		if wcs := c.Poll(max); len(wcs) > 0 {
			return wcs, nil
		}
	}
	for {
		if wcs := c.Poll(max); len(wcs) > 0 {
			return wcs, nil
		}
		if err := ctxWait(ctx, c.signal); err != nil {
			return nil, fmt.Errorf("rdma: waiting for a completion: %w", err)
		}
	}
}

// QP is a reliable-connection queue pair (ibv_create_qp with IBV_QPT_RC).
type QP struct {
	d              *Device
	pd             *PD
	eng            *qp.QP
	sendCQ, recvCQ *CQ
	peer           netip.AddrPort
	peerSrc        uint16 // the UDP port the peer's packets come from (v2)
	src            int    // the device's source this QP sends from
	sendBuf        []byte
}

// QPOption configures CreateQP.
type QPOption func(*QP)

// QPSource makes the queue pair send from the device's source port i mod
// Device.Sources() (WithSourcePorts), as a NIC picks a queue pair's UDP
// source port from its flow label; the default is source 0, the device's
// own port. Queue pairs to one peer on different sources are different
// flows to a switch that hashes the 5-tuple.
func QPSource(i int) QPOption {
	return func(q *QP) { q.src = i }
}

// CreateQP creates an RC QP in state RESET.
func (pd *PD) CreateQP(sendCQ, recvCQ *CQ, opts ...QPOption) (*QP, error) {
	d := pd.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errClosed
	}
	q := &QP{d: d, pd: pd, sendCQ: sendCQ, recvCQ: recvCQ}
	for _, o := range opts {
		o(q)
	}
	if q.src %= d.sources; q.src < 0 {
		q.src += d.sources
	}
	q.eng = qp.New(d.nextQPN, pdMemory{pd})
	if d.cc != nil {
		q.eng.SetDCQCN(*d.cc)
	}
	d.nextQPN++
	d.qps[q.eng.QPN] = q
	return q, nil
}

// Destroy removes the queue pair from its device (ibv_destroy_qp): packets
// for it are dropped as for an unknown QP from then on, and its outstanding
// WRs never complete. It must not be used afterwards.
func (q *QP) Destroy() {
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	delete(q.d.qps, q.eng.QPN)
}

// QPN is the queue pair number.
func (q *QP) QPN() uint32 { return q.eng.QPN }

// Source is the address the queue pair's packets come from: the device's
// address with the UDP source port of its source (QPSource) for RoCE v2.
func (q *QP) Source() netip.AddrPort { return q.d.lk.source(q.src) }

// State is the QP's state.
func (q *QP) State() qp.State {
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	return q.eng.State()
}

// Modify changes the QP's state and attributes (ibv_modify_qp; the rules of
// qp.Machine.Modify). The address vector's DGID is the peer device's GID
// (v2: its IPv4 address, IPv4-mapped, and DPort its UDP port; v1: its
// link-local GID).
func (q *QP) Modify(a *qp.Attr, mask qp.AttrMask) error {
	if mask&qp.AttrPathMTU != 0 && q.d.version == 1 && a.PathMTU > q.d.mtu {
		return fmt.Errorf("rdma: QP %#x: path MTU %d exceeds the RoCE v1 device's active MTU %d (its interface's MTU holds no larger frames)", q.QPN(), a.PathMTU, q.d.mtu)
	}
	var peer netip.AddrPort
	if mask&qp.AttrAV != 0 {
		var err error
		if peer, err = q.d.peerFor(a.AV); err != nil {
			return fmt.Errorf("rdma: QP %#x: %w", q.QPN(), err)
		}
	}
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	if err := q.eng.Modify(a, mask); err != nil {
		return err
	}
	if mask&qp.AttrAV != 0 {
		q.peer, q.peerSrc = peer, a.AV.SPort
		if q.peerSrc == 0 {
			q.peerSrc = peer.Port()
		}
	}
	q.deliverLocked()
	return nil
}

// SendWR is a send work request with one scatter/gather element: Length
// bytes at Offset in MR.
type SendWR struct {
	ID         uint64
	Opcode     WROpcode
	MR         *MR
	Offset     int
	Length     int
	RemoteAddr uint64 // WRITE, READ
	RKey       uint32 // WRITE, READ, atomics
	Imm        uint32
	SwapAdd    uint64 // atomics: the new value (COMPARE_SWAP) or the addend (FETCH_ADD)
	Compare    uint64 // COMPARE_SWAP
}

// RecvWR is a receive work request with one scatter/gather element.
type RecvWR struct {
	ID     uint64
	MR     *MR
	Offset int
	Length int
}

func (q *QP) local(mr *MR, off, n int, write bool) ([]byte, error) {
	switch {
	case mr == nil:
		return nil, nil
	case mr.pd != q.pd:
		return nil, fmt.Errorf("rdma: QP %#x: lkey %#x belongs to another protection domain", q.QPN(), mr.key)
	case off < 0 || n < 0 || off > len(mr.buf) || n > len(mr.buf)-off:
		return nil, fmt.Errorf("rdma: QP %#x: [%d, +%d) is outside lkey %#x (%d bytes)", q.QPN(), off, n, mr.key, len(mr.buf))
	case write && mr.access&AccessLocalWrite == 0:
		return nil, fmt.Errorf("rdma: QP %#x: lkey %#x has no local write access", q.QPN(), mr.key)
	}
	return mr.buf[off : off+n], nil
}

// PostSend posts a send WR (ibv_post_send).
func (q *QP) PostSend(wr SendWR) error {
	// READs and atomics write into the local buffer (an atomic's 8 bytes
	// receive the remote word's old value, little-endian).
	writes := wr.Opcode == qp.WRRead || wr.Opcode == qp.WRCompareSwap || wr.Opcode == qp.WRFetchAdd
	buf, err := q.local(wr.MR, wr.Offset, wr.Length, writes)
	if err != nil {
		return err
	}
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	q.eng.Tick(q.d.now())
	err = q.eng.PostSend(qp.SendWR{ID: wr.ID, Opcode: wr.Opcode, Local: buf, RemoteVA: wr.RemoteAddr, RKey: wr.RKey, Imm: wr.Imm,
		SwapAdd: wr.SwapAdd, Compare: wr.Compare})
	// Deliver what the tick produced even when the post failed: a retry
	// timer that expired in it moved the QP to ERR, and its completions
	// (IBV_WC_RETRY_EXC_ERR, flushes) say why the post was refused.
	q.flushLocked()
	q.d.flushTx()
	return err
}

// PostRecv posts a receive WR (ibv_post_recv).
func (q *QP) PostRecv(wr RecvWR) error {
	buf, err := q.local(wr.MR, wr.Offset, wr.Length, true)
	if err != nil {
		return err
	}
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	return q.eng.PostRecv(qp.RecvWR{ID: wr.ID, Buf: buf})
}

// CCStats returns the QP's DCQCN counters and Rate its current sending
// rate in bytes per second (0 without WithDCQCN).
func (q *QP) CCStats() (st qp.CCStats, rate float64) {
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	return q.eng.CCStats(), q.eng.Rate()
}

// Stats returns the engine's counters (retransmissions, NAKs, ...).
func (q *QP) Stats() qp.Stats {
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	return q.eng.Stats
}

// flushLocked queues the engine's packets for the device's next flush
// (Device.flushTx) and delivers its completions.
func (q *QP) flushLocked() {
	for _, p := range q.eng.Packets() {
		q.sendBuf = p.Append(q.sendBuf[:0])
		icrc, err := q.d.lk.icrc(q.src, q.peer, q.sendBuf)
		if err != nil {
			continue
		}
		q.sendBuf = wire.PutICRC(q.sendBuf, icrc)
		q.d.record(q.d.lk.source(q.src), q.peer, q.sendBuf[:len(q.sendBuf)-wire.ICRCSize])
		q.d.transmit(q.sendBuf, q.src, q.peer)
	}
	q.deliverLocked()
}

func (q *QP) deliverLocked() {
	for _, c := range q.eng.Completions() {
		if c.Opcode == qp.CQRecv || c.Opcode == qp.CQRecvWriteImm {
			q.recvCQ.push(c)
		} else {
			q.sendCQ.push(c)
		}
	}
}

// GIDString formats a device's GID and UDP port for messages: "ip:port"
// for a RoCE v2 device (an IPv4-mapped GID), the GID as an IPv6 address
// for a RoCE v1 device.
func GIDString(gid [16]byte, port uint16) string {
	a := netip.AddrFrom16(gid)
	if a.Is4In6() {
		return netip.AddrPortFrom(a.Unmap(), port).String()
	}
	return a.String()
}

// peerFor is the link address of the device an address vector names.
func (d *Device) peerFor(av qp.AddressVector) (netip.AddrPort, error) {
	gid := netip.AddrFrom16(av.DGID)
	if d.version == 1 {
		if _, ok := wire.MACFromLinkLocalGID(av.DGID); !ok {
			return netip.AddrPort{}, fmt.Errorf("RoCE v1 device on %v: DGID %v is not a link-local GID made from a MAC address (RoCE v1 reaches only its L2 segment)", netip.AddrFrom16(d.gid), gid)
		}
		return netip.AddrPortFrom(gid, 0), nil
	}
	if !gid.Is4In6() {
		return netip.AddrPort{}, fmt.Errorf("RoCE v2 device on %v: DGID %v is not an IPv4-mapped GID (only IPv4 is supported so far)", d.addr, gid)
	}
	port := av.DPort
	if port == 0 {
		port = DefaultPort
	}
	return netip.AddrPortFrom(gid.Unmap(), port), nil
}
