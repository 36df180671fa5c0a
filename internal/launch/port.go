package launch

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// A store port chosen by binding port 0 and closing the listener can be
// handed by the kernel to any socket of the same host that binds port 0
// before rank 0 binds it again: the job's own ranks open listeners and
// connections on ephemeral ports in that window, and one of them did take
// the store's port (rank 0: "address already in use"; the others reached
// that rank's link listener and failed its handshake). The kernel gives out
// ephemeral ports only from net.ipv4.ip_local_port_range, so the store's
// port is drawn below that range, where only an explicit bind can take it,
// as torchrun's MASTER_PORT 29500 is.

// storePortLow is the lowest port FreePort draws from.
const storePortLow = 20000

// FreePort returns a TCP port on ip (127.0.0.1 when "") that was free a
// moment ago and lies below the kernel's ephemeral port range, so that no
// socket binding port 0 can take it before rank 0 binds it. Where that
// range leaves no room (it starts at or below storePortLow), or 64 draws
// were all taken, it returns an ephemeral port.
func FreePort(ip string) (int, error) {
	if ip == "" {
		ip = "127.0.0.1"
	}
	if hi := ephemeralLow() - 1; hi > storePortLow {
		for range 64 {
			port := storePortLow + rand.IntN(hi-storePortLow+1)
			l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err == nil {
				l.Close()
				return port, nil
			}
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port on %s: %w", ip, err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port, nil
}

// ephemeralLow returns the first port of this network namespace's
// ephemeral range (net.ipv4.ip_local_port_range; Linux's default 32768
// where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}
