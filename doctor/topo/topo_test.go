package topo

import (
	"strings"
	"testing"

	"github.com/goccl/goccl/doctor"
	"github.com/goccl/goccl/doctor/internal/doctortest"
)

func topoParse(t *testing.T, text string) *Report {
	t.Helper()
	return doctortest.Read(t, Parse, text)
}

func topoNearest(t *testing.T, rep *Report, gpu string) GPULocality {
	t.Helper()
	for _, l := range rep.Locality {
		if l.GPU == gpu {
			return l
		}
	}
	t.Fatalf("no locality for %s", gpu)
	return GPULocality{}
}

func TestTopoReal02ThreeGPUsTwoNICs(t *testing.T) {
	rep := topoParse(t, doctortest.RealInput(t, "topo-02.txt"))
	if strings.Join(rep.GPUs, ",") != "GPU0,GPU1,GPU2" || strings.Join(rep.NICs, ",") != "NIC0,NIC1" {
		t.Fatalf("gpus %v nics %v", rep.GPUs, rep.NICs)
	}
	if len(rep.Matrix) != 5 || len(rep.Truncated) != 0 {
		t.Errorf("rows %d truncated %v", len(rep.Matrix), rep.Truncated)
	}
	cells := map[[2]string]string{
		{"GPU0", "GPU1"}: "NV4", {"GPU0", "GPU0"}: "X", {"GPU2", "NIC0"}: "PHB", {"GPU0", "NIC1"}: "NODE",
		{"NIC0", "NIC1"}: "PIX", {"NIC1", "GPU2"}: "PHB", {"GPU2", "GPU0"}: "NODE",
	}
	for k, v := range cells {
		if got := rep.Matrix[k[0]][k[1]]; got != v {
			t.Errorf("%s-%s = %q, want %q", k[0], k[1], got, v)
		}
	}
	if rep.NICNames["NIC0"] != "mlx5_0" || rep.NICNames["NIC1"] != "mlx5_1" {
		t.Errorf("legend %v", rep.NICNames)
	}
	if rep.CPUAffinity["GPU2"] != "64-71" || rep.NUMAAffinity["GPU0"] != "1" || rep.GPUNUMAID["GPU1"] != "N/A" {
		t.Errorf("affinity %v %v %v", rep.CPUAffinity, rep.NUMAAffinity, rep.GPUNUMAID)
	}
	if _, ok := rep.CPUAffinity["NIC0"]; ok {
		t.Errorf("NIC rows have no affinity")
	}
	g2 := topoNearest(t, rep, "GPU2")
	if g2.Link != "PHB" || strings.Join(g2.NICDevices, ",") != "mlx5_0,mlx5_1" {
		t.Errorf("GPU2 %+v", g2)
	}
	g0 := topoNearest(t, rep, "GPU0")
	if g0.Link != "NODE" || len(g0.NICs) != 2 {
		t.Errorf("GPU0 %+v", g0)
	}
	if f, ok := doctortest.FindingWith(rep.Findings, "gpu-no-local-nic", "GPU0: nearest NIC NIC0 (mlx5_0), NIC1 (mlx5_1) is NODE"); !ok || f.Severity != doctor.SevWarn {
		t.Errorf("GPU0 no local NIC: %v", rep.Findings)
	}
	if _, ok := doctortest.FindingWith(rep.Findings, "gpu-no-local-nic", "GPU2"); ok {
		t.Errorf("GPU2 is PHB, not NODE")
	}
	if _, ok := doctortest.FindingWith(rep.Findings, "gpu-nic-phb", "GPU2"); !ok {
		t.Errorf("GPU2 PHB: %v", rep.Findings)
	}
	if _, ok := doctortest.FindingWith(rep.Findings, "gpu-no-nvlink", "GPU2 has no NVLink"); !ok {
		t.Errorf("GPU2 nvlink: %v", rep.Findings)
	}
	c := doctortest.Codes(rep.Findings, "")
	if c["gpu-no-local-nic"] != 2 || c["gpu-no-nvlink"] != 1 || c["topo-nic-legend-missing"] != 0 || c["nic-shared"] != 0 {
		t.Errorf("codes %v", c)
	}
}

func TestTopoReal04TabsTruncated(t *testing.T) {
	rep := topoParse(t, doctortest.RealInput(t, "topo-04.txt"))
	if len(rep.GPUs) != 8 || len(rep.NICs) != 9 || len(rep.Devices) != 17 {
		t.Fatalf("gpus %d nics %d", len(rep.GPUs), len(rep.NICs))
	}
	want := map[string]string{"GPU0": "NIC8", "GPU1": "NIC7", "GPU2": "NIC6", "GPU3": "NIC5", "GPU4": "NIC4", "GPU5": "NIC3", "GPU6": "NIC2", "GPU7": "NIC1"}
	for g, n := range want {
		l := topoNearest(t, rep, g)
		if l.Link != "PIX" || len(l.NICs) != 1 || l.NICs[0] != n {
			t.Errorf("%s nearest %+v, want %s PIX", g, l, n)
		}
	}
	if rep.Matrix["GPU0"]["GPU5"] != "NV18" || rep.Matrix["GPU4"]["NIC0"] != "SYS" || rep.Matrix["NIC5"]["GPU3"] != "PIX" || rep.Matrix["GPU3"]["GPU3"] != "X" {
		t.Errorf("cells %v", rep.Matrix["GPU0"])
	}
	if rep.CPUAffinity["GPU4"] != "80-159" || rep.NUMAAffinity["GPU4"] != "1" || rep.GPUNUMAID["GPU7"] != "N/A" {
		t.Errorf("affinity: double TAB before N/A: %v %v %v", rep.CPUAffinity["GPU4"], rep.NUMAAffinity["GPU4"], rep.GPUNUMAID["GPU7"])
	}
	if _, ok := rep.Matrix["NIC6"]; ok {
		t.Errorf("NIC6 row is not in the excerpt")
	}
	c := doctortest.Codes(rep.Findings, "")
	if c["gpu-no-local-nic"] != 0 || c["nic-shared"] != 0 || c["topo-nic-legend-missing"] != 1 || doctor.HasErrors(rep.Findings) {
		t.Errorf("findings %v", rep.Findings)
	}
}

func TestTopoOldSOCTruncatedRow(t *testing.T) {
	rep := topoParse(t, doctortest.File(t, "old-soc-tabs-truncated.txt"))
	if strings.Join(rep.Devices, ",") != "GPU0,GPU1,GPU2,GPU3,mlx5_0,mlx5_1" {
		t.Fatalf("devices %v (ANSI header)", rep.Devices)
	}
	if len(rep.Truncated) != 1 || rep.Truncated[0] != "GPU3" {
		t.Errorf("truncated %v", rep.Truncated)
	}
	if _, ok := rep.Matrix["GPU3"]["mlx5_1"]; ok {
		t.Errorf("cut cell 'NO' taken as a link")
	}
	// GPU3's missing cell comes from mlx5_1's row
	if l := topoNearest(t, rep, "GPU3"); l.Link != "PXB" || strings.Join(l.NICDevices, ",") != "mlx5_1" {
		t.Errorf("GPU3 %+v", l)
	}
	if l := topoNearest(t, rep, "GPU0"); l.Link != "PIX" || l.NICs[0] != "mlx5_0" {
		t.Errorf("GPU0 %+v", l)
	}
	if _, ok := doctortest.FindingWith(rep.Findings, "nic-shared", "mlx5_0 is the nearest NIC of 2 GPUs (GPU0, GPU1)"); !ok {
		t.Errorf("shared: %v", rep.Findings)
	}
	if _, ok := doctortest.FindingWith(rep.Findings, "nic-shared", "mlx5_1 is the nearest NIC of 2 GPUs (GPU2, GPU3)"); !ok {
		t.Errorf("shared: %v", rep.Findings)
	}
	c := doctortest.Codes(rep.Findings, "")
	if c["topo-truncated-rows"] != 1 || c["topo-nic-legend-missing"] != 0 || c["gpu-no-local-nic"] != 0 || c["gpu-no-nvlink"] != 0 {
		t.Errorf("codes %v", c)
	}
}

func TestTopoNoLocalNIC(t *testing.T) {
	rep := topoParse(t, doctortest.File(t, "no-local-nic.txt"))
	if l := topoNearest(t, rep, "GPU0"); l.Link != "SYS" || l.NICDevices[0] != "mlx5_bond_0" {
		t.Errorf("GPU0 %+v", l)
	}
	if f, ok := doctortest.FindingWith(rep.Findings, "gpu-no-local-nic", "GPU1: nearest NIC NIC0 (mlx5_bond_0) is NODE"); !ok || !strings.Contains(f.Fix, "NCCL_NET_GDR_LEVEL") {
		t.Errorf("%v", rep.Findings)
	}
	if rep.GPUNUMAID["GPU1"] != "N/A" || rep.NUMAAffinity["GPU1"] != "1" {
		t.Errorf("affinity %v %v", rep.NUMAAffinity, rep.GPUNUMAID)
	}
}

func TestTopoNoMatrix(t *testing.T) {
	// Text without a header line (a lone "GPU0" is not one) has no matrix.
	for _, in := range []string{"", "Legend:\n  X = Self\n", "GPU0 X\n", "\tGPU0\nGPU1 X\n"} {
		rep := topoParse(t, in)
		if len(rep.Matrix) != 0 || len(rep.Devices) != 0 || doctortest.Codes(rep.Findings, "")["topo-no-matrix"] != 1 {
			t.Errorf("%q: devices %v matrix %v findings %v", in, rep.Devices, rep.Matrix, rep.Findings)
		}
	}
}

// TestTopoSingleGPU: a one-GPU machine's header has one device before the
// affinity titles.
func TestTopoSingleGPU(t *testing.T) {
	for _, c := range []struct {
		in, code string
		nics     int
	}{
		{"\x1b[4m\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \t0-63\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n", "topo-no-nics", 0},
		{"        GPU0    NUMA Affinity\nGPU0     X      0\n", "topo-no-nics", 0},
		{"\tGPU0\tNIC0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tSYS\t0-31\t0\nNIC0\tSYS\t X \n\nNIC Legend:\n\n  NIC0: mlx5_0\n", "gpu-no-local-nic", 1},
	} {
		rep := topoParse(t, c.in)
		codes := doctortest.Codes(rep.Findings, "")
		if len(rep.GPUs) != 1 || rep.GPUs[0] != "GPU0" || len(rep.NICs) != c.nics || rep.Matrix["GPU0"]["GPU0"] != "X" || codes["topo-no-matrix"] != 0 || codes[c.code] != 1 {
			t.Errorf("%q: gpus %v nics %v matrix %v findings %v", c.in, rep.GPUs, rep.NICs, rep.Matrix, rep.Findings)
		}
	}
	rep := topoParse(t, "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-63\t0\n")
	if rep.CPUAffinity["GPU0"] != "0-63" || rep.NUMAAffinity["GPU0"] != "0" {
		t.Errorf("affinity %v %v", rep.CPUAffinity, rep.NUMAAffinity)
	}
}

// TestFindingCodesDocumented: the package doc lists every finding code the
// package emits, and only those.
func TestFindingCodesDocumented(t *testing.T) {
	doctortest.CodesDocumented(t, 5)
}
