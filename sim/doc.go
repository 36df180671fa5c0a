// Package sim predicts the time of collectives, training steps and
// inference on clusters described as data (Topology: JSON, a preset or a
// topology dump), for two runtimes; its collectives in closed form first.
//
// Runtime "nccl" (GPU clusters) follows the structure of NCCL's tuning
// model (src/graph/tuning.cc): for each algorithm and protocol a latency
// (a base per call plus a hardware latency per step: NVLink, PCIe or the
// network) and a bandwidth (the links' data rate times the protocol's
// efficiency: LL 1/2, LL128 0.92 on the ring, Simple 1), time = latency +
// bytes/bandwidth, and the fastest pair runs (LL capped, on one node, at
// the bus bandwidth NCCL's model allows it per GPU architecture). Link
// rates are the published ones (NVIDIA's DGX/HGX/NVL72 datasheets: NVLink
// generation, PCIe generation, NIC rate; cited per preset) times the share
// that carries data (NCCL's topology rates per NVLink in src/graph/topo.h,
// the InfiniBand packet headers). Nothing is fitted to measurements.
// Algorithms: ring (all_reduce 2(n-1) steps moving 2(n-1)/n of the bytes
// per GPU, the gather-like kinds n-1 steps and (n-1)/n; across nodes the
// ring's bus bandwidth is the smaller of a GPU's link and the NICs its
// channels cross, one per search channel), double binary tree across
// nodes (a chain inside each; NCCL's tree refinements and its per-size
// treeCorrectionFactor), NVLS (in-switch reduction, one node: each GPU's
// bytes leave and enter it once at NCCL's NVLS efficiency × (heads −
// 1)/heads; NVLSTree across nodes; all_gather and reduce_scatter on one
// node), PAT (all_gather, reduce_scatter with one GPU per node),
// CollNet/SHARP (network.sharp), pairwise alltoall and p2p sendrecv.
//
// Channels and pipeline (nccl_channels.go): the ring's channels follow
// NCCL's topology search (search.cc's speeds per generation, the channel
// duplications of search.cc and connect.cc, at most MAXCHANNELS); for
// small sizes NCCL runs fewer of them (enqueue.cc's thread thresholds), and
// the ring and tree then get that share of the links. NVLS on one node is
// a three-stage pipeline (scatter, reduce, gather) over loops of channels
// × heads × chunk bytes, the chunk shrinking with the size as enqueue.cc
// sets it: its fill adds two loops' time. LL128 and the tree have NCCL's
// per-channel caps (perChMax*Bws).
//
// Runtime "goccl" (goccl's own clusters) uses the runtime's choice and
// cost model, one code path with the library: internal/algo's Selector
// chooses the schedule from the Facts Init would settle (GocclFacts), and
// its CostModel (Hockney α-β per round, hosts' links shared by their
// ranks) times it from the topology's link costs (GocclCosts); the
// schedules the cost model lacks (direct, tree AllReduce, CollNet,
// pairwise AllToAll, send/recv) are timed by the same terms here. The cost
// model works its rounds out host by host (quadratic in hosts: about 5 ms
// at 512 hosts), which suits goccl's clusters, not 100k ranks.
//
// Bandwidths follow nccl-tests (doc/PERFORMANCE.md): algbw = bytes/time,
// busbw = algbw × BusFactor.
//
// Beyond collectives in closed form: the flow level (fabric.go, flow.go:
// the topology as a graph of links, network shapes, max-min fair sharing,
// ECMP, several jobs), the training step (step*.go, pipeline.go), its
// search (plan.go), inference and KV-cache transfers (serve.go), trace
// replay (replay.go; Chakra ET in package chakra), topology dumps
// (import.go), calibration on goccl's own clusters (calibrate.go) and the
// validation against published and measured rows (validate*.go).
// docs/sim.md documents each with its sources and validation.
//
// Not modelled yet: the fill of the ring's and the tree's pipelines
// beyond NCCL's latency terms (a symmetric ring has no bubble; the ramp of
// an A100 ring between 1 and 16 MB, 38–53 % slower measured than
// predicted, is not explained by NCCL's channels or chunks), NVLSTree's
// and NVLS all_gather's fill, LL's cap across nodes (it depends on the
// CPU), the threads NCCL takes away below one channel's threshold; the
// reduction's arithmetic (γ); network shapes in the closed form (the flow
// level has them); a packet level; matmul efficiency by shape in the
// training step.
package sim
