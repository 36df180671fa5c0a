package rdma

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/rdma/qp"
	"github.com/goccl/goccl/rdma/wire"
)

// TestSourcePorts: a device opened WithSourcePorts(4) sends each queue
// pair's packets, requests and acknowledgements, from the source port
// QPSource chose, to the peer device's port, with the ICRC those headers
// give; the peer learns the port from ConnInfo (QP.Connect) and takes the
// queue pair's packets. Captured on lo: four pairs of queue pairs between
// two such devices make four flows each way, every packet's ICRC right.
// A queue pair on a source its peer was not told of is refused as a
// foreign source, so a stale or spoofed port gets nowhere.
func TestSourcePorts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("capturing on lo needs root (AF_PACKET)")
	}
	const n, size = 4, 64 << 10 // few packets: the capture on lo drops some under bursts
	net := os.Getpid()%250 + 1
	da, err := Open(fmt.Sprintf("127.78.%d.1:4791", net), WithSourcePorts(n))
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(fmt.Sprintf("127.78.%d.2:4791", net), WithSourcePorts(n))
	if err != nil {
		t.Fatal(err)
	}
	if da.Sources() != n {
		t.Fatalf("Sources() = %d, want %d", da.Sources(), n)
	}
	side := func(d *Device, src int) *side {
		s := newSideOn(t, d, 2*size)
		s.qp.Destroy()
		if s.qp, err = s.pd.CreateQP(s.cq, s.cq, QPSource(src)); err != nil {
			t.Fatal(err)
		}
		return s
	}
	var want [2][]uint16 // the source ports of a's and of b's queue pairs
	frames := captureWhile(t, "lo", func() {
		for k := range n {
			a, b := side(da, k), side(db, n-1-k)
			connectAll(t, a, b)
			want[0] = append(want[0], a.qp.Source().Port())
			want[1] = append(want[1], b.qp.Source().Port())
			writeReadSend(t, a, b, size, fmt.Sprintf("queue pair %d", k))
			time.Sleep(20 * time.Millisecond) // the capture's reader drains its socket (a burst overflows it)
		}
	})
	for i, w := range want {
		if slices.Sort(w); len(slices.Compact(slices.Clone(w))) != n {
			t.Fatalf("device %d's queue pairs send from ports %v: want %d different", i, w, n)
		}
	}
	if !slices.Contains(want[0], 4791) {
		t.Errorf("source ports %v: want the device's own among them", want[0])
	}
	aa, ba := netip.AddrFrom16(da.GID()).Unmap(), netip.AddrFrom16(db.GID()).Unmap()
	packets, _, bad := checkFrames(frames, aa, ba)
	if len(bad) > 0 {
		t.Errorf("%d of %d packets with a bad ICRC, e.g. %s", len(bad), packets, strings.Join(bad[:min(3, len(bad))], "; "))
	}
	var got [2][]uint16
	for _, fr := range frames {
		f, _ := wire.ParseFrame(fr)
		if f == nil || f.DstPort != 4791 {
			continue
		}
		for i, src := range []netip.Addr{aa, ba} {
			if f.Src == src && !slices.Contains(got[i], f.SrcPort) {
				got[i] = append(got[i], f.SrcPort)
			}
		}
	}
	for i := range got {
		slices.Sort(got[i])
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("device %d's packets came from ports %v, want %v", i, got[i], want[i])
		}
	}
	t.Logf("%d packets; a's source ports %v, b's %v", packets, got[0], got[1])
	for _, d := range []*Device{da, db} {
		if st := d.Stats(); st.ForeignSource != 0 || st.ICRCErrors != 0 {
			t.Errorf("device %v: %+v", d.Addr(), st)
		}
	}

	// A queue pair whose peer believes it sends from the device's own
	// port: its WRITE is refused.
	a, b := side(da, 1), side(db, 0)
	ai, bi := a.qp.LocalInfo(nil), b.qp.LocalInfo(nil)
	ai.SrcPort = 0
	o := ConnectOptions{Access: AccessRemoteWrite, Timeout: 8, RetryCnt: 1}
	if err := a.qp.Connect(ai, bi, o); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(bi, ai, o); err != nil {
		t.Fatal(err)
	}
	copy(a.buf, "stale port")
	if err := a.qp.PostSend(SendWR{ID: 1, Opcode: qp.WRWrite, MR: a.mr, Length: 10, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.cq, 1)[0]; wc.Status != qp.StatusRetryExcErr {
		t.Errorf("a WRITE from a port the peer was not told of: %v, want %v", wc.Status, qp.StatusRetryExcErr)
	}
	quiesce(db)
	if st := db.Stats(); st.ForeignSource == 0 || string(b.buf[:10]) == "stale port" {
		t.Errorf("the WRITE landed or was not counted as foreign: %+v", st)
	}
}
