package sim

import (
	"io"
	"os"
	"strings"
	"testing"
)

// TestImportNCCLDump: NCCL's own dump of an 8 × H100 VM (IBM Cloud
// gx3d-160x1792x8h100; topo/testdata/real-inputs) reads as 8 GPUs on
// NVSwitch with 18 NVLinks each (5+5+4+4: 450 GB/s each way), NVLS, 8
// RoCE NICs at 200 Gbit/s, the H100's datasheet rates.
func TestImportNCCLDump(t *testing.T) {
	f, err := os.Open("../topo/testdata/real-inputs/nccl-topo-dump-h100.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The file starts with a provenance header, then the XML verbatim.
	b, _ := io.ReadAll(f)
	_, xmlText, ok := strings.Cut(string(b), "===== VERBATIM BELOW =====\n")
	if !ok {
		t.Fatal("no VERBATIM marker")
	}
	got, err := ImportXML(strings.NewReader(xmlText), "gx3d-h100")
	if err != nil {
		t.Fatal(err)
	}
	want := Topology{Name: "gx3d-h100", Nodes: 1, GPUsPerNode: 8,
		Intra: Fabric{Kind: "nvswitch", GBps: 450, NVLS: true}, NICsPerNode: 8, NICGbps: 200,
		GPU: GPU{Name: "H100-SXM5-80GB", TFLOPS: 989, HBMGBps: 3350, MemGB: 80}, Runtime: "nccl"}
	if *got != want {
		t.Errorf("imported\n %+v\nwant\n %+v", *got, want)
	}
}

// TestImportGocclDump: goccl's job file of CPU hosts: runtime goccl, its
// hosts and ranks, the interfaces' speed; a PCIe GPU's link from its
// parent's speed and width; bad files are named.
func TestImportGocclDump(t *testing.T) {
	doc := `<goccl_topology version="1" ranks="4" hosts="2">
  <host hostname="a" id="x" ranks="0-1"><rank rank="0"/><rank rank="1"/>
    <system version="1"><cpu numaid="0"><nic><net name="eth0" dev="0" speed="10000" port="0"/></nic></cpu></system></host>
  <host hostname="b" id="y" ranks="2-3"><rank rank="2"/><rank rank="3"/>
    <system version="1"><cpu numaid="0"><nic><net name="eth0" dev="0" speed="10000" port="0"/></nic></cpu></system></host>
</goccl_topology>`
	got, err := ImportXML(strings.NewReader(doc), "two")
	if err != nil {
		t.Fatal(err)
	}
	if got.Runtime != "goccl" || got.Nodes != 2 || got.GPUsPerNode != 2 || got.NICsPerNode != 1 || got.NICGbps != 10 || got.Intra.Kind != "shm" {
		t.Errorf("imported %+v", *got)
	}
	pcie := `<system version="1"><cpu numaid="0"><pci busid="0" link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="0" sm="80"/></pci></cpu></system>`
	got, err = ImportXML(strings.NewReader(pcie), "pcie")
	if err != nil {
		t.Fatal(err)
	}
	// 16 GT/s × 16 lanes × 128/130 / 8 = 31.51 GB/s.
	if got.Intra.Kind != "pcie" || got.Intra.GBps < 31.5 || got.Intra.GBps > 31.6 || got.GPU.TFLOPS != 312 {
		t.Errorf("PCIe A100: %+v", *got)
	}
	for _, tc := range []struct{ doc, want string }{
		{"", "no element"},
		{"<foo/>", "no <system>"},
		{`<system><gpu dev="0" sm="x"/></system>`, `sm="x"`},
		{"<system><cpu>", "EOF"},
	} {
		if _, err := ImportXML(strings.NewReader(tc.doc), "bad"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.doc, err, tc.want)
		}
	}
}
