package rdma

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
)

// drainSizes reads what the sink link receives until want datagrams came
// (UDP_GRO buffers split by their segment size, as readLoop does) and
// returns their sizes in order.
func drainSizes(t *testing.T, sink *udpLink, want int) []int {
	t.Helper()
	msgs := make([]ipv4.Message, 8)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 65536)}
		msgs[i].OOB = make([]byte, 64)
	}
	sink.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var sizes []int
	for len(sizes) < want {
		n, err := sink.pc.ReadBatch(msgs, 0)
		if err != nil {
			t.Fatalf("after %d of %d datagrams: %v", len(sizes), want, err)
		}
		for _, m := range msgs[:n] {
			seg, _ := recvCmsgs(m.OOB[:m.NN])
			if seg <= 0 {
				seg = m.N
			}
			for b := m.N; b > 0; b -= min(seg, b) {
				sizes = append(sizes, min(seg, b))
			}
		}
	}
	return sizes
}

// TestUDPRuns: datagrams to one peer of one size (the last may be shorter)
// leave as one UDP_SEGMENT run and arrive as the same datagrams; a peer
// whose path refused runs gets one datagram per message; refused sorts the
// kernel's errors into per-peer refusals, no segmentation at all, and
// ordinary losses.
func TestUDPRuns(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("UDP segmentation offload is Linux's")
	}
	open := func() *udpLink {
		l, err := openUDPLink("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.close() })
		return l
	}
	l, sa, sb := open(), open(), open()
	if !l.gso {
		t.Skip("this kernel has no UDP_SEGMENT")
	}
	a, b := sa.addr, sb.addr
	queue := func(to netip.AddrPort, sizes ...int) {
		for i, n := range sizes {
			p := make([]byte, n)
			p[0] = byte(i)
			l.queue(p, 0, to)
		}
	}
	queue(a, 4128, 4112, 4112) // a WRITE's FIRST (RETH), then MIDDLEs: the shorter MIDDLE closes the run
	queue(b, 4112, 4112, 100, 4112)
	var segs []int
	for _, r := range l.txSegs[:len(l.txq)] {
		segs = append(segs, r.segs)
	}
	if fmt.Sprint(segs) != "[2 1 3 1]" {
		t.Fatalf("runs %v, want [2 1 3 1]", segs)
	}
	if n := l.flush(); n != 7 || l.runsSent != 2 {
		t.Fatalf("flush sent %d datagrams in %d runs, want 7 in 2", n, l.runsSent)
	}
	if got := fmt.Sprint(drainSizes(t, sa, 3)); got != "[4128 4112 4112]" {
		t.Errorf("peer a received %s", got)
	}
	if got := fmt.Sprint(drainSizes(t, sb, 4)); got != "[4112 4112 100 4112]" {
		t.Errorf("peer b received %s", got)
	}

	// A path that refuses runs: the queue is sent again datagram by
	// datagram for that peer, in runs for the other.
	queue(a, 4112, 4112, 4112)
	queue(b, 4112, 4112)
	if !l.refused(&net.OpError{Op: "write", Err: syscall.EMSGSIZE}, l.txSegs[0]) || !l.noGSO[a] || l.noGSO[b] || !l.gso {
		t.Fatalf("EMSGSIZE: noGSO %v, gso %v", l.noGSO, l.gso)
	}
	l.requeue(l.txq, l.txSegs[:len(l.txq)])
	if n := l.flush(); n != 5 {
		t.Fatalf("requeue sent %d datagrams, want 5", n)
	}
	if got := fmt.Sprint(drainSizes(t, sa, 3)); got != "[4112 4112 4112]" {
		t.Errorf("peer a received %s after the refusal", got)
	}
	drainSizes(t, sb, 2)
	queue(a, 4112, 4112)
	if len(l.txq) != 2 {
		t.Errorf("%d messages for a peer without runs, want 2", len(l.txq))
	}
	l.flush()

	if l.refused(syscall.ENOBUFS, udpRun{to: b, segSize: 4112}) || !l.gso {
		t.Error("ENOBUFS taken for a refusal")
	}
	if !l.refused(syscall.EINVAL, udpRun{to: b, segSize: 4112}) || !l.noGSO[b] || !l.gso {
		t.Error("EINVAL with a 4112-byte segment: want a refusal for that peer only")
	}
	if !l.refused(syscall.EIO, udpRun{to: b, segSize: 100}) || l.gso {
		t.Error("EIO: want no runs at all")
	}
}
