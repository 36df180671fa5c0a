package main

import (
	"bytes"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRocePerfFlagsAfterHost: perftest's getopt takes flags after the
// server's address ("ib_write_bw 10.0.0.1 -s 1K"); so does goccl roce, and
// the banner and --report_gbits' unit are there.
func TestRocePerfFlagsAfterHost(t *testing.T) {
	out := rocePairWith(t, "write-bw", []string{"-s", "1K", "-n", "50", "-dev-port", "0"}, func(port string) []string {
		return []string{"roce", "write-bw", "127.0.0.1", "-s", "1K", "-n", "50", "-p", port, "--timeout=30s", "--report_gbits"}
	})
	if !strings.Contains(out, "BW peak[Gb/sec]    BW average[Gb/sec]") {
		t.Errorf("--report_gbits: no Gb/sec columns:\n%s", out)
	}
	row := resultRow(out, "1024")
	if row == nil || row[1] != "50" {
		t.Fatalf("no result row for 1024 bytes, 50 iterations:\n%s", out)
	}
	// Loopback through the soft device is far below 100 Gb/s (and far
	// above 0.0001): a value in MB/sec would be ~100x larger than in Gb/sec.
	for _, v := range row[2:4] {
		if f, err := strconv.ParseFloat(v, 64); err != nil || f <= 0 || f > 100 {
			t.Errorf("bandwidth %q Gb/sec in %v", v, row)
		}
	}
}

// TestRocePerfBanner: the client's output opens with perftest's parameter
// banner, then both sides' address and GID lines, then the column titles
// (MB/sec without --report_gbits).
func TestRocePerfBanner(t *testing.T) {
	for _, tc := range []struct {
		tool string
		want []string // regular expressions, one per line, in order
	}{
		{"write-bw", []string{
			`^-{87}$`,
			`^ {20}RDMA_Write BW Test$`,
			`^ Dual-port       : OFF\t\tDevice         : goccl_\S+$`,
			`^ Number of qps   : 1\t\tTransport type : IB$`,
			`^ Connection type : RC\t\tUsing SRQ      : OFF$`,
			`^ RoCE            : v2 over UDP \(goccl soft RoCE\)$`,
			`^ TX depth        : 16$`,
			`^ CQ Moderation   : 1$`,
			`^ Mtu             : \d+\[B\]$`,
			`^ Link type       : Ethernet$`,
			`^ Max inline data : 0\[B\]$`,
			`^ rdma_cm QPs\t : OFF$`,
			`^ Data ex. method : Ethernet$`,
			`^-{87}$`,
			`^ local address: LID 0000 QPN 0x[0-9a-f]{4,6} PSN (0x[0-9a-f]{4,6}|000000) RKey 0x[0-9a-f]{6,} VAddr 0x[0-9a-f]{14,} UDP port \d+$`,
			`^ GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:01$`,
			`^ remote address: LID 0000 QPN 0x[0-9a-f]{4,6} PSN (0x[0-9a-f]{4,6}|000000) RKey 0x[0-9a-f]{6,} VAddr 0x[0-9a-f]{14,} UDP port \d+$`,
			`^ GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:01$`,
			`^-{87}$`,
			`^ #bytes     #iterations    BW peak\[MB/sec\]    BW average\[MB/sec\]   MsgRate\[Mpps\]$`,
		}},
		{"read-lat", []string{
			`^-{87}$`,
			`^ {20}RDMA_Read Latency Test$`,
			`^ Dual-port       : OFF\t\tDevice         : goccl_\S+$`,
			`^ Number of qps   : 1\t\tTransport type : IB$`,
			`^ Connection type : RC\t\tUsing SRQ      : OFF$`,
			`^ RoCE            : v2 over UDP \(goccl soft RoCE\)$`,
			`^ TX depth        : 1$`,
			`^ Mtu             : \d+\[B\]$`,
			`^ Link type       : Ethernet$`,
			`^ Outstand reads  : 16$`,
			`^ rdma_cm QPs\t : OFF$`,
			`^ Data ex. method : Ethernet$`,
			`^-{87}$`,
			`^ local address: LID 0000 QPN 0x[0-9a-f]{4,6} PSN (0x[0-9a-f]{4,6}|000000) OUT 0x10 RKey 0x[0-9a-f]{6,} VAddr 0x[0-9a-f]{14,} UDP port \d+$`,
			`^ GID: [0-9:]+$`,
			`^ remote address: LID 0000 QPN 0x[0-9a-f]{4,6} PSN (0x[0-9a-f]{4,6}|000000) OUT 0x10 RKey 0x[0-9a-f]{6,} VAddr 0x[0-9a-f]{14,} UDP port \d+$`,
			`^ GID: [0-9:]+$`,
			`^-{87}$`,
			`^ #bytes #iterations    t_min\[usec\]`,
		}},
		{"send-bw", []string{
			`^-{87}$`,
			`^ {20}Send BW Test$`,
			`^ Dual-port       : OFF\t\tDevice         : goccl_\S+$`,
			`^ Number of qps   : 1\t\tTransport type : IB$`,
			`^ Connection type : RC\t\tUsing SRQ      : OFF$`,
			`^ RoCE            : v2 over UDP \(goccl soft RoCE\)$`,
			`^ TX depth        : 16$`,
			`^ CQ Moderation   : 1$`,
			`^ Mtu             : \d+\[B\]$`,
			`^ Link type       : Ethernet$`,
			`^ Max inline data : 0\[B\]$`,
			`^ rdma_cm QPs\t : OFF$`,
			`^ Data ex. method : Ethernet$`,
			`^-{87}$`,
			`^ local address: LID 0000 QPN 0x[0-9a-f]{4,6} PSN (0x[0-9a-f]{4,6}|000000) UDP port \d+$`,
			`^ GID: [0-9:]+$`,
			`^ remote address: LID 0000 QPN 0x[0-9a-f]{4,6} PSN (0x[0-9a-f]{4,6}|000000) UDP port \d+$`,
			`^ GID: [0-9:]+$`,
			`^-{87}$`,
			`^ #bytes     #iterations    BW peak\[MB/sec\]`,
		}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			out := rocePair(t, tc.tool, []string{"-s", "4096", "-n", "40", "-t", "16"}, nil)
			lines := strings.Split(out, "\n")
			if len(lines) < len(tc.want) {
				t.Fatalf("%d lines, want at least %d:\n%s", len(lines), len(tc.want), out)
			}
			for i, re := range tc.want {
				if !regexp.MustCompile(re).MatchString(lines[i]) {
					t.Errorf("line %d: %q does not match %q\n%s", i+1, lines[i], re, out)
					break
				}
			}
		})
	}
}

// TestRocePerfArgs: flags before, between and after SERVER; "--" ends the
// flags; an unknown flag, two servers or a bad value is a usage error (2)
// that says what is wrong.
func TestRocePerfArgs(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		hosts     string
		size, n   string
		gbits     bool
		wantState int
	}{
		{[]string{"10.0.0.1", "-s", "1K"}, "10.0.0.1", "1024", "5000", false, -1},
		{[]string{"-s", "1K", "10.0.0.1", "-n", "7", "--report_gbits"}, "10.0.0.1", "1024", "7", true, -1},
		{[]string{"-s=2K", "--", "-host"}, "-host", "2048", "5000", false, -1},
		{[]string{"--size", "64", "a"}, "a", "64", "5000", false, -1},
		{[]string{}, "", "65536", "5000", false, -1},
		// GNU forms and the single-dash long names of before.
		{[]string{"-s4K", "-n9", "h"}, "h", "4096", "9", false, -1},
		{[]string{"h", "--size=8", "--iters", "3", "-report_gbits"}, "h", "8", "3", true, -1},
		{[]string{"-size", "16", "-iters=2", "h", "-report_gbits=true"}, "h", "16", "2", true, -1},
		{[]string{"a", "-x"}, "", "", "", false, 2},
		{[]string{"a", "b"}, "", "", "", false, 2},
		{[]string{"a", "-h"}, "", "", "", false, 0},
		{[]string{"a", "--help"}, "", "", "", false, 0},
		{[]string{"a", "--dcqcn", "200mbit", "--dcqcn-params", "rpg_time_reset=9ms,min_time_between_cnps=4000"}, "a", "65536", "5000", false, -1},
		{[]string{"a", "--dcqcn", "200mbit", "--dcqcn-params", "rpg_time_rest=9ms"}, "", "", "", false, 2},
		{[]string{"a", "--dcqcn-params", "rpg_time_reset=9ms"}, "", "", "", false, 2},
	} {
		p, st := parseRocePerf("write-bw", tc.args, io.Discard, io.Discard)
		if p == nil {
			if st != tc.wantState {
				t.Errorf("%q: status %d, want %d", tc.args, st, tc.wantState)
			}
			continue
		}
		if tc.wantState >= 0 {
			t.Errorf("%q: parsed, want status %d", tc.args, tc.wantState)
			continue
		}
		if p.server != tc.hosts || strconv.FormatInt(p.size, 10) != tc.size || strconv.Itoa(p.iters) != tc.n || p.gbits != tc.gbits {
			t.Errorf("%q: server %q -s %d -n %d gbits %v, want %q %s %s %v", tc.args, p.server, p.size, p.iters, p.gbits, tc.hosts, tc.size, tc.n, tc.gbits)
		}
	}
	// The flags of scripts/bench-roce.sh and the tests, bool shorthands grouped.
	p, st := parseRocePerf("write-lat", []string{"-p", "20000", "-dev-port", "0", "-timeout", "30s", "-pcap", "x.pcap", "-d", "veth0", "-t", "4", "-s", "8", "-n", "20000", "127.0.0.1"}, io.Discard, io.Discard)
	if p == nil || p.port != 20000 || p.devPort != 0 || p.timeout != 30*time.Second || p.pcap != "x.pcap" || p.ifname != "veth0" || p.txDepth != 4 || p.size != 8 || p.iters != 20000 || p.server != "127.0.0.1" {
		t.Errorf("bench-roce.sh's flags: status %d, %+v", st, p)
	}
	if p, _ := parseRocePerf("read-bw", []string{"-an5", "h"}, io.Discard, io.Discard); p == nil || !p.all || p.iters != 5 {
		t.Errorf("-an5: %+v", p)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"roce", "write-bw", "127.0.0.1", "-x"}, `unknown flag "-x"`},
		{[]string{"roce", "write-bw", "127.0.0.1", "--repot_gbits"}, `unknown flag "--repot_gbits"; did you mean "--report_gbits"?`},
		{[]string{"roce", "write-bw", "127.0.0.1", "-dev-prt", "0"}, `unknown flag "-dev-prt"; did you mean "-dev-port"?`},
		{[]string{"roce", "read-bw", "127.0.0.1", "-alll"}, `unknown flag "-alll"; did you mean "-all"?`},
		{[]string{"roce", "read-bw", "127.0.0.1", "-aX"}, `unknown flag "-X" in "-aX"`},
		{[]string{"roce", "write-bw", "127.0.0.1", "-s", "1K", "127.0.0.2"}, `one SERVER at most, got 2: ["127.0.0.1" "127.0.0.2"]`},
		{[]string{"roce", "read-lat", "127.0.0.1", "-n", "0"}, "-n 0: at least one iteration"},
		{[]string{"roce", "send-bw", "-t", "0", "127.0.0.1"}, "-t 0: the send queue depth is at least 1"},
		{[]string{"roce", "write-bw", "-s", "2G"}, "the size is 1 byte to 1 GiB"},
	} {
		var out, errb bytes.Buffer
		if st := cli(tc.args, &out, &errb); st != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: status %d, stderr %q; want 2 and %q", tc.args, st, errb.String(), tc.want)
		}
	}
}

// TestRocePerfBidirectional: with -b both sides write (or read) at once,
// every size finishes on both sides and the client prints a row for each
// (the sum of both directions, perftest's -b; its value is timing, left to
// the benchmarks); -b is refused for the latency and send tools.
func TestRocePerfBidirectional(t *testing.T) {
	for _, tool := range []string{"write-bw", "read-bw"} {
		out := rocePairWith(t, tool, []string{"-b", "-a", "-n", "20"}, func(port string) []string {
			return []string{"roce", tool, "127.0.0.1", "-b", "-a", "-n", "20", "-p", port, "--timeout=30s"}
		})
		for _, size := range []string{"2", "65536", "8388608"} {
			if row := resultRow(out, size); row == nil || row[1] != "20" {
				t.Errorf("%s -b: no row for %s bytes:\n%s", tool, size, out)
			}
		}
	}
	for _, tool := range []string{"write-lat", "send-bw"} {
		if _, st := parseRocePerf(tool, []string{"-b"}, io.Discard, io.Discard); st != 2 {
			t.Errorf("%s -b accepted", tool)
		}
	}
}
