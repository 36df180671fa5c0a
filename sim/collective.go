package sim

import (
	"fmt"
	"math"
	"strings"
)

// Collective is one operation to predict (nccl-tests semantics: Bytes is
// the size column, i.e. the per-rank input for all_reduce/broadcast/reduce,
// the whole output for all_gather, the whole input for reduce_scatter and
// alltoall).
type Collective struct {
	Kind  string // all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv
	Bytes int64
	Algo  string // "" = the runtime's own choice; else ring, tree, nvls, collnet, rhd, rd, direct, hier, pairwise
	Ranks int    // 0 = every GPU of the topology
	// MapBy places the ranks on the nodes: "" or "slot" fills node 0,
	// then node 1, ... (mpirun's --map-by slot, goccl run -H's order);
	// "node" deals them round-robin over the nodes the ranks need (--map-by
	// node). Only goccl's runtime is modelled as following the rank order
	// (its rank-ordered rings); NCCL orders its rings and trees by the
	// topology, so for it the placement changes nothing.
	MapBy string
}

// Result is a prediction.
type Result struct {
	Algo, Proto  string // what ran (Proto: NCCL protocol LL/LL128/Simple; "" for goccl)
	TimeUs       float64
	AlgBW, BusBW float64 // GB/s, nccl-tests definitions (doc/PERFORMANCE.md)
}

// Kinds are the collectives Collective predicts.
var Kinds = []string{"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv"}

// Algos are the algorithm names Collective.Algo may hold (p2p: sendrecv's
// one send to the next rank).
var Algos = []string{"ring", "tree", "nvls", "collnet", "pat", "rhd", "rd", "direct", "hier", "pairwise", "p2p"}

// BusFactor is nccl-tests' ratio of bus bandwidth to algorithm bandwidth
// (doc/PERFORMANCE.md): all_reduce 2(n-1)/n, all_gather, reduce_scatter and
// alltoall (n-1)/n, the others 1. 0 for an unknown kind or n < 1.
func BusFactor(kind string, ranks int) float64 {
	if ranks < 1 {
		return 0
	}
	n := float64(ranks)
	switch kind {
	case "all_reduce":
		return 2 * (n - 1) / n
	case "all_gather", "reduce_scatter", "alltoall":
		return (n - 1) / n
	case "broadcast", "reduce", "sendrecv":
		return 1
	}
	return 0
}

// layout is where a collective's ranks sit: the first ranks fill node 0,
// the next node 1, and so on.
type layout struct {
	ranks, nodes, perNode int     // perNode: the most ranks on one node
	nics                  float64 // NICs those ranks use per node (rails: one per GPU at most)
}

func (t *Topology) layout(ranks int) layout {
	nodes := (ranks + t.GPUsPerNode - 1) / t.GPUsPerNode
	per := min(ranks, t.GPUsPerNode)
	nics := float64(t.NICsPerNode)
	if per < t.GPUsPerNode && t.NICsPerNode > 0 {
		nics = math.Max(1, math.Ceil(nics*float64(per)/float64(t.GPUsPerNode)))
	}
	return layout{ranks: ranks, nodes: nodes, perNode: per, nics: nics}
}

// Collective predicts c on t with t's runtime: its algorithm (c.Algo or the
// runtime's choice), time and bandwidths. Errors name the bad value.
func (t *Topology) Collective(c Collective) (Result, error) {
	if err := t.Validate(); err != nil {
		return Result{}, err
	}
	if !oneOf(c.Kind, Kinds) {
		return Result{}, fmt.Errorf("sim: collective kind %q: not one of %s", c.Kind, strings.Join(Kinds, ", "))
	}
	if c.Algo != "" && !oneOf(c.Algo, Algos) {
		return Result{}, fmt.Errorf("sim: %s algo %q: not one of %s", c.Kind, c.Algo, strings.Join(Algos, ", "))
	}
	if c.Bytes < 0 {
		return Result{}, fmt.Errorf("sim: %s bytes %d: negative", c.Kind, c.Bytes)
	}
	ranks := c.Ranks
	if ranks == 0 {
		ranks = t.GPUs()
	}
	if ranks < 1 || ranks > t.GPUs() {
		return Result{}, fmt.Errorf("sim: %s ranks %d: topology %q has 1 to %d GPUs", c.Kind, c.Ranks, t.Name, t.GPUs())
	}
	if c.Kind == "sendrecv" && ranks < 2 {
		return Result{}, fmt.Errorf("sim: sendrecv ranks %d: needs 2 or more", ranks)
	}
	c.Ranks = ranks
	if c.MapBy != "" && c.MapBy != "slot" && c.MapBy != "node" {
		return Result{}, fmt.Errorf("sim: %s map-by %q: want slot or node", c.Kind, c.MapBy)
	}
	var r Result
	var err error
	if t.Runtime == "goccl" {
		r, err = t.gocclCollective(c)
	} else {
		r, err = t.ncclCollective(c)
	}
	if err != nil {
		return Result{}, err
	}
	if r.TimeUs > 0 {
		r.AlgBW = float64(c.Bytes) / (r.TimeUs * 1e-6) / 1e9
	}
	r.BusBW = r.AlgBW * BusFactor(c.Kind, ranks)
	return r, nil
}

// errAlgo is the error for an algorithm that cannot run c here.
func (t *Topology) errAlgo(c Collective, why string) error {
	return fmt.Errorf("sim: %s algo %q on topology %q (%d ranks, runtime %s): %s", c.Kind, c.Algo, t.Name, c.Ranks, t.Runtime, why)
}
