package cluster_test

// The tests that build clusters: they need root and iproute2, and skip,
// saying why, otherwise (clustertest). The test binary is also the helper
// that runs inside the hosts (ip netns exec HOST <this binary>), chosen by
// GOCCL_CLUSTER_HELPER: "serve" (a TCP server: echo, or a sink that
// reports what it received), "rtt", "send" and "bursts" (its clients).

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/net/ipv4"
	"time"

	"github.com/goccl/goccl/internal/cluster"
	"github.com/goccl/goccl/internal/cluster/clustertest"
)

const (
	helperEnv = "GOCCL_CLUSTER_HELPER" // serve, rtt, send or bursts
	addrEnv   = "GOCCL_CLUSTER_ADDR"   // host:port to serve or reach
	startEnv  = "GOCCL_CLUSTER_START"  // udpect: when to start (Unix nanoseconds)
	port      = "29611"
)

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "serve":
		serve(os.Getenv(addrEnv))
	case "rtt":
		rtt(os.Getenv(addrEnv))
	case "send":
		send(os.Getenv(addrEnv), 0)
	case "bursts":
		send(os.Getenv(addrEnv), 256<<10)
	case "udpsend":
		udpSend(os.Getenv(addrEnv))
	case "udpect":
		udpECT(os.Getenv(addrEnv))
	default:
		fmt.Fprintln(os.Stderr, "unknown helper", os.Getenv(helperEnv))
		os.Exit(2)
	}
	os.Exit(0)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "helper:", err)
	os.Exit(1)
}

// serve accepts connections on addr; each starts with a mode byte: 'e'
// echoes, 's' counts the bytes that follow up to EOF and answers with the
// count and the times (Unix nanoseconds) of the first byte and of EOF. It
// prints "ready" once listening and exits after two minutes whatever
// happens.
func serve(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fatal(err)
	}
	fmt.Println("ready")
	time.AfterFunc(2*time.Minute, func() { os.Exit(3) })
	for {
		conn, err := ln.Accept()
		if err != nil {
			fatal(err)
		}
		go func() {
			defer conn.Close()
			mode := make([]byte, 1)
			if _, err := io.ReadFull(conn, mode); err != nil {
				return
			}
			switch mode[0] {
			case 'e':
				io.Copy(conn, conn)
			case 's':
				buf := make([]byte, 256<<10)
				var n int64
				var start time.Time
				for {
					k, err := conn.Read(buf)
					if k > 0 && n == 0 {
						start = time.Now()
					}
					n += int64(k)
					if err != nil {
						break
					}
				}
				var reply [24]byte
				binary.LittleEndian.PutUint64(reply[:], uint64(n))
				binary.LittleEndian.PutUint64(reply[8:], uint64(start.UnixNano()))
				binary.LittleEndian.PutUint64(reply[16:], uint64(time.Now().UnixNano()))
				conn.Write(reply[:])
			}
		}()
	}
}

type rttResult struct{ Min, Median, Max time.Duration }

// rtt measures 21 one-byte round trips to addr's echo, drops the first
// (it waits for ARP) and prints the rest's minimum, median and maximum.
func rtt(addr string) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		fatal(err)
	}
	if _, err := conn.Write([]byte{'e'}); err != nil {
		fatal(err)
	}
	var d []time.Duration
	b := make([]byte, 1)
	for i := range 21 {
		start := time.Now()
		if _, err := conn.Write(b); err != nil {
			fatal(err)
		}
		if _, err := io.ReadFull(conn, b); err != nil {
			fatal(err)
		}
		if i > 0 {
			d = append(d, time.Since(start))
		}
	}
	slices.Sort(d)
	json.NewEncoder(os.Stdout).Encode(rttResult{d[0], d[len(d)/2], d[len(d)-1]})
}

type sendResult struct {
	Bytes      int64
	Start, End int64 // at the receiver: first byte and EOF, Unix nanoseconds
}

// Time is the time from the first byte to EOF at the receiver.
func (r sendResult) Time() time.Duration { return time.Duration(r.End - r.Start) }

// send writes to addr's sink for 1.5 s and prints what the sink counted.
// With burst > 0 it writes burst bytes at a time with 30 ms pauses (70
// Mbit/s of 256 KiB bursts: the link idles between them, as between a
// ring's steps), and each burst leaves in full-sized GSO packets.
func send(addr string, burst int) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		fatal(err)
	}
	if _, err := conn.Write([]byte{'s'}); err != nil {
		fatal(err)
	}
	buf := make([]byte, max(burst, 64<<10))
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		if _, err := conn.Write(buf); err != nil {
			fatal(err)
		}
		if burst > 0 {
			time.Sleep(30 * time.Millisecond)
		}
	}
	conn.(*net.TCPConn).CloseWrite()
	var reply [24]byte
	if _, err := io.ReadFull(conn, reply[:]); err != nil {
		fatal(err)
	}
	le := binary.LittleEndian
	json.NewEncoder(os.Stdout).Encode(sendResult{int64(le.Uint64(reply[:])), int64(le.Uint64(reply[8:])), int64(le.Uint64(reply[16:]))})
}

// udpSend sends 4000 datagrams of 100 bytes to addr, 20 every millisecond,
// and prints how many.
func udpSend(addr string) {
	conn, err := net.Dial("udp", addr)
	if err != nil {
		fatal(err)
	}
	b := make([]byte, 100)
	n := 0
	for n < 4000 {
		for range 20 {
			conn.Write(b) // a refused datagram (no listener) still left
			n++
		}
		time.Sleep(time.Millisecond)
	}
	json.NewEncoder(os.Stdout).Encode(map[string]int{"sent": n})
}

// udpECT sends ECN-capable (ECT(0)) datagrams of a full soft RoCE frame
// (1,082 bytes at MTU 1500, what the marking counts in) to addr at about
// 83 Mbit/s for a second and prints how many.
func udpECT(addr string) {
	conn, err := net.Dial("udp", addr)
	if err != nil {
		fatal(err)
	}
	if err := ipv4.NewConn(conn).SetTOS(0x02); err != nil {
		fatal(err)
	}
	if at, err := strconv.ParseInt(os.Getenv(startEnv), 10, 64); err == nil {
		time.Sleep(time.Until(time.Unix(0, at)))
	}
	// Paced by the clock, not by counting sleeps, so that a loaded machine
	// whose sleeps run long still offers the rate. Alone, a stall is made
	// up by at most 2 ms of frames at once, well within the marking
	// queue's depth; started with another sender (startEnv), in full.
	const gap = 100 * time.Microsecond // 10 frames of 1,082 bytes per millisecond: 87 Mbit/s
	burst := 20
	if os.Getenv(startEnv) != "" {
		burst = 1 << 30
	}
	b := make([]byte, 1082-14-20-8)
	start := time.Now()
	sent, next := 0, 0 // frames written; the next frame's slot
	for elapsed := time.Duration(0); elapsed < time.Second; elapsed = time.Since(start) {
		due := int(elapsed / gap)
		for next = max(next, due-burst); next < due; next++ {
			conn.Write(b)
			sent++
		}
		time.Sleep(time.Millisecond)
	}
	json.NewEncoder(os.Stdout).Encode(map[string]int{"sent": sent})
}

// helper returns the command running this test binary as helper mode on
// host i of c, reaching or serving addr.
func helper(ctx context.Context, t *testing.T, c *cluster.Cluster, i int, mode, addr string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := c.Command(ctx, i, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, addrEnv+"="+addr)
	return cmd
}

// startServer starts the helper server on host i and waits for it to
// listen; it is killed when the test ends.
func startServer(t *testing.T, c *cluster.Cluster, i int) string {
	addr := net.JoinHostPort(c.Hosts[i].Addr.String(), port)
	srv := helper(context.Background(), t, c, i, "serve", addr)
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("server on %s: %q %v", c.Hosts[i].Name, line, err)
	}
	return addr
}

// runHelper runs a client helper on host i and decodes its JSON result.
func runHelper(t *testing.T, c *cluster.Cluster, i int, mode, addr string, result any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := helper(ctx, t, c, i, mode, addr)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s from %s to %s: %v: %s", mode, c.Hosts[i].Name, addr, err, stderr.String())
	}
	if err := json.Unmarshal(out, result); err != nil {
		t.Fatalf("%s: %v: %q", mode, err, out)
	}
}

// runHelperT is runHelper for goroutines: it reports with t.Errorf.
func runHelperT(t *testing.T, c *cluster.Cluster, i int, mode, addr string, result any) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := helper(ctx, t, c, i, mode, addr)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Errorf("%s from %s to %s: %v: %s", mode, c.Hosts[i].Name, addr, err, stderr.String())
		return
	}
	if err := json.Unmarshal(out, result); err != nil {
		t.Errorf("%s: %v: %q", mode, err, out)
	}
}

// TestShaping measures what the links of a 2-host cluster carry: the
// round-trip time of one-byte TCP echoes and the throughput of one TCP
// flow for 1.5 s, against the configured rate and delay: a round trip is
// at least 2×delay (the delay is one way), and the throughput within
// [0.5, 1.1] × rate. "rate" runs anywhere the cluster can be built;
// "rate+delay" needs netem in the kernel and skips without it.
func TestShaping(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  cluster.Config
	}{
		{"rate", cluster.Config{Hosts: 2, Rate: 100e6}},
		{"rate+delay", cluster.Config{Hosts: 2, Rate: 100e6, Delay: 5 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clustertest.New(t, tc.cfg)
			addr := startServer(t, c, 1)

			var r rttResult
			runHelper(t, c, 0, "rtt", addr, &r)
			t.Logf("rtt %s -> %s: min %v median %v max %v (configured delay %v one way)", c.Hosts[0].Name, c.Hosts[1].Name, r.Min, r.Median, r.Max, tc.cfg.Delay)
			if want := 2 * tc.cfg.Delay; r.Min < want {
				t.Errorf("round trip %v, under 2 × the %v delay", r.Min, tc.cfg.Delay)
			}
			// Loose: a loaded machine may add scheduling delays, but not
			// 50 ms to every one of 20 round trips.
			if limit := 2*tc.cfg.Delay + 50*time.Millisecond; r.Min > limit {
				t.Errorf("round trip %v, over 2 × the %v delay + 50 ms", r.Min, tc.cfg.Delay)
			}

			var s sendResult
			runHelper(t, c, 0, "send", addr, &s)
			bps := float64(s.Bytes) * 8 / s.Time().Seconds()
			rate := float64(tc.cfg.Rate)
			t.Logf("throughput %s -> %s: %.1f Mbit/s (%d bytes in %v; rate %v, %.0f%% of it)",
				c.Hosts[0].Name, c.Hosts[1].Name, bps/1e6, s.Bytes, s.Time().Round(time.Millisecond), tc.cfg.Rate, 100*bps/rate)
			if bps > 1.1*rate || bps < 0.5*rate {
				t.Errorf("throughput %.1f Mbit/s, outside [0.5, 1.1] × %v", bps/1e6, tc.cfg.Rate)
			}

			stats, err := c.Stats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range stats {
				t.Logf("%s: egress %v, port %v, tx %d rx %d", st.Host.Name, st.Egress, st.Port, st.TxBytes, st.RxBytes)
			}
			// The flow's bytes passed the sender's egress qdisc and the
			// receiver's switch port.
			if got := stats[0].Sent(); got < uint64(s.Bytes) {
				t.Errorf("%s's egress qdisc sent %d bytes, less than the %d received", c.Hosts[0].Name, got, s.Bytes)
			}
			if len(stats[1].Port) == 0 || stats[1].Port[0].Kind != "tbf" || stats[1].Port[0].Bytes < uint64(s.Bytes) {
				t.Errorf("%s's switch port: %+v, want tbf with at least %d bytes", c.Hosts[1].Name, stats[1].Port, s.Bytes)
			}
		})
	}
}

// TestShapingGSO: a flow that sends in bursts, as a ring's steps do,
// leaves the sender's shaper in whole GSO packets. tbf cuts a packet longer
// than its burst into MTU-sized frames, and with the 64 KiB burst of before
// it cut every full-sized one (1,600 bytes a packet on average), which cost
// the machine a multiple of the CPU per byte at rates under 274 Mbit/s.
func TestShapingGSO(t *testing.T) {
	// Full-sized GSO packets at 100 Mbit/s need a kernel that sizes them by
	// the path's minimum RTT (tcp_tso_rtt_log, Linux 6.0); older ones cut
	// them to about 1 ms of the pacing rate, 15 kB, whatever the shaper.
	if _, err := os.Stat("/proc/sys/net/ipv4/tcp_tso_rtt_log"); err != nil {
		t.Skipf("this kernel sizes TSO packets by the pacing rate only (no tcp_tso_rtt_log): %v", err)
	}
	c := clustertest.New(t, cluster.Config{Hosts: 2, Rate: 100e6})
	addr := startServer(t, c, 1)
	var s sendResult
	runHelper(t, c, 0, "bursts", addr, &s)
	stats, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	per := stats[0].TxBytes / max(1, stats[0].TxPackets)
	t.Logf("%s sent %d bytes in %d packets, %d bytes each (%d bytes of the flow)", c.Hosts[0].Name, stats[0].TxBytes, stats[0].TxPackets, per, s.Bytes)
	// Measured: 48-50 kB a packet; with the 64 KiB burst 1.6 kB.
	if per < 16*uint64(c.Config.MTU) {
		t.Errorf("%s sent %d bytes in %d packets, %d bytes each: its shaper cut the flow's GSO packets into frames", c.Hosts[0].Name, stats[0].TxBytes, stats[0].TxPackets, per)
	}
}

// TestIncast: two hosts send to a third at once for 1.5 s; the switch
// port towards the receiver holds their sum to the rate, as a switch's
// output port does: within [0.5, 1.1] × rate over the time from the first
// byte of either flow to the end of both at the receiver.
func TestIncast(t *testing.T) {
	c := clustertest.New(t, cluster.Config{Hosts: 3, Rate: 100e6})
	addr := startServer(t, c, 1)
	var r [2]sendResult
	done := make(chan struct{})
	for k, i := range []int{0, 2} {
		go func() {
			defer func() { done <- struct{}{} }()
			runHelperT(t, c, i, "send", addr, &r[k])
		}()
	}
	<-done
	<-done
	if t.Failed() {
		t.FailNow()
	}
	window := time.Duration(max(r[0].End, r[1].End) - min(r[0].Start, r[1].Start))
	overlap := time.Duration(min(r[0].End, r[1].End) - max(r[0].Start, r[1].Start))
	bps := float64(r[0].Bytes+r[1].Bytes) * 8 / window.Seconds()
	t.Logf("incast into %s: %.1f Mbit/s together over %v (flows %.1f and %.1f Mbit/s, overlapping %v; rate %v)",
		c.Hosts[1].Name, bps/1e6, window.Round(time.Millisecond),
		float64(r[0].Bytes)*8/r[0].Time().Seconds()/1e6, float64(r[1].Bytes)*8/r[1].Time().Seconds()/1e6,
		overlap.Round(time.Millisecond), c.Config.Rate)
	if rate := float64(c.Config.Rate); bps > 1.1*rate || bps < 0.5*rate {
		t.Errorf("incast: %.1f Mbit/s together, outside [0.5, 1.1] × %v", bps/1e6, c.Config.Rate)
	}
	stats, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	port := rootOf(stats[1].Port)
	t.Logf("%s's switch port: %d bytes, %d drops, %d overlimits", c.Hosts[1].Name, port.Bytes, port.Drops, port.Overlimits)
	if port.Bytes < uint64(r[0].Bytes+r[1].Bytes) || port.Drops+port.Overlimits == 0 {
		t.Errorf("%s's switch port %+v: want all %d bytes through it, and drops or waits", c.Hosts[1].Name, port, r[0].Bytes+r[1].Bytes)
	}
}

// rootOf is the root qdisc among qs (root first), or zero.
func rootOf(qs []cluster.QdiscStats) cluster.QdiscStats {
	if len(qs) > 0 && qs[0].Root {
		return qs[0]
	}
	return cluster.QdiscStats{}
}

// TestUpDown builds a 3-host cluster and checks it against the state file
// and ip's view: namespaces, addresses, MTU, qdiscs, reachability of every
// host from host 0; then Down removes it all, and a second Down is no error.
func TestUpDown(t *testing.T) {
	c := clustertest.New(t, cluster.Config{Hosts: 3, Rate: 1e9, MTU: 9000})
	ctx := context.Background()
	loaded, err := cluster.Load(c.Name, c.Config.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Complete || len(loaded.Hosts) != 3 || !reflect.DeepEqual(loaded.Hosts[2], c.Hosts[2]) || loaded.Config.Rate != 1e9 {
		t.Errorf("state file: %+v, want %+v", loaded, c)
	}
	for i, h := range c.Hosts {
		out, err := exec.Command("ip", "-n", h.Name, "-o", "-4", "addr", "show", "dev", "eth0").Output()
		if err != nil || !strings.Contains(string(out), fmt.Sprintf("inet 10.200.0.%d/24", i+1)) {
			t.Errorf("%s: address: %s %v", h.Name, out, err)
		}
		out, err = exec.Command("ip", "-n", h.Name, "link", "show", "dev", "eth0").Output()
		if err != nil || !strings.Contains(string(out), "mtu 9000") || !strings.Contains(string(out), "qdisc tbf") {
			t.Errorf("%s: link: %s %v", h.Name, out, err)
		}
		out, err = exec.Command("ip", "-n", c.Switch, "link", "show", "dev", h.Port).Output()
		if err != nil || !strings.Contains(string(out), "master br0") || !strings.Contains(string(out), "mtu 9000") {
			t.Errorf("%s: switch port: %s %v", h.Name, out, err)
		}
		// A host's end steers by flow hash over every CPU, the switch's
		// ends to one CPU (RPS), which keeps flows in order.
		for _, end := range [][3]string{{h.Name, "eth0", cluster.RPSMask(0, runtime.NumCPU())}, {c.Switch, h.Port, "1"}} {
			f := "/sys/class/net/" + end[1] + "/queues/rx-0/rps_cpus"
			out, err := exec.Command("ip", "netns", "exec", end[0], "cat", f).Output()
			if got := strings.TrimLeft(strings.TrimSpace(string(out)), "0,"); err == nil && got != end[2] {
				t.Errorf("%s %s: rps_cpus %q, want %s", end[0], end[1], out, end[2])
			}
		}
	}
	// The machine's own namespace has none of it.
	if out, _ := exec.Command("ip", "-o", "link").Output(); strings.Contains(string(out), c.Name) {
		t.Errorf("a link of the cluster is in the machine's namespace:\n%s", out)
	}
	for i := 1; i < 3; i++ {
		addr := startServer(t, c, i)
		var r rttResult
		runHelper(t, c, 0, "rtt", addr, &r)
	}
	stats, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		if !s.Present || s.Sent() == 0 || s.TxBytes == 0 || s.RxBytes == 0 {
			t.Errorf("stats of %s: %+v", s.Host.Name, s)
		}
	}

	rm, err := c.Down(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{c.Switch, c.Hosts[0].Name, c.Hosts[1].Name, c.Hosts[2].Name}
	got := slices.Clone(rm.Namespaces)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || rm.StateFile != c.StateFile || len(rm.Killed) != 2 {
		t.Errorf("Down removed %+v, want namespaces %v, state file %s and 2 servers killed", rm, want, c.StateFile)
	}
	if rm, err := c.Down(ctx); err != nil || len(rm.Namespaces) != 0 || rm.StateFile != "" {
		t.Errorf("second Down: %+v %v, want nothing removed and no error", rm, err)
	}
	if _, err := cluster.Load(c.Name, c.Config.StateDir); !errors.Is(err, cluster.ErrNotFound) {
		t.Errorf("Load after Down: %v, want ErrNotFound", err)
	}
}

// assertGone fails t if anything of cluster name is left.
func assertGone(t *testing.T, name, stateDir string) {
	t.Helper()
	if left, err := cluster.Leftovers(context.Background(), name); err != nil || len(left) > 0 {
		t.Errorf("left: %v %v", left, err)
	}
	if _, err := os.Stat(cluster.StateFile(name, stateDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file: %v, want none", err)
	}
}

// TestUpFailureLeavesNothing: an Up that fails, at whichever of its
// commands, removes everything it made, and its error names the command.
func TestUpFailureLeavesNothing(t *testing.T) {
	if why := clustertest.Skip(); why != "" {
		t.Skip(why)
	}
	ctx := context.Background()
	dir := t.TempDir()

	// The kernel refuses the MTU of the first veth.
	name := clustertest.Name()
	t.Cleanup(func() { clustertest.Remove(t, name, dir) })
	_, err := cluster.Up(ctx, cluster.Config{Name: name, Hosts: 2, MTU: 70000, StateDir: dir})
	var ce *cluster.CommandError
	if why := clustertest.SkipReason(err); why != "" {
		t.Skip(why)
	}
	if !errors.As(err, &ce) || ce.Args[0] != "ip" || !strings.Contains(err.Error(), "link set p0 mtu 70000") ||
		!strings.Contains(ce.Stderr, "mtu greater than device maximum") {
		t.Fatalf("MTU 70000: %v, want the failing ip command and the kernel's complaint", err)
	}
	t.Logf("MTU 70000: %v", err)
	assertGone(t, name, dir)

	// Every command in turn: fail it, and nothing may be left.
	for k := 1; ; k++ {
		name := clustertest.Name()
		t.Cleanup(func() { clustertest.Remove(t, name, dir) })
		// One host: a second repeats the first's commands.
		c, err := cluster.UpFailAt(ctx, cluster.Config{Name: name, Hosts: 1, Rate: 100e6, StateDir: dir}, k)
		if err == nil {
			if k < 10 {
				t.Fatalf("Up succeeded with command %d failing", k)
			}
			t.Logf("Up runs %d commands for a host with a rate; each failed in turn left nothing", k-1)
			if _, err := c.Down(ctx); err != nil {
				t.Fatal(err)
			}
			assertGone(t, name, dir)
			break
		}
		if !errors.Is(err, cluster.ErrInjected) || !errors.As(err, &ce) {
			t.Fatalf("command %d: %v, want the injected failure", k, err)
		}
		assertGone(t, name, dir)
		if t.Failed() {
			t.Fatalf("after failing command %d (%s)", k, strings.Join(ce.Args, " "))
		}
	}
}

// TestDownLeftovers: Down finds a cluster's namespaces by name when its
// state file is gone (a crash, or /run wiped), removes a state file whose
// namespaces are gone, kills what still runs in the hosts, and Up refuses
// a name that is still in use.
func TestDownLeftovers(t *testing.T) {
	c := clustertest.New(t, cluster.Config{Hosts: 2})
	ctx := context.Background()
	dir := c.Config.StateDir

	// Up refuses the name while the cluster is there.
	if _, err := cluster.Up(ctx, cluster.Config{Name: c.Name, Hosts: 1, StateDir: dir}); !errors.Is(err, cluster.ErrExists) ||
		!strings.Contains(err.Error(), c.StateFile) || !strings.Contains(err.Error(), c.Hosts[1].Name) {
		t.Errorf("Up over an existing cluster: %v, want ErrExists naming the state file and the namespaces", err)
	}

	// A process on a host; Down kills it.
	sleeper := c.Command(ctx, 1, "sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()

	// Without the state file, Down goes by the names.
	if err := os.Remove(c.StateFile); err != nil {
		t.Fatal(err)
	}
	left, err := cluster.Leftovers(ctx, c.Name)
	if err != nil || len(left) != 3 {
		t.Fatalf("leftovers: %v %v, want 3 namespaces", left, err)
	}
	rm, err := cluster.Down(ctx, c.Name, dir)
	if err != nil || len(rm.Namespaces) != 3 || rm.StateFile != "" || !slices.Contains(rm.Killed, sleeper.Process.Pid) {
		t.Errorf("Down without a state file: %+v %v, want 3 namespaces and the sleeper killed", rm, err)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("sleeper: %v, want killed", err)
		}
	case <-time.After(10 * time.Second):
		sleeper.Process.Kill()
		t.Errorf("the sleeper on %s still runs after Down", c.Hosts[1].Name)
	}
	assertGone(t, c.Name, dir)

	// A state file whose namespaces are gone: Down removes the file.
	c2 := clustertest.New(t, cluster.Config{Hosts: 1})
	for _, ns := range []string{c2.Switch, c2.Hosts[0].Name} {
		if out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	rm, err = c2.Down(ctx)
	if err != nil || len(rm.Namespaces) != 0 || rm.StateFile != c2.StateFile {
		t.Errorf("Down of a state file alone: %+v %v", rm, err)
	}

	// An unreadable state file goes too, with the namespaces found by name.
	c3 := clustertest.New(t, cluster.Config{Hosts: 1})
	if err := os.WriteFile(c3.StateFile, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	rm, err = c3.Down(ctx)
	if err != nil || len(rm.Namespaces) != 2 || rm.StateFile != c3.StateFile {
		t.Errorf("Down with a corrupt state file: %+v %v, want both namespaces and the file removed", rm, err)
	}
	assertGone(t, c3.Name, dir)
}

// TestRails: a 2-host cluster with 3 rails has a link, switch and subnet
// per rail; a TCP flow to a host's rail-1 address leaves on rail 1 only
// (the other rails carry next to nothing), and the rails are shaped alike.
func TestRails(t *testing.T) {
	c := clustertest.New(t, cluster.Config{Hosts: 2, Rails: 3, Rate: 200e6})
	for i, h := range c.Hosts {
		if len(h.Links) != 3 || h.Links[1].Iface != "eth1" || h.Links[2].Addr != netip.AddrFrom4([4]byte{10, 200, 2, byte(i + 1)}) || h.Links[1].Bridge != "br1" {
			t.Fatalf("host %d: links %+v", i, h.Links)
		}
		out, err := exec.Command("ip", "-n", h.Name, "-o", "-4", "addr", "show", "dev", "eth2").Output()
		if err != nil || !strings.Contains(string(out), h.Links[2].Addr.String()+"/24") {
			t.Errorf("%s eth2: %q %v", h.Name, out, err)
		}
	}
	addr := net.JoinHostPort(c.Hosts[1].Links[1].Addr.String(), port)
	srv := helper(context.Background(), t, c, 1, "serve", addr)
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("server: %q %v", line, err)
	}
	var res sendResult
	runHelper(t, c, 0, "send", addr, &res)
	stats, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mbps := float64(res.Bytes) * 8 / res.Time().Seconds() / 1e6
	t.Logf("rail 1: %d bytes at %.0f Mbit/s; h0 egress per rail: %d, %d, %d bytes", res.Bytes, mbps,
		stats[0].Links[0].TxBytes, stats[0].Links[1].TxBytes, stats[0].Links[2].TxBytes)
	if l := stats[0].Links; l[1].TxBytes < uint64(res.Bytes) || l[0].TxBytes > 100<<10 || l[2].TxBytes > 100<<10 {
		t.Errorf("h0 sent %d, %d, %d bytes on rails 0, 1, 2; want the %d of the flow on rail 1 only", l[0].TxBytes, l[1].TxBytes, l[2].TxBytes, res.Bytes)
	}
	if mbps > 220 || mbps < 100 {
		t.Errorf("rail 1 carried %.0f Mbit/s, shaped to 200", mbps)
	}
}

// TestLossNftables: --loss drops that share of a host's packets on every
// rail, in the switch (nftables, so without the kernel's netem), and
// status counts the drops per link.
func TestLossNftables(t *testing.T) {
	c := clustertest.New(t, cluster.Config{Hosts: 2, Rails: 2, Loss: 20})
	for rail := range 2 {
		var sent map[string]int
		runHelper(t, c, 0, "udpsend", net.JoinHostPort(c.Hosts[1].Links[rail].Addr.String(), port), &sent)
	}
	stats, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for rail, l := range stats[0].Links {
		share := float64(l.LossDrops) / float64(l.TxPackets)
		t.Logf("h0 rail %d: %d of %d packets dropped (%.3f)", rail, l.LossDrops, l.TxPackets, share)
		if l.TxPackets < 2000 || share < 0.15 || share > 0.25 { // those sent while ARP (itself lossy) resolves are lost before the link
			t.Errorf("h0 rail %d: %d of %d packets dropped, want about 20 %% of at least 2000", rail, l.LossDrops, l.TxPackets)
		}
	}
	if d := stats[1].Links[0].LossDrops; d > 20 {
		t.Errorf("h1 sent next to nothing, yet %d of its packets were dropped", d)
	}
}

// TestECNMarking: two hosts sending ECN-capable traffic at 0.85 of the
// rate each into a third overfill its switch port, and the switch marks
// CE there (counted per port), while one sender alone at 0.85 of the rate
// is not marked.
func TestECNMarking(t *testing.T) {
	c := clustertest.New(t, cluster.Config{Hosts: 3, Rate: 100e6, ECN: 30000})
	dst := net.JoinHostPort(c.Hosts[1].Addr.String(), port)
	var sent map[string]int
	runHelper(t, c, 0, "udpect", dst, &sent)
	stats, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	alone := stats[1].Links[0].ECNMarks
	// Both start at one moment, after the time their processes take to start.
	t.Setenv(startEnv, strconv.FormatInt(time.Now().Add(500*time.Millisecond).UnixNano(), 10))
	var wg sync.WaitGroup
	both := make([]map[string]int, 3)
	for _, i := range []int{0, 2} {
		wg.Go(func() { runHelperT(t, c, i, "udpect", dst, &both[i]) })
	}
	wg.Wait()
	if stats, err = c.Stats(context.Background()); err != nil {
		t.Fatal(err)
	}
	in := stats[1].Links[0]
	t.Logf("one sender (%d frames): %d marks; two (%d and %d frames): %d marks of %d packets to h1",
		sent["sent"], alone, both[0]["sent"], both[2]["sent"], in.ECNMarks-alone, in.RxPackets)
	if alone > 100 || in.ECNMarks-alone < 1000 {
		t.Errorf("marks to h1: %d with one sender at 0.85 of the rate, %d with two; want next to none, then many", alone, in.ECNMarks-alone)
	}
	if m := stats[0].Links[0].ECNMarks + stats[2].Links[0].ECNMarks; m > 0 {
		t.Errorf("%d marks towards the senders, which nothing congested", m)
	}
}
