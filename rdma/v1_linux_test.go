package rdma

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goccl/goccl/rdma/qp"
	"github.com/goccl/goccl/rdma/wire"
)

var vethSeq int

// vethPair creates a veth pair in this network namespace and returns its
// two ends, or skips the test where that cannot be done (not root, no ip).
func vethPair(t *testing.T) (string, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("RoCE v1 needs root (AF_PACKET) and a veth pair")
	}
	ipCmd, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("ip (iproute2) not installed")
	}
	vethSeq++ // a pair of names per test: a deleted pair can linger a moment
	a, b := fmt.Sprintf("gv1a%d-%d", os.Getpid()%100000, vethSeq), fmt.Sprintf("gv1b%d-%d", os.Getpid()%100000, vethSeq)
	for _, args := range [][]string{{"link", "add", a, "type", "veth", "peer", "name", b}, {"link", "set", a, "up"}, {"link", "set", b, "up"}} {
		if out, err := exec.Command(ipCmd, args...).CombinedOutput(); err != nil {
			exec.Command(ipCmd, "link", "del", a).Run()
			t.Skipf("cannot create a veth pair: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { // either end takes the pair with it (b, when a was moved to a namespace)
		exec.Command(ipCmd, "link", "del", a).Run()
		exec.Command(ipCmd, "link", "del", b).Run()
	})
	return a, b
}

// TestRoCEv1OverVeth: two RoCE v1 devices on the two ends of a veth pair
// (raw Ethernet frames, Ethertype 0x8915): 4 MiB RDMA WRITE and READ back
// through a link dropping, duplicating, reordering and corrupting 1 % of
// frames and a SEND with immediate; all data checked, the corrupted frames
// caught by the v1 ICRC; a v2 GID and a path MTU past the interface's are
// refused.
func TestRoCEv1OverVeth(t *testing.T) {
	ifa, ifb := vethPair(t)
	da, err := OpenV1(ifa, WithFaults(Faults{Drop: 0.01, Duplicate: 0.01, Reorder: 0.01, Corrupt: 0.01, Seed: 5}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close() })
	var capture bytes.Buffer
	db, err := OpenV1(ifb, WithPcap(&capture))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if da.Version() != 1 || da.ActiveMTU() != 1024 {
		t.Fatalf("version %d, active MTU %d on a 1500-byte veth; want 1 and 1024", da.Version(), da.ActiveMTU())
	}
	if _, ok := wire.MACFromLinkLocalGID(da.GID()); !ok {
		t.Fatalf("GID %x is not link-local", da.GID())
	}
	const size = 4 << 20
	a, b := newSideOn(t, da, 2*size), newSideOn(t, db, size)
	// The retry timer only has to catch tail losses here (the faults in the
	// stream are caught by sequence NAKs): 1.07 s, because under the race
	// detector on a loaded machine the receiver falls seconds behind, frames
	// queue in its socket, and a shorter timer (268 ms failed in CI) sends
	// the 256-packet window again and again, deepening that queue until
	// retry_cnt timeouts pass without progress.
	connect(t, a, b, 18, 7)
	writeReadSend(t, a, b, size, "over raw ethernet")
	st, sa := db.Stats(), a.qp.Stats()
	t.Logf("receiver: %d packets, %d ICRC errors; requester: %d retransmitted", st.PacketsReceived, st.ICRCErrors, sa.Retransmits)
	if st.ICRCErrors == 0 || da.Stats().InjectedCorruptions == 0 {
		t.Errorf("%d corruptions injected, %d ICRC errors caught", da.Stats().InjectedCorruptions, st.ICRCErrors)
	}
	// The receiver's capture holds v1 frames (its ACKs and READ responses,
	// the requests it accepted), each with a good ICRC.
	db.Close()
	r, err := pcapgo.NewReader(&capture)
	if err != nil {
		t.Fatal(err)
	}
	frames := 0
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		f, err := wire.ParseFrame(data)
		if err != nil || f.Version != 1 || !f.ICRCOK() {
			t.Fatalf("captured frame %d: %v (version %v)", frames+1, err, f)
		}
		frames++
	}
	if frames < 2*size/1024 {
		t.Errorf("%d frames captured, want at least %d", frames, 2*size/1024)
	}
	// RoCE v1 addresses peers by link-local GID: an IPv4-mapped one (a v2
	// peer's) is refused with an error, not sent into the void.
	bad := qp.Attr{State: qp.StateRTR, AV: qp.AddressVector{DGID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 1}}}
	c, err := a.pd.CreateQP(a.cq, a.cq)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Modify(&bad, qp.AttrAV); err == nil || !strings.Contains(err.Error(), "not a link-local GID") {
		t.Fatalf("v2 GID on a v1 device: %v", err)
	}
	big := qp.Attr{PathMTU: 2048}
	if err := c.Modify(&big, qp.AttrPathMTU); err == nil || !strings.Contains(err.Error(), "active MTU 1024") {
		t.Fatalf("path MTU 2048 on a 1500-byte veth: %v", err)
	}
}
