package qp

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/goccl/goccl/rdma/wire"
)

// testCC is DCQCN with round numbers: rates in bytes per second.
func testCC() DCQCN {
	return DCQCN{
		LineRate: 1000, MinRate: 1,
		G: 1.0 / 16, InitialAlpha: 1, AlphaPeriod: 10 * time.Microsecond,
		RateReducePeriod: 50 * time.Microsecond,
		TimeReset:        100 * time.Microsecond, ByteReset: 1 << 40, Threshold: 5,
		AIRate: 10, HAIRate: 100,
		CNPInterval: 4 * time.Microsecond,
		Burst:       64 << 10,
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestCNPGeneration: the notification point answers CE-marked packets with
// CNPs to the sending QP, at most one per CNPInterval; unmarked packets,
// and a QP without DCQCN, send none.
func TestCNPGeneration(t *testing.T) {
	s := newSim(t, 1, 1024, 4096, nil)
	np := s.qp[1]
	np.SetDCQCN(testCC())
	data := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, DestQP: np.QPN, PSN: 0xfffff0}, Payload: []byte("x")}
	np.PostRecv(RecvWR{ID: 1, Buf: make([]byte, 64)})
	var cnps []time.Duration
	for us := range 11 {
		now := time.Duration(us) * time.Microsecond
		np.Tick(now)
		data.BTH.PSN = wire.PSNAdd(0xfffff0, us)
		np.PostRecv(RecvWR{ID: uint64(us + 2), Buf: make([]byte, 64)})
		if us == 5 {
			np.Receive(&data) // not marked
		} else {
			np.ReceiveCE(&data)
		}
		for _, p := range np.Packets() {
			if p.BTH.Opcode == wire.CNP {
				if p.BTH.DestQP != s.qp[0].QPN || !p.BTH.BECN {
					t.Errorf("CNP %+v: want DestQP %#x (the sender) and BECN", p.BTH, s.qp[0].QPN)
				}
				var b []byte
				b = p.Append(b)
				if len(b) != wire.BTHSize+wire.CNPPayloadSize {
					t.Errorf("CNP of %d bytes, want BTH and %d reserved bytes", len(b), wire.CNPPayloadSize)
				}
				cnps = append(cnps, now)
			}
		}
	}
	want := []time.Duration{0, 4 * time.Microsecond, 8 * time.Microsecond}
	if len(cnps) != len(want) || cnps[0] != want[0] || cnps[1] != want[1] || cnps[2] != want[2] {
		t.Errorf("CNPs at %v, want %v (one per 4 µs interval)", cnps, want)
	}
	if st := np.CCStats(); st.CNPsSent != 3 {
		t.Errorf("CCStats %+v, want 3 CNPs sent", st)
	}
	plain := newSim(t, 2, 1024, 4096, nil).qp[1]
	plain.PostRecv(RecvWR{ID: 1, Buf: make([]byte, 64)})
	data.BTH.PSN, data.BTH.DestQP = 0xfffff0, plain.QPN
	plain.ReceiveCE(&data)
	for _, p := range plain.Packets() {
		if p.BTH.Opcode == wire.CNP {
			t.Error("a QP without DCQCN sent a CNP")
		}
	}
}

// cnp is a CNP for q.
func cnp(q *QP) *wire.Packet {
	return &wire.Packet{BTH: wire.BTH{Opcode: wire.CNP, DestQP: q.QPN, BECN: true}}
}

// TestDCQCNCutAndRecovery: a CNP halves the rate (α = 1), a second within
// RateReducePeriod cuts nothing, and the increase timer then recovers it:
// F fast-recovery steps halving the distance to the rate before the cut,
// then additive increase capped at the line rate.
func TestDCQCNCutAndRecovery(t *testing.T) {
	rp := newSim(t, 3, 1024, 4096, nil).qp[0]
	p := testCC()
	rp.SetDCQCN(p)
	if rp.Rate() != 1000 {
		t.Fatalf("rate %v before any CNP, want the line rate", rp.Rate())
	}
	rp.Tick(0)
	rp.Receive(cnp(rp))
	rp.Tick(time.Microsecond)
	rp.Receive(cnp(rp))
	if st := rp.CCStats(); rp.Rate() != 500 || st.RateCuts != 1 || st.CNPsReceived != 2 {
		t.Fatalf("after two CNPs 1 µs apart: rate %v, %+v; want 500 and one cut", rp.Rate(), st)
	}
	want := []float64{750, 875, 937.5, 968.75}             // fast recovery towards Rt = 1000
	want = append(want, (1000+968.75)/2, (1000+984.375)/2) // additive: Rt stays capped at 1000
	for i, w := range want {
		rp.Tick(time.Microsecond + time.Duration(i+1)*p.TimeReset)
		if !near(rp.Rate(), w) {
			t.Errorf("increase event %d: rate %v, want %v", i+1, rp.Rate(), w)
		}
	}
}

// TestDCQCNIncreaseStages: the three increase stages, by the timer (T) and
// byte counter (BC) counts against F = 5.
func TestDCQCNIncreaseStages(t *testing.T) {
	p := testCC()
	for _, tc := range []struct {
		t, bc        int
		wantRt, want float64
	}{
		{4, 4, 400, 300},                 // both below F: fast recovery, Rt kept
		{6, 2, 410, 305},                 // one at F or past: additive, Rt + 10
		{7, 9, 400 + 3*100, 450},         // both at F or past: hyper, Rt + (min - F + 1)·100
		{5, 5, 400 + 1*100, 350},         // both exactly at F: hyper, i = 1
		{20, 20, 1000, (1000 + 200) / 2}, // capped at the line rate
	} {
		c := &ccState{p: p, rc: 200, rt: 400, t: tc.t, bc: tc.bc}
		c.increase()
		if !near(c.rt, tc.wantRt) || !near(c.rc, tc.want) {
			t.Errorf("T %d BC %d: Rt %v Rc %v, want %v and %v", tc.t, tc.bc, c.rt, c.rc, tc.wantRt, tc.want)
		}
	}
}

// TestDCQCNAlpha: α rises by g in a period with a CNP and decays by (1-g)
// in each period without, and each cut uses the α of its moment.
func TestDCQCNAlpha(t *testing.T) {
	rp := newSim(t, 4, 1024, 4096, nil).qp[0]
	p := testCC()
	p.InitialAlpha = 0.5
	rp.SetDCQCN(p)
	g := p.G
	rp.Tick(0)
	rp.Receive(cnp(rp)) // cut with α = 0.5: ×0.75
	if !near(rp.Rate(), 750) {
		t.Fatalf("rate %v after a CNP with α 0.5, want 750", rp.Rate())
	}
	rp.Tick(p.AlphaPeriod) // the period with the CNP ends
	a := 0.5*(1-g) + g
	if got := rp.CCStats().Alpha; !near(got, a) {
		t.Fatalf("α %v after the CNP's period, want %v", got, a)
	}
	rp.Tick(11 * p.AlphaPeriod) // ten periods without a CNP
	a *= math.Pow(1-g, 10)
	if got := rp.CCStats().Alpha; !near(got, a) {
		t.Fatalf("α %v after ten quiet periods, want %v", got, a)
	}
	r := rp.Rate()
	rp.Receive(cnp(rp)) // 110 µs after the first cut: cuts with the decayed α
	if !near(rp.Rate(), r*(1-a/2)) {
		t.Errorf("second cut: rate %v, want %v × (1 - %v/2)", rp.Rate(), r, a)
	}
}

// TestDCQCNPacing: a QP paced at Rc sends its burst at once, then packets
// as the rate allows; NextDeadline says when the next may go, and the
// bytes sent over a millisecond match the rate.
func TestDCQCNPacing(t *testing.T) {
	s := newSim(t, 5, 1024, 1<<20, nil)
	rp := s.qp[0]
	p := testCC()
	p.LineRate, p.Burst = 100e6, 8<<10 // 100 MB/s, 8 KiB burst
	rp.SetDCQCN(p)
	rp.Tick(0)
	if err := rp.PostSend(SendWR{ID: 1, Opcode: WRWrite, Local: make([]byte, 200<<10), RemoteVA: testVA, RKey: testRKey}); err != nil {
		t.Fatal(err)
	}
	sent := 0
	count := func() {
		for _, pk := range rp.Packets() {
			sent += wireBytes(0, len(pk.Payload))
		}
	}
	count()
	if sent > 8<<10 || sent < 6<<10 {
		t.Fatalf("%d bytes sent at once, want the 8 KiB burst", sent)
	}
	d := rp.NextDeadline()
	if d <= 0 || d > 20*time.Microsecond {
		t.Fatalf("NextDeadline %v with packets held by the pacer, want within a packet's time (~11 µs)", d)
	}
	for now := d; now <= time.Millisecond; now = rp.NextDeadline() {
		rp.Tick(now)
		count()
		if rp.NextDeadline() <= now {
			t.Fatalf("NextDeadline %v does not move past %v", rp.NextDeadline(), now)
		}
	}
	want := 100e6*1e-3 + 8<<10
	if f := float64(sent); f > want+1100 || f < want-3000 {
		t.Errorf("%d bytes sent in 1 ms at 100 MB/s with an 8 KiB burst, want about %.0f", sent, want)
	}
}

// incastResult is what an incast run measured.
type incastResult struct {
	good            []float64 // each sender's bytes completed per second after the warm-up
	drops, lateDrop int       // packets the port dropped, and of them after the warm-up
	retx            uint64    // packets the senders sent again
	busy            float64   // share of the time the port was sending
}

// incast simulates n senders writing to n receivers through one switch
// port: the port drains capacity bytes/s, queues at most buffer bytes
// (drop tail) and, with DCQCN (cc not nil), marks CE on packets that find
// more than mark bytes queued. ACKs and CNPs come back unqueued after
// 2 µs. Each sender keeps two 64 KiB WRITEs posted. The first fifth of dur
// is the warm-up.
func incast(t *testing.T, n int, cc *DCQCN, capacity float64, buffer, mark int, dur time.Duration) incastResult {
	t.Helper()
	const mtu, msg = 1024, 64 << 10
	type queued struct {
		to   int
		pkt  []byte
		size int
		ce   bool
	}
	type back struct {
		at  time.Duration
		to  int
		pkt []byte
	}
	var senders, receivers []*QP
	for i := range n {
		// Timeout 14 (67 ms), as RDMA applications set it (NCCL's
		// default is 20): a paced QP asks for an ACK every 64 packets,
		// which at a cut rate takes longer than the engine tests' 1 ms.
		s := newSim(t, uint64(10+i), mtu, msg, func(a *Attr) { a.Timeout = 14 })
		senders, receivers = append(senders, s.qp[0]), append(receivers, s.qp[1])
		if cc != nil {
			s.qp[0].SetDCQCN(*cc)
			s.qp[1].SetDCQCN(*cc)
		}
	}
	var q []queued
	var backs []back
	qBytes, credit, portBytes := 0, 0.0, 0
	res := incastResult{good: make([]float64, n)}
	posted, completed := make([]int, n), make([]int, n)
	warm := dur / 5
	for now := time.Duration(0); now < dur; now += time.Microsecond {
		for i, s := range senders {
			s.Tick(now)
			receivers[i].Tick(now)
			for posted[i]-completed[i] < 2 {
				if err := s.PostSend(SendWR{ID: uint64(posted[i]), Opcode: WRWrite, Local: make([]byte, msg), RemoteVA: testVA, RKey: testRKey}); err != nil {
					t.Fatal(err)
				}
				posted[i]++
			}
			for _, p := range s.Packets() {
				b := p.Append(nil)
				size := len(b) + 14 + 20 + 8 + wire.ICRCSize
				if qBytes+size > buffer {
					res.drops++
					if now >= warm {
						res.lateDrop++
					}
					continue
				}
				q = append(q, queued{to: i, pkt: b, size: size, ce: cc != nil && qBytes > mark})
				qBytes += size
			}
			for _, p := range receivers[i].Packets() {
				backs = append(backs, back{now + 2*time.Microsecond, i, p.Append(nil)})
			}
			for _, c := range s.Completions() {
				if c.Status != StatusSuccess {
					t.Fatalf("sender %d: %v at %v", i, c.Status, now)
				}
				completed[i]++
				if now >= warm {
					res.good[i] += msg
				}
			}
		}
		// The port sends capacity bytes per second.
		credit += capacity * 1e-6
		for len(q) > 0 && credit >= float64(q[0].size) {
			f := q[0]
			q, qBytes, credit = q[1:], qBytes-f.size, credit-float64(f.size)
			portBytes += f.size
			var p wire.Packet
			if err := p.Decode(f.pkt); err != nil {
				t.Fatal(err)
			}
			if f.ce {
				receivers[f.to].ReceiveCE(&p)
			} else {
				receivers[f.to].Receive(&p)
			}
		}
		if len(q) == 0 {
			credit = 0 // an idle port saves nothing
		}
		keep := backs[:0]
		for _, b := range backs {
			if b.at > now {
				keep = append(keep, b)
				continue
			}
			var p wire.Packet
			if err := p.Decode(b.pkt); err != nil {
				t.Fatal(err)
			}
			senders[b.to].Receive(&p)
		}
		backs = keep
	}
	for _, s := range senders {
		res.retx += s.Stats.Retransmits
	}
	for i := range res.good {
		res.good[i] /= (dur - warm).Seconds()
	}
	res.busy = float64(portBytes) / (capacity * dur.Seconds())
	return res
}

// TestDCQCNIncast: 3 senders at line rate into one 1 Gbit/s port with a
// shallow (128 KiB) queue, marking above 32 KiB. Without congestion
// control the queue overflows, go-back-N resends into it and the
// retransmission timeouts starve the senders. With DCQCN (ConnectX's
// defaults) the first burst, sent before the first CNP can come back, is
// lost as without it (a lossless fabric's PFC would hold it), but after
// the warm-up nothing is dropped, the three shares are within 10 % of
// each other, and the senders get at least 70 % of the port (measured
// about 80 %: the rates settle just under a third of it each; docs/design.md).
func TestDCQCNIncast(t *testing.T) {
	const capacity = 125e6
	for _, cc := range []bool{false, true} {
		var p *DCQCN
		if cc {
			d := DefaultDCQCN(capacity)
			p = &d
		}
		r := incast(t, 3, p, capacity, 128<<10, 32<<10, 100*time.Millisecond)
		total := r.good[0] + r.good[1] + r.good[2]
		lo, hi := min(r.good[0], r.good[1], r.good[2]), max(r.good[0], r.good[1], r.good[2])
		t.Logf("DCQCN %v: goodput %.1f %.1f %.1f MB/s (%.0f %% of the port, busy %.0f %%), %d drops (%d after the warm-up), %d retransmitted",
			cc, r.good[0]/1e6, r.good[1]/1e6, r.good[2]/1e6, 100*total/capacity, 100*r.busy, r.drops, r.lateDrop, r.retx)
		if !cc {
			if r.lateDrop == 0 || total > 0.5*capacity {
				t.Errorf("without congestion control: %d drops after the warm-up, %.0f %% of the port; the test does not congest", r.lateDrop, 100*total/capacity)
			}
			continue
		}
		if r.lateDrop > 0 || total < 0.7*capacity || hi > 1.1*lo {
			t.Errorf("DCQCN: %d drops after the warm-up, %.0f %% of the port, shares %.1f to %.1f MB/s; want none, >= 70 %%, within 10 %%",
				r.lateDrop, 100*total/capacity, lo/1e6, hi/1e6)
		}
	}
}

// TestAckDuringResend: a go-back-N resend of WR A is under way (the pacer
// holds the rest) when the ACK of A's original last packet arrives: A
// completes, and the next WR starts at the PSN after A, not at the resend's
// position inside A (which the responder had passed: its packets were
// taken for duplicates, then rejected as out of order).
func TestAckDuringResend(t *testing.T) {
	s := newSim(t, 6, 1024, 64<<10, nil)
	rq, rs := s.qp[0], s.qp[1]
	a := make([]byte, 4<<10)
	fill(a, 1)
	if err := rq.PostSend(SendWR{ID: 1, Opcode: WRWrite, Local: a, RemoteVA: testVA, RKey: testRKey}); err != nil {
		t.Fatal(err)
	}
	sent := clonePackets(rq.Packets())
	if len(sent) != 4 {
		t.Fatalf("A left in %d packets, want 4", len(sent))
	}
	for i := range sent {
		rs.Receive(&sent[i])
	}
	acks := clonePackets(rs.Packets()) // the ACK of A's last packet, held back
	// From now on the pacer lets one packet out per millisecond.
	p := testCC()
	p.LineRate, p.Burst = 1e6, 1
	rq.SetDCQCN(p)
	// The retry timer fires; the resend sends one packet (the pacer).
	now := RetryTimeout(8) + time.Millisecond
	rq.Tick(now)
	if resent := rq.Packets(); len(resent) != 1 || resent[0].BTH.PSN != sent[0].BTH.PSN {
		t.Fatalf("resend: %d packets, want A's first alone", len(resent))
	}
	for i := range acks {
		rq.Receive(&acks[i])
	}
	if c := rq.Completions(); len(c) != 1 || c[0].WRID != 1 || c[0].Status != StatusSuccess {
		t.Fatalf("A's completion: %+v", c)
	}
	b := make([]byte, 2<<10)
	fill(b, 2)
	if err := rq.PostSend(SendWR{ID: 2, Opcode: WRWrite, Local: b, RemoteVA: testVA + 8<<10, RKey: testRKey}); err != nil {
		t.Fatal(err)
	}
	s.now = now
	var cqes []CQE
	s.run(now+time.Second, func() bool {
		cqes = append(cqes, s.cqes[0]...)
		s.cqes[0] = s.cqes[0][:0]
		return len(cqes) > 0
	})
	if cqes[0].WRID != 2 || cqes[0].Status != StatusSuccess || !bytes.Equal(s.mem[1].buf[8<<10:10<<10], b) {
		t.Errorf("B: %+v, data equal %v", cqes[0], bytes.Equal(s.mem[1].buf[8<<10:10<<10], b))
	}
}

// clonePackets copies packets that alias the engine's buffers.
func clonePackets(ps []wire.Packet) []wire.Packet {
	out := make([]wire.Packet, len(ps))
	for i, p := range ps {
		var q wire.Packet
		if err := q.Decode(p.Append(nil)); err != nil {
			panic(err)
		}
		out[i] = q
	}
	return out
}
