package wire

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"os"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"
)

func readPcap(t testing.TB, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return frames
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, bytes.Clone(data))
	}
}

// TestPublishedVectors decodes scapy's published RoCE frames: real Mellanox
// v1 frames and v2 over IPv4 and IPv6 pass the ICRC; the copy of frame 1
// with a flipped ICRC byte fails it.
func TestPublishedVectors(t *testing.T) {
	frames := readPcap(t, "testdata/roce_icrc_published_vectors.pcap")
	want := []struct {
		version int
		op      Opcode
		qp, psn uint32
		ok      bool
		payload int
	}{
		{2, UCSendOnly, 0xd3, 0xcf1710, true, 18},
		{1, RCWriteOnly, 0x10a, 0xa788bc, true, 5},
		{1, RCAcknowledge, 0x109, 0xa788c0, true, 0},
		{2, UCSendOnly, 0xd3, 0xcf1710, true, 18},
		{2, UCSendOnly, 0xd3, 0xcf1710, false, 18},
	}
	if len(frames) != len(want) {
		t.Fatalf("%d frames, want %d", len(frames), len(want))
	}
	for i, w := range want {
		f, err := ParseFrame(frames[i])
		if err != nil {
			t.Fatalf("frame %d: %v", i+1, err)
		}
		p := &f.Packet
		t.Logf("frame %d: RoCE v%d %v QP 0x%x PSN %d payload %d icrc %08x/%08x", i+1, f.Version, p.BTH.Opcode, p.BTH.DestQP, p.BTH.PSN, len(p.Payload), f.ICRC, f.ComputedICRC)
		if f.Version != w.version || p.BTH.Opcode != w.op || p.BTH.DestQP != w.qp || p.BTH.PSN != w.psn || f.ICRCOK() != w.ok || len(p.Payload) != w.payload {
			t.Errorf("frame %d: v%d %v qp 0x%x psn 0x%x icrc ok %v; want v%d %v qp 0x%x psn 0x%x ok %v",
				i+1, f.Version, p.BTH.Opcode, p.BTH.DestQP, p.BTH.PSN, f.ICRCOK(), w.version, w.op, w.qp, w.psn, w.ok)
		}
		// Re-encoding the decoded packet gives back the frame's bytes.
		ib := p.Append(nil)
		if !bytes.Contains(frames[i], ib) {
			t.Errorf("frame %d: re-encoded packet %x not found in the frame", i+1, ib)
		}
	}
}

// TestDerivedVectors: the generated v2 frames (RC WRITE ONLY, ACK,
// COMPARE_SWAP, ATOMIC ACK, RNR NAK, PSN sequence NAK) decode with the
// fields they were built with.
func TestDerivedVectors(t *testing.T) {
	frames := readPcap(t, "testdata/roce_derived_vectors.pcap")
	if len(frames) != 6 {
		t.Fatalf("%d frames, want 6", len(frames))
	}
	var ps []*Frame
	for i, fr := range frames {
		f, err := ParseFrame(fr)
		if err != nil {
			t.Fatalf("frame %d: %v", i+1, err)
		}
		if !f.ICRCOK() {
			t.Errorf("frame %d: ICRC %08x, computed %08x", i+1, f.ICRC, f.ComputedICRC)
		}
		t.Logf("frame %d: %v QP 0x%x PSN %d AETH %v RETH %+v atomic %+v", i+1, f.Packet.BTH.Opcode, f.Packet.BTH.DestQP, f.Packet.BTH.PSN, f.Packet.AETH.Syndrome, f.Packet.RETH, f.Packet.Atomic)
		ps = append(ps, f)
	}
	w := ps[0].Packet
	if w.BTH.Opcode != RCWriteOnly || w.RETH.DMALength != uint32(len(w.Payload)) || string(w.Payload) != "RDMAGO!" {
		t.Errorf("write: %v len %d payload %q", w.BTH.Opcode, w.RETH.DMALength, w.Payload)
	}
	if a := ps[1].Packet; a.BTH.Opcode != RCAcknowledge || !a.AETH.Syndrome.IsACK() {
		t.Errorf("ack: %v %v", a.BTH.Opcode, a.AETH.Syndrome)
	}
	if c := ps[2].Packet; c.BTH.Opcode != RCCompareSwap || c.Atomic.SwapAdd != 0x1111111111111111 || c.Atomic.Compare != 0x2222222222222222 {
		t.Errorf("cmp_swap: %+v", c.Atomic)
	}
	if a := ps[3].Packet; a.BTH.Opcode != RCAtomicAcknowledge || a.AtomicAck != 0x2222222222222222 {
		t.Errorf("atomic ack: %x", a.AtomicAck)
	}
	if r := ps[4].Packet.AETH.Syndrome; !r.IsRNRNAK() {
		t.Errorf("frame 5: %v, want an RNR NAK", r)
	}
	if n := ps[5].Packet.AETH.Syndrome; !n.IsNAK() || n.Value() != NAKPSNSequenceError {
		t.Errorf("frame 6: %v, want a PSN sequence error NAK", n)
	}
}

// TestRoundTrip encodes every known opcode with a payload of every pad
// length into a v2 frame (IPv4 and IPv6), decodes it, and compares.
func TestRoundTrip(t *testing.T) {
	src4, dst4 := netip.MustParseAddrPort("10.0.0.1:49152"), netip.MustParseAddrPort("10.0.0.2:4791")
	src6, dst6 := netip.MustParseAddrPort("[fd00::1]:49152"), netip.MustParseAddrPort("[fd00::2]:4791")
	n := 0
	for op := 0; op < 256; op++ {
		hdrs, ok := Opcode(op).Headers()
		if !ok {
			continue
		}
		n++
		for plen := 0; plen < 6; plen++ {
			p := Packet{
				BTH:       BTH{Opcode: Opcode(op), SE: plen%2 == 0, PKey: 0xffff, DestQP: 0xabcdef, AckReq: true, PSN: 0xfffffe, TVer: 0},
				RETH:      RETH{VA: 0x1122334455667788, RKey: 0xdeadbeef, DMALength: 4096},
				AETH:      AETH{Syndrome: NAK(NAKRemoteAccessError), MSN: 0x123456},
				Imm:       0xcafef00d,
				InvRKey:   0x0badf00d,
				Atomic:    AtomicETH{VA: 8, RKey: 9, SwapAdd: 10, Compare: 11},
				AtomicAck: 0x99,
				DETH:      DETH{QKey: 0x11111111, SrcQP: 0x222222},
			}
			if hdrs&hasPayload != 0 {
				p.Payload = bytes.Repeat([]byte{0x5a}, plen)
			} else if plen > 0 {
				continue
			}
			ib := p.Append(nil)
			if len(ib) != p.Len() || len(ib)%4 != 0 {
				t.Fatalf("%v: encoded %d bytes, Len %d", Opcode(op), len(ib), p.Len())
			}
			for _, ends := range [][2]netip.AddrPort{{src4, dst4}, {src6, dst6}} {
				fr, err := AppendFrameV2(nil, [6]byte{2}, [6]byte{3}, ends[0], ends[1], ib)
				if err != nil {
					t.Fatal(err)
				}
				f, err := ParseFrame(fr)
				if err != nil {
					t.Fatalf("%v payload %d: %v", Opcode(op), plen, err)
				}
				if !f.ICRCOK() || f.Src != ends[0].Addr() || f.DstPort != 4791 {
					t.Fatalf("%v: icrc ok %v src %v port %d", Opcode(op), f.ICRCOK(), f.Src, f.DstPort)
				}
				if got := f.Packet.Append(nil); !bytes.Equal(got, ib) {
					t.Fatalf("%v payload %d: round trip\n got %x\nwant %x", Opcode(op), plen, got, ib)
				}
				// Any single flipped bit in the IBA packet fails the ICRC.
				bad := bytes.Clone(fr)
				bad[len(bad)-ICRCSize-1] ^= 1
				if f, err := ParseFrame(bad); err == nil && f.ICRCOK() {
					t.Fatalf("%v: flipped bit passed the ICRC", Opcode(op))
				}
			}
			sgid, dgid := LinkLocalGID([6]byte{2, 0, 0, 0, 0, 1}), LinkLocalGID([6]byte{2, 0, 0, 0, 0, 2})
			fr, err := AppendFrameV1(nil, [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}, sgid, dgid, ib)
			if err != nil {
				t.Fatal(err)
			}
			f, err := ParseFrame(fr)
			if err != nil {
				t.Fatalf("v1 %v payload %d: %v", Opcode(op), plen, err)
			}
			if f.Version != 1 || !f.ICRCOK() || f.Src.As16() != sgid || f.Dst.As16() != dgid || f.GRH.HopLimit != 1 {
				t.Fatalf("v1 %v: version %d icrc ok %v src %v dst %v", Opcode(op), f.Version, f.ICRCOK(), f.Src, f.Dst)
			}
			if got := f.Packet.Append(nil); !bytes.Equal(got, ib) {
				t.Fatalf("v1 %v payload %d: round trip\n got %x\nwant %x", Opcode(op), plen, got, ib)
			}
			fr[len(fr)-ICRCSize-1] ^= 1
			if f, err := ParseFrame(fr); err == nil && f.ICRCOK() {
				t.Fatalf("v1 %v: flipped bit passed the ICRC", Opcode(op))
			}
		}
	}
	if n != 23+12+2+1 { // RC 0x00-0x14, 0x16, 0x17; UC 0x20-0x2b; UD 0x64, 0x65; CNP
		t.Errorf("%d known opcodes", n)
	}
}

// TestICRCInvariantFields: the fields routers and switches change (TTL,
// ECN bits, FECN/BECN) do not change the ICRC.
func TestICRCInvariantFields(t *testing.T) {
	p := Packet{BTH: BTH{Opcode: RCSendOnly, PKey: 0xffff, DestQP: 7, PSN: 1}, Payload: []byte("abcd")}
	fr, _ := AppendFrameV2(nil, [6]byte{}, [6]byte{}, netip.MustParseAddrPort("1.2.3.4:1"), netip.MustParseAddrPort("5.6.7.8:4791"), p.Append(nil))
	f0, err := ParseFrame(fr)
	if err != nil {
		t.Fatal(err)
	}
	mod := bytes.Clone(fr)
	mod[14+1] = 0x03       // ECN CE
	mod[14+8] = 3          // TTL
	mod[14+20+8+4] |= 0xc0 // FECN, BECN
	f1, err := ParseFrame(mod)
	if err != nil {
		t.Fatal(err)
	}
	if f1.ComputedICRC != f0.ComputedICRC || !f1.ICRCOK() || !f1.Packet.BTH.FECN || !f1.Packet.BTH.BECN {
		t.Errorf("ICRC changed with router-modified fields: %08x vs %08x", f1.ComputedICRC, f0.ComputedICRC)
	}
}

func TestSyndrome(t *testing.T) {
	for _, tc := range []struct {
		s    Syndrome
		want string
	}{{ACK(CreditsInvalid), "ACK credits 31"}, {RNRNAK(14), "RNR NAK timer 14"}, {NAK(NAKPSNSequenceError), "NAK PSN sequence error"},
		{NAK(NAKRemoteAccessError), "NAK remote access error"}, {0x40, "reserved syndrome 0x40"}} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("%#x: %q, want %q", uint8(tc.s), got, tc.want)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	var p Packet
	for name, b := range map[string][]byte{
		"short":           {0x04, 0},
		"unknown opcode":  append([]byte{0x15}, make([]byte, 11)...),
		"truncated RETH":  append([]byte{0x0a}, make([]byte, 15)...),
		"ack with data":   append([]byte{0x11}, make([]byte, 19)...),
		"pad over length": append([]byte{0x04, 0x30}, make([]byte, 10)...),
		"unaligned":       append([]byte{0x04, 0}, make([]byte, 13)...),
	} {
		if err := p.Decode(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// TestLinkLocalGID: a MAC's GID is the EUI-64 link-local address the kernel
// gives the interface (RFC 4291), and it maps back to the MAC.
func TestLinkLocalGID(t *testing.T) {
	mac := [6]byte{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	gid := LinkLocalGID(mac)
	if want := netip.MustParseAddr("fe80::5054:ff:fe12:3456"); netip.AddrFrom16(gid) != want {
		t.Fatalf("GID %v, want %v", netip.AddrFrom16(gid), want)
	}
	back, ok := MACFromLinkLocalGID(gid)
	if !ok || back != mac {
		t.Fatalf("MAC back %x %v", back, ok)
	}
	for _, s := range []string{"::ffff:10.0.0.1", "fe80::1", "fe80:0:0:1:5054:ff:fe12:3456", "fd00::5054:ff:fe12:3456"} {
		if _, ok := MACFromLinkLocalGID(netip.MustParseAddr(s).As16()); ok {
			t.Errorf("%s mapped to a MAC", s)
		}
	}
}
