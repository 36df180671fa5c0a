package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/goccl/goccl/internal/algo"
)

// near reports whether got is within 1e-9 relative of want.
func near(got, want float64) bool { return math.Abs(got-want) <= 1e-9*math.Abs(want) }

// pcieBox is 4 GPUs on PCIe Gen4 (31.5 GB/s, 12/15.75 of it data: 24
// GB/s) per node, one 100 Gb/s NIC (12.5 GB/s, 4096/4122 of it data), 1
// µs of network latency.
func pcieBox(nodes int, sharp bool) *Topology {
	return &Topology{Name: "pcie-box", Nodes: nodes, GPUsPerNode: 4,
		Intra:       Fabric{Kind: "pcie", GBps: 31.5},
		NICsPerNode: 1, NICGbps: 100,
		Network: Network{Kind: "single-switch", LatencyUs: 1, Oversubscription: 1, SHARP: sharp},
		Runtime: "nccl"}
}

const nicData = 12.5 * 4096 / 4122 // GB/s

func TestRingAllReduceByHand(t *testing.T) {
	// One node, 4 GPUs, 24 MB. Simple: 8.4 µs + 2·3 steps × 5.7 µs (PCIe)
	// = 42.6 µs, plus 24,000 kB × 2·3/4 / 24 GB/s = 1500 µs. LL: 6.6 + 6 ×
	// 1.0 + 24,000 × 1.5 / 12 = 3012.6 µs. LL128 is off on PCIe.
	r, err := pcieBox(1, false).Collective(Collective{Kind: "all_reduce", Bytes: 24e6, Algo: "ring"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Algo != "ring" || r.Proto != "Simple" || !near(r.TimeUs, 1542.6) {
		t.Errorf("got %+v, want ring/Simple 1542.6 µs", r)
	}
	// 8 bytes: LL, 12.6 µs plus 8e-3 × 1.5 / 3 µs: one of the 4 channels
	// (the search's 2 × 12 GB/s, doubled by connectRings) runs, a quarter
	// of LL's 12 GB/s.
	r, err = pcieBox(1, false).Collective(Collective{Kind: "all_reduce", Bytes: 8})
	if err != nil {
		t.Fatal(err)
	}
	if r.Proto != "LL" || !near(r.TimeUs, 12.6+8e-3*1.5/3) {
		t.Errorf("8 bytes: got %+v, want LL %v µs", r, 12.6+8e-3*1.5/3)
	}
}

func TestRingAcrossNodesByHand(t *testing.T) {
	// 2 nodes of 4: 14 steps, 2 of them across nodes (14 µs + 1 µs each).
	// Simple: (8.4 + 12 × 5.7 + 2 × 15) × 1.4 (NCCL's ring plateau across
	// nodes) = 149.52 µs; the bus bandwidth is the NIC's (below the GPU's
	// 24 GB/s), on both channels: 1 MB × 2·7/8 / nicData.
	r, err := pcieBox(2, false).Collective(Collective{Kind: "all_reduce", Bytes: 1e6, Algo: "ring"})
	if err != nil {
		t.Fatal(err)
	}
	want := 106.8*1.4 + 1000*1.75/nicData
	if r.Proto != "Simple" || !near(r.TimeUs, want) {
		t.Errorf("got %+v, want Simple %v µs", r, want)
	}
}

func TestTreeByHand(t *testing.T) {
	// 4 nodes of 1 GPU. Simple: 8.4 + 2·(0 intra steps + ⌈log2 4⌉ = 2
	// network steps × 15 µs) = 68.4 µs; bandwidth 0.5 × 0.92 × nicData ×
	// 0.5 (NCCL's tree correction at 1 MB: 2^13 × 64 bytes).
	tp := pcieBox(4, false)
	tp.GPUsPerNode = 1
	r, err := tp.Collective(Collective{Kind: "all_reduce", Bytes: 1e6, Algo: "tree"})
	if err != nil {
		t.Fatal(err)
	}
	want := 68.4 + 1000/(0.5*0.92*nicData*0.5)
	if r.Algo != "tree" || r.Proto != "Simple" || !near(r.TimeUs, want) {
		t.Errorf("got %+v, want tree/Simple %v µs", r, want)
	}
}

func TestCollNetByHand(t *testing.T) {
	// 2 nodes of 4, SHARP: 8.4 + 2·3 × 5.7 (reduce-scatter and all-gather
	// in the node) + 2 × 15 (up and down the switch) = 72.6 µs; bandwidth
	// min(24 × 4/6 = 16, nicData).
	r, err := pcieBox(2, true).Collective(Collective{Kind: "all_reduce", Bytes: 1e6, Algo: "collnet"})
	if err != nil {
		t.Fatal(err)
	}
	want := 72.6 + 1000/nicData
	if r.Algo != "collnet" || r.Proto != "Simple" || !near(r.TimeUs, want) {
		t.Errorf("got %+v, want collnet/Simple %v µs", r, want)
	}
	if _, err := pcieBox(2, false).Collective(Collective{Kind: "all_reduce", Bytes: 1e6, Algo: "collnet"}); err == nil || !strings.Contains(err.Error(), "network.sharp") {
		t.Errorf("collnet without SHARP: err %v, want one naming network.sharp", err)
	}
}

func TestNVLSByHand(t *testing.T) {
	// DGX H100: 450 GB/s × 0.8 (NVLink data) × 0.85 (NVLS, Hopper) ×
	// 7/8 (heads) = 267.75 GB/s, each GPU's 1 GB once each way, plus the
	// fill: 2 loops of 16 channels × 8 heads × 64 KiB (1 GB is under 64 ×
	// 128 × 128 KiB, not under 8 × 128 × 64 KiB), plus 25 µs.
	tp, err := Preset("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	r, err := tp.Collective(Collective{Kind: "all_reduce", Bytes: 1e9, Algo: "nvls"})
	if err != nil {
		t.Fatal(err)
	}
	if want := 25 + (1e6+2*8388.608)/267.75; !near(r.TimeUs, want) {
		t.Errorf("got %+v, want %v µs", r, want)
	}
}

// shmHost is one goccl host of 4 ranks over shared memory: 1 µs and 5
// GB/s per message.
func shmHost() *Topology {
	return &Topology{Name: "shm", Nodes: 1, GPUsPerNode: 4, Intra: Fabric{Kind: "shm", GBps: 5, LatencyUs: 1}, Runtime: "goccl"}
}

func TestGocclAllReduceByHand(t *testing.T) {
	// P = 4, α = 1 µs, nβ = 100 kB / 5 GB/s = 20 µs (Thakur et al.):
	// RHD 2 lg P α + 2(P-1)/P nβ = 4 + 30; RD lg P (α + nβ) = 42; ring
	// 2(P-1)α + 2(P-1)/P nβ = 6 + 30.
	for algo, want := range map[string]float64{"rhd": 34, "rd": 42, "ring": 36} {
		r, err := shmHost().Collective(Collective{Kind: "all_reduce", Bytes: 1e5, Algo: algo})
		if err != nil {
			t.Fatal(err)
		}
		if r.Algo != algo || r.Proto != "" || !near(r.TimeUs, want) {
			t.Errorf("%s: got %+v, want %v µs", algo, r, want)
		}
	}
}

func TestGocclChoiceIsSelectors(t *testing.T) {
	tp, err := Preset("goccl-netns")
	if err != nil {
		t.Fatal(err)
	}
	tp = tp.WithNodes(3)
	// The facts built here from the topology's numbers, not by GocclFacts.
	hostOf := []int{0, 0, 1, 1, 2, 2}
	costs := algo.Costs{
		Intra: algo.LinkCost{Alpha: tp.Intra.LatencyUs * 1e-6, Beta: 1 / (tp.Intra.GBps * 1e9)},
		Inter: algo.LinkCost{Alpha: tp.Network.LatencyUs * 1e-6, Beta: 1 / (tp.NICGbps * 1e9 / 8 * 1448 / 1514)},
	}
	hierMin, ok := algo.HierCrossovers(hostOf, costs)
	if !ok {
		t.Fatal("costs not valid")
	}
	sel := algo.NewSelector(algo.Facts{Size: 6, HostOf: hostOf, DirectMin: algo.DirectMinBytes, Tuning: algo.Tuning{Costs: costs, HierMin: hierMin}})
	kinds := map[string]algo.Kind{"all_reduce": algo.KindAllReduce, "all_gather": algo.KindAllGather,
		"reduce_scatter": algo.KindReduceScatter, "broadcast": algo.KindBroadcast, "alltoall": algo.KindAllToAll}
	seen := map[string]bool{}
	for kind, k := range kinds {
		for n := 8; n <= 1<<28; n *= 8 {
			r, err := tp.Collective(Collective{Kind: kind, Bytes: int64(n)})
			if err != nil {
				t.Fatal(err)
			}
			if want := sel.Choose(k, n, false).Algo; r.Algo != string(want) {
				t.Errorf("%s %d bytes: sim ran %s, the Selector chooses %s", kind, n, r.Algo, want)
			}
			seen[kind+" "+r.Algo] = true
		}
	}
	if !seen["all_reduce hier"] || !seen["all_reduce rd"] {
		t.Errorf("all_reduce choices %v: want both rd and hier over the sizes", seen)
	}
}

func TestBusFactor(t *testing.T) {
	for _, c := range []struct {
		kind string
		n    int
		want float64
	}{{"all_reduce", 8, 1.75}, {"all_gather", 8, 0.875}, {"reduce_scatter", 4, 0.75}, {"alltoall", 2, 0.5},
		{"broadcast", 8, 1}, {"reduce", 8, 1}, {"sendrecv", 8, 1}, {"all_reduce", 1, 0}, {"bogus", 8, 0}} {
		if got := BusFactor(c.kind, c.n); got != c.want {
			t.Errorf("BusFactor(%s, %d) = %v, want %v", c.kind, c.n, got, c.want)
		}
	}
	tp, _ := Preset("dgx-a100")
	r, err := tp.Collective(Collective{Kind: "all_gather", Bytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if alg := float64(1<<30) / r.TimeUs / 1e3; !near(r.AlgBW, alg) || !near(r.BusBW, alg*7/8) {
		t.Errorf("got %+v, want algbw %v busbw %v", r, alg, alg*7/8)
	}
}

func TestPresetsValidateAndRoundTrip(t *testing.T) {
	names := Presets()
	if len(names) < 8 {
		t.Fatalf("Presets() = %v", names)
	}
	for _, name := range names {
		p, err := Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, tp := range []*Topology{p, p.WithNodes(4)} {
			if err := tp.Validate(); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			b, err := json.Marshal(tp)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Load(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("%s: Load(%s): %v", name, b, err)
			}
			if !reflect.DeepEqual(back, tp) {
				t.Errorf("%s: round trip %+v, want %+v", name, back, tp)
			}
		}
		if _, err := p.Collective(Collective{Kind: "all_reduce", Bytes: 1 << 20}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Preset("dgx-z9"); err == nil || !strings.Contains(err.Error(), "dgx-h100") {
		t.Errorf("unknown preset: err %v, want one listing the presets", err)
	}
}

func TestLoadErrors(t *testing.T) {
	good := `{"name":"x","nodes":1,"gpus_per_node":2,"intra":{"kind":"shm","GBps":5,"latency_us":1},"runtime":"goccl"`
	if _, err := Load(strings.NewReader(good + "}")); err != nil {
		t.Fatalf("good topology: %v", err)
	}
	for in, want := range map[string]string{
		good + `,"nic_speed":1}`:                                 `"nic_speed"`,
		strings.Replace(good, `"nodes":1`, `"nodes":0`, 1) + "}": "nodes = 0",
		strings.Replace(good, `"shm"`, `"wire"`, 1) + "}":        `intra.kind = "wire"`,
		strings.Replace(good, `"GBps":5`, `"GBps":-1`, 1) + "}":  "intra.GBps = -1",
		good + `,"intra":{"kind":"pcie","GBps":5,"nvls":true}}`:  "intra.nvls",
		strings.Replace(good, `"nodes":1`, `"nodes":2`, 1) + "}": "nics_per_node = 0",
		strings.Replace(good, `"goccl"`, `"mpi"`, 1) + "}":       `runtime = "mpi"`,
		good + "} {}": "after the JSON",
	} {
		_, err := Load(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%s): err %v, want one containing %s", in, err, want)
		}
	}
}

func TestCollectiveErrors(t *testing.T) {
	a100, _ := Preset("dgx-a100")
	netns, _ := Preset("goccl-netns")
	for _, c := range []struct {
		tp   *Topology
		c    Collective
		want string
	}{
		{a100, Collective{Kind: "allreduce", Bytes: 8}, `"allreduce"`},
		{a100, Collective{Kind: "all_reduce", Bytes: 8, Algo: "magic"}, `"magic"`},
		{a100, Collective{Kind: "all_reduce", Bytes: 8, Algo: "nvls"}, "intra.nvls"},
		{a100, Collective{Kind: "all_reduce", Bytes: 8, Algo: "rhd"}, `"rhd"`},
		{a100, Collective{Kind: "all_reduce", Bytes: -1}, "bytes -1"},
		{a100, Collective{Kind: "all_reduce", Bytes: 8, Ranks: 9}, "ranks 9"},
		{a100, Collective{Kind: "sendrecv", Bytes: 8, Ranks: 1}, "ranks 1"},
		{netns, Collective{Kind: "all_reduce", Bytes: 8, Algo: "direct"}, "needs"},
		{netns, Collective{Kind: "all_gather", Bytes: 8, Algo: "rhd"}, `"rhd"`},
		{&Topology{Name: "bad"}, Collective{Kind: "all_reduce", Bytes: 8}, "nodes = 0"},
	} {
		_, err := c.tp.Collective(c.c)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %+v: err %v, want one containing %s", c.tp.Name, c.c, err, c.want)
		}
	}
}

func TestEveryKindEveryRuntime(t *testing.T) {
	for _, name := range []string{"dgx-h100", "goccl-netns", "a100-pcie"} {
		p, _ := Preset(name)
		for _, tp := range []*Topology{p, p.WithNodes(4)} {
			for _, kind := range Kinds {
				var last float64
				for _, n := range []int64{0, 8, 1 << 20, 1 << 30} {
					r, err := tp.Collective(Collective{Kind: kind, Bytes: n})
					if err != nil {
						t.Fatalf("%s %s %d: %v", tp.Name, kind, n, err)
					}
					if !(r.TimeUs >= last) || math.IsInf(r.TimeUs, 0) || r.Algo == "" {
						t.Errorf("%s %s %d bytes: %+v after %v µs", tp.Name, kind, n, r, last)
					}
					last = r.TimeUs
				}
			}
		}
	}
}

// BenchmarkCollective131k is one closed-form all_reduce at 131,072 ranks
// (16,384 DGX H100 nodes); the issue asks for under 1 ms.
func BenchmarkCollective131k(b *testing.B) {
	p, _ := Preset("dgx-h100")
	tp := p.WithNodes(16384)
	for b.Loop() {
		if _, err := tp.Collective(Collective{Kind: "all_reduce", Bytes: 1 << 30}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGoccl1k is goccl's runtime choice and cost model at 1,024
// ranks (the cost model works its rounds out per rank).
func BenchmarkGoccl1k(b *testing.B) {
	p, _ := Preset("goccl-netns")
	tp := p.WithNodes(512)
	for b.Loop() {
		if _, err := tp.Collective(Collective{Kind: "all_reduce", Bytes: 1 << 20}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestLLCapByHand(t *testing.T) {
	// DGX H100, 1 MiB ring: LL at 360 × 1/2 = 180 GB/s is over Hopper's
	// single-node LL cap of 141 GB/s: 6.6 + 14 × 0.6 + 1048.576 kB × 1.75
	// / 141. LL128 (14 + 14 × 1.9 + 1835 / 337.5) and Simple (8.4 + 14 ×
	// 3.4 + 1835 / 360) are slower.
	tp, err := Preset("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	r, err := tp.Collective(Collective{Kind: "all_reduce", Bytes: 1 << 20, Algo: "ring"})
	if err != nil {
		t.Fatal(err)
	}
	if want := 15 + 1048.576*1.75/141; r.Proto != "LL" || !near(r.TimeUs, want) {
		t.Errorf("got %+v, want LL %v µs", r, want)
	}
}
