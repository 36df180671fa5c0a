package chakra

import (
	"reflect"
	"strings"
	"testing"

	"github.com/goccl/goccl/sim"
)

func TestOpsRoundTrip(t *testing.T) {
	ops := []sim.Op{
		{ID: 1, Name: "fwd", Kind: sim.OpCompute, DurationUs: 12},
		{ID: 2, Name: "gemm", Kind: sim.OpCompute, FLOPs: 1e9, MemBytes: 4096, Deps: []uint64{1}},
		{ID: 3, Name: "ar", Kind: sim.OpColl, Coll: "all_gather", Bytes: 1 << 20, Group: "dp", Deps: []uint64{2}},
		{ID: 4, Name: "send", Kind: sim.OpSend, Peer: 3, Bytes: 64, Tag: 7, Deps: []uint64{1}},
		{ID: 5, Name: "recv", Kind: sim.OpRecv, Peer: 0, Bytes: 64, Deps: []uint64{1}},
		{ID: 6, Name: "log", Kind: sim.OpHost, DurationUs: 3},
		{ID: 7, Name: "end", Kind: sim.OpNop, Deps: []uint64{3, 4, 5, 6}},
	}
	tr, err := FromOps(2, ops)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Ops(tr)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, ops) {
		t.Fatalf("ops → Chakra → ops:\n got %+v\nwant %+v", back, ops)
	}
	if src, _ := tr.Nodes[4].Int(AttrCommSrc, -1); src != 0 {
		t.Errorf("recv's comm_src %d, want its peer 0", src)
	}
}

func TestOpsErrors(t *testing.T) {
	for _, c := range []struct {
		n    Node
		want string
	}{
		{Node{ID: 4, Type: CommCollNode, Attrs: []Attr{Int64Attr(AttrCommType, int64(Gather)), Int64Attr(AttrCommSize, 8)}}, "node 4 (): comm_type GATHER: sim has no model"},
		{Node{ID: 5, Type: CommCollNode, Attrs: []Attr{Int64Attr(AttrCommType, int64(AllReduce))}}, "node 5 (): no comm_size"},
		{Node{ID: 6, Type: CommSendNode, Attrs: []Attr{Int64Attr(AttrCommSize, 8)}}, "no comm_dst"},
		{Node{ID: 7, Type: InvalidNode}, "type INVALID_NODE"},
		{Node{ID: 8, Type: CompNode, Attrs: []Attr{StringAttr(AttrIsCPUOp, "yes")}}, `attr "is_cpu_op"`},
	} {
		_, err := Ops(&Trace{Nodes: []*Node{&c.n}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("node %d: err %v, want %q", c.n.ID, err, c.want)
		}
	}
}
