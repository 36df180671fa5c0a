// Package qp is the queue-pair engine of goccl's soft RoCE device: pure
// state machines (attributes and states in, errors out; later packets and
// timer ticks in, packets, completions and timer requests out), with no
// sockets or clocks of their own, in the etcd raft style. This file holds
// the QP state machine and the attribute rules of Modify (IBTA vol. 1
// §10.3.1, table 91 "QP state transition properties"; the same rules
// libibverbs documents for ibv_modify_qp), for reliable-connection QPs.
package qp

import (
	"fmt"
	"strings"
	"time"

	"github.com/goccl/goccl/rdma/wire"
)

// State is a QP state (IBTA vol. 1 §10.3.1, figure 124).
type State uint8

const (
	StateReset State = iota // just created: no packets in or out
	StateInit               // receive WRs may be posted, nothing processed
	StateRTR                // ready to receive: the responder runs
	StateRTS                // ready to send: requester and responder run
	StateSQD                // send queue drained: no new send WRs start
	StateSQE                // send queue error (UC/UD only; RC goes to Err)
	StateErr                // error: outstanding WRs complete with IBV_WC_WR_FLUSH_ERR
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", s)
}

// AttrMask says which fields of Attr a Modify call sets (ibv_qp_attr_mask).
type AttrMask uint32

const (
	AttrState AttrMask = 1 << iota
	AttrCurState
	AttrEnSQDAsyncNotify
	AttrAccessFlags
	AttrPKeyIndex
	AttrPort
	AttrQKey
	AttrAV
	AttrPathMTU
	AttrTimeout
	AttrRetryCnt
	AttrRNRRetry
	AttrRQPSN
	AttrMaxQPRdAtomic
	AttrAltPath
	AttrMinRNRTimer
	AttrSQPSN
	AttrMaxDestRdAtomic
	AttrPathMigState
	AttrCap
	AttrDestQPN
	numAttrs = iota
)

var attrNames = [numAttrs]string{"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX", "PORT", "QKEY",
	"AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER",
	"SQ_PSN", "MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN"}

func (m AttrMask) String() string {
	var names []string
	for i := 0; i < numAttrs; i++ {
		if m&(1<<i) != 0 {
			names = append(names, attrNames[i])
		}
	}
	if m>>numAttrs != 0 {
		names = append(names, fmt.Sprintf("unknown bits %#x", uint32(m>>numAttrs)<<numAttrs))
	}
	return strings.Join(names, ", ")
}

// Access flags of a QP or memory region (ibv_access_flags).
const (
	AccessLocalWrite   = 1 << 0
	AccessRemoteWrite  = 1 << 1
	AccessRemoteRead   = 1 << 2
	AccessRemoteAtomic = 1 << 3
)

// Attr holds a QP's attributes (ibv_qp_attr, the fields RC uses).
type Attr struct {
	State, CurState  State
	AccessFlags      uint32
	PKeyIndex        uint16
	Port             uint8
	AV               AddressVector
	PathMTU          int   // bytes: 256, 512, 1024, 2048 or 4096
	Timeout          uint8 // local ACK timeout: 4.096 µs × 2^Timeout, 0 = infinite (0..31)
	RetryCnt         uint8 // retransmissions after a timeout or NAK before IBV_WC_RETRY_EXC_ERR (0..7)
	RNRRetry         uint8 // retries after RNR NAKs (0..7; 7 = infinite)
	RQPSN            uint32
	SQPSN            uint32
	MaxQPRdAtomic    uint8 // RDMA READ/atomic requests this QP may have outstanding as requester
	MaxDestRdAtomic  uint8 // ... it accepts as responder
	MinRNRTimer      uint8 // RNR NAK timer code this QP's responder sends (0..31)
	DestQPN          uint32
	EnSQDAsyncNotify bool
}

// AddressVector is where a connected QP sends (ibv_ah_attr reduced to what
// RoCE uses): the peer's GID (an IPv4-mapped or IPv6 address for RoCE v2)
// and UDP source port entropy.
type AddressVector struct {
	DGID         [16]byte
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
	// DPort is the peer device's UDP port (a soft-device extension:
	// several soft devices can share a host); 0 means 4791.
	DPort uint16
	// SPort is the UDP source port the peer queue pair's packets come
	// from (a soft-device extension: it checks that a connected queue
	// pair's packets come from its peer); 0 means DPort.
	SPort uint16
}

// Limits of the soft device (what ibv_query_device would report).
const (
	MaxRdAtomic = 16 // max_qp_rd_atom and max_qp_init_rd_atom
	MaxPorts    = 1
)

type transition struct{ from, to State }

// required and optional attributes per transition for RC QPs (IBTA table 91).
var rules = map[transition]struct{ required, optional AttrMask }{
	{StateReset, StateInit}: {AttrPKeyIndex | AttrPort | AttrAccessFlags, 0},
	{StateInit, StateInit}:  {0, AttrPKeyIndex | AttrPort | AttrAccessFlags},
	{StateInit, StateRTR}: {AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
		AttrAltPath | AttrAccessFlags | AttrPKeyIndex},
	{StateRTR, StateRTS}: {AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic,
		AttrCurState | AttrAccessFlags | AttrMinRNRTimer | AttrAltPath | AttrPathMigState},
	{StateRTS, StateRTS}: {0, AttrCurState | AttrAccessFlags | AttrMinRNRTimer | AttrAltPath | AttrPathMigState},
	{StateRTS, StateSQD}: {0, AttrEnSQDAsyncNotify},
	{StateSQD, StateRTS}: {0, AttrCurState | AttrAccessFlags | AttrMinRNRTimer | AttrAltPath | AttrPathMigState},
	{StateSQD, StateSQD}: {0, AttrAV | AttrPathMTU | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic |
		AttrMaxDestRdAtomic | AttrAccessFlags | AttrMinRNRTimer | AttrAltPath | AttrPKeyIndex | AttrPathMigState | AttrCurState},
}

// Machine is an RC QP's state and attributes, changed only through Modify.
type Machine struct {
	QPN   uint32
	state State
	attr  Attr
}

// NewMachine returns the state machine of a new QP (state RESET).
func NewMachine(qpn uint32) *Machine { return &Machine{QPN: qpn & wire.QPNMask} }

// State is the QP's current state.
func (m *Machine) State() State { return m.state }

// Attr returns the QP's attributes.
func (m *Machine) Attr() Attr { a := m.attr; a.State, a.CurState = m.state, m.state; return a }

// ModifyError says why Modify refused a change (ibv_modify_qp's EINVAL),
// naming the QP, the transition and the attributes at fault.
type ModifyError struct {
	QPN      uint32
	From, To State
	Reason   string
}

func (e *ModifyError) Error() string {
	return fmt.Sprintf("modify QP %#x %v->%v: %s", e.QPN, e.From, e.To, e.Reason)
}

// Modify applies the attributes in mask (ibv_modify_qp). Without AttrState
// the QP stays in its state (a same-state modify). Moving to RESET or ERR is
// allowed from any state with no other attribute. Required attributes must
// all be present, and only required or optional ones may be, with values
// in range; otherwise nothing changes and a *ModifyError says what is wrong.
func (m *Machine) Modify(a *Attr, mask AttrMask) error {
	from, to := m.state, m.state
	if mask&AttrState != 0 {
		to = a.State
	}
	fail := func(format string, args ...any) error {
		return &ModifyError{QPN: m.QPN, From: from, To: to, Reason: fmt.Sprintf(format, args...)}
	}
	if to > StateErr {
		return fail("unknown target state %d", to)
	}
	if mask&AttrCurState != 0 && a.CurState != from {
		return fail("CUR_STATE says %v, the QP is in %v", a.CurState, from)
	}
	rest := mask &^ AttrState
	if to == StateReset || to == StateErr {
		if rest&^AttrCurState != 0 {
			return fail("no attribute but STATE may be given, got %v", rest)
		}
		m.state = to
		if to == StateReset {
			m.attr = Attr{}
		}
		return nil
	}
	r, ok := rules[transition{from, to}]
	if !ok {
		return fail("not a valid transition for an RC QP")
	}
	if missing := r.required &^ rest; missing != 0 {
		return fail("missing required attribute(s) %v", missing)
	}
	if extra := rest &^ (r.required | r.optional); extra != 0 {
		return fail("attribute(s) %v not allowed in this transition", extra)
	}
	if err := checkValues(a, rest); err != "" {
		return fail("%s", err)
	}
	set(&m.attr, a, rest)
	m.state = to
	return nil
}

func checkValues(a *Attr, mask AttrMask) string {
	switch {
	case mask&AttrPort != 0 && (a.Port < 1 || a.Port > MaxPorts):
		return fmt.Sprintf("port %d does not exist (ports 1..%d)", a.Port, MaxPorts)
	case mask&AttrAccessFlags != 0 && a.AccessFlags&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic) != 0:
		return fmt.Sprintf("unknown access flags %#x", a.AccessFlags)
	case mask&AttrPathMTU != 0 && !validMTU(a.PathMTU):
		return fmt.Sprintf("path MTU %d is not 256, 512, 1024, 2048 or 4096", a.PathMTU)
	case mask&AttrTimeout != 0 && a.Timeout > 31:
		return fmt.Sprintf("timeout %d is above 31", a.Timeout)
	case mask&AttrRetryCnt != 0 && a.RetryCnt > 7:
		return fmt.Sprintf("retry_cnt %d is above 7", a.RetryCnt)
	case mask&AttrRNRRetry != 0 && a.RNRRetry > 7:
		return fmt.Sprintf("rnr_retry %d is above 7", a.RNRRetry)
	case mask&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return fmt.Sprintf("min_rnr_timer %d is above 31", a.MinRNRTimer)
	case mask&AttrRQPSN != 0 && a.RQPSN > wire.PSNMask:
		return fmt.Sprintf("rq_psn %#x is wider than 24 bits", a.RQPSN)
	case mask&AttrSQPSN != 0 && a.SQPSN > wire.PSNMask:
		return fmt.Sprintf("sq_psn %#x is wider than 24 bits", a.SQPSN)
	case mask&AttrDestQPN != 0 && a.DestQPN > wire.QPNMask:
		return fmt.Sprintf("dest_qp_num %#x is wider than 24 bits", a.DestQPN)
	case mask&AttrMaxQPRdAtomic != 0 && a.MaxQPRdAtomic > MaxRdAtomic:
		return fmt.Sprintf("max_rd_atomic %d is above the device's %d", a.MaxQPRdAtomic, MaxRdAtomic)
	case mask&AttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > MaxRdAtomic:
		return fmt.Sprintf("max_dest_rd_atomic %d is above the device's %d", a.MaxDestRdAtomic, MaxRdAtomic)
	}
	return ""
}

func validMTU(n int) bool { return n == 256 || n == 512 || n == 1024 || n == 2048 || n == 4096 }

func set(dst, src *Attr, mask AttrMask) {
	if mask&AttrAccessFlags != 0 {
		dst.AccessFlags = src.AccessFlags
	}
	if mask&AttrPKeyIndex != 0 {
		dst.PKeyIndex = src.PKeyIndex
	}
	if mask&AttrPort != 0 {
		dst.Port = src.Port
	}
	if mask&AttrAV != 0 {
		dst.AV = src.AV
	}
	if mask&AttrPathMTU != 0 {
		dst.PathMTU = src.PathMTU
	}
	if mask&AttrTimeout != 0 {
		dst.Timeout = src.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		dst.RetryCnt = src.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		dst.RNRRetry = src.RNRRetry
	}
	if mask&AttrRQPSN != 0 {
		dst.RQPSN = src.RQPSN
	}
	if mask&AttrSQPSN != 0 {
		dst.SQPSN = src.SQPSN
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		dst.MaxQPRdAtomic = src.MaxQPRdAtomic
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		dst.MaxDestRdAtomic = src.MaxDestRdAtomic
	}
	if mask&AttrMinRNRTimer != 0 {
		dst.MinRNRTimer = src.MinRNRTimer
	}
	if mask&AttrDestQPN != 0 {
		dst.DestQPN = src.DestQPN
	}
	if mask&AttrEnSQDAsyncNotify != 0 {
		dst.EnSQDAsyncNotify = src.EnSQDAsyncNotify
	}
}

// RetryTimeout is the local ACK timeout for a Timeout code: 4.096 µs ×
// 2^code (IBTA vol. 1 §9.7.6.1.3), or 0 for code 0 (no timeout).
func RetryTimeout(code uint8) time.Duration {
	if code == 0 || code > 31 {
		return 0
	}
	return time.Duration(4096<<code) * time.Nanosecond
}

// rnrTimerMicros is the RNR NAK timer table (IBTA vol. 1 table 45), in
// units of 10 µs.
var rnrTimer10us = [32]uint32{65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152}

// RNRDelay is how long a requester waits after an RNR NAK carrying timer
// code (0..31): 0.01 ms for 1 up to 491.52 ms for 31, and 655.36 ms for 0.
func RNRDelay(code uint8) time.Duration {
	return time.Duration(rnrTimer10us[code&31]) * 10 * time.Microsecond
}

// InfiniteRNRRetry is the rnr_retry value that never gives up.
const InfiniteRNRRetry = 7
