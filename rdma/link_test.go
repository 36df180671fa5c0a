package rdma

import (
	"net/netip"
	"runtime"
	"testing"
)

// TestUDPRuns: datagrams to one peer of one size (the last may be shorter)
// queue as one UDP_SEGMENT run; a shorter one closes the run; a peer whose
// path refused runs gets one datagram per message; everything is sent.
func TestUDPRuns(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("UDP segmentation offload is Linux's")
	}
	l, err := openUDPLink("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	sink, err := openUDPLink("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.close()
	if !l.gso {
		t.Skip("this kernel has no UDP_SEGMENT")
	}
	sink2, err := openUDPLink("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sink2.close()
	a, b := sink.addr, sink2.addr
	pkt := func(n int) []byte { return make([]byte, n) }
	l.queue(pkt(4128), a) // a WRITE's FIRST (RETH)...
	l.queue(pkt(4112), a) // ...MIDDLE: shorter, closes the run
	l.queue(pkt(4112), a)
	l.queue(pkt(4112), b) // another peer: a new run
	l.queue(pkt(4112), b)
	l.queue(pkt(100), b) // LAST: shorter, closes
	l.queue(pkt(4112), b)
	var segs []int
	for _, r := range l.txSegs[:len(l.txq)] {
		segs = append(segs, r.segs)
	}
	if len(segs) != 4 || segs[0] != 2 || segs[1] != 1 || segs[2] != 3 || segs[3] != 1 {
		t.Fatalf("runs %v, want [2 1 3 1]", segs)
	}
	if n := l.flush(); n != 7 {
		t.Fatalf("flush sent %d datagrams, want 7", n)
	}
	l.noGSO = map[netip.AddrPort]bool{a: true}
	for range 4 {
		l.queue(pkt(4112), a)
	}
	l.queue(pkt(4112), b)
	l.queue(pkt(4112), b)
	if len(l.txq) != 5 {
		t.Fatalf("%d messages, want 4 for the peer without runs and 1 run for the other", len(l.txq))
	}
	if n := l.flush(); n != 6 {
		t.Fatalf("flush sent %d datagrams, want 6", n)
	}
}
