// Package sim predicts the time of collectives on clusters described as
// data (Topology: JSON, or a preset), in closed form, for two runtimes.
//
// Runtime "nccl" (GPU clusters) follows the structure of NCCL's tuning
// model (src/graph/tuning.cc): for each algorithm and protocol a latency
// (a base per call plus a hardware latency per step: NVLink, PCIe or the
// network) and a bandwidth (the links' data rate times the protocol's
// efficiency: LL 1/2, LL128 120/128, Simple 1), time = latency +
// bytes/bandwidth, and the fastest pair runs (LL capped, on one node, at
// the bus bandwidth NCCL's model allows it per GPU architecture). Link
// rates are the published ones (NVIDIA's DGX/HGX/NVL72 datasheets: NVLink
// generation, PCIe generation, NIC rate; cited per preset) times the share
// that carries data (NCCL's topology rates per NVLink in src/graph/topo.h,
// the InfiniBand packet headers). Nothing is fitted to measurements. Algorithms: ring (all_reduce 2(n-1) steps moving 2(n-1)/n of
// the bytes per GPU, the gather-like kinds n-1 steps and (n-1)/n; across
// nodes the ring's bus bandwidth is the smaller of a GPU's link and its
// node's NICs, since every channel's ring crosses each node boundary once),
// double binary tree across nodes (a chain inside each), NVLS (in-switch
// reduction: each GPU sends and receives the bytes once, at NCCL's NVLS
// efficiency; NVLSTree across nodes), CollNet/SHARP (network.sharp),
// pairwise alltoall and p2p sendrecv.
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
// Not modelled yet: NCCL's channels and its chunked pipeline (the fill of
// the pipeline, its tree correction factors, LL128's per-channel caps,
// LL's cap across nodes, the ring's multi-node plateau), so mid sizes
// (64 KiB–64 MiB) come out faster than measured; PAT and NVLS for all_gather/reduce_scatter; the reduction's
// arithmetic (γ); topology shapes beyond the oversubscription factor
// (fat-tree tiers, rails, dragonfly, ECMP collisions); contention between
// jobs; the flow and packet levels, training steps and inference.
package sim
