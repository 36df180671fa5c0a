// Package wire encodes and decodes the InfiniBand transport headers that
// RoCE carries (IBTA InfiniBand Architecture Specification vol. 1, chapter 9
// "Transport layer"; annex A16 RoCE, annex A17 RoCE v2) and computes the
// invariant CRC (ICRC) that ends every packet. It is pure code: bytes in,
// structs out, no I/O (the quic-go wire package idea).
//
// A RoCE v2 packet is Ethernet / IPv4 or IPv6 / UDP (destination port 4791)
// / BTH / extended headers / payload / pad / ICRC; a RoCE v1 packet is
// Ethernet (Ethertype 0x8915) / GRH / BTH / ... / ICRC. All multi-byte
// header fields are big-endian; the ICRC is stored little-endian.
package wire

import "fmt"

// Opcode is the BTH operation code: the top 3 bits are the transport service
// (RC, UC, RD, UD, CNP), the low 5 the operation (IBTA vol. 1 §9.2, table 38).
type Opcode uint8

// Transport services (the opcode's top 3 bits).
const (
	ServiceRC  = 0x00 // reliable connection
	ServiceUC  = 0x20 // unreliable connection
	ServiceRD  = 0x40 // reliable datagram
	ServiceUD  = 0x60 // unreliable datagram
	ServiceCNP = 0x80 // RoCE v2 congestion notification (annex A17.9)
)

// Reliable-connection opcodes.
const (
	RCSendFirst          Opcode = 0x00
	RCSendMiddle         Opcode = 0x01
	RCSendLast           Opcode = 0x02
	RCSendLastImm        Opcode = 0x03
	RCSendOnly           Opcode = 0x04
	RCSendOnlyImm        Opcode = 0x05
	RCWriteFirst         Opcode = 0x06
	RCWriteMiddle        Opcode = 0x07
	RCWriteLast          Opcode = 0x08
	RCWriteLastImm       Opcode = 0x09
	RCWriteOnly          Opcode = 0x0a
	RCWriteOnlyImm       Opcode = 0x0b
	RCReadRequest        Opcode = 0x0c
	RCReadResponseFirst  Opcode = 0x0d
	RCReadResponseMiddle Opcode = 0x0e
	RCReadResponseLast   Opcode = 0x0f
	RCReadResponseOnly   Opcode = 0x10
	RCAcknowledge        Opcode = 0x11
	RCAtomicAcknowledge  Opcode = 0x12
	RCCompareSwap        Opcode = 0x13
	RCFetchAdd           Opcode = 0x14
	RCSendLastInvalidate Opcode = 0x16
	RCSendOnlyInvalidate Opcode = 0x17
	UCSendOnly           Opcode = 0x24
	UDSendOnly           Opcode = 0x64
	UDSendOnlyImm        Opcode = 0x65
	CNP                  Opcode = 0x81
)

const (
	opcodeOperationMask    Opcode = 0x1f
	opcodeServiceMask      Opcode = 0xe0
	maxOperation                  = 0x17
	udOperationSendOnly           = 0x04
	udOperationSendOnlyImm        = 0x05
	cnpOperation                  = 0x01
	ucLastOperation               = 0x0b // UC has SEND and RDMA WRITE only
	reservedOperation             = 0x15
)

// Extended headers an opcode carries after the BTH, in wire order.
const (
	HasRETH = 1 << iota
	HasAETH
	HasImmDt
	HasIETH
	HasAtomicETH
	HasAtomicAckETH
	HasDETH
	hasPayload // the operation carries data
	isCNP
)

// layout is the extended-header set per RC/UC operation (low 5 bits).
var layout = [maxOperation + 1]uint16{
	0x00: hasPayload,
	0x01: hasPayload,
	0x02: hasPayload,
	0x03: HasImmDt | hasPayload,
	0x04: hasPayload,
	0x05: HasImmDt | hasPayload,
	0x06: HasRETH | hasPayload,
	0x07: hasPayload,
	0x08: hasPayload,
	0x09: HasImmDt | hasPayload,
	0x0a: HasRETH | hasPayload,
	0x0b: HasRETH | HasImmDt | hasPayload,
	0x0c: HasRETH,
	0x0d: HasAETH | hasPayload,
	0x0e: hasPayload,
	0x0f: HasAETH | hasPayload,
	0x10: HasAETH | hasPayload,
	0x11: HasAETH,
	0x12: HasAETH | HasAtomicAckETH,
	0x13: HasAtomicETH,
	0x14: HasAtomicETH,
	0x16: HasIETH | hasPayload,
	0x17: HasIETH | hasPayload,
}

var operationNames = [maxOperation + 1]string{
	"SEND_FIRST", "SEND_MIDDLE", "SEND_LAST", "SEND_LAST_WITH_IMMEDIATE", "SEND_ONLY", "SEND_ONLY_WITH_IMMEDIATE",
	"RDMA_WRITE_FIRST", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_LAST", "RDMA_WRITE_LAST_WITH_IMMEDIATE", "RDMA_WRITE_ONLY", "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
	"RDMA_READ_REQUEST", "RDMA_READ_RESPONSE_FIRST", "RDMA_READ_RESPONSE_MIDDLE", "RDMA_READ_RESPONSE_LAST", "RDMA_READ_RESPONSE_ONLY",
	"ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE", "COMPARE_SWAP", "FETCH_ADD", "RESERVED", "SEND_LAST_WITH_INVALIDATE", "SEND_ONLY_WITH_INVALIDATE",
}

// Headers reports the extended headers op carries (HasRETH, ...) and false
// for an opcode this package does not know (reserved, RD, manufacturer).
func (op Opcode) Headers() (uint16, bool) {
	operation := op & opcodeOperationMask
	switch op & opcodeServiceMask {
	case ServiceRC:
		if operation > maxOperation || operation == reservedOperation {
			return 0, false
		}
		return layout[operation], true
	case ServiceUC:
		if operation > ucLastOperation {
			return 0, false
		}
		return layout[operation], true
	case ServiceUD:
		switch operation {
		case udOperationSendOnly:
			return HasDETH | hasPayload, true
		case udOperationSendOnlyImm:
			return HasDETH | HasImmDt | hasPayload, true
		}
	case ServiceCNP:
		if operation == cnpOperation {
			return isCNP, true
		}
	}
	return 0, false
}

// HasPayload reports whether op carries data after its headers.
func (op Opcode) HasPayload() bool {
	h, ok := op.Headers()
	return ok && h&hasPayload != 0
}

// Service is the opcode's transport service (ServiceRC, ...).
func (op Opcode) Service() uint8 { return uint8(op & opcodeServiceMask) }

// String names the opcode as Wireshark does ("RC RDMA_WRITE_ONLY").
func (op Opcode) String() string {
	if _, ok := op.Headers(); !ok {
		return fmt.Sprintf("opcode 0x%02x", uint8(op))
	}
	if op == CNP {
		return "CNP"
	}
	svc := map[uint8]string{ServiceRC: "RC", ServiceUC: "UC", ServiceUD: "UD"}[op.Service()]
	return svc + " " + operationNames[op&opcodeOperationMask]
}
