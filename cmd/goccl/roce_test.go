package main

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/rdma/wire"
)

// TestRoceCheckPcap runs goccl roce check-pcap on the shared RoCE vectors:
// every frame decodes, the published ones pass the ICRC, the corrupted copy
// fails it (exit status 1); the derived ones all pass (exit status 0).
func TestRoceCheckPcap(t *testing.T) {
	for _, tc := range []struct {
		file   string
		status int
		want   []string
	}{
		{"roce_icrc_published_vectors.pcap", 1, []string{
			"frame 1: RoCEv2 UC SEND_ONLY dqp 0x0000d3 psn 13571856 len 18 icrc ok",
			"frame 2: RoCEv1 RC RDMA_WRITE_ONLY dqp 0x00010a psn 10979516 len 5 icrc ok",
			"frame 3: RoCEv1 RC ACKNOWLEDGE dqp 0x000109 psn 10979520 len 0 aeth ACK credits 0 icrc ok",
			"frame 4: RoCEv2 UC SEND_ONLY dqp 0x0000d3 psn 13571856 len 18 icrc ok",
			"frame 5: RoCEv2 UC SEND_ONLY dqp 0x0000d3 psn 13571856 len 18 icrc BAD (carried f253f378, computed f353f378)",
			"5 frames, 1 bad",
		}},
		{"roce_derived_vectors.pcap", 0, []string{
			"frame 1: RoCEv2 RC RDMA_WRITE_ONLY dqp 0x000011 psn 256 len 7 icrc ok",
			"frame 2: RoCEv2 RC ACKNOWLEDGE dqp 0x000022 psn 256 len 0 aeth ACK credits 31 icrc ok",
			"frame 3: RoCEv2 RC COMPARE_SWAP dqp 0x000011 psn 5 len 0 icrc ok",
			"frame 4: RoCEv2 RC ATOMIC_ACKNOWLEDGE dqp 0x000022 psn 5 len 0 aeth ACK credits 31 icrc ok",
			"frame 5: RoCEv2 RC ACKNOWLEDGE dqp 0x000022 psn 7 len 0 aeth RNR NAK timer 14 icrc ok",
			"frame 6: RoCEv2 RC ACKNOWLEDGE dqp 0x000022 psn 7 len 0 aeth NAK PSN sequence error icrc ok",
			"6 frames, 0 bad",
		}},
	} {
		var out, errb bytes.Buffer
		status := cli([]string{"roce", "check-pcap", filepath.Join("..", "..", "rdma", "wire", "testdata", tc.file)}, &out, &errb)
		if status != tc.status {
			t.Errorf("%s: exit status %d, want %d (stderr %q)", tc.file, status, tc.status, errb.String())
		}
		if got := strings.Split(strings.TrimSpace(out.String()), "\n"); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s: output\n%s\nwant\n%s", tc.file, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}

func TestRoceCheckPcapErrors(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pcap")
	os.WriteFile(junk, []byte("not a capture"), 0o600)
	for _, args := range [][]string{{"roce"}, {"roce", "check-pcap"}, {"roce", "nope"}, {"roce", "check-pcap", filepath.Join(dir, "missing")}, {"roce", "check-pcap", junk}} {
		var out, errb bytes.Buffer
		if status := cli(args, &out, &errb); status != 2 || errb.Len() == 0 {
			t.Errorf("%v: status %d, stderr %q", args, status, errb.String())
		}
	}
}

// TestRocePerfTools runs each perftest-style tool's server and client (two
// soft RoCE devices on loopback) and checks the client's result row.
func TestRocePerfTools(t *testing.T) {
	for _, tc := range []struct {
		tool string
		args []string
		cols int
	}{
		{"write-bw", []string{"-s", "64K", "-n", "200"}, 5},
		{"read-bw", []string{"-s", "100000", "-n", "100"}, 5},
		{"write-lat", []string{"-s", "8", "-n", "200"}, 9},
		{"send-bw", []string{"-s", "65536", "-n", "1000"}, 5},
		{"send-lat", []string{"-s", "8", "-n", "200"}, 9},
		{"read-lat", []string{"-s", "8", "-n", "200"}, 9},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			out := rocePair(t, tc.tool, tc.args, nil)
			var row []string
			for _, line := range strings.Split(out, "\n") {
				if f := strings.Fields(line); len(f) == tc.cols && f[0] == tc.args[1] || len(f) == tc.cols && f[0] == "65536" || len(f) == tc.cols && f[0] == "8" {
					row = f
				}
			}
			if row == nil {
				t.Fatalf("no result row with %d columns:\n%s", tc.cols, out)
			}
			for _, v := range row[2:] {
				if f, err := strconv.ParseFloat(v, 64); err != nil || f <= 0 {
					t.Errorf("column %q in %v", v, row)
				}
			}
			t.Log(strings.Join(row, " "))
		})
	}
}

// TestRocePcap runs write-bw with --pcap on the client: goccl roce
// check-pcap verifies every frame, and, where tshark is installed, tshark
// dissects each as RRoCE with the opcode, destination QP and PSN goccl
// decodes.
func TestRocePcap(t *testing.T) {
	capture := filepath.Join(t.TempDir(), "write-bw.pcap")
	rocePair(t, "write-bw", []string{"-s", "10000", "-n", "20"}, []string{"-pcap", capture})
	var errb bytes.Buffer
	var check bytes.Buffer
	if st := cli([]string{"roce", "check-pcap", capture}, &check, &errb); st != 0 {
		t.Fatalf("check-pcap: status %d\n%s", st, check.String())
	}
	// Our decoding: "frame N: RoCEv2 RC RDMA_WRITE_FIRST dqp 0x000011 psn 5617322 ...".
	var ours []string
	opcodes := map[string]string{"RDMA_WRITE_FIRST": "6", "RDMA_WRITE_MIDDLE": "7", "RDMA_WRITE_LAST": "8", "ACKNOWLEDGE": "17"}
	for _, line := range strings.Split(check.String(), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[2] != "RoCEv2" {
			continue
		}
		ours = append(ours, opcodes[f[4]]+" "+f[6]+" "+f[8])
	}
	if len(ours) < 60+20 {
		t.Fatalf("%d frames captured, want 3 per WRITE and an ACK per WRITE:\n%s", len(ours), check.String())
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Log("tshark not installed: its dissection is not compared")
		return
	}
	res, err := exec.Command(tshark, "-r", capture, "-T", "fields", "-e", "frame.protocols",
		"-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	var theirs []string
	for _, line := range strings.Split(strings.TrimSpace(string(res)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || !strings.Contains(f[0], "udp:infiniband") {
			t.Fatalf("tshark did not dissect a frame as RRoCE: %q", line)
		}
		theirs = append(theirs, f[1]+" "+f[2]+" "+f[3])
	}
	if strings.Join(ours, "\n") != strings.Join(theirs, "\n") {
		t.Fatalf("goccl and tshark disagree:\ngoccl:\n%s\ntshark:\n%s", strings.Join(ours, "\n"), strings.Join(theirs, "\n"))
	}
	t.Logf("%d frames; tshark agrees on opcode, QP and PSN of each", len(theirs))
}

func TestRoceDevinfo(t *testing.T) {
	var out, errb bytes.Buffer
	if st := cli([]string{"roce", "devinfo"}, &out, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	for _, want := range []string{"hca_id:\tgoccl_lo", "link_layer:\t\tEthernet", "::ffff:127.0.0.1, RoCE v2", "active_mtu:\t\t4096 (5)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("devinfo lacks %q:\n%s", want, out.String())
		}
	}
	// Every interface with a MAC lists its link-local GID as RoCE v1 first.
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if len(ifc.HardwareAddr) == 6 {
			want := fmt.Sprintf("hca_id:\tgoccl_%s\n", ifc.Name)
			i := strings.Index(out.String(), want)
			gid := netip.AddrFrom16(wire.LinkLocalGID([6]byte(ifc.HardwareAddr))).String() + ", RoCE v1"
			if i < 0 || !strings.Contains(out.String()[i:], "GID[  0]:\t\t"+gid) {
				t.Errorf("devinfo lacks %s with GID 0 %s:\n%s", ifc.Name, gid, out.String())
			}
		}
	}
	for ifMTU, want := range map[int]int{1500: 1024, 9000: 4096, 1100: 1024, 1099: 512, 4172: 4096, 4171: 2048, 65536: 4096, 200: 0} {
		if got, _ := activeMTU(ifMTU); got != want {
			t.Errorf("activeMTU(%d) = %d, want %d", ifMTU, got, want)
		}
	}
}

// rocePair runs a goccl roce tool's server (a free side-channel port, any
// device port) and its client against it on loopback, both in this process,
// and returns the client's output; it fails the test if either side fails.
// clientArgs are added to the client's flags only.
func rocePair(t *testing.T, tool string, args, clientArgs []string) string {
	t.Helper()
	return rocePairWith(t, tool, args, func(port string) []string {
		return append(append(append([]string{"roce", tool, "-p", port, "-timeout", "30s"}, args...), clientArgs...), "127.0.0.1")
	})
}

// rocePairWith is rocePair with the client's whole command line made by
// client from the side channel's port.
func rocePairWith(t *testing.T, tool string, args []string, client func(port string) []string) string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		out, retry := rocePairOnce(t, tool, args, client)
		if !retry {
			return out
		}
		if attempt == 3 {
			t.Fatalf("%s: the server found its port taken three times", tool)
		}
	}
}

// rocePairOnce is one try of rocePairWith on a port that was free a
// moment before; retry reports that another process took it first (a
// test in another package running at the same time), so the pair should
// try again on another.
func rocePairOnce(t *testing.T, tool string, args []string, client func(port string) []string) (output string, retry bool) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	var sout, serr bytes.Buffer
	srv := make(chan int, 1)
	go func() {
		srv <- cli(append([]string{"roce", tool, "-p", port, "-dev-port", "0", "-timeout", "30s"}, args...), &sout, &serr)
	}()
	var out, errb bytes.Buffer
	status := 1
	for i := 0; i < 100 && status != 0; i++ {
		out.Reset()
		errb.Reset()
		if status = cli(client(port), &out, &errb); status != 0 && !strings.Contains(errb.String(), "refused") {
			break
		}
		if status != 0 {
			select {
			case s := <-srv: // the server gave up: its port was taken?
				if strings.Contains(serr.String(), "address already in use") {
					return "", true
				}
				t.Fatalf("%s server: status %d: %s", tool, s, serr.String())
			case <-time.After(20 * time.Millisecond): // the server is not listening yet
			}
		}
	}
	if status != 0 {
		select {
		case s := <-srv:
			t.Logf("server: status %d: %s", s, serr.String())
		case <-time.After(2 * time.Second):
		}
		t.Fatalf("%s client: status %d: %s\n%s", tool, status, errb.String(), out.String())
	}
	if s := <-srv; s != 0 {
		t.Fatalf("%s server: status %d: %s", tool, s, serr.String())
	}
	return out.String(), false
}

// TestRocePerfCCFlags: --dcqcn takes a tc rate, --tclass a DSCP value
// shifted by 2.
func TestRocePerfCCFlags(t *testing.T) {
	var out, errb bytes.Buffer
	p, status := parseRocePerf("write-bw", []string{"--dcqcn", "1gbit", "--tclass", "104"}, &out, &errb)
	if p == nil || p.dcqcn != 1e9 || p.tclass != 104 {
		t.Fatalf("status %d, %+v: want dcqcn 1e9, tclass 104 (%s)", status, p, errb.String())
	}
	for _, args := range [][]string{{"--tclass", "3"}, {"--tclass", "256"}, {"--dcqcn", "fast"}} {
		errb.Reset()
		if p, status := parseRocePerf("write-bw", args, &out, &errb); p != nil || status != 2 {
			t.Errorf("%q: status %d, want a usage error", args, status)
		}
	}
}
