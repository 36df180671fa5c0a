package sim

import (
	"fmt"
	"math"
)

// A parallel group's ranks sit at a stride in Megatron's rank order (TP
// fastest, then CP, then DP, then PP: Megatron-LM parallel_state.py's
// default "tp-cp-ep-dp-pp"). groupTopology is the topology one group sees:
// its ranks per node and, across nodes, its share of each node's NICs
// (the node's other groups run the same collective at the same time, so
// each GPU gets NICs·rate/GPUsPerNode, as NCCL's rails give it).
func (t *Topology) groupTopology(size, stride int) *Topology {
	g := *t
	gpn := t.GPUsPerNode
	per := 1
	if stride < gpn {
		per = min(size, max(gpn/stride, 1))
	}
	g.GPUsPerNode = per
	g.Nodes = (size + per - 1) / per
	if g.Nodes > 1 {
		perGPU := float64(t.NICsPerNode) * t.NICGbps / float64(gpn)
		g.NICsPerNode, g.NICGbps = per, perGPU
		if g.Network.Kind == "" {
			g.Network.Kind = "fat-tree"
		}
	}
	return &g
}

// groupTime is the time in seconds of a collective of kind over a group
// of size ranks at stride (0 for a group of one, or no bytes).
func (t *Topology) groupTime(kind string, bytes float64, size, stride int) (float64, error) {
	if size < 2 || bytes <= 0 {
		return 0, nil
	}
	g := t.groupTopology(size, stride)
	ranks := size
	if kind == "sendrecv" {
		ranks = min(size, 2)
		if g.Nodes > 1 {
			ranks = g.GPUsPerNode + 1 // the next rank is on the next node
		}
	}
	r, err := g.Collective(Collective{Kind: kind, Bytes: int64(math.Ceil(bytes)), Ranks: ranks})
	if err != nil {
		return 0, fmt.Errorf("%s of %.0f B over %d ranks at stride %d: %w", kind, bytes, size, stride, err)
	}
	return r.TimeUs * 1e-6, nil
}

// bucketOverlap is the data-parallel reduction of grad bytes in buckets of
// bucket bytes during a backward of window seconds (PyTorch DDP, Li et al.
// 2020, arXiv 2006.15704 §3.2; Megatron's --overlap-grad-reduce): bucket
// i is ready at (i+1)/n of the window, buckets go out one at a time, and
// only what runs past the window is exposed. hidden is the communication
// time under the backward, whose compute it slows.
func bucketOverlap(grad, bucket, window float64, full, last float64) (exposed, hidden, total float64) {
	if grad <= 0 {
		return 0, 0, 0
	}
	n := math.Ceil(grad / bucket)
	finish := 0.0
	for i := 1.0; i <= n; i++ {
		d := full
		if i == n {
			d = last
		}
		finish = math.Max(finish, i/n*window) + d
	}
	total = (n-1)*full + last
	exposed = math.Max(0, finish-window)
	return exposed, total - exposed, total
}
