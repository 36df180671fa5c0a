package qp

import (
	"encoding/binary"

	"github.com/goccl/goccl/rdma/wire"
)

// pump sends what the window, the RNR wait and max_rd_atomic allow.
func (q *QP) pump() {
	if q.State() != StateRTS || q.inRNRWait() {
		return
	}
	mtu := q.attr.PathMTU
	for q.nextIdx < len(q.sq) && wire.PSNDiff(q.nextPSN, q.unacked) < Window {
		w := q.sq[q.nextIdx]
		size := 0
		if q.cc != nil {
			if size = q.nextWireBytes(w); !q.ccMayPace(size) {
				return // Tick at NextDeadline sends it
			}
		}
		if !w.started {
			if w.wr.needsResponse() {
				if q.readsOut >= max(1, int(q.attr.MaxQPRdAtomic)) {
					return
				}
				q.readsOut++
			}
			w.started, w.firstPSN = true, q.nextPSN
		}
		psn := wire.PSNAdd(w.firstPSN, q.nextOff)
		var p wire.Packet
		p.BTH.PSN = psn
		if w.wr.isAtomic() {
			if w.readDone == 1 {
				q.nextIdx, q.nextOff = q.nextIdx+1, 0
				q.nextPSN = wire.PSNAdd(w.firstPSN, 1)
				continue
			}
			p.BTH.Opcode = wire.RCCompareSwap
			if w.wr.Opcode == WRFetchAdd {
				p.BTH.Opcode = wire.RCFetchAdd
			}
			p.Atomic = wire.AtomicETH{VA: w.wr.RemoteVA, RKey: w.wr.RKey, SwapAdd: w.wr.SwapAdd, Compare: w.wr.Compare}
			q.nextIdx, q.nextOff = q.nextIdx+1, 0
			q.nextPSN = wire.PSNAdd(w.firstPSN, 1)
		} else if w.wr.Opcode == WRRead {
			// One request for the responses still missing (none, when
			// go-back-N passes over a READ whose responses are all in).
			start := max(q.nextOff, w.readDone)
			if start >= w.npkts {
				q.nextIdx, q.nextOff = q.nextIdx+1, 0
				q.nextPSN = wire.PSNAdd(w.firstPSN, w.npkts)
				continue
			}
			psn = wire.PSNAdd(w.firstPSN, start)
			p.BTH.PSN = psn
			off := start * mtu
			p.BTH.Opcode = wire.RCReadRequest
			p.RETH = wire.RETH{VA: w.wr.RemoteVA + uint64(off), RKey: w.wr.RKey, DMALength: uint32(len(w.wr.Local) - off)}
			q.nextIdx, q.nextOff = q.nextIdx+1, 0
			q.nextPSN = wire.PSNAdd(w.firstPSN, w.npkts)
		} else {
			off := q.nextOff * mtu
			p.Payload = w.wr.Local[off:min(off+mtu, len(w.wr.Local))]
			last := q.nextOff == w.npkts-1
			p.BTH.Opcode = segmentOpcode(w.wr.Opcode, q.nextOff == 0, last)
			if q.nextOff == 0 && (w.wr.Opcode == WRWrite || w.wr.Opcode == WRWriteImm) {
				p.RETH = wire.RETH{VA: w.wr.RemoteVA, RKey: w.wr.RKey, DMALength: uint32(len(w.wr.Local))}
			}
			if last {
				p.Imm = w.wr.Imm
			}
			p.BTH.AckReq = last || (q.nextOff+1)%ackEvery == 0
			q.nextOff++
			q.nextPSN = wire.PSNAdd(psn, 1)
			if last {
				q.nextIdx, q.nextOff = q.nextIdx+1, 0
			}
		}
		if q.sentAny && wire.PSNBefore(psn, q.sentEnd) {
			q.Stats.Retransmits++
		}
		if wire.PSNBefore(q.sentEnd, q.nextPSN) || !q.sentAny {
			q.sentEnd, q.sentAny = q.nextPSN, true
		}
		if !q.timerOn {
			q.timerOn, q.lastSend = true, q.now
		}
		q.emit(p)
		if q.cc != nil {
			q.ccSent(size)
		}
	}
}

// nextWireBytes is what the next packet of w takes on the wire.
func (q *QP) nextWireBytes(w *sendWQE) int {
	switch {
	case w.wr.isAtomic():
		return wireBytes(wire.AtomicETHSize, 0)
	case w.wr.Opcode == WRRead:
		return wireBytes(wire.RETHSize, 0)
	}
	off := q.nextOff * q.attr.PathMTU
	n := min(q.attr.PathMTU, len(w.wr.Local)-off)
	if q.nextOff == 0 && (w.wr.Opcode == WRWrite || w.wr.Opcode == WRWriteImm) {
		return wireBytes(wire.RETHSize, n)
	}
	return wireBytes(0, n)
}

// reRequestRead asks again for the responses of READ w from its first
// missing one: the one READ request pump would send for [readDone, npkts),
// which the responder serves as a duplicate READ. Unlike a rewind, the send
// position stays where it is, so neither later READs, whose responses may
// still be on their way, nor later WRITEs and SENDs are sent again.
func (q *QP) reRequestRead(w *sendWQE) {
	off := w.readDone * q.attr.PathMTU
	var p wire.Packet
	p.BTH.Opcode = wire.RCReadRequest
	p.BTH.PSN = wire.PSNAdd(w.firstPSN, w.readDone)
	p.RETH = wire.RETH{VA: w.wr.RemoteVA + uint64(off), RKey: w.wr.RKey, DMALength: uint32(len(w.wr.Local) - off)}
	q.Stats.ReadReRequests++
	q.Stats.Retransmits++
	q.timerOn, q.lastSend = true, q.now
	q.emit(p)
}

// segmentOpcode is the opcode of one packet of a SEND or WRITE message.
func segmentOpcode(op WROpcode, first, last bool) wire.Opcode {
	var base wire.Opcode
	switch op {
	case WRSend, WRSendImm:
		base = wire.RCSendFirst
	default:
		base = wire.RCWriteFirst
	}
	imm := op == WRSendImm || op == WRWriteImm
	switch {
	case first && last && imm:
		return base + 5 // SEND_ONLY_IMM 0x05, WRITE_ONLY_IMM 0x0b
	case first && last:
		return base + 4
	case first:
		return base
	case last && imm:
		return base + 3
	case last:
		return base + 2
	}
	return base + 1
}

// rewind makes the next packet sent the one with PSN psn (go-back-N).
func (q *QP) rewind(psn uint32) {
	for i, w := range q.sq {
		if !w.started {
			break
		}
		if d := int(wire.PSNDiff(psn, w.firstPSN)); d >= 0 && d < w.npkts {
			if w.wr.Opcode == WRRead {
				d = w.readDone // re-request what has not arrived
			}
			if w.wr.isAtomic() {
				d = 0
			}
			q.nextIdx, q.nextOff, q.nextPSN = i, d, wire.PSNAdd(w.firstPSN, d)
			q.timerOn, q.lastSend = true, q.now
			return
		}
	}
}

// requesterReceive handles ACKs, NAKs and READ responses.
func (q *QP) requesterReceive(p *wire.Packet) {
	psn := p.BTH.PSN
	// Anything outside [unacked-1, nextSent) is stale.
	if !q.sentAny || wire.PSNDiff(psn, q.unacked) < -1 || !wire.PSNBefore(psn, q.sentEnd) {
		return
	}
	if isReadResponse(p.BTH.Opcode) {
		q.readResponse(p)
		return
	}
	if p.BTH.Opcode == wire.RCAtomicAcknowledge && p.AETH.Syndrome.IsACK() {
		q.atomicResponse(p)
		return
	}
	syn := p.AETH.Syndrome
	switch {
	case syn.IsACK():
		q.ackThrough(psn)
	case syn.IsRNRNAK():
		q.Stats.RNRNAKs++
		q.ackThrough(wire.PSNAdd(psn, -1))
		if q.State() == StateErr {
			return
		}
		if q.attr.RNRRetry != InfiniteRNRRetry {
			if q.rnrLeft == 0 {
				q.fail(StatusRNRRetryExcErr)
				return
			}
			q.rnrLeft--
		}
		q.rnrUntil = q.now + RNRDelay(syn.Value())
		q.rewind(psn)
	case syn.IsNAK():
		switch syn.Value() {
		case wire.NAKPSNSequenceError:
			q.Stats.SeqNAKs++
			q.ackThrough(wire.PSNAdd(psn, -1))
			if q.State() == StateErr {
				return
			}
			if q.retries == 0 {
				q.fail(StatusRetryExcErr)
				return
			}
			q.retries--
			if wire.PSNBefore(psn, q.nextPSN) {
				q.rewind(psn)
			}
		case wire.NAKRemoteAccessError:
			q.ackThrough(wire.PSNAdd(psn, -1))
			q.fail(StatusRemAccessErr)
		case wire.NAKRemoteOperationalErr:
			q.ackThrough(wire.PSNAdd(psn, -1))
			q.fail(StatusRemOpErr)
		default:
			q.ackThrough(wire.PSNAdd(psn, -1))
			q.fail(StatusRemInvReqErr)
		}
	}
	q.pump()
}

// readResponse stores an in-order READ response.
func (q *QP) readResponse(p *wire.Packet) {
	psn := p.BTH.PSN
	mtu := q.attr.PathMTU
	for _, w := range q.sq {
		if !w.started {
			return
		}
		d := int(wire.PSNDiff(psn, w.firstPSN))
		if d < 0 || d >= w.npkts {
			continue
		}
		if w.wr.Opcode != WRRead {
			return
		}
		switch {
		case d < w.readDone:
			return // duplicate
		case d > w.readDone:
			// A response is missing (lost, or overtaken). Ask once per
			// gap for the rest of the READ from the first missing
			// response (a requester may re-issue a READ from any of its
			// PSNs, IBTA vol. 1 §9.7.5.1.2): the rest of the first copy,
			// still arriving, is dropped here without another request,
			// and if the re-request is lost the retry timer repeats it.
			q.Stats.OutOfSequence++
			if missing := wire.PSNAdd(w.firstPSN, w.readDone); !q.readGapSet || q.readGap != missing {
				q.readGap, q.readGapSet = missing, true
				q.reRequestRead(w)
			}
			return
		}
		off := d * mtu
		want := min(mtu, len(w.wr.Local)-off)
		if len(p.Payload) != want {
			q.fail(StatusRemInvReqErr)
			return
		}
		copy(w.wr.Local[off:], p.Payload)
		w.readDone++
		if q.readGapSet && psn == q.readGap {
			q.readGapSet = false // that gap is filled
		}
		// A response acknowledges every earlier PSN, this one included;
		// so does what the responder confirmed past it while this READ
		// waited for a missing response (later READs' responses, ACKs of
		// later WRITEs), which could not complete anything then.
		ack := psn
		if done := wire.PSNAdd(q.respDone, -1); wire.PSNBefore(ack, done) {
			ack = done
		}
		q.ackThrough(ack)
		q.pump()
		return
	}
}

// ackThrough completes, in order, the WRs whose packets up to psn are
// acknowledged (a READ completes when all its responses are in) and moves
// the window.
func (q *QP) ackThrough(psn uint32) {
	if wire.PSNDiff(psn, q.unacked) < 0 {
		return // nothing new
	}
	next := wire.PSNAdd(psn, 1)
	if wire.PSNBefore(q.respDone, next) {
		// The responder moved on: the retry budget is for a lack of
		// progress, so it starts again (also while a READ at the head
		// waits for a lost response and holds unacked back).
		q.respDone = next
		q.retries, q.rnrLeft = q.attr.RetryCnt, q.attr.RNRRetry
	}
	for len(q.sq) > 0 && q.sq[0].started {
		w := q.sq[0]
		last := wire.PSNAdd(w.firstPSN, w.npkts-1)
		if wire.PSNBefore(psn, last) {
			if w.wr.needsResponse() && w.readDone < w.npkts {
				// Acknowledged up to inside this READ, its responses not all
				// in: the window stops at the first missing one.
				next = wire.PSNAdd(w.firstPSN, w.readDone)
			}
			break
		}
		if w.wr.needsResponse() && w.readDone < w.npkts {
			// A later PSN is acknowledged but this READ's responses are
			// not all in: the window stops at the first missing one, which
			// the retry timer re-requests.
			next = wire.PSNAdd(w.firstPSN, w.readDone)
			break
		}
		q.complete(CQE{WRID: w.wr.ID, Status: StatusSuccess, Opcode: sendCQOpcode(w.wr.Opcode), ByteLen: len(w.wr.Local)})
		if w.wr.needsResponse() {
			q.readsOut--
		}
		q.sq = q.sq[1:]
		q.nextIdx--
	}
	if wire.PSNDiff(next, q.unacked) > 0 {
		q.unacked = next
		q.lastSend = q.now // the retry timer runs for the oldest unacknowledged packet
		q.retries, q.rnrLeft = q.attr.RetryCnt, q.attr.RNRRetry
	}
	if q.nextIdx < 0 {
		// The WR being (re)sent was acknowledged whole: go on from the
		// next one, at its first PSN (or the first unacknowledged one if
		// it has none yet). Keeping the old nextPSN, which lay inside the
		// completed WR, gave the next WR a first PSN the responder had
		// already passed (found by TestDCQCNIncast's go-back-N under tail
		// drops).
		q.nextIdx, q.nextOff, q.nextPSN = 0, 0, q.unacked
		if len(q.sq) > 0 && q.sq[0].started {
			q.nextPSN = q.sq[0].firstPSN
		}
	}
	q.timerOn = q.sentAny && q.unacked != q.sentEnd
}

// atomicResponse stores the original value an ATOMIC ACKNOWLEDGE carries
// (little-endian: the soft device's atomics work on little-endian words, the
// host order of the platforms it runs on) and acknowledges its PSN.
func (q *QP) atomicResponse(p *wire.Packet) {
	psn := p.BTH.PSN
	for _, w := range q.sq {
		if !w.started {
			return
		}
		if w.firstPSN != psn {
			continue
		}
		if !w.wr.isAtomic() {
			return
		}
		if w.readDone == 0 {
			binary.LittleEndian.PutUint64(w.wr.Local, p.AtomicAck)
			w.readDone = 1
		}
		q.ackThrough(psn)
		q.pump()
		return
	}
}
