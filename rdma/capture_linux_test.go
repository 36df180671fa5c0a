package rdma

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/rdma/qp"
	"github.com/goccl/goccl/rdma/wire"
)

// captureWhile records the Ethernet frames on interface ifname (AF_PACKET,
// both directions) while fn runs, or skips the test where it cannot.
func captureWhile(t *testing.T, ifname string, fn func()) [][]byte {
	t.Helper()
	h, err := pcapgo.NewEthernetHandle(ifname)
	if err != nil {
		t.Skipf("cannot capture on %s (AF_PACKET needs root): %v", ifname, err)
	}
	if err := h.SetCaptureLength(1 << 17); err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			d, _, err := h.ReadPacketData()
			if err != nil {
				return
			}
			frames = append(frames, bytes.Clone(d))
		}
	})
	fn()
	time.Sleep(50 * time.Millisecond) // the reader drains what the socket holds
	h.Close()
	wg.Wait()
	return frames
}

// checkFrames parses the RoCE v2 frames between the addresses a and b in
// frames: it returns the packets (a GSO run's each), the runs seen whole
// (captured before the kernel segmented them) and a line per bad packet.
func checkFrames(frames [][]byte, a, b netip.Addr) (packets, runs int, bad []string) {
	for i, fr := range frames {
		f, err := wire.ParseFrame(fr)
		if f == nil || (f.Src != a && f.Src != b) {
			continue // not RoCE v2, or another test's
		}
		if len(f.Run) > 0 {
			runs++
			for j, p := range f.Run {
				packets++
				if !p.ICRCOK() || p.Err != nil {
					bad = append(bad, fmt.Sprintf("frame %d.%d: %v carried %08x computed %08x", i, j, p.Err, p.ICRC, p.ComputedICRC))
				}
			}
			continue
		}
		packets++
		if !f.ICRCOK() || err != nil {
			bad = append(bad, fmt.Sprintf("frame %d (IPv4 ID %#04x): %v carried %08x computed %08x", i, uint16(fr[18])<<8|uint16(fr[19]), err, f.ICRC, f.ComputedICRC))
		}
	}
	return packets, runs, bad
}

// checkCapture runs an 8 MiB WRITE and READ and a SEND between devices da
// and db while capturing on ifname, and checks that every RoCE frame on
// the wire carries the ICRC a NIC computes over its real headers (the
// kernel's IPv4 ID included), that runs were seen, and that one flipped
// bit in a run is caught in its packet.
func checkCapture(t *testing.T, ifname string, da, db *Device) {
	t.Helper()
	const size = 8 << 20
	a, b := newSideOn(t, da, 2*size), newSideOn(t, db, size)
	frames := captureWhile(t, ifname, func() {
		connect(t, a, b, 14, 7)
		writeReadSend(t, a, b, size, "every frame's ICRC")
	})
	aa, ba := netip.AddrFrom16(da.GID()).Unmap(), netip.AddrFrom16(db.GID()).Unmap()
	packets, runs, bad := checkFrames(frames, aa, ba)
	t.Logf("%s: %d frames captured, %d RoCE packets, %d UDP GSO runs, %d bad", ifname, len(frames), packets, runs, len(bad))
	if len(bad) > 0 {
		t.Errorf("%d of %d packets with a bad ICRC, e.g. %s", len(bad), packets, strings.Join(bad[:min(3, len(bad))], "; "))
	}
	// AF_PACKET's socket buffer drops some of the 64 KiB runs on lo: the
	// test needs enough of them, not all.
	if packets < 100 || runs == 0 {
		t.Errorf("%d packets, %d runs: want at least 100 packets and some runs", packets, runs)
	}
	if st := db.Stats(); st.ICRCErrors != 0 {
		t.Errorf("receiver: %d ICRC errors", st.ICRCErrors)
	}
	// One bit flipped in a run's third packet: that packet alone is bad.
	for _, fr := range frames {
		f, _ := wire.ParseFrame(fr)
		if f == nil || len(f.Run) < 3 {
			continue
		}
		const ib = 14 + 20 + 8 // where the run starts in the frame
		seg := wire.SplitGSO(fr[14:34], fr[34:ib], fr[ib:])
		mod := bytes.Clone(fr)
		mod[ib+2*seg+wire.BTHSize+40] ^= 0x08
		g, _ := wire.ParseFrame(mod)
		for j, p := range g.Run {
			if p.ICRCOK() != (j != 2) {
				t.Errorf("bit flipped in packet 2 of a run: packet %d ICRC ok %v", j, p.ICRCOK())
			}
		}
		return
	}
	t.Error("no captured run of 3 or more packets to corrupt")
}

// TestCaptureLoopback: RoCE v2 between two devices on loopback addresses,
// captured on lo.
func TestCaptureLoopback(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("capturing on lo needs root (AF_PACKET)")
	}
	n := os.Getpid() % 250
	da, err := Open(fmt.Sprintf("127.79.%d.1:4791", n))
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(fmt.Sprintf("127.79.%d.2:4791", n))
	if err != nil {
		t.Fatal(err)
	}
	checkCapture(t, "lo", da, db)
}

// TestCaptureVeth: RoCE v2 across a veth pair, one device in a network
// namespace of its own, captured on the other end.
func TestCaptureVeth(t *testing.T) {
	ns, _, ifb, addrA, addrB := vethNetns(t, "gcap", 79)
	da, err := openInNetns(ns, addrA+":4791")
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(addrB + ":4791")
	if err != nil {
		t.Fatal(err)
	}
	checkCapture(t, ifb, da, db)
}

// vethNetns makes a veth pair with end A in a network namespace of its own
// (named prefix and the pid) at 10.NET.n.1/24 and end B here at
// 10.NET.n.2/24, runs the commands setup gives for A's namespace (IFA
// stands for A's interface), and removes it all at the test's end; it
// skips the test where the machine cannot.
func vethNetns(t *testing.T, prefix string, net int, setup ...[]string) (ns, ifa, ifb, addrA, addrB string) {
	t.Helper()
	ifa, ifb = vethPair(t)
	ns = fmt.Sprintf("%s%d", prefix, os.Getpid()%100000)
	n := os.Getpid()%250 + 1
	addrA, addrB = fmt.Sprintf("10.%d.%d.1", net, n), fmt.Sprintf("10.%d.%d.2", net, n)
	cmds := [][]string{{"ip", "netns", "add", ns}, {"ip", "link", "set", ifa, "netns", ns},
		{"ip", "-n", ns, "addr", "add", addrA + "/24", "dev", ifa}, {"ip", "-n", ns, "link", "set", ifa, "up"}, {"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "addr", "add", addrB + "/24", "dev", ifb}}
	for _, c := range setup {
		c = slices.Clone(c)
		for i, a := range c {
			if a == "IFA" {
				c[i] = ifa
			}
		}
		cmds = append(cmds, append([]string{"ip", "netns", "exec", ns}, c...))
	}
	for _, args := range cmds {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			exec.Command("ip", "netns", "del", ns).Run()
			t.Skipf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	return ns, ifa, ifb, addrA, addrB
}

// openInNetns opens a device whose socket lives in the network namespace
// ns: from a thread moved there (and left to die with its goroutine).
func openInNetns(ns, addr string, opts ...Option) (*Device, error) {
	type result struct {
		d   *Device
		err error
	}
	ch := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		d, err := Open(addr, opts...)
		ch <- result{d, err}
	}()
	r := <-ch
	if r.err != nil && errors.Is(r.err, os.ErrPermission) {
		return nil, fmt.Errorf("%w (needs root)", r.err)
	}
	return r.d, r.err
}

// TestDCQCNOverVeth: devices with DCQCN send ECN-capable packets; an
// nftables rule in device A's namespace marks every one of them CE (a
// congested switch), so device B sees CE, answers with CNPs, and A's QP
// cuts its rate, and the WRITE, READ and SEND still complete; B's packets
// to A, not marked, leave ECT(0) on the wire.
func TestDCQCNOverVeth(t *testing.T) {
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Skip("nft (nftables) not installed: it marks the packets CE")
	}
	ns, _, ifb, addrA, addrB := vethNetns(t, "gdcq", 78,
		[]string{nft, "add", "table", "ip", "g"},
		[]string{nft, "add", "chain", "ip", "g", "out", "{ type filter hook output priority 0; }"},
		[]string{nft, "add", "rule", "ip", "g", "out", "udp", "dport", "4791", "ip", "ecn", "ect0", "ip", "ecn", "set", "ce"})
	p := qp.DefaultDCQCN(1e9)
	da, err := openInNetns(ns, addrA+":4791", WithDCQCN(p))
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(addrB+":4791", WithDCQCN(p))
	if err != nil {
		t.Fatal(err)
	}
	const size = 1 << 20
	a, b := newSideOn(t, da, 2*size), newSideOn(t, db, size)
	frames := captureWhile(t, ifb, func() {
		connect(t, a, b, 14, 7)
		writeReadSend(t, a, b, size, "marked")
	})
	st, rate := a.qp.CCStats()
	t.Logf("B: %d packets marked CE received; A's QP: %+v, rate now %.0f MB/s", db.Stats().CEReceived, st, rate/1e6)
	// The rate itself may be back at the line rate by now (fast recovery every
	// 300 µs): the cuts counted are what shows the reaction.
	if db.Stats().CEReceived == 0 || st.CNPsReceived == 0 || st.RateCuts == 0 {
		t.Errorf("CE seen %d, A's QP %+v rate %v: want CE, CNPs and a cut", db.Stats().CEReceived, st, rate)
	}
	ect, ce := 0, 0
	for _, fr := range frames {
		if len(fr) < 34 || fr[12] != 0x08 || fr[13] != 0x00 || fr[14+9] != 17 {
			continue
		}
		switch fr[15] & 3 {
		case 2:
			ect++
		case 3:
			ce++
		}
	}
	if ect == 0 || ce == 0 {
		t.Errorf("on the wire: %d ECT(0) frames (B to A), %d CE (A to B, marked); want both", ect, ce)
	}
}
