package tcp

import (
	"fmt"
	"net"
	"strings"

	"github.com/goccl/goccl/internal/config"
)

// Interface is a network interface and the address goccl uses on it.
type Interface struct {
	Name string
	IP   net.IP
}

// SelectInterface picks the interface and address to listen on. spec uses the
// NCCL_SOCKET_IFNAME syntax (goccl reads it from GOCCL_SOCKET_IFNAME):
//
//	"eth,ib"     interfaces whose names start with eth or ib
//	"^docker,lo" any interface except those whose names start with docker or lo
//	"=eth0"      exactly the interface eth0 (comma-separated list allowed)
//	"^=eth0"     any interface except exactly eth0
//
// An empty spec picks the first up interface with an IPv4 address (else one
// with an IPv6 address), skipping loopback, docker*, veth* and virbr*; the
// loopback interface is used only when nothing else qualifies. With an exclude
// spec, non-loopback interfaces are also preferred. Interfaces are considered
// in system order; down interfaces and IPv6 link-local addresses never count.
func SelectInterface(spec string) (Interface, error) {
	list, err := systemInterfaces()
	if err != nil {
		return Interface{}, fmt.Errorf("tcp: listing network interfaces: %w", err)
	}
	return selectInterface(spec, list)
}

// SelectInterfaces is every interface spec names, as the rails of a
// multi-rail host (one TCP endpoint each, rail i linked to a peer's rail
// i): with an include spec ("eth", "=eth0,eth1"), each up interface that
// matches and has a usable address, in system order, with the address
// SelectInterface would take on it; with an empty or exclude spec only
// SelectInterface's choice (a host whose NICs are not rails keeps one).
func SelectInterfaces(spec string) ([]Interface, error) {
	list, err := systemInterfaces()
	if err != nil {
		return nil, fmt.Errorf("tcp: listing network interfaces: %w", err)
	}
	return selectInterfaces(spec, list)
}

func selectInterfaces(spec string, list []ifaceInfo) ([]Interface, error) {
	first, err := selectInterface(spec, list)
	if err != nil {
		return nil, err
	}
	p, err := parseIfSpec(spec)
	if err != nil || p.exclude {
		return []Interface{first}, nil
	}
	var rails []Interface
	for i := range list {
		if ifc, ok := pick(list[i:i+1], func(i *ifaceInfo) bool { return p.matches(i.Name) }); ok {
			rails = append(rails, ifc)
		}
	}
	return rails, nil
}

// ifaceInfo is what selectInterface needs to know about an interface.
type ifaceInfo struct {
	Name     string
	Up       bool
	Loopback bool
	Addrs    []net.IP
}

func systemInterfaces() ([]ifaceInfo, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	list := make([]ifaceInfo, 0, len(ifs))
	for _, ifc := range ifs {
		info := ifaceInfo{
			Name:     ifc.Name,
			Up:       ifc.Flags&net.FlagUp != 0,
			Loopback: ifc.Flags&net.FlagLoopback != 0,
		}
		addrs, err := ifc.Addrs()
		if err == nil {
			for _, a := range addrs {
				switch v := a.(type) {
				case *net.IPNet:
					info.Addrs = append(info.Addrs, v.IP)
				case *net.IPAddr:
					info.Addrs = append(info.Addrs, v.IP)
				}
			}
		}
		list = append(list, info)
	}
	return list, nil
}

type ifSpec struct {
	exclude, exact bool
	names          []string
}

func parseIfSpec(spec string) (ifSpec, error) {
	var p ifSpec
	s := strings.TrimSpace(spec)
	if strings.HasPrefix(s, "^") {
		p.exclude, s = true, s[1:]
	}
	if strings.HasPrefix(s, "=") {
		p.exact, s = true, s[1:]
	}
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			p.names = append(p.names, n)
		}
	}
	if len(p.names) == 0 {
		return p, fmt.Errorf("tcp: %s=%q names no interface", config.SocketIfname.Name, spec)
	}
	return p, nil
}

func (p ifSpec) matches(name string) bool {
	for _, n := range p.names {
		if p.exact && name == n || !p.exact && strings.HasPrefix(name, n) {
			return true
		}
	}
	return false
}

// defaultSkipped reports interfaces the empty spec avoids.
func defaultSkipped(ifc *ifaceInfo) bool {
	if ifc.Loopback {
		return true
	}
	for _, p := range [...]string{"lo", "docker", "veth", "virbr"} {
		if strings.HasPrefix(ifc.Name, p) {
			return true
		}
	}
	return false
}

func isLoopback(ifc *ifaceInfo) bool { return ifc.Loopback || strings.HasPrefix(ifc.Name, "lo") }

// usableIP rejects addresses peers cannot dial: unspecified, multicast, and
// IPv6 link-local ones (they need a zone, which net.IP cannot carry).
func usableIP(ip net.IP) bool {
	if len(ip) == 0 || ip.IsUnspecified() || ip.IsMulticast() {
		return false
	}
	return ip.To4() != nil || !ip.IsLinkLocalUnicast()
}

// pick returns the first candidate with an IPv4 address, else the first with
// an IPv6 one.
func pick(list []ifaceInfo, ok func(*ifaceInfo) bool) (Interface, bool) {
	for _, v4 := range [...]bool{true, false} {
		for i := range list {
			ifc := &list[i]
			if !ifc.Up || !ok(ifc) {
				continue
			}
			for _, ip := range ifc.Addrs {
				if usableIP(ip) && (ip.To4() != nil) == v4 {
					if ip4 := ip.To4(); ip4 != nil {
						ip = ip4
					}
					return Interface{Name: ifc.Name, IP: append(net.IP(nil), ip...)}, true
				}
			}
		}
	}
	return Interface{}, false
}

func selectInterface(spec string, list []ifaceInfo) (Interface, error) {
	if strings.TrimSpace(spec) == "" {
		if ifc, ok := pick(list, func(i *ifaceInfo) bool { return !defaultSkipped(i) }); ok {
			return ifc, nil
		}
		if ifc, ok := pick(list, isLoopback); ok {
			return ifc, nil
		}
		return Interface{}, noMatch(spec, list)
	}
	p, err := parseIfSpec(spec)
	if err != nil {
		return Interface{}, err
	}
	if !p.exclude {
		if ifc, ok := pick(list, func(i *ifaceInfo) bool { return p.matches(i.Name) }); ok {
			return ifc, nil
		}
		return Interface{}, noMatch(spec, list)
	}
	if ifc, ok := pick(list, func(i *ifaceInfo) bool { return !p.matches(i.Name) && !isLoopback(i) }); ok {
		return ifc, nil
	}
	if ifc, ok := pick(list, func(i *ifaceInfo) bool { return !p.matches(i.Name) }); ok {
		return ifc, nil
	}
	return Interface{}, noMatch(spec, list)
}

func noMatch(spec string, list []ifaceInfo) error {
	var b strings.Builder
	for i, ifc := range list {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(ifc.Name)
		b.WriteString(" [")
		if ifc.Up {
			b.WriteString("up")
		} else {
			b.WriteString("down")
		}
		if ifc.Loopback {
			b.WriteString(",loopback")
		}
		for _, ip := range ifc.Addrs {
			b.WriteString(" ")
			b.WriteString(ip.String())
		}
		b.WriteString("]")
	}
	if len(list) == 0 {
		b.WriteString("none")
	}
	return fmt.Errorf("tcp: no usable interface matches %s=%q (interfaces seen: %s)", config.SocketIfname.Name, spec, b.String())
}
