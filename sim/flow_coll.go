package sim

import "fmt"

// FlowAlgos are the algorithms the flow level runs kind with, the default
// first (nil for a kind it does not run): rings (broadcast and reduce as
// the ring's chain), NCCL's double binary tree for all_reduce, pairwise
// alltoall, and sendrecv's one send to the next rank (p2p).
func FlowAlgos(kind string) []string {
	switch kind {
	case "all_reduce":
		return []string{"ring", "tree"}
	case "all_gather", "reduce_scatter", "broadcast", "reduce":
		return []string{"ring"}
	case "alltoall":
		return []string{"pairwise"}
	case "sendrecv":
		return []string{"p2p"}
	}
	return nil
}

// btreeParent is rank r's parent in NCCL's binary tree over n ranks
// (src/graph/trees.cc, ncclGetBtree), -1 for its root, rank 0: a rank
// whose lowest set bit is b hangs under the rank with that bit cleared
// and the next one set, or, when that is n or more, with the bit only
// cleared. Its depth is ⌈log2 n⌉, the closed form's.
func btreeParent(r, n int) int {
	if r == 0 {
		return -1
	}
	bit := r & -r
	if up := r ^ bit | bit<<1; up < n {
		return up
	}
	return r ^ bit
}

// dtreeParent is rank r's parent in tree 0 or 1 of NCCL's double binary
// tree (ncclGetDtree): tree 0 is the binary tree; tree 1 mirrors it (rank
// r as n−1−r) when n is even, else shifts it by one (r as r−1), so a
// rank inside one tree is a leaf of the other.
func dtreeParent(tree, r, n int) int {
	if tree == 0 {
		return btreeParent(r, n)
	}
	if n%2 == 0 {
		if u := btreeParent(n-1-r, n); u >= 0 {
			return n - 1 - u
		}
		return -1
	}
	if u := btreeParent((r-1+n)%n, n); u >= 0 {
		return (u + 1) % n
	}
	return -1
}

// tree adds the flows of NCCL's tree all_reduce: per channel (as the
// ring's: one per NIC the job uses on a node) two trees, each carrying
// half of the channel's share of the size. Inside a node a tree is a
// chain from a head GPU rotated by the channel (the ring's entry GPU) to
// the last; across nodes the heads form tree 0 or 1 of the double binary
// tree over the nodes (in the order of their first rank), each head
// sending through its own NIC. Reduce goes up and broadcast comes down
// pipelined, so every edge is two flows at once, one each way, of its
// tree's bytes: 4 × channels × (n−1) flows.
func (fs *flowSet) tree(j int, ranks []int, size float64) (jobHops, error) {
	groups, channels, most := fs.byNode(ranks)
	n, nodes := len(ranks), len(groups)
	if flows := 4 * channels * (n - 1); len(fs.flows)+flows > maxFlows {
		return jobHops{}, fmt.Errorf("sim: job %d: a tree all_reduce of %d ranks × %d channels is %d flows: the flow level runs up to %d", j, n, channels, flows, maxFlows)
	}
	hops := jobHops{nodes: nodes, perNode: most, kind: "all_reduce", algo: "tree"}
	b := size / float64(2*channels)
	head := make([]int, nodes)
	for c := range channels {
		for tr := range 2 {
			for k, grp := range groups {
				st := c * len(grp) / channels
				head[k] = grp[st]
				for i := range len(grp) - 1 { // down the chain and up
					a, d := grp[(st+i)%len(grp)], grp[(st+i+1)%len(grp)]
					hops.note(true, fs.add(j, a, d, 0, 0, 0, b))
					hops.note(true, fs.add(j, d, a, 0, 0, 0, b))
				}
			}
			for k := range nodes {
				p := dtreeParent(tr, k, nodes)
				if p < 0 {
					continue
				}
				up, down := head[k], head[p]
				nu, nd := fs.g.NICOf(up), fs.g.NICOf(down)
				hops.note(false, fs.add(j, up, down, nu, nd, 2*c+tr, b))
				hops.note(false, fs.add(j, down, up, nd, nu, 2*c+tr, b))
			}
		}
	}
	return hops, nil
}

// sendrecv adds nccl-tests' sendrecv: every rank sends b bytes to the
// next (the last to the first) at once, through its own NIC to the
// peer's when they are on different nodes.
func (fs *flowSet) sendrecv(j int, ranks []int, b float64) jobHops {
	t := fs.g.Topo
	groups, _, most := fs.byNode(ranks)
	hops := jobHops{nodes: len(groups), perNode: most, kind: "sendrecv", algo: "p2p"}
	for i, s := range ranks {
		d := ranks[(i+1)%len(ranks)]
		hops.note(s/t.GPUsPerNode == d/t.GPUsPerNode, fs.add(j, s, d, fs.g.NICOf(s), fs.g.NICOf(d), i, b))
	}
	return hops
}
