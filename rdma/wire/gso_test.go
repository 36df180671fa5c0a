package wire

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// TestICRCv2IDDelta: the ICRC of a packet whose IPv4 ID is id equals the
// ICRC with ID 0 XOR ICRCv2IDDelta(id, length), for any contents.
func TestICRCv2IDDelta(t *testing.T) {
	for _, n := range []int{0, 3, 100, 4096} {
		p := Packet{BTH: BTH{Opcode: RCSendOnly, PKey: 0xffff, DestQP: 9, PSN: 5}, Payload: bytes.Repeat([]byte{0xa5}, n)}
		fr, _ := AppendFrameV2(nil, [6]byte{}, [6]byte{}, netip.MustParseAddrPort("10.0.0.1:7"), netip.MustParseAddrPort("10.0.0.2:4791"), p.Append(nil))
		ip, udp, ib := fr[14:34], fr[34:42], fr[42:len(fr)-ICRCSize]
		c0, err := ICRCv2(ip, udp, ib)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []uint16{1, 2, 63, 0xcbbd, 0xffff} {
			withID := bytes.Clone(ip)
			binary.BigEndian.PutUint16(withID[4:], id)
			c, _ := ICRCv2(withID, udp, ib)
			if d := ICRCv2IDDelta(20, len(ib), id); c != c0^d {
				t.Errorf("payload %d, ID %#x: ICRC %08x, ICRC(ID 0) ^ delta = %08x", n, id, c, c0^d)
			}
			if c == c0 {
				t.Errorf("payload %d, ID %#x: the ICRC does not cover the ID", n, id)
			}
		}
	}
}

// gsoCapture is a captured run (AppendRunV2) of count packets of QP 0x11
// from PSN psn, the last payload shorter.
func gsoCapture(t *testing.T, count, payload, psn int) []byte {
	t.Helper()
	var ibs [][]byte
	for i := range count {
		n := payload
		if i == count-1 {
			n = payload / 3
		}
		p := Packet{BTH: BTH{Opcode: RCWriteMiddle, PKey: 0xffff, DestQP: 0x11, PSN: uint32(psn+i) & 0xffffff}, Payload: bytes.Repeat([]byte{byte(i)}, n)}
		ibs = append(ibs, p.Append(nil))
	}
	fr, err := AppendRunV2(nil, [6]byte{}, [6]byte{}, netip.MustParseAddrPort("127.0.0.1:4791"), netip.MustParseAddrPort("127.0.0.2:4791"), ibs)
	if err != nil {
		t.Fatal(err)
	}
	return fr
}

// TestSplitGSO: a captured run is cut into its packets, each checked with
// its own ID (PSNs wrapping around included); a flipped bit is caught in
// its packet only; a plain datagram with a bad ICRC is not taken for a run.
func TestSplitGSO(t *testing.T) {
	for _, psn := range []int{100, 0xfffffe} {
		fr := gsoCapture(t, 5, 1024, psn)
		f, err := ParseFrame(fr)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Run) != 5 || f.ICRCOK() {
			t.Fatalf("PSN %d: %d packets in the run (ICRC of the whole %v), want 5", psn, len(f.Run), f.ICRCOK())
		}
		for i, p := range f.Run {
			if !p.ICRCOK() || p.Err != nil || p.Packet.BTH.PSN != uint32(psn+i)&0xffffff {
				t.Errorf("PSN %d: packet %d: ICRC ok %v, err %v, PSN %d", psn, i, p.ICRCOK(), p.Err, p.Packet.BTH.PSN)
			}
		}
		bad := bytes.Clone(fr)
		bad[len(bad)-100] ^= 0x04 // in the last packet's payload
		f, _ = ParseFrame(bad)
		for i, p := range f.Run {
			if p.ICRCOK() != (i < 4) {
				t.Errorf("PSN %d, bit flipped in packet 4: packet %d ICRC ok %v", psn, i, p.ICRCOK())
			}
		}
	}
	p := Packet{BTH: BTH{Opcode: RCSendOnly, PKey: 0xffff, DestQP: 7, PSN: 1}, Payload: make([]byte, 2000)}
	fr, _ := AppendFrameV2(nil, [6]byte{}, [6]byte{}, netip.MustParseAddrPort("1.2.3.4:1"), netip.MustParseAddrPort("5.6.7.8:4791"), p.Append(nil))
	fr[60] ^= 1
	if f, _ := ParseFrame(fr); f.ICRCOK() || len(f.Run) != 0 {
		t.Errorf("a corrupted lone packet: ICRC ok %v, run of %d", f.ICRCOK(), len(f.Run))
	}
	if s := SplitGSO(fr[14:34], fr[34:42], make([]byte, 8)); s != 0 {
		t.Errorf("SplitGSO of 8 bytes = %d", s)
	}
}
