package chakra

import (
	"bytes"
	"compress/gzip"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
)

// sample is a trace with every field and every scalar attribute kind set.
func sample() *Trace {
	return &Trace{
		Metadata: GlobalMetadata{Version: "1.0.0", Attrs: []Attr{StringAttr("host", "h0")}},
		Nodes: []*Node{
			{ID: 1, Name: "fwd", Type: CompNode, DurationMicros: 100, StartTimeMicros: 7,
				Inputs: &IOInfo{Values: "[1]", Shapes: "[[4]]", Types: "[float]"}, Outputs: &IOInfo{},
				Attrs: []Attr{BoolAttr(AttrIsCPUOp, false), Int64Attr(AttrNumOps, 1<<40), Uint64Attr(AttrTensorSize, math.MaxUint64)}},
			{ID: 2, Name: "ar", Type: CommCollNode, DataDeps: []uint64{1}, CtrlDeps: []uint64{1 << 60},
				Attrs: []Attr{Int64Attr(AttrCommType, int64(AllReduce)), Int64Attr(AttrCommSize, 1<<20), StringAttr(AttrPGName, "0")}},
			{ID: 3, Name: "send", Type: CommSendNode, DataDeps: []uint64{1, 2},
				Attrs: []Attr{Int32Attr(AttrCommSrc, 0), Int32Attr(AttrCommDst, -1), Int32Attr(AttrCommTag, 9),
					{Name: "d", Field: FieldDouble, Float: -1.5}, {Name: "f", Field: FieldFloat, Float: 0.25},
					{Name: "u32", Field: FieldUint32, Uint: math.MaxUint32}, {Name: "s32", Field: FieldSint32, Int: math.MinInt32},
					{Name: "s64", Field: FieldSint64, Int: math.MinInt64}, {Name: "fx32", Field: FieldFixed32, Uint: 5},
					{Name: "fx64", Field: FieldFixed64, Uint: math.MaxUint64}, {Name: "sf32", Field: FieldSfixed32, Int: -3},
					{Name: "sf64", Field: FieldSfixed64, Int: -4}, {Name: "b", Field: FieldBytes, Str: "\x00\xff"},
					{Name: "list", Field: 10, Raw: []byte{0x0a, 0x02, 0x01, 0x02}}, {Name: "none", Doc: "no value"}}},
		},
	}
}

func TestRoundTrip(t *testing.T) {
	in := sample()
	var b bytes.Buffer
	if err := Write(&b, in); err != nil {
		t.Fatal(err)
	}
	out, err := Read(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("read back differs:\n in %+v\nout %+v", in.Nodes[2], out.Nodes[2])
	}
	// gzip, as protolib.openFileRd accepts it
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(b.Bytes())
	zw.Close()
	if out, err = Read(&z); err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("gzip: %v", err)
	}
}

// TestRealTrace reads four messages of a trace Chakra's converter wrote
// (sim/testdata/chakra/README.md) and writes them back byte for byte.
func TestRealTrace(t *testing.T) {
	raw, err := os.ReadFile("../testdata/chakra/feeder_tests.0.et")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Read(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Nodes) != 3 || tr.Metadata.Attrs[0].Name != "schema" || tr.Metadata.Attrs[0].Str != "1.0.1" {
		t.Fatalf("metadata %+v, %d nodes", tr.Metadata, len(tr.Nodes))
	}
	k := tr.Nodes[2]
	ct, _ := k.Int(AttrCommType, -1)
	cs, _ := k.Int(AttrCommSize, -1)
	cpu, _ := k.Int(AttrIsCPUOp, -1)
	if k.ID != 435 || k.Type != CommCollNode || CommType(ct) != Broadcast || cs != 212480 || cpu != 0 || k.DurationMicros != 28 ||
		!reflect.DeepEqual(k.DataDeps, []uint64{432, 216, 217}) || !strings.HasPrefix(k.Name, "ncclKernel_Broadcast") {
		t.Fatalf("node 435: %+v (comm_type %d, comm_size %d, is_cpu_op %d)", k, ct, cs, cpu)
	}
	var b bytes.Buffer
	if err := Write(&b, tr); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), raw) {
		t.Fatalf("rewrite: %d bytes, want the %d read", b.Len(), len(raw))
	}
}

func TestCorrupt(t *testing.T) {
	var good bytes.Buffer
	Write(&good, sample())
	g := good.Bytes()
	meta := func(tail ...byte) []byte { return append(append([]byte{}, g[:int(g[0])+1]...), tail...) }
	for _, c := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "empty file"},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, "over the"},
		{"overflow", bytes.Repeat([]byte{0xff}, 11), "overflows"},
		{"cut", g[:len(g)-3], "before the end"},
		{"length cut", meta(0x80), "message length"},
		{"bad wire type", meta(2, 0x0a, 0x05), "field 1"}, // id as bytes
		{"bad tag", meta(1, 0x00), "tag"},
	} {
		_, err := Read(bytes.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one with %q", c.name, err, c.want)
		}
	}
}

func TestParseCommType(t *testing.T) {
	for i, n := range commTypeNames {
		if c, err := ParseCommType(strings.ToLower(n)); err != nil || c != CommType(i) || c.String() != n {
			t.Errorf("%s: %v %v", n, c, err)
		}
	}
	if _, err := ParseCommType("ALLREDUCE"); err == nil {
		t.Error("ALLREDUCE parsed")
	}
}

func FuzzRead(f *testing.F) {
	var b bytes.Buffer
	Write(&b, sample())
	f.Add(b.Bytes())
	if raw, err := os.ReadFile("../testdata/chakra/feeder_tests.0.et"); err == nil {
		f.Add(raw)
	}
	f.Add([]byte{0x00})
	f.Add([]byte{0x02, 0x0a, 0x00, 0x03, 0x08, 0x01, 0x22})
	f.Fuzz(func(t *testing.T, in []byte) {
		tr, err := Read(bytes.NewReader(in))
		if err != nil {
			return
		}
		// What reads must write and read back the same.
		var w bytes.Buffer
		if err := Write(&w, tr); err != nil {
			t.Fatal(err)
		}
		back, err := Read(&w)
		if err != nil {
			t.Fatalf("rewrite unreadable: %v", err)
		}
		if len(back.Nodes) != len(tr.Nodes) {
			t.Fatalf("%d nodes, then %d", len(tr.Nodes), len(back.Nodes))
		}
	})
}
