package main

import (
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/rdma/wire"
)

// ibMTUs are the IB path MTUs with their enum ibv_mtu values.
var ibMTUs = []struct{ bytes, code int }{{4096, 5}, {2048, 4}, {1024, 3}, {512, 2}, {256, 1}}

// activeMTU is the largest IB MTU (and its enum ibv_mtu code) whose packets
// fit an interface MTU for both RoCE versions the port serves: RoCE v1's
// headers (GRH 40) are the larger, so it is rdma.V1ActiveMTU's value.
func activeMTU(ifMTU int) (int, int) {
	m := rdma.V1ActiveMTU(ifMTU)
	for _, e := range ibMTUs {
		if e.bytes == m {
			return m, e.code
		}
	}
	return 0, 0
}

// roceDevinfo prints, in ibv_devinfo's shape, the soft RoCE device goccl
// would open on each interface with an Ethernet address or an IPv4 address:
// GID 0 the link-local GID of its MAC, RoCE v1 (rdma.OpenV1 on the
// interface), then its IPv4 addresses, IPv4-mapped, RoCE v2 (rdma.Open binds
// one of them), as a RoCE NIC's GID table lists them.
func roceDevinfo(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: goccl roce devinfo")
		return 2
	}
	ifs, err := net.Interfaces()
	if err != nil {
		fmt.Fprintf(stderr, "goccl roce devinfo: %v\n", err)
		return 1
	}
	n := 0
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		type gid struct {
			addr netip.Addr
			v    int
		}
		var gids []gid
		if len(ifc.HardwareAddr) == 6 {
			gids = append(gids, gid{netip.AddrFrom16(wire.LinkLocalGID([6]byte(ifc.HardwareAddr))), 1})
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap().Is4() {
					gids = append(gids, gid{netip.AddrFrom16(ip.Unmap().As16()), 2})
				}
			}
		}
		if len(gids) == 0 {
			continue
		}
		n++
		state := "PORT_DOWN (1)"
		if ifc.Flags&net.FlagUp != 0 && ifc.Flags&net.FlagRunning != 0 {
			state = "PORT_ACTIVE (4)"
		}
		mtu, code := activeMTU(ifc.MTU)
		fmt.Fprintf(stdout, "hca_id:\tgoccl_%s\n", ifc.Name)
		fmt.Fprintf(stdout, "\ttransport:\t\t\tInfiniBand (0)\n")
		fmt.Fprintf(stdout, "\tfw_ver:\t\t\t\tgoccl soft RoCE (v1: AF_PACKET, v2: UDP)\n")
		fmt.Fprintf(stdout, "\tnode_guid:\t\t\t%s\n", guidFor(ifc.HardwareAddr))
		fmt.Fprintf(stdout, "\tvendor_id:\t\t\t0x0000\n\tvendor_part_id:\t\t\t0\n\thw_ver:\t\t\t\t0x0\n\tphys_port_cnt:\t\t\t1\n")
		fmt.Fprintf(stdout, "\t\tport:\t1\n")
		fmt.Fprintf(stdout, "\t\t\tstate:\t\t\t%s\n", state)
		fmt.Fprintf(stdout, "\t\t\tmax_mtu:\t\t4096 (5)\n")
		if mtu > 0 {
			fmt.Fprintf(stdout, "\t\t\tactive_mtu:\t\t%d (%d)\n", mtu, code)
		} else {
			fmt.Fprintf(stdout, "\t\t\tactive_mtu:\t\tnone (interface MTU %d holds no 256-byte RoCE packet)\n", ifc.MTU)
		}
		fmt.Fprintf(stdout, "\t\t\tsm_lid:\t\t\t0\n\t\t\tport_lid:\t\t0\n\t\t\tport_lmc:\t\t0x00\n\t\t\tlink_layer:\t\tEthernet\n")
		for i, g := range gids {
			fmt.Fprintf(stdout, "\t\t\tGID[%3d]:\t\t%s, RoCE v%d\n", i, g.addr, g.v)
		}
		fmt.Fprintln(stdout)
	}
	if n == 0 {
		fmt.Fprintln(stdout, "No IB devices found (no interface has an Ethernet or IPv4 address)")
	}
	return 0
}

// guidFor makes an EUI-64 style GUID from a MAC address (as RoCE NICs do).
func guidFor(mac net.HardwareAddr) string {
	if len(mac) != 6 {
		return "0000:0000:0000:0000"
	}
	g := []byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7])
}
