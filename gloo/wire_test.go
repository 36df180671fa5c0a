package gloo

import (
	"bytes"
	"encoding/binary"
	"net"
	"strings"
	"testing"
)

func TestAddrRoundTrip(t *testing.T) {
	for _, c := range []struct {
		ip   net.IP
		port int
	}{{net.IPv4(10, 1, 2, 3), 29500}, {net.ParseIP("fe80::1"), 1}, {net.IPv4(127, 0, 0, 1), 65535}} {
		b := encodeAddr(c.ip, c.port)
		if len(b) != addrLen {
			t.Fatalf("%d bytes", len(b))
		}
		a, err := decodeAddr(b)
		if err != nil {
			t.Fatal(err)
		}
		if !a.ip.Equal(c.ip) || a.port != c.port || a.seq != -1 {
			t.Errorf("%v:%d decoded as %v seq %d", c.ip, c.port, a, a.seq)
		}
	}
	// The layout of struct sockaddr_in: family 2 (host order), port in
	// network order, then the address.
	b := encodeAddr(net.IPv4(192, 168, 0, 9), 0x1234)
	if !bytes.Equal(b[:8], []byte{2, 0, 0x12, 0x34, 192, 168, 0, 9}) || binary.LittleEndian.Uint64(b[128:]) != 1<<64-1 {
		t.Errorf("layout % x ... seq % x", b[:8], b[128:])
	}
	for name, b := range map[string][]byte{
		"short":  make([]byte, 135),
		"family": make([]byte, 136),
		"port 0": append([]byte{2, 0, 0, 0, 1, 2, 3, 4}, make([]byte, 128)...),
	} {
		if _, err := decodeAddr(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestConnects: gloo's rule (tcp::Pair::connect): compare the IP bytes, then
// the raw sin_port values as a little-endian host reads them; the larger
// side connects. 0x1234 reads as 0x3412 and 0x1300 as 0x0013, so the side
// on port 0x1234 (4660) connects to the one on 0x1300 (4864) although its
// port number is lower.
func TestConnects(t *testing.T) {
	addr := func(ip net.IP, port int) pairAddr {
		a, err := decodeAddr(encodeAddr(ip, port))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	lo := net.IPv4(127, 0, 0, 1)
	for _, c := range []struct {
		self, peer pairAddr
		want       bool
	}{
		{addr(lo, 0x1234), addr(lo, 0x1300), true},
		{addr(lo, 0x1300), addr(lo, 0x1234), false},
		{addr(lo, 0x0100), addr(lo, 0x0001), false}, // 0x0001 reads as 0x0100 > 0x0001
		{addr(net.IPv4(10, 0, 0, 2), 1), addr(net.IPv4(10, 0, 0, 1), 65535), true},
		{addr(net.IPv4(10, 0, 0, 1), 65535), addr(net.IPv4(10, 0, 0, 2), 1), false},
	} {
		got, err := connects(c.self, c.peer)
		if err != nil || got != c.want {
			t.Errorf("connects(%v, %v) = %v, %v; want %v", c.self, c.peer, got, err, c.want)
		}
		// Exactly one side connects.
		other, _ := connects(c.peer, c.self)
		if other == got {
			t.Errorf("%v and %v both decide %v", c.self, c.peer, got)
		}
	}
	if _, err := connects(addr(lo, 5), addr(lo, 5)); err == nil {
		t.Error("same address: no error")
	}
	if _, err := connects(addr(lo, 5), addr(net.ParseIP("::1"), 5)); err == nil || !strings.Contains(err.Error(), "family") {
		t.Errorf("mixed families: %v", err)
	}
}

// TestExtractAddr: rank 2 of 4 publishes addresses for ranks 0, 1, 3 in
// that order.
func TestExtractAddr(t *testing.T) {
	var all []byte
	for _, peer := range []int{0, 1, 3} {
		all = append(all, encodeAddr(net.IPv4(10, 0, 0, byte(peer)), 1000+peer)...)
	}
	for _, me := range []int{0, 1, 3} {
		a, err := extractAddr(all, 2, me, 4)
		if err != nil || a.port != 1000+me {
			t.Errorf("rank %d: %v %v", me, a, err)
		}
	}
	if _, err := extractAddr(all[:200], 2, 0, 4); err == nil {
		t.Error("short list: no error")
	}
}

func TestPreamble(t *testing.T) {
	var b [preambleLen]byte
	p := preamble{nbytes: preambleLen + 5, opcode: opSendUnboundBuffer, slot: slotOf(allreduceSlotPrefix, 3), length: 5}
	p.put(b[:])
	q, err := parsePreamble(b[:], 1<<20)
	if err != nil || q != p {
		t.Fatalf("%+v %v", q, err)
	}
	if q.slot != 0x04000000_03000000 {
		t.Errorf("slot %#x", q.slot)
	}
	bad := []preamble{
		{nbytes: preambleLen + 4, opcode: opSendUnboundBuffer, length: 5},
		{nbytes: preambleLen + 1<<21, opcode: opSendUnboundBuffer, length: 1 << 21},
		{nbytes: preambleLen + 1, opcode: opNotifyRecvReady, length: 1},
		{nbytes: preambleLen, opcode: opSendBuffer},
		{nbytes: preambleLen, opcode: 9},
	}
	for _, p := range bad {
		p.put(b[:])
		if _, err := parsePreamble(b[:], 1<<20); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
}

func FuzzPreamble(f *testing.F) {
	var b [preambleLen]byte
	(&preamble{nbytes: preambleLen, opcode: opNotifySendReady, slot: 7, length: 9}).put(b[:])
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := parsePreamble(in, 1<<20)
		if err != nil {
			return
		}
		if p.opcode == opSendUnboundBuffer && (p.length > 1<<20 || p.nbytes != preambleLen+p.length) {
			t.Fatalf("accepted %+v", p)
		}
		var out [preambleLen]byte
		p.put(out[:])
		if !bytes.Equal(out[:], in[:preambleLen]) {
			t.Fatalf("round trip % x -> % x", in[:preambleLen], out)
		}
	})
}

func FuzzAddr(f *testing.F) {
	f.Add(encodeAddr(net.IPv4(127, 0, 0, 1), 29500))
	f.Add(encodeAddr(net.ParseIP("::1"), 1))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := decodeAddr(in)
		if err != nil {
			return
		}
		if a.port == 0 || (len(a.ip) != 4 && len(a.ip) != 16) {
			t.Fatalf("accepted %v", a)
		}
	})
}
