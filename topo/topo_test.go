package topo

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/goccl/goccl/doctor/ibv"
	"github.com/goccl/goccl/topo/topotest"
)

// twoSocket is testdata/two-socket: gpu-node-07, 2 sockets = NUMA nodes 0
// (CPUs 0-3) and 1 (4-7); on node 0 behind root port 0000:15:01.0 a
// ConnectX-6 Dx (0000:16:00.0, mlx5_0, RoCE port 1 on ens1f0np0, modelled
// on the mlx5_0 of testdata/real-inputs/ibv-01.txt) and an H100
// (0000:17:00.0); on node 1 behind 0000:97:01.0 an X710 (0000:98:00.0,
// eno1, a member of bond0) and an H100 (0000:99:00.0); a veth and lo.
func twoSocket(t *testing.T) string {
	return topotest.FakeRoot(t, filepath.Join("testdata", "two-socket"))
}

// fakeNvidiaSMI writes a script that answers the GPU query as nvidia-smi
// does with lines, and fails on anything else.
func fakeNvidiaSMI(t *testing.T, lines ...string) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "nvidia-smi")
	// Shell built-ins only: the tests run it with PATH holding nothing else.
	var out strings.Builder
	for _, l := range lines {
		out.WriteString("printf '%s\\n' '" + l + "'\n")
	}
	script := "#!/bin/sh\ncase \"$*\" in\n*--query-gpu=index,pci.bus_id,name,memory.total*--format=csv,noheader*)\n" +
		out.String() + ";;\n*) echo \"unexpected arguments: $*\" >&2; exit 2;;\nesac\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

var h100s = []string{
	"0, 00000000:17:00.0, NVIDIA H100 80GB HBM3, 81559 MiB",
	"1, 00000000:99:00.0, NVIDIA H100 80GB HBM3, 81559 MiB",
}

func affinity(cpus ...int) func() ([]int, error) {
	return func() ([]int, error) { return cpus, nil }
}

func TestDetectTwoSocket(t *testing.T) {
	root := twoSocket(t)
	h, err := Detect(Options{Root: root, Affinity: affinity(4, 5), NvidiaSMI: "-"})
	if err != nil {
		t.Fatal(err)
	}
	if h.Hostname != "gpu-node-07" || h.ID != "5c1f0a3e-8e8a-4b7e-9d55-0e2f4a1b7c01/gpu-node-07/0" || h.ID != HostID(root) {
		t.Errorf("hostname %q id %q (HostID %q)", h.Hostname, h.ID, HostID(root))
	}
	wantCPU := CPUInfo{Vendor: "GenuineIntel", ModelName: "Intel(R) Xeon(R) Platinum 8480+", FamilyID: 6, ModelID: 143, Online: "0-7", Count: 8}
	if h.Arch != "x86_64" || h.CPU != wantCPU {
		t.Errorf("arch %q cpu %+v, want x86_64 %+v", h.Arch, h.CPU, wantCPU)
	}
	wantNUMA := []NUMANode{
		{ID: 0, CPUs: "0-3", NCPUs: 4, Affinity: "0f", MemBytes: 263842192 << 10},
		{ID: 1, CPUs: "4-7", NCPUs: 4, Affinity: "f0", MemBytes: 264218624 << 10},
	}
	if !reflect.DeepEqual(h.NUMA, wantNUMA) {
		t.Errorf("NUMA %+v, want %+v", h.NUMA, wantNUMA)
	}
	if p := h.Process; p == nil || p.Pid != os.Getpid() || p.CPUs != "4-5" || p.NCPUs != 2 || !reflect.DeepEqual(p.NUMA, []int{1}) {
		t.Errorf("process %+v, want CPUs 4-5 on node 1", p)
	}

	ifs := map[string]Interface{}
	for _, i := range h.Interfaces {
		ifs[i.Name] = i
	}
	if len(ifs) != 5 {
		t.Errorf("%d interfaces, want bond0, eno1, ens1f0np0, lo, veth3f2a1b0 (bonding_masters is not one): %+v", len(ifs), h.Interfaces)
	}
	want := map[string]Interface{
		"ens1f0np0": {Name: "ens1f0np0", Kind: KindDevice, State: "up", SpeedMbps: 100000, MTU: 4200, MAC: "94:6d:ae:90:78:32", Type: 1,
			BusID: "0000:16:00.0", PCIPath: []string{"0000:15:01.0", "0000:16:00.0"}, NUMANode: 0, Driver: "mlx5_core",
			RDMA: true, RDMADevice: "mlx5_0", RDMAPort: 1},
		"eno1": {Name: "eno1", Kind: KindDevice, State: "up", SpeedMbps: 10000, MTU: 1500, MAC: "3c:fd:fe:a1:b2:c3", Type: 1,
			BusID: "0000:98:00.0", PCIPath: []string{"0000:97:01.0", "0000:98:00.0"}, NUMANode: 1, Driver: "i40e", Master: "bond0"},
		"bond0": {Name: "bond0", Kind: KindBond, State: "up", SpeedMbps: 10000, MTU: 1500, MAC: "3c:fd:fe:a1:b2:c3", Type: 1,
			Virtual: true, NUMANode: -1, Slaves: []string{"eno1"}},
		"veth3f2a1b0": {Name: "veth3f2a1b0", Kind: KindVirtual, State: "up", SpeedMbps: 10000, MTU: 1500, MAC: "6e:1c:0a:55:9d:04", Type: 1,
			Virtual: true, NUMANode: -1},
		"lo": {Name: "lo", Kind: KindLoopback, State: "unknown", SpeedMbps: -1, MTU: 65536, MAC: "00:00:00:00:00:00", Type: 772,
			Virtual: true, NUMANode: -1},
	}
	for name, w := range want {
		if got := ifs[name]; !reflect.DeepEqual(got, w) {
			t.Errorf("interface %s:\n got %+v\nwant %+v", name, got, w)
		}
	}

	wantRDMA := []RDMADevice{{Name: "mlx5_0", NodeType: "1: CA", FWVer: "22.38.1900", NodeGUID: "0x946dae0300907832",
		SysImageGUID: "0x946dae0300907832", BusID: "0000:16:00.0", PCIPath: []string{"0000:15:01.0", "0000:16:00.0"}, NUMANode: 0,
		Netdevs: []string{"ens1f0np0"},
		Ports: []RDMAPort{{Port: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "Ethernet", Rate: "100 Gb/sec (4X EDR)",
			RateMbps: 100000, Netdev: "ens1f0np0", GIDs: []GID{
				{Index: 0, GID: "fe80::966d:aeff:fe90:7832", Type: "IB/RoCE v1", Netdev: "ens1f0np0"},
				{Index: 1, GID: "fe80::966d:aeff:fe90:7832", Type: "RoCE v2", Netdev: "ens1f0np0"},
				{Index: 2, GID: "::ffff:10.0.0.7", Type: "IB/RoCE v1", Netdev: "ens1f0np0"},
				{Index: 3, GID: "::ffff:10.0.0.7", Type: "RoCE v2", Netdev: "ens1f0np0"}}}}}}
	if !reflect.DeepEqual(h.RDMA, wantRDMA) {
		t.Errorf("RDMA\n got %+v\nwant %+v", h.RDMA, wantRDMA)
	}
	if len(h.GPUs) != 0 || h.GPUQuery != "" || len(h.Notes) != 0 {
		t.Errorf("GPUs %+v query %q notes %q with NvidiaSMI \"-\"", h.GPUs, h.GPUQuery, h.Notes)
	}
	wantPCI := PCI{BusID: "0000:16:00.0", Class: "0x020000", Vendor: "0x15b3", Device: "0x101d", SubsystemVendor: "0x15b3",
		SubsystemDevice: "0x0016", LinkSpeed: "16.0 GT/s PCIe", LinkWidth: "16", NUMANode: 0, Driver: "mlx5_core"}
	if got := h.PCI["0000:16:00.0"]; got != wantPCI {
		t.Errorf("PCI 0000:16:00.0 %+v, want %+v", got, wantPCI)
	}
	if len(h.PCI) != 4 {
		t.Errorf("PCI has %d functions, want the 2 root ports and 2 NICs: %v", len(h.PCI), h.PCI)
	}
}

// TestFakeMlx5MatchesIbstat: the fake mlx5_0 is the mlx5_0 of a real
// ibstat (testdata/real-inputs/ibv-01.txt, ConnectX-6 Dx, RoCE): Detect's
// reading of the tree agrees with doctor/ibv's reading of the real output.
func TestFakeMlx5MatchesIbstat(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "real-inputs", "ibv-01.txt"))
	if err != nil {
		t.Fatal(err)
	}
	_, verbatim, ok := strings.Cut(string(b), "# ===== VERBATIM BELOW =====\n")
	if !ok {
		t.Fatal("no verbatim marker")
	}
	rep, err := ibv.Parse(strings.NewReader(verbatim))
	if err != nil {
		t.Fatal(err)
	}
	var real *ibv.Device
	for i := range rep.Devices {
		if rep.Devices[i].Name == "mlx5_0" {
			real = &rep.Devices[i]
		}
	}
	if real == nil || len(real.Ports) != 1 {
		t.Fatalf("ibv-01.txt: no one-port mlx5_0 in %+v", rep.Devices)
	}
	h, err := Detect(Options{Root: twoSocket(t), NvidiaSMI: "-", Affinity: affinity(0)})
	if err != nil {
		t.Fatal(err)
	}
	d, rp := h.RDMA[0], real.Ports[0]
	if d.FWVer != real.FWVersion || d.NodeGUID != strings.ToLower(real.NodeGUID) {
		t.Errorf("fw %q guid %q, ibstat %q %q", d.FWVer, d.NodeGUID, real.FWVersion, real.NodeGUID)
	}
	p := d.Ports[0]
	if p.Port != rp.Port || !strings.EqualFold(p.State, rp.State) || p.LinkLayer != rp.LinkLayer || float64(p.RateMbps) != rp.RateGbps*1000 {
		t.Errorf("port %+v, ibstat %+v", p, rp)
	}
}

func TestDetectGPUsFromNvidiaSMI(t *testing.T) {
	h, err := Detect(Options{Root: twoSocket(t), NvidiaSMI: fakeNvidiaSMI(t, h100s...), Affinity: affinity(0)})
	if err != nil {
		t.Fatal(err)
	}
	want := []GPU{
		{Index: 0, BusID: "0000:17:00.0", Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, PCIPath: []string{"0000:15:01.0", "0000:17:00.0"}, NUMANode: 0},
		{Index: 1, BusID: "0000:99:00.0", Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, PCIPath: []string{"0000:97:01.0", "0000:99:00.0"}, NUMANode: 1},
	}
	if !reflect.DeepEqual(h.GPUs, want) {
		t.Errorf("GPUs\n got %+v\nwant %+v", h.GPUs, want)
	}
	if !strings.HasPrefix(h.GPUQuery, "nvidia-smi --query-gpu=index,pci.bus_id,name,memory.total") || len(h.Notes) > 0 {
		t.Errorf("query %q notes %q", h.GPUQuery, h.Notes)
	}
}

// TestNvidiaSMIOnPath: with the live root, nvidia-smi is the one on PATH;
// none there is no GPU and no note; one that fails is a note.
func TestNvidiaSMIOnPath(t *testing.T) {
	t.Setenv("PATH", filepath.Dir(fakeNvidiaSMI(t, h100s...)))
	h, err := Detect(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.GPUs) != 2 || h.GPUs[1].BusID != "0000:99:00.0" || h.GPUs[1].Index != 1 {
		t.Fatalf("GPUs %+v from the fake nvidia-smi on PATH", h.GPUs)
	}
	var x bytes.Buffer
	if err := h.WriteXML(&x); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(x.String(), `<pci busid="0000:99:00.0">`) || !strings.Contains(x.String(), `<gpu dev="1"/>`) {
		t.Errorf("a GPU sysfs does not know still gets <pci busid><gpu dev>:\n%s", x.String())
	}

	t.Setenv("PATH", t.TempDir())
	if h, err = Detect(Options{}); err != nil || len(h.GPUs) != 0 || h.GPUQuery != "" || len(h.Notes) != 0 {
		t.Fatalf("without nvidia-smi: %v, GPUs %+v, query %q, notes %q", err, h.GPUs, h.GPUQuery, h.Notes)
	}

	dir := t.TempDir()
	bad := "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\nexit 9\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(bad), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if h, err = Detect(Options{}); err != nil || len(h.GPUs) != 0 || len(h.Notes) != 1 || !strings.Contains(h.Notes[0], "couldn't communicate") {
		t.Fatalf("failing nvidia-smi: %v, GPUs %+v, notes %q", err, h.GPUs, h.Notes)
	}
}

// TestDetectLive: this machine, whatever it has.
func TestDetectLive(t *testing.T) {
	h, err := Detect(Options{})
	if err != nil {
		t.Fatal(err)
	}
	name, _ := os.Hostname()
	if h.Hostname != name || h.ID != HostID("") || h.Process == nil || h.Process.Pid != os.Getpid() || h.Process.NCPUs < 1 || h.CPU.Count < 1 {
		t.Errorf("hostname %q (want %q), id %q, process %+v, cpu %+v", h.Hostname, name, h.ID, h.Process, h.CPU)
	}
	lo := false
	for _, i := range h.Interfaces {
		lo = lo || i.Kind == KindLoopback
	}
	if !lo && len(h.Interfaces) > 0 {
		t.Errorf("no loopback among %+v", h.Interfaces)
	}
	var text, x, j bytes.Buffer
	if err := h.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteXML(&x); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteJSON(&j); err != nil {
		t.Fatal(err)
	}
	var n xnode
	if err := xml.Unmarshal(x.Bytes(), &n); err != nil || n.XMLName.Local != "system" {
		t.Fatalf("XML: %v\n%s", err, x.String())
	}
	var back Host
	if err := json.Unmarshal(j.Bytes(), &back); err != nil || !reflect.DeepEqual(&back, h) {
		t.Fatalf("JSON round trip: %v\n%s", err, j.String())
	}
	t.Logf("\n%s", text.String())
}

func TestDetectBadRoot(t *testing.T) {
	if _, err := Detect(Options{Root: filepath.Join(t.TempDir(), "none")}); err == nil {
		t.Error("no error for a missing root")
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := Detect(Options{Root: f}); err == nil {
		t.Error("no error for a root that is a file")
	}
}

func TestCPUList(t *testing.T) {
	for _, c := range []struct {
		in   string
		list string
		cmap string
	}{
		{"0-3,8,10-11", "0-3,8,10-11", "00000d0f"},
		{"0-7:2/4", "0-1,4-5", "00000033"},
		{"", "", "00000000"},
		{" 3 ,1,2,junk,5-4", "1-3", "0000000e"},
		{"0,40", "0,40", "00000100,00000001"},
	} {
		cpus := ParseCPUList(c.in)
		if got := FormatCPUList(cpus); got != c.list {
			t.Errorf("ParseCPUList(%q) = %v, formatted %q, want %q", c.in, cpus, got, c.list)
		}
		if got := FormatCPUMap(cpus); got != c.cmap {
			t.Errorf("FormatCPUMap(%v) = %q, want %q", cpus, got, c.cmap)
		}
	}
}

func TestSmallParsers(t *testing.T) {
	for in, want := range map[int]int{6: 6, 15: 15, 23: 143, 25: 175, 26: 191} {
		if got := FamilyID(in); got != want {
			t.Errorf("FamilyID(%d) = %d, want %d", in, got, want)
		}
	}
	for in, want := range map[string]int{"100 Gb/sec (4X EDR)": 100000, "2.5 Gb/sec (1X SDR)": 2500, "400 Gb/sec (4X NDR)": 400000, "": 0, "fast": 0} {
		if got := rateMbps(in); got != want {
			t.Errorf("rateMbps(%q) = %d, want %d", in, got, want)
		}
	}
	for in, want := range map[string]string{"00000000:18:00.0": "0000:18:00.0", "00000001:3B:00.1": "0001:3b:00.1", "0000:af:00.0": "0000:af:00.0", "18:00.0": "", "1:2": ""} {
		if got, ok := NormalizeBusID(in); got != want && (ok || want != "") {
			t.Errorf("NormalizeBusID(%q) = %q, %v, want %q", in, got, ok, want)
		}
	}
	// NCCL prints sys_image_guid as the little-endian reading of its
	// network-order bytes: ibstat's 0x946dae0300907832 is 0x3278900003ae6d94.
	if got := ncclGUID("0x946dae0300907832"); got != "0x3278900003ae6d94" {
		t.Errorf("ncclGUID = %s", got)
	}
	gpus, bad := ParseNvidiaSMI("0, 00000000:18:00.0, NVIDIA H100 80GB HBM3, 81559 MiB\n\n1, nonsense, x, 1 MiB\nshort\n")
	if len(gpus) != 1 || !reflect.DeepEqual(gpus[0], GPU{Index: 0, BusID: "0000:18:00.0", Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, NUMANode: -1}) || len(bad) != 2 {
		t.Errorf("ParseNvidiaSMI: %+v, bad %q", gpus, bad)
	}
	if got := memTotal("Node 1 MemTotal:       264218624 kB\nNode 1 MemFree: 1 kB"); got != 264218624<<10 {
		t.Errorf("memTotal = %d", got)
	}
}

func TestWriteText(t *testing.T) {
	h, err := Detect(Options{Root: twoSocket(t), NvidiaSMI: fakeNvidiaSMI(t, h100s...), Affinity: affinity(4, 5)})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := h.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"host      gpu-node-07 (id 5c1f0a3e-8e8a-4b7e-9d55-0e2f4a1b7c01/gpu-node-07/0)",
		"cpu       x86_64 GenuineIntel \"Intel(R) Xeon(R) Platinum 8480+\" (NCCL familyid 6 modelid 143), 8 online (0-7)",
		"process   pid ",
		"CPU set 4-5 (2), NUMA node(s) 1",
		"1     4-7   4      252.0 GiB",
		"ens1f0np0    device             up       100 Gb/s  4200   0000:16:00.0  0     mlx5_0/1  -",
		"eno1         device (in bond0)  up       10 Gb/s   1500   0000:98:00.0  1     -",
		"bond0        bond (eno1)        up       10 Gb/s   1500   -             -     -",
		"lo           loopback           unknown  unknown   65536  -",
		"mlx5_0  1     ACTIVE  Ethernet (RoCE)  100 Gb/sec (4X EDR)  ens1f0np0  0000:16:00.0  0     22.38.1900",
		"soft RoCE: available",
		"1    NVIDIA H100 80GB HBM3  81559 MiB  0000:99:00.0  1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
}

// TestDetectH100Capture: the sysfs, procfs and nvidia-smi output of a real
// H100 machine (testdata/h100-vm, real-inputs/nvidia-smi-query-h100.txt).
func TestDetectH100Capture(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "real-inputs", "nvidia-smi-query-h100.txt"))
	if err != nil {
		t.Fatal(err)
	}
	_, verbatim, ok := strings.Cut(string(b), "# ===== VERBATIM BELOW =====\n")
	if !ok {
		t.Fatal("no verbatim marker")
	}
	smi := fakeNvidiaSMI(t, strings.Split(strings.TrimSpace(verbatim), "\n")...)
	root := topotest.FakeRoot(t, filepath.Join("testdata", "h100-vm"))
	h, err := Detect(Options{Root: root, NvidiaSMI: smi, Affinity: affinity(0, 1, 2, 3)})
	if err != nil {
		t.Fatal(err)
	}
	wantGPU := GPU{Index: 0, BusID: "0000:00:06.0", Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, PCIPath: []string{"0000:00:06.0"}, NUMANode: -1}
	if len(h.GPUs) != 1 || !reflect.DeepEqual(h.GPUs[0], wantGPU) {
		t.Errorf("GPUs %+v, want %+v", h.GPUs, wantGPU)
	}
	wantPCI := PCI{BusID: "0000:00:06.0", Class: "0x030200", Vendor: "0x10de", Device: "0x2330", SubsystemVendor: "0x10de",
		SubsystemDevice: "0x16c0", LinkSpeed: "32.0 GT/s PCIe", LinkWidth: "16", NUMANode: -1, Driver: "nvidia"}
	if h.PCI["0000:00:06.0"] != wantPCI {
		t.Errorf("GPU function %+v, want %+v", h.PCI["0000:00:06.0"], wantPCI)
	}
	if h.CPU.Vendor != "GenuineIntel" || h.CPU.FamilyID != 6 || h.CPU.ModelID != 207 || h.CPU.Count != 16 || len(h.NUMA) != 1 ||
		h.NUMA[0].Affinity != "ffff" || h.NUMA[0].MemBytes != 4550128<<10 || !reflect.DeepEqual(h.Process.NUMA, []int{0}) {
		t.Errorf("cpu %+v numa %+v process %+v", h.CPU, h.NUMA, h.Process)
	}
	var eth0 Interface
	for _, i := range h.Interfaces {
		if i.Name == "eth0" {
			eth0 = i
		}
	}
	if eth0.Kind != KindDevice || eth0.BusID != "0000:00:03.0" || eth0.Driver != "virtio_net" || eth0.SpeedMbps != -1 || eth0.MTU != 1400 || len(h.RDMA) != 0 {
		t.Errorf("eth0 %+v, RDMA %+v", eth0, h.RDMA)
	}

	// One NUMA node: the GPU and eth0, whose numa_node is -1, hang from it
	// (NCCL's nvidia-smi topo -m on that machine said NUMA Affinity 0).
	var x bytes.Buffer
	if err := h.WriteXML(&x); err != nil {
		t.Fatal(err)
	}
	sys := parseXML(t, x.String())
	if len(sys.Nodes) != 1 || sys.Nodes[0].attr("numaid") != "0" || sys.Nodes[0].attr("modelid") != "207" {
		t.Fatalf("want one <cpu numaid=0>:\n%s", x.String())
	}
	gpus := sys.all("gpu")
	if len(gpus) != 1 || gpus[0].path != "system/cpu/pci/gpu" || gpus[0].parent.attr("busid") != "0000:00:06.0" ||
		gpus[0].parent.attr("link_speed") != "32.0 GT/s PCIe" || gpus[0].parent.attr("class") != "0x030200" {
		t.Errorf("gpu: %+v\n%s", gpus, x.String())
	}
	if nets := sys.all("net"); len(nets) != 1 || nets[0].n.attr("name") != "eth0" || nets[0].path != "system/cpu/pci/nic/net" {
		t.Errorf("nets %+v\n%s", nets, x.String())
	}
}

// TestRails: one rail per IPv4 subnet, from interfaces that can carry a
// rail (up, not loopback, not in a bond or bridge, not a container's).
func TestRails(t *testing.T) {
	ifs := []Interface{
		{Name: "lo", Type: 772, State: "unknown", Addrs: []string{"127.0.0.1/8"}},
		{Name: "eth0", State: "up", Addrs: []string{"fe80::1/64", "10.200.0.1/24"}},
		{Name: "eth1", State: "up", Addrs: []string{"10.200.1.1/24"}, RDMADevice: "mlx5_1"},
		{Name: "eth2", State: "down", Addrs: []string{"10.200.2.1/24"}},
		{Name: "eth3", State: "up", Addrs: []string{"10.200.1.9/24"}}, // rail 1's subnet again
		{Name: "ens1", State: "up", Master: "bond0", Addrs: []string{"10.9.0.1/16"}},
		{Name: "docker0", State: "up", Addrs: []string{"172.17.0.1/16"}},
		{Name: "ib0", State: "unknown", Addrs: []string{"192.168.7.1/24"}},
	}
	var got []string
	for _, r := range rails(ifs) {
		got = append(got, r.Iface+" "+r.Addr+" "+r.Subnet+" "+r.RDMA)
	}
	want := []string{"eth0 10.200.0.1 10.200.0.0/24 ", "eth1 10.200.1.1 10.200.1.0/24 mlx5_1", "ib0 192.168.7.1 192.168.7.0/24 "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("rails = %q, want %q", got, want)
	}
}
