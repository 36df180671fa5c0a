package collnet

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// helloSeeds are the openings and replies client.go and node.go write.
func helloSeeds() [][]byte {
	job := JobID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	hs := []hello{
		{kind: kindAttach, job: job, rank: 3, size: 8, flags: flagRoCE},
		{kind: kindRegister, rank: -1, fanin: 4, addr: "10.0.0.2:7777"},
		{status: replyOK, flags: flagRoCE},
		{status: replyError, addr: "job full: 9 ranks for a fan-in of 8"},
		{status: replyRedirect, addr: "10.0.0.3:7777", index: 2, group: 1, size: 4},
		{kind: kindAttach, job: job, rank: -1, index: 1, group: 2, upIndex: 1, upGroup: 2, addr: strings.Repeat("x", helloSize-56)},
	}
	var out [][]byte
	for i := range hs {
		var b bytes.Buffer
		writeHello(&b, &hs[i])
		out = append(out, b.Bytes())
	}
	return out
}

// FuzzHello feeds openings to readHello: no panic; one it accepts encodes
// back to the same fields (decode(encode(h)) == h, and encode(h) agrees
// with the input on every byte decode reads); one without the magic or
// with an address past the hello's end is refused.
func FuzzHello(f *testing.F) {
	for _, b := range helloSeeds() {
		f.Add(b)
	}
	bad := helloSeeds()[1]
	bad[52] = 201 // an address running past the hello
	f.Add(bad)
	f.Add(make([]byte, helloSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := readHello(bytes.NewReader(b))
		if len(b) >= helloSize {
			if m := binary.LittleEndian.Uint32(b); (m != magic || int(b[52]) > helloSize-56) != (err != nil) {
				t.Fatalf("magic %#x, address of %d bytes: error %v", m, b[52], err)
			}
		}
		if err != nil {
			return
		}
		var enc [helloSize]byte
		h.encode(enc[:])
		// Bytes decode ignores: 7, 53-55 and those after the address.
		read := func(b []byte) []byte {
			c := bytes.Clone(b[:56+int(b[52])])
			c[7], c[53], c[54], c[55] = 0, 0, 0, 0
			return c
		}
		if !bytes.Equal(read(enc[:]), read(b)) {
			t.Fatalf("%+v encodes to %x, decoded from %x", h, enc[:], b[:helloSize])
		}
		var back hello
		if err := back.decode(enc[:]); err != nil || back != h {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", h, back, err)
		}
	})
}

// FuzzOpHeader feeds operation headers to opHeader.decode: no panic, the
// header prints, and it encodes back to the bytes it was read from (the
// 13 bytes after elem are padding, written as zeros).
func FuzzOpHeader(f *testing.F) {
	for _, o := range []opHeader{{seq: 1, bytes: 4 << 20, dtype: 7, op: 0, elem: 4}, {seq: 1 << 40, bytes: 3, dtype: 255, op: 200, elem: 1}} {
		b := make([]byte, opSize)
		o.encode(b)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < opSize {
			return // the nodes read whole headers
		}
		b = b[:opSize]
		var o opHeader
		o.decode(b)
		_ = o.String()
		enc := make([]byte, opSize)
		o.encode(enc)
		want := bytes.Clone(b)
		clear(want[19:])
		if !bytes.Equal(enc, want) {
			t.Fatalf("%+v encodes to %x, decoded from %x", o, enc, b)
		}
		var back opHeader
		back.decode(enc)
		if back != o {
			t.Fatalf("decode(encode(%+v)) = %+v", o, back)
		}
	})
}
