package wire

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Ethertypes and ports of RoCE.
const (
	EthertypeRoCEv1 = 0x8915
	EthertypeIPv4   = 0x0800
	EthertypeIPv6   = 0x86dd
	EthertypeVLAN   = 0x8100
	UDPPortRoCEv2   = 4791
	ipProtoUDP      = 17
)

// Frame is a decoded RoCE Ethernet frame.
type Frame struct {
	Version          int // 1 (Ethertype 0x8915) or 2 (UDP port 4791)
	EthDst, EthSrc   [6]byte
	VLAN             int        // VLAN id, or -1 without a tag
	Src, Dst         netip.Addr // IP addresses (v2) or GIDs (v1)
	SrcPort, DstPort uint16     // UDP ports (v2)
	GRH              GRH        // v1 only
	Packet           Packet
	ICRC             uint32 // as carried
	ComputedICRC     uint32
	// Run holds the packets of an IPv4 datagram that is a run sent with
	// UDP segmentation offload and captured before the kernel cut it
	// (on loopback or a veth; SplitGSO): each as it leaves, with the
	// run's IPv4 ID plus its index. Then f's own Packet and ICRCs are the
	// first packet's read as if it were the whole datagram.
	Run []*Frame
	Err error // for a packet of Run: why its headers did not decode
}

// roceV2Ports reports whether the UDP ports are RoCE v2's: to port 4791,
// or from it (a soft device answering a peer whose device listens on
// another port, as two soft devices on one address must).
func (f *Frame) roceV2Ports() bool {
	return f.DstPort == UDPPortRoCEv2 || f.SrcPort == UDPPortRoCEv2
}

// ICRCOK reports whether the carried ICRC matches the computed one.
func (f *Frame) ICRCOK() bool { return f.ICRC == f.ComputedICRC }

// ParseFrame decodes an Ethernet frame carrying RoCE v1 or v2 (an optional
// 802.1Q tag; IPv4 with options or IPv6 without extension headers) and
// computes its ICRC. The packet's Payload aliases frame. A frame whose ICRC
// does not match is returned without error: check ICRCOK.
func ParseFrame(frame []byte) (*Frame, error) {
	f := &Frame{VLAN: -1}
	if len(frame) < 14 {
		return nil, fmt.Errorf("wire: %d-byte frame is shorter than an Ethernet header", len(frame))
	}
	copy(f.EthDst[:], frame[0:6])
	copy(f.EthSrc[:], frame[6:12])
	etype := binary.BigEndian.Uint16(frame[12:])
	rest := frame[14:]
	if etype == EthertypeVLAN {
		if len(rest) < 4 {
			return nil, fmt.Errorf("wire: truncated VLAN tag")
		}
		f.VLAN = int(binary.BigEndian.Uint16(rest) & 0x0fff)
		etype = binary.BigEndian.Uint16(rest[2:])
		rest = rest[4:]
	}
	switch etype {
	case EthertypeRoCEv1:
		return f.parseV1(rest)
	case EthertypeIPv4, EthertypeIPv6:
		ipHdr, udp, err := f.parseIP(etype, rest)
		if err != nil {
			return nil, err
		}
		return f.parseV2(ipHdr, udp[:8], udp[8:])
	}
	return nil, fmt.Errorf("wire: Ethertype 0x%04x is not RoCE", etype)
}

// ParseV1 decodes the payload of an Ethertype 0x8915 frame (GRH, BTH to
// pad, ICRC) whose link layer was decoded elsewhere (goccl roce check-pcap
// decodes Ethernet and Linux cooked captures with gopacket) and computes its
// ICRC, as ParseFrame does; the Ethernet fields are left zero, VLAN -1.
func ParseV1(b []byte) (*Frame, error) {
	f := &Frame{VLAN: -1}
	return f.parseV1(b)
}

// ParseV2 decodes a RoCE v2 packet whose IP and UDP layers were decoded
// elsewhere: ipHdr is the IP header as carried (IPv4 with its options, or
// the 40-byte IPv6 header), udpHdr the 8-byte UDP header and payload the UDP
// payload trimmed to the UDP length (BTH to pad, ICRC). It sets the
// addresses and ports from the headers and computes the ICRC, as ParseFrame
// does; the Ethernet fields are left zero, VLAN -1.
func ParseV2(ipHdr, udpHdr, payload []byte) (*Frame, error) {
	f := &Frame{VLAN: -1}
	switch {
	case len(ipHdr) >= 20 && ipHdr[0]>>4 == 4:
		f.Src, _ = netip.AddrFromSlice(ipHdr[12:16])
		f.Dst, _ = netip.AddrFromSlice(ipHdr[16:20])
	case len(ipHdr) == 40 && ipHdr[0]>>4 == 6:
		f.Src = netip.AddrFrom16([16]byte(ipHdr[8:24]))
		f.Dst = netip.AddrFrom16([16]byte(ipHdr[24:40]))
	default:
		return nil, fmt.Errorf("wire: %d-byte IP header is neither IPv4 nor IPv6 without extension headers", len(ipHdr))
	}
	if len(udpHdr) != 8 {
		return nil, fmt.Errorf("wire: %d-byte UDP header", len(udpHdr))
	}
	f.SrcPort = binary.BigEndian.Uint16(udpHdr)
	f.DstPort = binary.BigEndian.Uint16(udpHdr[2:])
	if !f.roceV2Ports() {
		return nil, fmt.Errorf("wire: UDP ports %d to %d: neither is RoCE v2's (%d)", f.SrcPort, f.DstPort, UDPPortRoCEv2)
	}
	return f.parseV2(ipHdr, udpHdr, payload)
}

func (f *Frame) parseV1(b []byte) (*Frame, error) {
	f.Version = 1
	if err := f.GRH.Decode(b); err != nil {
		return nil, err
	}
	if f.GRH.NextHeader != NextHeaderBTH {
		return nil, fmt.Errorf("wire: GRH next header 0x%02x, want 0x1b (BTH)", f.GRH.NextHeader)
	}
	if int(f.GRH.PayLen) != len(b)-GRHSize {
		return nil, fmt.Errorf("wire: GRH payload length %d, frame has %d bytes after the GRH", f.GRH.PayLen, len(b)-GRHSize)
	}
	f.Src, f.Dst = netip.AddrFrom16(f.GRH.SGID), netip.AddrFrom16(f.GRH.DGID)
	ib := b[GRHSize:]
	if len(ib) < BTHSize+ICRCSize {
		return nil, fmt.Errorf("wire: %d bytes after the GRH, too short for a BTH and an ICRC", len(ib))
	}
	icrc, err := ICRCv1(b[:GRHSize], ib[:len(ib)-ICRCSize])
	if err != nil {
		return nil, err
	}
	return f.decodeIB(ib, icrc)
}

func (f *Frame) parseV2(ipHdr, udpHdr, ib []byte) (*Frame, error) {
	f.Version = 2
	if len(ib) < BTHSize+ICRCSize {
		return nil, fmt.Errorf("wire: %d bytes of UDP payload, too short for a BTH and an ICRC", len(ib))
	}
	icrc, err := ICRCv2(ipHdr, udpHdr, ib[:len(ib)-ICRCSize])
	if err != nil {
		return nil, err
	}
	if icrc != binary.LittleEndian.Uint32(ib[len(ib)-ICRCSize:]) && ipHdr[0]>>4 == 4 {
		if seg := SplitGSO(ipHdr, udpHdr, ib); seg > 0 {
			f.splitRun(ipHdr, udpHdr, ib, seg)
		}
	}
	return f.decodeIB(ib, icrc)
}

// splitRun fills f.Run with the packets of ib, seg bytes each (the last
// may be shorter).
func (f *Frame) splitRun(ipHdr, udpHdr, ib []byte, seg int) {
	hdr := make([]byte, len(ipHdr)+8)
	for i := 0; len(ib) > 0; i++ {
		p := ib[:min(seg, len(ib))]
		ib = ib[len(p):]
		ip, udp := gsoSegment(hdr, ipHdr, udpHdr, i, len(p))
		sf := &Frame{Version: 2, EthDst: f.EthDst, EthSrc: f.EthSrc, VLAN: f.VLAN, Src: f.Src, Dst: f.Dst, SrcPort: f.SrcPort, DstPort: f.DstPort}
		icrc, err := ICRCv2(ip, udp, p[:len(p)-ICRCSize])
		if err != nil {
			return
		}
		_, sf.Err = sf.decodeIB(p, icrc)
		f.Run = append(f.Run, sf)
	}
}

// decodeIB decodes ib (BTH to ICRC) into f.Packet with computed ICRC icrc:
// f is returned with an error where the headers do not decode.
func (f *Frame) decodeIB(ib []byte, icrc uint32) (*Frame, error) {
	f.ComputedICRC = icrc
	f.ICRC = binary.LittleEndian.Uint32(ib[len(ib)-ICRCSize:])
	if err := f.Packet.Decode(ib[:len(ib)-ICRCSize]); err != nil {
		return f, err
	}
	return f, nil
}

// parseIP returns the IP header and the UDP datagram (header and payload,
// trimmed to the UDP length) of a RoCE v2 frame.
func (f *Frame) parseIP(etype uint16, b []byte) (ipHdr, udp []byte, err error) {
	var proto uint8
	var payload []byte
	if etype == EthertypeIPv4 {
		if len(b) < 20 || b[0]>>4 != 4 {
			return nil, nil, fmt.Errorf("wire: bad IPv4 header")
		}
		ihl := int(b[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(b[2:]))
		if ihl < 20 || total < ihl || total > len(b) {
			return nil, nil, fmt.Errorf("wire: IPv4 header length %d, total length %d, %d bytes present", ihl, total, len(b))
		}
		if off := binary.BigEndian.Uint16(b[6:]); off&0x3fff != 0 {
			return nil, nil, fmt.Errorf("wire: fragmented IPv4 packet")
		}
		proto = b[9]
		f.Src, _ = netip.AddrFromSlice(b[12:16])
		f.Dst, _ = netip.AddrFromSlice(b[16:20])
		ipHdr, payload = b[:ihl], b[ihl:total]
	} else {
		if len(b) < 40 || b[0]>>4 != 6 {
			return nil, nil, fmt.Errorf("wire: bad IPv6 header")
		}
		plen := int(binary.BigEndian.Uint16(b[4:]))
		if 40+plen > len(b) {
			return nil, nil, fmt.Errorf("wire: IPv6 payload length %d, %d bytes present", plen, len(b)-40)
		}
		proto = b[6]
		f.Src = netip.AddrFrom16([16]byte(b[8:24]))
		f.Dst = netip.AddrFrom16([16]byte(b[24:40]))
		ipHdr, payload = b[:40], b[40:40+plen]
	}
	if proto != ipProtoUDP {
		return nil, nil, fmt.Errorf("wire: IP protocol %d is not UDP", proto)
	}
	if len(payload) < 8 {
		return nil, nil, fmt.Errorf("wire: truncated UDP header")
	}
	f.SrcPort = binary.BigEndian.Uint16(payload)
	f.DstPort = binary.BigEndian.Uint16(payload[2:])
	ulen := int(binary.BigEndian.Uint16(payload[4:]))
	if ulen < 8 || ulen > len(payload) {
		return nil, nil, fmt.Errorf("wire: UDP length %d, %d bytes present", ulen, len(payload))
	}
	if !f.roceV2Ports() {
		return nil, nil, fmt.Errorf("wire: UDP ports %d to %d: neither is RoCE v2's (%d)", f.SrcPort, f.DstPort, UDPPortRoCEv2)
	}
	return ipHdr, payload[:ulen], nil
}

// AppendFrameV2 appends an Ethernet/IPv4 or IPv6/UDP frame carrying the IBA
// packet ib (BTH to pad) and its ICRC, as a RoCE v2 NIC would send it (the
// frames goccl's pcap option records): IPv4 header checksum filled in, UDP
// checksum zero (the ICRC protects the packet, as on RoCE NICs).
func AppendFrameV2(b []byte, ethSrc, ethDst [6]byte, src, dst netip.AddrPort, ib []byte) ([]byte, error) {
	b = append(b, ethDst[:]...)
	b = append(b, ethSrc[:]...)
	udpLen := 8 + len(ib) + ICRCSize
	start := len(b)
	switch {
	case src.Addr().Is4() && dst.Addr().Is4():
		b = binary.BigEndian.AppendUint16(b, EthertypeIPv4)
		start = len(b)
		b = append(b, 0x45, 0x00)
		b = binary.BigEndian.AppendUint16(b, uint16(20+udpLen))
		b = append(b, 0, 0, 0x40, 0x00, 64, ipProtoUDP, 0, 0) // id 0, DF, TTL 64, checksum later
		s, d := src.Addr().As4(), dst.Addr().As4()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
		binary.BigEndian.PutUint16(b[start+10:], ipv4Checksum(b[start:start+20]))
	case src.Addr().Is6() && dst.Addr().Is6():
		b = binary.BigEndian.AppendUint16(b, EthertypeIPv6)
		start = len(b)
		b = append(b, 0x60, 0, 0, 0)
		b = binary.BigEndian.AppendUint16(b, uint16(udpLen))
		b = append(b, ipProtoUDP, 64)
		s, d := src.Addr().As16(), dst.Addr().As16()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
	default:
		return nil, fmt.Errorf("wire: source %v and destination %v are not both IPv4 or both IPv6", src, dst)
	}
	ipEnd := len(b)
	b = binary.BigEndian.AppendUint16(b, src.Port())
	b = binary.BigEndian.AppendUint16(b, dst.Port())
	b = binary.BigEndian.AppendUint16(b, uint16(udpLen))
	b = append(b, 0, 0)
	udpStart := ipEnd
	b = append(b, ib...)
	icrc, err := ICRCv2(b[start:ipEnd], b[udpStart:udpStart+8], ib)
	if err != nil {
		return nil, err
	}
	return PutICRC(b, icrc), nil
}

func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// AppendFrameV1 appends to b the RoCE v1 Ethernet frame carrying ib (BTH to
// the end of the pad) from sgid to dgid: the Ethernet header with Ethertype
// 0x8915, a GRH (IP version 6, traffic class 0, flow label 0, next header
// 0x1b, hop limit 1: RoCE v1 stays on its L2 segment), ib and its ICRC
// (annex A16).
func AppendFrameV1(b []byte, ethSrc, ethDst [6]byte, sgid, dgid [16]byte, ib []byte) ([]byte, error) {
	if len(ib) < BTHSize {
		return nil, fmt.Errorf("wire: %d-byte IBA packet is shorter than a BTH", len(ib))
	}
	if len(ib)+ICRCSize > 0xffff {
		return nil, fmt.Errorf("wire: %d-byte IBA packet does not fit a GRH payload length", len(ib))
	}
	b = append(b, ethDst[:]...)
	b = append(b, ethSrc[:]...)
	b = binary.BigEndian.AppendUint16(b, EthertypeRoCEv1)
	grhStart := len(b)
	g := GRH{IPVer: 6, PayLen: uint16(len(ib) + ICRCSize), NextHeader: NextHeaderBTH, HopLimit: 1, SGID: sgid, DGID: dgid}
	b = g.Append(b)
	b = append(b, ib...)
	icrc, err := ICRCv1(b[grhStart:grhStart+GRHSize], ib)
	if err != nil {
		return nil, err
	}
	return PutICRC(b, icrc), nil
}

// LinkLocalGID is the GID a RoCE port derives from its MAC address (GID
// index 0 of a RoCE v1 port): fe80::/64 with the modified EUI-64 interface
// identifier (RFC 4291 appendix A: the universal/local bit inverted,
// ff:fe inserted in the middle).
func LinkLocalGID(mac [6]byte) [16]byte {
	return [16]byte{0xfe, 0x80, 6: 0, 7: 0,
		8: mac[0] ^ 0x02, 9: mac[1], 10: mac[2], 11: 0xff, 12: 0xfe, 13: mac[3], 14: mac[4], 15: mac[5]}
}

// MACFromLinkLocalGID inverts LinkLocalGID: ok is false for a GID that is
// not fe80::/64 with an EUI-64 identifier made from a MAC address.
func MACFromLinkLocalGID(gid [16]byte) (mac [6]byte, ok bool) {
	if gid[0] != 0xfe || gid[1] != 0x80 || gid[2]|gid[3]|gid[4]|gid[5]|gid[6]|gid[7] != 0 || gid[11] != 0xff || gid[12] != 0xfe {
		return mac, false
	}
	return [6]byte{gid[8] ^ 0x02, gid[9], gid[10], gid[13], gid[14], gid[15]}, true
}
