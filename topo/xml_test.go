package topo

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// xnode is any element, read back with encoding/xml.
type xnode struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Nodes   []xnode    `xml:",any"`
}

func (n *xnode) attr(k string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == k {
			return a.Value
		}
	}
	return ""
}

// find returns the elements called name at any depth, with their parents'
// names from the top ("system/cpu/pci/pci/nic").
func (n *xnode) find(name, path string, out *[]found) {
	for i := range n.Nodes {
		c := &n.Nodes[i]
		p := path + "/" + c.XMLName.Local
		if c.XMLName.Local == name {
			*out = append(*out, found{c, p, n})
		}
		c.find(name, p, out)
	}
}

type found struct {
	n      *xnode
	path   string
	parent *xnode
}

func (n *xnode) all(name string) []found {
	var out []found
	n.find(name, n.XMLName.Local, &out)
	return out
}

// shape collects, per element name, the attribute names used.
func (n *xnode) shape(m map[string]map[string]bool) {
	if m[n.XMLName.Local] == nil {
		m[n.XMLName.Local] = map[string]bool{}
	}
	for _, a := range n.Attrs {
		m[n.XMLName.Local][a.Name.Local] = true
	}
	for i := range n.Nodes {
		n.Nodes[i].shape(m)
	}
}

// realDump is the verbatim part of the real NCCL dump.
func realDump(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "real-inputs", "nccl-topo-dump-h100.txt"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "# ===== VERBATIM BELOW =====\n")
	if !ok {
		t.Fatal("no verbatim marker")
	}
	return after
}

func parseXML(t *testing.T, s string) *xnode {
	t.Helper()
	var n xnode
	if err := xml.Unmarshal([]byte(s), &n); err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
	return &n
}

func twoSocketHost(t *testing.T) *Host {
	t.Helper()
	h, err := Detect(Options{Root: twoSocket(t), NvidiaSMI: fakeNvidiaSMI(t, h100s...), Affinity: affinity(4, 5)})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestXMLShapeMatchesNCCLDump: every element goccl writes, and every
// attribute of it, occurs in the real NCCL dump (elements under the same
// parent kinds), and the values have NCCL's forms.
func TestXMLShapeMatchesNCCLDump(t *testing.T) {
	real := parseXML(t, realDump(t))
	realShape := map[string]map[string]bool{}
	real.shape(realShape)

	var b bytes.Buffer
	if err := twoSocketHost(t).WriteXML(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	ours := parseXML(t, out)
	ourShape := map[string]map[string]bool{}
	ours.shape(ourShape)
	for el, attrs := range ourShape {
		if realShape[el] == nil {
			t.Errorf("element <%s> is not in NCCL's dump", el)
			continue
		}
		for a := range attrs {
			if !realShape[el][a] {
				t.Errorf("attribute %s of <%s> is not in NCCL's dump (it has %v)", a, el, keys(realShape[el]))
			}
		}
	}
	if ours.XMLName.Local != "system" || ours.attr("version") != real.attr("version") {
		t.Errorf("root <%s version=%q>, NCCL's <%s version=%q>", ours.XMLName.Local, ours.attr("version"), real.XMLName.Local, real.attr("version"))
	}
	realPaths, ourPaths := map[string]bool{}, map[string]bool{}
	for _, el := range []string{"cpu", "pci", "nic", "net", "gpu"} {
		for _, f := range real.all(el) {
			realPaths[f.parent.XMLName.Local+">"+el] = true
		}
		for _, f := range ours.all(el) {
			ourPaths[f.parent.XMLName.Local+">"+el] = true
		}
	}
	for p := range ourPaths {
		// cpu>nic: NCCL puts a NIC without a PCI device (a virtual one)
		// directly under the first CPU (xml.cc, ncclTopoFillNet); this
		// dump has none.
		if !realPaths[p] && p != "cpu>nic" {
			t.Errorf("parent>child %s is not in NCCL's dump (%v)", p, keys(realPaths))
		}
	}

	cpus := ours.all("cpu")
	if len(cpus) != 2 || cpus[0].n.attr("numaid") != "0" || cpus[1].n.attr("numaid") != "1" ||
		cpus[0].n.attr("affinity") != "0f" || cpus[1].n.attr("affinity") != "f0" ||
		cpus[0].n.attr("vendor") != "GenuineIntel" || cpus[0].n.attr("familyid") != "6" || cpus[0].n.attr("modelid") != "143" ||
		cpus[0].n.attr("arch") != "x86_64" || !strings.HasPrefix(cpus[0].n.attr("host_hash"), "0x") {
		t.Errorf("cpus: %+v", cpus)
	}
	nets := map[string]found{}
	for _, f := range ours.all("net") {
		nets[f.n.attr("name")] = f
	}
	check := func(name, path, attrs string) {
		t.Helper()
		f, ok := nets[name]
		if !ok {
			t.Errorf("no <net name=%q>", name)
			return
		}
		var got []string
		for _, a := range f.n.Attrs {
			got = append(got, a.Name.Local+"="+a.Value)
		}
		if f.path != path || strings.Join(got, " ") != attrs {
			t.Errorf("net %s at %s with %s,\nwant at %s with %s", name, f.path, strings.Join(got, " "), path, attrs)
		}
	}
	check("mlx5_0", "system/cpu/pci/pci/nic/net", "name=mlx5_0 dev=0 speed=100000 port=1 guid=0x3278900003ae6d94 gdr=0")
	check("bond0", "system/cpu/nic/net", "name=bond0 dev=1 speed=10000 port=0 guid=0x1 gdr=0")
	check("ens1f0np0", "system/cpu/pci/pci/nic/net", "name=ens1f0np0 dev=2 speed=100000 port=0 guid=0x2 gdr=0")
	check("veth3f2a1b0", "system/cpu/nic/net", "name=veth3f2a1b0 dev=3 speed=10000 port=0 guid=0x3 gdr=0")
	for _, name := range []string{"lo", "eno1"} {
		if _, ok := nets[name]; ok {
			t.Errorf("%s (loopback, bond member) written as a net", name)
		}
	}
	// Where things hang: mlx5_0 and ens1f0np0 share the NIC's <nic>, under
	// the root port of node 0 with GPU 0; GPU 1 under node 1's.
	for _, c := range []struct{ busid, numa, parent string }{
		{"0000:15:01.0", "0", "cpu"}, {"0000:16:00.0", "0", "0000:15:01.0"}, {"0000:17:00.0", "0", "0000:15:01.0"},
		{"0000:97:01.0", "1", "cpu"}, {"0000:99:00.0", "1", "0000:97:01.0"},
	} {
		var f *found
		for _, p := range ours.all("pci") {
			if p.n.attr("busid") == c.busid {
				f = &p
			}
		}
		if f == nil {
			t.Errorf("no <pci busid=%q>", c.busid)
			continue
		}
		parent := f.parent.attr("busid")
		if f.parent.XMLName.Local == "cpu" {
			parent = "cpu"
		}
		if parent != c.parent {
			t.Errorf("pci %s under %s, want %s", c.busid, parent, c.parent)
		}
	}
	for _, c := range cpus {
		if c.n.attr("numaid") == "1" {
			var gs []found
			c.n.find("gpu", "", &gs)
			if len(gs) != 1 || gs[0].n.attr("dev") != "1" || gs[0].parent.attr("busid") != "0000:99:00.0" || gs[0].parent.attr("class") != "0x030200" {
				t.Errorf("node 1's GPUs: %+v", gs)
			}
		}
	}
	if n := strings.Count(out, "<nic>"); n != 2 {
		t.Errorf("%d <nic> elements, want 2 (the ConnectX's function, the virtual ones under cpu 0):\n%s", n, out)
	}
	if !strings.Contains(out, `<pci busid="0000:16:00.0" class="0x020000" vendor="0x15b3" device="0x101d" subsystem_vendor="0x15b3" subsystem_device="0x0016" link_speed="16.0 GT/s PCIe" link_width="16">`) {
		t.Errorf("the NIC's <pci> lacks NCCL's attribute order or values:\n%s", out)
	}
}

// TestXMLWriterIsNCCLs: the real dump, read into goccl's element tree and
// written back, is byte for byte what NCCL wrote (indentation, attribute
// order, "/>").
func TestXMLWriterIsNCCLs(t *testing.T) {
	dump := realDump(t)
	var conv func(n *xnode) *xmlNode
	conv = func(n *xnode) *xmlNode {
		x := &xmlNode{name: n.XMLName.Local}
		for _, a := range n.Attrs {
			x.attrs = append(x.attrs, [2]string{a.Name.Local, a.Value})
		}
		for i := range n.Nodes {
			x.subs = append(x.subs, conv(&n.Nodes[i]))
		}
		return x
	}
	var b bytes.Buffer
	conv(parseXML(t, dump)).write(&b, 0)
	if b.String() != dump {
		t.Errorf("written back differs:\n%s\nNCCL's:\n%s", b.String(), dump)
	}
}

func TestXMLEscapes(t *testing.T) {
	var b bytes.Buffer
	(&xmlNode{name: "net"}).set("name", `a"<b>&'c`).write(&b, 0)
	n := parseXML(t, b.String())
	if n.attr("name") != `a"<b>&'c` {
		t.Errorf("%s read back as %q", b.String(), n.attr("name"))
	}
}

func keys[V any](m map[string]V) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}
