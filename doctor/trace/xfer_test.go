package trace

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/xfer"
)

// TestXferTrace: an xfer agent's trace (xfer.Options.TraceFile) read back:
// its transfers by path, and a transfer over TCP to an agent that others
// reached by RDMA named as a slower path. Two agents with soft RoCE
// devices: WRITEs between registered DRAM go by RDMA, a WRITE into the
// target's FILE region by TCP.
func TestXferTrace(t *testing.T) {
	devs := make([]*rdma.Device, 2)
	for i := range devs {
		d, err := rdma.Open("127.0.0.1:0")
		if err != nil {
			t.Skipf("no soft RoCE device here: %v", err)
		}
		t.Cleanup(func() { d.Close() })
		devs[i] = d
	}
	path := filepath.Join(t.TempDir(), "xfer.json")
	ini, err := xfer.NewAgent("prefill", xfer.Options{Listen: "127.0.0.1:0", RDMA: devs[0], TraceFile: path})
	if err != nil {
		t.Fatal(err)
	}
	defer ini.Close()
	tgt, err := xfer.NewAgent("decode", xfer.Options{Listen: "127.0.0.1:0", RDMA: devs[1]})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	const n = 1 << 20
	src, dst := make([]byte, n), make([]byte, n)
	sd, err := ini.RegisterDRAM(src)
	if err != nil {
		t.Fatal(err)
	}
	dd, err := tgt.RegisterDRAM(dst)
	if err != nil {
		t.Fatal(err)
	}
	f, err := xfer.OpenFile(filepath.Join(t.TempDir(), "tier"), n, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := tgt.RegisterFile(f, 0, n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ini.LoadRemoteMetadata(tgt.LocalMetadata()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, to := range []struct {
		typ xfer.MemType
		d   xfer.Desc
	}{{xfer.DRAM, dd}, {xfer.DRAM, dd}, {xfer.FILE, fd}} {
		r, err := ini.CreateXferReq(ctx, xfer.WRITE, xfer.DRAM, []xfer.Desc{sd}, "decode", to.typ, []xfer.Desc{to.d}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ini.PostXferReq(r); err != nil {
			t.Fatal(err)
		}
		if err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := ini.Close(); err != nil {
		t.Fatal(err)
	}
	rks, err := ReadPaths([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	rep := Analyze(rks, Options{})
	if len(rep.Transfers) != 2 || rep.Transfers[0].Path != "rdma" || rep.Transfers[0].Count != 2 || rep.Transfers[0].Bytes != 2*n ||
		rep.Transfers[1].Path != "tcp" || rep.Transfers[1].Count != 1 {
		t.Fatalf("transfers %+v", rep.Transfers)
	}
	if c := codes(rep); c["slow-path"] != 1 {
		t.Errorf("findings %+v: want slow-path", rep.Findings)
	}
	var text strings.Builder
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "Transfers of the xfer agents") {
		t.Errorf("text:\n%s", text.String())
	}
}
