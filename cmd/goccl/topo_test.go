package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccl/goccl/topo"
	"github.com/goccl/goccl/topo/topotest"
)

// TestTopoCommand: goccl topo on the two-socket tree of package topo, as a
// table, JSON and NCCL-shaped XML.
func TestTopoCommand(t *testing.T) {
	root := topotest.FakeRoot(t, filepath.Join("..", "..", "topo", "testdata", "two-socket"))
	var o, e bytes.Buffer
	if code := cli([]string{"topo", "--root", root}, &o, &e); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, e.String())
	}
	for _, want := range []string{
		"host      gpu-node-07 (id 5c1f0a3e-8e8a-4b7e-9d55-0e2f4a1b7c01/gpu-node-07/0)",
		"NUMA  CPUS  COUNT  MEMORY",
		"ens1f0np0    device             up       100 Gb/s  4200   0000:16:00.0  0     mlx5_0/1",
		"veth3f2a1b0  virtual",
		"mlx5_0  1     ACTIVE  Ethernet (RoCE)  100 Gb/sec (4X EDR)  ens1f0np0",
		"GPUs: none (nvidia-smi not found)", // --root: nvidia-smi describes the live machine, not the tree
	} {
		if !strings.Contains(o.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, o.String())
		}
	}

	o.Reset()
	if code := cli([]string{"topo", "-json", "-root=" + root}, &o, &e); code != 0 {
		t.Fatalf("--json: exit %d, stderr %q", code, e.String())
	}
	var h topo.Host
	if err := json.Unmarshal(o.Bytes(), &h); err != nil || h.Hostname != "gpu-node-07" || len(h.NUMA) != 2 || len(h.RDMA) != 1 || !h.Interfaces[2].RDMA {
		t.Fatalf("--json: %v\n%s", err, o.String())
	}

	o.Reset()
	if code := cli([]string{"topo", "--xml", "--root", root}, &o, &e); code != 0 {
		t.Fatalf("--xml: exit %d, stderr %q", code, e.String())
	}
	var sys struct {
		XMLName xml.Name
		Version string `xml:"version,attr"`
		CPUs    []struct {
			NUMA string `xml:"numaid,attr"`
		} `xml:"cpu"`
	}
	if err := xml.Unmarshal(o.Bytes(), &sys); err != nil || sys.XMLName.Local != "system" || sys.Version != "1" || len(sys.CPUs) != 2 {
		t.Fatalf("--xml: %v %+v\n%s", err, sys, o.String())
	}
	if !strings.HasPrefix(o.String(), `<system version="1">`+"\n  <cpu host_hash=") {
		t.Errorf("--xml does not start as NCCL's dump:\n%s", o.String())
	}
}

func TestTopoCommandLive(t *testing.T) {
	var o, e bytes.Buffer
	if code := cli([]string{"topo"}, &o, &e); code != 0 || !strings.Contains(o.String(), "INTERFACE") {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, e.String(), o.String())
	}
	host, _ := os.Hostname()
	if !strings.Contains(o.String(), "host      "+host+" ") {
		t.Errorf("no host line for %s:\n%s", host, o.String())
	}
}

func TestTopoCommandUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"topo", "--json", "--xml"}, 2, "exclude each other"},
		{[]string{"topo", "extra"}, 2, "unexpected arguments"},
		{[]string{"topo", "--jsno"}, 2, `did you mean "--json"`},
		{[]string{"topo", "--root", "/nonexistent-goccl-root"}, 1, "no such file"},
		{[]string{"topo", "-h"}, 0, "usage: goccl topo"},
	} {
		var o, e bytes.Buffer
		code := cli(c.args, &o, &e)
		if code != c.code || !strings.Contains(o.String()+e.String(), c.want) {
			t.Errorf("%v: exit %d, output %q %q; want %d and %q", c.args, code, o.String(), e.String(), c.code, c.want)
		}
	}
}
