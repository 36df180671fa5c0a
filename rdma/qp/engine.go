package qp

import (
	"errors"
	"fmt"
	"time"

	"github.com/goccl/goccl/rdma/wire"
)

// Status is a work completion status (enum ibv_wc_status, the values RC uses).
type Status uint8

const (
	StatusSuccess        Status = iota // IBV_WC_SUCCESS
	StatusLocLenErr                    // IBV_WC_LOC_LEN_ERR: a message longer than the receive buffer
	StatusLocQPOpErr                   // IBV_WC_LOC_QP_OP_ERR
	StatusLocProtErr                   // IBV_WC_LOC_PROT_ERR
	StatusWRFlushErr                   // IBV_WC_WR_FLUSH_ERR: the QP went to ERR before the WR ran
	StatusRemInvReqErr                 // IBV_WC_REM_INV_REQ_ERR: the responder refused the request (NAK invalid request)
	StatusRemAccessErr                 // IBV_WC_REM_ACCESS_ERR: bad R_Key, bounds or rights at the responder
	StatusRemOpErr                     // IBV_WC_REM_OP_ERR
	StatusRetryExcErr                  // IBV_WC_RETRY_EXC_ERR: retry_cnt timeouts or NAKs without progress
	StatusRNRRetryExcErr               // IBV_WC_RNR_RETRY_EXC_ERR: rnr_retry RNR NAKs
)

var statusNames = [...]string{"IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_QP_OP_ERR", "IBV_WC_LOC_PROT_ERR",
	"IBV_WC_WR_FLUSH_ERR", "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR", "IBV_WC_REM_OP_ERR",
	"IBV_WC_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", s)
}

// WROpcode is the operation of a send work request (enum ibv_wr_opcode).
type WROpcode uint8

const (
	WRSend WROpcode = iota
	WRSendImm
	WRWrite
	WRWriteImm
	WRRead
	WRCompareSwap // 8 bytes at RemoteVA: if equal to Compare, set to SwapAdd; Local gets the old value
	WRFetchAdd    // 8 bytes at RemoteVA += SwapAdd; Local gets the old value
)

// CQOpcode says what a completion completed (enum ibv_wc_opcode).
type CQOpcode uint8

const (
	CQSend CQOpcode = iota
	CQWrite
	CQRead
	CQCompareSwap
	CQFetchAdd
	CQRecv
	CQRecvWriteImm
)

// SendWR is a send work request. Local is the data to send (SEND, WRITE) or
// the buffer a READ fills; the verbs layer resolves lkeys to it.
type SendWR struct {
	ID       uint64
	Opcode   WROpcode
	Local    []byte
	RemoteVA uint64 // WRITE, READ
	RKey     uint32 // WRITE, READ
	Imm      uint32 // SendImm, WriteImm
	SwapAdd  uint64 // CompareSwap: the new value; FetchAdd: the addend
	Compare  uint64 // CompareSwap
}

// RecvWR is a receive work request: the buffer the next SEND (or the
// immediate of a WRITE with immediate) lands in.
type RecvWR struct {
	ID  uint64
	Buf []byte
}

// CQE is a work completion (struct ibv_wc).
type CQE struct {
	WRID    uint64
	Status  Status
	Opcode  CQOpcode
	ByteLen int // bytes received (receive completions) or transferred
	Imm     uint32
	HasImm  bool
	QPN     uint32
}

// Memory gives the responder the registered memory remote requests name
// (the protection domain's memory regions, by R_Key).
type Memory interface {
	// Remote returns bytes [va, va+n) of the region rkey names if it grants
	// access (AccessRemoteWrite, AccessRemoteRead); else an error.
	Remote(rkey uint32, va uint64, n int, access uint32) ([]byte, error)
}

// Stats counts what the engine did.
type Stats struct {
	PacketsSent, PacketsReceived   uint64
	Retransmits                    uint64 // packets sent again (timeouts, sequence NAKs, RNR)
	Timeouts, SeqNAKs, RNRNAKs     uint64 // events at the requester
	Duplicates, OutOfSequence      uint64 // at the responder (OutOfSequence: also READ responses past a gap, at the requester)
	SeqNAKsSent, RNRNAKsSent, ACKs uint64
	ReadReRequests                 uint64 // READs re-issued from a missing response (requester)
}

// isAtomic reports whether wr is an atomic operation.
func (wr *SendWR) isAtomic() bool { return wr.Opcode == WRCompareSwap || wr.Opcode == WRFetchAdd }

// needsResponse reports whether wr completes on a response carrying data
// (READ responses, an ATOMIC ACKNOWLEDGE) rather than on an ACK.
func (wr *SendWR) needsResponse() bool { return wr.Opcode == WRRead || wr.isAtomic() }

// sendWQE is a send WR in the send queue with its place in PSN space.
type sendWQE struct {
	wr       SendWR
	firstPSN uint32
	npkts    int  // packets (PSNs) the WR takes; for READ, its responses
	started  bool // firstPSN assigned
	readDone int  // READ: response packets received in order; atomic: 1 once answered
}

// QP is the protocol engine of one RC queue pair: its state machine, the
// requester (send queue, segmentation by path MTU, ACK and NAK handling,
// go-back-N retransmission on sequence NAKs and timeouts, retry_cnt and
// rnr_retry), the responder (PSN checks, duplicates re-ACKed, READs served
// again, RNR NAK without a receive WR, R_Key, bounds and rights checks) and
// the completer (CQEs). It does no I/O and reads no clock: Receive takes
// packets, Tick the current time; Packets and Completions give what came
// out. Not safe for concurrent use.
type QP struct {
	*Machine
	mem Memory

	// Requester.
	sq       []*sendWQE // posted, not yet completed, in order
	nextIdx  int        // sq index of the next WR to (re)send
	nextOff  int        // packet offset within it
	nextPSN  uint32     // PSN of the next packet sent
	unacked  uint32     // oldest PSN not yet acknowledged
	lastSend time.Duration
	timerOn  bool
	retries  uint8 // left before RETRY_EXC_ERR
	rnrLeft  uint8
	rnrUntil time.Duration // no sending before this (RNR wait)
	readsOut int           // READ WRs sent and not complete
	now      time.Duration
	sentEnd  uint32 // one past the highest PSN sent so far
	respDone uint32 // one past the highest PSN the responder has confirmed
	sentAny  bool
	// readGap is the first missing READ response already re-requested
	// (readGapSet): a gap is asked for once.
	readGap    uint32
	readGapSet bool

	// Responder.
	rq      []RecvWR
	ePSN    uint32
	msn     uint32
	nakSent bool        // a sequence NAK is outstanding for ePSN
	recvOff int         // bytes of the current SEND received
	cur     wire.Opcode // opcode of the message in progress, when inMsg
	inMsg   bool
	curMR   []byte // current WRITE's target
	curOff  int
	// Results of the latest atomics, by PSN, for duplicates (a repeated
	// atomic returns the saved result and is not executed again).
	atomics    [MaxRdAtomic]savedAtomic
	nextAtomic int

	out   []wire.Packet
	cqes  []CQE
	Stats Stats

	cc *ccState // DCQCN (SetDCQCN); nil: off
}

type savedAtomic struct {
	valid bool
	psn   uint32
	orig  uint64
}

// Window is how many packets the requester sends beyond the oldest
// unacknowledged one.
const Window = 256

// ackEvery is how often (in packets) the requester asks for an ACK inside a
// long message; the last packet of every message asks too.
const ackEvery = 64

// New returns the engine of QP qpn, serving remote requests from mem.
func New(qpn uint32, mem Memory) *QP { return &QP{Machine: NewMachine(qpn), mem: mem} }

// Modify changes the QP's state and attributes (see Machine.Modify); on the
// way to RTR and RTS it takes the PSNs, and moving to ERR flushes the queues.
func (q *QP) Modify(a *Attr, mask AttrMask) error {
	if err := q.Machine.Modify(a, mask); err != nil {
		return err
	}
	switch q.State() {
	case StateRTR:
		if mask&AttrRQPSN != 0 {
			q.ePSN = a.RQPSN
		}
	case StateRTS:
		if mask&AttrSQPSN != 0 {
			q.nextPSN, q.unacked, q.respDone = a.SQPSN, a.SQPSN, a.SQPSN
			q.retries, q.rnrLeft = q.attr.RetryCnt, q.attr.RNRRetry
		}
	case StateErr:
		q.flush()
	case StateReset:
		*q = QP{Machine: q.Machine, mem: q.mem, Stats: q.Stats}
	}
	return nil
}

// ErrState is returned by PostSend and PostRecv in a state that refuses them.
var ErrState = errors.New("qp: wrong state for this work request")

// PostSend queues a send WR (ibv_post_send). The QP must be in RTS (or SQD,
// where it waits).
func (q *QP) PostSend(wr SendWR) error {
	if s := q.State(); s != StateRTS && s != StateSQD {
		return fmt.Errorf("%w: post send on QP %#x in %v", ErrState, q.QPN, s)
	}
	if wr.Opcode > WRFetchAdd {
		return fmt.Errorf("qp: QP %#x: unknown send opcode %d", q.QPN, wr.Opcode)
	}
	if wr.isAtomic() && (len(wr.Local) != 8 || wr.RemoteVA%8 != 0) {
		return fmt.Errorf("qp: QP %#x: an atomic needs an 8-byte local buffer and an 8-byte aligned remote address (have %d bytes, address %#x)", q.QPN, len(wr.Local), wr.RemoteVA)
	}
	if len(wr.Local) > 1<<31-1 {
		return fmt.Errorf("qp: QP %#x: message of %d bytes exceeds 2^31-1", q.QPN, len(wr.Local))
	}
	w := &sendWQE{wr: wr, npkts: max(1, (len(wr.Local)+q.attr.PathMTU-1)/q.attr.PathMTU)}
	q.sq = append(q.sq, w)
	q.pump()
	return nil
}

// PostRecv queues a receive WR (ibv_post_recv); allowed from INIT on.
func (q *QP) PostRecv(wr RecvWR) error {
	if s := q.State(); s == StateReset || s == StateErr {
		return fmt.Errorf("%w: post recv on QP %#x in %v", ErrState, q.QPN, s)
	}
	q.rq = append(q.rq, wr)
	return nil
}

// Packets returns the packets the engine wants sent, in order, and clears
// the queue. The slice is reused: it is valid until the next call into the
// engine (so that steady traffic allocates nothing).
func (q *QP) Packets() []wire.Packet {
	p := q.out
	q.out = q.out[:0]
	return p
}

// Completions returns the completions produced so far and clears the
// queue; the slice is valid until the next call into the engine.
func (q *QP) Completions() []CQE {
	c := q.cqes
	q.cqes = q.cqes[:0]
	return c
}

// Tick advances the engine's clock to now (monotonic, any origin): an
// expired retry timer retransmits from the oldest unacknowledged packet
// (go-back-N) or, with retry_cnt spent, fails the WR with
// IBV_WC_RETRY_EXC_ERR; an RNR wait that ended resumes sending.
func (q *QP) Tick(now time.Duration) {
	q.now = now
	if q.State() != StateRTS && q.State() != StateSQD {
		return
	}
	q.ccTick()
	if q.timerOn && !q.inRNRWait() {
		if to := RetryTimeout(q.attr.Timeout); to > 0 && now-q.lastSend >= to {
			q.Stats.Timeouts++
			if q.retries == 0 {
				q.fail(StatusRetryExcErr)
				return
			}
			q.retries--
			q.rewind(q.unacked)
		}
	}
	q.pump()
}

// NextDeadline is when Tick next has something to do (0: nothing pending).
func (q *QP) NextDeadline() time.Duration {
	d := q.ccDeadline()
	if q.inRNRWait() {
		return earliest(d, q.rnrUntil)
	}
	if q.timerOn {
		if to := RetryTimeout(q.attr.Timeout); to > 0 {
			return earliest(d, q.lastSend+to)
		}
	}
	return d
}

// earliest is the earlier of two deadlines, 0 meaning none.
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || b != 0 && b < a {
		return b
	}
	return a
}

func (q *QP) inRNRWait() bool { return q.rnrUntil > q.now }

// Receive processes one packet addressed to this QP. Packets for another
// QP, or arriving in a state that drops them (RESET, INIT, ERR), are
// ignored.
func (q *QP) Receive(p *wire.Packet) {
	s := q.State()
	if p.BTH.DestQP != q.QPN || s == StateReset || s == StateInit || s == StateErr {
		return
	}
	q.Stats.PacketsReceived++
	switch op := p.BTH.Opcode; {
	case op == wire.CNP:
		q.receiveCNP()
	case op == wire.RCAcknowledge || op == wire.RCAtomicAcknowledge || isReadResponse(op):
		if s == StateRTS || s == StateSQD {
			q.requesterReceive(p)
		}
	case op.Service() == wire.ServiceRC:
		q.responderReceive(p)
	}
}

func isReadResponse(op wire.Opcode) bool {
	return op >= wire.RCReadResponseFirst && op <= wire.RCReadResponseOnly
}

// emit queues a packet to the peer.
func (q *QP) emit(p wire.Packet) {
	p.BTH.DestQP = q.attr.DestQPN
	p.BTH.PKey = 0xffff
	q.out = append(q.out, p)
	q.Stats.PacketsSent++
}

// complete adds a CQE.
func (q *QP) complete(c CQE) {
	c.QPN = q.QPN
	q.cqes = append(q.cqes, c)
}

// flush completes every queued WR with IBV_WC_WR_FLUSH_ERR (the QP is in ERR).
func (q *QP) flush() {
	for _, w := range q.sq {
		q.complete(CQE{WRID: w.wr.ID, Status: StatusWRFlushErr, Opcode: sendCQOpcode(w.wr.Opcode)})
	}
	for _, r := range q.rq {
		q.complete(CQE{WRID: r.ID, Status: StatusWRFlushErr, Opcode: CQRecv})
	}
	q.sq, q.rq, q.nextIdx, q.nextOff, q.timerOn, q.readsOut = nil, nil, 0, 0, false, 0
}

// fail completes the oldest send WR with status and moves the QP to ERR,
// flushing the rest (an RC QP stops at its first error).
func (q *QP) fail(status Status) {
	if len(q.sq) > 0 {
		w := q.sq[0]
		q.complete(CQE{WRID: w.wr.ID, Status: status, Opcode: sendCQOpcode(w.wr.Opcode)})
		q.sq = q.sq[1:]
	}
	q.Machine.state = StateErr
	q.flush()
}

func sendCQOpcode(op WROpcode) CQOpcode {
	switch op {
	case WRWrite, WRWriteImm:
		return CQWrite
	case WRRead:
		return CQRead
	case WRCompareSwap:
		return CQCompareSwap
	case WRFetchAdd:
		return CQFetchAdd
	}
	return CQSend
}
