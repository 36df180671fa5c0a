package algo

import (
	"context"
	"fmt"
	"slices"
)

// Hierarchy is the shape of a communicator spread over hosts, as the
// hierarchical schedules use it: the ranks of each host (intra-host links,
// shared memory) and the ranks that share a local index across the hosts
// (inter-host links, the network). The schedules split each collective into
// an intra-host step, an inter-host step among one rank per host per chunk,
// and an intra-host step, so that every byte crosses the network once per
// host instead of once per rank (NCCL's tree and ring within and across
// nodes; the "2D" and hierarchical collectives of MPI libraries: Träff,
// "Decomposing MPI collectives for exploiting multi-lane communication",
// 2020, and the HAN component of Open MPI).
type Hierarchy struct {
	Hosts   int     // number of hosts
	PerHost int     // ranks on every host; 0 when hosts hold different numbers of ranks
	HostOf  []int   // host index (0.. in order of each host's lowest rank) of each rank
	LocalOf []int   // each rank's index among its host's ranks (in rank order)
	members [][]int // each host's ranks, in rank order

	Local *Group // this rank's host, ranks in rank order (nil when alone on its host)
	Inter *Group // the ranks with this rank's local index, one per host, in host order (nil with one host or uneven hosts)
	// Ring is every rank, host after host: a ring over it enters and leaves
	// each host once, whatever the rank numbering (nil with one host).
	Ring *Group
}

// NewHier builds g's hierarchy from the host of every rank (any values,
// equal for ranks on one host). Hosts are numbered in the order of their
// lowest rank.
func NewHier(g *Group, hostKey []string) (*Hierarchy, error) {
	if len(hostKey) != g.Size {
		return nil, fmt.Errorf("algo: %d host keys for %d ranks", len(hostKey), g.Size)
	}
	h := &Hierarchy{HostOf: make([]int, g.Size), LocalOf: make([]int, g.Size)}
	index := map[string]int{}
	var members [][]int
	for r, k := range hostKey {
		i, ok := index[k]
		if !ok {
			i = len(members)
			index[k] = i
			members = append(members, nil)
		}
		h.HostOf[r], h.LocalOf[r] = i, len(members[i])
		members[i] = append(members[i], r)
	}
	h.Hosts, h.members = len(members), members
	h.PerHost = len(members[0])
	for _, m := range members {
		if len(m) != h.PerHost {
			h.PerHost = 0
		}
	}
	var err error
	mine := members[h.HostOf[g.Rank]]
	if len(mine) > 1 {
		if h.Local, err = g.Sub(mine); err != nil {
			return nil, err
		}
	}
	if h.Hosts > 1 {
		if h.Ring, err = g.Sub(slices.Concat(members...)); err != nil {
			return nil, err
		}
		if h.PerHost > 0 {
			l := h.LocalOf[g.Rank]
			inter := make([]int, h.Hosts)
			for i, m := range members {
				inter[i] = m[l]
			}
			if h.Inter, err = g.Sub(inter); err != nil {
				return nil, err
			}
		}
	}
	return h, nil
}

// SetHier gives g its hierarchy (nil: none).
func (g *Group) SetHier(h *Hierarchy) { g.hier = h }

// Hierarchy returns the hierarchy SetHier gave (nil: none).
func (g *Group) Hierarchy() *Hierarchy { return g.hier }

// Hierarchical reports whether the hierarchical schedules can run: several
// hosts, the same number of ranks on each, more than one on each.
func (h *Hierarchy) Hierarchical() bool { return h != nil && h.Inter != nil && h.PerHost > 1 }

// AllReduceHier reduces send (count elements) into recv on every rank in
// three steps, pipelined by pieces of hierPieceBytes: a ring reduce-scatter among the host's ranks (local rank l
// ends with the host's sum of chunk l+1 of PerHost), an AllReduce of that
// chunk with flat algorithm a (rd, rhd, ring, tree) among the ranks of local index l on every host,
// and a ring all-gather among the host's ranks. Per rank, the network
// carries 2(H-1)/H of its chunk each way: 2(H-1)/H·S per host in all,
// where a flat ring over P = H·L ranks carries 2(P-1)/P·S across each host
// boundary. Every rank ends with the same bits: each chunk is reduced along
// one order. h must be Hierarchical.
func (g *Group) AllReduceHier(ctx context.Context, op *Op, send, recv []byte, count int, h *Hierarchy, a Algorithm) error {
	if !h.Hierarchical() {
		return fmt.Errorf("algo: no hierarchy to run AllReduceHier on (%d hosts, %d ranks each)", h.Hosts, h.PerHost)
	}
	inter, r := h.Inter, Lookup(KindAllReduce, a)
	if r == nil || r.Usable != nil {
		return fmt.Errorf("algo: AllReduceHier runs no %q among the hosts", a)
	}
	return g.allReduceHier(ctx, op, send, recv, count, h, hierPieceBytes, func(ctx context.Context, op *Op, chunk []byte, n int) error {
		return r.Run(ctx, inter, op, Args{Send: chunk, Recv: chunk, Count: n})
	})
}

// InterStep is a hierarchical AllReduce's inter-host step: chunk (n
// elements), this rank's share of the buffer already reduced within its
// host, is to be reduced in place across the hosts, among the ranks with
// this rank's local index.
type InterStep func(ctx context.Context, op *Op, chunk []byte, n int) error

// AllReduceHierVia is AllReduceHier with the inter-host step given — NCCL's
// CollNet chain: each local index's share goes through an aggregation tree
// of its own — and not cut in pieces (a step that streams pipelines
// itself): a reduce-scatter within the host, the step, an all-gather
// within the host. h must be Hierarchical.
func (g *Group) AllReduceHierVia(ctx context.Context, op *Op, send, recv []byte, count int, h *Hierarchy, step InterStep) error {
	if !h.Hierarchical() {
		return fmt.Errorf("algo: no hierarchy to run AllReduceHierVia on (%d hosts, %d ranks each)", h.Hosts, h.PerHost)
	}
	return g.allReduceHier(ctx, op, send, recv, count, h, 0, step)
}

// allReduceHier is AllReduceHier in pieces of pieceBytes (0: one piece)
// with step as the inter-host step.
func (g *Group) allReduceHier(ctx context.Context, op *Op, send, recv []byte, count int, h *Hierarchy, pieceBytes int, step InterStep) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	es := op.ElemSize
	// Pieces of pieceBytes, so that the network carries piece k while
	// the host reduces piece k+1 and spreads piece k-1 (every rank cuts
	// the same pieces).
	per := max(1, count)
	if pieceBytes > 0 {
		per = max(1, pieceBytes/es)
	}
	pieces := max(1, (count+per-1)/per)
	piece := func(k int) (lo, n int) { lo = k * per; return lo, min(count, lo+per) - lo }
	local := h.Local
	if pieces == 1 {
		if err := local.ringReduceScatter(ctx, op, send, recv, count); err != nil {
			return err
		}
		if err := interChunk(ctx, op, local, recv, count, step); err != nil {
			return err
		}
		return local.ringAllGather(ctx, op, recv, count)
	}
	// The inter-host step runs on its own goroutine over the Inter
	// sub-group's links while this one works the Local sub-group's: their
	// links, senders and buffers are disjoint.
	reduced := make(chan int, pieces)
	crossed := make(chan error, pieces)
	go func() {
		defer close(crossed)
		for k := range reduced {
			lo, n := piece(k)
			err := interChunk(ctx, op, local, recv[lo*es:(lo+n)*es], n, step)
			crossed <- err
			if err != nil {
				return
			}
		}
	}()
	var err error
	for k := 0; k <= pieces && err == nil; k++ {
		if k < pieces {
			lo, n := piece(k)
			if err = local.ringReduceScatter(ctx, op, send[lo*es:(lo+n)*es], recv[lo*es:(lo+n)*es], n); err != nil {
				break
			}
			reduced <- k
		}
		if k > 0 {
			if err = <-crossed; err != nil {
				break
			}
			lo, n := piece(k - 1)
			err = local.ringAllGather(ctx, op, recv[lo*es:(lo+n)*es], n)
		}
	}
	close(reduced)
	if err != nil {
		g.abortFor(err) // ends the inter-host step if it still waits
	}
	for range crossed {
	}
	return err
}

// hierPieceBytes is the piece AllReduceHier pipelines in (a variable for
// the tests, which make it small). Smaller pieces fill and drain the
// pipeline sooner (the first piece's reduce-scatter and the last one's
// all-gather leave the network idle); on 4 hosts x 2 ranks at 1 Gbit/s,
// paired runs took 107-115 ms at 8 MiB and 433-487 ms at 32 MiB with 1 MiB
// pieces against 114-122 and 444-496 ms with 4 MiB (docs/benchmarks.md).
var hierPieceBytes = 1 << 20

// hierChainMinBytes is the smallest message BroadcastHier sends along a
// chain of the hosts rather than a binomial tree (a variable for the tests).
var hierChainMinBytes = 1 << 20

// InterChain reports whether BroadcastHier sends nbytes among hosts hosts
// along a chain: from 3 hosts (with 2 the tree is a chain) and
// hierChainMinBytes. The chain puts the message on every host's link once,
// where the tree's root sends it to lg H hosts: on 4 hosts at 1 Gbit/s a
// 32 MiB Broadcast took 553 ms with the tree (the root host's link carried
// 2.5 S) and (docs/benchmarks.md) about half with the chain.
func InterChain(hosts, nbytes int) bool { return hosts >= 3 && nbytes >= hierChainMinBytes }

// interChunk runs the inter-host step on this rank's chunk of one piece
// of recv (count elements).
func interChunk(ctx context.Context, op *Op, local *Group, recv []byte, count int, step InterStep) error {
	off, n := ringOwned(count, local.Size, local.Rank)
	if n == 0 {
		return nil
	}
	return step(ctx, op, recv[off*op.ElemSize:(off+n)*op.ElemSize], n)
}

// BroadcastHier copies root's send (count elements) to recv on every rank:
// a Broadcast among the ranks with root's local index (one per host, root's
// host first to send), then a Broadcast within each host from that rank.
// The network carries the buffer once per host. h must be Hierarchical.
func (g *Group) BroadcastHier(ctx context.Context, op *Op, send, recv []byte, count, root int, h *Hierarchy) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	if !h.Hierarchical() {
		return fmt.Errorf("algo: no hierarchy to run BroadcastHier on")
	}
	lr := h.LocalOf[root]
	if h.LocalOf[g.Rank] == lr {
		bcast := h.Inter.bcastTree
		if InterChain(h.Hosts, count*op.ElemSize) {
			bcast = h.Inter.bcastChain
		}
		if err := bcast(ctx, op, send, recv, count, h.HostOf[root]); err != nil {
			return err
		}
	}
	return h.Local.Broadcast(ctx, op, recv, recv, count, lr)
}

// rankAt is the rank at local index l of host i.
func (h *Hierarchy) rankAt(i, l int) int { return h.members[i][l] }

// AllGatherHier gathers count elements of send from every rank into recv
// (block r from rank r): an AllGather among the ranks of this rank's local
// index (one per host) collects their H blocks, an AllGather within the
// host collects the host's L sets of H blocks, and the blocks are put in
// rank order. The network carries each block once per host that receives
// it, as a flat ring does at best. h must be Hierarchical.
func (g *Group) AllGatherHier(ctx context.Context, op *Op, send, recv []byte, count int, h *Hierarchy) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	if !h.Hierarchical() {
		return fmt.Errorf("algo: no hierarchy to run AllGatherHier on")
	}
	H, L, bb := h.Hosts, h.PerHost, count*op.ElemSize
	// tmp holds L sets of H blocks: set l is what the ranks of local
	// index l gathered across the hosts, block i from host i.
	tmp := g.Scratch(H * L * bb) // the sub-groups' schedules use their own scratch
	mine := tmp[h.LocalOf[g.Rank]*H*bb : (h.LocalOf[g.Rank]+1)*H*bb]
	if err := h.Inter.AllGather(ctx, op, send[:bb], mine, count); err != nil {
		return err
	}
	if err := h.Local.AllGather(ctx, op, mine, tmp, H*count); err != nil {
		return err
	}
	for l := 0; l < L; l++ {
		for i := 0; i < H; i++ {
			r := h.rankAt(i, l)
			copy(recv[r*bb:(r+1)*bb], tmp[(l*H+i)*bb:(l*H+i+1)*bb])
		}
	}
	return nil
}

// ReduceScatterHier reduces send (Size*count elements, block r for rank r)
// across the ranks and leaves block Rank in recv: the blocks are regrouped
// by the local index of their rank, a ReduceScatter within the host leaves
// local rank l with the host's sums of the H blocks of local index l, and a
// ReduceScatter among the ranks of local index l (one per host) leaves
// each with its own block. The network carries (H-1)/H of a host's data,
// once. h must be Hierarchical.
func (g *Group) ReduceScatterHier(ctx context.Context, op *Op, send, recv []byte, count int, h *Hierarchy) error {
	if err := g.checkGroup(op); err != nil {
		return err
	}
	if !h.Hierarchical() {
		return fmt.Errorf("algo: no hierarchy to run ReduceScatterHier on")
	}
	H, L, bb := h.Hosts, h.PerHost, count*op.ElemSize
	scratch := g.Scratch(H*L*bb + H*bb) // the sub-groups' schedules use their own scratch
	byLocal, hostSums := scratch[:H*L*bb], scratch[H*L*bb:]
	for l := 0; l < L; l++ {
		for i := 0; i < H; i++ {
			r := h.rankAt(i, l)
			copy(byLocal[(l*H+i)*bb:(l*H+i+1)*bb], send[r*bb:(r+1)*bb])
		}
	}
	if err := h.Local.ReduceScatter(ctx, op, byLocal, hostSums, H*count); err != nil {
		return err
	}
	return h.Inter.ReduceScatter(ctx, op, hostSums, recv[:bb], count)
}
