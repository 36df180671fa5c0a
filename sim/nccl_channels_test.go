package sim

import "testing"

func TestSearchRingByHand(t *testing.T) {
	// Values worked out from search.cc's rules by hand:
	// A100: 240 GB/s: 6 × 40 fills it; dup → 12 × 20; comm 24.
	// H100: 360: 6 × 60 (50, 40, 30 give no more); dup → 12 × 30; comm 24.
	// B200: 720: 8 × 90; dup → 16 × 45; comm 32.
	// DGX H100 across nodes, 8 NICs of 49.7: 48 fits 7 in 360 (336); 45
	// fits 8 (one a NIC) = 360, which stops it; no dup (Hopper, 45 < 50,
	// 8 > 4); comm 16 (speed not above 45: no Hopper doubling).
	// PCIe 24: 2 × 12; no dup (< 25); comm 4.
	nic := 50 * ibPayload
	for _, c := range []struct {
		name        string
		gen         string
		total       float64
		nodes       int
		nics        float64
		graph, comm int
		speed       float64
	}{
		{"a100", "ampere", 240, 1, 8, 12, 24, 20},
		{"h100", "hopper", 360, 1, 8, 12, 24, 30},
		{"b200", "blackwell", 720, 1, 8, 16, 32, 45},
		{"h100×2", "hopper", 360, 2, 8, 8, 16, 45},
		{"pcie", "", 24, 1, 1, 2, 4, 12},
	} {
		g := searchRing(c.gen, c.total, c.nodes, c.nics, nic)
		if g.graph != c.graph || g.comm != c.comm || g.speed != c.speed {
			t.Errorf("%s: got %+v, want %d × %g, comm %d", c.name, g, c.graph, c.speed, c.comm)
		}
	}
}

func TestChannelsUsedByHand(t *testing.T) {
	g := ringGraph{graph: 12, speed: 30, comm: 24}
	for _, c := range []struct {
		bytes       int64
		proto, want int
		ring        bool
	}{
		{1 << 20, 0, 24, true},   // LL ring, 8 ranks: 512 × 64 = 32 KiB a channel: 1 MiB keeps all 24
		{64 << 10, 0, 2, true},   // 64 KiB: 2 channels
		{64<<10 - 1, 0, 1, true}, // just under: 1
		{64 << 10, 0, 16, false}, // LL tree: 512 × 8 = 4 KiB a channel
		{100 << 10, 1, 20, true}, // LL128: 640 × 8 = 5 KiB: 100 KiB keeps 20
		{8, 2, 1, true},          // Simple: 8 bytes, 1
	} {
		if got := channelsUsed(c.bytes, g, c.proto, 8, c.ring); got != c.want {
			t.Errorf("%d bytes, %s, ring %v: %d channels, want %d", c.bytes, protocols[c.proto].name, c.ring, got, c.want)
		}
	}
	// Simple at PCI_BW or below has 256 threads: 2 × 12 × 64 = 32 KiB.
	if got := channelsUsed(48<<10, ringGraph{graph: 1, speed: 12, comm: 2}, 2, 8, true); got != 2 {
		t.Errorf("slow ring, 48 KiB: %d channels, want 2 (256 threads)", got)
	}
}

func TestNVLSChunkByHand(t *testing.T) {
	// 16 channels × 8 heads = 128 concurrent chunks.
	for _, c := range []struct{ bytes, want int64 }{
		{8 << 30, 128 << 10}, // not under 64 × 128 × 128 KiB = 1 GiB
		{1 << 30, 128 << 10},
		{1<<30 - 1, 64 << 10},
		{64 << 20, 64 << 10}, // not under 8 × 128 × 64 KiB = 64 MiB
		{16 << 20, 32 << 10}, // not under 2 × 128 × 32 KiB = 8 MiB
		{4 << 20, 16 << 10},
	} {
		if got := nvlsChunk(c.bytes, 16, 8); got != c.want {
			t.Errorf("%d bytes: chunk %d, want %d", c.bytes, got, c.want)
		}
	}
	// The fill: 2 loops, a loop 128 chunks; or the whole size under a loop.
	if got := nvlsFillBytes(4<<20, 16, 8); got != 2*128*16<<10 {
		t.Errorf("4 MiB fill %v, want %v", got, 2*128*16<<10)
	}
	if got := nvlsFillBytes(1<<20, 16, 8); got != 2<<20 {
		t.Errorf("1 MiB fill %v, want 2 MiB", got)
	}
}

func TestTreeFactorByHand(t *testing.T) {
	for _, c := range []struct {
		bytes int64
		proto int
		want  float64
	}{
		{32, 2, 1},           // under 64 bytes: none
		{64, 2, .9},          // 2^0
		{1e6, 2, .5},         // 15625 → 2^13
		{64 << 10, 0, .6},    // 2^10
		{64 << 23, 1, 1},     // 2^23: past the table
		{64<<23 - 1, 1, 1.0}, // 2^22, the last entry
		{64 << 16, 2, 0.7},   // Simple at 2^16
		{64 << 17, 2, 0.8},   // 2^17
		{64 << 12, 1, 0.6},   // LL128 at 2^12
		{64 << 13, 0, 0.4},   // LL at 2^13
	} {
		if got := treeFactor(c.bytes, c.proto); got != c.want {
			t.Errorf("%d bytes, %s: %v, want %v", c.bytes, protocols[c.proto].name, got, c.want)
		}
	}
}

func TestRingFewChannelsByHand(t *testing.T) {
	// DGX H100, 64 KiB ring/LL: 2 of 24 channels run, 360 × 2/24 × 1/2 =
	// 15 GB/s; 6.6 + 14 × 0.6 = 15 µs; 65.536 kB × 1.75 / 15.
	tp, err := Preset("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	r, err := tp.Collective(Collective{Kind: "all_reduce", Bytes: 64 << 10, Algo: "ring"})
	if err != nil {
		t.Fatal(err)
	}
	if want := 15 + 65.536*1.75/15; r.Proto != "LL" || !near(r.TimeUs, want) {
		t.Errorf("got %+v, want ring/LL %v µs", r, want)
	}
	// The same size by tree/LL: 16 channels (4 KiB each): 360 × 16/24 ×
	// .92 / 3.8 × .6 (correction at 2^10) × .5; latency 6.8 + 2 × 7 × 0.6.
	r, err = tp.Collective(Collective{Kind: "all_reduce", Bytes: 64 << 10, Algo: "tree"})
	if err != nil {
		t.Fatal(err)
	}
	if want := 15.2 + 65.536/(360*16/24*.92/3.8*.6*.5); r.Proto != "LL" || !near(r.TimeUs, want) {
		t.Errorf("tree: got %+v, want tree/LL %v µs", r, want)
	}
}

func TestPATByHand(t *testing.T) {
	// 8 nodes of 1 GPU (pcieBox with 1 GPU a node), all_gather of 8 MB:
	// 8 + log2(8) × 15/3.5 + 8 × 2.8 µs, 7/8 of 8 MB through the NIC at .75.
	tp := pcieBox(8, false)
	tp.GPUsPerNode = 1
	r, err := tp.Collective(Collective{Kind: "all_gather", Bytes: 8e6, Algo: "pat"})
	if err != nil {
		t.Fatal(err)
	}
	want := 8 + 3*15/3.5 + 8*2.8 + 8000*7.0/8/(0.75*nicData)
	if r.Algo != "pat" || r.Proto != "Simple" || !near(r.TimeUs, want) {
		t.Errorf("got %+v, want pat %v µs", r, want)
	}
	if _, err := pcieBox(2, false).Collective(Collective{Kind: "all_gather", Bytes: 8, Algo: "pat"}); err == nil {
		t.Error("PAT with 4 GPUs a node: no error")
	}
}

func TestNVLSAllGatherByHand(t *testing.T) {
	// DGX H100 all_gather of 1 GB by NVLS: 25 µs + 7/8 GB / 267.75 GB/s.
	tp, err := Preset("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	r, err := tp.Collective(Collective{Kind: "all_gather", Bytes: 1e9, Algo: "nvls"})
	if err != nil {
		t.Fatal(err)
	}
	if want := 25 + 1e6*7/8/267.75; !near(r.TimeUs, want) {
		t.Errorf("got %+v, want %v µs", r, want)
	}
	if _, err := tp.WithNodes(2).Collective(Collective{Kind: "all_gather", Bytes: 8, Algo: "nvls"}); err == nil {
		t.Error("NVLS all_gather across nodes: no error")
	}
}
