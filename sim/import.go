package sim

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ImportXML reads a topology in the shape of NCCL's topology dump
// (NCCL_TOPO_DUMP_FILE: one <system>, one host) or of goccl's
// (GOCCL_TOPO_DUMP_FILE: <goccl_topology> with one <system> per <host>;
// topo/xml.go documents both) and makes a Topology of it:
//   - GPUs: the <gpu> elements of the first host; the intra-node fabric from
//     their <nvlink> elements: NVSwitch when a link's tclass is 0x068000
//     (a bridge: NCCL's NVSwitch), else point-to-point NVLink; the rate a
//     GPU's links carry each way, links × the NVLink generation's 25 GB/s
//     (sm 80, sm 90) or 50 GB/s (sm 100); in-switch reduction (NVLS) from
//     sm 90 on NVSwitch. No NVLink: PCIe, at the GPU's link speed and width.
//     The GPU's model (its datasheet rates) follows its sm.
//   - No GPUs (goccl's dump of CPU hosts): runtime goccl, the ranks of the
//     first host over shared memory, at goccl-netns' figures until
//     `goccl sim calibrate` measures them.
//   - NICs: the first host's <net> elements with a port (RDMA devices); when
//     none, its interfaces; speed is Mb/s.
//   - Nodes: the <host> elements (1 for NCCL's file).
func ImportXML(r io.Reader, name string) (*Topology, error) {
	root, err := parseXMLTree(r)
	if err != nil {
		return nil, fmt.Errorf("sim: topology XML: %w", err)
	}
	systems, ranks := root.systems()
	if len(systems) == 0 {
		return nil, fmt.Errorf("sim: topology XML: no <system> element (want NCCL's or goccl's topology dump)")
	}
	sys := systems[0]
	t := &Topology{Name: name, Nodes: len(systems)}
	if err := t.importGPUs(sys); err != nil {
		return nil, err
	}
	if t.GPUsPerNode == 0 { // CPU hosts: goccl's ranks
		base, _ := Preset("goccl-netns")
		t.Intra, t.Runtime, t.Network = base.Intra, "goccl", base.Network
		t.GPUsPerNode = max(1, ranks)
	}
	t.importNICs(sys)
	if t.Nodes > 1 && t.Network.Kind == "" {
		t.Network = Network{Kind: "fat-tree", LatencyUs: 0.7, Oversubscription: 1}
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// xmlNode is one element of the file, with its attributes and children.
type xmlNode struct {
	name     string
	parent   *xmlNode
	attrs    map[string]string
	children []*xmlNode
}

// parseXMLTree reads the whole document (at most 64 MiB, 64 levels deep).
func parseXMLTree(r io.Reader) (*xmlNode, error) {
	dec := xml.NewDecoder(io.LimitReader(r, 64<<20))
	var stack []*xmlNode
	var root *xmlNode
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		switch e := tok.(type) {
		case xml.StartElement:
			n := &xmlNode{name: e.Name.Local, attrs: map[string]string{}}
			for _, a := range e.Attr {
				n.attrs[a.Name.Local] = a.Value
			}
			if len(stack) == 0 {
				if root != nil {
					return nil, errors.New("a second root element <" + n.name + ">")
				}
				root = n
			} else {
				p := stack[len(stack)-1]
				p.children = append(p.children, n)
				n.parent = p
			}
			if len(stack) >= 64 {
				return nil, errors.New("elements nested over 64 deep")
			}
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		}
	}
	if root == nil {
		return nil, errors.New("no element")
	}
	return root, nil
}

// all returns the elements named name in n's subtree, in document order.
func (n *xmlNode) all(name string) []*xmlNode {
	var out []*xmlNode
	var walk func(*xmlNode)
	walk = func(m *xmlNode) {
		if m.name == name {
			out = append(out, m)
		}
		for _, c := range m.children {
			walk(c)
		}
	}
	walk(n)
	return out
}

// systems returns the <system> of each host, and the first host's ranks
// (goccl's <rank> elements; 0 in NCCL's file).
func (n *xmlNode) systems() (sys []*xmlNode, ranks int) {
	if n.name == "system" {
		return []*xmlNode{n}, 0
	}
	for i, h := range n.all("host") {
		if s := h.all("system"); len(s) > 0 {
			sys = append(sys, s[0])
			if i == 0 {
				ranks = len(h.all("rank"))
			}
		}
	}
	return sys, ranks
}

// nvlinkGen is a GPU generation by its sm: the GB/s one NVLink carries
// each way (NVIDIA's NVLink generations: 3 and 4 at 25 GB/s, 5 at 50) and
// the datasheet GPU of that generation in the presets.
var nvlinkGen = []struct {
	minSM  int
	linkGB float64
	preset string
}{
	{100, 50, "dgx-b200"}, {90, 25, "dgx-h100"}, {80, 25, "dgx-a100"},
}

func (t *Topology) importGPUs(sys *xmlNode) error {
	gpus := sys.all("gpu")
	t.GPUsPerNode = len(gpus)
	if len(gpus) == 0 {
		return nil
	}
	t.Runtime = "nccl"
	sm, err := strconv.Atoi(gpus[0].attrs["sm"])
	if err != nil {
		return fmt.Errorf("sim: topology XML: <gpu dev=%q> sm=%q: want the compute capability ×10 (90 for H100)", gpus[0].attrs["dev"], gpus[0].attrs["sm"])
	}
	gen := nvlinkGen[len(nvlinkGen)-1]
	for _, g := range nvlinkGen {
		if sm >= g.minSM {
			gen = g
			break
		}
	}
	if p, err := Preset(gen.preset); err == nil {
		t.GPU = p.GPU
	}
	links, nvswitch := 0, false
	for _, l := range gpus[0].all("nvlink") {
		c, _ := strconv.Atoi(l.attrs["count"])
		links += c
		nvswitch = nvswitch || l.attrs["tclass"] == "0x068000"
	}
	switch {
	case links > 0 && nvswitch:
		t.Intra = Fabric{Kind: "nvswitch", GBps: float64(links) * gen.linkGB, NVLS: sm >= 90}
	case links > 0:
		t.Intra = Fabric{Kind: "nvlink", GBps: float64(links) * gen.linkGB}
	default:
		t.Intra = Fabric{Kind: "pcie", GBps: pcieGBps(gpus[0])}
	}
	return nil
}

// pcieGBps is the rate each way of the PCIe link above a GPU: its <pci>
// parent's link_speed (GT/s) × link_width (lanes) × the line code's share
// (128b/130b from 8 GT/s, Gen3, on; 8b/10b below) / 8 bits. A file that
// does not say (a VM's virtual link reads width 0) gets Gen4 x16, 31.5
// GB/s, as the a100-pcie preset.
func pcieGBps(gpu *xmlNode) float64 {
	const gen4x16 = 31.5
	pci := gpu.parent
	if pci == nil || pci.name != "pci" {
		return gen4x16
	}
	speed, _, _ := strings.Cut(strings.TrimSpace(pci.attrs["link_speed"]), " ")
	gts, err1 := strconv.ParseFloat(speed, 64)
	lanes, err2 := strconv.Atoi(pci.attrs["link_width"])
	if err1 != nil || err2 != nil || !(gts > 0) || lanes < 1 {
		return gen4x16
	}
	code := 128.0 / 130
	if gts < 8 {
		code = 8.0 / 10
	}
	return gts * float64(lanes) * code / 8
}

func (t *Topology) importNICs(sys *xmlNode) {
	nets := sys.all("net")
	var rdma, ifaces []*xmlNode
	for _, n := range nets {
		if p, _ := strconv.Atoi(n.attrs["port"]); p > 0 {
			rdma = append(rdma, n)
		} else {
			ifaces = append(ifaces, n)
		}
	}
	use := rdma
	if len(use) == 0 {
		use = ifaces
	}
	var mbps float64
	for _, n := range use {
		s, _ := strconv.ParseFloat(strings.TrimSpace(n.attrs["speed"]), 64)
		mbps = max(mbps, s)
	}
	if len(use) > 0 && mbps > 0 {
		t.NICsPerNode, t.NICGbps = len(use), mbps/1000
	}
}
