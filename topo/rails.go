package topo

import (
	"net/netip"
	"strings"
)

// Rail is one of a host's rails: a network interface on an IPv4 subnet
// of its own, as in a rail-optimized cluster, where NIC i of every host
// sits on switch (and subnet) i. goccl stripes a peer's link over the
// rails GOCCL_SOCKET_IFNAME names, rail i to the peer's rail i.
type Rail struct {
	Iface  string `json:"iface"`
	Addr   string `json:"addr"`   // the interface's address on Subnet
	Subnet string `json:"subnet"` // CIDR, e.g. 10.200.1.0/24
	RDMA   string `json:"rdma,omitempty"`
}

// rails are h's rails: each up (or unknown-state) interface that is not a
// loopback, not a member of a bond or bridge, and not a container or VM
// bridge or veth by its name (docker*, virbr*, veth*), with an IPv4
// address, one rail per subnet (the first interface on it), in interface
// order. Addresses are known only when Detect reads the live system.
func rails(ifs []Interface) []Rail {
	var out []Rail
	seen := map[netip.Prefix]bool{}
	for _, i := range ifs {
		if i.Type == 772 || i.Name == "lo" || i.Master != "" || i.State != "up" && i.State != "unknown" ||
			strings.HasPrefix(i.Name, "docker") || strings.HasPrefix(i.Name, "virbr") || strings.HasPrefix(i.Name, "veth") {
			continue
		}
		for _, a := range i.Addrs {
			p, err := netip.ParsePrefix(a)
			if err != nil || !p.Addr().Is4() || p.Addr().IsLoopback() || p.Addr().IsLinkLocalUnicast() {
				continue
			}
			if sub := p.Masked(); !seen[sub] {
				seen[sub] = true
				out = append(out, Rail{Iface: i.Name, Addr: p.Addr().String(), Subnet: sub.String(), RDMA: i.RDMADevice})
			}
			break
		}
	}
	return out
}
