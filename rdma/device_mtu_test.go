package rdma

import (
	"net"
	"net/netip"
	"testing"
)

// TestActiveMTU: a v2 device's packets fit its interface unfragmented (as
// rxe derives its active MTU from its netdev's), v1's frames too.
func TestActiveMTU(t *testing.T) {
	for _, c := range []struct{ ifMTU, v2, v1 int }{
		{65536, 4096, 4096}, {9000, 4096, 4096}, {4200, 4096, 4096}, {4150, 2048, 2048},
		{1500, 1024, 1024}, {1280, 1024, 1024}, {1100, 1024, 1024}, {1000, 512, 512}, {300, 0, 0},
	} {
		if got := V2ActiveMTU(c.ifMTU); got != c.v2 {
			t.Errorf("V2ActiveMTU(%d) = %d, want %d", c.ifMTU, got, c.v2)
		}
		if got := V1ActiveMTU(c.ifMTU); got != c.v1 {
			t.Errorf("V1ActiveMTU(%d) = %d, want %d", c.ifMTU, got, c.v1)
		}
	}
	// A device on loopback takes lo's MTU; one on the unspecified
	// address keeps 4096.
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no lo: %v", err)
	}
	if got, want := interfaceMTU(netip.MustParseAddr("127.0.0.1")), lo.MTU; got != want {
		t.Errorf("interfaceMTU(127.0.0.1) = %d, want lo's %d", got, want)
	}
	if got := interfaceMTU(netip.IPv4Unspecified()); got != 0 {
		t.Errorf("interfaceMTU(0.0.0.0) = %d, want 0", got)
	}
	d, err := Open("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got, want := d.ActiveMTU(), V2ActiveMTU(lo.MTU); got != want {
		t.Errorf("device on loopback: active MTU %d, want %d", got, want)
	}
}
