package tcp

import (
	"net"
	"strings"
	"testing"
)

func ips(s ...string) []net.IP {
	var v []net.IP
	for _, a := range s {
		v = append(v, net.ParseIP(a))
	}
	return v
}

var fakeIfaces = []ifaceInfo{
	{Name: "lo", Up: true, Loopback: true, Addrs: ips("127.0.0.1", "::1")},
	{Name: "docker0", Up: true, Addrs: ips("172.17.0.1")},
	{Name: "veth12ab", Up: true, Addrs: ips("fe80::1")},
	{Name: "eth0", Up: true, Addrs: ips("fe80::2", "10.0.0.5")},
	{Name: "eth1", Up: false, Addrs: ips("10.0.1.5")},
	{Name: "eth10", Up: true, Addrs: ips("10.0.10.5")},
	{Name: "ib0", Up: true, Addrs: ips("fd00::7", "192.168.7.1")},
	{Name: "ens6", Up: true, Addrs: ips("2001:db8::6")},
}

func TestSelectInterface(t *testing.T) {
	for _, tc := range []struct {
		spec     string
		list     []ifaceInfo
		name, ip string
	}{
		{"", fakeIfaces, "eth0", "10.0.0.5"},
		{"  ", fakeIfaces, "eth0", "10.0.0.5"},
		{"ib", fakeIfaces, "ib0", "192.168.7.1"},
		{"eth", fakeIfaces, "eth0", "10.0.0.5"},
		{"ib,eth", fakeIfaces, "eth0", "10.0.0.5"}, // system order, not spec order
		{"eth1", fakeIfaces, "eth10", "10.0.10.5"}, // prefix; eth1 itself is down
		{"=eth10", fakeIfaces, "eth10", "10.0.10.5"},
		{"=eth", nil, "", ""},
		{"=eth1", fakeIfaces, "", ""}, // down
		{"^eth,docker,veth", fakeIfaces, "ib0", "192.168.7.1"},
		{"^=eth0", fakeIfaces, "docker0", "172.17.0.1"},
		{"^docker,lo", fakeIfaces, "eth0", "10.0.0.5"},
		{"^eth,ib,docker,veth", fakeIfaces, "ens6", "2001:db8::6"}, // IPv6 when no IPv4 left
		{"^eth,ib,docker,veth,ens", fakeIfaces, "lo", "127.0.0.1"}, // loopback as a last resort
		{"lo", fakeIfaces, "lo", "127.0.0.1"},
		{"ens", fakeIfaces, "ens6", "2001:db8::6"},
		{"veth", fakeIfaces, "", ""}, // only a link-local IPv6 address
		{"nothing", fakeIfaces, "", ""},
		{"^", fakeIfaces, "", ""},
		// Defaults: skip docker/veth/virbr/lo, IPv6 when no IPv4, lo last.
		{"", []ifaceInfo{
			{Name: "lo", Up: true, Loopback: true, Addrs: ips("127.0.0.1")},
			{Name: "docker0", Up: true, Addrs: ips("172.17.0.1")},
			{Name: "virbr0", Up: true, Addrs: ips("192.168.122.1")},
			{Name: "veth0", Up: true, Addrs: ips("10.9.9.9")},
			{Name: "wlan0", Up: true, Addrs: ips("2001:db8::1")},
		}, "wlan0", "2001:db8::1"},
		{"", []ifaceInfo{
			{Name: "lo", Up: true, Loopback: true, Addrs: ips("::1", "127.0.0.1")},
			{Name: "docker0", Up: true, Addrs: ips("172.17.0.1")},
			{Name: "eth0", Up: false, Addrs: ips("10.0.0.1")},
		}, "lo", "127.0.0.1"},
		{"", []ifaceInfo{{Name: "eth0", Up: false, Addrs: ips("10.0.0.1")}}, "", ""},
		{"", nil, "", ""},
	} {
		got, err := selectInterface(tc.spec, tc.list)
		if tc.name == "" {
			if err == nil {
				t.Errorf("spec %q: got %v, want an error", tc.spec, got)
			} else if !strings.Contains(err.Error(), "GOCCL_SOCKET_IFNAME") || !strings.Contains(err.Error(), `"`+tc.spec+`"`) {
				t.Errorf("spec %q: error does not name the spec: %v", tc.spec, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("spec %q: %v", tc.spec, err)
			continue
		}
		if got.Name != tc.name || !got.IP.Equal(net.ParseIP(tc.ip)) {
			t.Errorf("spec %q: got %s %s, want %s %s", tc.spec, got.Name, got.IP, tc.name, tc.ip)
		}
	}
}

func TestSelectInterfaceErrorListsInterfaces(t *testing.T) {
	_, err := selectInterface("=ib7", fakeIfaces)
	if err == nil {
		t.Fatal("no error")
	}
	for _, s := range []string{"=ib7", "eth0", "10.0.0.5", "down", "lo"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

func TestSelectInterfaceSystem(t *testing.T) {
	ifc, err := SelectInterface("")
	if err != nil {
		t.Skipf("no usable interface on this machine: %v", err)
	}
	if ifc.Name == "" || ifc.IP == nil {
		t.Fatalf("%+v", ifc)
	}
	t.Logf("default interface: %s %s", ifc.Name, ifc.IP)
	lo, err := SelectInterface("lo")
	if err == nil && !lo.IP.IsLoopback() {
		t.Fatalf("lo: %+v", lo)
	}
}

func TestChooseBufSize(t *testing.T) {
	for _, tc := range []struct{ want, coreMax, autoMax, got int }{
		{4 << 20, 4 << 20, 32 << 20, 0},      // autotuning reaches further: leave it
		{4 << 20, 4 << 20, 4 << 20, 4 << 20}, // explicit gives 8 MiB > 4 MiB
		{4 << 20, 212992, 6 << 20, 0},        // capped at 208 KiB: would shrink
		{4 << 20, 0, 0, 4 << 20},             // unknown
	} {
		if got := chooseBufSize(tc.want, tc.coreMax, tc.autoMax); got != tc.got {
			t.Errorf("chooseBufSize(%d, %d, %d) = %d, want %d", tc.want, tc.coreMax, tc.autoMax, got, tc.got)
		}
	}
}

func TestChooseLocalBufSize(t *testing.T) {
	for _, tc := range []struct{ want, coreMax, got int }{
		{4 << 20, 4 << 20, 4 << 20},  // allowed: fixed
		{4 << 20, 16 << 20, 4 << 20}, // more allowed: still what we want
		{4 << 20, 2 << 20, 2 << 20},  // capped, still large enough
		{4 << 20, 212992, 0},         // capped at 208 KiB: autotuning does better
		{4 << 20, 0, 4 << 20},        // unknown
	} {
		if got := chooseLocalBufSize(tc.want, tc.coreMax); got != tc.got {
			t.Errorf("chooseLocalBufSize(%d, %d) = %d, want %d", tc.want, tc.coreMax, got, tc.got)
		}
	}
}

func TestSelectInterfaces(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want string // name=ip,...
	}{
		{"", "eth0=10.0.0.5"},
		{"^docker,lo", "eth0=10.0.0.5"}, // exclude: one interface, not rails
		{"eth", "eth0=10.0.0.5,eth10=10.0.10.5"},
		{"ib,eth", "eth0=10.0.0.5,eth10=10.0.10.5,ib0=192.168.7.1"}, // system order
		{"=eth0,eth1,eth10", "eth0=10.0.0.5,eth10=10.0.10.5"},       // eth1 is down
		{"=ib0", "ib0=192.168.7.1"},
		{"ens", "ens6=2001:db8::6"},
	} {
		got, err := selectInterfaces(tc.spec, fakeIfaces)
		if err != nil {
			t.Errorf("selectInterfaces(%q): %v", tc.spec, err)
			continue
		}
		var s []string
		for _, i := range got {
			s = append(s, i.Name+"="+i.IP.String())
		}
		if strings.Join(s, ",") != tc.want {
			t.Errorf("selectInterfaces(%q) = %s, want %s", tc.spec, strings.Join(s, ","), tc.want)
		}
	}
	if _, err := selectInterfaces("=eth1", fakeIfaces); err == nil {
		t.Error("selectInterfaces(=eth1): no error for a down interface")
	}
}
