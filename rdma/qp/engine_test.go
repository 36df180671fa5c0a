package qp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/goccl/goccl/rdma/wire"
)

// testMemory is one registered region: rkey 0x1234 at VA 0x10000.
type testMemory struct {
	buf    []byte
	access uint32
}

const (
	testRKey = 0x1234
	testVA   = 0x10000
)

func (m *testMemory) Remote(rkey uint32, va uint64, n int, access uint32) ([]byte, error) {
	if rkey != testRKey || m.access&access != access || va < testVA || n < 0 ||
		va-testVA > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-(va-testVA) {
		return nil, fmt.Errorf("bad rkey %#x, range [%#x, +%d) or access %#x", rkey, va, n, access)
	}
	return m.buf[va-testVA : va-testVA+uint64(n)], nil
}

// link is a simulated wire between two QPs: each packet is dropped,
// duplicated or delayed (reordered) with the given probabilities, and
// encoded and decoded on the way (so the engines only ever see real bytes).
type link struct {
	rng                      *rand.Rand
	drop, dup, reorder       float64
	down                     bool
	dropIf                   func(*wire.Packet) bool // drops the packets it picks
	inflight                 []flight
	delivered, dropped, dup2 int
}

type flight struct {
	at  time.Duration
	to  int
	pkt []byte
}

const hop = 2 * time.Microsecond

var testTotal = 64 << 20

func (l *link) send(now time.Duration, to int, p wire.Packet) {
	if l.down || l.rng.Float64() < l.drop || l.dropIf != nil && l.dropIf(&p) {
		l.dropped++
		return
	}
	b := p.Append(nil)
	n := 1
	if l.rng.Float64() < l.dup {
		n = 2
		l.dup2++
	}
	for i := 0; i < n; i++ {
		at := now + hop
		if l.rng.Float64() < l.reorder {
			at += time.Duration(l.rng.IntN(50)) * time.Microsecond
		}
		l.inflight = append(l.inflight, flight{at, to, b})
	}
}

// sim runs two engines over a link until done() or the simulated deadline.
type sim struct {
	t    *testing.T
	qp   [2]*QP
	mem  [2]*testMemory
	l    *link
	now  time.Duration
	cqes [2][]CQE
}

func newSim(t *testing.T, seed uint64, mtu int, memSize int, attr func(*Attr)) *sim {
	s := &sim{t: t, l: &link{rng: rand.New(rand.NewPCG(seed, 7))}}
	for i := range 2 {
		s.mem[i] = &testMemory{buf: make([]byte, memSize), access: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic}
		s.qp[i] = New(uint32(0x11+i), s.mem[i])
	}
	for i, q := range s.qp {
		steps := []struct {
			a    Attr
			mask AttrMask
		}{
			{Attr{State: StateInit, Port: 1, AccessFlags: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic}, AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
			{Attr{State: StateRTR, PathMTU: mtu, DestQPN: uint32(0x11 + 1 - i), RQPSN: 0xfffff0 + uint32(1-i), MaxDestRdAtomic: 8, MinRNRTimer: 1},
				AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer},
			{Attr{State: StateRTS, SQPSN: 0xfffff0 + uint32(i), Timeout: 8, RetryCnt: 7, RNRRetry: 7, MaxQPRdAtomic: 8},
				AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic},
		}
		for _, st := range steps {
			if attr != nil {
				attr(&st.a)
			}
			if err := q.Modify(&st.a, st.mask); err != nil {
				t.Fatal(err)
			}
		}
	}
	return s
}

// run moves packets and time until done() says stop; it fails after limit
// of simulated time.
func (s *sim) run(limit time.Duration, done func() bool) {
	s.t.Helper()
	for !done() {
		if s.now > limit {
			s.t.Fatalf("not done after %v of simulated time (requester stats %+v, responder %+v)", limit, s.qp[0].Stats, s.qp[1].Stats)
		}
		for i, q := range s.qp {
			for _, p := range q.Packets() {
				s.l.send(s.now, 1-i, p)
			}
			s.cqes[i] = append(s.cqes[i], q.Completions()...)
		}
		// Deliver what is due, in arrival order.
		var keep []flight
		var due []flight
		for _, f := range s.l.inflight {
			if f.at <= s.now {
				due = append(due, f)
			} else {
				keep = append(keep, f)
			}
		}
		s.l.inflight = keep
		for _, f := range due {
			var p wire.Packet
			if err := p.Decode(f.pkt); err != nil {
				s.t.Fatalf("engine sent an undecodable packet: %v", err)
			}
			s.l.delivered++
			s.qp[f.to].Receive(&p)
		}
		s.now += time.Microsecond
		for _, q := range s.qp {
			q.Tick(s.now)
		}
	}
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// TestLossyWritesAndReads moves 32 MiB of RDMA WRITEs and 32 MiB of RDMA
// READs of mixed sizes over a link that drops 1 %, duplicates 1 % and
// delays 1 % by up to 50 µs (reordering), with PSNs wrapping past 2^24: every byte arrives
// (CRC-32 compared), every WR completes successfully and in order, and
// retransmissions happened.
func TestLossyWritesAndReads(t *testing.T) {
	const region = 8 << 20
	s := newSim(t, 1, 1024, region, nil)
	s.l.drop, s.l.dup, s.l.reorder = 0.01, 0.01, 0.01
	src := make([]byte, region)
	fill(src, 42)
	fill(s.mem[1].buf, 43)
	remote := bytes.Clone(s.mem[1].buf)
	sizes := []int{1, 1023, 1024, 1025, 4096, 65536, 300000, 1 << 20}
	if testing.Short() {
		testTotal = 8 << 20 // the race detector makes the 64 MiB run take seconds
		defer func() { testTotal = 64 << 20 }()
	}
	var total, wrs int
	var wantIDs []uint64
	readBufs := map[uint64][]byte{}
	readWant := map[uint64][]byte{}
	for total < testTotal {
		n := sizes[wrs%len(sizes)]
		// WRITEs go to the lower half of the responder's region, READs
		// read the upper half: a retried READ reads memory again (as
		// rxe does), so a READ overlapping a later WRITE could see its
		// data, which RC leaves to the application (IBV_SEND_FENCE).
		off := (wrs * 7919) % (region/2 - n)
		if wrs%2 == 1 {
			off += region / 2
		}
		id := uint64(wrs)
		wr := SendWR{ID: id, Local: src[off : off+n], RemoteVA: testVA + uint64(off), RKey: testRKey}
		if wrs%2 == 0 {
			wr.Opcode = WRWrite
			copy(remote[off:], src[off:off+n])
		} else {
			wr.Opcode = WRRead
			wr.Local = make([]byte, n)
			readBufs[id] = wr.Local
			readWant[id] = bytes.Clone(remote[off : off+n])
		}
		if err := s.qp[0].PostSend(wr); err != nil {
			t.Fatal(err)
		}
		wantIDs = append(wantIDs, id)
		total += n
		wrs++
	}
	s.run(20*time.Second, func() bool { return len(s.cqes[0]) == wrs })
	for i, c := range s.cqes[0] {
		if c.Status != StatusSuccess || c.WRID != wantIDs[i] {
			t.Fatalf("completion %d: WR %d %v, want WR %d success (after %v; requester %+v; responder %+v)", i, c.WRID, c.Status, wantIDs[i], s.now, s.qp[0].Stats, s.qp[1].Stats)
		}
	}
	if crc32.ChecksumIEEE(s.mem[1].buf) != crc32.ChecksumIEEE(remote) {
		t.Error("the responder's region differs from the WRITEs' data")
	}
	for id, b := range readBufs {
		if !bytes.Equal(b, readWant[id]) {
			t.Fatalf("READ %d returned wrong data", id)
		}
	}
	st := s.qp[0].Stats
	t.Logf("%d WRs, %d MiB in %v simulated; link: %d delivered, %d dropped, %d duplicated; requester %+v; responder %+v",
		wrs, total>>20, s.now, s.l.delivered, s.l.dropped, s.l.dup2, st, s.qp[1].Stats)
	if st.Retransmits == 0 || s.l.dropped == 0 {
		t.Error("no retransmissions under 1 % loss")
	}
}

// TestReadResponseLost: one lost READ response is asked for again at once
// with one READ request for the rest of that READ, not after the retry
// timer and without resending what follows it: a second READ and a WRITE
// posted behind it go out once. Everything completes intact, with no
// timeout, well before one retry timeout.
func TestReadResponseLost(t *testing.T) {
	s := newSim(t, 3, 4096, 1<<16, nil)
	fill(s.mem[1].buf, 9)
	want := append([]byte(nil), s.mem[1].buf...)
	lost := false
	s.l.dropIf = func(p *wire.Packet) bool {
		if p.BTH.Opcode == wire.RCReadResponseMiddle && !lost && wire.PSNDiff(p.BTH.PSN, 0xfffff0) == 5 {
			lost = true
			return true
		}
		return false
	}
	readA, readB := make([]byte, 1<<16), make([]byte, 1<<16)
	s.qp[0].PostSend(SendWR{ID: 1, Opcode: WRRead, Local: readA, RemoteVA: testVA, RKey: testRKey})
	s.qp[0].PostSend(SendWR{ID: 2, Opcode: WRRead, Local: readB, RemoteVA: testVA, RKey: testRKey})
	// The WRITE stores what is already there, so that READ A's re-served
	// rest (read after it) is the same either way.
	s.qp[0].PostSend(SendWR{ID: 3, Opcode: WRWrite, Local: want[:8192], RemoteVA: testVA, RKey: testRKey})
	s.run(time.Second, func() bool { return len(s.cqes[0]) == 3 })
	for i, c := range s.cqes[0] {
		if c.Status != StatusSuccess || c.WRID != uint64(i+1) {
			t.Fatalf("completion %d: %+v", i, c)
		}
	}
	if !bytes.Equal(readA, want) || !bytes.Equal(readB, want) {
		t.Fatalf("READ data equal: A %v B %v", bytes.Equal(readA, want), bytes.Equal(readB, want))
	}
	st := s.qp[0].Stats
	if !lost || st.Timeouts != 0 || st.ReadReRequests != 1 || st.Retransmits != 1 || s.now >= RetryTimeout(8) {
		t.Errorf("dropped %v; %d timeouts, %d re-requests, %d packets resent (want 0, 1, 1); done after %v (retry timeout %v)",
			lost, st.Timeouts, st.ReadReRequests, st.Retransmits, s.now, RetryTimeout(8))
	}
}

// TestPeerGone: with every packet dropped, the first WR completes with
// IBV_WC_RETRY_EXC_ERR after retry_cnt+1 timeouts and the rest are flushed.
func TestPeerGone(t *testing.T) {
	s := newSim(t, 2, 4096, 1<<16, func(a *Attr) { a.RetryCnt = 3; a.Timeout = 6 })
	s.l.down = true
	for i := range 3 {
		s.qp[0].PostSend(SendWR{ID: uint64(i), Opcode: WRWrite, Local: make([]byte, 100), RemoteVA: testVA, RKey: testRKey})
	}
	s.run(time.Second, func() bool { return len(s.cqes[0]) == 3 })
	want := []Status{StatusRetryExcErr, StatusWRFlushErr, StatusWRFlushErr}
	for i, c := range s.cqes[0] {
		if c.Status != want[i] {
			t.Errorf("completion %d: %v, want %v", i, c.Status, want[i])
		}
	}
	if st := s.qp[0].Stats; st.Timeouts != 4 || s.qp[0].State() != StateErr {
		t.Errorf("%d timeouts (want retry_cnt+1 = 4), state %v", st.Timeouts, s.qp[0].State())
	}
	// 4 timeouts of 4.096 µs × 2^6 = 262 µs each.
	if s.now < 4*RetryTimeout(6) || s.now > 5*RetryTimeout(6) {
		t.Errorf("gave up after %v, want about %v", s.now, 4*RetryTimeout(6))
	}
}

// TestSendRNR: a SEND with no receive WR posted gets RNR NAKs until one is
// posted, then completes on both sides; with rnr_retry 2 and none posted it
// fails with IBV_WC_RNR_RETRY_EXC_ERR.
func TestSendRNR(t *testing.T) {
	s := newSim(t, 3, 1024, 1<<16, nil)
	msg := bytes.Repeat([]byte("goccl!"), 1000)
	s.qp[0].PostSend(SendWR{ID: 7, Opcode: WRSendImm, Local: msg, Imm: 0xabcd})
	s.run(time.Millisecond, func() bool { return s.qp[1].Stats.RNRNAKsSent >= 3 })
	buf := make([]byte, 8192)
	s.qp[1].PostRecv(RecvWR{ID: 9, Buf: buf})
	s.run(time.Second, func() bool { return len(s.cqes[0]) == 1 && len(s.cqes[1]) == 1 })
	if c := s.cqes[0][0]; c.Status != StatusSuccess || c.WRID != 7 {
		t.Errorf("sender: %+v", c)
	}
	if c := s.cqes[1][0]; c.Status != StatusSuccess || c.WRID != 9 || c.ByteLen != len(msg) || !c.HasImm || c.Imm != 0xabcd || !bytes.Equal(buf[:len(msg)], msg) {
		t.Errorf("receiver: %+v", c)
	}

	s = newSim(t, 4, 1024, 1<<16, func(a *Attr) { a.RNRRetry = 2 })
	s.qp[0].PostSend(SendWR{ID: 1, Opcode: WRSend, Local: msg})
	s.run(10*time.Second, func() bool { return len(s.cqes[0]) == 1 })
	if c := s.cqes[0][0]; c.Status != StatusRNRRetryExcErr || s.qp[0].Stats.RNRNAKs != 3 {
		t.Errorf("%v after %d RNR NAKs, want IBV_WC_RNR_RETRY_EXC_ERR after 3", c.Status, s.qp[0].Stats.RNRNAKs)
	}
}

// TestRemoteAccessErrors: a WRITE outside the region, with a wrong R_Key, or
// a READ of a region without remote read access completes with
// IBV_WC_REM_ACCESS_ERR and writes nothing; the QP goes to ERR.
func TestRemoteAccessErrors(t *testing.T) {
	for name, wr := range map[string]SendWR{
		"past the end":  {Opcode: WRWrite, Local: make([]byte, 100), RemoteVA: testVA + 1<<16 - 50, RKey: testRKey},
		"wrong rkey":    {Opcode: WRWrite, Local: make([]byte, 100), RemoteVA: testVA, RKey: 0x999},
		"below the VA":  {Opcode: WRRead, Local: make([]byte, 100), RemoteVA: testVA - 1, RKey: testRKey},
		"no read right": {Opcode: WRRead, Local: make([]byte, 100), RemoteVA: testVA, RKey: testRKey},
	} {
		s := newSim(t, 5, 1024, 1<<16, nil)
		if name == "no read right" {
			s.mem[1].access = AccessRemoteWrite
		}
		before := bytes.Clone(s.mem[1].buf)
		wr.Local[0] = 1
		s.qp[0].PostSend(wr)
		s.qp[0].PostSend(SendWR{ID: 99, Opcode: WRWrite, Local: []byte{1}, RemoteVA: testVA, RKey: testRKey})
		s.run(time.Second, func() bool { return len(s.cqes[0]) == 2 })
		if c := s.cqes[0]; c[0].Status != StatusRemAccessErr || c[1].Status != StatusWRFlushErr {
			t.Errorf("%s: %v, %v; want IBV_WC_REM_ACCESS_ERR then IBV_WC_WR_FLUSH_ERR", name, c[0].Status, c[1].Status)
		}
		if !bytes.Equal(before, s.mem[1].buf) || s.qp[1].State() != StateErr || s.qp[0].State() != StateErr {
			t.Errorf("%s: region changed or QPs not in ERR (%v, %v)", name, s.qp[0].State(), s.qp[1].State())
		}
	}
}

// TestAtomicsExactlyOnce: 2000 FETCH_ADDs of 1 on one word over a link that
// drops, duplicates and reorders packets: the word ends at exactly 2000
// (duplicated requests are answered from the saved result, never executed
// twice), every returned old value is distinct, and COMPARE_SWAP swaps only
// on a match.
func TestAtomicsExactlyOnce(t *testing.T) {
	s := newSim(t, 11, 1024, 4096, nil)
	s.l.drop, s.l.dup, s.l.reorder = 0.02, 0.05, 0.02
	const n = 2000
	olds := make([][]byte, n)
	for i := range n {
		olds[i] = make([]byte, 8)
		if err := s.qp[0].PostSend(SendWR{ID: uint64(i), Opcode: WRFetchAdd, Local: olds[i], RemoteVA: testVA + 64, RKey: testRKey, SwapAdd: 1}); err != nil {
			t.Fatal(err)
		}
	}
	s.run(60*time.Second, func() bool { return len(s.cqes[0]) == n })
	seen := map[uint64]bool{}
	for i, c := range s.cqes[0] {
		if c.Status != StatusSuccess || c.Opcode != CQFetchAdd {
			t.Fatalf("completion %d: %+v", i, c)
		}
		v := binary.LittleEndian.Uint64(olds[c.WRID])
		if seen[v] || v >= n {
			t.Fatalf("old value %d returned twice or out of range", v)
		}
		seen[v] = true
	}
	if got := binary.LittleEndian.Uint64(s.mem[1].buf[64:]); got != n {
		t.Fatalf("word is %d after %d FETCH_ADDs of 1", got, n)
	}
	t.Logf("requester %+v; responder duplicates %d", s.qp[0].Stats, s.qp[1].Stats.Duplicates)
	// COMPARE_SWAP: a mismatch leaves the word, a match swaps it.
	old := make([]byte, 8)
	s.qp[0].PostSend(SendWR{ID: 1, Opcode: WRCompareSwap, Local: old, RemoteVA: testVA + 64, RKey: testRKey, Compare: 5, SwapAdd: 77})
	s.qp[0].PostSend(SendWR{ID: 2, Opcode: WRCompareSwap, Local: make([]byte, 8), RemoteVA: testVA + 64, RKey: testRKey, Compare: n, SwapAdd: 77})
	s.run(70*time.Second, func() bool { return len(s.cqes[0]) == n+2 })
	if binary.LittleEndian.Uint64(old) != n || binary.LittleEndian.Uint64(s.mem[1].buf[64:]) != 77 {
		t.Fatalf("compare-swap: old %d, word %d", binary.LittleEndian.Uint64(old), binary.LittleEndian.Uint64(s.mem[1].buf[64:]))
	}
	// Misaligned or unregistered targets.
	if err := s.qp[0].PostSend(SendWR{Opcode: WRFetchAdd, Local: make([]byte, 8), RemoteVA: testVA + 3, RKey: testRKey}); err == nil {
		t.Error("misaligned atomic posted")
	}
	s.qp[0].PostSend(SendWR{ID: 9, Opcode: WRFetchAdd, Local: make([]byte, 8), RemoteVA: testVA + 8, RKey: 0x999})
	s.run(80*time.Second, func() bool { return len(s.cqes[0]) == n+3 })
	if c := s.cqes[0][n+2]; c.Status != StatusRemAccessErr {
		t.Errorf("atomic with a bad rkey: %v", c.Status)
	}
}
