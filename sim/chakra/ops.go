package chakra

import (
	"fmt"
	"math"

	"github.com/goccl/goccl/sim"
)

// simKinds are the sim.Collective kinds of the comm types sim can time;
// BARRIER is an all_reduce of 0 bytes (its latency), as PyTorch runs a
// barrier as an all_reduce of one element. GATHER and SCATTER have no
// model (ASTRA-sim's workload layer, Workload.cc, runs neither).
var simKinds = map[CommType]string{
	AllReduce: "all_reduce", Reduce: "reduce", AllGather: "all_gather", Broadcast: "broadcast",
	AllToAll: "alltoall", ReduceScatter: "reduce_scatter", ReduceScatterBlock: "reduce_scatter", Barrier: "all_reduce",
}

// Ops turns one rank's trace into sim.Replay's ops. Dependencies are the
// nodes' data_deps, the ones ASTRA-sim's feeder (src/feeder/et_feeder.cpp)
// resolves: the ctrl_deps of converted PyTorch traces name each op's
// parent in the call tree, which need not be in the file. A node's kind:
//
//   - COMP_NODE: compute of duration_micros, else the roofline of num_ops
//     (FLOPs) and tensor_size (bytes); with is_cpu_op set, host work of
//     duration_micros.
//   - MEM_LOAD_NODE, MEM_STORE_NODE: compute of duration_micros, else
//     tensor_size bytes through HBM.
//   - COMM_COLL_NODE: the collective comm_type of comm_size bytes (each
//     rank's input) in process group pg_name; one without comm_type (the
//     CPU-side launch op c10d::allreduce_ of converted traces) is host work
//     of duration_micros.
//   - COMM_SEND_NODE, COMM_RECV_NODE: comm_size bytes to comm_dst, from
//     comm_src, with comm_tag.
//   - METADATA_NODE: a marker (no time).
//
// Errors name the node.
func Ops(t *Trace) ([]sim.Op, error) {
	ops := make([]sim.Op, 0, len(t.Nodes))
	for _, n := range t.Nodes {
		o := sim.Op{ID: n.ID, Name: n.Name, Deps: n.DataDeps, DurationUs: float64(n.DurationMicros)}
		if err := setOp(n, &o); err != nil {
			return nil, fmt.Errorf("chakra: node %d (%s): %w", n.ID, n.Name, err)
		}
		ops = append(ops, o)
	}
	return ops, nil
}

func setOp(n *Node, o *sim.Op) error {
	cpu, err := n.Int(AttrIsCPUOp, 0)
	if err != nil {
		return err
	}
	switch n.Type {
	case MetadataNode:
		o.Kind, o.DurationUs = sim.OpNop, 0
	case CompNode, MemLoadNode, MemStoreNode:
		o.Kind = sim.OpCompute
		if cpu != 0 && n.Type == CompNode {
			o.Kind = sim.OpHost
		}
		return roofline(n, o)
	case CommCollNode:
		if _, ok := n.Attr(AttrCommType); !ok && cpu != 0 {
			o.Kind = sim.OpHost
			return nil
		}
		ct, err := n.Int(AttrCommType, -1)
		if err != nil {
			return err
		}
		kind, ok := simKinds[CommType(ct)]
		if !ok {
			return fmt.Errorf("comm_type %v: sim has no model for it", CommType(ct))
		}
		o.Kind, o.Coll, o.Group, o.DurationUs = sim.OpColl, kind, n.String(AttrPGName), 0
		if CommType(ct) != Barrier {
			o.Bytes, err = need(n, AttrCommSize)
		}
		return err
	case CommSendNode, CommRecvNode:
		return setP2P(n, o)
	default:
		return fmt.Errorf("type %v: not a node type of et_def.proto that replays", n.Type)
	}
	return nil
}

// roofline sets a compute node's work when it has no duration.
func roofline(n *Node, o *sim.Op) error {
	if n.DurationMicros > 0 {
		return nil
	}
	flops, err := n.Int(AttrNumOps, 0)
	if err != nil {
		return err
	}
	bytes, err := n.Int(AttrTensorSize, 0)
	if err != nil {
		return err
	}
	o.FLOPs, o.MemBytes = float64(flops), float64(bytes)
	if n.Type != CompNode {
		o.FLOPs = 0
	}
	return nil
}

func setP2P(n *Node, o *sim.Op) error {
	o.Kind, o.DurationUs = sim.OpSend, 0
	peerAttr := AttrCommDst
	if n.Type == CommRecvNode {
		o.Kind, peerAttr = sim.OpRecv, AttrCommSrc
	}
	peer, err := need(n, peerAttr)
	if err != nil {
		return err
	}
	if peer < 0 || peer > math.MaxInt32 {
		return fmt.Errorf("%s %d: not a rank", peerAttr, peer)
	}
	o.Peer = int(peer)
	if o.Bytes, err = need(n, AttrCommSize); err != nil {
		return err
	}
	o.Tag, err = n.Int(AttrCommTag, 0)
	return err
}

// need is n's integer attribute name, an error when n lacks it.
func need(n *Node, name string) (int64, error) {
	if _, ok := n.Attr(name); !ok {
		return 0, fmt.Errorf("no %s attribute", name)
	}
	return n.Int(name, 0)
}

// commTypes are the comm_type of each sim kind FromOps writes.
var commTypes = map[string]CommType{
	"all_reduce": AllReduce, "reduce": Reduce, "all_gather": AllGather, "broadcast": Broadcast,
	"alltoall": AllToAll, "reduce_scatter": ReduceScatter,
}

// FromOps is the trace of rank's ops (as sim.GocclTraceOps makes them):
// compute as COMP_NODE (durations rounded to the µs that duration_micros
// holds; FLOPs and bytes as num_ops and tensor_size), host work as
// COMP_NODE with is_cpu_op, collectives as COMM_COLL_NODE (comm_type,
// comm_size, pg_name), sends and receives with comm_src, comm_dst and
// comm_tag, markers as METADATA_NODE, deps as data_deps. An OpComm (a
// recorded SendRecv without its peer) has no Chakra form: it becomes a
// COMP_NODE of its duration, named as it was, so the time is kept.
func FromOps(rank int, ops []sim.Op) (*Trace, error) {
	t := &Trace{Metadata: GlobalMetadata{Version: Version, Attrs: []Attr{StringAttr("source", "goccl sim replay --write-chakra")}}}
	for _, o := range ops {
		n := &Node{ID: o.ID, Name: o.Name, DataDeps: o.Deps, DurationMicros: uint64(math.Round(max(o.DurationUs, 0)))}
		switch o.Kind {
		case sim.OpCompute, sim.OpHost, sim.OpComm:
			n.Type = CompNode
			n.Attrs = append(n.Attrs, BoolAttr(AttrIsCPUOp, o.Kind == sim.OpHost))
			if o.FLOPs > 0 || o.MemBytes > 0 {
				n.Attrs = append(n.Attrs, Int64Attr(AttrNumOps, int64(o.FLOPs)), Uint64Attr(AttrTensorSize, uint64(o.MemBytes)))
			}
		case sim.OpColl:
			ct, ok := commTypes[o.Coll]
			if !ok {
				return nil, fmt.Errorf("chakra: rank %d op %d (%s): collective %q has no comm_type", rank, o.ID, o.Name, o.Coll)
			}
			n.Type, n.DurationMicros = CommCollNode, 0
			n.Attrs = append(n.Attrs, BoolAttr(AttrIsCPUOp, false), Int64Attr(AttrCommType, int64(ct)), Int64Attr(AttrCommSize, o.Bytes))
			if o.Group != "" {
				n.Attrs = append(n.Attrs, StringAttr(AttrPGName, o.Group))
			}
		case sim.OpSend, sim.OpRecv:
			src, dst := rank, o.Peer
			n.Type = CommSendNode
			if o.Kind == sim.OpRecv {
				src, dst, n.Type = o.Peer, rank, CommRecvNode
			}
			n.DurationMicros = 0
			n.Attrs = append(n.Attrs, BoolAttr(AttrIsCPUOp, false), Int32Attr(AttrCommSrc, int32(src)), Int32Attr(AttrCommDst, int32(dst)),
				Int32Attr(AttrCommTag, int32(o.Tag)), Int64Attr(AttrCommSize, o.Bytes))
		case sim.OpNop:
			n.Type = MetadataNode
		default:
			return nil, fmt.Errorf("chakra: rank %d op %d (%s): kind %q", rank, o.ID, o.Name, o.Kind)
		}
		t.Nodes = append(t.Nodes, n)
	}
	return t, nil
}
