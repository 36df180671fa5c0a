package wire

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// The ICRC (IBTA vol. 1 §7.8.1; annex A16.5 for RoCE v1, A17.4.4 for RoCE
// v2) is the IEEE 802.3 CRC-32 of the packet's invariant fields: a dummy
// local route header of 8 bytes of ones, then the GRH (v1) or the IP header
// (v2) with the fields routers change (traffic class, flow label, hop limit;
// for IPv4 type of service, TTL and header checksum) set to ones, the UDP
// header (v2) with its checksum set to ones, the BTH with its byte 4 (FECN,
// BECN and reserved bits, which switches may set) set to ones, and the rest
// of the packet up to the ICRC. It is stored little-endian after the pad.

// lrhOnes stands for the LRH and for every masked field.
var lrhOnes = [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// ICRCv2 computes the ICRC of a RoCE v2 packet from its IP header (IPv4,
// options included, or IPv6 without extension headers), its 8-byte UDP
// header and its IBA packet (BTH to the end of the pad).
func ICRCv2(ipHeader, udpHeader, ibPacket []byte) (uint32, error) {
	if len(udpHeader) != 8 || len(ibPacket) < BTHSize || len(ipHeader) < 20 {
		return 0, errors.New("wire: ICRC needs an IP header, an 8-byte UDP header and at least a BTH")
	}
	crc := crc32.Update(0, crc32.IEEETable, lrhOnes[:])
	switch ipHeader[0] >> 4 {
	case 4:
		if len(ipHeader) > 60 {
			return 0, errors.New("wire: IPv4 header longer than 60 bytes")
		}
		// The fields routers change (type of service, TTL, header
		// checksum) count as ones; the header is read in place (a copy
		// to mask would escape to the heap: crc32 takes a slice).
		h := ipHeader
		crc = crc32.Update(crc, crc32.IEEETable, h[0:1])
		crc = crc32.Update(crc, crc32.IEEETable, lrhOnes[:1])
		crc = crc32.Update(crc, crc32.IEEETable, h[2:8])
		crc = crc32.Update(crc, crc32.IEEETable, lrhOnes[:1])
		crc = crc32.Update(crc, crc32.IEEETable, h[9:10])
		crc = crc32.Update(crc, crc32.IEEETable, lrhOnes[:2])
		crc = crc32.Update(crc, crc32.IEEETable, h[12:])
	case 6:
		if len(ipHeader) != 40 {
			return 0, errors.New("wire: IPv6 header must be 40 bytes")
		}
		var ip [40]byte
		copy(ip[:], ipHeader)
		maskGRHLike(&ip)
		crc = crc32.Update(crc, crc32.IEEETable, ip[:])
	default:
		return 0, errors.New("wire: not an IPv4 or IPv6 header")
	}
	crc = crc32.Update(crc, crc32.IEEETable, udpHeader[:6])
	crc = crc32.Update(crc, crc32.IEEETable, lrhOnes[:2]) // UDP checksum
	return updateIB(crc, ibPacket), nil
}

// ICRCv1 computes the ICRC of a RoCE v1 packet from its GRH and its IBA
// packet (BTH to the end of the pad).
func ICRCv1(grh, ibPacket []byte) (uint32, error) {
	if len(grh) != GRHSize || len(ibPacket) < BTHSize {
		return 0, errors.New("wire: ICRC needs a 40-byte GRH and at least a BTH")
	}
	crc := crc32.Update(0, crc32.IEEETable, lrhOnes[:])
	var g [40]byte
	copy(g[:], grh)
	maskGRHLike(&g)
	crc = crc32.Update(crc, crc32.IEEETable, g[:])
	return updateIB(crc, ibPacket), nil
}

// maskGRHLike sets traffic class, flow label and hop limit of a GRH or IPv6
// header to ones.
func maskGRHLike(h *[40]byte) {
	h[0] |= 0x0f // low half of the version byte: traffic class high bits
	h[1], h[2], h[3] = 0xff, 0xff, 0xff
	h[7] = 0xff // hop limit
}

func updateIB(crc uint32, ib []byte) uint32 {
	crc = crc32.Update(crc, crc32.IEEETable, ib[:4])
	crc = crc32.Update(crc, crc32.IEEETable, lrhOnes[:1]) // BTH reserved byte
	return crc32.Update(crc, crc32.IEEETable, ib[5:])
}

// PutICRC stores icrc after the packet (little-endian, as on the wire).
func PutICRC(b []byte, icrc uint32) []byte { return binary.LittleEndian.AppendUint32(b, icrc) }
