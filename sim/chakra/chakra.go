// Package chakra reads and writes Chakra execution traces (ET), the
// per-rank operator graphs of MLCommons Chakra (github.com/mlcommons/chakra)
// that ASTRA-sim replays.
//
// A file is a sequence of protobuf messages, each preceded by its length
// as a varint (src/third_party/utils/protolib.py, encodeMessage): one
// GlobalMetadata, then one Node per operator. The messages are those of
// schema/protobuf/et_def.proto (package ChakraProtoMsg; read at commit
// 21585d8f of mlcommons/chakra). Files compressed with gzip (protolib's
// openFileRd accepts them) are read too.
//
// The codec is written by hand on google.golang.org/protobuf's protowire,
// field numbers taken from et_def.proto (they are the constants below),
// rather than generated code (protoc is not part of the build) or
// dynamicpb over a descriptor built at run time (which would carry the
// whole schema as a literal and decode into maps the caller must then pick
// apart). A hand codec also lets every error name the byte offset and the
// field, and keeps reading bounded: a message longer than MaxMessage, or
// longer than what remains of the file, is an error before anything is
// allocated for it. Unknown fields are skipped; the AttributeProto list
// values (DoubleList ... BytesList) are kept as their encoded bytes, so
// that a trace read and written again keeps them.
package chakra

import (
	"fmt"
	"strings"
)

// NodeType is et_def.proto's NodeType.
type NodeType int32

// The node types, numbered as in et_def.proto.
const (
	InvalidNode  NodeType = 0
	MetadataNode NodeType = 1
	MemLoadNode  NodeType = 2
	MemStoreNode NodeType = 3
	CompNode     NodeType = 4
	CommSendNode NodeType = 5
	CommRecvNode NodeType = 6
	CommCollNode NodeType = 7
)

var nodeTypeNames = [...]string{"INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE",
	"COMP_NODE", "COMM_SEND_NODE", "COMM_RECV_NODE", "COMM_COLL_NODE"}

func (t NodeType) String() string {
	if t >= 0 && int(t) < len(nodeTypeNames) {
		return nodeTypeNames[t]
	}
	return fmt.Sprintf("NodeType(%d)", int32(t))
}

// CommType is et_def.proto's CollectiveCommType, the value of a
// COMM_COLL_NODE's "comm_type" attribute.
type CommType int32

// The collectives, numbered as in et_def.proto.
const (
	AllReduce          CommType = 0
	Reduce             CommType = 1
	AllGather          CommType = 2
	Gather             CommType = 3
	Scatter            CommType = 4
	Broadcast          CommType = 5
	AllToAll           CommType = 6
	ReduceScatter      CommType = 7
	ReduceScatterBlock CommType = 8
	Barrier            CommType = 9
)

var commTypeNames = [...]string{"ALL_REDUCE", "REDUCE", "ALL_GATHER", "GATHER", "SCATTER", "BROADCAST",
	"ALL_TO_ALL", "REDUCE_SCATTER", "REDUCE_SCATTER_BLOCK", "BARRIER"}

func (c CommType) String() string {
	if c >= 0 && int(c) < len(commTypeNames) {
		return commTypeNames[c]
	}
	return fmt.Sprintf("CommType(%d)", int32(c))
}

// ParseCommType is the CommType named s ("ALL_REDUCE"; case is ignored).
func ParseCommType(s string) (CommType, error) {
	for i, n := range commTypeNames {
		if strings.EqualFold(n, s) {
			return CommType(i), nil
		}
	}
	return 0, fmt.Errorf("chakra: comm type %q: not one of %s", s, strings.Join(commTypeNames[:], ", "))
}

// GlobalMetadata is the first message of a file.
type GlobalMetadata struct {
	Version string
	Attrs   []Attr
}

// Node is one operator.
type Node struct {
	ID              uint64
	Name            string
	Type            NodeType
	CtrlDeps        []uint64 // ids of nodes of this file that must end first (control)
	DataDeps        []uint64 // ... (data)
	StartTimeMicros uint64   // µs, as recorded
	DurationMicros  uint64   // µs
	Inputs, Outputs *IOInfo  // nil: absent
	Attrs           []Attr
}

// IOInfo is a node's tensors as text (et_def.proto's IOInfo).
type IOInfo struct {
	Values, Shapes, Types string
}

// The attribute names the Chakra feeder (src/feeder/et_feeder_node.cpp)
// reads, with the field it reads each from.
const (
	AttrIsCPUOp    = "is_cpu_op"   // bool_val
	AttrNumOps     = "num_ops"     // int64_val: floating-point operations
	AttrTensorSize = "tensor_size" // uint64_val: bytes
	AttrCommType   = "comm_type"   // int64_val: a CommType
	AttrCommSize   = "comm_size"   // int64_val: bytes
	AttrCommSrc    = "comm_src"    // int32_val: the sending rank
	AttrCommDst    = "comm_dst"    // int32_val: the receiving rank
	AttrCommTag    = "comm_tag"    // int32_val
	AttrPGName     = "pg_name"     // string_val: the process group
)

// Attr returns n's first attribute named name.
func (n *Node) Attr(name string) (Attr, bool) {
	for _, a := range n.Attrs {
		if a.Name == name {
			return a, true
		}
	}
	return Attr{}, false
}

// Int is n's integer attribute name (any integer or bool field), or def
// when n has none; an attribute of another kind is an error naming the node.
func (n *Node) Int(name string, def int64) (int64, error) {
	a, ok := n.Attr(name)
	if !ok {
		return def, nil
	}
	v, ok := a.AsInt()
	if !ok {
		return 0, fmt.Errorf("chakra: node %d (%s): attr %q: field %d is not an integer", n.ID, n.Name, name, a.Field)
	}
	return v, nil
}

// String is n's string attribute name, "" when n has none.
func (n *Node) String(name string) string {
	if a, ok := n.Attr(name); ok && (a.Field == FieldString || a.Field == FieldBytes) {
		return a.Str
	}
	return ""
}
