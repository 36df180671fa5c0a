// Package host checks the live host (`goccl doctor host`): RDMA devices
// and their device nodes, ports and GIDs, interface MTUs, /dev/shm, the
// local port range, NUMA nodes, and the NCCL_* and GOCCL_* environment.
//
// Input: Run reads sysfs through package topo's Detect, and procfs and
// /dev, under Options.Root, the
// environment, and the output of nvidia-smi topo -m and ibv_devinfo when
// they are installed. The files and their formats are the kernel's, as its
// ABI documents describe them (Documentation/ABI/stable/
// sysfs-class-infiniband, Documentation/ABI/testing/sysfs-class-net,
// proc(5) for ip_local_port_range); the environment is read the way NCCL
// reads it (integers as strtoll parses them, NCCL_IB_HCA's list syntax)
// and the way goccl reads its GOCCL_* variables.
//
// The RDMA ports read from sysfs are judged by package ibv's checks
// (ibv-port-not-active, roce-no-gid, roce-no-v2-gid, roce-gid-index,
// roce-only-link-local-gid, roce-no-ipv4-gid, roce-gid-index-differs,
// roce-link-layer); the tools' outputs add topo.Parse's and ibv.Parse's
// findings, without repeating a code for a port already judged. Its own
// finding codes (severity):
//
//	rdma-none               info         no RDMA device: NCCL and goccl use TCP
//	rdma-dev-missing        error        sysfs lists devices but /dev/infiniband has no uverbs (container)
//	rdma-sysfs-missing      warn         /dev/infiniband without /sys/class/infiniband
//	rdma-no-ports           warn         a device without ports in sysfs
//	roce-netdev-mtu         info         a RoCE netdev MTU below what a 4096-byte path MTU needs
//	env-gid-index-bad       error        NCCL_IB_GID_INDEX is not a number
//	env-gid-index-empty     error        NCCL_IB_GID_INDEX names an empty GID slot
//	env-gid-index-v1        warn         NCCL_IB_GID_INDEX names a RoCE v1 GID
//	env-gid-index-not-ipv4  info         NCCL_IB_GID_INDEX names a RoCE v2 GID other than the IPv4 one
//	mtu-mismatch            warn, info   MTUs differ among RDMA netdevs (warn) or other up interfaces (info)
//	shm-missing             warn         /dev/shm cannot be statfs'd
//	shm-small               warn         /dev/shm under 1 GiB
//	shm-full                warn         under 1 GiB free in /dev/shm
//	port-range-narrow       warn         ip_local_port_range narrower than 10000 ports
//	port-range-unparsable   warn         ip_local_port_range unreadable as two numbers
//	numa-nodes              info         several NUMA nodes (and the RDMA devices' nodes)
//	env-not-integer         warn         an NCCL_*_DISABLE value that is not an integer (NCCL ignores it)
//	env-p2p-disabled        warn         NCCL_P2P_DISABLE is a non-zero integer
//	env-shm-disabled        warn         NCCL_SHM_DISABLE is a non-zero integer
//	env-ib-disabled         warn, info   NCCL_IB_DISABLE is a non-zero integer (info without RDMA devices)
//	env-ib-hca-none         error        NCCL_IB_HCA selects no port here: NCCL silently uses NET/Socket
//	env-ib-hca-unknown      warn, info   NCCL_IB_HCA entries naming no device or port here (info when excluded)
//	env-socket-threads-bad  warn         NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD not positive numbers
//	env-socket-threads      warn         their product above NCCL's 64 sockets (or threads above 16)
//	env-debug-on            info         NCCL_DEBUG=INFO or TRACE
//	env-socket-ifname-none  error        NCCL_SOCKET_IFNAME / GOCCL_SOCKET_IFNAME selects no up interface
//	env-socket-ifname-lo    error, warn, info  it selects only loopback (error across hosts, info on one)
//	env-goccl-unknown       warn         a GOCCL_* variable goccl does not read
//	env-goccl-invalid       error        a GOCCL_* value Init refuses (internal/config)
//	tool-failed             warn         nvidia-smi or ibv_devinfo exited with an error
package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/doctor"
	"github.com/goccl/goccl/doctor/ibv"
	topodoc "github.com/goccl/goccl/doctor/topo"
	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/textdist"
	"github.com/goccl/goccl/topo"
)

// Options says where and how Run looks.
type Options struct {
	// Root is the file system root under which /sys, /proc and /dev are
	// read; "" means "/". Tests point it at a fake tree. With a Root other
	// than "/" interface addresses are not listed (they come from the
	// kernel through net.Interfaces, not from files) and, unless RunTool
	// is set, the external tools are skipped (they would describe the real
	// machine, not the tree).
	Root string
	// Env is the environment to check, as "KEY=value" strings; nil means
	// os.Environ(). The last assignment of a key wins, as in a shell.
	Env []string
	// RunTool runs an external program (nvidia-smi topo -m, ibv_devinfo)
	// and returns its standard output. nil means executing it with a
	// timeout of 15 s unless ctx has an earlier deadline; the returned
	// error wraps exec.ErrNotFound when the program is not installed.
	RunTool func(ctx context.Context, name string, args ...string) ([]byte, error)
	// Statfs returns the size of the file system holding path and the bytes
	// available to an unprivileged user; it is for tests and for callers
	// that know better than statfs(2) (a container whose /dev/shm is
	// accounted elsewhere). nil means statfs(2). With a Root other than "/"
	// path is under Root, and statfs(2) there describes whatever file system
	// holds the tree (a test's temporary directory), not a tmpfs.
	Statfs func(path string) (size, free uint64, err error)
}

// Statuses of a Check.
const (
	StatusOK    = "ok"
	StatusWarn  = "warn"
	StatusError = "error"
	StatusInfo  = "info"
	StatusSkip  = "skip"
)

// Check is one line of the host report: what was checked, how it went
// (ok, warn, error, info or skip), what was seen, and what to do.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
	Fix    string `json:"fix,omitempty"`
}

// GID is one non-empty slot of a port's GID table.
type GID struct {
	Index int    `json:"index"`
	GID   string `json:"gid"`            // canonical text: "fe80::1", "::ffff:10.0.0.1"
	Type  string `json:"type,omitempty"` // "RoCE v2" or "IB/RoCE v1"; "" where sysfs gives none
	// Netdev is the network interface the GID belongs to (RoCE only).
	Netdev string `json:"netdev,omitempty"`
}

// RDMAPort is one port of an RDMA device, as sysfs shows it.
type RDMAPort struct {
	Port      int    `json:"port"`
	State     string `json:"state"`      // "ACTIVE", "DOWN", ... (logical state)
	PhysState string `json:"phys_state"` // "LinkUp", "Disabled", "Polling", ...
	LinkLayer string `json:"link_layer"` // "InfiniBand" or "Ethernet"
	Rate      string `json:"rate,omitempty"`
	GIDs      []GID  `json:"gids,omitempty"`
	// Netdev is the network interface behind a RoCE port (from its GIDs).
	Netdev string `json:"netdev,omitempty"`
	// GIDIndex is the GID index to give NCCL_IB_GID_INDEX on a RoCE port:
	// the first RoCE v2 GID holding an IPv4-mapped address; -1 for none
	// (and on InfiniBand ports, which need no GID index).
	GIDIndex int `json:"gid_index"`
}

// RDMADevice is one entry of /sys/class/infiniband.
type RDMADevice struct {
	Name     string     `json:"name"`
	NodeType string     `json:"node_type,omitempty"` // "1: CA"
	FWVer    string     `json:"fw_ver,omitempty"`
	NUMANode int        `json:"numa_node"` // -1 when unknown
	Ports    []RDMAPort `json:"ports"`
}

// Interface is one entry of /sys/class/net.
type Interface struct {
	Name     string   `json:"name"`
	MTU      int      `json:"mtu"`   // bytes; 0 when unreadable
	State    string   `json:"state"` // operstate: "up", "down", "unknown", ...
	Address  string   `json:"address,omitempty"`
	Type     int      `json:"type"` // ARPHRD_*: 1 Ethernet, 32 InfiniBand (IPoIB), 772 loopback
	Loopback bool     `json:"loopback"`
	Physical bool     `json:"physical"`        // has a device (PCI, virtio, ...) behind it
	Addrs    []string `json:"addrs,omitempty"` // CIDR; listed only when Root is "/"
}

// PortRange is net.ipv4.ip_local_port_range: the ports the kernel
// hands out to connect() and bind(0).
type PortRange struct {
	Low   int `json:"low"`
	High  int `json:"high"`
	Width int `json:"width"` // High-Low+1
}

// NUMANode is one NUMA node and its CPUs.
type NUMANode struct {
	Node    int    `json:"node"`
	CPUList string `json:"cpulist"` // "0-15,32-47"
	CPUs    int    `json:"cpus"`
}

// Report is what Run found.
type Report struct {
	Root string `json:"root"`
	// Checks lists every check in the order run.
	Checks []Check `json:"checks"`
	// RDMA lists the devices under /sys/class/infiniband.
	RDMA       []RDMADevice `json:"rdma_devices"`
	Interfaces []Interface  `json:"interfaces"`
	// ShmBytes and ShmFree are the size and the space available to an
	// unprivileged user of /dev/shm, in bytes (0 when it is missing).
	ShmBytes  uint64     `json:"shm_bytes"`
	ShmFree   uint64     `json:"shm_free"`
	PortRange *PortRange `json:"port_range,omitempty"`
	NUMANodes []NUMANode `json:"numa_nodes,omitempty"`
	// Tools holds the raw standard output of each external tool that ran,
	// keyed by its command line ("nvidia-smi topo -m", "ibv_devinfo").
	Tools map[string]string `json:"tools,omitempty"`
	// Topo and IBV are topo.Parse's and ibv.Parse's reports on the tools'
	// output (their findings are merged into Findings).
	Topo *topodoc.Report `json:"topo,omitempty"`
	IBV  *ibv.Report     `json:"ibv,omitempty"`
	// Findings are the problems and notes, errors first.
	Findings []doctor.Finding `json:"findings"`
}

// hostShmMin is the /dev/shm size under which Run warns: NCCL's SHM
// transport and goccl's rings need a few MiB per pair of ranks and channel;
// Docker's default of 64 MiB is not enough for 8 GPUs.
const hostShmMin = 1 << 30

// hostPortRangeMin is the ip_local_port_range width under which Run
// warns: every rank opens sockets to every peer (several per peer with
// NCCL_NSOCKS_PERTHREAD or GOCCL_NSOCKS_PERPEER), plus bootstrap ones.
const hostPortRangeMin = 10000

// hostRoCEHeaders is what the kernel's iboe_get_mtu (include/rdma/ib_addr.h)
// subtracts from a netdev MTU to get the largest RoCE path MTU: GRH 40, UDP
// 8, BTH 12, XRC 4, AtomicETH 28, ICRC 4 bytes. A 4096-byte path MTU needs
// a netdev MTU of at least 4192; 4200 is the usual setting.
const hostRoCEHeaders = 40 + 8 + 12 + 4 + 28 + 4

// hostRoCEMTU is the netdev MTU Run recommends for RoCE.
const hostRoCEMTU = 4200

// hostTools are the external programs Run runs when installed.
var hostTools = []struct {
	name string
	args []string
}{
	{"nvidia-smi", []string{"topo", "-m"}},
	{"ibv_devinfo", nil},
}

// hostRun accumulates the report while the checks run.
type hostRun struct {
	rep    *Report
	root   string
	sys    *topo.Host // sysfs as topo.Detect read it
	env    map[string]string
	statfs func(path string) (size, free uint64, err error)
	// rdmaNetdevs are the network interfaces behind RDMA ports: GID netdevs
	// and /sys/class/infiniband/*/device/net entries.
	rdmaNetdevs map[string]bool
}

// check appends a check and, for warn, error and info statuses with a code,
// the matching finding.
func (h *hostRun) check(name, status, code, detail, fix string) {
	h.rep.Checks = append(h.rep.Checks, Check{Name: name, Status: status, Detail: detail, Fix: fix})
	if code == "" {
		return
	}
	var sev doctor.Severity
	switch status {
	case StatusError:
		sev = doctor.SevError
	case StatusWarn:
		sev = doctor.SevWarn
	case StatusInfo:
		sev = doctor.SevInfo
	default:
		return
	}
	h.rep.Findings = append(h.rep.Findings, doctor.Finding{Severity: sev, Code: code, Message: name + ": " + detail, Fix: fix})
}

// path maps an absolute path of the live system to the same path under Root.
func (h *hostRun) path(p string) string {
	if h.root == "/" {
		return p
	}
	return filepath.Join(h.root, p)
}

// read returns the trimmed content of a file under Root (procfs; sysfs is
// topo.Detect's) and whether it could be read.
func (h *hostRun) read(p string) (string, bool) {
	b, err := os.ReadFile(h.path(p))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// dir lists the names in a directory under Root (/dev), sorted; nil when
// absent.
func (h *hostRun) dir(p string) []string {
	es, err := os.ReadDir(h.path(p))
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(es))
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// Run inspects the machine (or the tree under opt.Root): RDMA devices
// and their device nodes, port states and GID tables, interface MTUs,
// /dev/shm, the local port range, NUMA nodes, NCCL_* and GOCCL_* variables,
// and the output of nvidia-smi topo -m and ibv_devinfo when installed. A
// check that cannot read its files says so in its status; Run returns
// an error only when Root is not a directory or ctx ends.
func Run(ctx context.Context, opt Options) (*Report, error) {
	root := opt.Root
	if root == "" {
		root = "/"
	}
	root = filepath.Clean(root)
	if st, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("doctor: host root: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("doctor: host root %s is not a directory", root)
	}
	envList := opt.Env
	if envList == nil {
		envList = os.Environ()
	}
	h := &hostRun{rep: &Report{Root: root}, root: root, env: map[string]string{}, statfs: opt.Statfs, rdmaNetdevs: map[string]bool{}}
	if h.statfs == nil {
		h.statfs = hostStatfs
	}
	for _, kv := range envList {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			h.env[k] = v
		}
	}
	sys, err := topo.Detect(topo.Options{Root: root, NvidiaSMI: "-", Affinity: func() ([]int, error) { return nil, nil }})
	if err != nil {
		return nil, fmt.Errorf("doctor: host: %w", err)
	}
	h.sys = sys
	steps := []func(){
		h.checkInterfaces, // RDMA checks need the netdev MTUs
		h.checkRDMA,
		h.checkMTUs,
		h.checkShm,
		h.checkPortRange,
		h.checkNUMA,
		h.checkEnv,
	}
	for _, step := range steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		step()
	}
	if err := h.runTools(ctx, opt.RunTool); err != nil {
		return nil, err
	}
	doctor.SortFindings(h.rep.Findings)
	// Empty lists encode as [] rather than null.
	if h.rep.Findings == nil {
		h.rep.Findings = []doctor.Finding{}
	}
	if h.rep.RDMA == nil {
		h.rep.RDMA = []RDMADevice{}
	}
	if h.rep.Interfaces == nil {
		h.rep.Interfaces = []Interface{}
	}
	return h.rep, nil
}

// --- RDMA ----------------------------------------------------------------

// checkRDMA judges the RDMA devices topo.Detect read from
// /sys/class/infiniband, and lists /dev/infiniband.
//
// Sysfs layout (kernel Documentation/ABI/stable/sysfs-class-infiniband), all
// under /sys/class/infiniband/<device>/:
//
//	node_type                      "1: CA"
//	fw_ver                         "20.31.1014"
//	device/numa_node               "0", or "-1" when the platform gives none
//	ports/<n>/state                "4: ACTIVE" (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER)
//	ports/<n>/phys_state           "5: LinkUp" (2 Polling, 3 Disabled, ...)
//	ports/<n>/link_layer           "InfiniBand" or "Ethernet" (RoCE)
//	ports/<n>/rate                 "100 Gb/sec (4X EDR)"; Gb/s, signalling rate
//	ports/<n>/gids/<i>             "fe80:0000:0000:0000:0202:c9ff:fe00:0001", 8 groups
//	                               of 4 hex digits; an all-zero GID is an empty slot
//	ports/<n>/gid_attrs/types/<i>  "IB/RoCE v1" or "RoCE v2" (EINVAL on empty slots)
//	ports/<n>/gid_attrs/ndevs/<i>  netdev name of a RoCE GID (EINVAL on empty slots)
//
// /dev/infiniband holds the character devices user space opens: uverbs<N>
// (verbs), rdma_cm, umad<N>; a container sees them only when they are passed in.
func (h *hostRun) checkRDMA() {
	var sysDevs []string
	for _, d := range h.sys.RDMA {
		sysDevs = append(sysDevs, d.Name)
	}
	devNodes := h.dir("/dev/infiniband")
	var uverbs []string
	for _, n := range devNodes {
		if strings.HasPrefix(n, "uverbs") {
			uverbs = append(uverbs, n)
		}
	}
	switch {
	case len(sysDevs) == 0 && len(uverbs) == 0:
		h.check("rdma devices", StatusInfo, "rdma-none",
			"no RDMA devices: /sys/class/infiniband and /dev/infiniband are absent or empty; NCCL will use NET/Socket (TCP) between hosts, and goccl uses TCP",
			"nothing to fix for TCP; to exercise RDMA code paths without hardware use goccl's soft RoCE (goccl roce devinfo, goccl roce write-bw)")
		return
	case len(sysDevs) > 0 && len(uverbs) == 0:
		h.check("rdma devices", StatusError, "rdma-dev-missing",
			fmt.Sprintf("sysfs lists %s but /dev/infiniband has no uverbs device: the verbs library cannot open them (typical of a container), NCCL falls back to NET/Socket",
				strings.Join(sysDevs, ", ")),
			"run the container with --device=/dev/infiniband (or --privileged, or the Kubernetes RDMA device plugin's rdma/… resource); on a bare host load ib_uverbs (modprobe ib_uverbs)")
	case len(sysDevs) == 0:
		h.check("rdma devices", StatusWarn, "rdma-sysfs-missing",
			fmt.Sprintf("/dev/infiniband has %s but /sys/class/infiniband is empty: libibverbs finds devices through sysfs and will see none",
				strings.Join(uverbs, ", ")),
			"mount the host's /sys (read-only is enough) into the container")
		return
	default:
		h.check("rdma devices", StatusOK, "",
			fmt.Sprintf("%s; /dev/infiniband: %s", strings.Join(sysDevs, ", "), strings.Join(devNodes, " ")), "")
	}
	for _, d := range h.sys.RDMA {
		h.rep.RDMA = append(h.rep.RDMA, h.rdmaDevice(d))
	}
	// The port, GID and cross-port checks are ibv.Parse's, run on the sysfs
	// view (one implementation, one code per condition); the container,
	// netdev MTU and NCCL_IB_GID_INDEX checks are the host's own.
	gidEnv, gidEnvSet := h.env["NCCL_IB_GID_INDEX"]
	var ports []ibv.NamedPort
	for _, d := range h.rep.RDMA {
		if len(d.Ports) == 0 {
			h.check("rdma "+d.Name, StatusWarn, "rdma-no-ports", "no ports under /sys/class/infiniband/"+d.Name+"/ports", "check the driver (dmesg) and the firmware")
		}
		for _, p := range d.Ports {
			ip := hostIBVPort(p)
			ports = append(ports, ibv.NamedPort{Name: ibv.PortName(d.Name, p.Port), Port: ip})
			h.checkPort(d, p, ibv.PortFindings(ibv.PortName(d.Name, p.Port), ip))
			if gidEnvSet && p.LinkLayer == "Ethernet" {
				h.checkGIDEnv(d, p, gidEnv)
			}
		}
	}
	for _, f := range ibv.FleetFindings(ports) {
		h.checkFinding("rdma "+f.Code, f)
	}
}

// hostIBVPort is a sysfs port as ibv.Parse would have read it.
func hostIBVPort(p RDMAPort) *ibv.Port {
	ip := &ibv.Port{Port: p.Port, State: p.State, PhysState: p.PhysState, LinkLayer: p.LinkLayer, Rate: p.Rate,
		Netdev: p.Netdev, GIDs: []ibv.GID{}, GIDsComplete: true}
	if f := strings.Fields(p.Rate); len(f) > 0 {
		if g, err := strconv.ParseFloat(f[0], 64); err == nil && g >= 0 && g < 1e6 {
			ip.RateGbps = g
		}
	}
	for _, g := range p.GIDs {
		// sysfs types: "IB/RoCE v1" (IB on InfiniBand, RoCE v1 on Ethernet), "RoCE v2"
		typ := ""
		switch {
		case hostIsRoCEv2(g.Type):
			typ = "RoCE v2"
		case g.Type != "" && p.LinkLayer == "Ethernet":
			typ = "RoCE v1"
		case g.Type != "":
			typ = "IB"
		}
		ig := ibv.MakeGID(g.Index, g.GID, typ)
		ig.Netdev = g.Netdev
		ip.GIDs = append(ip.GIDs, ig)
	}
	return ip
}

// checkFinding records a finding made elsewhere (ibv.Parse's checks) as a
// check line and a finding.
func (h *hostRun) checkFinding(name string, f doctor.Finding) {
	status := StatusInfo
	switch f.Severity {
	case doctor.SevError:
		status = StatusError
	case doctor.SevWarn:
		status = StatusWarn
	}
	h.rep.Checks = append(h.rep.Checks, Check{Name: name, Status: status, Detail: f.Message, Fix: f.Fix})
	h.rep.Findings = append(h.rep.Findings, f)
}

// rdmaDevice is topo's RDMA device in the report's terms, with each
// port's netdev (its first GID's, else the device's only device/net entry
// on Ethernet) and GID index; it records the netdevs behind its ports in
// rdmaNetdevs.
func (h *hostRun) rdmaDevice(td topo.RDMADevice) RDMADevice {
	d := RDMADevice{Name: td.Name, NodeType: td.NodeType, FWVer: td.FWVer, NUMANode: td.NUMANode}
	for _, n := range td.Netdevs {
		h.rdmaNetdevs[n] = true
	}
	for _, tp := range td.Ports {
		p := RDMAPort{Port: tp.Port, State: tp.State, PhysState: tp.PhysState, LinkLayer: tp.LinkLayer, Rate: tp.Rate, GIDIndex: -1}
		for _, tg := range tp.GIDs {
			g := GID{Index: tg.Index, GID: tg.GID, Type: tg.Type, Netdev: tg.Netdev}
			if g.Netdev != "" {
				h.rdmaNetdevs[g.Netdev] = true
			}
			if p.Netdev == "" {
				p.Netdev = g.Netdev
			}
			p.GIDs = append(p.GIDs, g)
			if a, err := netip.ParseAddr(g.GID); err == nil && p.GIDIndex < 0 && p.LinkLayer == "Ethernet" && hostIsRoCEv2(g.Type) && a.Is4In6() {
				p.GIDIndex = g.Index
			}
		}
		if p.Netdev == "" && p.LinkLayer == "Ethernet" && len(td.Netdevs) == 1 {
			p.Netdev = td.Netdevs[0]
		}
		d.Ports = append(d.Ports, p)
	}
	return d
}

// checkPort reports a port's state and GID findings (ibv.PortFindings on
// the sysfs view) as the "port" and "gids" check lines, then compares a
// RoCE port's netdev MTU with what a 4096-byte path MTU needs.
func (h *hostRun) checkPort(d RDMADevice, p RDMAPort, fs []doctor.Finding) {
	name := fmt.Sprintf("port %s/%d", d.Name, p.Port)
	gname := fmt.Sprintf("gids %s/%d", d.Name, p.Port)
	desc := fmt.Sprintf("%s, %s, %s", p.State, p.PhysState, p.LinkLayer)
	if p.Rate != "" {
		desc += ", " + p.Rate
	}
	portDone, gidsDone := false, false
	for _, f := range fs {
		if strings.HasPrefix(f.Code, "roce-") {
			h.checkFinding(gname, f)
			gidsDone = true
		} else {
			h.checkFinding(name, f)
			portDone = true
		}
	}
	if !portDone {
		h.check(name, StatusOK, "", desc, "")
	}
	if p.LinkLayer != "Ethernet" {
		return
	}
	if !gidsDone {
		h.check(gname, StatusOK, "", fmt.Sprintf("%d GIDs", len(p.GIDs)), "")
	}
	if p.Netdev == "" {
		return
	}
	for _, ifc := range h.rep.Interfaces {
		if ifc.Name != p.Netdev || ifc.MTU == 0 {
			continue
		}
		mname := fmt.Sprintf("roce mtu %s/%d", d.Name, p.Port)
		if ifc.MTU < hostRoCEMTU {
			h.check(mname, StatusInfo, "roce-netdev-mtu",
				fmt.Sprintf("%s has MTU %d: RoCE path MTU %d (the kernel subtracts %d bytes of headers; the IB maximum 4096 needs a netdev MTU of %d or more)",
					ifc.Name, ifc.MTU, hostPathMTU(ifc.MTU), hostRoCEHeaders, 4096+hostRoCEHeaders),
				fmt.Sprintf("for 4096-byte RoCE packets set ip link set dev %s mtu %d (and the switch ports to match); 1024 or 2048 work, with more packets per message", ifc.Name, hostRoCEMTU))
		} else {
			h.check(mname, StatusOK, "", fmt.Sprintf("%s MTU %d: RoCE path MTU 4096", ifc.Name, ifc.MTU), "")
		}
	}
}

// checkGIDEnv checks an explicit NCCL_IB_GID_INDEX against a RoCE port.
func (h *hostRun) checkGIDEnv(d RDMADevice, p RDMAPort, v string) {
	name := fmt.Sprintf("env NCCL_IB_GID_INDEX %s/%d", d.Name, p.Port)
	idx, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		h.check(name, StatusError, "env-gid-index-bad", fmt.Sprintf("NCCL_IB_GID_INDEX=%q is not a number", v), "unset it or set an index from this report")
		return
	}
	want := "unset NCCL_IB_GID_INDEX"
	if p.GIDIndex >= 0 {
		want = fmt.Sprintf("export NCCL_IB_GID_INDEX=%d", p.GIDIndex)
	}
	for _, g := range p.GIDs {
		if g.Index != idx {
			continue
		}
		if !hostIsRoCEv2(g.Type) {
			h.check(name, StatusWarn, "env-gid-index-v1", fmt.Sprintf("NCCL_IB_GID_INDEX=%d is %s (%s): RoCE v1 frames do not cross routers and need lossless L2", idx, g.GID, doctor.OrDefault(g.Type, "type unknown")), want)
		} else if p.GIDIndex >= 0 && idx != p.GIDIndex {
			h.check(name, StatusInfo, "env-gid-index-not-ipv4", fmt.Sprintf("NCCL_IB_GID_INDEX=%d is RoCE v2 %s, not the IPv4 one", idx, g.GID), want)
		} else {
			h.check(name, StatusOK, "", fmt.Sprintf("NCCL_IB_GID_INDEX=%d is RoCE v2 %s", idx, g.GID), "")
		}
		return
	}
	h.check(name, StatusError, "env-gid-index-empty", fmt.Sprintf("NCCL_IB_GID_INDEX=%d names an empty GID slot: queue pairs fail to reach RTR", idx), want)
}

// hostPathMTU is the RoCE path MTU the kernel derives from a netdev MTU.
func hostPathMTU(mtu int) int {
	m := mtu - hostRoCEHeaders
	for _, ib := range []int{4096, 2048, 1024, 512, 256} {
		if m >= ib {
			return ib
		}
	}
	return 0
}

func hostIsRoCEv2(t string) bool { return strings.EqualFold(strings.TrimSpace(t), "RoCE v2") }

// --- interfaces ----------------------------------------------------------

// checkInterfaces lists /sys/class/net as topo.Detect read it
// (Documentation/ABI/testing/sysfs-class-net): mtu in bytes, operstate
// RFC 2863's "up"/"down"/"unknown"/..., address the link-layer address, type
// the ARPHRD_* number (1 Ethernet, 32 InfiniBand, 772 loopback). An
// interface with a device link (PCI, virtio) is physical. With Root "/"
// addresses come from net.Interfaces, since sysfs does not hold them.
func (h *hostRun) checkInterfaces() {
	if len(h.sys.Interfaces) == 0 {
		h.check("interfaces", StatusSkip, "", "/sys/class/net is absent or empty", "")
		return
	}
	var parts []string
	for _, t := range h.sys.Interfaces {
		ifc := Interface{Name: t.Name, MTU: t.MTU, State: t.State, Address: t.MAC, Type: t.Type,
			Loopback: t.Kind == topo.KindLoopback, Physical: !t.Virtual, Addrs: t.Addrs}
		h.rep.Interfaces = append(h.rep.Interfaces, ifc)
		parts = append(parts, fmt.Sprintf("%s %s mtu %d", ifc.Name, doctor.OrDefault(ifc.State, "?"), ifc.MTU))
	}
	h.check("interfaces", StatusOK, "", strings.Join(parts, "; "), "")
}

func hostIfUp(ifc Interface) bool {
	return ifc.State == "up" || ifc.Loopback && ifc.State == "unknown"
}

// checkMTUs compares the MTUs of the up, physical, non-loopback interfaces.
// Different MTUs among the netdevs of RDMA ports (the data path) are a
// warning; elsewhere they are normal (a 1500-byte management interface next
// to a 9000-byte data one) and only noted.
func (h *hostRun) checkMTUs() {
	var parts, rdmaParts []string
	mtus, rdmaMTUs := map[int]bool{}, map[int]bool{}
	for _, ifc := range h.rep.Interfaces {
		if ifc.Loopback || !ifc.Physical || !hostIfUp(ifc) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%d", ifc.Name, ifc.MTU))
		mtus[ifc.MTU] = true
		if h.rdmaNetdevs[ifc.Name] {
			rdmaParts = append(rdmaParts, fmt.Sprintf("%s=%d", ifc.Name, ifc.MTU))
			rdmaMTUs[ifc.MTU] = true
		}
	}
	switch {
	case len(parts) == 0:
		h.check("mtu", StatusSkip, "", "no up physical interface", "")
	case len(rdmaMTUs) > 1:
		h.check("mtu", StatusWarn, "mtu-mismatch", "the netdevs of RDMA ports differ in MTU: "+strings.Join(rdmaParts, ", "),
			"use one MTU on every interface of the data path and on the switch ports (ip link set dev IF mtu N); a jumbo sender facing a 1500-byte path loses or fragments large frames, which looks like a hang")
	case len(mtus) > 1:
		h.check("mtu", StatusInfo, "mtu-mismatch", "up physical interfaces differ in MTU: "+strings.Join(parts, ", ")+hostMTUNote(rdmaParts),
			"if several of them carry NCCL/goccl traffic (NCCL_SOCKET_IFNAME, "+config.SocketIfname.Name+"), give those one MTU, the same on every host and switch port")
	default:
		h.check("mtu", StatusOK, "", strings.Join(parts, ", "), "")
	}
}

func hostMTUNote(rdma []string) string {
	if len(rdma) == 0 {
		return "; normal for a management interface next to a data one"
	}
	return "; the RDMA netdevs (" + strings.Join(rdma, ", ") + ") agree"
}

// --- /dev/shm, port range, NUMA --------------------------------------------

// checkShm statfs(2)s Root/dev/shm (through Options.Statfs when set).
func (h *hostRun) checkShm() {
	p := h.path("/dev/shm")
	size, free, err := h.statfs(p)
	if err != nil {
		h.check("shm", StatusWarn, "shm-missing", fmt.Sprintf("statfs %s: %v", p, err),
			"mount a tmpfs on /dev/shm (docker: --shm-size=8g or --ipc=host); without it NCCL's SHM transport and goccl's rings are unavailable and local ranks talk over TCP")
		return
	}
	h.rep.ShmBytes, h.rep.ShmFree = size, free
	name, status, code, detail, fix := hostShmCheck(h.rep.ShmBytes, h.rep.ShmFree)
	h.check(name, status, code, detail, fix)
}

// hostStatfs is statfs(2): the file system's size and the bytes available
// to an unprivileged user.
func hostStatfs(path string) (size, free uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize), nil
}

// hostShmCheck judges a /dev/shm of size and free bytes.
func hostShmCheck(size, free uint64) (name, status, code, detail, fix string) {
	detail = fmt.Sprintf("/dev/shm %s, %s free", hostBytes(size), hostBytes(free))
	fix = "give the container more: docker run --shm-size=8g (or --ipc=host); Kubernetes: mount an emptyDir with medium: Memory at /dev/shm"
	switch {
	case size < hostShmMin:
		return "shm", StatusWarn, "shm-small", detail + " (under 1 GiB; Docker's default is 64 MiB): NCCL's SHM transport fails or falls back and goccl pairs without rings use TCP", fix
	case free < hostShmMin:
		return "shm", StatusWarn, "shm-full", detail + ": under 1 GiB free; stale segments of crashed jobs may hold it (ls -la /dev/shm)", "remove stale nccl-*/goccl-* files in /dev/shm, or " + fix
	}
	return "shm", StatusOK, "", detail, ""
}

func hostBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// checkPortRange reads /proc/sys/net/ipv4/ip_local_port_range: two port
// numbers separated by white space, the first and last ephemeral port
// (Documentation/networking/ip-sysctl.rst; default "32768 60999").
func (h *hostRun) checkPortRange() {
	s, ok := h.read("/proc/sys/net/ipv4/ip_local_port_range")
	if !ok {
		h.check("port range", StatusSkip, "", "/proc/sys/net/ipv4/ip_local_port_range unreadable", "")
		return
	}
	f := strings.Fields(s)
	var lo, hi int
	var err1, err2 error
	if len(f) == 2 {
		lo, err1 = strconv.Atoi(f[0])
		hi, err2 = strconv.Atoi(f[1])
	}
	if len(f) != 2 || err1 != nil || err2 != nil || hi < lo {
		h.check("port range", StatusWarn, "port-range-unparsable", fmt.Sprintf("ip_local_port_range is %q", s), "")
		return
	}
	pr := &PortRange{Low: lo, High: hi, Width: hi - lo + 1}
	h.rep.PortRange = pr
	detail := fmt.Sprintf("%d-%d (%d ports)", lo, hi, pr.Width)
	if pr.Width < hostPortRangeMin {
		h.check("port range", StatusWarn, "port-range-narrow", detail+": large jobs open sockets to every peer and can run out (EADDRINUSE / EADDRNOTAVAIL at init)",
			"sysctl -w net.ipv4.ip_local_port_range=\"32768 60999\" (or wider)")
		return
	}
	h.check("port range", StatusOK, "", detail, "")
}

// checkNUMA lists the NUMA nodes topo.Detect read from
// /sys/devices/system/node/node<N>/cpulist: CPU ranges such as "0-15,32-47"
// (Documentation/ABI/stable/sysfs-devices-node).
func (h *hostRun) checkNUMA() {
	var nodes []NUMANode
	for _, n := range h.sys.NUMA {
		nodes = append(nodes, NUMANode{Node: n.ID, CPUList: n.CPUs, CPUs: n.NCPUs})
	}
	h.rep.NUMANodes = nodes
	var parts []string
	for _, n := range nodes {
		parts = append(parts, fmt.Sprintf("node%d cpus %s (%d)", n.Node, n.CPUList, n.CPUs))
	}
	switch len(nodes) {
	case 0:
		h.check("numa", StatusSkip, "", "no /sys/devices/system/node/node*/cpulist", "")
	case 1:
		h.check("numa", StatusOK, "", parts[0], "")
	default:
		var near []string
		for _, d := range h.rep.RDMA {
			if d.NUMANode >= 0 {
				near = append(near, fmt.Sprintf("%s on node%d", d.Name, d.NUMANode))
			}
		}
		detail := fmt.Sprintf("%d nodes: %s", len(nodes), strings.Join(parts, "; "))
		if len(near) > 0 {
			detail += "; " + strings.Join(near, ", ")
		}
		h.check("numa", StatusInfo, "numa-nodes", detail,
			"pin each rank to the node of its GPU and NIC (numactl --cpunodebind=N --membind=N, or the launcher's binding); nvidia-smi topo -m shows the affinity")
	}
}

// --- environment -------------------------------------------------------------

// checkEnv looks for NCCL_* and GOCCL_* settings that break or slow jobs.
func (h *hostRun) checkEnv() {
	n := len(h.rep.Checks)
	env := h.env
	if h.envFlag("NCCL_P2P_DISABLE") {
		h.check("env NCCL_P2P_DISABLE", StatusWarn, "env-p2p-disabled",
			"NCCL_P2P_DISABLE="+env["NCCL_P2P_DISABLE"]+": GPUs on this host exchange data through host memory instead of NVLink or PCIe peer-to-peer",
			"unset it; if P2P hangs or corrupts data, disable PCIe ACS / IOMMU translation for the GPUs instead (NCCL troubleshooting guide)")
	}
	if h.envFlag("NCCL_SHM_DISABLE") {
		h.check("env NCCL_SHM_DISABLE", StatusWarn, "env-shm-disabled",
			"NCCL_SHM_DISABLE="+env["NCCL_SHM_DISABLE"]+": where P2P is not possible, GPUs on this host talk through the network instead of shared memory",
			"unset it; if /dev/shm is too small, enlarge it (--shm-size) instead")
	}
	if h.envFlag("NCCL_IB_DISABLE") {
		v := env["NCCL_IB_DISABLE"]
		if len(h.rep.RDMA) > 0 {
			h.check("env NCCL_IB_DISABLE", StatusWarn, "env-ib-disabled",
				"NCCL_IB_DISABLE="+v+" while this host has RDMA devices: NCCL uses NET/Socket (TCP) between hosts",
				"unset it to use "+h.rdmaNames())
		} else {
			h.check("env NCCL_IB_DISABLE", StatusInfo, "env-ib-disabled",
				"NCCL_IB_DISABLE="+v+"; this host has no RDMA device, so it changes nothing here", "unset it on hosts with InfiniBand or RoCE")
		}
	}
	if spec, ok := env["NCCL_IB_HCA"]; ok && strings.TrimSpace(spec) != "" {
		h.checkIBHCA(spec)
	}
	h.checkSocketThreads()
	switch d := strings.ToUpper(strings.TrimSpace(env["NCCL_DEBUG"])); d {
	case "INFO", "TRACE":
		h.check("env NCCL_DEBUG", StatusInfo, "env-debug-on",
			"NCCL_DEBUG="+d+" is on: every rank logs its setup (and, with TRACE, every operation); noisy and, with TRACE, slow",
			"keep it for diagnosis (goccl doctor nccl-log reads the log), unset it or use WARN in production")
	}
	multi, known, why := hostMultiHost(env)
	for _, v := range []string{"NCCL_SOCKET_IFNAME", config.SocketIfname.Name} {
		if spec, ok := env[v]; ok && strings.TrimSpace(spec) != "" {
			h.checkIfname(v, spec, multi, known, why)
		}
	}
	h.checkGOCCLVars()
	if len(h.rep.Checks) == n {
		h.check("env", StatusOK, "", "no NCCL_*/"+config.Prefix+"* setting known to hurt", "")
	}
}

// envFlag reads an NCCL integer parameter as NCCL does (strtoll with base
// 0: "1", "2", "0x1" are set, "0" is not) and reports whether it is set to
// a value other than 0. A value that is not a number gets a warning: NCCL
// ignores it and keeps the default.
func (h *hostRun) envFlag(k string) bool {
	v, ok := h.env[k]
	if !ok || strings.TrimSpace(v) == "" {
		return false
	}
	n, ok := doctor.ParseNCCLInt(v)
	if !ok {
		h.check("env "+k, StatusWarn, "env-not-integer", fmt.Sprintf("%s=%q is not an integer: NCCL ignores it (INFO \"Invalid value\") and keeps its default", k, v),
			"set "+k+"=1 to disable, or unset it")
		return false
	}
	return n != 0
}

// checkIBHCA compares NCCL_IB_HCA with the devices in /sys/class/infiniband.
// NCCL's syntax (ncclParseStringList): a comma-separated list of
// NAME[:PORT]; names are prefixes unless the list starts with "="; a
// leading "^" excludes instead of selects ("^=mlx5_1" excludes exactly
// mlx5_1). A list that selects no port makes NCCL fall back to NET/Socket
// without an error.
func (h *hostRun) checkIBHCA(spec string) {
	if len(h.rep.RDMA) == 0 {
		return // the rdma check already says NCCL uses NET/Socket
	}
	s := strings.TrimSpace(spec)
	exclude := strings.HasPrefix(s, "^")
	s = strings.TrimPrefix(s, "^")
	exact := strings.HasPrefix(s, "=")
	s = strings.TrimPrefix(s, "=")
	type entry struct {
		name string
		port int // -1: any
		text string
	}
	var entries []entry
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		n, ps, hasPort := strings.Cut(e, ":")
		port := -1
		if hasPort {
			if v, err := strconv.Atoi(ps); err == nil && v >= 0 {
				port = v
			}
		}
		entries = append(entries, entry{n, port, e})
	}
	matches := func(e entry, dev string, port int) bool {
		if exact && dev != e.name || !exact && !strings.HasPrefix(dev, e.name) {
			return false
		}
		return e.port < 0 || e.port == port
	}
	var unknown, selected []string
	for _, e := range entries {
		found := false
		for _, d := range h.rep.RDMA {
			for _, p := range d.Ports {
				found = found || matches(e, d.Name, p.Port)
			}
		}
		if !found {
			unknown = append(unknown, e.text)
		}
	}
	for _, d := range h.rep.RDMA {
		for _, p := range d.Ports {
			hit := false
			for _, e := range entries {
				hit = hit || matches(e, d.Name, p.Port)
			}
			if hit != exclude {
				selected = append(selected, fmt.Sprintf("%s:%d", d.Name, p.Port))
			}
		}
	}
	name := "env NCCL_IB_HCA"
	have := "this host has " + h.rdmaPorts()
	switch {
	case len(selected) == 0:
		h.check(name, StatusError, "env-ib-hca-none", fmt.Sprintf("NCCL_IB_HCA=%s selects no RDMA port (%s): NCCL falls back to NET/Socket (TCP) without an error", spec, have),
			"name devices that exist (NCCL_IB_HCA="+h.rdmaNames()+"; prefixes match unless the list starts with =), or unset it")
	case len(unknown) > 0 && !exclude:
		h.check(name, StatusWarn, "env-ib-hca-unknown", fmt.Sprintf("NCCL_IB_HCA=%s: %s name no device or port here (%s); NCCL uses %s", spec, strings.Join(unknown, ", "), have, strings.Join(selected, ", ")),
			"a different device naming on this host (mlx5_bond_0, ibp*) makes the same setting select less: list the names of this host, or use a prefix (mlx5)")
	case len(unknown) > 0:
		h.check(name, StatusInfo, "env-ib-hca-unknown", fmt.Sprintf("NCCL_IB_HCA=%s excludes %s, which name no device or port here (%s)", spec, strings.Join(unknown, ", "), have),
			"check the spelling; NCCL uses "+strings.Join(selected, ", "))
	}
}

// rdmaPorts lists the RDMA ports as NCCL_IB_HCA names them (mlx5_0:1).
func (h *hostRun) rdmaPorts() string {
	var ns []string
	for _, d := range h.rep.RDMA {
		for _, p := range d.Ports {
			ns = append(ns, fmt.Sprintf("%s:%d", d.Name, p.Port))
		}
	}
	return doctor.OrDefault(strings.Join(ns, ", "), "no ports")
}

func (h *hostRun) rdmaNames() string {
	var ns []string
	for _, d := range h.rep.RDMA {
		ns = append(ns, d.Name)
	}
	return strings.Join(ns, ", ")
}

// hostMaxSockets and hostMaxThreads are NCCL's MAX_SOCKETS and MAX_THREADS
// (src/transport/net_socket.cc): above them NCCL clamps with a warning.
const (
	hostMaxSockets = 64
	hostMaxThreads = 16
)

func (h *hostRun) checkSocketThreads() {
	ts, tok := h.env["NCCL_SOCKET_NTHREADS"]
	ss, sok := h.env["NCCL_NSOCKS_PERTHREAD"]
	if !tok && !sok {
		return
	}
	t, s := 1, 1
	var bad []string
	if tok {
		v, err := strconv.Atoi(strings.TrimSpace(ts))
		if err != nil || v < 1 {
			bad = append(bad, fmt.Sprintf("NCCL_SOCKET_NTHREADS=%q", ts))
		} else {
			t = v
		}
	}
	if sok {
		v, err := strconv.Atoi(strings.TrimSpace(ss))
		if err != nil || v < 1 {
			bad = append(bad, fmt.Sprintf("NCCL_NSOCKS_PERTHREAD=%q", ss))
		} else {
			s = v
		}
	}
	name := "env NCCL_SOCKET_NTHREADS"
	if len(bad) > 0 {
		h.check(name, StatusWarn, "env-socket-threads-bad", strings.Join(bad, ", ")+" is not a positive number", "set positive integers, or unset for NCCL's defaults")
		return
	}
	var probs []string
	if t > hostMaxThreads {
		probs = append(probs, fmt.Sprintf("NCCL_SOCKET_NTHREADS=%d is above NCCL's maximum %d", t, hostMaxThreads))
		t = hostMaxThreads
	}
	if t*s > hostMaxSockets {
		probs = append(probs, fmt.Sprintf("NCCL_SOCKET_NTHREADS×NCCL_NSOCKS_PERTHREAD=%d×%d=%d is above NCCL's limit of %d sockets; NCCL lowers NCCL_NSOCKS_PERTHREAD to %d",
			t, s, t*s, hostMaxSockets, hostMaxSockets/t))
	}
	if len(probs) > 0 {
		h.check(name, StatusWarn, "env-socket-threads", strings.Join(probs, "; "),
			"keep the product at or below 64 (e.g. NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4); more sockets rarely help past the NIC's bandwidth")
	}
}

// hostMultiHost tells from launcher variables whether the job spans several
// hosts: world size above the local size (torchrun, OpenMPI, goccl) or
// SLURM_NNODES > 1. known is false when no launcher says.
func hostMultiHost(env map[string]string) (multi, known bool, why string) {
	num := func(k string) (int, bool) {
		v, err := strconv.Atoi(strings.TrimSpace(env[k]))
		return v, err == nil
	}
	if n, ok := num("SLURM_NNODES"); ok {
		if n > 1 {
			return true, true, fmt.Sprintf("SLURM_NNODES=%d", n)
		}
		known, why = true, fmt.Sprintf("SLURM_NNODES=%d", n)
	}
	for _, p := range [][2]string{
		{"WORLD_SIZE", "LOCAL_WORLD_SIZE"},
		{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"},
		{config.WorldSize.Name, config.LocalWorldSize.Name},
	} {
		w, ok1 := num(p[0])
		l, ok2 := num(p[1])
		if !ok1 || !ok2 {
			continue
		}
		s := fmt.Sprintf("%s=%d, %s=%d", p[0], w, p[1], l)
		if w > l {
			return true, true, s
		}
		if !known {
			known, why = true, s
		}
	}
	return false, known, why
}

// checkIfname looks at what an NCCL_SOCKET_IFNAME-syntax spec selects among
// the up interfaces: prefixes, "=" for exact names, "^" to exclude.
func (h *hostRun) checkIfname(v, spec string, multi, known bool, why string) {
	if len(h.rep.Interfaces) == 0 {
		return
	}
	s := strings.TrimSpace(spec)
	exclude := strings.HasPrefix(s, "^")
	s = strings.TrimPrefix(s, "^")
	exact := strings.HasPrefix(s, "=")
	s = strings.TrimPrefix(s, "=")
	var names []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	match := func(ifn string) bool {
		for _, n := range names {
			if exact && ifn == n || !exact && strings.HasPrefix(ifn, n) {
				return true
			}
		}
		return false
	}
	var sel []string
	allLo := true
	for _, ifc := range h.rep.Interfaces {
		if !hostIfUp(ifc) || h.root == "/" && len(ifc.Addrs) == 0 {
			continue
		}
		if match(ifc.Name) != exclude {
			sel = append(sel, ifc.Name)
			if !ifc.Loopback {
				allLo = false
			}
		}
	}
	name := "env " + v
	tool := "NCCL"
	if strings.HasPrefix(v, config.Prefix) {
		tool = "goccl"
	}
	if len(sel) == 0 {
		h.check(name, StatusError, "env-socket-ifname-none", fmt.Sprintf("%s=%s selects no up interface on this host: %s's bootstrap fails (no interface found)", v, spec, tool),
			"set it to a prefix or =name of an up interface ("+h.upNames()+")")
		return
	}
	if !allLo {
		return
	}
	detail := fmt.Sprintf("%s=%s leaves only %s (loopback)", v, spec, strings.Join(sel, ","))
	fix := fmt.Sprintf("set %s to the interface that reaches the other hosts (=%s), or unset it", v, doctor.OrDefault(h.firstUpPhysical(), "eth0"))
	switch {
	case multi:
		h.check(name, StatusError, "env-socket-ifname-lo", detail+" but the job spans several hosts ("+why+"): other hosts cannot reach 127.0.0.1 and init hangs or times out", fix)
	case known:
		h.check(name, StatusInfo, "env-socket-ifname-lo", detail+"; fine for this single-host job ("+why+")", fix+" before running across hosts")
	default:
		h.check(name, StatusWarn, "env-socket-ifname-lo", detail+": works only when every rank runs on this host (no launcher variable says how many hosts)", fix+" before running across hosts")
	}
}

func (h *hostRun) upNames() string {
	var ns []string
	for _, ifc := range h.rep.Interfaces {
		if hostIfUp(ifc) {
			ns = append(ns, ifc.Name)
		}
	}
	return doctor.OrDefault(strings.Join(ns, ", "), "none")
}

// firstUpPhysical names the interface to suggest for cross-host traffic: the
// netdev of a RoCE port if there is one, else the first up physical one.
func (h *hostRun) firstUpPhysical() string {
	for _, d := range h.rep.RDMA {
		for _, p := range d.Ports {
			if p.Netdev != "" {
				return p.Netdev
			}
		}
	}
	for _, ifc := range h.rep.Interfaces {
		if hostIfUp(ifc) && !ifc.Loopback && ifc.Physical {
			return ifc.Name
		}
	}
	return ""
}

// checkGOCCLVars flags GOCCL_* variables goccl does not read (a typo does
// nothing, silently) and values Init would reject, against internal/config's
// list (the one the library reads through).
func (h *hostRun) checkGOCCLVars() {
	known := config.Names()
	var keys []string
	for k := range h.env {
		if strings.HasPrefix(k, config.Prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := config.Find(k)
		switch {
		case strings.HasPrefix(k, config.TestPrefix):
		case v == nil:
			fix := "remove it; goccl reads: " + strings.Join(known, ", ")
			if near := hostNearest(k, known); near != "" {
				fix = "did you mean " + near + "? goccl ignores " + k
			}
			h.check("env "+k, StatusWarn, "env-goccl-unknown", k+" is not a variable goccl reads", fix)
		default:
			if err := v.Check(h.env[k]); err != nil {
				h.check("env "+k, StatusError, "env-goccl-invalid", err.Error()+": Init fails",
					"set a valid value or unset it ("+v.Doc+"); goccl env lists every variable")
			}
		}
	}
}

// hostNearest returns the candidate within edit distance 3 of s, if any.
func hostNearest(s string, cands []string) string {
	best, bestD := "", 4
	for _, c := range cands {
		if d := textdist.Distance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// --- external tools ----------------------------------------------------------

// runTools runs nvidia-smi topo -m and ibv_devinfo, keeps their raw
// output in Tools and feeds it to topo.Parse and ibv.Parse, whose findings
// join the host's.
func (h *hostRun) runTools(ctx context.Context, run func(context.Context, string, ...string) ([]byte, error)) error {
	for _, t := range hostTools {
		cmdline := strings.TrimSpace(t.name + " " + strings.Join(t.args, " "))
		if run == nil && h.root != "/" {
			h.check(cmdline, StatusSkip, "", "Root is not /: the tool would describe this machine, not the tree", "")
			continue
		}
		r := run
		if r == nil {
			r = hostExec
		}
		out, err := r(ctx, t.name, t.args...)
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		switch {
		case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
			h.check(cmdline, StatusSkip, "", "not installed", "")
		case err != nil:
			msg := err.Error()
			if o := strings.TrimSpace(string(out)); o != "" {
				msg += ": " + hostFirstLine(o)
			}
			h.check(cmdline, StatusWarn, "tool-failed", msg, "run "+cmdline+" by hand; for nvidia-smi check the driver (dmesg | grep -i nvrm), for ibv_devinfo the rdma-core packages and /dev/infiniband")
			if len(out) > 0 {
				h.setTool(cmdline, out)
			}
		default:
			h.setTool(cmdline, out)
			h.check(cmdline, StatusOK, "", fmt.Sprintf("%d lines kept in the report (tools), %s", strings.Count(string(out), "\n"), h.parseTool(t.name, out)), "")
		}
	}
	return nil
}

// parseTool reads a tool's output with this package's reader for it and
// says what it found.
func (h *hostRun) parseTool(name string, out []byte) string {
	var fs []doctor.Finding
	var summary string
	switch name {
	case "nvidia-smi":
		rep, err := topodoc.Parse(bytes.NewReader(out))
		if err != nil {
			return "not read: " + err.Error()
		}
		h.rep.Topo, fs = rep, rep.Findings
		summary = fmt.Sprintf("%d GPUs, %d NICs", len(rep.GPUs), len(rep.NICs))
	case "ibv_devinfo":
		rep, err := ibv.Parse(bytes.NewReader(out))
		if err != nil {
			return "not read: " + err.Error()
		}
		h.rep.IBV, fs = rep, rep.Findings
		summary = fmt.Sprintf("%d devices", len(rep.Devices))
	default:
		return "no reader"
	}
	// ibv_devinfo describes the ports the sysfs checks already judged:
	// keep one finding per code and port (or per code and message).
	seen := map[string]bool{}
	for _, f := range h.rep.Findings {
		seen[hostFindingKey(f)] = true
	}
	for _, f := range fs {
		if k := hostFindingKey(f); !seen[k] {
			seen[k] = true
			h.rep.Findings = append(h.rep.Findings, f)
		}
	}
	return fmt.Sprintf("read: %s, %d findings", summary, len(fs))
}

// hostPortRe matches the port a finding of ibv.PortFindings is about.
var hostPortRe = regexp.MustCompile(`^\S+ port \d+\b`)

// hostFindingKey identifies a finding's condition: its code and port, or
// its code and message when it is about no single port.
func hostFindingKey(f doctor.Finding) string {
	if m := hostPortRe.FindString(f.Message); m != "" {
		return f.Code + "|" + m
	}
	return f.Code + "|" + f.Message
}

func (h *hostRun) setTool(k string, out []byte) {
	if h.rep.Tools == nil {
		h.rep.Tools = map[string]string{}
	}
	h.rep.Tools[k] = string(out)
}

func hostFirstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(l)
}

// hostExec runs a program with a 15 s limit (or ctx's earlier deadline) and
// returns its standard output; stderr's first line joins the error.
func hostExec(ctx context.Context, name string, args ...string) ([]byte, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return nil, err // wraps exec.ErrNotFound
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, p, args...)
	cmd.WaitDelay = time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if e := hostFirstLine(stderr.String()); e != "" {
			err = fmt.Errorf("%w (%s)", err, e)
		}
		return out, err
	}
	return out, nil
}

// --- output ----------------------------------------------------------------

// WriteText prints the report for a person: one line per check with its fix
// indented below, then the findings count. Tool outputs are left to --json.
func (rep *Report) WriteText(w io.Writer) error {
	ew := &hostErrWriter{w: w}
	tw := tabwriter.NewWriter(ew, 0, 8, 2, ' ', 0)
	for _, c := range rep.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(c.Status), c.Name, c.Detail)
		if c.Fix != "" && c.Status != StatusOK {
			fmt.Fprintf(tw, "\t\t  fix: %s\n", c.Fix)
		}
	}
	tw.Flush()
	var ne, nw, ni int
	for _, f := range rep.Findings {
		switch f.Severity {
		case doctor.SevError:
			ne++
		case doctor.SevWarn:
			nw++
		default:
			ni++
		}
	}
	fmt.Fprintf(ew, "\n%d errors, %d warnings, %d notes\n", ne, nw, ni)
	return ew.err
}

// WriteJSON prints the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

type hostErrWriter struct {
	w   io.Writer
	err error
}

func (e *hostErrWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
