package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goccl/goccl/rdma/wire"
)

// pcapTestFrame is an Ethernet frame made by rdma/wire's encoder and the
// line check-pcap prints for it.
type pcapTestFrame struct {
	eth  []byte
	want string // with %d for the frame number
}

// ethertype of a test frame: 0x0800, 0x86dd or 0x8915.
func (f pcapTestFrame) ethertype() uint16 { return binary.BigEndian.Uint16(f.eth[12:]) }

// pcapTestFrames: RoCE v2 over IPv4 and IPv6, RoCE v1, a frame with a
// corrupted ICRC and a UDP datagram that is not RoCE.
func pcapTestFrames(t *testing.T) []pcapTestFrame {
	t.Helper()
	srcMAC, dstMAC := [6]byte{0x02, 0, 0, 0, 0, 1}, [6]byte{0x02, 0, 0, 0, 0, 2}
	v4a, v4b := netip.MustParseAddrPort("10.0.0.1:49152"), netip.MustParseAddrPort("10.0.0.2:4791")
	v6a, v6b := netip.MustParseAddrPort("[fd00::1]:49153"), netip.MustParseAddrPort("[fd00::2]:4791")
	ib := func(p wire.Packet) []byte { return p.Append(nil) }
	write := ib(wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteOnly, PKey: 0xffff, DestQP: 0x11, AckReq: true, PSN: 256},
		RETH: wire.RETH{VA: 0x1000, RKey: 0x1234, DMALength: 7}, Payload: []byte("goccl!!")})
	ack := ib(wire.Packet{BTH: wire.BTH{Opcode: wire.RCAcknowledge, PKey: 0xffff, DestQP: 0x22, PSN: 256},
		AETH: wire.AETH{Syndrome: wire.ACK(31), MSN: 1}})
	write6 := ib(wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteOnly, PKey: 0xffff, DestQP: 0x33, PSN: 9},
		RETH: wire.RETH{VA: 0x2000, RKey: 0x99, DMALength: 5}, Payload: []byte("hello")})
	mustV2 := func(src, dst netip.AddrPort, ib []byte) []byte {
		fr, err := wire.AppendFrameV2(nil, srcMAC, dstMAC, src, dst, ib)
		if err != nil {
			t.Fatal(err)
		}
		return fr
	}
	v1, err := wire.AppendFrameV1(nil, srcMAC, dstMAC, wire.LinkLocalGID(srcMAC), wire.LinkLocalGID(dstMAC),
		ib(wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteOnly, PKey: 0xffff, DestQP: 0x44, PSN: 1},
			RETH: wire.RETH{VA: 0x3000, RKey: 0x7, DMALength: 3}, Payload: []byte("abc")}))
	if err != nil {
		t.Fatal(err)
	}
	bad := mustV2(v4a, v4b, write)
	bad[len(bad)-1] ^= 0x80
	// A UDP datagram to port 53: the RoCE v2 frame with its ports changed
	// (the IPv4 header is unchanged, its checksum stays right).
	dns := mustV2(v4a, v4b, ack)
	binary.BigEndian.PutUint16(dns[14+20+2:], 53)
	return []pcapTestFrame{
		{mustV2(v4a, v4b, write), "frame %d: RoCEv2 RC RDMA_WRITE_ONLY dqp 0x000011 psn 256 len 7 icrc ok"},
		{mustV2(netip.MustParseAddrPort("10.0.0.2:49154"), netip.MustParseAddrPort("10.0.0.1:4791"), ack), "frame %d: RoCEv2 RC ACKNOWLEDGE dqp 0x000022 psn 256 len 0 aeth ACK credits 31 icrc ok"},
		{mustV2(v6a, v6b, write6), "frame %d: RoCEv2 RC RDMA_WRITE_ONLY dqp 0x000033 psn 9 len 5 icrc ok"},
		{v1, "frame %d: RoCEv1 RC RDMA_WRITE_ONLY dqp 0x000044 psn 1 len 3 icrc ok"},
		{bad, "frame %d: RoCEv2 RC RDMA_WRITE_ONLY dqp 0x000011 psn 256 len 7 icrc BAD (carried %s)"},
		{dns, "frame %d: not decodable: UDP ports 49152 to 53: neither is RoCE v2's (4791)"},
		// A soft device on port 4791 answering one on another port (two
		// soft devices on one address): RoCE v2 too, as tshark reads it.
		{mustV2(netip.MustParseAddrPort("10.0.0.2:4791"), netip.MustParseAddrPort("10.0.0.1:49152"), ack), "frame %d: RoCEv2 RC ACKNOWLEDGE dqp 0x000022 psn 256 len 0 aeth ACK credits 31 icrc ok"},
	}
}

// linkFrame turns an Ethernet frame into a frame of link type lt, as a
// capture of that link type holds it; ok is false where lt cannot carry it
// (RoCE v1 in raw IP, IPv6 in link type 228, IPv4 in 229).
func linkFrame(lt layers.LinkType, eth []byte, outgoing bool) (frame []byte, ok bool) {
	etype := binary.BigEndian.Uint16(eth[12:])
	payload := eth[14:]
	switch lt {
	case layers.LinkTypeEthernet:
		return eth, true
	case layers.LinkTypeLinuxSLL:
		// packet type, ARPHRD type, address length, 8 address bytes
		// (the source MAC, zero-padded), protocol: tcpdump -i any.
		h := make([]byte, 16)
		if outgoing {
			binary.BigEndian.PutUint16(h[0:], 4) // LINUX_SLL_OUTGOING
		}
		binary.BigEndian.PutUint16(h[2:], 1) // ARPHRD_ETHER
		binary.BigEndian.PutUint16(h[4:], 6)
		copy(h[6:], eth[6:12])
		binary.BigEndian.PutUint16(h[14:], etype)
		return append(h, payload...), true
	case layers.LinkTypeLinuxSLL2:
		// protocol, reserved, interface index, ARPHRD type, packet
		// type, address length, 8 address bytes.
		h := make([]byte, 20)
		binary.BigEndian.PutUint16(h[0:], etype)
		binary.BigEndian.PutUint32(h[4:], 2)
		binary.BigEndian.PutUint16(h[8:], 1)
		if outgoing {
			h[10] = 4
		}
		h[11] = 6
		copy(h[12:], eth[6:12])
		return append(h, payload...), true
	case layers.LinkTypeRaw, linkTypeRawAlt:
		return payload, etype != wire.EthertypeRoCEv1
	case layers.LinkTypeIPv4:
		return payload, etype == wire.EthertypeIPv4
	case layers.LinkTypeIPv6:
		return payload, etype == wire.EthertypeIPv6
	}
	panic(lt)
}

// TestRoceCheckPcapLinkTypes writes captures of each link type check-pcap
// reads (Linux cooked v1 and v2 as tcpdump -i any writes them, raw IP as
// from a tun device) holding frames rdma/wire encodes, and checks
// check-pcap's line for each: the same as for the Ethernet capture.
func TestRoceCheckPcapLinkTypes(t *testing.T) {
	frames := pcapTestFrames(t)
	dir := t.TempDir()
	for _, lt := range []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2,
		layers.LinkTypeRaw, linkTypeRawAlt, layers.LinkTypeIPv4, layers.LinkTypeIPv6} {
		t.Run(fmt.Sprint(uint16(lt)), func(t *testing.T) {
			var buf bytes.Buffer
			w := pcapgo.NewWriter(&buf)
			if err := w.WriteFileHeader(65535, lt); err != nil {
				t.Fatal(err)
			}
			var want []string
			bad := 0
			for i, f := range frames {
				data, ok := linkFrame(lt, f.eth, i%2 == 0)
				if !ok {
					continue
				}
				if strings.Contains(f.want, "BAD") || strings.Contains(f.want, "not decodable") {
					bad++
				}
				if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1700000000, 0), CaptureLength: len(data), Length: len(data)}, data); err != nil {
					t.Fatal(err)
				}
				want = append(want, wantLine(f, len(want)+1))
			}
			want = append(want, fmt.Sprintf("%d frames, %d bad", len(want), bad))
			path := filepath.Join(dir, fmt.Sprintf("lt%d.pcap", uint16(lt)))
			if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			status := 0
			if bad > 0 {
				status = 1
			}
			checkPcapOutput(t, path, status, want)
			tsharkAgrees(t, path, want)
		})
	}
}

// wantLine is f's expected line as frame n; a corrupted ICRC's carried
// value is left out of the comparison.
func wantLine(f pcapTestFrame, n int) string {
	if strings.Contains(f.want, "carried %s") {
		return fmt.Sprintf(strings.Replace(f.want, "(carried %s)", "(carried", 1), n)
	}
	return fmt.Sprintf(f.want, n)
}

// tsharkAgrees checks, where tshark is installed, that it dissects each
// frame of the capture at path as InfiniBand with the destination QP and
// PSN of check-pcap's line in want (and frames check-pcap does not decode
// as no InfiniBand): the test's captures are what real tools read.
func tsharkAgrees(t *testing.T, path string, want []string) {
	t.Helper()
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		return
	}
	out, err := exec.Command(tshark, "-r", path, "-T", "fields", "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	re := regexp.MustCompile(`dqp (0x[0-9a-f]+) psn (\d+)`)
	var exp []string
	for _, w := range want[:len(want)-1] {
		m := re.FindStringSubmatch(w)
		if m == nil {
			exp = append(exp, "")
		} else {
			exp = append(exp, m[1]+" "+m[2])
		}
	}
	got := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	for i := range got {
		got[i] = strings.TrimSpace(strings.ReplaceAll(got[i], "\t", " "))
	}
	if strings.Join(got, "\n") != strings.Join(exp, "\n") {
		t.Errorf("tshark's dissection of %s:\n%s\nwant\n%s", filepath.Base(path), strings.Join(got, "\n"), strings.Join(exp, "\n"))
	}
}

func checkPcapOutput(t *testing.T, path string, status int, want []string) {
	t.Helper()
	var out, errb bytes.Buffer
	if st := cli([]string{"roce", "check-pcap", path}, &out, &errb); st != status {
		t.Errorf("exit status %d, want %d (stderr %q)", st, status, errb.String())
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = got[i] == want[i] || strings.HasSuffix(want[i], "(carried") && strings.HasPrefix(got[i], want[i])
	}
	if !ok {
		t.Errorf("output\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRoceCheckPcapNg: a pcapng capture whose interfaces have different
// link types (Ethernet and Linux cooked v2) is read per interface.
func TestRoceCheckPcapNg(t *testing.T) {
	frames := pcapTestFrames(t)
	var buf bytes.Buffer
	w, err := pcapgo.NewNgWriterInterface(&buf, pcapgo.NgInterface{Name: "eth0", LinkType: layers.LinkTypeEthernet, SnapLength: 65535}, pcapgo.DefaultNgWriterOptions)
	if err != nil {
		t.Fatal(err)
	}
	any, err := w.AddInterface(pcapgo.NgInterface{Name: "any", LinkType: layers.LinkTypeLinuxSLL2, SnapLength: 65535})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i, f := range frames {
		data, ifc := f.eth, 0
		if i%2 == 1 {
			data, _ = linkFrame(layers.LinkTypeLinuxSLL2, f.eth, false)
			ifc = any
		}
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1700000000, 0), CaptureLength: len(data), Length: len(data), InterfaceIndex: ifc}, data); err != nil {
			t.Fatal(err)
		}
		want = append(want, wantLine(f, i+1))
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mixed.pcapng")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	want = append(want, fmt.Sprintf("%d frames, 2 bad", len(frames)))
	checkPcapOutput(t, path, 1, want)
	tsharkAgrees(t, path, want)
}

// TestRoceCheckPcapLinkTypeErrors: a link type check-pcap does not decode
// is a usage error; a raw IP packet of the wrong version is not decodable.
func TestRoceCheckPcapLinkTypeErrors(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	w.WriteFileHeader(65535, layers.LinkTypeIEEE802_11)
	path := filepath.Join(dir, "wifi.pcap")
	os.WriteFile(path, buf.Bytes(), 0o600)
	var out, errb bytes.Buffer
	if st := cli([]string{"roce", "check-pcap", path}, &out, &errb); st != 2 || !strings.Contains(errb.String(), "link type 105") || !strings.Contains(errb.String(), "not supported") {
		t.Errorf("802.11 capture: status %d, stderr %q", st, errb.String())
	}

	frames := pcapTestFrames(t)
	buf.Reset()
	w = pcapgo.NewWriter(&buf)
	w.WriteFileHeader(65535, layers.LinkTypeIPv4)
	v6 := frames[2].eth[14:]
	w.WritePacket(gopacket.CaptureInfo{CaptureLength: len(v6), Length: len(v6)}, v6)
	path = filepath.Join(dir, "v6in228.pcap")
	os.WriteFile(path, buf.Bytes(), 0o600)
	checkPcapOutput(t, path, 1, []string{"frame 1: not decodable: IP version 6 packet in a capture of link type 228 (raw IPv4)", "1 frames, 1 bad"})
}

// TestRoceCheckPcapGSORun: a capture on loopback or a veth shows a run the
// soft device sent with UDP_SEGMENT as one datagram; check-pcap cuts it
// into its packets and checks each with the IPv4 ID the kernel gives its
// segment, so a good run checks clean and one flipped bit is caught in its
// packet.
func TestRoceCheckPcapGSORun(t *testing.T) {
	var ibs [][]byte
	for i := range 4 {
		n := 1024
		if i == 3 {
			n = 341
		}
		p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteMiddle, PKey: 0xffff, DestQP: 0x11, PSN: uint32(100 + i)}, Payload: bytes.Repeat([]byte{byte(i)}, n)}
		ibs = append(ibs, p.Append(nil))
	}
	run, err := wire.AppendRunV2(nil, [6]byte{}, [6]byte{}, netip.MustParseAddrPort("127.0.0.1:4791"), netip.MustParseAddrPort("127.0.0.2:4791"), ibs)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(run)
	bad[14+20+8+2*len(ibs[0])+2*wire.ICRCSize+100] ^= 0x01 // in the third packet
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for _, fr := range [][]byte{run, bad} {
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1700000000, 0), CaptureLength: len(fr), Length: len(fr)}, fr); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "run.pcap")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	var want []string
	for f := 1; f <= 2; f++ {
		want = append(want, fmt.Sprintf("frame %d: UDP GSO run of 4 RoCE v2 packets", f))
		for i := range 4 {
			n, status := 1024, "icrc ok"
			if i == 3 {
				n = 341
			}
			if f == 2 && i == 2 {
				status = "icrc BAD (carried"
			}
			want = append(want, fmt.Sprintf("frame %d.%d: RoCEv2 %s dqp 0x000011 psn %d len %d %s", f, i+1, wire.RCWriteMiddle, 100+i, n, status))
		}
	}
	want = append(want, "2 frames (8 RoCE packets), 1 bad")
	checkPcapOutput(t, path, 1, want)
}
