package rdma

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl/rdma/qp"
)

type side struct {
	d      *Device
	pd     *PD
	cq     *CQ
	qp     *QP
	mr     *MR
	buf    []byte
	psn    uint32
	cancel func()
}

func newSide(t *testing.T, size int) *side {
	t.Helper()
	d, err := Open("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return newSideOn(t, d, size)
}

// newSideOn sets up a PD, CQ, QP and a registered buffer on d (closed at
// the test's end).
func newSideOn(t *testing.T, d *Device, size int) *side {
	t.Helper()
	var err error
	t.Cleanup(func() { d.Close() })
	s := &side{d: d, pd: d.AllocPD(), cq: d.CreateCQ(), buf: make([]byte, size)}
	if s.mr, err = s.pd.RegMR(s.buf, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	if s.qp, err = s.pd.CreateQP(s.cq, s.cq); err != nil {
		t.Fatal(err)
	}
	s.psn = rand.Uint32() & 0xffffff
	return s
}

// connect does what the rdma_cm exchange would: each QP learns the other's
// QPN, PSN, GID and port, then goes INIT, RTR, RTS.
func connect(t *testing.T, a, b *side, timeout, retry uint8) {
	t.Helper()
	for _, p := range [][2]*side{{a, b}, {b, a}} {
		me, peer := p[0], p[1]
		steps := []struct {
			attr qp.Attr
			mask qp.AttrMask
		}{
			{qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: AccessRemoteWrite | AccessRemoteRead}, qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags},
			{qp.Attr{State: qp.StateRTR, PathMTU: me.d.ActiveMTU(), DestQPN: peer.qp.QPN(), RQPSN: peer.psn, MaxDestRdAtomic: 16, MinRNRTimer: 1,
				AV: qp.AddressVector{DGID: peer.d.GID(), DPort: peer.d.Addr().Port()}},
				qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer},
			{qp.Attr{State: qp.StateRTS, SQPSN: me.psn, Timeout: timeout, RetryCnt: retry, RNRRetry: 7, MaxQPRdAtomic: 16},
				qp.AttrState | qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic},
		}
		for _, st := range steps {
			if err := me.qp.Modify(&st.attr, st.mask); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// writeReadSend is the verbs sequence the device tests share: size bytes of
// RDMA WRITE from a to b, an RDMA READ of them back into a's buffer after
// the first size bytes, then a SEND with immediate of msg into a receive b
// posted; all data compared. a's buffer holds 2*size bytes, b's size.
func writeReadSend(t *testing.T, a, b *side, size int, msg string) {
	t.Helper()
	for i := range a.buf[:size] {
		a.buf[i] = byte(i*13 + i>>11)
	}
	if err := a.qp.PostSend(SendWR{ID: 1, Opcode: qp.WRWrite, MR: a.mr, Length: size, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(SendWR{ID: 2, Opcode: qp.WRRead, MR: a.mr, Offset: size, Length: size, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	for _, wc := range waitWC(t, a.cq, 2) {
		if wc.Status != qp.StatusSuccess {
			t.Fatalf("WR %d: %v; requester %+v; device A %+v; device B %+v", wc.WRID, wc.Status, a.qp.Stats(), a.d.Stats(), b.d.Stats())
		}
	}
	quiesce(b.d)
	if !bytes.Equal(b.buf[:size], a.buf[:size]) || !bytes.Equal(a.buf[size:2*size], a.buf[:size]) {
		t.Fatal("WRITE or READ data differs")
	}
	if err := b.qp.PostRecv(RecvWR{ID: 9, MR: b.mr, Length: 100}); err != nil {
		t.Fatal(err)
	}
	copy(a.buf, msg)
	if err := a.qp.PostSend(SendWR{ID: 3, Opcode: qp.WRSendImm, MR: a.mr, Length: len(msg), Imm: 42}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, b.cq, 1)[0]; wc.Status != qp.StatusSuccess || wc.ByteLen != len(msg) || wc.Imm != 42 || string(b.buf[:len(msg)]) != msg {
		t.Fatalf("SEND with immediate: %+v %q", wc, b.buf[:len(msg)])
	}
	waitWC(t, a.cq, 1)
}

// quiesce orders everything d's goroutines wrote so far before the caller's
// next reads (they write registered memory under the device lock). A real
// program learns of remote writes from a completion instead: a receive
// completion for a SEND or a WRITE with immediate.
func quiesce(d *Device) {
	d.mu.Lock()
	d.mu.Unlock()
}

func waitWC(t *testing.T, cq *CQ, n int) []WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var all []WC
	for len(all) < n {
		wcs, err := cq.Wait(ctx, n-len(all))
		if err != nil {
			t.Fatalf("%d of %d completions: %v", len(all), n, err)
		}
		all = append(all, wcs...)
	}
	return all
}

// TestWriteReadSendOverUDP: two soft devices on loopback; 8 MiB RDMA WRITE,
// RDMA READ back into another buffer, SEND with immediate; all data checked.
func TestWriteReadSendOverUDP(t *testing.T) {
	const size = 8 << 20
	a, b := newSide(t, 2*size), newSide(t, size)
	connect(t, a, b, 14, 7)
	writeReadSend(t, a, b, size, "hello, soft RoCE")
	// On Linux the WRITE left in UDP_SEGMENT runs and arrived in UDP_GRO
	// runs (loopback never splits them), so both paths carried the data.
	a.d.mu.Lock()
	runs := a.d.lk.(*udpLink).runsSent
	a.d.mu.Unlock()
	if runtime.GOOS == "linux" && runs == 0 {
		t.Error("no UDP_SEGMENT run was sent on loopback")
	}
	st := a.d.Stats()
	t.Logf("device A: %+v; QP A: %+v", st, a.qp.Stats())
	if st.ICRCErrors != 0 || b.d.Stats().ICRCErrors != 0 {
		t.Error("ICRC errors on loopback")
	}
}

// TestPeerGoneUDP: with the peer device closed, a WRITE completes with
// IBV_WC_RETRY_EXC_ERR after retry_cnt timeouts (timeout 12: 16.8 ms each),
// never hangs.
func TestPeerGoneUDP(t *testing.T) {
	a, b := newSide(t, 4096), newSide(t, 4096)
	connect(t, a, b, 12, 2)
	b.d.Close()
	start := time.Now()
	if err := a.qp.PostSend(SendWR{ID: 1, Opcode: qp.WRWrite, MR: a.mr, Length: 100, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	wc := waitWC(t, a.cq, 1)[0]
	if wc.Status != qp.StatusRetryExcErr || a.qp.State() != qp.StateErr {
		t.Fatalf("%v, state %v; want IBV_WC_RETRY_EXC_ERR and ERR", wc.Status, a.qp.State())
	}
	if st := a.qp.Stats(); st.Timeouts != 3 {
		t.Errorf("%d timeouts, want retry_cnt+1 = 3", st.Timeouts)
	}
	t.Logf("gave up after %v", time.Since(start))
}

// TestCorruptPacketsDropped: datagrams with a bad ICRC or garbage are
// dropped and counted, and the device keeps working.
func TestCorruptPacketsDropped(t *testing.T) {
	a, b := newSide(t, 4096), newSide(t, 4096)
	connect(t, a, b, 14, 7)
	c, err := net.Dial("udp", b.d.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("garbage"))
	c.Write(make([]byte, 64))
	deadline := time.Now().Add(5 * time.Second)
	for b.d.Stats().ICRCErrors+b.d.Stats().Malformed < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st := b.d.Stats(); st.ICRCErrors+st.Malformed != 2 {
		t.Errorf("stats %+v, want 2 dropped", st)
	}
	if err := a.qp.PostSend(SendWR{ID: 1, Opcode: qp.WRWrite, MR: a.mr, Length: 10, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.cq, 1)[0]; wc.Status != qp.StatusSuccess {
		t.Fatal(wc.Status)
	}
}

func TestVerbsErrors(t *testing.T) {
	a := newSide(t, 4096)
	other := a.d.AllocPD()
	omr, _ := other.RegMR(make([]byte, 10), AccessLocalWrite)
	if _, err := a.pd.RegMR(nil, 0); err == nil {
		t.Error("empty MR registered")
	}
	if _, err := a.pd.RegMR(make([]byte, 1), AccessRemoteWrite); err == nil {
		t.Error("remote write without local write registered")
	}
	for name, wr := range map[string]SendWR{
		"other pd":   {MR: omr, Length: 1},
		"past end":   {MR: a.mr, Offset: 4000, Length: 100},
		"negative":   {MR: a.mr, Offset: -1, Length: 1},
		"not in RTS": {MR: a.mr, Length: 1},
	} {
		if err := a.qp.PostSend(wr); err == nil {
			t.Errorf("%s: posted", name)
		}
	}
}

// TestAtomicsOverUDP: FETCH_ADD and COMPARE_SWAP on a word of the peer's
// region (registered with remote atomic access).
func TestAtomicsOverUDP(t *testing.T) {
	a, b := newSide(t, 4096), newSide(t, 4096)
	amr, err := b.pd.RegMR(make([]byte, 64), AccessLocalWrite|AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	connectAll(t, a, b)
	for i := 0; i < 10; i++ {
		if err := a.qp.PostSend(SendWR{ID: uint64(i), Opcode: qp.WRFetchAdd, MR: a.mr, Offset: 8 * i, Length: 8, RemoteAddr: amr.Addr() + 8, RKey: amr.RKey(), SwapAdd: 3}); err != nil {
			t.Fatal(err)
		}
	}
	a.qp.PostSend(SendWR{ID: 10, Opcode: qp.WRCompareSwap, MR: a.mr, Offset: 80, Length: 8, RemoteAddr: amr.Addr() + 8, RKey: amr.RKey(), Compare: 30, SwapAdd: 1})
	for _, wc := range waitWC(t, a.cq, 11) {
		if wc.Status != qp.StatusSuccess {
			t.Fatalf("WR %d: %v", wc.WRID, wc.Status)
		}
	}
	for i := 0; i <= 10; i++ {
		if got := binary.LittleEndian.Uint64(a.buf[8*i:]); got != uint64(3*i) {
			t.Errorf("old value of atomic %d: %d, want %d", i, got, 3*i)
		}
	}
	quiesce(b.d)
	if got := binary.LittleEndian.Uint64(amr.Bytes()[8:]); got != 1 {
		t.Errorf("word is %d, want 1 (swapped after 10 adds of 3)", got)
	}
}

// TestForeignSource: a connected QP takes packets from its peer only: a
// third device that aims a WRITE at it (its QP number and PSN right) is
// ignored, counted as ForeignSource, and nothing lands in the buffer.
func TestForeignSource(t *testing.T) {
	a, b, c := newSide(t, 4096), newSide(t, 4096), newSide(t, 4096)
	connect(t, a, b, 10, 1)
	// c's QP believes it is a: b's QPN and PSN as its peer.
	c.psn = a.psn
	for _, st := range []struct {
		attr qp.Attr
		mask qp.AttrMask
	}{
		{qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: AccessRemoteWrite}, qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags},
		{qp.Attr{State: qp.StateRTR, PathMTU: 1024, DestQPN: b.qp.QPN(), RQPSN: b.psn, MaxDestRdAtomic: 1, MinRNRTimer: 1,
			AV: qp.AddressVector{DGID: b.d.GID(), DPort: b.d.Addr().Port()}},
			qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer},
		{qp.Attr{State: qp.StateRTS, SQPSN: c.psn, Timeout: 10, RetryCnt: 1, RNRRetry: 0, MaxQPRdAtomic: 1},
			qp.AttrState | qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic},
	} {
		if err := c.qp.Modify(&st.attr, st.mask); err != nil {
			t.Fatal(err)
		}
	}
	copy(c.buf, "intruder")
	if err := c.qp.PostSend(SendWR{ID: 1, Opcode: qp.WRWrite, MR: c.mr, Length: 8, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs, err := c.cq.Wait(ctx, 1)
	if err != nil || wcs[0].Status != qp.StatusRetryExcErr {
		t.Fatalf("the intruder's WRITE: %v %+v", err, wcs)
	}
	// b's receive loop counts the intruder's packets when it gets to them,
	// which under load can be after the intruder gave up.
	for deadline := time.Now().Add(10 * time.Second); b.d.Stats().ForeignSource == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: nothing counted as from a foreign source", b.d.Stats())
		}
	}
	if string(b.buf[:8]) == "intruder" {
		t.Fatal("the intruder's WRITE landed")
	}
}

// connectAll connects a's and b's QPs with remote write, read and atomic
// access (rdma_cm's way: QP.Connect).
func connectAll(t *testing.T, a, b *side) {
	t.Helper()
	o := ConnectOptions{Access: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic}
	ai, bi := a.qp.LocalInfo(nil), b.qp.LocalInfo(nil)
	if err := a.qp.Connect(ai, bi, o); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(bi, ai, o); err != nil {
		t.Fatal(err)
	}
}

// TestAtomicsAgainstCPU: remote FETCH_ADDs and aligned 8-byte WRITEs into a
// word the owner itself adds to and polls with CPU atomics lose no update
// and are never torn (under -race: no race either), and the region's
// Notify channel announces remote writes.
func TestAtomicsAgainstCPU(t *testing.T) {
	a, b := newSide(t, 4096), newSide(t, 64)
	words := make([]uint64, 4) // 8-byte aligned
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 32)
	wmr, err := b.pd.RegMR(mem, AccessLocalWrite|AccessRemoteAtomic|AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	notify := wmr.Notify()
	connectAll(t, a, b)
	const remote, local = 500, 5000
	done := make(chan struct{})
	go func() { // the owner adds to word 0 while the peer does
		defer close(done)
		for i := 0; i < local; i++ {
			atomic.AddUint64(&words[0], 1<<32)
		}
	}()
	for i := 0; i < remote; i++ {
		if err := a.qp.PostSend(SendWR{ID: uint64(i), Opcode: qp.WRFetchAdd, MR: a.mr, Offset: 8 * (i % 64), Length: 8,
			RemoteAddr: wmr.Addr(), RKey: wmr.RKey(), SwapAdd: 1}); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 {
			waitWC(t, a.cq, 50)
		}
	}
	<-done
	if got := atomic.LoadUint64(&words[0]); got != local<<32|remote {
		t.Fatalf("word 0 is %#x, want %#x: an update was lost", got, uint64(local<<32|remote))
	}
	select {
	case <-notify:
	case <-time.After(5 * time.Second):
		t.Fatal("no notice of the remote atomics")
	}
	// Aligned 8-byte WRITEs of all-ones and all-zeros patterns: the owner's
	// atomic loads see one or the other, never a mix.
	pats := [2]uint64{0, ^uint64(0)}
	stop := make(chan struct{})
	torn := make(chan uint64, 1)
	go func() {
		for {
			select {
			case <-stop:
				close(torn)
				return
			default:
			}
			if v := atomic.LoadUint64(&words[1]); v != pats[0] && v != pats[1] {
				torn <- v
				return
			}
		}
	}()
	for i := 0; i < 200; i++ {
		binary.LittleEndian.PutUint64(a.buf[8*(i%64):], pats[i%2])
		if err := a.qp.PostSend(SendWR{ID: uint64(i), Opcode: qp.WRWrite, MR: a.mr, Offset: 8 * (i % 64), Length: 8,
			RemoteAddr: wmr.Addr() + 8, RKey: wmr.RKey()}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, a.cq, 1)
	}
	close(stop)
	if v, ok := <-torn; ok {
		t.Fatalf("torn word %#x", v)
	}
	if got := atomic.LoadUint64(&words[1]); got != pats[1] {
		t.Fatalf("last WRITE left %#x", got)
	}
	runtime.KeepAlive(words)
}
