package wire

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net/netip"
)

// IPv4 Identification and UDP segmentation offload.
//
// The RoCE v2 ICRC covers the IPv4 Identification (annex A17.4.4 masks
// only the type of service, the TTL and the header checksum), so a packet's
// ICRC is right only for the ID it carries on the wire. A user-space UDP
// socket never sees that header: it has to predict the ID. Linux gives a
// datagram of an unconnected socket that sets DF and does not ignore it
// (IP_MTU_DISCOVER = IP_PMTUDISC_DO or PROBE) the ID 0; a buffer sent with
// UDP_SEGMENT leaves as segments whose IDs count up from there, 0, 1, 2,
// ... (inet_gso_segment gives segment i the run's ID plus i). CRC-32 is
// affine, so for a given length the ICRC with ID id is the ICRC with ID 0
// XOR a term that depends only on id and the length: ICRCv2IDDelta.

// icrcIDOffset is where the IPv4 ID lies in the ICRC's input: after the
// 8 bytes standing for the LRH, at byte 4 of the IP header.
const icrcIDOffset = 8 + 4

// crcZeroRun feeds the CRC its runs of zeros.
var crcZeroRun [4096]byte

// crcZeros continues crc over n zero bytes.
func crcZeros(crc uint32, n int) uint32 {
	for n > 0 {
		k := min(n, len(crcZeroRun))
		crc = crc32.Update(crc, crc32.IEEETable, crcZeroRun[:k])
		n -= k
	}
	return crc
}

// ICRCv2IDDelta is ICRCv2 of a packet with IPv4 Identification id XOR
// ICRCv2 of the same packet with ID 0, for an IPv4 header of ihl bytes and
// an IBA packet (BTH to the end of the pad) of ibLen bytes: the same for
// every packet of those lengths, whatever its contents.
func ICRCv2IDDelta(ihl, ibLen int, id uint16) uint32 {
	if id == 0 {
		return 0
	}
	n := 8 + ihl + 8 + ibLen // the ICRC's input
	var head [icrcIDOffset + 2]byte
	head[icrcIDOffset], head[icrcIDOffset+1] = byte(id>>8), byte(id)
	withID := crcZeros(crc32.Update(0, crc32.IEEETable, head[:]), n-len(head))
	return withID ^ crcZeros(0, n)
}

// SplitGSO finds the packets in the UDP payload ib of one IPv4 datagram
// that a capture shows before the kernel segmented it (a run sent with
// UDP_SEGMENT, seen on loopback or a veth; ipHdr and udpHdr are its
// headers): ib holds packets of segSize bytes (BTH to ICRC) back to back,
// the last one possibly shorter. A run holds one QP's packets, so segSize
// is the smallest multiple of 4 at which every piece starts with a BTH of
// the first one's destination QP and partition and a known opcode, and
// the first piece's ICRC checks with the datagram's IPv4 ID. It returns 0
// when ib is not such a run of two or more packets.
func SplitGSO(ipHdr, udpHdr, ib []byte) (segSize int) {
	if len(ib) < 2*(BTHSize+ICRCSize) || len(ipHdr) < 20 || len(udpHdr) != 8 {
		return 0
	}
	var first BTH
	if first.Decode(ib) != nil {
		return 0
	}
	hdr := make([]byte, len(ipHdr)+8)
	for s := BTHSize + ICRCSize; s < len(ib); s += 4 {
		if !runOf(ib, s, first) {
			continue
		}
		ip, udp := gsoSegment(hdr, ipHdr, udpHdr, 0, s)
		if c, err := ICRCv2(ip, udp, ib[:s-ICRCSize]); err == nil && c == binary.LittleEndian.Uint32(ib[s-ICRCSize:s]) {
			return s
		}
	}
	return 0
}

// runOf reports whether every s-byte piece of ib after the first starts
// with a BTH of first's QP and partition and a known opcode.
func runOf(ib []byte, s int, first BTH) bool {
	for off := s; off < len(ib); off += s {
		if len(ib)-off < BTHSize+ICRCSize {
			return false
		}
		var b BTH
		if b.Decode(ib[off:]) != nil || b.DestQP != first.DestQP || b.PKey != first.PKey {
			return false
		}
		if _, ok := b.Opcode.Headers(); !ok {
			return false
		}
	}
	return true
}

// gsoSegment is segment i (ib, BTH to ICRC) of a run whose IPv4 header
// was ipHdr: the IPv4 and UDP headers the kernel gives it, written into
// hdr (ihl + 8 bytes).
func gsoSegment(hdr, ipHdr, udpHdr []byte, i, segLen int) (ip, udp []byte) {
	ihl := len(ipHdr)
	ip, udp = hdr[:ihl], hdr[ihl:ihl+8]
	copy(ip, ipHdr)
	copy(udp, udpHdr)
	binary.BigEndian.PutUint16(ip[2:], uint16(ihl+8+segLen))
	binary.BigEndian.PutUint16(ip[4:], binary.BigEndian.Uint16(ipHdr[4:])+uint16(i))
	binary.BigEndian.PutUint16(udp[4:], uint16(8+segLen))
	return ip, udp
}

// AppendRunV2 appends the frame that a capture on loopback or a veth shows
// of a run sent with UDP_SEGMENT from src to dst (IPv4): one datagram,
// IPv4 ID 0, holding the IBA packets ibs (each BTH to pad; all but the
// last of one length) back to back, each with the ICRC of the segment the
// kernel cuts from it (ID i for the i-th): what ParseFrame splits into
// Run. (The soft device sends such runs; this builds them for tests and
// tools.)
func AppendRunV2(b []byte, ethSrc, ethDst [6]byte, src, dst netip.AddrPort, ibs [][]byte) ([]byte, error) {
	var run []byte
	var seg []byte
	for i, ib := range ibs {
		var err error
		seg, err = AppendFrameV2(seg[:0], ethSrc, ethDst, src, dst, ib)
		if err != nil {
			return b, err
		}
		p := seg[len(seg)-len(ib)-ICRCSize:]
		c := binary.LittleEndian.Uint32(p[len(ib):]) ^ ICRCv2IDDelta(20, len(ib), uint16(i))
		run = binary.LittleEndian.AppendUint32(append(run, ib...), c)
	}
	if len(run) < ICRCSize {
		return b, fmt.Errorf("wire: a run of no packets")
	}
	start := len(b)
	b, err := AppendFrameV2(b, ethSrc, ethDst, src, dst, run[:len(run)-ICRCSize])
	if err != nil {
		return b[:start], err
	}
	copy(b[len(b)-ICRCSize:], run[len(run)-ICRCSize:])
	return b, nil
}
