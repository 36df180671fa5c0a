package xfer

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// frameSeeds are headers as the initiator and the target write them.
func frameSeeds() [][]byte {
	fs := []frame{
		{kind: fWrite, typ: DRAM, flags: flagCRC, crc: 0xdeadbeef, token: 1, addr: 0x7f0000001000, len: 1 << 20},
		{kind: fWrite, typ: FILE, token: 2, addr: 4096, dev: 7, len: 4096},
		{kind: fRead, typ: DRAM, token: 3, addr: 0x7f0000002000, len: 65536},
		{kind: fNotif, len: 5},
		{kind: fQP, token: 4, len: 120},
		{kind: fAck, token: 1},
		{kind: fData, flags: flagCRC, crc: 12345, token: 3, len: 65536},
		{kind: fErr, token: 2, len: 40},
		{kind: fQPInfo, token: 4, len: 118},
	}
	var out [][]byte
	for _, f := range fs {
		b := make([]byte, frameSize)
		f.encode(b)
		out = append(out, b)
	}
	return out
}

// FuzzFrame feeds headers to frame.decode: no panic; a header it accepts
// has a known kind, a payload within that kind's bound and (a request's) a
// known memory type, and encodes back to the same bytes; one it refuses is
// an ErrProtocol.
func FuzzFrame(f *testing.F) {
	for _, b := range frameSeeds() {
		f.Add(b)
	}
	bad := frameSeeds()[0]
	bad[0] = 99 // unknown kind
	f.Add(bad)
	big := frameSeeds()[3]
	big[32+3] = 1 // a notification of 16 MiB
	f.Add(big)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < frameSize {
			return // the receivers read whole headers
		}
		b = b[:frameSize]
		var fr frame
		err := fr.decode(b)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v is not an ErrProtocol", err)
			}
			return
		}
		switch fr.kind {
		case fWrite, fRead:
			if fr.len > maxChunk || (fr.typ != DRAM && fr.typ != FILE) {
				t.Fatalf("accepted %+v", fr)
			}
		case fData:
			if fr.len > maxChunk {
				t.Fatalf("accepted %+v", fr)
			}
		case fNotif, fErr, fQP, fQPInfo:
			if fr.len > maxNotif {
				t.Fatalf("accepted %+v", fr)
			}
		case fAck:
		default:
			t.Fatalf("accepted kind %d", fr.kind)
		}
		again := make([]byte, frameSize)
		fr.encode(again)
		want := bytes.Clone(b)
		want[3] = 0 // reserved: not decoded, written as 0
		if !bytes.Equal(again, want) {
			t.Fatalf("%+v encodes to %x, decoded from %x", fr, again, b)
		}
		var back frame
		if err := back.decode(again); err != nil || back != fr {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", fr, back, err)
		}
	})
}

// FuzzHello feeds connection openings to readHello: no panic; an accepted
// one names an agent, and writeHello of that name gives the bytes it was
// read from; one without the magic is an ErrProtocol.
func FuzzHello(f *testing.F) {
	for _, name := range []string{"ini", "tgt", "victim", strings.Repeat("a", maxName)} {
		var b bytes.Buffer
		writeHello(&b, name)
		f.Add(b.Bytes())
	}
	f.Add([]byte(helloMagic + "\x00"))
	f.Add([]byte("GXF0\x03abc"))
	f.Add([]byte(helloMagic + "\x05ab"))
	f.Fuzz(func(t *testing.T, b []byte) {
		name, err := readHello(bytes.NewReader(b))
		if err != nil {
			if len(b) >= 5 && string(b[:4]) != helloMagic && !errors.Is(err, ErrProtocol) {
				t.Fatalf("hello %q: error %v is not an ErrProtocol", b[:4], err)
			}
			return
		}
		if name == "" || len(name) > maxName {
			t.Fatalf("accepted name %q", name)
		}
		var again bytes.Buffer
		if err := writeHello(&again, name); err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, again.Bytes()) {
			t.Fatalf("name %q encodes to %x, read from %x", name, again.Bytes(), b)
		}
		back, err := readHello(&again)
		if err != nil || back != name {
			t.Fatalf("readHello(writeHello(%q)) = %q, %v", name, back, err)
		}
	})
}

// FuzzMetadata feeds metadata blobs to decodeMetadata: no panic; what it
// accepts is version 1 with a name, an address and valid regions, and
// survives encoding and decoding again unchanged; what it refuses is an
// ErrMetadata.
func FuzzMetadata(f *testing.F) {
	a := newAgent(f, "seed", Options{})
	f.Add(a.LocalMetadata())
	if _, err := a.RegisterDRAM(make([]byte, 4096)); err != nil {
		f.Fatal(err)
	}
	if _, _, err := a.Alloc(1 << 16); err != nil {
		f.Fatal(err)
	}
	f.Add(a.LocalMetadata())
	for _, s := range []string{`{"v":1,"name":"x","addrs":["127.0.0.1:1"],"regions":[{"t":2,"a":0,"n":512,"d":3}]}`,
		`{"v":2,"name":"x","addrs":["h:1"]}`, `{"v":1,"name":"","addrs":["h:1"]}`,
		`{"v":1,"name":"x","addrs":[]}`, `{"v":1,"name":"x","addrs":["h:1"],"regions":[{"t":1,"a":18446744073709551615,"n":2}]}`,
		`{"v":1,"name":"x","addrs":["h:1"],"regions":[{"t":9,"a":1,"n":2}]}`, `[1,2]`, `{"v":"1"}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		md, err := decodeMetadata(b)
		if err != nil {
			if !errors.Is(err, ErrMetadata) {
				t.Fatalf("error %v is not an ErrMetadata", err)
			}
			return
		}
		if md.Version != metadataVersion || md.Name == "" || len(md.Addrs) == 0 {
			t.Fatalf("accepted %+v", md)
		}
		for _, r := range md.Regions {
			if (r.Type != DRAM && r.Type != FILE) || r.Len == 0 || r.Addr+r.Len < r.Addr {
				t.Fatalf("accepted region %+v", r)
			}
		}
		again, err := json.Marshal(md)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeMetadata(again)
		if err != nil || !reflect.DeepEqual(back, md) {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", md, back, err)
		}
	})
}
