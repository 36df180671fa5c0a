package launch

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortBelowEphemeral: the store's port lies below the kernel's
// ephemeral range (no socket binding port 0 can take it before rank 0
// binds it), and it can be bound.
func TestFreePortBelowEphemeral(t *testing.T) {
	lo := ephemeralLow()
	if lo <= storePortLow+1 {
		t.Skipf("the ephemeral range starts at %d: no room below it", lo)
	}
	seen := map[int]bool{}
	for range 20 {
		port, err := FreePort("")
		if err != nil {
			t.Fatal(err)
		}
		if port < storePortLow || port >= lo {
			t.Fatalf("port %d outside [%d, %d)", port, storePortLow, lo)
		}
		seen[port] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d: %v", port, err)
		}
		l.Close()
	}
	if len(seen) < 2 {
		t.Errorf("20 draws gave %d distinct ports", len(seen))
	}
}
