package transport

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzHeaderDecode checks that Header.Decode never panics on arbitrary
// bytes, that it accepts exactly the inputs of at least HeaderSize bytes
// whose integrity word matches, that an accepted header re-encodes to the
// bytes it came from (except the reserved byte 11, which Encode writes as 0,
// and anything after HeaderSize, which Decode ignores), and that any header
// built from the fuzz inputs survives Encode then Decode.
func FuzzHeaderDecode(f *testing.F) {
	for _, s := range headerSeeds() {
		h := s.h
		f.Add(s.b, h.Seq, h.Op, h.DType, h.RedOp, h.Root, h.Count, h.Bytes, h.Arrival.Rank, h.Arrival.Spread, h.Arrival.At)
	}
	f.Fuzz(func(t *testing.T, b []byte, seq uint64, op, dtype, redop uint8, root int32, count, nbytes uint64, last int32, spread uint32, at int64) {
		// Decode of arbitrary bytes.
		var h Header
		err := h.Decode(b)
		if len(b) < HeaderSize {
			if err == nil {
				t.Fatalf("Decode accepted %d bytes (< %d)", len(b), HeaderSize)
			}
		} else {
			le := binary.LittleEndian
			intact := le.Uint64(b[32:]) == headerMagic^le.Uint64(b[0:])^le.Uint64(b[16:])^le.Uint64(b[24:])^le.Uint64(b[40:])^le.Uint64(b[48:])
			if intact != (err == nil) {
				t.Fatalf("Decode(%x) = %v, integrity word intact: %v", b[:HeaderSize], err, intact)
			}
		}
		if err == nil {
			var re [HeaderSize]byte
			h.Encode(re[:])
			want := append([]byte(nil), b[:HeaderSize]...)
			want[11] = 0
			if !bytes.Equal(re[:], want) {
				t.Fatalf("re-encoding %+v:\n got %x\nwant %x", h, re, want)
			}
			// Decode looks at the first HeaderSize bytes only.
			var h2 Header
			if err := h2.Decode(b[:HeaderSize]); err != nil || h2 != h {
				t.Fatalf("Decode of the first %d bytes = %+v, %v; of all %d = %+v", HeaderSize, h2, err, len(b), h)
			}
		}

		// Encode then Decode of a header built from the inputs.
		in := Header{Seq: seq, Op: op, DType: dtype, RedOp: redop, Root: root, Count: count, Bytes: nbytes,
			Arrival: Arrival{Rank: last, Spread: spread, At: at}}
		buf := make([]byte, HeaderSize+8)
		for i := range buf { // Encode must overwrite whatever was there
			buf[i] = 0xa5
		}
		copy(buf, b)
		tail := append([]byte(nil), buf[HeaderSize:]...)
		in.Encode(buf)
		if !bytes.Equal(buf[HeaderSize:], tail) {
			t.Fatalf("Encode wrote past %d bytes", HeaderSize)
		}
		var clean [HeaderSize]byte
		in.Encode(clean[:])
		if !bytes.Equal(buf[:HeaderSize], clean[:]) {
			t.Fatalf("Encode depends on the buffer's old contents:\n got %x\nwant %x", buf[:HeaderSize], clean)
		}
		if clean[11] != 0 {
			t.Fatalf("Encode wrote %#x into the reserved byte", clean[11])
		}
		var out Header
		if err := out.Decode(clean[:]); err != nil {
			t.Fatalf("Decode(Encode(%+v)): %v", in, err)
		}
		if out != in {
			t.Fatalf("round trip: got %+v, want %+v", out, in)
		}
	})
}

// headerSeed is a named seed of FuzzHeaderDecode: bytes to decode and a
// header to round-trip. testdata/fuzz/FuzzHeaderDecode holds the same inputs
// as files, and more that the fuzzer found.
type headerSeed struct {
	name string
	b    []byte
	h    Header
}

func headerSeeds() []headerSeed {
	valid := Header{Seq: 1, Op: 2, DType: 3, RedOp: 4, Root: -1, Count: 1 << 20, Bytes: 4 << 20,
		Arrival: Arrival{Rank: 5, Spread: 3200, At: 1_767_225_600_123_456_789}}
	var enc [HeaderSize]byte
	valid.Encode(enc[:])
	reserved := enc
	reserved[11] = 0xff // Decode ignores the reserved byte
	torn := enc
	torn[20] ^= 1 // a count bit flipped in transit
	late := enc
	late[50] ^= 1  // an arrival time bit flipped in transit
	v1 := enc[:40] // a 40-byte header of version 1
	long := append(enc[:], "trailing payload"...)
	return []headerSeed{
		{"valid", enc[:], valid},
		{"valid-reserved-set", reserved[:], Header{}},
		{"torn-count", torn[:], Header{Seq: 1 << 63, Op: 255, DType: 255, RedOp: 255, Root: -1 << 31, Count: 1<<64 - 1, Bytes: 1<<64 - 1,
			Arrival: Arrival{Rank: -1 << 31, Spread: 1<<32 - 1, At: -1 << 63}}},
		{"torn-arrival", late[:], Header{Arrival: Arrival{Rank: 1<<31 - 1, At: 1<<63 - 1}}},
		{"version-1", v1, Header{Seq: 3, Arrival: Arrival{Rank: -1, Spread: 1, At: -1}}},
		{"valid-trailing", long, Header{Seq: 7, Op: 1, Root: 3, Count: 5, Bytes: 20}},
		{"short", enc[:HeaderSize-1], Header{Seq: 42, Op: 9, DType: 8, RedOp: 7, Root: 1<<31 - 1, Bytes: 1}},
		{"empty", []byte{}, Header{Root: -1}},
		{"zeros", make([]byte, HeaderSize), Header{}},
	}
}
