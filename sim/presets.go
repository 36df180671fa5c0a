package sim

import (
	"fmt"
	"slices"
	"strings"
)

// presets are the built-in topologies, one node each (WithNodes scales
// them). Rates are the published per-GPU, per-direction figures. GPU peak
// rates are the datasheets' dense BF16 tensor-core TFLOP/s and HBM
// bandwidth: A100 SXM4 80GB 312 and 2,039 GB/s, A100 PCIe 80GB 312 and
// 1,935; H100 SXM5 989 and 3,350; H200 SXM 989 and 4,800 (141 GB); B200
// (DGX B200: 72 PFLOPS FP8 sparse for 8 GPUs, BF16 dense a quarter of
// it) 2,250 and 8,000 (1,440 GB per node); GB200 (NVL72 sheet: 180
// PFLOPS BF16 sparse for 72 GPUs) 2,500 and 8,000 (13.4 TB per rack).
var presets = map[string]Topology{
	// DGX A100 datasheet: 8 A100 SXM4, 6 NVSwitches, "600 GB/s GPU-to-GPU
	// bidirectional" (NVLink3: 12 links × 25 GB/s each way = 300 GB/s), 8
	// single-port ConnectX-6 200 Gb/s HDR InfiniBand for the compute
	// fabric. Quantum HDR switch: ~130 ns port to port, 5 hops across a
	// three-tier fat-tree plus cables ≈ 0.7 µs.
	"dgx-a100": {
		Name: "dgx-a100", Nodes: 1, GPUsPerNode: 8,
		Intra:       Fabric{Kind: "nvswitch", GBps: 300},
		NICsPerNode: 8, NICGbps: 200,
		Network: Network{Kind: "fat-tree", LatencyUs: 0.7, Oversubscription: 1},
		GPU:     GPU{Name: "A100-SXM4-80GB", TFLOPS: 312, HBMGBps: 2039, MemGB: 80}, Runtime: "nccl",
	},
	// DGX H100 datasheet: 8 H100 SXM5, 4 third-generation NVSwitches with
	// SHARP in-switch reduction (NVLS), "900 GB/s GPU-to-GPU bidirectional"
	// (NVLink4: 18 links × 25 GB/s = 450 GB/s each way), 8 ConnectX-7 400
	// Gb/s NDR (OSFP) for the compute fabric.
	"dgx-h100": {
		Name: "dgx-h100", Nodes: 1, GPUsPerNode: 8,
		Intra:       Fabric{Kind: "nvswitch", GBps: 450, NVLS: true},
		NICsPerNode: 8, NICGbps: 400,
		Network: Network{Kind: "fat-tree", LatencyUs: 0.7, Oversubscription: 1},
		GPU:     GPU{Name: "H100-SXM5-80GB", TFLOPS: 989, HBMGBps: 3350, MemGB: 80}, Runtime: "nccl",
	},
	// DGX H200 datasheet: the DGX H100 board with H200 (141 GB): NVLink4,
	// 900 GB/s bidirectional per GPU, 8 ConnectX-7 400 Gb/s.
	"dgx-h200": {
		Name: "dgx-h200", Nodes: 1, GPUsPerNode: 8,
		Intra:       Fabric{Kind: "nvswitch", GBps: 450, NVLS: true},
		NICsPerNode: 8, NICGbps: 400,
		Network: Network{Kind: "fat-tree", LatencyUs: 0.7, Oversubscription: 1},
		GPU:     GPU{Name: "H200-SXM-141GB", TFLOPS: 989, HBMGBps: 4800, MemGB: 141}, Runtime: "nccl",
	},
	// HGX H100 8-GPU: the DGX H100's baseboard (same NVLink4/NVSwitch
	// figures); 8 × 400 Gb/s as in NVIDIA's reference configurations.
	"hgx-h100": {
		Name: "hgx-h100", Nodes: 1, GPUsPerNode: 8,
		Intra:       Fabric{Kind: "nvswitch", GBps: 450, NVLS: true},
		NICsPerNode: 8, NICGbps: 400,
		Network: Network{Kind: "rail-optimized", LatencyUs: 0.7, Oversubscription: 1},
		GPU:     GPU{Name: "H100-SXM5-80GB", TFLOPS: 989, HBMGBps: 3350, MemGB: 80}, Runtime: "nccl",
	},
	// DGX B200 datasheet: 8 B200, 2 NVLink5 switch chips, "1.8 TB/s
	// GPU-to-GPU bidirectional" (NVLink5: 18 links × 50 GB/s = 900 GB/s
	// each way), 8 single-port ConnectX-7 400 Gb/s (4 OSFP ports).
	"dgx-b200": {
		Name: "dgx-b200", Nodes: 1, GPUsPerNode: 8,
		Intra:       Fabric{Kind: "nvswitch", GBps: 900, NVLS: true},
		NICsPerNode: 8, NICGbps: 400,
		Network: Network{Kind: "fat-tree", LatencyUs: 0.7, Oversubscription: 1},
		GPU:     GPU{Name: "B200", TFLOPS: 2250, HBMGBps: 8000, MemGB: 180}, Runtime: "nccl",
	},
	// GB200 NVL72 spec sheet: 72 Blackwell GPUs in one NVLink5 domain (9
	// NVLink switch trays, 130 TB/s in all = 72 × 1.8 TB/s bidirectional),
	// 72 single-port ConnectX-7 400 Gb/s for the scale-out fabric.
	"nvl72": {
		Name: "nvl72", Nodes: 1, GPUsPerNode: 72,
		Intra:       Fabric{Kind: "nvswitch", GBps: 900, NVLS: true},
		NICsPerNode: 72, NICGbps: 400,
		Network: Network{Kind: "fat-tree", LatencyUs: 0.7, Oversubscription: 1},
		GPU:     GPU{Name: "GB200", TFLOPS: 2500, HBMGBps: 8000, MemGB: 186}, Runtime: "nccl",
	},
	// An example PCIe server: 8 A100 PCIe on PCIe Gen4 x16 (16 GT/s × 16
	// lanes, 128b/130b: 31.5 GB/s each way), two 200 Gb/s NICs.
	"a100-pcie": {
		Name: "a100-pcie", Nodes: 1, GPUsPerNode: 8,
		Intra:       Fabric{Kind: "pcie", GBps: 31.5},
		NICsPerNode: 2, NICGbps: 200,
		Network: Network{Kind: "single-switch", LatencyUs: 0.7, Oversubscription: 1},
		GPU:     GPU{Name: "A100-PCIE-80GB", TFLOPS: 312, HBMGBps: 1935, MemGB: 80}, Runtime: "nccl",
	},
	// goccl's namespace cluster (goccl cluster up --hosts 2 --bw 1gbit):
	// hosts joined by a bridge, each with one veth shaped by tbf. `cluster
	// up` leaves the rate unshaped by default, which no rate models; 1
	// Gbit/s is the top of the rates the issue validates at (set nic_gbps to
	// --bw). Within a host, ranks use shared memory: 5 GB/s and 1 µs per
	// message are the order of internal/algo's tuner measurements on a
	// 2-core host (ring 3.4–5.5 GB/s at 4 MiB, 0.6 µs for 8 bytes); between
	// hosts 20 µs per message is a kernel TCP hop through two veths and the
	// bridge. Both per-message overheads are for `goccl sim calibrate` to
	// measure.
	"goccl-netns": {
		Name: "goccl-netns", Nodes: 2, GPUsPerNode: 2,
		Intra:       Fabric{Kind: "shm", GBps: 5, LatencyUs: 1},
		NICsPerNode: 1, NICGbps: 1,
		Network: Network{Kind: "single-switch", LatencyUs: 20, Oversubscription: 1},
		Runtime: "goccl",
	},
}

// Presets lists the preset names, sorted.
func Presets() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Preset is a copy of the preset of that name.
func Preset(name string) (*Topology, error) {
	p, ok := presets[name]
	if !ok {
		return nil, fmt.Errorf("sim: no preset %q (have %s)", name, strings.Join(Presets(), ", "))
	}
	return &p, nil
}
