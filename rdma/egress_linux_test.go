package rdma

import (
	"os/exec"
	"regexp"
	"strconv"
	"testing"
)

// TestEgressHeldBack: a device whose host's egress queue is full (a
// shaped interface: tbf at 50 Mbit/s with a 256 KiB queue, far slower
// than the device sends) keeps what the queue refuses and sends it again
// once there is room, as a NIC's send queue holds its WRs: the queue
// reports drops (the refusals) while the queue pair resends nothing and
// the data arrive whole.
func TestEgressHeldBack(t *testing.T) {
	tc, err := exec.LookPath("tc")
	if err != nil {
		t.Skip("tc (iproute2) not installed: it shapes the interface")
	}
	// A burst above the largest UDP_SEGMENT buffer (64 KiB): the queue
	// takes or refuses a buffer whole.
	ns, ifa, _, addrA, addrB := vethNetns(t, "gegr", 77, []string{tc, "qdisc", "add", "dev", "IFA", "root", "tbf", "rate", "50mbit", "burst", "128kb", "limit", "256kb"})
	da, err := openInNetns(ns, addrA+":4791")
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(addrB + ":4791")
	if err != nil {
		t.Fatal(err)
	}
	const size = 4 << 20
	a, b := newSideOn(t, da, 2*size), newSideOn(t, db, size)
	// An ACK timeout of 1.07 s (18) above any queueing here (256 KiB at 50
	// Mbit/s is 42 ms, plus the device's waits): a resend then means a loss.
	connect(t, a, b, 18, 7)
	writeReadSend(t, a, b, size, "held back")
	out, err := exec.Command("ip", "netns", "exec", ns, tc, "-s", "qdisc", "show", "dev", ifa).CombinedOutput()
	if err != nil {
		t.Fatalf("tc -s qdisc show: %v: %s", err, out)
	}
	m := regexp.MustCompile(`dropped (\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no drop counter in %s", out)
	}
	drops, _ := strconv.Atoi(string(m[1]))
	da.mu.Lock()
	waits := da.lk.(*udpLink).egressWaits
	da.mu.Unlock()
	st := a.qp.Stats()
	t.Logf("egress queue: %d refused; the device waited %d times; the queue pair resent %d packets", drops, waits, st.Retransmits)
	if drops == 0 || waits == 0 {
		t.Fatalf("the egress queue refused %d packets and the device waited %d times: want the queue full at times", drops, waits)
	}
	if st.Retransmits != 0 {
		t.Errorf("the queue pair resent %d packets (%+v): what the egress queue refused was lost", st.Retransmits, st)
	}
}
