package qp

import (
	"bytes"
	"testing"

	"github.com/goccl/goccl/rdma/wire"
)

// guardedMemory is a registered region with guard bytes on both sides.
type guardedMemory struct {
	all []byte // guard | region | guard
	testMemory
}

const guard = 4096

func newGuarded(n int) *guardedMemory {
	g := &guardedMemory{all: bytes.Repeat([]byte{0xa5}, guard+n+guard)}
	g.buf = g.all[guard : guard+n : guard+n]
	g.access = AccessRemoteWrite | AccessRemoteRead
	return g
}

func (g *guardedMemory) guardsIntact() bool {
	for _, b := range g.all[:guard] {
		if b != 0xa5 {
			return false
		}
	}
	for _, b := range g.all[guard+len(g.buf):] {
		if b != 0xa5 {
			return false
		}
	}
	return true
}

// FuzzResponder feeds sequences of arbitrary packets to a QP in RTS with one
// registered region and a posted receive buffer: never a panic, never a
// write outside the region or the receive buffer, and every packet it sends
// back decodes.
func FuzzResponder(f *testing.F) {
	add := func(ps ...wire.Packet) {
		var b []byte
		for _, p := range ps {
			enc := p.Append(nil)
			b = append(b, byte(len(enc)>>8), byte(len(enc)))
			b = append(b, enc...)
		}
		f.Add(b)
	}
	w := wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteOnly, DestQP: 0x11, PSN: 100, AckReq: true},
		RETH: wire.RETH{VA: testVA + 10, RKey: testRKey, DMALength: 5}, Payload: []byte("hello")}
	r := wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadRequest, DestQP: 0x11, PSN: 101}, RETH: wire.RETH{VA: testVA, RKey: testRKey, DMALength: 3000}}
	s1 := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendFirst, DestQP: 0x11, PSN: 101}, Payload: make([]byte, 256)}
	s2 := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendLastImm, DestQP: 0x11, PSN: 102, AckReq: true}, Payload: []byte("tail"), Imm: 7}
	add(w)
	add(w, r)
	add(s1, s2)
	add(w, w, r, r)
	wf := wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteFirst, DestQP: 0x11, PSN: 100}, RETH: wire.RETH{VA: testVA + 4000, RKey: testRKey, DMALength: 1000}, Payload: make([]byte, 256)}
	wl := wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteLast, DestQP: 0x11, PSN: 101}, Payload: make([]byte, 256)}
	add(wf, wl)
	f.Fuzz(func(t *testing.T, stream []byte) {
		mem := newGuarded(4096)
		q := New(0x11, mem)
		for _, st := range []struct {
			a    Attr
			mask AttrMask
		}{
			{Attr{State: StateInit, Port: 1, AccessFlags: AccessRemoteWrite | AccessRemoteRead}, AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
			{Attr{State: StateRTR, PathMTU: 256, DestQPN: 0x22, RQPSN: 100, MaxDestRdAtomic: 4, MinRNRTimer: 1},
				AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer},
			{Attr{State: StateRTS, SQPSN: 500, Timeout: 8, RetryCnt: 3, RNRRetry: 3, MaxQPRdAtomic: 4},
				AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic},
		} {
			if err := q.Modify(&st.a, st.mask); err != nil {
				t.Fatal(err)
			}
		}
		rbuf := make([]byte, 300+2*guard)
		for i := range rbuf {
			rbuf[i] = 0x5a
		}
		q.PostRecv(RecvWR{ID: 1, Buf: rbuf[guard : guard+300 : guard+300]})
		// Also a WRITE of our own, so that ACKs and READ responses in the
		// stream meet a requester with something outstanding.
		local := make([]byte, 600)
		q.PostSend(SendWR{ID: 2, Opcode: WRRead, Local: local, RemoteVA: 1, RKey: 2})
		for len(stream) >= 2 {
			n := int(stream[0])<<8 | int(stream[1])
			stream = stream[2:]
			if n > len(stream) {
				n = len(stream)
			}
			var p wire.Packet
			if p.Decode(stream[:n]) == nil {
				p.BTH.DestQP = 0x11 // the fuzzer need not find the QP number
				q.Receive(&p)
			}
			stream = stream[n:]
			for _, out := range q.Packets() {
				var back wire.Packet
				if err := back.Decode(out.Append(nil)); err != nil {
					t.Fatalf("the QP sent an undecodable packet: %v", err)
				}
			}
			q.Completions()
		}
		if !mem.guardsIntact() {
			t.Fatal("a write landed outside the registered region")
		}
		for i := range guard {
			if rbuf[i] != 0x5a || rbuf[len(rbuf)-1-i] != 0x5a {
				t.Fatal("a SEND landed outside the receive buffer")
			}
		}
	})
}
