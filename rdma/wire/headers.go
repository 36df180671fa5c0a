package wire

import (
	"encoding/binary"
	"fmt"
)

// Header sizes in bytes.
const (
	BTHSize          = 12
	RETHSize         = 16
	AETHSize         = 4
	ImmDtSize        = 4
	IETHSize         = 4
	AtomicETHSize    = 28
	AtomicAckETHSize = 8
	DETHSize         = 8
	GRHSize          = 40
	ICRCSize         = 4
	CNPPayloadSize   = 16 // reserved bytes after a CNP's BTH (annex A17.9.2)
)

// PSNMask keeps the 24 bits of a packet sequence number; QPNMask those of a
// queue pair number.
const (
	PSNMask = 1<<24 - 1
	QPNMask = 1<<24 - 1
)

// BTH is the base transport header (IBTA vol. 1 §9.2).
type BTH struct {
	Opcode   Opcode
	SE       bool   // solicited event
	MigReq   bool   // migration state
	PadCount uint8  // 0..3 bytes of pad after the payload
	TVer     uint8  // transport header version, 0
	PKey     uint16 // partition key (0xffff: default partition)
	FECN     bool   // forward explicit congestion notification
	BECN     bool   // backward explicit congestion notification
	DestQP   uint32 // destination queue pair number, 24 bits
	AckReq   bool   // the responder must acknowledge this packet
	PSN      uint32 // packet sequence number, 24 bits
}

// Decode reads a BTH from b (at least BTHSize bytes).
func (h *BTH) Decode(b []byte) error {
	if len(b) < BTHSize {
		return fmt.Errorf("wire: BTH needs %d bytes, have %d", BTHSize, len(b))
	}
	h.Opcode = Opcode(b[0])
	h.SE = b[1]&0x80 != 0
	h.MigReq = b[1]&0x40 != 0
	h.PadCount = b[1] >> 4 & 3
	h.TVer = b[1] & 0x0f
	h.PKey = binary.BigEndian.Uint16(b[2:])
	h.FECN = b[4]&0x80 != 0
	h.BECN = b[4]&0x40 != 0
	h.DestQP = binary.BigEndian.Uint32(b[4:]) & QPNMask
	h.AckReq = b[8]&0x80 != 0
	h.PSN = binary.BigEndian.Uint32(b[8:]) & PSNMask
	return nil
}

// Append appends the encoded BTH to b.
func (h *BTH) Append(b []byte) []byte {
	var f1, f4, f8 byte
	if h.SE {
		f1 |= 0x80
	}
	if h.MigReq {
		f1 |= 0x40
	}
	f1 |= (h.PadCount & 3) << 4
	f1 |= h.TVer & 0x0f
	if h.FECN {
		f4 |= 0x80
	}
	if h.BECN {
		f4 |= 0x40
	}
	if h.AckReq {
		f8 |= 0x80
	}
	b = append(b, byte(h.Opcode), f1)
	b = binary.BigEndian.AppendUint16(b, h.PKey)
	b = binary.BigEndian.AppendUint32(b, uint32(f4)<<24|h.DestQP&QPNMask)
	return binary.BigEndian.AppendUint32(b, uint32(f8)<<24|h.PSN&PSNMask)
}

// RETH is the RDMA extended transport header: the remote buffer of an RDMA
// WRITE or READ (§9.3.3).
type RETH struct {
	VA        uint64 // remote virtual address
	RKey      uint32
	DMALength uint32 // bytes of the whole operation
}

func (h *RETH) decode(b []byte) {
	h.VA = binary.BigEndian.Uint64(b)
	h.RKey = binary.BigEndian.Uint32(b[8:])
	h.DMALength = binary.BigEndian.Uint32(b[12:])
}

// Append appends the encoded RETH to b.
func (h *RETH) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, h.VA)
	b = binary.BigEndian.AppendUint32(b, h.RKey)
	return binary.BigEndian.AppendUint32(b, h.DMALength)
}

// AETH is the ACK extended transport header (§9.3.5): a syndrome and the
// responder's message sequence number.
type AETH struct {
	Syndrome Syndrome
	MSN      uint32 // 24 bits
}

func (h *AETH) decode(b []byte) {
	h.Syndrome = Syndrome(b[0])
	h.MSN = binary.BigEndian.Uint32(b) & 0xffffff
}

// Append appends the encoded AETH to b.
func (h *AETH) Append(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, uint32(h.Syndrome)<<24|h.MSN&0xffffff)
}

// AtomicETH is the atomic extended transport header (§9.3.4).
type AtomicETH struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64 // swap value (COMPARE_SWAP) or addend (FETCH_ADD)
	Compare uint64 // compare value (COMPARE_SWAP)
}

func (h *AtomicETH) decode(b []byte) {
	h.VA = binary.BigEndian.Uint64(b)
	h.RKey = binary.BigEndian.Uint32(b[8:])
	h.SwapAdd = binary.BigEndian.Uint64(b[12:])
	h.Compare = binary.BigEndian.Uint64(b[20:])
}

// Append appends the encoded AtomicETH to b.
func (h *AtomicETH) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, h.VA)
	b = binary.BigEndian.AppendUint32(b, h.RKey)
	b = binary.BigEndian.AppendUint64(b, h.SwapAdd)
	return binary.BigEndian.AppendUint64(b, h.Compare)
}

// DETH is the datagram extended transport header (§9.3.2), UD only.
type DETH struct {
	QKey  uint32
	SrcQP uint32 // 24 bits
}

func (h *DETH) decode(b []byte) {
	h.QKey = binary.BigEndian.Uint32(b)
	h.SrcQP = binary.BigEndian.Uint32(b[4:]) & QPNMask
}

// Append appends the encoded DETH to b.
func (h *DETH) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, h.QKey)
	return binary.BigEndian.AppendUint32(b, h.SrcQP&QPNMask)
}

// GRH is the global route header of RoCE v1 (§8.3; the layout of an IPv6
// header, next header 0x1b for the BTH).
type GRH struct {
	IPVer      uint8 // 6
	TClass     uint8
	FlowLabel  uint32 // 20 bits
	PayLen     uint16 // bytes after the GRH, ICRC included
	NextHeader uint8  // 0x1b: BTH
	HopLimit   uint8
	SGID, DGID [16]byte
}

// NextHeaderBTH is the GRH next-header value of an IBA transport header.
const NextHeaderBTH = 0x1b

// Decode reads a GRH from b (at least GRHSize bytes).
func (h *GRH) Decode(b []byte) error {
	if len(b) < GRHSize {
		return fmt.Errorf("wire: GRH needs %d bytes, have %d", GRHSize, len(b))
	}
	w := binary.BigEndian.Uint32(b)
	h.IPVer = uint8(w >> 28)
	h.TClass = uint8(w >> 20)
	h.FlowLabel = w & 0xfffff
	h.PayLen = binary.BigEndian.Uint16(b[4:])
	h.NextHeader = b[6]
	h.HopLimit = b[7]
	copy(h.SGID[:], b[8:24])
	copy(h.DGID[:], b[24:40])
	return nil
}

// Append appends the encoded GRH to b.
func (h *GRH) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(h.IPVer&0xf)<<28|uint32(h.TClass)<<20|h.FlowLabel&0xfffff)
	b = binary.BigEndian.AppendUint16(b, h.PayLen)
	b = append(b, h.NextHeader, h.HopLimit)
	b = append(b, h.SGID[:]...)
	return append(b, h.DGID[:]...)
}
