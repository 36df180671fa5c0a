package nccllog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goccl/goccl/doctor"
	"github.com/goccl/goccl/doctor/internal/doctortest"
)

func logTestAnalyze(t testing.TB, text string) *Report {
	t.Helper()
	rep, err := Analyze(strings.NewReader(text))
	if err != nil {
		t.Fatalf("AnalyzeNCCLLog: %v", err)
	}
	return rep
}

// logExpect is what one log must yield. Empty strings and nil slices are
// still checked where the field comment says so.
type logExpect struct {
	file        string
	version     string // checked exactly ("" = the log has no version line)
	net         string // checked exactly
	netPlugin   string // checked exactly
	gdrdma      string // checked exactly
	main        string // code of findings[0]; "" = no error or warn finding at all
	mainMention []string
	codes       []string // codes that must be present
	absent      []string // codes that must not be present
	nranks      int      // checked exactly
	nnodes      int      // checked exactly
	hosts       []string // checked exactly when non-nil
	hcas        []string // "name:port/LINK" subset, checked when non-nil
	hcaCount    int      // checked when > 0
	ifaces      []string // "role=name:address" that must be present
	intra       []string // checked exactly (nil = empty)
	channels    int      // checked exactly
	env         map[string]string
	extra       func(t *testing.T, rep *Report)
}

func logCheck(t *testing.T, rep *Report, e logExpect) {
	t.Helper()
	if rep.NCCLVersion != e.version {
		t.Errorf("nccl_version = %q, want %q", rep.NCCLVersion, e.version)
	}
	if rep.Net != e.net {
		t.Errorf("net = %q, want %q", rep.Net, e.net)
	}
	if rep.NetPlugin != e.netPlugin {
		t.Errorf("net_plugin = %q, want %q", rep.NetPlugin, e.netPlugin)
	}
	if rep.GDRDMA != e.gdrdma {
		t.Errorf("gdrdma = %q, want %q", rep.GDRDMA, e.gdrdma)
	}
	if e.main == "" {
		for _, f := range rep.Findings {
			if f.Severity != doctor.SevInfo {
				t.Errorf("unexpected %s finding %s: %s", f.Severity, f.Code, f.Message)
			}
		}
	} else {
		if len(rep.Findings) == 0 {
			t.Errorf("no findings, want main finding %s", e.main)
		} else {
			f := rep.Findings[0]
			if f.Code != e.main {
				t.Errorf("main finding = %s (%s), want %s; all: %v", f.Code, f.Message, e.main, logCodes(rep))
			}
			for _, s := range e.mainMention {
				if !strings.Contains(f.Message+" fix: "+f.Fix, s) {
					t.Errorf("main finding %s does not mention %q: %s / %s", f.Code, s, f.Message, f.Fix)
				}
			}
		}
	}
	for _, c := range e.codes {
		if !slices.Contains(logCodes(rep), c) {
			t.Errorf("finding %s missing; have %v", c, logCodes(rep))
		}
	}
	for _, c := range e.absent {
		if slices.Contains(logCodes(rep), c) {
			t.Errorf("finding %s present, want absent", c)
		}
	}
	if rep.NRanks != e.nranks {
		t.Errorf("nranks = %d, want %d", rep.NRanks, e.nranks)
	}
	if rep.NNodes != e.nnodes {
		t.Errorf("nnodes = %d, want %d", rep.NNodes, e.nnodes)
	}
	if e.hosts != nil && !slices.Equal(rep.Hosts, e.hosts) {
		t.Errorf("hosts = %v, want %v", rep.Hosts, e.hosts)
	}
	var hcas []string
	for _, h := range rep.HCAs {
		hcas = append(hcas, fmt.Sprintf("%s:%d/%s", h.Name, h.Port, h.LinkLayer))
	}
	for _, h := range e.hcas {
		if !slices.Contains(hcas, h) {
			t.Errorf("HCA %s missing; have %v", h, hcas)
		}
	}
	if e.hcaCount > 0 && len(rep.HCAs) != e.hcaCount {
		t.Errorf("%d HCAs, want %d: %v", len(rep.HCAs), e.hcaCount, hcas)
	}
	var ifs []string
	for _, it := range rep.Interfaces {
		ifs = append(ifs, it.Role+"="+it.Name+":"+it.Address)
	}
	for _, want := range e.ifaces {
		if !slices.Contains(ifs, want) {
			t.Errorf("interface %s missing; have %v", want, ifs)
		}
	}
	if !slices.Equal(rep.IntraNode, e.intra) && !(len(rep.IntraNode) == 0 && len(e.intra) == 0) {
		t.Errorf("intra_node = %v, want %v", rep.IntraNode, e.intra)
	}
	if rep.Channels != e.channels {
		t.Errorf("channels = %d, want %d", rep.Channels, e.channels)
	}
	for k, v := range e.env {
		if got, ok := rep.Env[k]; !ok || got != v {
			t.Errorf("env %s = %q (present %t), want %q", k, got, ok, v)
		}
	}
	if e.extra != nil {
		e.extra(t, rep)
	}
}

func logCodes(rep *Report) []string {
	var cs []string
	for _, f := range rep.Findings {
		cs = append(cs, f.Code)
	}
	return cs
}

func logFinding(rep *Report, code string) *doctor.Finding {
	for i := range rep.Findings {
		if rep.Findings[i].Code == code {
			return &rep.Findings[i]
		}
	}
	return nil
}

// logRealExpect follows the "STATED DIAGNOSIS / EXPECTED FACTS" header of
// each real log; facts the excerpt does not contain are expected unknown.
var logRealExpect = []logExpect{
	{
		// 2.7.6, internal IB, GDRDMA on every channel; P2P_LEVEL=LOC + SHM off
		// force intra-node traffic through the NIC; mixed IB + RoCE HCAs.
		file: "nccl-log-01.txt", version: "2.7.6+cuda11.1", net: "IB", gdrdma: "on",
		main: "p2p-disabled-by-env", mainMention: []string{"NCCL_P2P_LEVEL=LOC", "NET loopback"},
		codes:  []string{"shm-disabled-by-env", "hca-mixed-link-layers"},
		absent: []string{"gdr-not-used", "gdr-partial"},
		nranks: 4, nnodes: 1, hosts: []string{"10-90-43-152"},
		hcas:     []string{"mlx5_8:1/IB", "mlx5_9:1/IB", "mlx5_10:1/IB", "mlx5_11:1/IB", "mlx5_12:1/IB", "mlx5_14:1/IB", "mlx5_15:1/IB", "mlx5_16:1/RoCE", "mlx5_17:1/RoCE"},
		hcaCount: 9,
		ifaces:   []string{"bootstrap=ib8:192.168.1.8", "bootstrap=ib15:192.168.1.15", "ib-oob=ib8:192.168.1.8"},
		intra:    []string{"NET loopback"},
		env:      map[string]string{"NCCL_P2P_LEVEL": "LOC", "NCCL_SHM_DISABLE": "1"},
		extra: func(t *testing.T, rep *Report) {
			n := 0
			for _, it := range rep.Interfaces {
				if it.Role == "bootstrap" {
					n++
				}
			}
			if n != 7 {
				t.Errorf("%d bootstrap interfaces, want 7", n)
			}
		},
	},
	{
		// 2.7.8 over Ray ("[0m " remnants), no libibverbs -> Socket; veth with a
		// link-local address next to ens5.
		file: "nccl-log-02.txt", version: "2.7.8+cuda11.1", net: "Socket", gdrdma: "off",
		main: "socket-on-virtual-interface", mainMention: []string{"veth75fa783", "NCCL_SOCKET_IFNAME=ens5"},
		codes:  []string{"no-libibverbs"},
		absent: []string{"socket-while-ib-listed"},
		nranks: 2, hosts: []string{"ip-172-31-0-137"},
		ifaces:   []string{"bootstrap=ens5:172.31.0.137", "bootstrap=veth75fa783:fe80::14ad:64ff:fe64:b31e%veth75fa783", "net-socket=ens5:172.31.0.137", "net-socket=veth75fa783:fe80::14ad:64ff:fe64:b31e%veth75fa783"},
		channels: 4,
		extra: func(t *testing.T, rep *Report) {
			if !rep.MultiNode {
				t.Error("multi_node = false; peers share busId 1e0, so they are on different nodes")
			}
		},
	},
	{
		// 2.5.6, IB disabled by env, bootstrap on ip6tnl0 (tunnel, link-local)
		// first; veth0 carries the routable address.
		file: "nccl-log-05.txt", version: "2.5.6+cuda10.0", net: "Socket", gdrdma: "off",
		main: "socket-on-virtual-interface", mainMention: []string{"ip6tnl0", "link-local", "NCCL_SOCKET_IFNAME=veth0"},
		codes:  []string{"ib-disabled-by-env"},
		ifaces: []string{"bootstrap=ip6tnl0:fe80::e866:19ff:fe1e:a688%ip6tnl0", "bootstrap=veth0:2a02:6b8:fc1d:3606:0:4457:edef:600a"},
		env:    map[string]string{"NCCL_IB_DISABLE": "1"},
		extra: func(t *testing.T, rep *Report) {
			if rep.Interfaces[0].Name != "ip6tnl0" || rep.Interfaces[0].Index != 0 {
				t.Errorf("first interface %+v, want ip6tnl0 at index 0", rep.Interfaces[0])
			}
		},
	},
	{
		// 2.18.5, IB over RoCE mlx5_4, GID index 3 from env, 2 nodes; the
		// failure line itself is not in the excerpt (see TestNCCLLogRealPlusTitle).
		file: "nccl-log-07.txt", version: "2.18.5+cuda12.0", net: "IB", gdrdma: "unknown",
		main: "", nranks: 2, nnodes: 2, hosts: []string{"node2", "node4"},
		hcas: []string{"mlx5_4:1/RoCE"}, hcaCount: 1,
		ifaces:   []string{"bootstrap=enp24s0np0:10.10.10.1", "bootstrap=enp24s0np0:10.10.10.3", "ib-oob=enp24s0np0:10.10.10.1"},
		channels: 2,
		env:      map[string]string{"NCCL_IB_GID_INDEX": "3", "NCCL_IB_HCA": "mlx5_4"},
		extra: func(t *testing.T, rep *Report) {
			if rep.NVLS.Channels == nil || *rep.NVLS.Channels != 0 {
				t.Errorf("nvls channels = %v, want 0", rep.NVLS.Channels)
			}
			if rep.P2PChannels != 2 {
				t.Errorf("p2p channels = %d, want 2", rep.P2PChannels)
			}
			h := rep.HCAs[0]
			if h.GIDIndex == nil || *h.GIDIndex != 3 || !slices.Contains(h.Flags, "RO") {
				t.Errorf("mlx5_4 = %+v, want GID index 3 and RO flag", h)
			}
			if rep.CUDADriverVersion != "12020" || rep.InitComplete != 1 {
				t.Errorf("cuda driver %q, init complete %d", rep.CUDADriverVersion, rep.InitComplete)
			}
			// "qpn 58 mtu 3": IB MTU enum 3 is 1024 bytes.
			if h.MTU != 1024 {
				t.Errorf("mlx5_4 mtu = %d, want 1024 (bytes, from enum 3)", h.MTU)
			}
			if f := logFinding(rep, "roce-mtu-low"); f == nil || !strings.Contains(f.Message, "mlx5_4") {
				t.Errorf("roce-mtu-low = %+v, want it for mlx5_4", f)
			}
		},
	},
	{
		// 2.24.3 with the prefix stripped; IB through the external RDMA/SHARP
		// plugin, NVLS available, one node with 8 ranks.
		file: "nccl-log-12.txt", version: "2.24.3+cuda12.2", net: "IBext_v8", netPlugin: "NCCL RDMA Plugin v8", gdrdma: "unknown",
		main: "", absent: []string{"socket-on-loopback"}, nranks: 8,
		hcas:     []string{"ibp0:1/IB", "ibp7:1/IB"},
		hcaCount: 8,
		ifaces:   []string{"bootstrap=eth0:10.7.147.73", "ib-oob=eth0:10.7.147.73"},
		env:      map[string]string{"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_PCI_RELAXED_ORDERING": "1"},
		extra: func(t *testing.T, rep *Report) {
			if rep.NVLS.Available != "yes" {
				t.Errorf("nvls available = %q, want yes", rep.NVLS.Available)
			}
			if rep.CollNet.Plugin != "SHARP" {
				t.Errorf("collnet plugin = %q, want SHARP", rep.CollNet.Plugin)
			}
			if rep.CUDADriverVersion != "12040" {
				t.Errorf("cuda driver = %q", rep.CUDADriverVersion)
			}
			for _, h := range rep.HCAs {
				if !slices.Equal(h.Flags, []string{"SHARP", "RO"}) {
					t.Errorf("%s flags %v, want [SHARP RO]", h.Name, h.Flags)
				}
			}
			if !strings.HasSuffix(rep.NetPluginPath, "/libnccl-net.so") {
				t.Errorf("plugin path %q", rep.NetPluginPath)
			}
		},
	},
	{
		// 2-node launch with NCCL_SOCKET_IFNAME=lo: loopback in a multi-node
		// job, connection refused, no libibverbs.
		file: "nccl-log-22.txt", version: "", net: "Socket", gdrdma: "off",
		main: "socket-on-loopback", mainMention: []string{"lo", "127.0.0.1", "multi-node", "NCCL_SOCKET_IFNAME=lo"},
		codes: []string{"connection-refused", "no-libibverbs"}, nnodes: 2, hosts: []string{"GPU9"},
		ifaces: []string{"bootstrap=lo:127.0.0.1", "net-socket=lo:127.0.0.1"},
		env:    map[string]string{"NCCL_SOCKET_IFNAME": "lo"},
		extra: func(t *testing.T, rep *Report) {
			if f := logFinding(rep, "socket-on-loopback"); f == nil || f.Severity != doctor.SevError {
				t.Errorf("socket-on-loopback = %+v, want error", f)
			}
			if f := logFinding(rep, "connection-refused"); f == nil || !strings.Contains(f.Message, "3 time") {
				t.Errorf("connection-refused = %+v, want 3 occurrences", f)
			}
		},
	},
	{
		// RoCE, GPU Direct RDMA disabled for both HCAs, 16 ranks.
		file: "nccl-log-25.txt", version: "", net: "IB", gdrdma: "off",
		main: "gdr-disabled-for-hca", mainMention: []string{"mlx5_0", "mlx5_1", "nvidia-peermem"},
		absent: []string{"gdr-not-used"}, nranks: 16, hosts: []string{"hostname1"},
		hcas: []string{"mlx5_0:1/RoCE", "mlx5_1:1/RoCE"}, hcaCount: 2,
		ifaces: []string{"ib-oob=primaryip:10.10.10.10"},
		extra: func(t *testing.T, rep *Report) {
			for _, h := range rep.HCAs {
				if h.GDR != "disabled" {
					t.Errorf("%s gdr = %q, want disabled", h.Name, h.GDR)
				}
			}
		},
	},
	{
		// IB disabled by env with IPoIB ib0 present; P2P_LEVEL=LOC; hard-wrapped line.
		file: "nccl-log-32.txt", version: "", net: "Socket", gdrdma: "off",
		main: "ib-disabled-by-env", mainMention: []string{"ib0", "NCCL_IB_DISABLE"},
		codes: []string{"p2p-disabled-by-env"}, absent: []string{"socket-while-ib-listed"},
		hosts:  []string{"ncg12"},
		ifaces: []string{"bootstrap=ib0:192.168.8.11", "net-socket=ib0:192.168.8.11"},
		env:    map[string]string{"NCCL_IB_DISABLE": "1", "NCCL_P2P_LEVEL": "LOC"},
		extra: func(t *testing.T, rep *Report) {
			if rep.CUDADriverVersion != "12000" {
				t.Errorf("cuda driver = %q", rep.CUDADriverVersion)
			}
			if f := logFinding(rep, "ib-disabled-by-env"); f == nil || f.Severity != doctor.SevWarn {
				t.Errorf("ib-disabled-by-env = %+v, want warn", f)
			}
		},
	},
	{
		// nccl-tests teardown: 16 ranks on swat1-04 shown, no transport lines
		// in the excerpt (see TestNCCLLogRealPlusTitle for the GDR diagnosis).
		file: "nccl-log-33.txt", version: "", net: "", gdrdma: "unknown",
		main: "", nranks: 16, hosts: []string{"swat1-04"},
		extra: func(t *testing.T, rep *Report) {
			if rep.InitComplete != 5 {
				t.Errorf("init complete = %d, want 5", rep.InitComplete)
			}
			if rep.AvgBusBandwidthGBs != 33.3227 {
				t.Errorf("avg busbw = %v, want 33.3227", rep.AvgBusBandwidthGBs)
			}
		},
	},
	{
		// NCCL 2.0/2.1 ("[1] INFO", no "NCCL "): Socket, interfaces one per
		// line, virbr0/docker0/tunl0 next to eno1; the maintainer's fix is
		// NCCL_SOCKET_IFNAME=eno1.
		file: "nccl-log-horovod-67.txt", version: "", net: "Socket", gdrdma: "off",
		main: "socket-on-virtual-interface", mainMention: []string{"virbr0", "NCCL_SOCKET_IFNAME=eno1"},
		absent: []string{"no-nccl-lines"}, hosts: []string{"cx50"},
		ifaces: []string{"bootstrap=eno1:192.168.12.50", "bootstrap=eno2:192.168.255.229", "bootstrap=tunl0:172.1.148.64", "ib-oob=eno1:"},
		extra: func(t *testing.T, rep *Report) {
			logWantNCCLLines(t, rep, 9)
			if got := doctortest.Codes(rep.Findings, doctor.SevWarn)["socket-on-virtual-interface"]; got != 3 {
				t.Errorf("%d socket-on-virtual-interface warnings, want 3 (virbr0, docker0, tunl0): %v", got, logCodes(rep))
			}
		},
	},
	{
		// Pre-2.3 prefix among TensorFlow's "INFO:tensorflow:" lines: internal
		// IB on mlx4_0, sideband eth0, flannel.1 in the interface list.
		file: "nccl-log-horovod-489.txt", version: "", net: "IB", gdrdma: "unknown",
		main: "socket-on-virtual-interface", mainMention: []string{"flannel.1", "NCCL_SOCKET_IFNAME=eth0"},
		hosts: []string{"nmyjs-202-75"}, hcas: []string{"mlx4_0:1/IB"}, hcaCount: 1,
		ifaces: []string{"bootstrap=eth0:10.141.202.75", "bootstrap=ib0:10.141.251.43", "ib-oob=eth0:"},
		extra: func(t *testing.T, rep *Report) {
			logWantNCCLLines(t, rep, 9)
			if rep.Lines != 23 {
				t.Errorf("lines = %d, want 23", rep.Lines)
			}
		},
	},
	{
		// Pre-2.3 WARN with file:line and no "NCCL ", "**" Markdown around
		// lines: no libibverbs, Socket over enp30s0 plus docker/bridge/veth.
		file: "nccl-log-horovod-98.txt", version: "", net: "Socket", gdrdma: "off",
		main: "socket-on-virtual-interface", mainMention: []string{"docker0", "NCCL_SOCKET_IFNAME=enp30s0"},
		codes: []string{"no-libibverbs"}, absent: []string{"socket-while-ib-listed"}, hosts: []string{"admin-pc"},
		ifaces: []string{"bootstrap=enp30s0:192.168.178.46", "bootstrap=veth1316791:fe80::6cfa:a5ff:fec7:3d3b%veth1316791"},
		extra: func(t *testing.T, rep *Report) {
			logWantNCCLLines(t, rep, 16)
			if !slices.Contains(rep.Warnings, "Failed to open libibverbs.so[.1]") {
				t.Errorf("warnings %q, want the libibverbs WARN payload", rep.Warnings)
			}
		},
	},
	{
		// NCCL 2.0's connection line has no "Ring NN :": "[1] INFO 1 -> 2 via P2P/IPC".
		file: "nccl-log-horovod-83.txt", version: "", net: "", gdrdma: "unknown",
		main: "", absent: []string{"no-nccl-lines"}, hosts: []string{"ecb2de971add"},
		intra: []string{"P2P/IPC"},
		extra: func(t *testing.T, rep *Report) { logWantNCCLLines(t, rep, 4) },
	},
	{
		// Interleaved ranks leave "Ring 04 : 6[6] -> 5[5] via P2P/IPC" with no
		// prefix at all; those lines alone are still connection lines.
		file: "nccl-log-nccl-147.txt", version: "", net: "", gdrdma: "unknown",
		main: "", hosts: []string{"learnfair062"}, intra: []string{"P2P/IPC"},
		extra: func(t *testing.T, rep *Report) {
			var bare []string
			for _, l := range strings.Split(doctortest.RealInput(t, "nccl-log-nccl-147.txt"), "\n") {
				if strings.HasPrefix(l, "Ring ") {
					bare = append(bare, l)
				}
			}
			only := logTestAnalyze(t, strings.Join(bare, "\n"))
			if len(bare) != 2 || only.NCCLLines != 0 || !slices.Equal(only.IntraNode, []string{"P2P/IPC"}) || len(only.Findings) != 0 {
				t.Errorf("%d bare lines: nccl lines %d, intra %v, findings %v; want 2 lines, 0, [P2P/IPC], none",
					len(bare), only.NCCLLines, only.IntraNode, logCodes(only))
			}
		},
	},
	{
		// Two channel-line tails pasted with no prefix: one connection, GDR
		// on its [send] side, not on its [receive] side (nvidia-peermem not
		// loaded on the receiver's node, per the thread).
		file: "nccl-log-nccl-897.txt", version: "", net: "IB", gdrdma: "partial",
		main: "gdr-mixed-connection", mainMention: []string{"9[1a000] -> 2[6b000]", "[send] via NET/IB/0/GDRDMA", "[receive] via NET/IB/1", "nvidia-peermem"},
		absent: []string{"gdr-partial", "gdr-not-used", "no-nccl-lines"},
		extra: func(t *testing.T, rep *Report) {
			if f := rep.Findings[0]; f.Severity != doctor.SevWarn || len(rep.Findings) != 1 {
				t.Errorf("findings %v, want one warning", rep.Findings)
			}
			if rep.GDRDMASend != "on" || rep.GDRDMAReceive != "off" || rep.NCCLLines != 0 {
				t.Errorf("gdrdma send %q receive %q, nccl lines %d; want on, off, 0", rep.GDRDMASend, rep.GDRDMAReceive, rep.NCCLLines)
			}
		},
	},
}

// logWantNCCLLines checks how many lines carried an NCCL prefix, the
// pre-2.3 "host:pid:tid [dev] INFO" (no "NCCL ") included.
func logWantNCCLLines(t *testing.T, rep *Report, n int) {
	t.Helper()
	if rep.NCCLLines != n {
		t.Errorf("nccl lines = %d, want %d", rep.NCCLLines, n)
	}
}

func TestNCCLLogRealInputs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "real-inputs", "nccl-log-*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no real inputs: %v", err)
	}
	covered := map[string]bool{}
	for _, e := range logRealExpect {
		covered[e.file] = true
		t.Run(e.file, func(t *testing.T) {
			logCheck(t, logTestAnalyze(t, doctortest.RealInput(t, e.file)), e)
		})
	}
	for _, f := range files {
		if !covered[filepath.Base(f)] {
			t.Errorf("%s has no expectation in logRealExpect", f)
		}
	}
}

// TestNCCLLogRealPlusTitle adds to real excerpts the lines their headers
// quote (issue title / maintainer reply) but the excerpt lacks.
func TestNCCLLogRealPlusTitle(t *testing.T) {
	t.Run("07 + completion error 4 from the title", func(t *testing.T) {
		body := doctortest.RealInput(t, "nccl-log-07.txt") +
			"node2:14159:14172 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer with error 4, opcode 0, len 0, vendor err 81 (Send) localGid ::ffff:10.10.10.1 remoteGid ::ffff:10.10.10.3\n"
		rep := logTestAnalyze(t, body)
		f := rep.Findings[0]
		if f.Code != "ib-completion-error-gdr" || f.Severity != doctor.SevError {
			t.Fatalf("main finding %s/%s, want error ib-completion-error-gdr", f.Severity, f.Code)
		}
		for _, s := range []string{"vendor err 81", "node2", "ACS", "NCCL_NET_GDR_LEVEL=0", "IOMMU"} {
			if !strings.Contains(f.Message+f.Fix, s) {
				t.Errorf("finding does not mention %q: %+v", s, f)
			}
		}
	})
	t.Run("01 + completion error 4 from the title", func(t *testing.T) {
		body := doctortest.RealInput(t, "nccl-log-01.txt") +
			"10-90-43-152:120890:121560 [0] transport/net_ib.cc:818 NCCL WARN NET/IB : Got completion with error 4, opcode 8983, len 0, vendor err 81\n"
		rep := logTestAnalyze(t, body)
		f := rep.Findings[0]
		if f.Code != "ib-completion-error-gdr" || f.Severity != doctor.SevError {
			t.Fatalf("main finding %s/%s, want error ib-completion-error-gdr; all %v", f.Severity, f.Code, logCodes(rep))
		}
		for _, s := range []string{"error 4", "vendor err 81", "10-90-43-152", "GPUDirect RDMA on", "ACS", "NCCL_NET_GDR_LEVEL=0"} {
			if !strings.Contains(f.Message+f.Fix, s) {
				t.Errorf("finding does not mention %q: %+v", s, f)
			}
		}
		// The excerpt's own findings stay.
		for _, c := range []string{"p2p-disabled-by-env", "shm-disabled-by-env"} {
			if logFinding(rep, c) == nil {
				t.Errorf("finding %s missing: %v", c, logCodes(rep))
			}
		}
	})
	t.Run("05 + maintainer's connect timeout through ip6tnl0", func(t *testing.T) {
		body := doctortest.RealInput(t, "nccl-log-05.txt") +
			"NvYt-dcf441d17e21-1bdf2bc9-79ce82ee-3fe03e8-c2959af0:98:220 [1] include/socket.h:390 NCCL WARN Connect to fe80::745d:60ff:fef9:e1dd%ip6tnl0<46681> failed : Connection timed out\n"
		rep := logTestAnalyze(t, body)
		f := rep.Findings[0]
		if f.Code != "socket-on-virtual-interface" || f.Severity != doctor.SevError || !strings.Contains(f.Message, "ip6tnl0") {
			t.Errorf("main finding %+v, want error socket-on-virtual-interface naming ip6tnl0", f)
		}
		if c := logFinding(rep, "connection-timeout"); c == nil || !strings.Contains(c.Message, "fe80::745d:60ff:fef9:e1dd%ip6tnl0<46681>") {
			t.Errorf("connection-timeout = %+v, want it to name the address", c)
		}
	})
	t.Run("33 + channel lines without GDRDMA", func(t *testing.T) {
		body := doctortest.RealInput(t, "nccl-log-33.txt") +
			"swat1-04:2017630:2017671 [2] NCCL INFO Channel 00/0 : 10[48000] -> 2[48000] [receive] via NET/IB/1\n" +
			"swat1-04:2017630:2017671 [2] NCCL INFO Channel 01/0 : 2[48000] -> 10[48000] [send] via NET/IB/1\n"
		rep := logTestAnalyze(t, body)
		if rep.Net != "IB" || rep.GDRDMA != "off" {
			t.Errorf("net %q gdrdma %q, want IB off", rep.Net, rep.GDRDMA)
		}
		if f := rep.Findings[0]; f.Code != "gdr-not-used" || !strings.Contains(f.Fix, "nvidia-peermem") {
			t.Errorf("main finding %+v, want gdr-not-used with the nvidia-peermem hint", f)
		}
	})
}

// logSyntheticExpect covers formats the real logs lack; the files are in
// testdata/ and start with a "#" comment saying what they model.
var logSyntheticExpect = []logExpect{
	{
		file: "v2.3-rings-ib.txt", version: "2.3.7+cuda9.2", net: "IB", gdrdma: "on", main: "",
		nranks: 4, nnodes: 2, hosts: []string{"nodeA", "nodeB"},
		hcas: []string{"mlx5_0:1/IB", "mlx5_1:1/IB"}, hcaCount: 2,
		ifaces:   []string{"bootstrap=eth0:10.0.0.1", "bootstrap=eth0:10.0.0.2", "ib-oob=ib0:"},
		intra:    []string{"P2P/IPC"},
		channels: 2,
		env:      map[string]string{"NCCL_SOCKET_IFNAME": "eth0"},
		extra: func(t *testing.T, rep *Report) {
			if rep.InitComplete != 1 {
				t.Errorf("init complete = %d, want 1", rep.InitComplete)
			}
		},
	},
	{
		file: "v2.4-mpirun-aws-ofi.txt", version: "2.4.8+cuda10.1", net: "AWS Libfabric", netPlugin: "aws-ofi-nccl 1.7.4-aws", gdrdma: "on", main: "",
		nranks: 16, nnodes: 2, hosts: []string{"ip-172-31-10-1", "ip-172-31-10-2"},
		ifaces:   []string{"bootstrap=ens32:172.31.10.1", "bootstrap=ens32:172.31.10.2"},
		intra:    []string{"P2P/IPC"},
		channels: 1,
		extra: func(t *testing.T, rep *Report) {
			if rep.OFIProvider != "efa" {
				t.Errorf("ofi provider = %q, want efa", rep.OFIProvider)
			}
		},
	},
	{
		file: "v2.19-cumem-shm-nvls.txt", version: "2.19.3+cuda12.3", net: "Socket", gdrdma: "off", main: "",
		absent: []string{"socket-while-ib-listed"},
		nranks: 4, nnodes: 1, hosts: []string{"gpu01"},
		intra:    []string{"P2P/CUMEM", "SHM"},
		channels: 2,
		extra: func(t *testing.T, rep *Report) {
			if rep.NVLS.Available != "no" || rep.NVLS.Channels == nil || *rep.NVLS.Channels != 0 {
				t.Errorf("nvls = %+v, want not available, 0 channels", rep.NVLS)
			}
			if rep.CUDADriverVersion != "12030" {
				t.Errorf("cuda driver = %q", rep.CUDADriverVersion)
			}
		},
	},
	{
		file: "v2.18-ib-gdr-2node.txt", version: "2.18.3+cuda12.2", net: "IB", gdrdma: "on", main: "",
		absent: []string{"gdr-partial", "gdr-not-used", "gdr-mixed-connection"},
		nranks: 2, nnodes: 2, hosts: []string{"hostA", "hostB"},
		hcas: []string{"mlx5_0:1/IB", "mlx5_1:1/IB"}, hcaCount: 2,
		ifaces:   []string{"bootstrap=ens1f0:10.20.0.1", "ib-oob=ens1f0:10.20.0.2"},
		channels: 2,
		extra: func(t *testing.T, rep *Report) {
			if !rep.MultiNode || slices.Contains(rep.IntraNode, "NET loopback") {
				t.Errorf("multi_node %t intra %v: NET hops between nodes are not loopback", rep.MultiNode, rep.IntraNode)
			}
		},
	},
	{
		file: "gdr-partial.txt", version: "", net: "IB", gdrdma: "partial",
		main: "gdr-partial", mainMention: []string{"mlx5_0", "mlx5_1"}, absent: []string{"gdr-mixed-connection"},
		hosts: []string{"n1", "n2"}, nnodes: 2, hcaCount: 2,
		extra: func(t *testing.T, rep *Report) {
			if rep.HCAs[0].GDR != "enabled" {
				t.Errorf("mlx5_0 gdr = %q, want enabled", rep.HCAs[0].GDR)
			}
			f := rep.Findings[0]
			// "HCA 0" of the GPU Direct RDMA line is mlx5_0 of the channel
			// lines: one NIC, one name; mlx5_1 is the NIC without GDR.
			if want := "GPUDirect RDMA used on mlx5_0 but not on mlx5_1"; f.Message != want {
				t.Errorf("gdr-partial message %q, want %q", f.Message, want)
			}
			if rep.GDRDMASend != "off" || rep.GDRDMAReceive != "partial" {
				t.Errorf("gdrdma send %q receive %q, want off, partial", rep.GDRDMASend, rep.GDRDMAReceive)
			}
		},
	},
	{
		file: "collnet-unsupported.txt", version: "", net: "IB", gdrdma: "unknown",
		main: "collnet-unsupported", mainMention: []string{"NCCL_COLLNET_ENABLE=1", "SHARP"},
		hosts: []string{"c1"}, hcaCount: 1,
		ifaces: []string{"bootstrap=bond0:10.3.0.5"},
		env:    map[string]string{"NCCL_COLLNET_ENABLE": "1"},
		extra: func(t *testing.T, rep *Report) {
			if !rep.CollNet.Requested || rep.CollNet.Supported != "no" {
				t.Errorf("collnet = %+v, want requested, unsupported", rep.CollNet)
			}
		},
	},
	{
		file: "connection-refused-docker.txt", version: "", net: "", gdrdma: "unknown",
		main: "socket-on-virtual-interface", mainMention: []string{"docker0", "NCCL_SOCKET_IFNAME=eth0"},
		codes: []string{"connection-refused"}, hosts: []string{"w1", "w2"}, nnodes: 2,
		ifaces: []string{"bootstrap=docker0:172.17.0.1", "bootstrap=eth0:10.5.0.11", "bootstrap=eth0:10.5.0.12"},
		extra: func(t *testing.T, rep *Report) {
			if f := rep.Findings[0]; f.Severity != doctor.SevError {
				t.Errorf("docker0 finding severity %s, want error (connections to its address failed)", f.Severity)
			}
			if f := logFinding(rep, "connection-refused"); f == nil || !strings.Contains(f.Message, "172.17.0.1<45123>") || !strings.Contains(f.Message, "2 time") {
				t.Errorf("connection-refused = %+v", f)
			}
			if !rep.MultiNode {
				t.Error("multi_node false with two hosts in the log")
			}
		},
	},
	{
		file: "socket-while-ib.txt", version: "", net: "Socket", gdrdma: "off",
		main: "socket-while-ib-listed", mainMention: []string{"ib0", "libibverbs"},
		codes: []string{"no-libibverbs"}, hosts: []string{"ib-node1"},
		extra: func(t *testing.T, rep *Report) {
			if f := logFinding(rep, "no-libibverbs"); f == nil || f.Severity != doctor.SevWarn {
				t.Errorf("no-libibverbs = %+v, want warn (IPoIB present)", f)
			}
		},
	},
	{
		file: "roce-gid.txt", version: "", net: "IB", gdrdma: "unknown",
		main: "ib-completion-error", mainMention: []string{"error 12", "NCCL_IB_GID_INDEX", "show_gids"},
		codes: []string{"ib-modify-qp-failed"}, absent: []string{"network-unreachable"},
		hosts: []string{"r1"}, hcas: []string{"mlx5_0:1/RoCE", "mlx5_1:1/RoCE"}, hcaCount: 2,
		ifaces: []string{"ib-oob=eth2:192.168.50.1"},
		extra: func(t *testing.T, rep *Report) {
			if f := logFinding(rep, "ib-modify-qp-failed"); f == nil || !strings.Contains(f.Fix, "NCCL_IB_GID_INDEX") {
				t.Errorf("ib-modify-qp-failed = %+v, want the GID index hint", f)
			}
		},
	},
	{
		// "NET/IB/1(1)/GDRDMA" (PXN proxy rank) and "/GDRDMA(PCI)" are GDR.
		file: "v2.12-pxn-gdr.txt", version: "", net: "IB", gdrdma: "on", main: "",
		absent: []string{"gdr-partial", "gdr-not-used", "gdr-mixed-connection"},
		nranks: 0, nnodes: 2, hosts: []string{"hostA", "hostB"}, hcaCount: 2,
		extra: func(t *testing.T, rep *Report) {
			if rep.GDRDMASend != "on" || rep.GDRDMAReceive != "on" {
				t.Errorf("gdrdma send %q receive %q, want on, on", rep.GDRDMASend, rep.GDRDMAReceive)
			}
		},
	},
	{
		// Sends without GDR, receives with it, on the one NIC: GDR on.
		file: "pcie-gdr-read-off.txt", version: "", net: "IB", gdrdma: "on", main: "",
		codes:  []string{"gdr-mixed-connection"},
		absent: []string{"gdr-partial", "gdr-not-used", "gdr-disabled-for-hca"},
		nnodes: 2, hosts: []string{"p1", "p2"}, hcas: []string{"mlx5_0:1/IB"}, hcaCount: 1,
		extra: func(t *testing.T, rep *Report) {
			if rep.GDRDMASend != "off" || rep.GDRDMAReceive != "on" {
				t.Errorf("gdrdma send %q receive %q, want off, on", rep.GDRDMASend, rep.GDRDMAReceive)
			}
			if rep.HCAs[0].GDR != "enabled" {
				t.Errorf("mlx5_0 gdr = %q, want enabled", rep.HCAs[0].GDR)
			}
			// Both connections: receive with GDR, send without: GDR read off.
			f := logFinding(rep, "gdr-mixed-connection")
			if f == nil || f.Severity != doctor.SevInfo || !strings.Contains(f.Message, "1[3b000] -> 0[3b000]") ||
				!strings.Contains(f.Message, "0[3b000] -> 1[3b000]") || !strings.Contains(f.Fix, "NCCL_NET_GDR_READ=1") {
				t.Errorf("gdr-mixed-connection = %+v, want info naming both connections and NCCL_NET_GDR_READ", f)
			}
			var buf bytes.Buffer
			if err := rep.WriteText(&buf); err != nil || !strings.Contains(buf.String(), "on (send off, receive on)") {
				t.Errorf("text (%v) lacks the per-direction GDR facts:\n%s", err, buf.String())
			}
		},
	},
	{
		// "GPU Direct RDMA Disabled for GPU 0[0] / HCA 0" (2.5-2.6).
		file: "v2.5-gdr-disabled-busid.txt", version: "2.5.6+cuda10.1", net: "IB", gdrdma: "off",
		main: "gdr-disabled-for-hca", mainMention: []string{"mlx5_0", "NCCL_NET_GDR_LEVEL"},
		absent: []string{"gdr-not-used", "gdr-partial"},
		hosts:  []string{"s1"}, hcas: []string{"mlx5_0:1/IB"}, hcaCount: 1,
		extra: func(t *testing.T, rep *Report) {
			if rep.HCAs[0].GDR != "disabled" {
				t.Errorf("mlx5_0 gdr = %q, want disabled", rep.HCAs[0].GDR)
			}
		},
	},
	{
		// A refused connection on loopback in a job with no sign of a second
		// node: the loopback interface is only info.
		file: "single-node-lo-refused.txt", version: "", net: "Socket", gdrdma: "off",
		main: "connection-refused", mainMention: []string{"127.0.0.1<39321>"},
		codes: []string{"socket-on-loopback"}, hosts: []string{"l1"},
		ifaces: []string{"bootstrap=lo:127.0.0.1", "net-socket=lo:127.0.0.1"},
		env:    map[string]string{"NCCL_SOCKET_IFNAME": "lo"},
		extra: func(t *testing.T, rep *Report) {
			if rep.MultiNode {
				t.Error("multi_node true from a connection error alone")
			}
			if f := logFinding(rep, "socket-on-loopback"); f == nil || f.Severity != doctor.SevInfo || strings.Contains(f.Message, "multi-node") {
				t.Errorf("socket-on-loopback = %+v, want info", f)
			}
		},
	},
	{
		// Indented traceback / tool output after short NCCL lines is not joined.
		file: "traceback-after-nccl.txt", version: "", net: "IB", gdrdma: "unknown", main: "",
		hosts: []string{"t1"}, hcaCount: 1,
		ifaces: []string{"bootstrap=eth0:10.1.0.5", "ib-oob=eth0:10.1.0.5"},
		env:    map[string]string{"NCCL_IB_HCA": "mlx5_0"},
	},
}

func TestNCCLLogSynthetic(t *testing.T) {
	for _, e := range logSyntheticExpect {
		t.Run(e.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", e.file))
			if err != nil {
				t.Fatal(err)
			}
			logCheck(t, logTestAnalyze(t, string(b)), e)
		})
	}
}

// logTestInputs returns every real (verbatim part) and synthetic log.
func logTestInputs(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	real, _ := filepath.Glob(filepath.Join("testdata", "real-inputs", "nccl-log-*.txt"))
	for _, f := range real {
		out[f] = doctortest.RealInput(t, filepath.Base(f))
	}
	synth, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, f := range synth {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[f] = string(b)
	}
	if len(out) < 10 {
		t.Fatalf("only %d test inputs", len(out))
	}
	return out
}

// TestNCCLLogTransportNoise checks that CRLF line ends, Open MPI rank tags,
// ANSI colour codes and Ray's bare "[0m " remnants change nothing: every
// input gives the same report (minus line counters) in every disguise.
func TestNCCLLogTransportNoise(t *testing.T) {
	disguises := map[string]func(line string) string{
		"crlf":        func(l string) string { return l + "\r" },
		"mpirun":      func(l string) string { return "[1,3]<stdout>:" + l },
		"ansi":        func(l string) string { return "\x1b[0m\x1b[36m" + l + "\x1b[0m" },
		"ray-remnant": func(l string) string { return "[0m " + l },
		"torchrun":    func(l string) string { return "[default0]:" + l },
	}
	for name, text := range logTestInputs(t) {
		want := logTestAnalyze(t, text)
		want.Lines, want.NCCLLines = 0, 0
		wantJSON, _ := json.Marshal(want)
		for dname, dress := range disguises {
			lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
			for i, l := range lines {
				lines[i] = dress(l)
			}
			got := logTestAnalyze(t, strings.Join(lines, "\n")+"\n")
			got.Lines, got.NCCLLines = 0, 0
			gotJSON, _ := json.Marshal(got)
			if !bytes.Equal(gotJSON, wantJSON) {
				t.Errorf("%s dressed as %s differs:\n got %s\nwant %s", name, dname, gotJSON, wantJSON)
			}
		}
	}
}

func TestNCCLLogEdgeCases(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		rep := logTestAnalyze(t, "")
		if rep.GDRDMA != "unknown" || rep.Net != "" || len(rep.Findings) != 1 || rep.Findings[0].Code != "no-nccl-lines" {
			t.Errorf("empty input: %+v", rep)
		}
		b, err := json.Marshal(rep)
		if err != nil || !bytes.Contains(b, []byte(`"intra_node":[]`)) || !bytes.Contains(b, []byte(`"interfaces":[]`)) {
			t.Errorf("empty input JSON %s (%v): lists must be [] not null", b, err)
		}
	})
	t.Run("io error", func(t *testing.T) {
		boom := errors.New("disk on fire")
		r := &logFailingReader{data: "NCCL version 2.21.5+cuda12.4\n", err: boom}
		rep, err := Analyze(r)
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v, want %v", err, boom)
		}
		if rep == nil || rep.NCCLVersion != "2.21.5+cuda12.4" {
			t.Errorf("partial report %+v, want what was read before the error", rep)
		}
	})
	t.Run("line over the cap is truncated", func(t *testing.T) {
		long := "h:1:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0> " + strings.Repeat("x", 3<<20)
		rep := logTestAnalyze(t, long+"\nNCCL version 2.20.5+cuda12.4\n")
		if rep.Lines != 2 || rep.NCCLVersion != "2.20.5+cuda12.4" || len(rep.Interfaces) != 1 {
			t.Errorf("lines %d version %q interfaces %v", rep.Lines, rep.NCCLVersion, rep.Interfaces)
		}
	})
	t.Run("no trailing newline", func(t *testing.T) {
		rep := logTestAnalyze(t, "h:1:2 [0] NCCL INFO Using network Socket")
		if rep.Net != "Socket" {
			t.Errorf("net %q", rep.Net)
		}
	})
	t.Run("version mismatch", func(t *testing.T) {
		rep := logTestAnalyze(t, "NCCL version 2.18.1+cuda12.1\nNCCL version 2.14.3+cuda11.7\n")
		if f := logFinding(rep, "nccl-version-mismatch"); f == nil || !strings.Contains(f.Message, "2.14.3+cuda11.7") {
			t.Errorf("findings %v", rep.Findings)
		}
	})
	t.Run("single-node loopback is only info", func(t *testing.T) {
		rep := logTestAnalyze(t, "h:1:2 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>\nh:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2\n")
		if f := logFinding(rep, "socket-on-loopback"); f == nil || f.Severity != doctor.SevInfo {
			t.Errorf("socket-on-loopback = %+v, want info", f)
		}
	})
	t.Run("p2p disable and level", func(t *testing.T) {
		rep := logTestAnalyze(t, "h:1:2 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.\n")
		if f := logFinding(rep, "p2p-disabled-by-env"); f == nil || !strings.Contains(f.Message, "NCCL_P2P_DISABLE=1") {
			t.Errorf("findings %v", rep.Findings)
		}
		rep = logTestAnalyze(t, "h:1:2 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to NVL\n")
		if logFinding(rep, "p2p-disabled-by-env") != nil || logFinding(rep, "p2p-level-forced") == nil {
			t.Errorf("P2P_LEVEL=NVL: findings %v", logCodes(rep))
		}
	})
	t.Run("link-local IPv4 on an ordinary NIC", func(t *testing.T) {
		rep := logTestAnalyze(t, "h:1:2 [0] NCCL INFO Bootstrap : Using [0]enp1s0:169.254.3.7<0> [1]eth0:10.0.0.7<0>\n")
		if k := rep.Interfaces[0].Kind; k != "link-local-ipv4" {
			t.Errorf("kind %q, want link-local-ipv4", k)
		}
		f := logFinding(rep, "socket-on-link-local-ipv6")
		if f == nil || f.Severity != doctor.SevWarn || !strings.Contains(f.Message, "link-local IPv4 address 169.254.3.7") || !strings.Contains(f.Fix, "NCCL_SOCKET_IFNAME=eth0") {
			t.Errorf("socket-on-link-local-ipv6 = %+v", f)
		}
		// On a virtual interface it is a warning, not the routable-address info.
		rep = logTestAnalyze(t, "h:1:2 [0] NCCL INFO Bootstrap : Using [0]eth0:10.0.0.7<0> [1]veth9:169.254.0.2<0>\n")
		if f := logFinding(rep, "socket-on-virtual-interface"); f == nil || f.Severity != doctor.SevWarn || !strings.Contains(f.Message, "link-local IPv4") {
			t.Errorf("socket-on-virtual-interface = %+v", f)
		}
		// 169.254 is not the whole of 169.x.
		if rep := logTestAnalyze(t, "h:1:2 [0] NCCL INFO Bootstrap : Using eth0:169.25.0.1<0>\n"); len(rep.Findings) != 0 {
			t.Errorf("169.25.0.1: findings %v", logCodes(rep))
		}
	})
	t.Run("multi-node from a refused peer on another address", func(t *testing.T) {
		rep := logTestAnalyze(t, "h:1:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>\n"+
			"h:1:2 [0] NCCL WARN Connect to 10.0.0.8<4000> failed : Connection refused\n")
		if !rep.MultiNode {
			t.Error("multi_node false; 10.0.0.8 is no address of this host")
		}
		rep = logTestAnalyze(t, "h:1:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>\n"+
			"h:1:2 [0] NCCL WARN Connect to 10.0.0.7<4000> failed : Connection refused\n")
		if rep.MultiNode {
			t.Error("multi_node true; 10.0.0.7 is this host's own address")
		}
	})
	t.Run("integer switches", func(t *testing.T) {
		for _, c := range []struct {
			v   string
			off bool
		}{{"1.", true}, {"2.", true}, {"-1.", true}, {"0x1", true}, {"1 ", true}, {"0.", false}, {"00", false}, {"0x0", false}, {"no", false}, {"", false}} {
			env := "NCCL_IB_DISABLE set by environment to " + c.v + "\nNCCL_P2P_DISABLE set by environment to " + c.v + "\nNCCL_SHM_DISABLE set by environment to " + c.v + "\n"
			rep := logTestAnalyze(t, strings.ReplaceAll("h:1:2 [0] NCCL INFO "+strings.TrimSuffix(env, "\n"), "\n", "\nh:1:2 [0] NCCL INFO ")+"\n")
			for _, code := range []string{"ib-disabled-by-env", "p2p-disabled-by-env", "shm-disabled-by-env"} {
				if got := logFinding(rep, code) != nil; got != c.off {
					t.Errorf("value %q: %s present %t, want %t", c.v, code, got, c.off)
				}
			}
		}
		rep := logTestAnalyze(t, "h:1:2 [0] NCCL INFO NCCL_COLLNET_ENABLE set by environment to 2.\nh:1:2 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 00\n")
		if !rep.CollNet.Requested || !rep.NVLS.DisabledByEnv {
			t.Errorf("collnet %+v nvls %+v, want requested and disabled", rep.CollNet, rep.NVLS)
		}
	})
	t.Run("QP MTU in bytes", func(t *testing.T) {
		rep := logTestAnalyze(t, "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE\n"+
			"h:1:2 [0] NCCL INFO NET/IB: Dev 0 Port 1 qpn 58 mtu 5 GID 3 (0/A10B)\n"+
			"h:1:2 [0] NCCL INFO NET/IB: Dev 1 Port 1 qpn 59 mtu 2 GID 3 (0/A10B)\n")
		b, _ := json.Marshal(rep.HCAs)
		if !bytes.Contains(b, []byte(`"mtu":4096`)) || !bytes.Contains(b, []byte(`"mtu":512`)) {
			t.Errorf("HCAs JSON %s, want mtu 4096 and 512 (bytes)", b)
		}
		if f := logFinding(rep, "roce-mtu-low"); f == nil || !strings.Contains(f.Message, "mlx5_1") || strings.Contains(f.Message, "mlx5_0") {
			t.Errorf("roce-mtu-low = %+v, want mlx5_1 only", f)
		}
		var buf bytes.Buffer
		if err := rep.WriteText(&buf); err != nil || !strings.Contains(buf.String(), "mtu 4096") || !strings.Contains(buf.String(), "mtu 512") {
			t.Errorf("text (%v):\n%s", err, buf.String())
		}
	})
	t.Run("link-local IPv6 on an ordinary NIC", func(t *testing.T) {
		rep := logTestAnalyze(t, "h:1:2 [0] NCCL INFO Bootstrap : Using [0]eth1:fe80::1%eth1<0> [1]eth0:10.0.0.7<0>\n")
		f := logFinding(rep, "socket-on-link-local-ipv6")
		if f == nil || f.Severity != doctor.SevWarn || !strings.Contains(f.Message, "eth1") || !strings.Contains(f.Fix, "NCCL_SOCKET_IFNAME=eth0") {
			t.Errorf("socket-on-link-local-ipv6 = %+v", f)
		}
	})
	t.Run("many wrapped continuation lines are joined in linear work", func(t *testing.T) {
		// Joining line by line copied the growing line each time: quadratic
		// bytes allocated (about 120 MB for this input even with joins capped
		// at 64 KiB; gigabytes with the old 1 MiB cap). Count the bytes the
		// analyser allocates, not the time it takes: the linear join
		// allocates under 8 times the input.
		if doctortest.RaceEnabled {
			t.Skip("allocation bound checked without the race detector, whose instrumentation allocates")
		}
		text := "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n" + strings.Repeat(" [1]mlx5_1:1/RoCE\n", 200000)
		var rep *Report
		alloc := doctortest.AllocBytes(func() { rep = logTestAnalyze(t, text) })
		if limit := uint64(16*len(text)) + 4<<20; alloc > limit {
			t.Errorf("analysing %d bytes allocated %d bytes, want at most %d", len(text), alloc, limit)
		}
		if len(rep.HCAs) != 2 || rep.Lines != 200001 {
			t.Errorf("%d HCAs, %d lines", len(rep.HCAs), rep.Lines)
		}
	})
	t.Run("long lines are cut at 64 KiB", func(t *testing.T) {
		// The first interface is within the kept part, the second beyond it.
		pad := strings.Repeat("x", 64<<10)
		line := "h:1:2 [0] NCCL INFO Bootstrap : Using [0]eth0:10.0.0.1<0> " + pad + " [1]eth1:10.0.0.2<0>"
		rep := logTestAnalyze(t, line+"\nh:1:2 [0] NCCL INFO Using network Socket\n")
		if len(rep.Interfaces) != 1 || rep.Interfaces[0].Name != "eth0" || rep.Net != "Socket" || rep.Lines != 2 {
			t.Errorf("interfaces %v net %q lines %d, want eth0 only, Socket, 2", rep.Interfaces, rep.Net, rep.Lines)
		}
		// Wrapped continuations stop at 64 KiB too: the rest start new lines.
		text := "h:1:2 [0] NCCL INFO Using network IB" + strings.Repeat("y", 100) + "\n" + strings.Repeat(" "+strings.Repeat("z", 1000)+"\n", 200)
		a := logNewAnalyzer()
		longest, records := 0, 0
		var last *logRecord
		for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			a.feedPhysical(l)
			if a.pending != last {
				records++
				last = a.pending
			}
			longest = max(longest, a.pending.size)
		}
		if longest > logMaxJoined || records < 2 {
			t.Errorf("longest logical line %d bytes in %d records, want at most %d bytes, several records", longest, records, logMaxJoined)
		}
	})
	t.Run("terminal wrap is joined only after a line as wide as a terminal", func(t *testing.T) {
		long := "very-long-hostname-of-a-gpu-node-in-a-cluster-0042.example.com:123456:123457 [0] NCCL INFO Using network AWS\n Libfabric\n"
		if rep := logTestAnalyze(t, long); rep.Net != "AWS Libfabric" {
			t.Errorf("wrapped after a %d-byte line: net %q, want AWS Libfabric", strings.Index(long, "\n"), rep.Net)
		}
		short := "h:1:2 [0] NCCL INFO Using network IB\n  File \"/x.py\", line 3, in f\n"
		if rep := logTestAnalyze(t, short); rep.Net != "IB" {
			t.Errorf("indented line after a short line: net %q, want IB", rep.Net)
		}
		tb := strings.Replace(long, " Libfabric", `  File "/x.py", line 3, in f`, 1)
		if rep := logTestAnalyze(t, tb); rep.Net != "AWS" {
			t.Errorf("traceback after a long line: net %q, want AWS", rep.Net)
		}
		// A list item in NCCL's shape is joined after a short line too.
		list := "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n [1]mlx5_1:1/IB\n"
		if rep := logTestAnalyze(t, list); len(rep.HCAs) != 2 {
			t.Errorf("wrapped HCA list: %v", rep.HCAs)
		}
	})
	t.Run("channel line tails without any prefix", func(t *testing.T) {
		// Shapes only (synthetic): a bare channel line and a bare tail are
		// connection lines; a tail-shaped sentence naming no transport is not.
		rep := logTestAnalyze(t, "Channel 00 : 0[1a000] -> 1[6b000] via P2P/IPC\n3 -> 4 [receive] via NET/Socket/1\n")
		if !slices.Equal(rep.IntraNode, []string{"P2P/IPC"}) || rep.Net != "Socket" || len(rep.Findings) != 0 {
			t.Errorf("intra %v net %q findings %v, want [P2P/IPC], Socket, none", rep.IntraNode, rep.Net, logCodes(rep))
		}
		if rep := logTestAnalyze(t, "1 -> 2 via ssh\n"); logFinding(rep, "no-nccl-lines") == nil {
			t.Errorf("prose taken for a connection line: %v", logCodes(rep))
		}
	})
	t.Run("GDR on some channels of one connection only", func(t *testing.T) {
		// Synthetic: rank 0's sends to rank 8 use GDR on channel 0 (NIC 0)
		// but not on channel 1 (NIC 2, far from the GPU): warn, not the
		// GDR-read info; NIC 2 is explained by it, so no gdr-partial.
		rep := logTestAnalyze(t, "h:1:2 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to PHB\n"+
			"h:1:2 [0] NCCL INFO Channel 00/0 : 0[1b000] -> 8[1b000] [send] via NET/IB/0/GDRDMA\n"+
			"h:1:2 [0] NCCL INFO Channel 01/0 : 0[1b000] -> 8[1b000] [send] via NET/IB/2\n")
		f := logFinding(rep, "gdr-mixed-connection")
		if f == nil || f.Severity != doctor.SevWarn || !strings.Contains(f.Message, "0[1b000] -> 8[1b000]") ||
			!strings.Contains(f.Fix, "NCCL_NET_GDR_LEVEL=PHB") || !strings.Contains(f.Fix, "NCCL_NET_GDR_READ") {
			t.Errorf("gdr-mixed-connection = %+v, want a warning naming the connection, the GDR level and GDR read", f)
		}
		if logFinding(rep, "gdr-partial") != nil {
			t.Errorf("gdr-partial repeats the connection finding: %v", logCodes(rep))
		}
		// NIC 2 also without GDR on a connection of its own: gdr-partial too.
		rep = logTestAnalyze(t, "h:1:2 [0] NCCL INFO Channel 00/0 : 0[1b000] -> 8[1b000] [send] via NET/IB/0/GDRDMA\n"+
			"h:1:2 [0] NCCL INFO Channel 01/0 : 0[1b000] -> 8[1b000] [send] via NET/IB/2\n"+
			"h:1:2 [1] NCCL INFO Channel 01/0 : 1[1c000] -> 9[1c000] [send] via NET/IB/2\n")
		if logFinding(rep, "gdr-partial") == nil || logFinding(rep, "gdr-mixed-connection") == nil {
			t.Errorf("codes %v, want gdr-partial and gdr-mixed-connection", logCodes(rep))
		}
		// Five such connections: four named, the rest counted.
		var b strings.Builder
		for r := range 5 {
			fmt.Fprintf(&b, "%d -> %d [receive] via NET/IB/0/GDRDMA\n%d -> %d [send] via NET/IB/0\n", r, r+8, r, r+8)
		}
		rep = logTestAnalyze(t, b.String())
		if f := logFinding(rep, "gdr-mixed-connection"); f == nil || !strings.Contains(f.Message, "3 -> 11 (") ||
			strings.Contains(f.Message, "4 -> 12") || !strings.HasSuffix(f.Message, " and 1 more") {
			t.Errorf("gdr-mixed-connection = %+v, want four connections named and 1 more", f)
		}
	})
	t.Run("findings sorted errors first", func(t *testing.T) {
		for name, text := range logTestInputs(t) {
			rep := logTestAnalyze(t, text)
			for i := 1; i < len(rep.Findings); i++ {
				if rep.Findings[i-1].Severity.Rank() > rep.Findings[i].Severity.Rank() {
					t.Errorf("%s: findings out of order: %v", name, logCodes(rep))
				}
			}
		}
	})
}

// BenchmarkAnalyzeNCCLLogWrapped times the hard-wrapped input of the
// linear-join test (timing belongs here, not in a pass/fail test).
func BenchmarkAnalyzeNCCLLogWrapped(b *testing.B) {
	text := "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n" + strings.Repeat(" [1]mlx5_1:1/RoCE\n", 200000)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := Analyze(strings.NewReader(text)); err != nil {
			b.Fatal(err)
		}
	}
}

// TestNCCLLogFindingCodesDocumented checks that the package doc lists
// every finding code the analyser can emit, and only those, and that every
// code a real or synthetic input produces was found by the source scan.
func TestNCCLLogFindingCodesDocumented(t *testing.T) {
	emitted := doctortest.CodesDocumented(t, 20, `\bconnFailure\("([a-z0-9-]+)"`)
	for name, text := range logTestInputs(t) {
		for _, c := range logCodes(logTestAnalyze(t, text)) {
			if !emitted[c] {
				t.Errorf("%s: code %s escaped the source scan", name, c)
			}
		}
	}
}

type logFailingReader struct {
	data string
	err  error
}

func (r *logFailingReader) Read(p []byte) (int, error) {
	if r.data == "" {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestNCCLLogWriteText(t *testing.T) {
	rep := logTestAnalyze(t, doctortest.RealInput(t, "nccl-log-22.txt"))
	var buf bytes.Buffer
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	facts, findings, ok := strings.Cut(out, "Findings (")
	if !ok {
		t.Fatalf("no findings section:\n%s", out)
	}
	for _, s := range []string{"Network:", "Socket", "GPUDirect RDMA:", "off", "lo 127.0.0.1", "NCCL_SOCKET_IFNAME=lo"} {
		if !strings.Contains(facts, s) {
			t.Errorf("facts lack %q:\n%s", s, facts)
		}
	}
	iErr := strings.Index(findings, "ERROR socket-on-loopback")
	iInfo := strings.Index(findings, "INFO  no-libibverbs")
	if iErr < 0 || iInfo < 0 || iErr > iInfo || !strings.Contains(findings, "fix: set NCCL_SOCKET_IFNAME") {
		t.Errorf("findings section:\n%s", findings)
	}
	if err := rep.WriteText(logFailingWriter{}); err == nil {
		t.Error("WriteText to a failing writer returned nil")
	}
}

type logFailingWriter struct{}

func (logFailingWriter) Write([]byte) (int, error) { return 0, errors.New("closed") }

// TestNCCLLogRules: every rule has a gate and a handler, and the rules of a
// group are consecutive (process ends a group's turn at its first match).
func TestNCCLLogRules(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for i, r := range logRules {
		if r.gate == nil || r.do == nil {
			t.Errorf("rule %d: gate or handler missing", i)
		}
		if r.group != prev && r.group != "" {
			if seen[r.group] {
				t.Errorf("rule %d: group %q is split", i, r.group)
			}
			seen[r.group] = true
		}
		prev = r.group
	}
	if len(logRules) < 30 {
		t.Errorf("%d rules", len(logRules))
	}
}
