package qp

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/rdma/wire"
)

// responderReceive handles a request packet (SEND, RDMA WRITE, RDMA READ).
func (q *QP) responderReceive(p *wire.Packet) {
	psn := p.BTH.PSN
	switch d := wire.PSNDiff(psn, q.ePSN); {
	case d < 0:
		// A duplicate: the ACK was lost. READs are served again from the
		// request itself; everything else is acknowledged again.
		q.Stats.Duplicates++
		if p.BTH.Opcode == wire.RCReadRequest {
			q.serveRead(p, false)
			return
		}
		if p.BTH.Opcode == wire.RCCompareSwap || p.BTH.Opcode == wire.RCFetchAdd {
			for _, a := range q.atomics {
				if a.valid && a.psn == psn {
					q.atomicAck(psn, a.orig)
				}
			}
			return
		}
		q.ack(wire.PSNAdd(q.ePSN, -1))
		return
	case d > 0:
		// A gap: ask for the first missing packet, once per gap.
		q.Stats.OutOfSequence++
		if !q.nakSent {
			q.nakSent = true
			q.Stats.SeqNAKsSent++
			q.emit(wire.Packet{BTH: wire.BTH{Opcode: wire.RCAcknowledge, PSN: q.ePSN},
				AETH: wire.AETH{Syndrome: wire.NAK(wire.NAKPSNSequenceError), MSN: q.msn}})
		}
		return
	}
	q.nakSent = false
	op := p.BTH.Opcode
	if !q.inSequence(op) {
		q.fatal(psn, wire.NAKInvalidRequest)
		return
	}
	mtu := q.attr.PathMTU
	first := op == wire.RCSendFirst || op == wire.RCSendOnly || op == wire.RCSendOnlyImm ||
		op == wire.RCWriteFirst || op == wire.RCWriteOnly || op == wire.RCWriteOnlyImm
	last := op != wire.RCSendFirst && op != wire.RCSendMiddle && op != wire.RCWriteFirst && op != wire.RCWriteMiddle
	if !last && len(p.Payload) != mtu || len(p.Payload) > mtu {
		q.fatal(psn, wire.NAKInvalidRequest) // every packet but the last carries exactly one MTU
		return
	}
	switch op {
	case wire.RCReadRequest:
		q.serveRead(p, true)
		return
	case wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCSendLastImm, wire.RCSendOnly, wire.RCSendOnlyImm:
		if len(q.rq) == 0 {
			q.rnrNAK(psn)
			return
		}
		buf := q.rq[0].Buf
		if first {
			q.recvOff = 0
		}
		if q.recvOff+len(p.Payload) > len(buf) {
			q.complete(CQE{WRID: q.rq[0].ID, Status: StatusLocLenErr, Opcode: CQRecv, ByteLen: q.recvOff + len(p.Payload)})
			q.rq = q.rq[1:]
			q.fatal(psn, wire.NAKInvalidRequest)
			return
		}
		copy(buf[q.recvOff:], p.Payload)
		q.recvOff += len(p.Payload)
		if last {
			imm := op == wire.RCSendLastImm || op == wire.RCSendOnlyImm
			q.complete(CQE{WRID: q.rq[0].ID, Status: StatusSuccess, Opcode: CQRecv, ByteLen: q.recvOff, Imm: p.Imm, HasImm: imm})
			q.rq = q.rq[1:]
		}
	case wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast, wire.RCWriteLastImm, wire.RCWriteOnly, wire.RCWriteOnlyImm:
		imm := op == wire.RCWriteLastImm || op == wire.RCWriteOnlyImm
		if imm && len(q.rq) == 0 {
			// A WRITE with immediate consumes a receive WR.
			q.rnrNAK(psn)
			return
		}
		if first {
			mr, err := q.mem.Remote(p.RETH.RKey, p.RETH.VA, int(p.RETH.DMALength), AccessRemoteWrite)
			if err != nil || q.attr.AccessFlags&AccessRemoteWrite == 0 {
				q.fatal(psn, wire.NAKRemoteAccessError)
				return
			}
			q.curMR, q.curOff = mr, 0
		}
		if q.curOff+len(p.Payload) > len(q.curMR) {
			q.fatal(psn, wire.NAKInvalidRequest) // more data than the RETH announced
			return
		}
		if first && last && len(p.Payload) == 8 && len(q.curMR) == 8 && word(q.curMR) != nil {
			// An aligned 8-byte WRITE is single-copy atomic, as on a
			// NIC: a CPU polling the word (a signal) sees old or new.
			word(q.curMR).Store(binary.LittleEndian.Uint64(p.Payload))
		} else {
			copy(q.curMR[q.curOff:], p.Payload)
		}
		q.curOff += len(p.Payload)
		if last {
			if q.curOff != len(q.curMR) {
				q.fatal(psn, wire.NAKInvalidRequest)
				return
			}
			if imm {
				q.complete(CQE{WRID: q.rq[0].ID, Status: StatusSuccess, Opcode: CQRecvWriteImm, ByteLen: q.curOff, Imm: p.Imm, HasImm: true})
				q.rq = q.rq[1:]
			}
			q.curMR = nil
		}
	case wire.RCCompareSwap, wire.RCFetchAdd:
		q.serveAtomic(p)
		return
	default:
		q.fatal(psn, wire.NAKInvalidRequest)
		return
	}
	if last {
		q.msn = (q.msn + 1) & 0xffffff
		q.inMsg = false
	} else {
		q.cur, q.inMsg = op, true
	}
	q.ePSN = wire.PSNAdd(q.ePSN, 1)
	if p.BTH.AckReq {
		q.ack(psn)
	}
}

// inSequence checks the opcode order inside a message: after a FIRST or
// MIDDLE only a MIDDLE or LAST of the same kind may come, otherwise only the
// start of a message.
func (q *QP) inSequence(op wire.Opcode) bool {
	switch {
	case !q.inMsg:
	case q.cur == wire.RCSendFirst || q.cur == wire.RCSendMiddle:
		return op == wire.RCSendMiddle || op == wire.RCSendLast || op == wire.RCSendLastImm
	default:
		return op == wire.RCWriteMiddle || op == wire.RCWriteLast || op == wire.RCWriteLastImm
	}
	switch op {
	case wire.RCSendMiddle, wire.RCSendLast, wire.RCSendLastImm, wire.RCWriteMiddle, wire.RCWriteLast, wire.RCWriteLastImm:
		return false
	}
	return true
}

// serveRead checks a READ request and sends its responses; inOrder (a new
// request) also moves the expected PSN past them.
func (q *QP) serveRead(p *wire.Packet, inOrder bool) {
	n := int(p.RETH.DMALength)
	mr, err := q.mem.Remote(p.RETH.RKey, p.RETH.VA, n, AccessRemoteRead)
	if err != nil || q.attr.AccessFlags&AccessRemoteRead == 0 {
		if inOrder {
			q.fatal(p.BTH.PSN, wire.NAKRemoteAccessError)
		}
		return
	}
	mtu := q.attr.PathMTU
	npkts := max(1, (n+mtu-1)/mtu)
	if inOrder {
		if npkts >= 1<<23 {
			q.fatal(p.BTH.PSN, wire.NAKInvalidRequest)
			return
		}
		q.ePSN = wire.PSNAdd(q.ePSN, npkts)
		q.msn = (q.msn + 1) & 0xffffff
	}
	for i := 0; i < npkts; i++ {
		r := wire.Packet{BTH: wire.BTH{PSN: wire.PSNAdd(p.BTH.PSN, i)}, Payload: mr[i*mtu : min((i+1)*mtu, n)]}
		switch {
		case npkts == 1:
			r.BTH.Opcode = wire.RCReadResponseOnly
		case i == 0:
			r.BTH.Opcode = wire.RCReadResponseFirst
		case i == npkts-1:
			r.BTH.Opcode = wire.RCReadResponseLast
		default:
			r.BTH.Opcode = wire.RCReadResponseMiddle
		}
		r.AETH = wire.AETH{Syndrome: wire.ACK(wire.CreditsInvalid), MSN: q.msn}
		q.emit(r)
	}
}

func (q *QP) ack(psn uint32) {
	q.Stats.ACKs++
	q.emit(wire.Packet{BTH: wire.BTH{Opcode: wire.RCAcknowledge, PSN: psn},
		AETH: wire.AETH{Syndrome: wire.ACK(wire.CreditsInvalid), MSN: q.msn}})
}

func (q *QP) rnrNAK(psn uint32) {
	q.Stats.RNRNAKsSent++
	q.emit(wire.Packet{BTH: wire.BTH{Opcode: wire.RCAcknowledge, PSN: psn},
		AETH: wire.AETH{Syndrome: wire.RNRNAK(q.attr.MinRNRTimer), MSN: q.msn}})
}

// fatal NAKs psn with code and moves the QP to ERR (a responder error ends
// an RC connection).
func (q *QP) fatal(psn uint32, code uint8) {
	q.emit(wire.Packet{BTH: wire.BTH{Opcode: wire.RCAcknowledge, PSN: psn},
		AETH: wire.AETH{Syndrome: wire.NAK(code), MSN: q.msn}})
	q.Machine.state = StateErr
	q.flush()
}

// serveAtomic executes an in-order COMPARE_SWAP or FETCH_ADD on the 8
// little-endian bytes at the AtomicETH's address, saves the original value
// for a duplicate of the request, and answers with an ATOMIC ACKNOWLEDGE.
// The engine runs one packet at a time, so the operation is atomic with
// respect to every other remote access through this QP's device.
func (q *QP) serveAtomic(p *wire.Packet) {
	psn := p.BTH.PSN
	a := &p.Atomic
	if a.VA%8 != 0 {
		q.fatal(psn, wire.NAKInvalidRequest)
		return
	}
	mem, err := q.mem.Remote(a.RKey, a.VA, 8, AccessRemoteAtomic)
	if err != nil || q.attr.AccessFlags&AccessRemoteAtomic == 0 {
		q.fatal(psn, wire.NAKRemoteAccessError)
		return
	}
	orig := atomicRMW(mem, p.BTH.Opcode == wire.RCFetchAdd, a.SwapAdd, a.Compare)
	q.atomics[q.nextAtomic] = savedAtomic{valid: true, psn: psn, orig: orig}
	q.nextAtomic = (q.nextAtomic + 1) % len(q.atomics)
	q.ePSN = wire.PSNAdd(q.ePSN, 1)
	q.msn = (q.msn + 1) & 0xffffff
	q.atomicAck(psn, orig)
}

func (q *QP) atomicAck(psn uint32, orig uint64) {
	q.emit(wire.Packet{BTH: wire.BTH{Opcode: wire.RCAtomicAcknowledge, PSN: psn},
		AETH: wire.AETH{Syndrome: wire.ACK(wire.CreditsInvalid), MSN: q.msn}, AtomicAck: orig})
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// word returns b (8 bytes) as an atomic word when it is 8-byte aligned in
// this process's memory on a little-endian machine, else nil.
func word(b []byte) *atomic.Uint64 {
	if !littleEndian || uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		return nil
	}
	return (*atomic.Uint64)(unsafe.Pointer(&b[0]))
}

// atomicRMW applies FETCH_ADD (add) or COMPARE_SWAP to the little-endian
// word b and returns its original value. On aligned memory it is a CPU
// atomic (this machine is little-endian, as the wire's atomics are here), so
// the operation is atomic also against the owner's own atomic operations
// on the word (a process mixing local and remote signals); unaligned
// memory (only a test's fake) is updated plainly.
func atomicRMW(b []byte, add bool, swapAdd, compare uint64) uint64 {
	if w := word(b); w != nil {
		if add {
			return w.Add(swapAdd) - swapAdd
		}
		for {
			orig := w.Load()
			if orig != compare || w.CompareAndSwap(orig, swapAdd) {
				return orig
			}
		}
	}
	orig := binary.LittleEndian.Uint64(b)
	if add {
		binary.LittleEndian.PutUint64(b, orig+swapAdd)
	} else if orig == compare {
		binary.LittleEndian.PutUint64(b, swapAdd)
	}
	return orig
}
