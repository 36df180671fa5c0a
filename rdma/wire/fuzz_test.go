package wire

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzParseFrame: arbitrary frames never panic; a frame that decodes
// re-encodes (as v2 over the same addresses, or as its IBA packet) to a
// packet that decodes to the same fields.
func FuzzParseFrame(f *testing.F) {
	for _, path := range []string{"testdata/roce_icrc_published_vectors.pcap", "testdata/roce_derived_vectors.pcap"} {
		for _, fr := range readPcap(f, path) {
			f.Add(fr)
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		fr, err := ParseFrame(frame)
		if err != nil {
			return
		}
		checkReencode(t, &fr.Packet)
	})
}

// FuzzPacketDecode: arbitrary IBA packets (BTH onwards) never panic, and
// decoded packets survive an encode/decode round trip.
func FuzzPacketDecode(f *testing.F) {
	for _, path := range []string{"testdata/roce_icrc_published_vectors.pcap", "testdata/roce_derived_vectors.pcap"} {
		for _, frame := range readPcap(f, path) {
			if fr, err := ParseFrame(frame); err == nil {
				f.Add(fr.Packet.Append(nil))
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		if p.Decode(b) != nil {
			return
		}
		if len(p.Payload) > len(b) {
			t.Fatalf("payload of %d bytes from a %d-byte packet", len(p.Payload), len(b))
		}
		checkReencode(t, &p)
	})
}

func checkReencode(t *testing.T, p *Packet) {
	t.Helper()
	enc := p.Append(nil)
	if len(enc) != p.Len() {
		t.Fatalf("Append wrote %d bytes, Len says %d", len(enc), p.Len())
	}
	var q Packet
	if err := q.Decode(enc); err != nil {
		t.Fatalf("re-encoded packet does not decode: %v (%x)", err, enc)
	}
	a, b := *p, q
	a.Payload, b.Payload = nil, nil
	if !reflect.DeepEqual(a, b) || !bytes.Equal(p.Payload, q.Payload) {
		t.Fatalf("round trip changed the packet:\n%+v\n%+v", *p, q)
	}
}
