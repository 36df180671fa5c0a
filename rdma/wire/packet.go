package wire

import (
	"encoding/binary"
	"fmt"
)

// Syndrome is an AETH syndrome (IBTA vol. 1 §9.7.5.2.1, table 42): bits 6..5
// say ACK (00), RNR NAK (01) or NAK (11); bits 4..0 carry the credit count,
// the RNR timer or the NAK code.
type Syndrome uint8

// NAK codes (the low 5 bits of a NAK syndrome).
const (
	NAKPSNSequenceError     = 0
	NAKInvalidRequest       = 1
	NAKRemoteAccessError    = 2
	NAKRemoteOperationalErr = 3
	NAKInvalidRDRequest     = 4
)

const (
	syndromeKindMask = 0x60
	syndromeACK      = 0x00
	syndromeRNR      = 0x20
	syndromeNAK      = 0x60
	syndromeValue    = 0x1f
	// CreditsInvalid is the credit count of an ACK that carries no credits
	// (end-to-end flow control not used).
	CreditsInvalid = 0x1f
)

// ACK is the syndrome of a positive acknowledgement with a credit count
// (0..30, or CreditsInvalid).
func ACK(credits uint8) Syndrome { return Syndrome(syndromeACK | credits&syndromeValue) }

// RNRNAK is the syndrome of a receiver-not-ready NAK with its timer code
// (0..31, IBTA table 45: 0 means 655.36 ms, 1 means 0.01 ms, ...).
func RNRNAK(timer uint8) Syndrome { return Syndrome(syndromeRNR | timer&syndromeValue) }

// NAK is the syndrome of a negative acknowledgement with a NAK code.
func NAK(code uint8) Syndrome { return Syndrome(syndromeNAK | code&syndromeValue) }

// IsACK, IsRNRNAK and IsNAK say which kind of syndrome s is.
func (s Syndrome) IsACK() bool    { return s&syndromeKindMask == syndromeACK }
func (s Syndrome) IsRNRNAK() bool { return s&syndromeKindMask == syndromeRNR }
func (s Syndrome) IsNAK() bool    { return s&syndromeKindMask == syndromeNAK }

// Value is the credit count, RNR timer or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & syndromeValue }

func (s Syndrome) String() string {
	switch {
	case s.IsACK():
		return fmt.Sprintf("ACK credits %d", s.Value())
	case s.IsRNRNAK():
		return fmt.Sprintf("RNR NAK timer %d", s.Value())
	case s.IsNAK():
		names := []string{"PSN sequence error", "invalid request", "remote access error", "remote operational error", "invalid RD request"}
		if int(s.Value()) < len(names) {
			return "NAK " + names[s.Value()]
		}
		return fmt.Sprintf("NAK code %d", s.Value())
	}
	return fmt.Sprintf("reserved syndrome 0x%02x", uint8(s))
}

// Packet is an IBA transport packet: the BTH, the extended headers its
// opcode calls for, and the payload (pad and ICRC excluded).
type Packet struct {
	BTH       BTH
	Headers   uint16 // the extended headers present (HasRETH, ...)
	RETH      RETH
	AETH      AETH
	Imm       uint32 // ImmDt
	InvRKey   uint32 // IETH: the R_Key to invalidate
	Atomic    AtomicETH
	AtomicAck uint64 // AtomicAckETH: the original remote data
	DETH      DETH
	Payload   []byte // aliases the decoded buffer
}

// Decode parses b, from the BTH to the end of the pad (the ICRC removed).
// Payload aliases b.
func (p *Packet) Decode(b []byte) error {
	if err := p.BTH.Decode(b); err != nil {
		return err
	}
	hdrs, ok := p.BTH.Opcode.Headers()
	if !ok {
		return fmt.Errorf("wire: unknown opcode 0x%02x", uint8(p.BTH.Opcode))
	}
	p.Headers = hdrs
	off := BTHSize
	need := func(n int, what string) error {
		if len(b)-off < n {
			return fmt.Errorf("wire: %v: %s needs %d bytes at offset %d, packet has %d", p.BTH.Opcode, what, n, off, len(b))
		}
		return nil
	}
	if hdrs&HasDETH != 0 {
		if err := need(DETHSize, "DETH"); err != nil {
			return err
		}
		p.DETH.decode(b[off:])
		off += DETHSize
	}
	if hdrs&HasRETH != 0 {
		if err := need(RETHSize, "RETH"); err != nil {
			return err
		}
		p.RETH.decode(b[off:])
		off += RETHSize
	}
	if hdrs&HasAtomicETH != 0 {
		if err := need(AtomicETHSize, "AtomicETH"); err != nil {
			return err
		}
		p.Atomic.decode(b[off:])
		off += AtomicETHSize
	}
	if hdrs&HasAETH != 0 {
		if err := need(AETHSize, "AETH"); err != nil {
			return err
		}
		p.AETH.decode(b[off:])
		off += AETHSize
	}
	if hdrs&HasAtomicAckETH != 0 {
		if err := need(AtomicAckETHSize, "AtomicAckETH"); err != nil {
			return err
		}
		p.AtomicAck = binary.BigEndian.Uint64(b[off:])
		off += AtomicAckETHSize
	}
	if hdrs&HasImmDt != 0 {
		if err := need(ImmDtSize, "ImmDt"); err != nil {
			return err
		}
		p.Imm = binary.BigEndian.Uint32(b[off:])
		off += ImmDtSize
	}
	if hdrs&HasIETH != 0 {
		if err := need(IETHSize, "IETH"); err != nil {
			return err
		}
		p.InvRKey = binary.BigEndian.Uint32(b[off:])
		off += IETHSize
	}
	rest := b[off:]
	switch {
	case hdrs&isCNP != 0:
		if len(rest) != CNPPayloadSize || p.BTH.PadCount != 0 {
			return fmt.Errorf("wire: CNP carries %d bytes after the BTH (pad count %d), want %d and no pad", len(rest), p.BTH.PadCount, CNPPayloadSize)
		}
		p.Payload = rest[:0]
		return nil
	case hdrs&hasPayload == 0:
		if len(rest) != 0 || p.BTH.PadCount != 0 {
			return fmt.Errorf("wire: %v carries no payload, packet has %d extra bytes (pad count %d)", p.BTH.Opcode, len(rest), p.BTH.PadCount)
		}
		p.Payload = rest
		return nil
	}
	pad := int(p.BTH.PadCount)
	if pad > len(rest) {
		return fmt.Errorf("wire: pad count %d exceeds the %d bytes after the headers", pad, len(rest))
	}
	if (len(rest))%4 != 0 {
		return fmt.Errorf("wire: payload and pad are %d bytes, not a multiple of 4", len(rest))
	}
	p.Payload = rest[:len(rest)-pad]
	return nil
}

var zeros [CNPPayloadSize]byte

// PadFor is the pad count that brings a payload of n bytes to a multiple
// of 4.
func PadFor(n int) uint8 { return uint8(-n & 3) }

// Len is the encoded length of p (BTH to pad), with the pad count p.Append
// sets.
func (p *Packet) Len() int {
	hdrs, _ := p.BTH.Opcode.Headers()
	n := BTHSize
	for _, h := range [...]struct {
		bit  uint16
		size int
	}{{HasDETH, DETHSize}, {HasRETH, RETHSize}, {HasAtomicETH, AtomicETHSize}, {HasAETH, AETHSize},
		{HasAtomicAckETH, AtomicAckETHSize}, {HasImmDt, ImmDtSize}, {HasIETH, IETHSize}} {
		if hdrs&h.bit != 0 {
			n += h.size
		}
	}
	if hdrs&isCNP != 0 {
		return n + CNPPayloadSize
	}
	return n + len(p.Payload) + int(PadFor(len(p.Payload)))
}

// Append encodes p (BTH to pad; the pad count is set from the payload
// length) and appends it to b. The extended headers are those of the opcode;
// p.Headers is ignored.
func (p *Packet) Append(b []byte) []byte {
	hdrs, _ := p.BTH.Opcode.Headers()
	bth := p.BTH
	bth.PadCount = 0
	if hdrs&hasPayload != 0 {
		bth.PadCount = PadFor(len(p.Payload))
	}
	b = bth.Append(b)
	if hdrs&HasDETH != 0 {
		b = p.DETH.Append(b)
	}
	if hdrs&HasRETH != 0 {
		b = p.RETH.Append(b)
	}
	if hdrs&HasAtomicETH != 0 {
		b = p.Atomic.Append(b)
	}
	if hdrs&HasAETH != 0 {
		b = p.AETH.Append(b)
	}
	if hdrs&HasAtomicAckETH != 0 {
		b = binary.BigEndian.AppendUint64(b, p.AtomicAck)
	}
	if hdrs&HasImmDt != 0 {
		b = binary.BigEndian.AppendUint32(b, p.Imm)
	}
	if hdrs&HasIETH != 0 {
		b = binary.BigEndian.AppendUint32(b, p.InvRKey)
	}
	if hdrs&isCNP != 0 {
		return append(b, zeros[:CNPPayloadSize]...)
	}
	if hdrs&hasPayload != 0 {
		b = append(b, p.Payload...)
		b = append(b, zeros[:bth.PadCount]...)
	}
	return b
}
