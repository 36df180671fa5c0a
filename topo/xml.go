package topo

// XML in the shape of NCCL's topology dump.
//
// NCCL_TOPO_DUMP_FILE makes NCCL write the topology one process detected
// (src/graph/xml.cc, ncclTopoDumpXmlToFile): no XML declaration, elements
// indented by two spaces, attributes in the order they were set, an element
// without children closed with "/>":
//
//	<system version="1">
//	  <cpu host_hash="0x..." numaid="0" affinity="0000ffff,ffffffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
//	    <pci busid="0000:a1:00.0" class="0x060400" vendor="0x104c" device="0x8232" subsystem_vendor="0x0000" subsystem_device="0x0000" link_speed="2.5 GT/s PCIe" link_width="1">
//	      <pci busid="0000:a3:00.0" class="0x020000" ... link_speed="32.0 GT/s PCIe" link_width="0">
//	        <nic>
//	          <net name="mlx5_7" dev="7" speed="200000" port="1" latency="0.000000" guid="0x34f4e30003e1a258" maxconn="131072" gdr="1"/>
//	        </nic>
//	      </pci>
//	      <pci busid="0000:a4:00.0" class="0x030200" ...>
//	        <gpu dev="0" sm="90" rank="0" gdr="1">...</gpu>
//	      </pci>
//	    </pci>
//	  </cpu>
//	</system>
//
// (testdata/real-inputs/nccl-topo-dump-h100.xml is a whole one, with its
// source). goccl writes the same elements and attribute names, and only
// those: one <cpu> per NUMA node (numaid -1 for devices whose node is
// unknown on a multi-node host, as NCCL does), under it the PCI path of
// every RDMA device, network interface and GPU from the root port down
// (<pci> with the function's sysfs class, vendor, device, subsystem ids and
// current link speed and width; an attribute sysfs does not give is left
// out), a <nic> under a network function holding one <net> per RDMA port
// (name = device, port = port number, speed = rate in Mb/s, guid = the
// device's sys_image_guid as NCCL's IB plugin prints it) and per interface
// a socket would use (up, not loopback, not a member of a bond or bridge:
// name = interface, port 0, speed in Mb/s when known, guid = dev, as NCCL's
// socket plugin does), and <gpu dev="nvidia-smi index"/>
// under a GPU's function. dev numbers the nets of a host: RDMA ports first,
// then interfaces. gdr is always 0: goccl moves data through host memory.
// Interfaces without a PCI device (veth, bond, bridge, tun) go in a <nic>
// directly under the first <cpu>, where NCCL puts virtual NICs. NCCL's
// latency, maxconn, coll and the GPU's sm, rank and nvlink have no goccl
// counterpart and are not written. host_hash is goccl's hash of the host
// ID, not NCCL's.
//
// NCCL's file holds one process's view. A job's file (Job.WriteXML) wraps
// one such <system> per host:
//
//	<goccl_topology version="1" ranks="3" hosts="2">
//	  <host hostname="node-a" id="BOOT-ID/node-a/16" ranks="0-1">
//	    <rank rank="0" pid="4242" cpus="0-15" numa="0"/>
//	    <rank rank="1" pid="4243" cpus="16-31" numa="1"/>
//	    <system version="1">...</system>
//	  </host>
//	  <host hostname="node-b" ...>...</host>
//	  <missing ranks="5"/>
//	</goccl_topology>
//
// so each <system> subtree is, cut out on its own, a file of NCCL's shape.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// XMLVersion is the version attribute of <system> (NCCL_TOPO_XML_VERSION)
// and of goccl's <goccl_topology> wrapper.
const XMLVersion = "1"

// xmlNode is one element: its attributes in order, then its children.
type xmlNode struct {
	name  string
	attrs [][2]string
	subs  []*xmlNode
}

// set adds an attribute unless its value is empty.
func (n *xmlNode) set(key, value string) *xmlNode {
	if value != "" {
		n.attrs = append(n.attrs, [2]string{key, value})
	}
	return n
}

func (n *xmlNode) add(name string) *xmlNode {
	c := &xmlNode{name: name}
	n.subs = append(n.subs, c)
	return c
}

// sub returns the first child called name, made if there is none.
func (n *xmlNode) sub(name string) *xmlNode {
	for _, c := range n.subs {
		if c.name == name {
			return c
		}
	}
	return n.add(name)
}

var attrEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;", "\n", "&#xA;", "\r", "&#xD;", "\t", "&#x9;")

// write writes n as NCCL does: two spaces per level, "/>" without children.
func (n *xmlNode) write(b *bytes.Buffer, indent int) {
	pad := strings.Repeat(" ", indent)
	b.WriteString(pad + "<" + n.name)
	for _, a := range n.attrs {
		b.WriteString(" " + a[0] + `="` + attrEscaper.Replace(a[1]) + `"`)
	}
	if len(n.subs) == 0 {
		b.WriteString("/>\n")
		return
	}
	b.WriteString(">\n")
	for _, c := range n.subs {
		c.write(b, indent+2)
	}
	b.WriteString(pad + "</" + n.name + ">\n")
}

// ncclGUID writes a GUID as NCCL's dump does: the 8 bytes in network order,
// as libibverbs hands them over, read as one little-endian integer and
// printed in hexadecimal without leading zeros (sysfs 946d:ae03:0090:7832,
// ibstat 0x946dae0300907832, NCCL 0x3278900003ae6d94).
func ncclGUID(guid string) string {
	v, err := strconv.ParseUint(strings.TrimPrefix(guid, "0x"), 16, 64)
	if err != nil {
		return ""
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return fmt.Sprintf("0x%x", binary.LittleEndian.Uint64(b[:]))
}

// system builds the <system> element of h.
func (h *Host) system() *xmlNode {
	sys := (&xmlNode{name: "system"}).set("version", XMLVersion)
	hash := fmt.Sprintf("0x%x", hostHash(h.ID))
	cpus := map[int]*xmlNode{}
	var first *xmlNode
	addCPU := func(numa int, affinity string) *xmlNode {
		c := sys.add("cpu").set("host_hash", hash).set("numaid", strconv.Itoa(numa)).set("affinity", affinity).set("arch", h.Arch)
		if h.CPU.Vendor != "" {
			c.set("vendor", h.CPU.Vendor)
		}
		if h.CPU.FamilyID >= 0 && h.CPU.ModelID >= 0 && h.CPU.Vendor != "" {
			c.set("familyid", strconv.Itoa(h.CPU.FamilyID)).set("modelid", strconv.Itoa(h.CPU.ModelID))
		}
		cpus[numa] = c
		if first == nil {
			first = c
		}
		return c
	}
	allCPUs := FormatCPUMap(ParseCPUList(h.CPU.Online))
	for _, n := range h.NUMA {
		addCPU(n.ID, n.Affinity)
	}
	if len(h.NUMA) == 0 {
		addCPU(-1, allCPUs)
	}
	cpuFor := func(numa int) *xmlNode {
		if c, ok := cpus[numa]; ok {
			return c
		}
		if len(h.NUMA) == 1 {
			return first
		}
		return addCPU(-1, allCPUs)
	}
	pcis := map[string]*xmlNode{}
	pciFor := func(path []string) *xmlNode {
		numa := -1
		for i := len(path) - 1; i >= 0 && numa < 0; i-- {
			if p, ok := h.PCI[path[i]]; ok {
				numa = p.NUMANode
			}
		}
		parent := cpuFor(numa)
		for _, id := range path {
			if n, ok := pcis[id]; ok {
				parent = n
				continue
			}
			p := h.PCI[id]
			n := parent.add("pci").set("busid", id).set("class", p.Class).set("vendor", p.Vendor).set("device", p.Device).
				set("subsystem_vendor", p.SubsystemVendor).set("subsystem_device", p.SubsystemDevice).
				set("link_speed", p.LinkSpeed).set("link_width", p.LinkWidth)
			pcis[id] = n
			parent = n
		}
		return parent
	}
	dev := 0
	for _, d := range h.RDMA {
		for _, p := range d.Ports {
			parent := first
			if len(d.PCIPath) > 0 {
				parent = pciFor(d.PCIPath)
			}
			net := parent.sub("nic").add("net").set("name", d.Name).set("dev", strconv.Itoa(dev))
			if p.RateMbps > 0 {
				net.set("speed", strconv.Itoa(p.RateMbps))
			}
			guid := d.SysImageGUID
			if guid == "" {
				guid = d.NodeGUID
			}
			net.set("port", strconv.Itoa(p.Port)).set("guid", ncclGUID(guid)).set("gdr", "0")
			dev++
		}
	}
	for _, ifc := range h.Interfaces {
		if ifc.Kind == KindLoopback || ifc.Master != "" || (ifc.State != "up" && ifc.State != "unknown") {
			continue // not an interface sockets would use: loopback, a bond's or bridge's member, down
		}
		parent := first
		if len(ifc.PCIPath) > 0 {
			parent = pciFor(ifc.PCIPath)
		}
		net := parent.sub("nic").add("net").set("name", ifc.Name).set("dev", strconv.Itoa(dev))
		if ifc.SpeedMbps > 0 {
			net.set("speed", strconv.Itoa(ifc.SpeedMbps))
		}
		net.set("port", "0").set("guid", fmt.Sprintf("0x%x", dev)).set("gdr", "0")
		dev++
	}
	for _, g := range h.GPUs {
		path := g.PCIPath
		if len(path) == 0 {
			path = []string{g.BusID}
		}
		pciFor(path).add("gpu").set("dev", strconv.Itoa(g.Index))
	}
	return sys
}

// WriteXML writes h as NCCL's NCCL_TOPO_DUMP_FILE would: one <system>.
func (h *Host) WriteXML(w io.Writer) error {
	var b bytes.Buffer
	h.system().write(&b, 0)
	_, err := w.Write(b.Bytes())
	return err
}

// WriteXML writes the job: one <system> per host, wrapped in
// <goccl_topology> (see the file comment).
func (j *Job) WriteXML(w io.Writer) error {
	top := (&xmlNode{name: "goccl_topology"}).set("version", XMLVersion).
		set("ranks", strconv.Itoa(len(j.Ranks))).set("hosts", strconv.Itoa(len(j.Hosts)))
	for _, jh := range j.Hosts {
		hn := top.add("host").set("hostname", jh.Host.Hostname).set("id", jh.Host.ID).set("ranks", FormatCPUList(jh.Ranks))
		for _, r := range jh.Ranks {
			rn := hn.add("rank").set("rank", strconv.Itoa(r))
			if p := j.Ranks[r].Process; p != nil {
				numa := make([]string, len(p.NUMA))
				for i, n := range p.NUMA {
					numa[i] = strconv.Itoa(n)
				}
				rn.set("pid", strconv.Itoa(p.Pid)).set("cpus", p.CPUs).set("numa", strings.Join(numa, ","))
			}
		}
		hn.subs = append(hn.subs, jh.Host.system())
	}
	if m := j.Missing(); len(m) > 0 {
		top.add("missing").set("ranks", FormatCPUList(m))
	}
	var b bytes.Buffer
	top.write(&b, 0)
	_, err := w.Write(b.Bytes())
	return err
}

// WriteJSON writes h as indented JSON.
func (h *Host) WriteJSON(w io.Writer) error { return writeJSON(w, h) }

// WriteJSON writes the job as indented JSON.
func (j *Job) WriteJSON(w io.Writer) error { return writeJSON(w, j) }

func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteFile writes the job to path: JSON when the name ends in .json (any
// case), XML otherwise.
func (j *Job) WriteFile(path string) error {
	var b bytes.Buffer
	var err error
	if strings.EqualFold(filepath.Ext(path), ".json") {
		err = j.WriteJSON(&b)
	} else {
		err = j.WriteXML(&b)
	}
	if err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
