package qp

import (
	"math"
	"time"

	"github.com/goccl/goccl/rdma/wire"
)

// DCQCN is RoCE v2's congestion control (Zhu et al., "Congestion Control
// for Large-Scale RDMA Deployments", SIGCOMM 2015), as ConnectX NICs run
// it: a switch marks CE on packets it queues past a threshold; the
// receiving QP (the notification point) answers a marked packet with a
// CNP, at most one per CNPInterval; the sending QP (the reaction point)
// paces its packets at a rate Rc that a CNP cuts and timers and a byte
// counter raise again:
//
//   - on a CNP (at most once per RateReducePeriod): Rt = Rc, Rc = Rc × (1
//     − α/2), α = (1 − g)·α + g, and the increase counters restart;
//   - every AlphaPeriod without a CNP: α = (1 − g)·α;
//   - every TimeReset, and every ByteReset bytes sent, since the last cut
//     or increase, an increase event, counted by the timer (T) and the
//     byte counter (BC): while both counts are below Threshold (F), fast
//     recovery, Rc = (Rt + Rc)/2; once one reaches it, additive increase,
//     Rt += AIRate first; once both do, hyper increase, Rt += i·HAIRate
//     (i: the smaller count minus F, plus 1); Rc = (Rt + Rc)/2.
//
// The stages follow the paper's first author's simulator (ns3-rdma,
// qbb-net-device.cc), except that it also halves T and B in the hyper
// stage, which this does not. α's update is mlx5's: once per AlphaPeriod,
// up if a CNP came in it, down otherwise; a cut uses the α of its moment.
// Rates are bytes per second. The zero DCQCN is off.
type DCQCN struct {
	LineRate float64 // the rate a QP starts at and never exceeds (0: congestion control off)
	MinRate  float64 // the rate a cut never goes below

	G                float64       // α's gain g
	InitialAlpha     float64       // α before the first CNP
	AlphaPeriod      time.Duration // α decays once per period without a CNP
	RateReducePeriod time.Duration // at most one cut per period
	MinDecrease      float64       // a cut keeps at least this share of Rc (0.5: halve at most)

	TimeReset time.Duration // an increase event per this time without a CNP
	ByteReset int64         // an increase event per this many bytes sent
	Threshold int           // F: fast recovery events before additive increase
	AIRate    float64       // additive increase step of Rt
	HAIRate   float64       // hyper increase step of Rt

	CNPInterval time.Duration // a QP sends at most one CNP per interval

	// Burst is the pacer's depth in bytes: what a QP may send at once
	// after an idle spell (at least one packet).
	Burst int
}

// DefaultDCQCN is DCQCN with a ConnectX's firmware defaults (mlx5,
// MLNX_OFED's /sys/class/net/IF/ecn/roce_rp and roce_np; NVIDIA, "DCQCN
// CC Parameters"), for a QP at lineRate bytes per second:
//
//	dce_tcp_g 1019, so g = 5/1024     dce_tcp_rtt 1 µs (AlphaPeriod)
//	initial_alpha_value 1023/1024     rpg_gd 11: Rc·(1 − α/2)
//	rpg_min_dec_fac 50 %              rpg_min_rate 1 Mbit/s
//	rate_reduce_monitor_period 4 µs   rpg_time_reset 300 µs
//	rpg_byte_reset 32767 × 64 bytes   rpg_threshold 1 (F)
//	rpg_ai_rate 5 Mbit/s              rpg_hai_rate 50 Mbit/s
//	min_time_between_cnps 4 µs        (Burst: this package's own)
//
// The byte reset's unit is documented as bytes by mstconfig and, as best
// known, as 64-byte units by NVIDIA's table; 64 is taken (2 MB).
func DefaultDCQCN(lineRate float64) DCQCN {
	return DCQCN{
		LineRate: lineRate, MinRate: 1e6 / 8,
		G: 1 - 1019.0/1024, InitialAlpha: 1023.0 / 1024, AlphaPeriod: time.Microsecond,
		RateReducePeriod: 4 * time.Microsecond, MinDecrease: 0.5,
		TimeReset: 300 * time.Microsecond, ByteReset: 32767 * 64, Threshold: 1,
		AIRate: 5e6 / 8, HAIRate: 50e6 / 8,
		CNPInterval: 4 * time.Microsecond,
		Burst:       64 << 10,
	}
}

// ccState is a QP's DCQCN state.
type ccState struct {
	p                DCQCN
	rc, rt, alpha    float64
	alphaAt          time.Duration // α updated up to the period starting here
	cnpInPeriod      bool          // a CNP arrived in that period
	cut              time.Duration // the last cut
	cutAny           bool
	incAt            time.Duration // the increase timer's start
	t, bc            int           // increase events from the timer and the byte counter
	bytes            int64         // sent since the byte counter's last event
	tokens           float64       // the pacer's bucket, bytes
	filled           time.Duration // when tokens was last filled
	blockedUntil     time.Duration // pump waits for tokens until then (0: not waiting)
	lastCNP          time.Duration // NP: the last CNP sent
	cnpAny           bool
	cnpsSent, cnpsIn uint64
	cuts             uint64
}

// SetDCQCN turns DCQCN on for this QP with p (p.LineRate 0: off).
func (q *QP) SetDCQCN(p DCQCN) {
	if p.LineRate <= 0 {
		q.cc = nil
		return
	}
	p.MinRate = math.Min(math.Max(p.MinRate, 1), p.LineRate)
	q.cc = &ccState{p: p, rc: p.LineRate, rt: p.LineRate, alpha: p.InitialAlpha, alphaAt: q.now, incAt: q.now,
		tokens: float64(p.Burst), filled: q.now}
}

// Rate is the QP's current sending rate Rc in bytes per second (0 without
// DCQCN).
func (q *QP) Rate() float64 {
	if q.cc == nil {
		return 0
	}
	return q.cc.rc
}

// CCStats counts a QP's DCQCN events.
type CCStats struct {
	CNPsSent, CNPsReceived, RateCuts uint64
	Alpha                            float64
}

// CCStats returns the QP's DCQCN counters.
func (q *QP) CCStats() CCStats {
	if q.cc == nil {
		return CCStats{}
	}
	return CCStats{CNPsSent: q.cc.cnpsSent, CNPsReceived: q.cc.cnpsIn, RateCuts: q.cc.cuts, Alpha: q.cc.alpha}
}

// ReceiveCE is Receive for a packet that arrived with the IP header's ECN
// field set to CE (a switch marked it): the QP, as DCQCN's notification
// point, answers with a CNP unless it sent one less than CNPInterval ago.
// Without DCQCN it is Receive.
func (q *QP) ReceiveCE(p *wire.Packet) {
	q.Receive(p)
	c := q.cc
	s := q.State()
	if c == nil || p.BTH.DestQP != q.QPN || p.BTH.Opcode == wire.CNP || (s != StateRTR && s != StateRTS && s != StateSQD) {
		return
	}
	if c.cnpAny && q.now-c.lastCNP < c.p.CNPInterval {
		return
	}
	c.cnpAny, c.lastCNP = true, q.now
	c.cnpsSent++
	q.emit(wire.Packet{BTH: wire.BTH{Opcode: wire.CNP, BECN: true}})
}

// receiveCNP is the reaction point's cut.
func (q *QP) receiveCNP() {
	c := q.cc
	if c == nil {
		return
	}
	c.cnpsIn++
	c.updateAlpha(q.now)
	c.cnpInPeriod = true
	if c.cutAny && q.now-c.cut < c.p.RateReducePeriod {
		return
	}
	c.cutAny, c.cut = true, q.now
	c.cuts++
	c.rt = c.rc
	c.rc = math.Max(math.Max(c.rc*(1-c.alpha/2), c.rc*c.p.MinDecrease), c.p.MinRate)
	c.t, c.bc, c.bytes, c.incAt = 0, 0, 0, q.now
}

// updateAlpha applies α's updates for the AlphaPeriods that ended by now:
// the first with a CNP in it raises α, α = (1 − g)·α + g, and every other
// decays it, α = (1 − g)·α (a period of 1 µs and an idle second are a
// million updates: the decays are one power).
func (c *ccState) updateAlpha(now time.Duration) {
	if c.p.AlphaPeriod <= 0 || now-c.alphaAt < c.p.AlphaPeriod {
		return
	}
	n := int64((now - c.alphaAt) / c.p.AlphaPeriod)
	g := c.p.G
	c.alpha *= 1 - g
	if c.cnpInPeriod {
		c.alpha += g
	}
	c.alpha *= math.Pow(1-g, float64(n-1))
	c.alphaAt += time.Duration(n) * c.p.AlphaPeriod
	c.cnpInPeriod = false
}

// increase is one rate increase event.
func (c *ccState) increase() {
	f := c.p.Threshold
	switch {
	case max(c.t, c.bc) < f:
		// Fast recovery: towards the rate before the cut.
	case min(c.t, c.bc) >= f:
		c.rt += float64(min(c.t, c.bc)-f+1) * c.p.HAIRate
	default:
		c.rt += c.p.AIRate
	}
	c.rt = math.Min(c.rt, c.p.LineRate)
	c.rc = math.Min((c.rt+c.rc)/2, c.p.LineRate)
	if c.p.LineRate-c.rc < c.p.LineRate*1e-6 {
		c.rc = c.p.LineRate // halving towards it never gets there
	}
}

// ccTick runs α's periods and the increase timer up to now.
func (q *QP) ccTick() {
	c := q.cc
	if c == nil {
		return
	}
	c.updateAlpha(q.now)
	if c.rc >= c.p.LineRate || c.p.TimeReset <= 0 {
		return
	}
	for q.now-c.incAt >= c.p.TimeReset && c.rc < c.p.LineRate {
		c.incAt += c.p.TimeReset
		c.t++
		c.increase()
	}
}

// ccSent accounts n bytes sent: the pacer's tokens and the byte counter.
func (q *QP) ccSent(n int) {
	c := q.cc
	c.tokens -= float64(n)
	if c.rc >= c.p.LineRate || c.p.ByteReset <= 0 {
		return
	}
	c.bytes += int64(n)
	for c.bytes >= c.p.ByteReset && c.rc < c.p.LineRate {
		c.bytes -= c.p.ByteReset
		c.bc++
		c.increase()
	}
}

// ccMayPace reports whether a packet of n bytes may leave now under the
// pacer; if not, the QP waits for the tokens (NextDeadline says until
// when).
func (q *QP) ccMayPace(n int) bool {
	c := q.cc
	if c == nil {
		return true
	}
	c.tokens = math.Min(c.tokens+(q.now-c.filled).Seconds()*c.rc, float64(max(c.p.Burst, n)))
	c.filled = q.now
	if c.tokens >= float64(n) {
		c.blockedUntil = 0
		return true
	}
	c.blockedUntil = q.now + time.Duration(math.Ceil((float64(n)-c.tokens)/c.rc*1e9))
	return false
}

// ccDeadline is when DCQCN next needs a Tick (0: never): the pacer's wait
// or the increase timer's next event.
func (q *QP) ccDeadline() time.Duration {
	c := q.cc
	if c == nil {
		return 0
	}
	d := c.blockedUntil
	if c.rc < c.p.LineRate && c.p.TimeReset > 0 {
		if next := c.incAt + c.p.TimeReset; d == 0 || next < d {
			d = next
		}
	}
	return d
}

// wireBytes is what packet p of payload bytes takes on an Ethernet wire as
// RoCE v2: Ethernet (14), IPv4 (20), UDP (8), BTH (12), the extended
// headers, the payload and pad, ICRC (4).
func wireBytes(hdrs, payload int) int {
	return 14 + 20 + 8 + wire.BTHSize + hdrs + payload + (-payload & 3) + wire.ICRCSize
}

// CNPs and the pacer in the engine's other files: Receive passes CNPs to
// receiveCNP, Tick runs ccTick, pump asks ccMayPace before each request
// packet and reports it with ccSent, NextDeadline includes ccDeadline.
