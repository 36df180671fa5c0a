// Package topo detects the topology of the host a rank runs on and of a
// whole job: the host and its identity, the CPUs and NUMA nodes (with their
// memory), the CPU set of this process and the NUMA nodes it maps to, the
// network interfaces (state, speed, MTU, addresses, PCI device and its NUMA
// node, virtual or not, RDMA-capable or not), the RDMA devices of
// /sys/class/infiniband, and the GPUs nvidia-smi lists.
//
// Detect reads sysfs and procfs under a root ("/" by default; tests point
// it at fake trees). Everything it reads is documented in the kernel's
// Documentation/ABI (sysfs-class-net, sysfs-class-infiniband,
// sysfs-bus-pci, sysfs-devices-node):
//
//	/proc/sys/kernel/{hostname,arch,random/boot_id}, /proc/cpuinfo
//	/sys/devices/system/cpu/online
//	/sys/devices/system/node/node<N>/{cpulist,cpumap,meminfo}
//	/sys/class/net/<if>/{operstate,speed,mtu,address,type,device,master,bonding/slaves,bridge}
//	/sys/class/infiniband/<dev>/{node_type,fw_ver,node_guid,sys_image_guid,device,device/net/*}
//	/sys/class/infiniband/<dev>/{device/numa_node (a device that is not PCI)}
//	/sys/class/infiniband/<dev>/ports/<n>/{state,phys_state,link_layer,rate,gids/*,gid_attrs/{types,ndevs}/*}
//	/sys/bus/pci/devices/<busid> and, up its path, every PCI function's
//	{class,vendor,device,subsystem_vendor,subsystem_device,current_link_speed,current_link_width,numa_node,driver}
//
// and runs `nvidia-smi --query-gpu=index,pci.bus_id,name,memory.total
// --format=csv,noheader` when it is installed (silently nothing when it is
// not). goccl's own soft RoCE devices (package rdma) live in user space and
// have no sysfs entry, so they are not listed.
//
// A Host describes one machine as one rank sees it (Process is that rank's
// process). Ranks on one host share its ID (HostID: boot id, host name and
// the device of /dev/shm, the rule internal/bootstrap uses to decide that two
// ranks can share memory). A Job is the ranks' Hosts grouped by ID: Gather
// (or Publish, then Collect on one rank) exchanges one JSON blob per rank
// through the rendezvous store.
//
// Output: WriteText (a table), JSON (the structs' json tags), and XML in the
// shape of NCCL's topology dump (NCCL_TOPO_DUMP_FILE), see xml.go.
package topo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Options say where and how Detect looks.
type Options struct {
	// Root is the file system root under which /sys and /proc are read;
	// "" means "/". With another root, interface addresses are not listed
	// (they live in the kernel, not in sysfs) and nvidia-smi runs only when
	// NvidiaSMI names it.
	Root string
	// Affinity returns the CPUs this process may run on; nil means
	// sched_getaffinity(2) of this process.
	Affinity func() ([]int, error)
	// NvidiaSMI is the nvidia-smi program to run for the GPUs: "" means
	// "nvidia-smi" from PATH when Root is "/" (and none otherwise), "-"
	// means none.
	NvidiaSMI string
	// Timeout bounds the nvidia-smi run (0: 20 s).
	Timeout time.Duration
}

// Host is one machine as one rank sees it.
type Host struct {
	// ID is equal for two ranks exactly when they run on the same host and
	// can share memory through /dev/shm (HostID).
	ID       string `json:"id"`
	Hostname string `json:"hostname"`
	// Arch is the CPU architecture in NCCL's words: x86_64, arm64, ppc64.
	Arch string  `json:"arch"`
	CPU  CPUInfo `json:"cpu"`
	// NUMA lists the NUMA nodes; empty on kernels without NUMA support.
	NUMA []NUMANode `json:"numa_nodes"`
	// Process is the rank's process: its CPU set and NUMA nodes. Job moves
	// it to Job.Ranks.
	Process    *Process    `json:"process,omitempty"`
	Interfaces []Interface `json:"interfaces"`
	// Rails are the interfaces on IPv4 subnets of their own (rails).
	Rails []Rail         `json:"rails,omitempty"`
	RDMA  []RDMADevice   `json:"rdma_devices"`
	GPUs  []GPU          `json:"gpus"`
	PCI   map[string]PCI `json:"pci,omitempty"` // by bus id: every function on the path of a NIC, RDMA device or GPU
	// GPUQuery is the nvidia-smi command that listed GPUs ("": none ran).
	GPUQuery string `json:"gpu_query,omitempty"`
	// Notes say what could not be read (a failed nvidia-smi, say).
	Notes []string `json:"notes,omitempty"`
}

// CPUInfo is the processor model, from /proc/cpuinfo, and the online CPUs.
type CPUInfo struct {
	Vendor    string `json:"vendor,omitempty"` // vendor_id: GenuineIntel, AuthenticAMD (x86 only)
	ModelName string `json:"model_name,omitempty"`
	// FamilyID and ModelID are NCCL's numbers (familyid, modelid): the
	// CPUID base family plus the extended family shifted left by 4 (see
	// FamilyID; /proc/cpuinfo adds the extended family unshifted), and
	// the model as /proc/cpuinfo gives it (base + extended << 4 already).
	// -1: unknown.
	FamilyID int    `json:"family_id"`
	ModelID  int    `json:"model_id"`
	Online   string `json:"online,omitempty"` // cpulist, "0-63"
	Count    int    `json:"count"`
}

// NUMANode is one NUMA node.
type NUMANode struct {
	ID       int    `json:"id"`
	CPUs     string `json:"cpus"`      // cpulist, "0-15,32-47"
	NCPUs    int    `json:"ncpus"`     // how many
	Affinity string `json:"affinity"`  // cpumap: 32-bit hex words, most significant first, as NCCL's affinity attribute
	MemBytes uint64 `json:"mem_bytes"` // MemTotal; 0 when unknown
}

// Process is one rank's process.
type Process struct {
	Pid   int    `json:"pid"`
	CPUs  string `json:"cpus"` // cpulist of its CPU set (sched_getaffinity)
	NCPUs int    `json:"ncpus"`
	// NUMA are the nodes whose CPUs its CPU set includes.
	NUMA []int `json:"numa"`
}

// Interface kinds.
const (
	KindLoopback = "loopback"
	KindDevice   = "device" // has a device behind it (PCI, virtio, ...)
	KindBond     = "bond"
	KindBridge   = "bridge"
	KindVirtual  = "virtual" // veth, tun, dummy, vlan, ... (no device link)
)

// Interface is one entry of /sys/class/net.
type Interface struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	State string `json:"state"` // operstate: up, down, unknown, dormant, ...
	// SpeedMbps is the link speed in Mb/s; -1 when unknown (virtual
	// devices refuse to tell, a link that is down says -1).
	SpeedMbps int    `json:"speed_mbps"`
	MTU       int    `json:"mtu"`
	MAC       string `json:"mac,omitempty"`
	// Type is the ARPHRD_* number of sysfs's type: 1 Ethernet, 32
	// InfiniBand (IPoIB), 772 loopback; 0 when unreadable.
	Type  int      `json:"type,omitempty"`
	Addrs []string `json:"addrs,omitempty"` // CIDR; only with Root "/"
	// Virtual: no device link (veth, bond, bridge, loopback, tun, ...).
	Virtual bool `json:"virtual"`
	// BusID is the PCI function behind the interface (the nearest one up
	// the device's path, for virtio-net); PCIPath the functions from the
	// root port down to it.
	BusID    string   `json:"bus_id,omitempty"`
	PCIPath  []string `json:"pci_path,omitempty"`
	NUMANode int      `json:"numa_node"` // -1 when unknown
	Driver   string   `json:"driver,omitempty"`
	Master   string   `json:"master,omitempty"` // the bond or bridge it belongs to
	Slaves   []string `json:"slaves,omitempty"` // a bond's members
	// RDMA: an RDMA device drives this interface (its device/net entry, or
	// a GID of one of its ports names it: RoCE on a bond or VLAN).
	RDMA       bool   `json:"rdma"`
	RDMADevice string `json:"rdma_device,omitempty"`
	RDMAPort   int    `json:"rdma_port,omitempty"`
}

// RDMADevice is one entry of /sys/class/infiniband.
type RDMADevice struct {
	Name         string     `json:"name"`
	NodeType     string     `json:"node_type,omitempty"` // "1: CA"
	FWVer        string     `json:"fw_ver,omitempty"`
	NodeGUID     string     `json:"node_guid,omitempty"`      // 0x946dae0300907832, as ibstat prints it
	SysImageGUID string     `json:"sys_image_guid,omitempty"` // likewise
	BusID        string     `json:"bus_id,omitempty"`
	PCIPath      []string   `json:"pci_path,omitempty"`
	NUMANode     int        `json:"numa_node"`         // the PCI function's, else device/numa_node's; -1 when unknown
	Netdevs      []string   `json:"netdevs,omitempty"` // device/net: the interfaces of the same PCI function
	Ports        []RDMAPort `json:"ports"`
}

// RDMAPort is one port of an RDMA device.
type RDMAPort struct {
	Port      int    `json:"port"`
	State     string `json:"state"`      // ACTIVE, DOWN, INIT, ARMED
	PhysState string `json:"phys_state"` // LinkUp, Disabled, Polling, ...
	LinkLayer string `json:"link_layer"` // InfiniBand or Ethernet (RoCE)
	Rate      string `json:"rate,omitempty"`
	RateMbps  int    `json:"rate_mbps"` // from Rate; 0 when unknown
	// Netdev is the interface of the port's first GID that names one (RoCE).
	Netdev string `json:"netdev,omitempty"`
	// GIDs are the port's non-empty GID slots, by index.
	GIDs []GID `json:"gids,omitempty"`
}

// GID is one non-empty slot of an RDMA port's GID table.
type GID struct {
	Index int    `json:"index"`
	GID   string `json:"gid"`            // canonical text: "fe80::1", "::ffff:10.0.0.1"
	Type  string `json:"type,omitempty"` // gid_attrs/types: "IB/RoCE v1" or "RoCE v2"
	// Netdev is gid_attrs/ndevs: the interface the GID belongs to (RoCE).
	Netdev string `json:"netdev,omitempty"`
}

// GPU is one GPU nvidia-smi lists.
type GPU struct {
	Index     int      `json:"index"`
	BusID     string   `json:"bus_id"` // 0000:18:00.0 (nvidia-smi's 00000000:18:00.0 in sysfs form)
	Name      string   `json:"name"`
	MemoryMiB int      `json:"memory_mib"`
	PCIPath   []string `json:"pci_path,omitempty"`
	NUMANode  int      `json:"numa_node"`
}

// PCI is one PCI function's sysfs attributes, as NCCL's <pci> element
// carries them.
type PCI struct {
	BusID           string `json:"bus_id"`
	Class           string `json:"class,omitempty"` // 0x020000
	Vendor          string `json:"vendor,omitempty"`
	Device          string `json:"device,omitempty"`
	SubsystemVendor string `json:"subsystem_vendor,omitempty"`
	SubsystemDevice string `json:"subsystem_device,omitempty"`
	LinkSpeed       string `json:"link_speed,omitempty"` // current_link_speed: "16.0 GT/s PCIe"
	LinkWidth       string `json:"link_width,omitempty"` // current_link_width: "16"
	NUMANode        int    `json:"numa_node"`
	Driver          string `json:"driver,omitempty"`
}

// detector is one Detect call's state.
type detector struct {
	root string
	h    *Host
}

// Detect describes the host under opts.Root as this process sees it. It
// fails only when Root is not a directory; what cannot be read is left
// out (or -1), and a failed nvidia-smi run is a note.
func Detect(opts Options) (*Host, error) {
	root := opts.Root
	if root == "" {
		root = "/"
	}
	root = filepath.Clean(root)
	if st, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("topo: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("topo: root %s is not a directory", root)
	}
	d := &detector{root: root, h: &Host{PCI: map[string]PCI{}}}
	h := d.h
	h.Hostname = hostname(root)
	h.ID = HostID(root)
	h.Arch = d.arch()
	h.CPU = d.cpuInfo()
	h.NUMA = d.numa()
	d.process(opts.Affinity)
	netRDMA := d.rdma()
	d.interfaces(netRDMA)
	h.Rails = rails(h.Interfaces)
	d.gpus(opts)
	if len(h.PCI) == 0 {
		h.PCI = nil
	}
	return h, nil
}

// path maps an absolute path of the live system to the same path under root.
func (d *detector) path(p string) string {
	if d.root == "/" {
		return p
	}
	return filepath.Join(d.root, p)
}

// read returns the trimmed content of a file under root.
func (d *detector) read(p string) (string, bool) {
	b, err := os.ReadFile(d.path(p))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// readInt returns a file's integer content, or def.
func (d *detector) readInt(p string, def int) int {
	s, ok := d.read(p)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}

// dir lists a directory under root, sorted; nil when absent.
func (d *detector) dir(p string) []string {
	es, err := os.ReadDir(d.path(p))
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(es))
	for _, e := range es {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

func (d *detector) exists(p string) bool {
	_, err := os.Lstat(d.path(p))
	return err == nil
}

// linkName is the last element of the symbolic link p's target ("" if p is
// not a link): the driver of a device, the master of an interface.
func (d *detector) linkName(p string) string {
	t, err := os.Readlink(d.path(p))
	if err != nil {
		return ""
	}
	return filepath.Base(t)
}

// hostname is the kernel's host name: os.Hostname for the live root, else
// the tree's /proc/sys/kernel/hostname.
func hostname(root string) string {
	if root == "/" || root == "" {
		h, _ := os.Hostname()
		return h
	}
	b, _ := os.ReadFile(filepath.Join(root, "proc/sys/kernel/hostname"))
	return strings.TrimSpace(string(b))
}

// arch is the tree's /proc/sys/kernel/arch (recent kernels) or this program's
// architecture, in NCCL's words.
func (d *detector) arch() string {
	a, ok := d.read("/proc/sys/kernel/arch")
	if !ok || a == "" {
		a = runtime.GOARCH
	}
	switch a {
	case "amd64", "x86_64":
		return "x86_64"
	case "arm64", "aarch64":
		return "arm64"
	case "ppc64", "ppc64le":
		return "ppc64"
	}
	return a
}

// cpuInfo reads the first processor of /proc/cpuinfo and the online CPUs.
func (d *detector) cpuInfo() CPUInfo {
	c := CPUInfo{FamilyID: -1, ModelID: -1}
	if s, ok := d.read("/proc/cpuinfo"); ok {
		block, _, _ := strings.Cut(s, "\n\n")
		for _, line := range strings.Split(block, "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			switch k {
			case "vendor_id":
				c.Vendor = v
			case "model name":
				c.ModelName = v
			case "cpu family":
				if n, err := strconv.Atoi(v); err == nil {
					c.FamilyID = FamilyID(n)
				}
			case "model":
				if n, err := strconv.Atoi(v); err == nil {
					c.ModelID = n
				}
			}
		}
	}
	if s, ok := d.read("/sys/devices/system/cpu/online"); ok {
		cpus := ParseCPUList(s)
		c.Online, c.Count = FormatCPUList(cpus), len(cpus)
	}
	if c.Count == 0 {
		c.Count = runtime.NumCPU()
	}
	return c
}

// FamilyID turns /proc/cpuinfo's "cpu family" (the CPUID base family,
// plus the extended family when the base is 0xf) into NCCL's familyid
// (xml.cc: base family + extended family << 4): Intel's 6 stays 6, AMD Zen
// 4's 25 (0xf + 0xa) is 0xf + 0xa<<4 = 175, Zen 5's 26 is 191.
func FamilyID(cpuinfoFamily int) int {
	if cpuinfoFamily < 0xf {
		return cpuinfoFamily
	}
	return 0xf + (cpuinfoFamily-0xf)<<4
}

// numa reads /sys/devices/system/node/node<N>.
func (d *detector) numa() []NUMANode {
	var nodes []NUMANode
	for _, n := range d.dir("/sys/devices/system/node") {
		id, err := strconv.Atoi(strings.TrimPrefix(n, "node"))
		if !strings.HasPrefix(n, "node") || err != nil {
			continue
		}
		base := "/sys/devices/system/node/" + n
		cl, ok := d.read(base + "/cpulist")
		if !ok {
			continue
		}
		cpus := ParseCPUList(cl)
		node := NUMANode{ID: id, CPUs: FormatCPUList(cpus), NCPUs: len(cpus)}
		if m, ok := d.read(base + "/cpumap"); ok {
			node.Affinity = m
		} else {
			node.Affinity = FormatCPUMap(cpus)
		}
		if mi, ok := d.read(base + "/meminfo"); ok {
			node.MemBytes = memTotal(mi)
		}
		nodes = append(nodes, node)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	return nodes
}

// memTotal reads "Node 0 MemTotal:  263842192 kB" from a node's meminfo.
func memTotal(meminfo string) uint64 {
	for _, line := range strings.Split(meminfo, "\n") {
		_, rest, ok := strings.Cut(line, "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0
		}
		if len(f) > 1 && strings.EqualFold(f[1], "kB") {
			n *= 1024
		}
		return n
	}
	return 0
}

// process sets Host.Process from the CPU set.
func (d *detector) process(affinity func() ([]int, error)) {
	if affinity == nil {
		affinity = schedAffinity
	}
	p := &Process{Pid: os.Getpid(), NUMA: []int{}}
	cpus, err := affinity()
	if err != nil {
		d.h.Notes = append(d.h.Notes, "CPU set: "+err.Error())
	}
	sort.Ints(cpus)
	p.CPUs, p.NCPUs = FormatCPUList(cpus), len(cpus)
	mine := map[int]bool{}
	for _, c := range cpus {
		mine[c] = true
	}
	for _, n := range d.h.NUMA {
		for _, c := range ParseCPUList(n.CPUs) {
			if mine[c] {
				p.NUMA = append(p.NUMA, n.ID)
				break
			}
		}
	}
	d.h.Process = p
}

// pciPath resolves the device link p (a path under root, such as
// /sys/class/net/eth0/device) and returns the PCI functions on its path
// from the root port down, recording each in Host.PCI; nil when p is not
// a link to a PCI device (or a device below one, as virtio).
func (d *detector) pciPath(p string) []string {
	resolved, err := filepath.EvalSymlinks(d.path(p))
	if err != nil {
		return nil
	}
	rel := resolved
	if d.root != "/" {
		if rel, err = filepath.Rel(d.root, resolved); err != nil || strings.HasPrefix(rel, "..") {
			return nil
		}
		rel = "/" + rel
	}
	parts := strings.Split(rel, "/")
	var path []string
	dir := ""
	for _, part := range parts {
		if part == "" {
			continue
		}
		dir += "/" + part
		if !isBusID(part) {
			continue
		}
		path = append(path, part)
		if _, ok := d.h.PCI[part]; !ok {
			d.h.PCI[part] = d.readPCI(dir, part)
		}
	}
	return path
}

// readPCI reads a PCI function's attributes in its sysfs directory dir.
func (d *detector) readPCI(dir, busID string) PCI {
	p := PCI{BusID: busID, NUMANode: d.readInt(dir+"/numa_node", -1)}
	p.Class, _ = d.read(dir + "/class")
	p.Vendor, _ = d.read(dir + "/vendor")
	p.Device, _ = d.read(dir + "/device")
	p.SubsystemVendor, _ = d.read(dir + "/subsystem_vendor")
	p.SubsystemDevice, _ = d.read(dir + "/subsystem_device")
	p.LinkSpeed, _ = d.read(dir + "/current_link_speed")
	p.LinkWidth, _ = d.read(dir + "/current_link_width")
	p.Driver = d.linkName(dir + "/driver")
	if strings.HasPrefix(p.LinkSpeed, "Unknown") {
		p.LinkSpeed = ""
	}
	return p
}

// numaOf is the NUMA node of the last function of a PCI path, -1 if unknown.
func (d *detector) numaOf(path []string) int {
	if len(path) == 0 {
		return -1
	}
	return d.h.PCI[path[len(path)-1]].NUMANode
}

// isBusID reports whether s is a PCI address: 0000:3b:00.0.
func isBusID(s string) bool {
	if len(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return false
	}
	for i, c := range s {
		if i == 4 || i == 7 || i == 10 {
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// rdmaPort is where an interface's RDMA comes from.
type rdmaPort struct {
	dev  string
	port int
}

// rdma reads /sys/class/infiniband and returns, by interface name, the
// device and port that drive it.
func (d *detector) rdma() map[string]rdmaPort {
	byNet := map[string]rdmaPort{}
	for _, name := range d.dir("/sys/class/infiniband") {
		base := "/sys/class/infiniband/" + name
		dev := RDMADevice{Name: name, NUMANode: -1}
		dev.NodeType, _ = d.read(base + "/node_type")
		dev.FWVer, _ = d.read(base + "/fw_ver")
		if g, ok := d.read(base + "/node_guid"); ok {
			dev.NodeGUID = guidHex(g)
		}
		if g, ok := d.read(base + "/sys_image_guid"); ok {
			dev.SysImageGUID = guidHex(g)
		}
		dev.PCIPath = d.pciPath(base + "/device")
		if len(dev.PCIPath) > 0 {
			dev.BusID = dev.PCIPath[len(dev.PCIPath)-1]
			dev.NUMANode = d.numaOf(dev.PCIPath)
		} else {
			dev.NUMANode = d.readInt(base+"/device/numa_node", -1)
		}
		dev.Netdevs = d.dir(base + "/device/net")
		for _, pn := range sortedNumeric(d.dir(base + "/ports")) {
			n, err := strconv.Atoi(pn)
			if err != nil {
				continue
			}
			p, netdevs := d.rdmaPort(base+"/ports/"+pn, n)
			for _, nd := range netdevs {
				if _, seen := byNet[nd]; !seen {
					byNet[nd] = rdmaPort{name, n}
				}
			}
			dev.Ports = append(dev.Ports, p)
		}
		for _, nd := range dev.Netdevs {
			if _, seen := byNet[nd]; !seen {
				port := 1
				if len(dev.Ports) > 0 {
					port = dev.Ports[0].Port
				}
				byNet[nd] = rdmaPort{name, port}
			}
		}
		if dev.Ports == nil {
			dev.Ports = []RDMAPort{}
		}
		for i := range dev.Ports {
			if dev.Ports[i].Netdev == "" && len(dev.Netdevs) == 1 && dev.Ports[i].LinkLayer == "Ethernet" {
				dev.Ports[i].Netdev = dev.Netdevs[0]
			}
		}
		d.h.RDMA = append(d.h.RDMA, dev)
	}
	if d.h.RDMA == nil {
		d.h.RDMA = []RDMADevice{}
	}
	return byNet
}

// rdmaPort reads port n of an RDMA device in directory pb:
//
//	state, phys_state        "4: ACTIVE", "5: LinkUp"
//	link_layer, rate         "Ethernet", "100 Gb/sec (4X EDR)"
//	gids/<i>                 8 groups of 4 hex digits; all zero: an empty slot
//	gid_attrs/types/<i>      "IB/RoCE v1" or "RoCE v2" (EINVAL on empty slots)
//	gid_attrs/ndevs/<i>      a RoCE GID's interface (EINVAL on empty slots)
//
// It also returns every interface gid_attrs/ndevs names, in index order.
func (d *detector) rdmaPort(pb string, n int) (RDMAPort, []string) {
	p := RDMAPort{Port: n}
	st, _ := d.read(pb + "/state")
	p.State = enumName(st)
	ps, _ := d.read(pb + "/phys_state")
	p.PhysState = enumName(ps)
	p.LinkLayer, _ = d.read(pb + "/link_layer")
	p.Rate, _ = d.read(pb + "/rate")
	p.RateMbps = rateMbps(p.Rate)
	for _, gn := range sortedNumeric(d.dir(pb + "/gids")) {
		i, err := strconv.Atoi(gn)
		if err != nil {
			continue
		}
		raw, ok := d.read(pb + "/gids/" + gn)
		if !ok {
			continue
		}
		a, err := netip.ParseAddr(raw)
		if err != nil || a.IsUnspecified() {
			continue // empty slot
		}
		g := GID{Index: i, GID: a.String()}
		g.Type, _ = d.read(pb + "/gid_attrs/types/" + gn)
		g.Netdev, _ = d.read(pb + "/gid_attrs/ndevs/" + gn)
		p.GIDs = append(p.GIDs, g)
	}
	var netdevs []string
	for _, g := range sortedNumeric(d.dir(pb + "/gid_attrs/ndevs")) {
		if nd, ok := d.read(pb + "/gid_attrs/ndevs/" + g); ok && nd != "" {
			netdevs = append(netdevs, nd)
		}
	}
	if len(netdevs) > 0 {
		p.Netdev = netdevs[0]
	}
	return p, netdevs
}

// sortedNumeric sorts names that are numbers by value (ports, GID
// indexes: "2" before "10"), the others after them.
func sortedNumeric(names []string) []string {
	key := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil {
			return 1 << 30
		}
		return n
	}
	sort.SliceStable(names, func(i, j int) bool { return key(names[i]) < key(names[j]) })
	return names
}

// guidHex writes sysfs's "946d:ae03:0090:7832" as ibstat does:
// 0x946dae0300907832.
func guidHex(s string) string {
	h := strings.ReplaceAll(s, ":", "")
	if len(h) != 16 {
		return s
	}
	if _, err := strconv.ParseUint(h, 16, 64); err != nil {
		return s
	}
	return "0x" + strings.ToLower(h)
}

// enumName strips sysfs's number from "4: ACTIVE".
func enumName(s string) string {
	if _, after, ok := strings.Cut(s, ":"); ok {
		return strings.TrimSpace(after)
	}
	return strings.TrimSpace(s)
}

// rateMbps reads "100 Gb/sec (4X EDR)" as 100000.
func rateMbps(rate string) int {
	f := strings.Fields(rate)
	if len(f) < 2 || !strings.HasPrefix(f[1], "Gb/s") {
		return 0
	}
	g, err := strconv.ParseFloat(f[0], 64)
	if err != nil || g < 0 {
		return 0
	}
	return int(g*1000 + 0.5)
}

// interfaces reads /sys/class/net.
func (d *detector) interfaces(byNet map[string]rdmaPort) {
	var addrs map[string][]string
	if d.root == "/" {
		addrs = map[string][]string{}
		if ifs, err := net.Interfaces(); err == nil {
			for _, ifc := range ifs {
				as, _ := ifc.Addrs()
				for _, a := range as {
					addrs[ifc.Name] = append(addrs[ifc.Name], a.String())
				}
			}
		}
	}
	d.h.Interfaces = []Interface{}
	for _, n := range d.dir("/sys/class/net") {
		base := "/sys/class/net/" + n
		if !d.exists(base+"/operstate") && !d.exists(base+"/type") {
			continue // bonding_masters and other plain files
		}
		ifc := Interface{Name: n, NUMANode: -1, SpeedMbps: -1}
		ifc.State, _ = d.read(base + "/operstate")
		ifc.MTU = d.readInt(base+"/mtu", 0)
		ifc.MAC, _ = d.read(base + "/address")
		ifc.Type = d.readInt(base+"/type", 0)
		if s := d.readInt(base+"/speed", -1); s > 0 {
			ifc.SpeedMbps = s
		}
		ifc.Virtual = !d.exists(base + "/device")
		ifc.Master = d.linkName(base + "/master")
		switch {
		case ifc.Type == 772 || n == "lo":
			ifc.Kind = KindLoopback
		case d.exists(base + "/bonding"):
			ifc.Kind = KindBond
			if s, ok := d.read(base + "/bonding/slaves"); ok {
				ifc.Slaves = strings.Fields(s)
			}
		case d.exists(base + "/bridge"):
			ifc.Kind = KindBridge
		case !ifc.Virtual:
			ifc.Kind = KindDevice
		default:
			ifc.Kind = KindVirtual
		}
		if !ifc.Virtual {
			ifc.PCIPath = d.pciPath(base + "/device")
			if len(ifc.PCIPath) > 0 {
				ifc.BusID = ifc.PCIPath[len(ifc.PCIPath)-1]
				ifc.NUMANode = d.numaOf(ifc.PCIPath)
			}
			ifc.Driver = d.linkName(base + "/device/driver")
		}
		if r, ok := byNet[n]; ok {
			ifc.RDMA, ifc.RDMADevice, ifc.RDMAPort = true, r.dev, r.port
		}
		ifc.Addrs = addrs[n]
		d.h.Interfaces = append(d.h.Interfaces, ifc)
	}
}

// gpus runs nvidia-smi when there is one.
func (d *detector) gpus(opts Options) {
	d.h.GPUs = []GPU{}
	prog := opts.NvidiaSMI
	switch {
	case prog == "-":
		return
	case prog == "" && d.root != "/":
		return
	case prog == "":
		p, err := exec.LookPath("nvidia-smi")
		if err != nil {
			return // no NVIDIA driver tools: no GPUs, silently
		}
		prog = p
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 20 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := []string{"--query-gpu=index,pci.bus_id,name,memory.total", "--format=csv,noheader"}
	cmd := exec.CommandContext(ctx, prog, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return
		}
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(string(out))
		}
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		d.h.Notes = append(d.h.Notes, fmt.Sprintf("nvidia-smi: %v %s", err, msg))
		return
	}
	d.h.GPUQuery = filepath.Base(prog) + " " + strings.Join(args, " ")
	gpus, bad := ParseNvidiaSMI(string(out))
	for _, l := range bad {
		d.h.Notes = append(d.h.Notes, "nvidia-smi: unreadable line "+strconv.Quote(l))
	}
	for _, g := range gpus {
		g.NUMANode = -1
		if g.PCIPath = d.pciPath("/sys/bus/pci/devices/" + g.BusID); len(g.PCIPath) > 0 {
			g.NUMANode = d.numaOf(g.PCIPath)
		}
		d.h.GPUs = append(d.h.GPUs, g)
	}
}

// ParseNvidiaSMI reads the output of `nvidia-smi
// --query-gpu=index,pci.bus_id,name,memory.total --format=csv,noheader`:
// one line per GPU, "0, 00000000:18:00.0, NVIDIA H100 80GB HBM3, 81559
// MiB". Lines it cannot read are returned in bad.
func ParseNvidiaSMI(out string) (gpus []GPU, bad []string) {
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) < 4 {
			bad = append(bad, line)
			continue
		}
		idx, err := strconv.Atoi(strings.TrimSpace(f[0]))
		busID, ok := NormalizeBusID(strings.TrimSpace(f[1]))
		if err != nil || !ok {
			bad = append(bad, line)
			continue
		}
		g := GPU{Index: idx, BusID: busID, NUMANode: -1}
		g.Name = strings.TrimSpace(strings.Join(f[2:len(f)-1], ","))
		mem := strings.Fields(f[len(f)-1])
		if len(mem) > 0 {
			g.MemoryMiB, _ = strconv.Atoi(mem[0])
		}
		gpus = append(gpus, g)
	}
	return gpus, bad
}

// NormalizeBusID turns a PCI address as nvidia-smi prints it
// (00000000:18:00.0, upper or lower case) into sysfs's form (0000:18:00.0).
func NormalizeBusID(s string) (string, bool) {
	s = strings.ToLower(s)
	dom, rest, ok := strings.Cut(s, ":")
	if !ok {
		return "", false
	}
	n, err := strconv.ParseUint(dom, 16, 32)
	if err != nil || n > 0xffff {
		return "", false
	}
	id := fmt.Sprintf("%04x:%s", n, rest)
	return id, isBusID(id)
}
