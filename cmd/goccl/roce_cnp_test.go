package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/cluster"
	"github.com/goccl/goccl/internal/cluster/clustertest"
)

// TestNetnsRoceCNPs: write-bw with --dcqcn from host 0 into host 1
// through a 200 Mbit/s link whose switch port marks CE above 16 KiB. The
// server (the responder) answers CE-marked packets with CNPs; its --pcap
// capture passes check-pcap (every frame's ICRC), and tshark dissects the
// CNPs from the server's address in it, BTH opcode 0x81 (129), as many as
// the server says it sent, all to one QP (the client's).
func TestNetnsRoceCNPs(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace test; skipped with -short")
	}
	if why := clustertest.Skip(); why != "" {
		t.Skip(why)
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed (Debian package tshark)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := clustertest.New(t, cluster.Config{Hosts: 2, Rate: 200e6, ECN: 16 << 10})
	capture := filepath.Join(t.TempDir(), "server.pcap")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var srvOut, cliOut bytes.Buffer
	srv := c.Command(ctx, 1, exe, "roce", "write-bw", "-s", "1M", "-n", "20", "--dcqcn", "200mbit", "--pcap", capture)
	client := c.Command(ctx, 0, exe, "roce", "write-bw", "-s", "1M", "-n", "20", "--dcqcn", "200mbit", c.Hosts[1].Addr.String())
	for _, p := range []struct {
		cmd *exec.Cmd
		out *bytes.Buffer
	}{{srv, &srvOut}, {client, &cliOut}} {
		p.cmd.Env = append(os.Environ(), "GOCCL_CLI_TEST_MAIN=1")
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := client.Run(); err != nil {
		t.Fatalf("client: %v\n%s\nserver:\n%s", err, cliOut.String(), srvOut.String())
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, srvOut.String())
	}
	m := regexp.MustCompile(`DCQCN: (\d+) CE-marked packets received, (\d+) CNPs sent`).FindStringSubmatch(srvOut.String())
	if m == nil {
		t.Fatalf("no DCQCN line from the server:\n%s", srvOut.String())
	}
	marked, sent := m[1], m[2]
	if sent == "0" {
		t.Fatalf("the server sent no CNP (%s CE-marked packets received):\n%s", marked, srvOut.String())
	}
	var check, errb bytes.Buffer
	if st := cli([]string{"roce", "check-pcap", capture}, &check, &errb); st != 0 {
		t.Fatalf("check-pcap: status %d\n%s%s", st, lastLines(check.String(), 20), errb.String())
	}
	// The capture holds what the server received too: its own CNPs are
	// those from its address.
	res, err := exec.Command(tshark, "-r", capture, "-Y", "infiniband.bth.opcode == 129 && ip.src == "+c.Hosts[1].Addr.String(),
		"-T", "fields", "-e", "frame.protocols", "-e", "infiniband.bth.destqp").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(res)), "\n")
	qps := map[string]bool{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 2 || !strings.Contains(f[0], "udp:infiniband") {
			t.Fatalf("tshark did not dissect a CNP as RRoCE: %q", l)
		}
		qps[f[1]] = true
	}
	if got := strconv.Itoa(len(lines)); got != sent || len(qps) != 1 {
		t.Errorf("tshark found %s CNPs to QPs %v; the server sent %s (to the client's one QP)", got, qps, sent)
	}
	t.Logf("%s CE-marked packets, %s CNPs sent; tshark dissects %d CNPs (BTH opcode 0x81) to QP %v", marked, sent, len(lines), qps)
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
