package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goccl/goccl/rdma/wire"
)

// check-pcap: gopacket reads the capture and decodes its link, IP and UDP
// layers; rdma/wire decodes the RoCE part (GRH, BTH and the rest) and
// computes the ICRC.

// linkTypeRawAlt is DLT_RAW's value on some platforms, found as the link
// type of captures written there (Wireshark reads it as raw IP too).
const linkTypeRawAlt layers.LinkType = 12

// pcapLinkSupported reports whether check-pcap decodes frames of link type lt.
func pcapLinkSupported(lt layers.LinkType) bool {
	switch lt {
	case layers.LinkTypeEthernet, layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2,
		layers.LinkTypeRaw, linkTypeRawAlt, layers.LinkTypeIPv4, layers.LinkTypeIPv6:
		return true
	}
	return false
}

func pcapLinkTypeName(lt layers.LinkType) string {
	name := map[layers.LinkType]string{
		layers.LinkTypeEthernet:  "Ethernet",
		layers.LinkTypeLinuxSLL:  "Linux cooked v1",
		layers.LinkTypeLinuxSLL2: "Linux cooked v2",
		layers.LinkTypeRaw:       "raw IP",
		linkTypeRawAlt:           "raw IP",
		layers.LinkTypeIPv4:      "raw IPv4",
		layers.LinkTypeIPv6:      "raw IPv6",
	}[lt]
	if name == "" {
		name = lt.String()
	}
	return fmt.Sprintf("%d (%s)", uint16(lt), name)
}

func checkPcap(path string, stdout, stderr io.Writer) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "goccl roce check-pcap: %v\n", err)
		return 2
	}
	defer f.Close()
	br := bufio.NewReader(f)
	magic, _ := br.Peek(4)
	// next returns a frame and its link type (per interface in pcapng).
	var next func() ([]byte, layers.LinkType, error)
	if bytes.Equal(magic, []byte{0x0a, 0x0d, 0x0d, 0x0a}) {
		// Each interface has its own link type (gopacket's default
		// skips the packets of interfaces unlike the first).
		r, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			fmt.Fprintf(stderr, "goccl roce check-pcap: %s: %v\n", path, err)
			return 2
		}
		next = func() ([]byte, layers.LinkType, error) {
			d, ci, err := r.ReadPacketData()
			if err != nil {
				return nil, 0, err
			}
			ifc, err := r.Interface(ci.InterfaceIndex)
			if err != nil {
				return nil, 0, err
			}
			return d, ifc.LinkType, nil
		}
	} else {
		r, err := pcapgo.NewReader(br)
		if err != nil {
			fmt.Fprintf(stderr, "goccl roce check-pcap: %s: %v\n", path, err)
			return 2
		}
		lt := r.LinkType()
		if !pcapLinkSupported(lt) {
			fmt.Fprintf(stderr, "goccl roce check-pcap: %s: link type %s is not supported (Ethernet, Linux cooked v1 or v2, raw IP)\n", path, pcapLinkTypeName(lt))
			return 2
		}
		next = func() ([]byte, layers.LinkType, error) { d, _, err := r.ReadPacketData(); return d, lt, err }
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	bad, n, packets, runs := 0, 0, 0, 0
	for {
		data, lt, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			w.Flush()
			fmt.Fprintf(stderr, "goccl roce check-pcap: %s: after frame %d: %v\n", path, n, err)
			return 1
		}
		n++
		fr, err := decodeCaptured(lt, data)
		if fr == nil {
			bad++
			fmt.Fprintf(w, "frame %d: not decodable: %v\n", n, err)
			continue
		}
		if len(fr.Run) > 0 {
			// A UDP segmentation offload run seen before the kernel
			// cut it: each packet checked as it leaves.
			fmt.Fprintf(w, "frame %d: UDP GSO run of %d RoCE v2 packets\n", n, len(fr.Run))
			runs++
			for i, sf := range fr.Run {
				packets++
				if !printPcapPacket(w, fmt.Sprintf("frame %d.%d", n, i+1), sf, sf.Err) {
					bad++
				}
			}
			continue
		}
		packets++
		if !printPcapPacket(w, fmt.Sprintf("frame %d", n), fr, err) {
			bad++
		}
	}
	if runs > 0 {
		fmt.Fprintf(w, "%d frames (%d RoCE packets), %d bad\n", n, packets, bad)
	} else {
		fmt.Fprintf(w, "%d frames, %d bad\n", n, bad)
	}
	if bad > 0 {
		return 1
	}
	return 0
}

// printPcapPacket prints one packet's line and reports whether it is good:
// its ICRC matches and its headers decode (decodeErr nil).
func printPcapPacket(w io.Writer, name string, fr *wire.Frame, decodeErr error) bool {
	p := &fr.Packet
	status := "icrc ok"
	if !fr.ICRCOK() {
		status = fmt.Sprintf("icrc BAD (carried %08x, computed %08x)", fr.ICRC, fr.ComputedICRC)
	}
	if decodeErr != nil {
		fmt.Fprintf(w, "%s: RoCEv%d %s %s, headers not decodable: %v\n", name, fr.Version, p.BTH.Opcode, status, decodeErr)
		return false
	}
	aeth := ""
	if p.Headers&wire.HasAETH != 0 {
		aeth = " aeth " + p.AETH.Syndrome.String()
	}
	fmt.Fprintf(w, "%s: RoCEv%d %s dqp 0x%06x psn %d len %d%s %s\n", name, fr.Version, p.BTH.Opcode, p.BTH.DestQP, p.BTH.PSN, len(p.Payload), aeth, status)
	return fr.ICRCOK()
}

// pcapTruncation is a gopacket.DecodeFeedback that remembers whether a layer
// found fewer bytes than its header says it has.
type pcapTruncation bool

func (t *pcapTruncation) SetTruncated() { *t = true }

// decodeCaptured decodes one captured frame of link type lt as RoCE v1 or
// v2. As wire.ParseFrame, it returns a nil frame where the frame is not
// RoCE or its framing is broken, and the frame with an error where the RoCE
// headers after the BTH do not decode.
func decodeCaptured(lt layers.LinkType, data []byte) (*wire.Frame, error) {
	var (
		etype   layers.EthernetType
		payload []byte
		ethSrc  [6]byte
		ethDst  [6]byte
		isEth   bool
		vlan    = -1
	)
	switch lt {
	case layers.LinkTypeEthernet:
		var eth layers.Ethernet
		if err := eth.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			return nil, fmt.Errorf("Ethernet: %v", err)
		}
		etype, payload, isEth = eth.EthernetType, eth.Payload, true
		copy(ethSrc[:], eth.SrcMAC)
		copy(ethDst[:], eth.DstMAC)
	case layers.LinkTypeLinuxSLL:
		var sll layers.LinuxSLL
		if err := sll.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			return nil, fmt.Errorf("Linux cooked header: %v", err)
		}
		etype, payload = sll.EthernetType, sll.Payload
	case layers.LinkTypeLinuxSLL2:
		var sll layers.LinuxSLL2
		if err := sll.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			return nil, fmt.Errorf("Linux cooked v2 header: %v", err)
		}
		etype, payload = sll.ProtocolType, sll.Payload
	case layers.LinkTypeRaw, linkTypeRawAlt, layers.LinkTypeIPv4, layers.LinkTypeIPv6:
		if len(data) == 0 {
			return nil, errors.New("empty raw IP packet")
		}
		switch data[0] >> 4 {
		case 4:
			etype = layers.EthernetTypeIPv4
		case 6:
			etype = layers.EthernetTypeIPv6
		default:
			return nil, fmt.Errorf("raw IP packet of IP version %d", data[0]>>4)
		}
		if lt == layers.LinkTypeIPv4 && etype != layers.EthernetTypeIPv4 || lt == layers.LinkTypeIPv6 && etype != layers.EthernetTypeIPv6 {
			return nil, fmt.Errorf("IP version %d packet in a capture of link type %s", data[0]>>4, pcapLinkTypeName(lt))
		}
		payload = data
	default:
		return nil, fmt.Errorf("link type %s is not supported (Ethernet, Linux cooked v1 or v2, raw IP)", pcapLinkTypeName(lt))
	}
	if etype == layers.EthernetTypeDot1Q {
		var tag layers.Dot1Q
		if err := tag.DecodeFromBytes(payload, gopacket.NilDecodeFeedback); err != nil {
			return nil, fmt.Errorf("802.1Q tag: %v", err)
		}
		etype, payload, vlan = tag.Type, tag.Payload, int(tag.VLANIdentifier)
	}
	fr, err := decodeNetwork(etype, payload)
	if fr != nil {
		fr.VLAN = vlan
		if isEth {
			fr.EthSrc, fr.EthDst = ethSrc, ethDst
		}
	}
	return fr, err
}

// decodeNetwork decodes the network layer of Ethertype etype: a RoCE v1
// GRH and what follows, or IPv4 or IPv6 and UDP to port 4791.
func decodeNetwork(etype layers.EthernetType, b []byte) (*wire.Frame, error) {
	var trunc pcapTruncation
	var ipHdr, udpData []byte
	var proto layers.IPProtocol
	switch etype {
	case wire.EthertypeRoCEv1:
		return wire.ParseV1(b)
	case layers.EthernetTypeIPv4:
		var ip layers.IPv4
		if err := ip.DecodeFromBytes(b, &trunc); err != nil {
			return nil, fmt.Errorf("IPv4: %v", err)
		}
		if ip.Version != 4 {
			return nil, fmt.Errorf("IPv4: version %d", ip.Version)
		}
		if trunc {
			return nil, fmt.Errorf("IPv4: total length %d, %d bytes present", ip.Length, len(b))
		}
		if ip.Flags&layers.IPv4MoreFragments != 0 || ip.FragOffset != 0 {
			return nil, errors.New("IPv4: fragmented packet")
		}
		ipHdr, udpData, proto = ip.Contents, ip.Payload, ip.Protocol
	case layers.EthernetTypeIPv6:
		var ip layers.IPv6
		if err := ip.DecodeFromBytes(b, &trunc); err != nil {
			return nil, fmt.Errorf("IPv6: %v", err)
		}
		if ip.Version != 6 {
			return nil, fmt.Errorf("IPv6: version %d", ip.Version)
		}
		if trunc {
			return nil, fmt.Errorf("IPv6: payload length %d, %d bytes present", ip.Length, len(b)-40)
		}
		if len(ip.Contents) != 40 {
			return nil, fmt.Errorf("IPv6: next header %v: extension headers are not RoCE v2", ip.NextHeader)
		}
		ipHdr, udpData, proto = ip.Contents, ip.Payload, ip.NextHeader
	default:
		return nil, fmt.Errorf("Ethertype 0x%04x is not RoCE", uint16(etype))
	}
	if proto != layers.IPProtocolUDP {
		return nil, fmt.Errorf("IP protocol %d is not UDP", uint8(proto))
	}
	var udp layers.UDP
	if err := udp.DecodeFromBytes(udpData, &trunc); err != nil {
		return nil, fmt.Errorf("UDP: %v", err)
	}
	if trunc || udp.Length < 8 {
		return nil, fmt.Errorf("UDP: length %d, %d bytes present", udp.Length, len(udpData))
	}
	if udp.DstPort != wire.UDPPortRoCEv2 && udp.SrcPort != wire.UDPPortRoCEv2 {
		return nil, fmt.Errorf("UDP ports %d to %d: neither is RoCE v2's (%d)", udp.SrcPort, udp.DstPort, wire.UDPPortRoCEv2)
	}
	return wire.ParseV2(ipHdr, udp.Contents, udp.Payload)
}
