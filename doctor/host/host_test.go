package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/goccl/goccl/doctor"
	"github.com/goccl/goccl/doctor/ibv"
	"github.com/goccl/goccl/doctor/internal/doctortest"
	"github.com/goccl/goccl/topo"
)

// hostTree writes files (path → content) under a new temporary root.
// A path ending in "/" makes an empty directory.
func hostTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	hostAddFiles(t, root, files)
	return root
}

// hostSysfsGID writes an address in sysfs's 8-groups-of-4-hex-digits form.
func hostSysfsGID(prefix string, ipv4 [4]byte) string {
	if prefix == "fe80" {
		return "fe80:0000:0000:0000:0202:c9ff:fe00:0001"
	}
	return fmt.Sprintf("0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", ipv4[0], ipv4[1], ipv4[2], ipv4[3])
}

// hostRoCETree is a host with one RoCE device (mlx5_0 port 1 on eth0, ACTIVE,
// GIDs 0..3 = fe80:: v1, fe80:: v2, ::ffff:10.0.0.1 v1, ::ffff:10.0.0.1 v2,
// slots 4..5 empty), eth0 at MTU 9000, ens1 at 1500, a narrow port range and
// two NUMA nodes. withDev adds /dev/infiniband/uverbs0.
func hostRoCETree(t *testing.T, withDev bool) string {
	const ib = "sys/class/infiniband/mlx5_0/"
	const port = ib + "ports/1/"
	ip := [4]byte{10, 0, 0, 1}
	files := map[string]string{
		ib + "node_type":                        "1: CA",
		ib + "fw_ver":                           "22.36.1010",
		ib + "device/numa_node":                 "1",
		port + "state":                          "4: ACTIVE",
		port + "phys_state":                     "5: LinkUp",
		port + "link_layer":                     "Ethernet",
		port + "rate":                           "100 Gb/sec (4X EDR)",
		port + "gids/0":                         hostSysfsGID("fe80", ip),
		port + "gids/1":                         hostSysfsGID("fe80", ip),
		port + "gids/2":                         hostSysfsGID("v4", ip),
		port + "gids/3":                         hostSysfsGID("v4", ip),
		port + "gids/4":                         "0000:0000:0000:0000:0000:0000:0000:0000",
		port + "gids/5":                         "0000:0000:0000:0000:0000:0000:0000:0000",
		port + "gid_attrs/types/0":              "IB/RoCE v1",
		port + "gid_attrs/types/1":              "RoCE v2",
		port + "gid_attrs/types/2":              "IB/RoCE v1",
		port + "gid_attrs/types/3":              "RoCE v2",
		port + "gid_attrs/ndevs/0":              "eth0",
		port + "gid_attrs/ndevs/1":              "eth0",
		port + "gid_attrs/ndevs/2":              "eth0",
		port + "gid_attrs/ndevs/3":              "eth0",
		"sys/class/net/eth0/mtu":                "9000",
		"sys/class/net/eth0/operstate":          "up",
		"sys/class/net/eth0/address":            "02:00:00:00:00:01",
		"sys/class/net/eth0/type":               "1",
		"sys/class/net/eth0/device/":            "",
		"sys/class/net/ens1/mtu":                "1500",
		"sys/class/net/ens1/operstate":          "up",
		"sys/class/net/ens1/address":            "02:00:00:00:00:02",
		"sys/class/net/ens1/type":               "1",
		"sys/class/net/ens1/device/":            "",
		"sys/class/net/lo/mtu":                  "65536",
		"sys/class/net/lo/operstate":            "unknown",
		"sys/class/net/lo/type":                 "772",
		"proc/sys/net/ipv4/ip_local_port_range": "60000\t61000",
		"sys/devices/system/node/node0/cpulist": "0-15,32-47",
		"sys/devices/system/node/node1/cpulist": "16-31,48-63",
		"dev/shm/":                              "",
	}
	if withDev {
		files["dev/infiniband/uverbs0"] = ""
		files["dev/infiniband/rdma_cm"] = ""
	}
	return hostTree(t, files)
}

func hostCheckByName(rep *Report, name string) (Check, bool) {
	for _, c := range rep.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

func hostWantStatus(t *testing.T, rep *Report, name, status string) Check {
	t.Helper()
	c, ok := hostCheckByName(rep, name)
	if !ok {
		t.Errorf("no check %q; have %v", name, hostCheckNames(rep))
		return c
	}
	if c.Status != status {
		t.Errorf("check %q: status %q, want %q (%s)", name, c.Status, status, c.Detail)
	}
	return c
}

func hostCheckNames(rep *Report) []string {
	var ns []string
	for _, c := range rep.Checks {
		ns = append(ns, c.Name+"="+c.Status)
	}
	return ns
}

func hostHasFinding(rep *Report, code string, sev doctor.Severity) bool {
	for _, f := range rep.Findings {
		if f.Code == code && f.Severity == sev {
			return true
		}
	}
	return false
}

// hostShm8G is a Statfs for which an existing path is an 8 GiB file system
// with 7 GiB free, so that the tests do not depend on the tester's /tmp.
func hostShm8G(path string) (size, free uint64, err error) {
	if _, err := os.Stat(path); err != nil {
		return 0, 0, err
	}
	return 8 << 30, 7 << 30, nil
}

// hostNoTools is a RunTool for which no program is installed.
func hostNoTools(ctx context.Context, name string, args ...string) ([]byte, error) {
	return nil, &exec.Error{Name: name, Err: exec.ErrNotFound}
}

func TestHostRoCETree(t *testing.T) {
	root := hostRoCETree(t, true)
	env := []string{
		"NCCL_P2P_DISABLE=1",
		"NCCL_SHM_DISABLE=1",
		"NCCL_IB_DISABLE=1",
		"NCCL_SOCKET_NTHREADS=8",
		"NCCL_NSOCKS_PERTHREAD=16",
		"NCCL_DEBUG=info",
		"NCCL_SOCKET_IFNAME=lo",
		"WORLD_SIZE=16", "LOCAL_WORLD_SIZE=8",
		"GOCCL_TIMEOUT=ninety",
		"GOCCL_NSOCKS_PERPEER=0",
		"GOCCL_SHM_DISABEL=1",
		"GOCCL_RANK=0",
		"PATH=/usr/bin",
	}
	rep, err := Run(context.Background(), Options{Root: root, Statfs: hostShm8G, Env: env, RunTool: hostNoTools})
	if err != nil {
		t.Fatal(err)
	}
	hostWantStatus(t, rep, "rdma devices", StatusOK)
	hostWantStatus(t, rep, "port mlx5_0/1", StatusOK)
	// ibv.Parse's judgement: the IPv4 RoCE v2 GID next to a link-local one
	g := hostWantStatus(t, rep, "gids mlx5_0/1", StatusWarn)
	if !strings.Contains(g.Fix, "NCCL_IB_GID_INDEX=3") || !strings.Contains(g.Detail, "GID 1 is link-local") {
		t.Errorf("gid check does not recommend index 3: %+v", g)
	}
	if len(rep.RDMA) != 1 || len(rep.RDMA[0].Ports) != 1 {
		t.Fatalf("rdma devices: %+v", rep.RDMA)
	}
	d := rep.RDMA[0]
	p := d.Ports[0]
	if p.GIDIndex != 3 || p.State != "ACTIVE" || p.PhysState != "LinkUp" || p.LinkLayer != "Ethernet" || p.Netdev != "eth0" || d.NUMANode != 1 {
		t.Errorf("port: %+v (device numa %d)", p, d.NUMANode)
	}
	if len(p.GIDs) != 4 { // the zero slots 4 and 5 are skipped
		t.Errorf("GIDs: %+v", p.GIDs)
	} else if p.GIDs[3].GID != "::ffff:10.0.0.1" || p.GIDs[3].Type != "RoCE v2" || p.GIDs[0].GID != "fe80::202:c9ff:fe00:1" {
		t.Errorf("GIDs: %+v", p.GIDs)
	}
	hostWantStatus(t, rep, "roce mtu mlx5_0/1", StatusOK) // eth0 is at 9000
	// ens1 is no RDMA netdev: a 1500-byte interface next to the 9000-byte
	// RoCE one is only noted
	m := hostWantStatus(t, rep, "mtu", StatusInfo)
	if !strings.Contains(m.Detail, "eth0=9000") || !strings.Contains(m.Detail, "ens1=1500") {
		t.Errorf("mtu detail: %q", m.Detail)
	}
	pr := hostWantStatus(t, rep, "port range", StatusWarn)
	if rep.PortRange == nil || rep.PortRange.Width != 1001 || !strings.Contains(pr.Detail, "1001 ports") {
		t.Errorf("port range %+v: %q", rep.PortRange, pr.Detail)
	}
	hostWantStatus(t, rep, "shm", StatusOK) // hostShm8G
	if rep.ShmBytes != 8<<30 || rep.ShmFree != 7<<30 {
		t.Errorf("shm size %d free %d", rep.ShmBytes, rep.ShmFree)
	}
	n := hostWantStatus(t, rep, "numa", StatusInfo)
	if len(rep.NUMANodes) != 2 || rep.NUMANodes[0].CPUs != 32 || rep.NUMANodes[1].CPUList != "16-31,48-63" || !strings.Contains(n.Detail, "mlx5_0 on node1") {
		t.Errorf("numa %+v: %q", rep.NUMANodes, n.Detail)
	}
	hostWantStatus(t, rep, "env NCCL_P2P_DISABLE", StatusWarn)
	hostWantStatus(t, rep, "env NCCL_SHM_DISABLE", StatusWarn)
	hostWantStatus(t, rep, "env NCCL_IB_DISABLE", StatusWarn) // the host has mlx5_0
	st := hostWantStatus(t, rep, "env NCCL_SOCKET_NTHREADS", StatusWarn)
	if !strings.Contains(st.Detail, "8×16=128") || !strings.Contains(st.Detail, "NCCL_NSOCKS_PERTHREAD to 8") {
		t.Errorf("socket threads: %q", st.Detail)
	}
	hostWantStatus(t, rep, "env NCCL_DEBUG", StatusInfo)
	lo := hostWantStatus(t, rep, "env NCCL_SOCKET_IFNAME", StatusError)
	if !strings.Contains(lo.Detail, "WORLD_SIZE=16, LOCAL_WORLD_SIZE=8") || !strings.Contains(lo.Fix, "=eth0") {
		t.Errorf("ifname lo: %+v", lo)
	}
	u := hostWantStatus(t, rep, "env GOCCL_SHM_DISABEL", StatusWarn)
	if !strings.Contains(u.Fix, "GOCCL_SHM_DISABLE") {
		t.Errorf("unknown GOCCL var fix: %q", u.Fix)
	}
	if _, ok := hostCheckByName(rep, "env GOCCL_RANK"); ok {
		t.Error("GOCCL_RANK flagged")
	}
	hostWantStatus(t, rep, "env GOCCL_TIMEOUT", StatusError)
	hostWantStatus(t, rep, "env GOCCL_NSOCKS_PERPEER", StatusError)
	if c, _ := hostCheckByName(rep, "env GOCCL_NSOCKS_PERPEER"); !strings.Contains(c.Detail+c.Fix, "[1, 64]") {
		t.Errorf("invalid GOCCL_NSOCKS_PERPEER: %+v does not give the range", c)
	}
	hostWantStatus(t, rep, "nvidia-smi topo -m", StatusSkip)
	if c, _ := hostCheckByName(rep, "ibv_devinfo"); c.Status != StatusSkip || c.Detail != "not installed" {
		t.Errorf("ibv_devinfo check: %+v", c)
	}
	for _, c := range []struct {
		code string
		sev  doctor.Severity
	}{
		{"roce-gid-index", doctor.SevWarn}, {"mtu-mismatch", doctor.SevInfo}, {"port-range-narrow", doctor.SevWarn}, {"roce-link-layer", doctor.SevInfo},
		{"env-p2p-disabled", doctor.SevWarn}, {"env-shm-disabled", doctor.SevWarn}, {"env-ib-disabled", doctor.SevWarn},
		{"env-socket-threads", doctor.SevWarn}, {"env-debug-on", doctor.SevInfo}, {"env-socket-ifname-lo", doctor.SevError},
		{"env-goccl-unknown", doctor.SevWarn}, {"env-goccl-invalid", doctor.SevError}, {"numa-nodes", doctor.SevInfo},
	} {
		if !hostHasFinding(rep, c.code, c.sev) {
			t.Errorf("no %s finding %q", c.sev, c.code)
		}
	}
	for i := 1; i < len(rep.Findings); i++ {
		if rep.Findings[i-1].Severity.Rank() > rep.Findings[i].Severity.Rank() {
			t.Errorf("findings not sorted: %v before %v", rep.Findings[i-1], rep.Findings[i])
		}
	}
	if !doctor.HasErrors(rep.Findings) {
		t.Error("HasErrors false")
	}

	var txt bytes.Buffer
	if err := rep.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`(?m)^WARN +gids mlx5_0/1 +mlx5_0 port 1: RoCE v2 GID 3 is IPv4-mapped`, `(?m)^INFO +mtu `, `(?m)^ +fix: `, `\n3 errors, 7 warnings, 4 notes\n$`} {
		if !regexp.MustCompile(want).MatchString(txt.String()) {
			t.Errorf("text lacks %q:\n%s", want, txt.String())
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"checks", "rdma_devices", "interfaces", "shm_bytes", "shm_free", "port_range", "numa_nodes", "findings"} {
		if _, ok := back[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
}

func TestHostCleanEnvAndSingleHost(t *testing.T) {
	root := hostRoCETree(t, true)
	rep, err := Run(context.Background(), Options{Root: root, Statfs: hostShm8G, Env: []string{}, RunTool: hostNoTools})
	if err != nil {
		t.Fatal(err)
	}
	hostWantStatus(t, rep, "env", StatusOK)

	// lo on a single-host torchrun job is only a note; without launcher
	// variables it is a warning.
	rep, _ = Run(context.Background(), Options{Root: root, Statfs: hostShm8G, RunTool: hostNoTools,
		Env: []string{"NCCL_SOCKET_IFNAME=lo", "WORLD_SIZE=8", "LOCAL_WORLD_SIZE=8"}})
	hostWantStatus(t, rep, "env NCCL_SOCKET_IFNAME", StatusInfo)
	rep, _ = Run(context.Background(), Options{Root: root, Statfs: hostShm8G, RunTool: hostNoTools,
		Env: []string{"GOCCL_SOCKET_IFNAME=^eth,ens"}})
	hostWantStatus(t, rep, "env GOCCL_SOCKET_IFNAME", StatusWarn)
	rep, _ = Run(context.Background(), Options{Root: root, Statfs: hostShm8G, RunTool: hostNoTools,
		Env: []string{"NCCL_SOCKET_IFNAME=^docker", "SLURM_NNODES=2"}})
	if _, ok := hostCheckByName(rep, "env NCCL_SOCKET_IFNAME"); ok {
		t.Error("^docker flagged although eth0 and ens1 remain")
	}
	rep, _ = Run(context.Background(), Options{Root: root, Statfs: hostShm8G, RunTool: hostNoTools,
		Env: []string{"NCCL_SOCKET_IFNAME==ib0"}})
	hostWantStatus(t, rep, "env NCCL_SOCKET_IFNAME", StatusError)

	// An explicit NCCL_IB_GID_INDEX pointing at a v1 GID or an empty slot.
	rep, _ = Run(context.Background(), Options{Root: root, Statfs: hostShm8G, RunTool: hostNoTools, Env: []string{"NCCL_IB_GID_INDEX=2"}})
	hostWantStatus(t, rep, "env NCCL_IB_GID_INDEX mlx5_0/1", StatusWarn)
	rep, _ = Run(context.Background(), Options{Root: root, Statfs: hostShm8G, RunTool: hostNoTools, Env: []string{"NCCL_IB_GID_INDEX=5"}})
	hostWantStatus(t, rep, "env NCCL_IB_GID_INDEX mlx5_0/1", StatusError)
	rep, _ = Run(context.Background(), Options{Root: root, Statfs: hostShm8G, RunTool: hostNoTools, Env: []string{"NCCL_IB_GID_INDEX=3"}})
	hostWantStatus(t, rep, "env NCCL_IB_GID_INDEX mlx5_0/1", StatusOK)

	// The RoCE netdev at 1500 caps the path MTU at 1024; the port goes down.
	for p, c := range map[string]string{
		"sys/class/net/eth0/mtu":                         "1500",
		"sys/class/infiniband/mlx5_0/ports/1/state":      "1: DOWN",
		"sys/class/infiniband/mlx5_0/ports/1/phys_state": "3: Disabled",
	} {
		if err := os.WriteFile(filepath.Join(root, p), []byte(c+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep, _ = Run(context.Background(), Options{Root: root, Statfs: hostShm8G, RunTool: hostNoTools, Env: []string{}})
	c := hostWantStatus(t, rep, "roce mtu mlx5_0/1", StatusInfo)
	if !strings.Contains(c.Detail, "RoCE path MTU 1024") || !strings.Contains(c.Fix, "mtu 4200") {
		t.Errorf("roce mtu: %+v", c)
	}
	hostWantStatus(t, rep, "mtu", StatusOK)
	c = hostWantStatus(t, rep, "port mlx5_0/1", StatusWarn)
	if !strings.Contains(c.Detail, "DOWN, physical state Disabled") || !strings.Contains(c.Fix, "ip link set dev eth0 up") || !hostHasFinding(rep, "ibv-port-not-active", doctor.SevWarn) {
		t.Errorf("down port: %+v", c)
	}
}

func TestHostContainerWithoutDevInfiniband(t *testing.T) {
	root := hostRoCETree(t, false)
	rep, err := Run(context.Background(), Options{Root: root, Statfs: hostShm8G, Env: []string{}, RunTool: hostNoTools})
	if err != nil {
		t.Fatal(err)
	}
	c := hostWantStatus(t, rep, "rdma devices", StatusError)
	if !strings.Contains(c.Fix, "--device=/dev/infiniband") || !strings.Contains(c.Detail, "mlx5_0") {
		t.Errorf("container check: %+v", c)
	}
	if !hostHasFinding(rep, "rdma-dev-missing", doctor.SevError) || !doctor.HasErrors(rep.Findings) {
		t.Errorf("findings: %+v", rep.Findings)
	}
	// The devices are still described.
	if len(rep.RDMA) != 1 {
		t.Errorf("rdma: %+v", rep.RDMA)
	}
}

func TestHostNoRDMASmallMTUAndTools(t *testing.T) {
	root := hostTree(t, map[string]string{
		"sys/class/net/eth0/mtu":                "1500",
		"sys/class/net/eth0/operstate":          "up",
		"sys/class/net/eth0/device/":            "",
		"proc/sys/net/ipv4/ip_local_port_range": "32768 60999",
	})
	var ran []string
	run := func(ctx context.Context, name string, args ...string) ([]byte, error) {
		ran = append(ran, name)
		if name == "nvidia-smi" {
			return []byte("\tGPU0\tCPU Affinity\nGPU0\t X \t0-1\n"), nil
		}
		return []byte("Failed to get IB devices list\n"), errors.New("exit status 1")
	}
	rep, err := Run(context.Background(), Options{Root: root, Statfs: hostShm8G, Env: []string{}, RunTool: run})
	if err != nil {
		t.Fatal(err)
	}
	c := hostWantStatus(t, rep, "rdma devices", StatusInfo)
	if !strings.Contains(c.Detail, "NET/Socket") || !strings.Contains(c.Fix, "roce") {
		t.Errorf("no-rdma check: %+v", c)
	}
	hostWantStatus(t, rep, "port range", StatusOK)
	hostWantStatus(t, rep, "shm", StatusWarn) // no dev/shm in the tree
	hostWantStatus(t, rep, "numa", StatusSkip)
	hostWantStatus(t, rep, "nvidia-smi topo -m", StatusOK)
	hostWantStatus(t, rep, "ibv_devinfo", StatusWarn)
	if !strings.Contains(rep.Tools["nvidia-smi topo -m"], "CPU Affinity") || len(ran) != 2 {
		t.Errorf("tools %q ran %v", rep.Tools, ran)
	}
	// the one-GPU matrix is read as one
	if rep.Topo == nil || len(rep.Topo.GPUs) != 1 || hostHasFinding(rep, "topo-no-matrix", doctor.SevWarn) {
		t.Errorf("one-GPU matrix: %+v", rep.Topo)
	}
}

func TestHostShmAndHelpers(t *testing.T) {
	// Statfs decides the shm check, whatever file system holds the tree.
	root := hostTree(t, map[string]string{"dev/shm/": ""})
	var asked string
	rep, err := Run(context.Background(), Options{Root: root, Env: []string{}, RunTool: hostNoTools,
		Statfs: func(path string) (uint64, uint64, error) { asked = path; return 64 << 20, 60 << 20, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if c := hostWantStatus(t, rep, "shm", StatusWarn); !strings.Contains(c.Detail, "64.0 MiB") || !hostHasFinding(rep, "shm-small", doctor.SevWarn) || asked != filepath.Join(root, "dev/shm") {
		t.Errorf("shm %+v, statfs asked for %q", c, asked)
	}
	rep, _ = Run(context.Background(), Options{Root: root, Env: []string{}, RunTool: hostNoTools,
		Statfs: func(string) (uint64, uint64, error) { return 0, 0, errors.New("no such file") }})
	hostWantStatus(t, rep, "shm", StatusWarn)
	if !hostHasFinding(rep, "shm-missing", doctor.SevWarn) {
		t.Errorf("findings %v", rep.Findings)
	}

	if _, st, code, _, fix := hostShmCheck(64<<20, 64<<20); st != StatusWarn || code != "shm-small" || !strings.Contains(fix, "--shm-size") {
		t.Errorf("64 MiB: %s %s %s", st, code, fix)
	}
	if _, st, _, _, _ := hostShmCheck(8<<30, 7<<30); st != StatusOK {
		t.Errorf("8 GiB: %s", st)
	}
	if _, st, code, _, _ := hostShmCheck(8<<30, 100<<20); st != StatusWarn || code != "shm-full" {
		t.Errorf("full: %s %s", st, code)
	}
	for mtu, want := range map[int]int{1500: 1024, 4200: 4096, 4191: 2048, 9000: 4096, 300: 0} {
		if got := hostPathMTU(mtu); got != want {
			t.Errorf("hostPathMTU(%d) = %d, want %d", mtu, got, want)
		}
	}
	if n := len(topo.ParseCPUList("0-3,8,10-11")); n != 7 { // the NUMA nodes' count

		t.Errorf("cpus %d", n)
	}
	if _, err := Run(context.Background(), Options{Root: "/nonexistent-goccl-root"}); err == nil {
		t.Error("missing root: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Options{Root: t.TempDir(), RunTool: hostNoTools}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
}

// TestHostLive runs on the real machine and asserts only what holds on any
// Linux host; the RDMA expectation follows the file system as seen here.
func TestHostLive(t *testing.T) {
	rep, err := Run(context.Background(), Options{Root: "/", Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := hostCheckByName(rep, "shm"); !ok {
		t.Errorf("no shm check: %v", hostCheckNames(rep))
	} else if c.Status == StatusOK && rep.ShmBytes == 0 {
		t.Errorf("shm ok with size 0")
	}
	c, ok := hostCheckByName(rep, "rdma devices")
	if !ok {
		t.Fatalf("no rdma check: %v", hostCheckNames(rep))
	}
	sysfs, _ := os.ReadDir("/sys/class/infiniband")
	devs, _ := os.ReadDir("/dev/infiniband")
	if len(sysfs) == 0 && len(devs) == 0 {
		if c.Status != StatusInfo || !strings.Contains(c.Detail, "no RDMA devices") {
			t.Errorf("no RDMA here but check says %+v", c)
		}
	} else if len(sysfs) > 0 && len(rep.RDMA) != len(sysfs) {
		t.Errorf("%d devices in sysfs, %d in report", len(sysfs), len(rep.RDMA))
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", b.String())
}

// TestHostToolsParsed: when nvidia-smi and ibv_devinfo are installed, their
// output is read by topo.Parse and ibv.Parse and their findings join the
// host's (here the real matrix of topo-02, where GPU0 has no local NIC, and
// the GID table of ibv-07, whose IPv4 RoCE v2 GID is index 3).
func TestHostToolsParsed(t *testing.T) {
	topoOut := doctortest.Verbatim(t, filepath.Join("..", "topo", "testdata", "real-inputs", "topo-02.txt"))
	ibvOut := doctortest.Verbatim(t, filepath.Join("..", "ibv", "testdata", "real-inputs", "ibv-07.txt"))
	run := func(ctx context.Context, name string, args ...string) ([]byte, error) {
		switch name {
		case "nvidia-smi":
			return []byte(topoOut), nil
		case "ibv_devinfo":
			return []byte(ibvOut), nil
		}
		return nil, &exec.Error{Name: name, Err: exec.ErrNotFound}
	}
	rep, err := Run(context.Background(), Options{Root: hostRoCETree(t, true), Statfs: hostShm8G, Env: []string{}, RunTool: run})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Topo == nil || len(rep.Topo.GPUs) != 3 || rep.IBV == nil || len(rep.IBV.Devices) != 1 {
		t.Fatalf("tool reports: topo %+v ibv %+v", rep.Topo, rep.IBV)
	}
	codes := map[string]bool{}
	for _, f := range rep.Findings {
		codes[f.Code] = true
	}
	for _, want := range []string{"gpu-no-local-nic", "roce-gid-index"} {
		if !codes[want] {
			t.Errorf("host findings lack %s: %v", want, codes)
		}
	}
}

// hostAddFiles writes more files into a tree made by hostTree.
func hostAddFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHostMTUAmongRDMANetdevs: different MTUs warn only among the netdevs
// of RDMA ports (GID netdevs, device/net), not for a management interface.
func TestHostMTUAmongRDMANetdevs(t *testing.T) {
	for _, via := range []string{"gid", "device-net"} {
		root := hostRoCETree(t, true)
		const ib = "sys/class/infiniband/mlx5_1/"
		files := map[string]string{
			ib + "ports/1/state":           "4: ACTIVE",
			ib + "ports/1/phys_state":      "5: LinkUp",
			ib + "ports/1/link_layer":      "Ethernet",
			"sys/class/net/eth1/mtu":       "1500",
			"sys/class/net/eth1/operstate": "up",
			"sys/class/net/eth1/type":      "1",
			"sys/class/net/eth1/device/":   "",
		}
		if via == "gid" {
			files[ib+"ports/1/gids/0"] = hostSysfsGID("v4", [4]byte{10, 0, 1, 1})
			files[ib+"ports/1/gid_attrs/types/0"] = "RoCE v2"
			files[ib+"ports/1/gid_attrs/ndevs/0"] = "eth1"
		} else {
			files[ib+"device/net/eth1/"] = ""
		}
		hostAddFiles(t, root, files)
		rep, err := Run(context.Background(), Options{Root: root, Statfs: hostShm8G, Env: []string{}, RunTool: hostNoTools})
		if err != nil {
			t.Fatal(err)
		}
		m := hostWantStatus(t, rep, "mtu", StatusWarn)
		if !strings.Contains(m.Detail, "eth0=9000, eth1=1500") || strings.Contains(m.Detail, "ens1") || !hostHasFinding(rep, "mtu-mismatch", doctor.SevWarn) {
			t.Errorf("%s: mtu %+v", via, m)
		}
	}
}

// TestHostSharesIBVChecks: the sysfs view of a port gets the same codes as
// ibv.Parse on the same port printed by ibstatus and show_gids, and an
// ibv_devinfo run on the host does not repeat them.
func TestHostSharesIBVChecks(t *testing.T) {
	const port = "sys/class/infiniband/mlx5_0/ports/1/"
	root := hostTree(t, map[string]string{
		port + "state":             "1: DOWN",
		port + "phys_state":        "3: Disabled",
		port + "link_layer":        "Ethernet",
		port + "gids/0":            hostSysfsGID("fe80", [4]byte{}),
		port + "gids/1":            hostSysfsGID("v4", [4]byte{10, 0, 0, 1}),
		port + "gid_attrs/types/0": "IB/RoCE v1",
		port + "gid_attrs/types/1": "IB/RoCE v1",
		port + "gid_attrs/ndevs/0": "eth0",
		port + "gid_attrs/ndevs/1": "eth0",
		"dev/infiniband/uverbs0":   "",
	})
	devinfo := "hca_id:\tmlx5_0\n\tport:\t1\n\t\tstate:\t\t\tPORT_DOWN (1)\n\t\tphys_state:\t\tDISABLED (3)\n\t\tlink_layer:\t\tEthernet\n"
	run := func(ctx context.Context, name string, args ...string) ([]byte, error) {
		if name == "ibv_devinfo" {
			return []byte(devinfo), nil
		}
		return nil, &exec.Error{Name: name, Err: exec.ErrNotFound}
	}
	rep, err := Run(context.Background(), Options{Root: root, Statfs: hostShm8G, Env: []string{}, RunTool: run})
	if err != nil {
		t.Fatal(err)
	}
	ibvRep := doctortest.Read(t, ibv.Parse, "Infiniband device 'mlx5_0' port 1 status:\n\tstate:\t\t 1: DOWN\n\tphys state:\t 3: Disabled\n\tlink_layer:\t Ethernet\n"+
		"DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4 \t\tVER\tDEV\n"+
		"mlx5_0\t1\t0\tfe80:0000:0000:0000:0202:c9ff:fe00:0001\t\t\tv1\teth0\n"+
		"mlx5_0\t1\t1\t0000:0000:0000:0000:0000:ffff:0a00:0001\t10.0.0.1  \tv1\teth0\n")
	want := doctortest.Codes(ibvRep.Findings, "")
	got := doctortest.Codes(rep.Findings, "")
	if len(want) != 3 || want["ibv-port-not-active"] != 1 || want["roce-no-v2-gid"] != 1 || want["roce-link-layer"] != 1 {
		t.Fatalf("ibv.Parse: %v", ibvRep.Findings)
	}
	for code := range want {
		if got[code] != 1 {
			t.Errorf("host has %d %s, want 1 (ParseIBV's); host findings %v", got[code], code, rep.Findings)
		}
	}
	if got["ib-port-not-active"] != 0 {
		t.Errorf("old code: %v", rep.Findings)
	}
	hostWantStatus(t, rep, "port mlx5_0/1", StatusWarn)
	hostWantStatus(t, rep, "gids mlx5_0/1", StatusWarn)
	hostWantStatus(t, rep, "ibv_devinfo", StatusOK)

	// An empty GID table is the sysfs view's own knowledge (listings may
	// leave GIDs out); the IPv4 GID index differing between ports is the
	// shared fleet check.
	root = hostRoCETree(t, true)
	const p1 = "sys/class/infiniband/mlx5_1/ports/1/"
	hostAddFiles(t, root, map[string]string{
		p1 + "state": "4: ACTIVE", p1 + "phys_state": "5: LinkUp", p1 + "link_layer": "Ethernet",
		"sys/class/infiniband/mlx5_2/ports/1/state":             "4: ACTIVE",
		"sys/class/infiniband/mlx5_2/ports/1/link_layer":        "Ethernet",
		"sys/class/infiniband/mlx5_2/ports/1/gids/5":            hostSysfsGID("v4", [4]byte{10, 0, 2, 1}),
		"sys/class/infiniband/mlx5_2/ports/1/gid_attrs/types/5": "RoCE v2",
	})
	rep, _ = Run(context.Background(), Options{Root: root, Statfs: hostShm8G, Env: []string{}, RunTool: hostNoTools})
	hostWantStatus(t, rep, "gids mlx5_1/1", StatusWarn)
	if !hostHasFinding(rep, "roce-no-gid", doctor.SevWarn) {
		t.Errorf("no roce-no-gid: %v", rep.Findings)
	}
	if f, ok := doctortest.FindingWith(rep.Findings, "roce-gid-index-differs", "3 on mlx5_0 port 1; 5 on mlx5_2 port 1"); !ok || f.Severity != doctor.SevWarn {
		t.Errorf("differs: %v", rep.Findings)
	}
}

// TestHostEnvIBHCA: NCCL_IB_HCA against /sys/class/infiniband, with NCCL's
// syntax: prefixes by default, "=" exact, "^" exclude, ":port".
func TestHostEnvIBHCA(t *testing.T) {
	root := hostRoCETree(t, true) // mlx5_0 port 1
	for _, c := range []struct {
		spec, status, code string
	}{
		{"mlx5", "", ""},
		{"mlx5_0:1", "", ""},
		{"=mlx5_0", "", ""},
		{"mlx5_0,mlx5_1", StatusWarn, "env-ib-hca-unknown"},
		{"mlx5_0:1,mlx5_0:2", StatusWarn, "env-ib-hca-unknown"},
		{"mlx5_1", StatusError, "env-ib-hca-none"},
		{"=mlx5", StatusError, "env-ib-hca-none"},
		{"mlx5_0:2", StatusError, "env-ib-hca-none"},
		{"ibp", StatusError, "env-ib-hca-none"},
		{"^mlx5", StatusError, "env-ib-hca-none"},
		{"^=mlx5_0", StatusError, "env-ib-hca-none"},
		{"^=mlx5", StatusInfo, "env-ib-hca-unknown"},
		{"^mlx5_3", StatusInfo, "env-ib-hca-unknown"},
	} {
		rep, err := Run(context.Background(), Options{Root: root, Statfs: hostShm8G, RunTool: hostNoTools, Env: []string{"NCCL_IB_HCA=" + c.spec}})
		if err != nil {
			t.Fatal(err)
		}
		chk, ok := hostCheckByName(rep, "env NCCL_IB_HCA")
		if c.status == "" {
			if ok {
				t.Errorf("%s: flagged %+v", c.spec, chk)
			}
			continue
		}
		if !ok || chk.Status != c.status || !hostHasFinding(rep, c.code, map[string]doctor.Severity{StatusError: doctor.SevError, StatusWarn: doctor.SevWarn, StatusInfo: doctor.SevInfo}[c.status]) {
			t.Errorf("%s: %+v, want %s %s", c.spec, chk, c.status, c.code)
		}
	}
}

// TestHostEnvDisableIntegers: NCCL reads the *_DISABLE variables as
// integers: any value other than 0 disables.
func TestHostEnvDisableIntegers(t *testing.T) {
	root := hostRoCETree(t, true)
	for _, c := range []struct {
		val  string
		warn bool
		bad  bool
	}{{"1", true, false}, {"2", true, false}, {" 1", true, false}, {"0x1", true, false}, {"-1", true, false},
		{"0", false, false}, {"00", false, false}, {"0x0", false, false}, {"yes", false, true}} {
		for _, v := range []struct{ name, code string }{
			{"NCCL_IB_DISABLE", "env-ib-disabled"}, {"NCCL_P2P_DISABLE", "env-p2p-disabled"}, {"NCCL_SHM_DISABLE", "env-shm-disabled"},
		} {
			rep, _ := Run(context.Background(), Options{Root: root, Statfs: hostShm8G, RunTool: hostNoTools, Env: []string{v.name + "=" + c.val}})
			if hostHasFinding(rep, v.code, doctor.SevWarn) != c.warn || hostHasFinding(rep, "env-not-integer", doctor.SevWarn) != c.bad {
				t.Errorf("%s=%q: %v", v.name, c.val, rep.Findings)
			}
		}
	}
}

// TestFindingCodesDocumented: the package doc lists every finding code the
// package emits, and only those.
func TestFindingCodesDocumented(t *testing.T) {
	doctortest.CodesDocumented(t, 5)
}
