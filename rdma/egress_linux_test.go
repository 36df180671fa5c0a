package rdma

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
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
	ifa, ifb := vethPair(t)
	ns := fmt.Sprintf("gegr%d", os.Getpid()%100000)
	n := os.Getpid()%250 + 1
	addrA, addrB := fmt.Sprintf("10.77.%d.1", n), fmt.Sprintf("10.77.%d.2", n)
	for _, args := range [][]string{{"ip", "netns", "add", ns}, {"ip", "link", "set", ifa, "netns", ns},
		{"ip", "-n", ns, "addr", "add", addrA + "/24", "dev", ifa}, {"ip", "-n", ns, "link", "set", ifa, "up"}, {"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "addr", "add", addrB + "/24", "dev", ifb},
		// A burst above the largest UDP_SEGMENT buffer (64 KiB): the
		// queue takes or refuses a buffer whole.
		{tc, "-n", ns, "qdisc", "add", "dev", ifa, "root", "tbf", "rate", "50mbit", "burst", "128kb", "limit", "256kb"}} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			exec.Command("ip", "netns", "del", ns).Run()
			t.Skipf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
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
	connect(t, a, b, 14, 7)
	writeReadSend(t, a, b, size, "held back")
	out, err := exec.Command(tc, "-n", ns, "-s", "qdisc", "show", "dev", ifa).CombinedOutput()
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
