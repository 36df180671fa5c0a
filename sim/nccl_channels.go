package sim

import (
	"math"
	"math/bits"
)

// NCCL's channels and chunked pipeline. Every constant below is NCCL's
// (github.com/NVIDIA/nccl, the file and name given), none is fitted to a
// measurement.

const (
	// maxChannels is MAXCHANNELS (src/include/device.h): the most
	// channels (one CTA each) a communicator runs.
	maxChannels = 64
	// maxGraphChannels is the most channels the ring search finds
	// (src/init.cc: the ring graph's maxChannels = MAXCHANNELS/2).
	maxGraphChannels = maxChannels / 2
	// maxNVLSArity is NCCL_MAX_NVLS_ARITY (device.h): the most NVLS heads
	// (one NVLS graph channel per local GPU, src/graph/search.cc).
	maxNVLSArity = 32
	// nvlsChunkBytes is NCCL_NVLS_CHUNKSIZE's default (src/transport/nvls.cc).
	nvlsChunkBytes = 128 << 10
	// nvlsStages are the warp groups of the one-node NVLS all_reduce
	// kernel (src/device/all_reduce.h: scatter, reduce+multicast, gather),
	// each a step behind the other, one loop of chunks per step.
	nvlsStages = 3
	// pciBW is PCI_BW (src/graph/topo.h, GB/s): a ring at or below it runs
	// Simple with 256 threads (tuning.cc, simpleDefaultThreads).
	pciBW = 12
	// patEff is NCCL's model's discount of PAT's bandwidth (tuning.cc:
	// busBw *= .75 for NCCL_ALGO_PAT).
	patEff = 0.75
)

// protoThreads are per protocol the most threads of a channel
// (device.h: NCCL_LL_MAX_NTHREADS 512, NCCL_LL128_MAX_NTHREADS 640,
// NCCL_SIMPLE_MAX_NTHREADS 512) and the bytes per thread below which NCCL
// takes a channel away (src/include/comm.h: NCCL_LL_THREAD_THRESHOLD 8,
// NCCL_LL128_THREAD_THRESHOLD 8, NCCL_SIMPLE_THREAD_THRESHOLD 64; the
// ring's LL threshold is times the ranks, tuning.cc), in protocols' order.
var protoThreads = [...]struct{ max, threshold int }{{512, 8}, {640, 8}, {512, 64}}

// Search speeds (GB/s per channel) of NCCL's topology search, by
// generation, inside a node and across nodes (src/graph/search.cc:
// speedArrayIntra/Inter, sm90SpeedArray*, sm100SpeedArray*).
var (
	speedsIntra = map[string][]float64{
		"":          {40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3},
		"hopper":    {60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3},
		"blackwell": {90, 80, 70, 60, 50, 45, 40, 30, 24, 20, 19, 18},
	}
	speedsInter = map[string][]float64{
		"":          {48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12},
		"hopper":    {48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12},
		"blackwell": {96, 86, 80, 48, 45.1, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12},
	}
)

// ringGraph is the outcome of NCCL's ring search as the model uses it:
// the search's channels and their speed (GB/s each), and the channels the
// communicator runs (comm->nChannels).
type ringGraph struct {
	graph int
	speed float64
	comm  int
}

// searchRing follows ncclTopoCompute (search.cc) for the ring: from the
// fastest speed a channel may have, the most channels × speed that fit
// the GPU's link (total) and, across nodes, the NICs (one channel per NIC
// per speed step); slower speeds are tried while at least half the best
// found (the .49 rule), and it stops once channels × speed reach total.
// Then ncclTopoDupChannels doubles fast channels, connectRings (connect.cc)
// doubles the communicator's, and Hopper and later across nodes double it
// once more below 16 channels with speed above 45 GB/s (connect.cc).
func searchRing(gen string, total float64, nodes int, nics, nicGBps float64) ringGraph {
	speeds, maxBw := speedsIntra[gen], total
	if speeds == nil {
		speeds = speedsIntra[""]
	}
	if nodes > 1 {
		if speeds = speedsInter[gen]; speeds == nil {
			speeds = speedsInter[""]
		}
		maxBw = math.Min(total, nicGBps)
	}
	var g ringGraph
	for _, s := range speeds {
		if s > maxBw || g.graph > 0 && s/g.speed <= .49 {
			continue
		}
		n := int(total / s)
		if nodes > 1 {
			n = min(n, int(nics)*int(nicGBps/s))
		}
		n = min(n, maxGraphChannels)
		if n > 0 && float64(n)*s > float64(g.graph)*g.speed {
			g.graph, g.speed = n, s
		}
		if float64(g.graph)*g.speed >= total {
			break
		}
	}
	if g.graph == 0 { // nothing fits: NCCL's fallback of one slow channel
		g.graph, g.speed = 1, total
	}
	if g.speed >= 25 && !(gen != "" && gen != "ampere" && g.speed < 50 && g.graph > 4) {
		dup := min(2*g.graph, maxGraphChannels)
		g.speed /= float64((dup + g.graph - 1) / g.graph)
		g.graph = dup
	}
	g.comm = min(maxChannels, 2*g.graph)
	if nodes > 1 && gen != "" && gen != "ampere" && g.speed > 45 && g.comm < 16 {
		g.comm = min(maxChannels, 2*g.comm)
	}
	return g
}

// channelsUsed is how many of the ring graph's g communicator channels
// NCCL runs for bytes (enqueue.cc, topoGetAlgoInfo: one channel less while
// bytes < channels × threads × threshold, down to one). Simple has 256
// threads where the ring's search bandwidth (channels × speed) is at most
// PCI_BW (tuning.cc).
func channelsUsed(bytes int64, g ringGraph, proto, ranks int, ring bool) int {
	t := protoThreads[proto]
	thr, threads := t.threshold, t.max
	if ring && proto == 0 {
		thr *= ranks
	}
	if proto == 2 && float64(g.graph)*g.speed <= pciBW {
		threads = 256
	}
	nc := g.comm
	for nc >= 2 && float64(bytes) < float64(nc)*float64(threads)*float64(thr) {
		nc--
	}
	return nc
}

// nvlsChunk is the chunk an NVLS all_reduce moves per head and channel
// (enqueue.cc, calcCollChunking, NCCL_ALGO_NVLS): NCCL_NVLS_CHUNKSIZE,
// halved to 64, 32 and 16 KiB below 64, 8 and 2 × (channels × heads ×
// chunk) bytes.
func nvlsChunk(bytes int64, channels, heads int) int64 {
	ops := int64(channels * heads)
	c := int64(nvlsChunkBytes)
	for _, s := range [...]struct{ mul, to int64 }{{64, 64 << 10}, {8, 32 << 10}, {2, 16 << 10}} {
		if bytes < s.mul*ops*c && c > s.to {
			c = s.to
		}
	}
	return c
}

// nvlsChannels is NCCL's number of NVLS channels (nvls.cc:
// NVLS_NCHANNELS_SM90 16; Blackwell NVLS_NCHANNELS_SM100_NVL 24 on one
// node, NVLS_NCHANNELS_SM100 32 across nodes).
func nvlsChannels(gpu string, nodes int) int {
	if generation(gpu) != "blackwell" {
		return 16
	}
	if nodes > 1 {
		return 32
	}
	return 24
}

// nvlsHeads are the NVLS graph's channels: one per GPU of the node, at
// most NCCL_MAX_NVLS_ARITY (search.cc).
func nvlsHeads(perNode int) int { return min(perNode, maxNVLSArity) }

// nvlsFillBytes is what the one-node NVLS pipeline adds to the bytes it
// moves: its stages run one loop apart, so the first loop's later stages
// and the last loop's earlier ones do not overlap another loop: (stages −
// 1) loops of channels × heads × chunk bytes, or of the whole size when
// it is under one loop (each channel then runs one short loop).
func nvlsFillBytes(bytes int64, channels, heads int) float64 {
	loop := int64(channels*heads) * nvlsChunk(bytes, channels, heads)
	return float64(nvlsStages-1) * float64(min(bytes, loop))
}

// treeCorrection is NCCL's size correction of the tree's all_reduce
// bandwidth (tuning.cc, treeCorrectionFactor: per protocol, powers of two
// of bytes/64 from 1 to 2^23).
var treeCorrection = [3][24]float64{
	{1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
	{1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
	{.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9},
}

// treeFactor is treeCorrection for bytes (1 outside its range), as
// ncclTopoGetAlgoTime indexes it: log2i(bytes >> 6) below 23.
func treeFactor(bytes int64, proto int) float64 {
	if bytes>>6 == 0 {
		return 1
	}
	l := bits.Len64(uint64(bytes>>6)) - 1
	if l >= 23 {
		return 1
	}
	return treeCorrection[proto][l]
}
