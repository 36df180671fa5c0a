package ibv

import (
	"fmt"
	"strings"
	"testing"

	"github.com/goccl/goccl/doctor"
	"github.com/goccl/goccl/doctor/internal/doctortest"
)

func ibvParse(t *testing.T, text string) *Report {
	t.Helper()
	return doctortest.Read(t, Parse, text)
}

func ibvPort(t *testing.T, rep *Report, dev string, port int) *Port {
	t.Helper()
	for i := range rep.Devices {
		if rep.Devices[i].Name == dev {
			for j := range rep.Devices[i].Ports {
				if rep.Devices[i].Ports[j].Port == port {
					return &rep.Devices[i].Ports[j]
				}
			}
		}
	}
	t.Fatalf("no %s port %d in %+v", dev, port, rep.Devices)
	return nil
}

func TestIBVReal01Ibstat(t *testing.T) {
	rep := ibvParse(t, doctortest.RealInput(t, "ibv-01.txt"))
	if len(rep.Devices) != 2 || rep.Devices[0].Name != "mlx5_0" || rep.Devices[1].Name != "mlx5_1" {
		t.Fatalf("devices %+v", rep.Devices)
	}
	for _, d := range rep.Devices {
		if d.CAType != "MT4125" || d.FWVersion != "22.38.1900" || len(d.Ports) != 1 || d.Sources[0] != "ibstat" {
			t.Errorf("device %+v", d)
		}
		p := d.Ports[0]
		if p.Port != 1 || p.State != "ACTIVE" || p.PhysState != "LinkUp" || p.RateGbps != 100 || p.LinkLayer != "Ethernet" {
			t.Errorf("%s port %+v", d.Name, p)
		}
	}
	c := doctortest.Codes(rep.Findings, "")
	if c["roce-link-layer"] != 1 || c["ibv-port-not-active"] != 0 || c["ibv-mtu-mismatch"] != 0 || c["roce-no-v2-gid"] != 0 || len(rep.Findings) != 1 {
		t.Errorf("findings %v", rep.Findings)
	}
	if _, ok := doctortest.FindingWith(rep.Findings, "roce-link-layer", "mlx5_0 port 1, mlx5_1 port 1"); !ok {
		t.Errorf("%v", rep.Findings)
	}
}

func TestIBVReal07GIDIndex(t *testing.T) {
	rep := ibvParse(t, doctortest.RealInput(t, "ibv-07.txt"))
	if len(rep.Devices) != 1 || rep.Devices[0].Name != "mlx5_bond_0" {
		t.Fatalf("devices %+v", rep.Devices)
	}
	p := ibvPort(t, rep, "mlx5_bond_0", 1)
	if p.PhysState != "LINK_UP" || len(p.GIDs) != 4 {
		t.Fatalf("port %+v", p)
	}
	want := []struct {
		typ, ipv4 string
		ll        bool
	}{{"RoCE v1", "", true}, {"RoCE v2", "", true}, {"RoCE v1", "200.0.209.6", false}, {"RoCE v2", "200.0.209.6", false}}
	for i, w := range want {
		g := p.GIDs[i]
		if g.Index != i || g.Type != w.typ || g.IPv4 != w.ipv4 || g.LinkLocal != w.ll {
			t.Errorf("GID %d = %+v, want %+v", i, g, w)
		}
	}
	f, ok := doctortest.FindingWith(rep.Findings, "roce-gid-index", "NCCL_IB_GID_INDEX=3")
	if !ok || f.Severity != doctor.SevWarn || !strings.Contains(f.Message, "GID 1 is link-local") {
		t.Errorf("findings %v", rep.Findings)
	}
	// the link layer is not printed in the excerpt: no RoCE note, no v2 complaint
	if c := doctortest.Codes(rep.Findings, ""); c["roce-no-v2-gid"] != 0 || c["ibv-port-not-active"] != 0 {
		t.Errorf("findings %v", rep.Findings)
	}
}

func TestIBVDevinfoDownAndMTUMismatch(t *testing.T) {
	rep := ibvParse(t, doctortest.File(t, "devinfo-v-down-mtu.txt"))
	if len(rep.Devices) != 3 {
		t.Fatalf("devices %d", len(rep.Devices))
	}
	p0 := ibvPort(t, rep, "mlx5_0", 1)
	if p0.State != "ACTIVE" || p0.PhysState != "LINK_UP" || p0.ActiveMTU != 4096 || p0.MaxMTU != 4096 || p0.RateGbps != 400 || p0.LinkLayer != "InfiniBand" || p0.LID != "12" {
		t.Errorf("mlx5_0 %+v", p0)
	}
	if len(p0.GIDs) != 1 || p0.GIDs[0].Type != "" || !p0.GIDs[0].LinkLocal {
		t.Errorf("mlx5_0 GIDs %+v", p0.GIDs)
	}
	if rep.Devices[0].FWVersion != "28.39.1002" || rep.Devices[0].Transport != "InfiniBand" {
		t.Errorf("device %+v", rep.Devices[0])
	}
	if p := ibvPort(t, rep, "mlx5_2", 1); p.State != "DOWN" || p.PhysState != "POLLING" {
		t.Errorf("mlx5_2 %+v", p)
	}
	if f, ok := doctortest.FindingWith(rep.Findings, "ibv-port-not-active", "mlx5_2 port 1 is DOWN, physical state POLLING"); !ok || f.Severity != doctor.SevWarn {
		t.Errorf("down: %v", rep.Findings)
	}
	// mlx5_2 is down: its 4096 does not count
	if _, ok := doctortest.FindingWith(rep.Findings, "ibv-mtu-mismatch", "active InfiniBand ports differ in active MTU: 2048 on mlx5_1 port 1; 4096 on mlx5_0 port 1"); !ok {
		t.Errorf("mtu: %v", rep.Findings)
	}
	c := doctortest.Codes(rep.Findings, "")
	if c["ibv-mtu-below-max"] != 1 || c["roce-link-layer"] != 0 || c["ibv-port-not-active"] != 1 {
		t.Errorf("codes %v", c)
	}
}

func TestIBVIbstatusShowGids(t *testing.T) {
	rep := ibvParse(t, doctortest.File(t, "ibstatus-showgids.txt"))
	if len(rep.Devices) != 3 {
		t.Fatalf("devices %+v", rep.Devices)
	}
	p0 := ibvPort(t, rep, "mlx5_0", 1)
	if p0.State != "ACTIVE" || p0.PhysState != "LinkUp" || p0.RateGbps != 100 || p0.LinkLayer != "Ethernet" || p0.Netdev != "ens1f0" {
		t.Errorf("mlx5_0 %+v", p0)
	}
	if strings.Join(rep.Devices[0].Sources, ",") != "ibstatus,show_gids" {
		t.Errorf("sources %v", rep.Devices[0].Sources)
	}
	if len(p0.GIDs) != 4 || p0.GIDs[3].IPv4 != "10.10.1.1" || p0.GIDs[3].Type != "RoCE v2" || p0.GIDs[0].Type != "RoCE v1" || p0.GIDs[0].Netdev != "ens1f0" {
		t.Errorf("mlx5_0 GIDs %+v", p0.GIDs)
	}
	if p := ibvPort(t, rep, "mlx5_1", 1); p.State != "DOWN" || p.PhysState != "Disabled" || p.RateGbps != 40 {
		t.Errorf("mlx5_1 %+v", p)
	}
	if _, ok := doctortest.FindingWith(rep.Findings, "roce-no-v2-gid", "mlx5_1 port 1"); !ok {
		t.Errorf("no v2: %v", rep.Findings)
	}
	if _, ok := doctortest.FindingWith(rep.Findings, "roce-gid-index", "NCCL_IB_GID_INDEX=3"); !ok {
		t.Errorf("gid 3: %v", rep.Findings)
	}
	if _, ok := doctortest.FindingWith(rep.Findings, "roce-gid-index", "NCCL_IB_GID_INDEX=5"); !ok {
		t.Errorf("gid 5 on mlx5_2: %v", rep.Findings)
	}
	if _, ok := doctortest.FindingWith(rep.Findings, "roce-gid-index-differs", "3 on mlx5_0 port 1; 5 on mlx5_2 port 1"); !ok {
		t.Errorf("differs: %v", rep.Findings)
	}
	c := doctortest.Codes(rep.Findings, "")
	if c["ibv-port-not-active"] != 1 || c["roce-link-layer"] != 1 {
		t.Errorf("codes %v", c)
	}
}

func TestIBVNothing(t *testing.T) {
	for _, in := range []string{"", "hello: world\n", "GID[x]: 1\n", "Port 1:\n\tState: Active\n"} {
		rep := ibvParse(t, in)
		if len(rep.Devices) != 0 || doctortest.Codes(rep.Findings, "")["ibv-no-devices"] != 1 {
			t.Errorf("%q: %+v", in, rep)
		}
	}
}

// TestIBVManyDevicesAndGIDs: with devices, ports and GIDs looked up in
// maps, 1024 devices and a port of 1024 GIDs, each GID printed twice, still
// merge by name, port and index.
func TestIBVManyDevicesAndGIDs(t *testing.T) {
	var b strings.Builder
	b.WriteString("DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4 \t\tVER\tDEV\n")
	for d := 0; d < 1024; d++ {
		for g := 0; g < 1024; g += 64 {
			fmt.Fprintf(&b, "mlx5_%d\t1\t%d\t0000:0000:0000:0000:0000:ffff:0a00:%04x\t\tv2\teth%d\n", d, g, d, d)
		}
	}
	for g := 0; g < 1024; g++ {
		fmt.Fprintf(&b, "GID[%4d]:\t\t::ffff:10.0.%d.%d, RoCE v2\n", g, g/256, g%256)
	}
	for g := 0; g < 1024; g++ {
		fmt.Fprintf(&b, "GID[%4d]:\t\t::ffff:10.0.%d.%d\n", g, g/256, g%256)
	}
	rep, err := Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Devices) != 1024 {
		t.Fatalf("devices %d", len(rep.Devices))
	}
	// The GID lines after the table go to the last device's port 1; the
	// repeats without a type keep RoCE v2.
	last := ibvPort(t, rep, "mlx5_1023", 1)
	if len(last.GIDs) != 1024 || last.GIDs[64].Type != "RoCE v2" || last.GIDs[64].IPv4 != "10.0.0.64" || last.GIDs[64].Netdev != "eth1023" {
		t.Errorf("last port: %d GIDs, GID 64 %+v", len(last.GIDs), last.GIDs[64])
	}
	if p := ibvPort(t, rep, "mlx5_3", 1); len(p.GIDs) != 16 || p.GIDs[1].Index != 64 {
		t.Errorf("mlx5_3: %+v", p.GIDs)
	}
	// ibstatus' default_gid then the same index from ibv_devinfo -v
	rep = ibvParse(t, "Infiniband device 'mlx5_0' port 1 status:\n\tdefault gid:\t fe80:0000:0000:0000:0202:c9ff:fe00:0001\n\tlink_layer:\t Ethernet\nhca_id:\tmlx5_0\n\tport:\t1\n\t\t\tGID[  0]:\t\tfe80::202:c9ff:fe00:1, RoCE v1\n")
	if p := ibvPort(t, rep, "mlx5_0", 1); len(p.GIDs) != 1 || p.GIDs[0].Type != "RoCE v1" {
		t.Errorf("default gid merge: %+v", p.GIDs)
	}
}

// TestFindingCodesDocumented: the package doc lists every finding code the
// package emits, and only those.
func TestFindingCodesDocumented(t *testing.T) {
	doctortest.CodesDocumented(t, 5)
}
