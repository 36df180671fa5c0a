// Package ibv reads RDMA device listings (`goccl doctor ibv FILE`): ports,
// states, MTUs and GID tables, and the NCCL_IB_GID_INDEX to use.
//
// Parse reads, in any mix and order, the outputs of:
//
//   - ibv_devinfo [-v] (rdma-core): "hca_id:\tmlx5_0" starts a device,
//     "port:\t1" a port, then "key:\tvalue" lines (state: PORT_ACTIVE (4),
//     phys_state: LINK_UP (5), max_mtu/active_mtu: 4096 (5), link_layer:
//     Ethernet, active_width: 4X (2), active_speed: 25.0 Gbps (10)) and, with
//     -v, the GID table "GID[  3]:\t\t::ffff:10.0.0.1, RoCE v2".
//   - ibstat (infiniband-diags): "CA 'mlx5_0'", "Port 1:", "State: Active",
//     "Physical state: LinkUp", "Rate: 100" (Gb/s), "Link layer: Ethernet".
//   - ibstatus (infiniband-diags): "Infiniband device 'mlx5_0' port 1
//     status:" then "state: 4: ACTIVE", "phys state: 5: LinkUp",
//     "rate: 100 Gb/sec (4X EDR)", "link_layer: InfiniBand".
//   - show_gids (Mellanox OFED script): a table "DEV PORT INDEX GID IPv4 VER
//     DEV" whose rows are "mlx5_0 1 3 0000:...:ffff:0a00:0001 10.0.0.1 v2
//     eth0" (the IPv4 column is empty for non-IPv4 GIDs).
//
// Each line is recognised on its own, so blocks of different tools may
// follow each other; a device seen twice (ibstat then show_gids) is merged
// by name. GID lines before any device header (a pasted excerpt) go to the
// device named by an "ibv_devinfo -d NAME" command line if one precedes
// them, else to a device named "?"; a GID line before any port goes to
// port 1. MTUs are bytes, rates Gb/s (1 Gb = 1e9 bits).
//
// The checks (PortFindings per port, FleetFindings across ports) are
// also what host.Run runs on the ports it reads from sysfs, so a
// condition has one code whichever way it was seen.
//
// Finding codes (severity):
//
//	ibv-no-devices            warn        no RDMA device in the input
//	ibv-port-not-active       warn        a port whose state is not ACTIVE
//	ibv-mtu-below-max         info        an active port's active MTU below its max MTU
//	ibv-mtu-mismatch          warn        active ports of one link layer differ in active MTU
//	roce-no-gid               warn        a RoCE port with an empty GID table (sysfs only)
//	roce-no-v2-gid            warn        a RoCE port with only RoCE v1 GIDs
//	roce-gid-index            info, warn  the IPv4-mapped RoCE v2 GID to use (warn when a link-local v2 GID is there too)
//	roce-only-link-local-gid  warn        the only RoCE v2 GIDs are link-local
//	roce-no-ipv4-gid          info        RoCE v2 GIDs, global IPv6 only
//	roce-gid-index-differs    warn        the IPv4 RoCE v2 GID sits at different indices on different ports
//	roce-link-layer           info        ports with link layer Ethernet (RoCE)
package ibv

import (
	"fmt"
	"io"
	"net"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/goccl/goccl/doctor"
)

// Report is what Parse found.
type Report struct {
	Devices  []Device         `json:"devices"`
	Findings []doctor.Finding `json:"findings"`
}

// Device is one HCA.
type Device struct {
	Name string `json:"name"`
	// Sources are the formats it was seen in: ibv_devinfo, ibstat,
	// ibstatus, show_gids.
	Sources   []string `json:"sources"`
	FWVersion string   `json:"fw_version,omitempty"`
	NodeGUID  string   `json:"node_guid,omitempty"`
	Transport string   `json:"transport,omitempty"`
	CAType    string   `json:"ca_type,omitempty"`
	Ports     []Port   `json:"ports"`
}

// Port is one port of an HCA.
type Port struct {
	Port int `json:"port"`
	// State is upper case without the number: ACTIVE, DOWN, INIT, ARMED.
	State string `json:"state,omitempty"`
	// PhysState is as printed without the number: LINK_UP / LinkUp,
	// POLLING / Polling, DISABLED / Disabled.
	PhysState  string  `json:"phys_state,omitempty"`
	LinkLayer  string  `json:"link_layer,omitempty"` // InfiniBand or Ethernet
	ActiveMTU  int     `json:"active_mtu,omitempty"` // bytes
	MaxMTU     int     `json:"max_mtu,omitempty"`    // bytes
	Rate       string  `json:"rate,omitempty"`       // as printed
	RateGbps   float64 `json:"rate_gbps,omitempty"`  // Gb/s, 1 Gb = 1e9 bits
	LID        string  `json:"lid,omitempty"`
	Netdev     string  `json:"netdev,omitempty"`
	GIDs       []GID   `json:"gids"`
	activeWide float64
	speedGbps  float64
	// GIDsComplete says GIDs is the whole table (a view of sysfs, as host
	// builds it), so an empty one means no GID at all rather than a listing
	// that does not print them. Parse never sets it.
	GIDsComplete bool `json:"-"`
}

// GID is one GID table entry.
type GID struct {
	Index int    `json:"index"`
	GID   string `json:"gid"`
	// Type is "RoCE v1", "RoCE v2", "IB" or "" when not shown.
	Type string `json:"type,omitempty"`
	// IPv4 is the address of an IPv4-mapped GID (::ffff:a.b.c.d).
	IPv4 string `json:"ipv4,omitempty"`
	// LinkLocal marks an fe80::/10 GID (from the interface's link-local
	// IPv6 address or the port GUID).
	LinkLocal bool   `json:"link_local,omitempty"`
	Netdev    string `json:"netdev,omitempty"`
}

var (
	ibvHCARe      = regexp.MustCompile(`^hca_id:\s*(\S+)`)
	ibvCARe       = regexp.MustCompile(`^CA\s+'([^']+)'`)
	ibvStatusRe   = regexp.MustCompile(`^Infiniband device\s+'([^']+)'\s+port\s+(\d+)\s+status:`)
	ibvPortRe     = regexp.MustCompile(`^(?:port:\s*(\d+)|Port\s+(\d+):)\s*$`)
	ibvGIDRe      = regexp.MustCompile(`^GID\[\s*(\d+)\]:\s*([0-9A-Fa-f:.]+)\s*,?\s*(RoCE\s*v[12]|IB)?`)
	ibvShowHdrRe  = regexp.MustCompile(`^DEV\s+PORT\s+INDEX\s+GID`)
	ibvDashDRe    = regexp.MustCompile(`ibv_devinfo\b.*\s(?:-d|--ib-dev(?:=|\s))\s*(\S+)`)
	ibvKeyValueRe = regexp.MustCompile(`^([A-Za-z][A-Za-z _]*?)\s*:\s*(.*)$`)
	ibvNumPrefix  = regexp.MustCompile(`^\d+:\s*`)
	ibvNumSuffix  = regexp.MustCompile(`\s*\(\d+\)$`)
)

type ibvParser struct {
	rep     *Report
	dev     int // index into rep.Devices, -1 none
	port    int // index into the device's ports, -1 none
	pending string
	// indexes, so that a line costs no scan of what was read before
	devs  map[string]int // name -> index into rep.Devices
	ports map[[2]int]int // device, port number -> index into its Ports
	gids  map[[3]int]int // device, port index, GID index -> index into its GIDs
}

func (p *ibvParser) device(name, source string) {
	p.port = -1
	if i, ok := p.devs[name]; ok {
		p.dev = i
		p.addSource(source)
		return
	}
	if len(p.rep.Devices) >= 1024 {
		p.dev = len(p.rep.Devices) - 1
		return
	}
	p.rep.Devices = append(p.rep.Devices, Device{Name: name, Ports: []Port{}, Sources: []string{}})
	p.dev = len(p.rep.Devices) - 1
	p.devs[name] = p.dev
	p.addSource(source)
}

func (p *ibvParser) addSource(s string) {
	d := &p.rep.Devices[p.dev]
	for _, x := range d.Sources {
		if x == s {
			return
		}
	}
	d.Sources = append(d.Sources, s)
}

func (p *ibvParser) portNum(num int) {
	d := &p.rep.Devices[p.dev]
	if i, ok := p.ports[[2]int{p.dev, num}]; ok {
		p.port = i
		return
	}
	if len(d.Ports) >= 256 {
		p.port = len(d.Ports) - 1
		return
	}
	d.Ports = append(d.Ports, Port{Port: num, GIDs: []GID{}})
	p.port = len(d.Ports) - 1
	p.ports[[2]int{p.dev, num}] = p.port
}

// ensure makes sure a device and port exist for a line that needs them.
func (p *ibvParser) ensure(source string) *Port {
	if p.dev < 0 {
		name := p.pending
		if name == "" {
			name = "?"
		}
		p.device(name, source)
	}
	if p.port < 0 {
		p.portNum(1)
	}
	return &p.rep.Devices[p.dev].Ports[p.port]
}

// Parse parses ibv_devinfo [-v], ibstat, ibstatus and show_gids output
// (see above) and checks the ports: state, MTU consistency, RoCE GIDs. It
// fails only when r fails.
func Parse(r io.Reader) (*Report, error) {
	p := &ibvParser{rep: &Report{Devices: []Device{}, Findings: []doctor.Finding{}}, dev: -1, port: -1,
		devs: map[string]int{}, ports: map[[2]int]int{}, gids: map[[3]int]int{}}
	showGids := false
	_, err := doctor.ReadLines(r, doctor.TableMaxLine, doctor.TableMaxLines, func(n int, raw string) {
		line := strings.TrimSpace(doctor.CleanLine(raw))
		// markdown emphasis around pasted commands: _ibv_devinfo -d x -v_
		line = strings.TrimSpace(strings.Trim(line, "_`*"))
		if line == "" {
			return
		}
		if m := ibvDashDRe.FindStringSubmatch(line); m != nil {
			p.pending = strings.Trim(m[1], "_`*")
			p.dev, p.port = -1, -1
			return
		}
		if m := ibvHCARe.FindStringSubmatch(line); m != nil {
			showGids = false
			p.device(m[1], "ibv_devinfo")
			return
		}
		if m := ibvCARe.FindStringSubmatch(line); m != nil {
			showGids = false
			p.device(m[1], "ibstat")
			return
		}
		if m := ibvStatusRe.FindStringSubmatch(line); m != nil {
			showGids = false
			p.device(m[1], "ibstatus")
			k, _ := strconv.Atoi(m[2])
			p.portNum(k)
			return
		}
		if ibvShowHdrRe.MatchString(line) {
			showGids = true
			return
		}
		if showGids {
			if p.showGidsRow(line) {
				return
			}
			if strings.HasPrefix(line, "---") {
				return
			}
			showGids = false
		}
		if m := ibvPortRe.FindStringSubmatch(line); m != nil && p.dev >= 0 {
			s := m[1]
			if s == "" {
				s = m[2]
			}
			k, _ := strconv.Atoi(s)
			p.portNum(k)
			return
		}
		if m := ibvGIDRe.FindStringSubmatch(line); m != nil {
			port := p.ensure("ibv_devinfo")
			idx, err := strconv.Atoi(m[1])
			if err != nil || len(port.GIDs) >= 1024 {
				return
			}
			g := MakeGID(idx, m[2], strings.Join(strings.Fields(m[3]), " "))
			p.putGID(port, g)
			return
		}
		if m := ibvKeyValueRe.FindStringSubmatch(line); m != nil {
			p.keyValue(strings.ToLower(strings.Join(strings.Fields(m[1]), "_")), strings.TrimSpace(m[2]))
		}
	})
	if err != nil {
		return nil, err
	}
	for i := range p.rep.Devices {
		for j := range p.rep.Devices[i].Ports {
			pt := &p.rep.Devices[i].Ports[j]
			if pt.RateGbps == 0 && pt.activeWide > 0 && pt.speedGbps > 0 {
				pt.RateGbps = pt.activeWide * pt.speedGbps
			}
			sort.SliceStable(pt.GIDs, func(a, b int) bool { return pt.GIDs[a].Index < pt.GIDs[b].Index })
		}
	}
	ibvCheck(p.rep)
	doctor.SortFindings(p.rep.Findings)
	return p.rep, nil
}

// putGID adds g to the current port, replacing an entry of the same index
// and keeping the fields the new one lacks.
func (p *ibvParser) putGID(port *Port, g GID) {
	key := [3]int{p.dev, p.port, g.Index}
	if i, ok := p.gids[key]; ok {
		old := port.GIDs[i]
		if g.Type == "" {
			g.Type = old.Type
		}
		if g.Netdev == "" {
			g.Netdev = old.Netdev
		}
		port.GIDs[i] = g
		return
	}
	p.gids[key] = len(port.GIDs)
	port.GIDs = append(port.GIDs, g)
}

// MakeGID classifies a GID string.
func MakeGID(idx int, gid, typ string) GID {
	g := GID{Index: idx, GID: gid}
	switch strings.ToLower(strings.ReplaceAll(typ, " ", "")) {
	case "rocev1", "v1":
		g.Type = "RoCE v1"
	case "rocev2", "v2":
		g.Type = "RoCE v2"
	case "ib":
		g.Type = "IB"
	}
	if ip := net.ParseIP(gid); ip != nil {
		if v4 := ip.To4(); v4 != nil {
			g.IPv4 = v4.String()
		}
		g.LinkLocal = ip.IsLinkLocalUnicast() && ip.To4() == nil
	}
	return g
}

// showGidsRow parses one show_gids row.
func (p *ibvParser) showGidsRow(line string) bool {
	f := strings.Fields(line)
	if len(f) < 5 || len(f) > 7 {
		return false
	}
	port, err1 := strconv.Atoi(f[1])
	idx, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil || !strings.Contains(f[3], ":") || port < 0 || idx < 0 {
		return false
	}
	rest := f[4:]
	ipv4 := ""
	if len(rest) > 0 && net.ParseIP(rest[0]) != nil && strings.Contains(rest[0], ".") {
		ipv4, rest = rest[0], rest[1:]
	}
	if len(rest) == 0 || (rest[0] != "v1" && rest[0] != "v2") {
		return false
	}
	ver := rest[0]
	netdev := ""
	if len(rest) > 1 {
		netdev = rest[1]
	}
	p.device(f[0], "show_gids")
	p.portNum(port)
	pt := &p.rep.Devices[p.dev].Ports[p.port]
	g := MakeGID(idx, f[3], ver)
	if ipv4 != "" {
		g.IPv4 = ipv4
	}
	g.Netdev = netdev
	if netdev != "" && pt.Netdev == "" {
		pt.Netdev = netdev
	}
	if pt.LinkLayer == "" {
		pt.LinkLayer = "Ethernet" // only RoCE ports have v1/v2 GIDs
	}
	if len(pt.GIDs) < 1024 {
		p.putGID(pt, g)
	}
	return true
}

// ibvMTU reads "4096 (5)" or "4096".
func ibvMTU(v string) int {
	f := strings.Fields(v)
	if len(f) == 0 {
		return 0
	}
	k, err := strconv.Atoi(f[0])
	if err != nil || k < 0 || k > 1<<20 {
		return 0
	}
	return k
}

// ibvClean drops a leading "4: " and a trailing " (4)".
func ibvClean(v string) string {
	v = ibvNumPrefix.ReplaceAllString(v, "")
	return strings.TrimSpace(ibvNumSuffix.ReplaceAllString(v, ""))
}

func (p *ibvParser) keyValue(key, val string) {
	if p.dev < 0 && p.pending != "" {
		switch key {
		case "state", "phys_state", "link_layer", "active_mtu", "max_mtu", "active_width", "active_speed", "port_lid", "sm_lid":
			p.ensure("ibv_devinfo") // an excerpt of `ibv_devinfo -d NAME -v`
		}
	}
	if p.dev < 0 {
		return
	}
	d := &p.rep.Devices[p.dev]
	switch key {
	case "fw_ver", "firmware_version":
		d.FWVersion = val
		return
	case "node_guid":
		d.NodeGUID = val
		return
	case "transport":
		d.Transport = ibvClean(val)
		return
	case "ca_type":
		d.CAType = val
		return
	}
	if p.port < 0 {
		return
	}
	pt := &d.Ports[p.port]
	switch key {
	case "state":
		s := strings.ToUpper(ibvClean(val))
		pt.State = strings.TrimPrefix(s, "PORT_")
	case "phys_state", "physical_state":
		pt.PhysState = ibvClean(val)
	case "link_layer":
		switch strings.ToLower(val) {
		case "ethernet":
			pt.LinkLayer = "Ethernet"
		case "infiniband", "ib":
			pt.LinkLayer = "InfiniBand"
		default:
			pt.LinkLayer = doctor.OneLine(val, 32)
		}
	case "active_mtu":
		pt.ActiveMTU = ibvMTU(val)
	case "max_mtu":
		pt.MaxMTU = ibvMTU(val)
	case "rate":
		pt.Rate = val
		if f := strings.Fields(val); len(f) > 0 {
			if g, err := strconv.ParseFloat(f[0], 64); err == nil && g >= 0 && g < 1e6 {
				pt.RateGbps = g
			}
		}
	case "active_width":
		if f := strings.Fields(val); len(f) > 0 {
			if w, err := strconv.ParseFloat(strings.TrimSuffix(strings.ToUpper(f[0]), "X"), 64); err == nil && w > 0 && w <= 64 {
				pt.activeWide = w
			}
		}
	case "active_speed":
		if f := strings.Fields(val); len(f) > 0 {
			if s, err := strconv.ParseFloat(f[0], 64); err == nil && s > 0 && s < 1e4 {
				pt.speedGbps = s
			}
		}
		if pt.Rate == "" {
			pt.Rate = val
		}
	case "base_lid", "port_lid":
		pt.LID = val
	case "netdev", "net_dev":
		pt.Netdev = val
	case "default_gid":
		// ibstatus: the GID at index 0
		if len(pt.GIDs) == 0 {
			p.putGID(pt, MakeGID(0, strings.TrimSpace(val), ""))
		}
	}
}

func ibvCheck(rep *Report) {
	if len(rep.Devices) == 0 {
		rep.Findings = append(rep.Findings, doctor.Finding{Severity: doctor.SevWarn, Code: "ibv-no-devices", Message: "no RDMA device found in the input",
			Fix: "paste the output of ibv_devinfo -v, ibstat, ibstatus or show_gids"})
		return
	}
	var ports []NamedPort
	for i := range rep.Devices {
		d := &rep.Devices[i]
		for j := range d.Ports {
			np := NamedPort{PortName(d.Name, d.Ports[j].Port), &d.Ports[j]}
			ports = append(ports, np)
			rep.Findings = append(rep.Findings, PortFindings(np.Name, np.Port)...)
		}
	}
	rep.Findings = append(rep.Findings, FleetFindings(ports)...)
}

// NamedPort is a port with its name in findings ("mlx5_0 port 1").
type NamedPort struct {
	Name string
	Port *Port
}

func PortName(dev string, port int) string {
	return fmt.Sprintf("%s port %d", doctor.OneLine(dev, 64), port)
}

// ibvIsRoCE reports whether a port is RoCE: link layer Ethernet, or RoCE
// GIDs where an excerpt lacks the link layer.
func ibvIsRoCE(p *Port) bool {
	if p.LinkLayer == "Ethernet" {
		return true
	}
	if p.LinkLayer != "" {
		return false
	}
	for _, g := range p.GIDs {
		if strings.HasPrefix(g.Type, "RoCE") {
			return true
		}
	}
	return false
}

// ibvIPv4GID returns the first RoCE v2 GID holding an IPv4-mapped address:
// the one to give NCCL_IB_GID_INDEX.
func ibvIPv4GID(p *Port) (GID, bool) {
	for _, g := range p.GIDs {
		if g.Type == "RoCE v2" && g.IPv4 != "" {
			return g, true
		}
	}
	return GID{}, false
}

// PortFindings checks one port: its state, its active MTU against its
// maximum and, on RoCE, its GID table. Parse and host.Run (on the
// sysfs view) share it.
func PortFindings(name string, p *Port) []doctor.Finding {
	var fs []doctor.Finding
	add := func(sev doctor.Severity, code, msg, fix string) {
		fs = append(fs, doctor.Finding{Severity: sev, Code: code, Message: msg, Fix: fix})
	}
	if p.State != "" && p.State != "ACTIVE" {
		phys := ""
		if p.PhysState != "" {
			phys = ", physical state " + doctor.OneLine(p.PhysState, 32)
		}
		fix := "check the cable and switch port (ibstat); on InfiniBand a port stuck in INIT or ARMED has no subnet manager: start opensm or enable the switch's SM; exclude the HCA from NCCL_IB_HCA if it is unused"
		if p.LinkLayer == "Ethernet" {
			ifn := doctor.OrDefault(doctor.OneLine(p.Netdev, 32), "IF")
			fix = "bring the netdev up (ip link set dev " + ifn + " up) and check the cable and switch port (ethtool " + ifn + "); exclude the HCA from NCCL_IB_HCA if it is unused"
		}
		add(doctor.SevWarn, "ibv-port-not-active", fmt.Sprintf("%s is %s%s: NCCL skips ports that are not ACTIVE", name, doctor.OneLine(p.State, 32), phys), fix)
	}
	if p.ActiveMTU > 0 && p.MaxMTU > 0 && p.ActiveMTU < p.MaxMTU && p.State == "ACTIVE" {
		add(doctor.SevInfo, "ibv-mtu-below-max", fmt.Sprintf("%s: active MTU %d below the port's max %d", name, p.ActiveMTU, p.MaxMTU),
			"for RoCE raise the netdev MTU (e.g. 9000 gives active_mtu 4096); for IB check the switch/SM MTU")
	}
	if !ibvIsRoCE(p) {
		return fs
	}
	netdev := doctor.OrDefault(doctor.OneLine(p.Netdev, 32), "IF")
	if len(p.GIDs) == 0 {
		if p.GIDsComplete {
			add(doctor.SevWarn, "roce-no-gid", fmt.Sprintf("%s: RoCE port with an empty GID table: its netdev %s has no address", name, doctor.OrDefault(doctor.OneLine(p.Netdev, 32), "?")),
				"give the port's netdev an IPv4 address (ip addr add A.B.C.D/N dev "+netdev+"); the kernel adds the GIDs")
		}
		return fs
	}
	var v2, v2ll []GID
	typed := false
	for _, g := range p.GIDs {
		typed = typed || g.Type != ""
		if g.Type != "RoCE v2" {
			continue
		}
		v2 = append(v2, g)
		if g.LinkLocal {
			v2ll = append(v2ll, g)
		}
	}
	v4, hasV4 := ibvIPv4GID(p)
	switch {
	case typed && len(v2) == 0:
		add(doctor.SevWarn, "roce-no-v2-gid", fmt.Sprintf("%s (RoCE) has no RoCE v2 GID: only RoCE v1, which does not cross IP routers and needs PFC on every hop", name),
			"check that the netdev has an IP address and that RoCE v2 is enabled (mlxconfig, cma_roce_mode / rdma link); NCCL_IB_ROCE_VERSION_NUM=1 only for v1-only fabrics")
	case hasV4:
		msg := fmt.Sprintf("%s: RoCE v2 GID %d is IPv4-mapped (%s", name, v4.Index, v4.IPv4)
		if v4.Netdev != "" {
			msg += " on " + doctor.OneLine(v4.Netdev, 32)
		}
		msg += ")"
		sev := doctor.SevInfo
		if len(v2ll) > 0 {
			sev = doctor.SevWarn
			msg += fmt.Sprintf(", while RoCE v2 GID %d is link-local (%s), which is not routed and makes QP connections time out across subnets", v2ll[0].Index, doctor.OneLine(v2ll[0].GID, 64))
		}
		add(sev, "roce-gid-index", msg, fmt.Sprintf("export NCCL_IB_GID_INDEX=%d (the IPv4-mapped RoCE v2 GID; cf. NVIDIA/nccl#769); NCCL 2.21+ picks it by itself when NCCL_IB_GID_INDEX is unset (defaults NCCL_IB_ROCE_VERSION_NUM=2, IPv4 unless NCCL_SOCKET_FAMILY=AF_INET6)", v4.Index))
	case len(v2) > 0 && len(v2ll) == len(v2):
		add(doctor.SevWarn, "roce-only-link-local-gid", fmt.Sprintf("%s: the only RoCE v2 GIDs are link-local (GID %d %s): traffic cannot be routed", name, v2ll[0].Index, doctor.OneLine(v2ll[0].GID, 64)),
			"configure an IPv4 (or global IPv6) address on the port's netdev "+netdev+"; a new GID appears for it")
	case len(v2) > 0:
		var idx []string
		for _, g := range v2 {
			if !g.LinkLocal {
				idx = append(idx, strconv.Itoa(g.Index))
			}
		}
		add(doctor.SevInfo, "roce-no-ipv4-gid", fmt.Sprintf("%s: RoCE v2 GIDs at %s but none IPv4-mapped (::ffff:a.b.c.d)", name, strings.Join(idx, ",")),
			"give "+netdev+" an IPv4 address, or set NCCL_IB_ADDR_FAMILY=AF_INET6 to use an IPv6 RoCE v2 GID")
	}
	return fs
}

// FleetFindings compares the ports: IPv4 RoCE v2 GID indices, active
// MTUs per link layer, and notes RoCE.
func FleetFindings(ports []NamedPort) []doctor.Finding {
	var fs []doctor.Finding
	add := func(sev doctor.Severity, code, msg, fix string) {
		fs = append(fs, doctor.Finding{Severity: sev, Code: code, Message: msg, Fix: fix})
	}
	ethernet := []string{}
	gidIdx := map[int][]string{} // recommended GID index -> ports
	byLayer := map[string]map[int][]string{}
	for _, np := range ports {
		p := np.Port
		if p.LinkLayer == "Ethernet" {
			ethernet = append(ethernet, np.Name)
		}
		if ibvIsRoCE(p) {
			if g, ok := ibvIPv4GID(p); ok {
				gidIdx[g.Index] = append(gidIdx[g.Index], np.Name)
			}
		}
		if p.State == "ACTIVE" && p.ActiveMTU > 0 {
			l := p.LinkLayer
			if byLayer[l] == nil {
				byLayer[l] = map[int][]string{}
			}
			byLayer[l][p.ActiveMTU] = append(byLayer[l][p.ActiveMTU], np.Name)
		}
	}
	if len(gidIdx) > 1 {
		var parts []string
		keys := make([]int, 0, len(gidIdx))
		for k := range gidIdx {
			keys = append(keys, k)
		}
		sort.Ints(keys)
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%d on %s", k, strings.Join(gidIdx[k], ", ")))
		}
		add(doctor.SevWarn, "roce-gid-index-differs", "the IPv4-mapped RoCE v2 GID has different indices: "+strings.Join(parts, "; "),
			"NCCL_IB_GID_INDEX is one value for all HCAs: make the address configuration the same on every port, or leave it unset so NCCL (2.20+) picks the GID by NCCL_IB_ADDR_FAMILY/NCCL_IB_ROCE_VERSION_NUM, or restrict NCCL_IB_HCA to ports that agree")
	}
	// MTU mismatch across active ports of the same link layer
	layers := make([]string, 0, len(byLayer))
	for l := range byLayer {
		layers = append(layers, l)
	}
	sort.Strings(layers)
	for _, l := range layers {
		m := byLayer[l]
		if len(m) < 2 {
			continue
		}
		mtus := make([]int, 0, len(m))
		for k := range m {
			mtus = append(mtus, k)
		}
		sort.Ints(mtus)
		var parts []string
		for _, k := range mtus {
			parts = append(parts, fmt.Sprintf("%d on %s", k, strings.Join(m[k], ", ")))
		}
		layer := l
		if layer == "" {
			layer = "unknown link layer"
		}
		add(doctor.SevWarn, "ibv-mtu-mismatch", fmt.Sprintf("active %s ports differ in active MTU: %s", layer, strings.Join(parts, "; ")),
			"use one MTU on all ports and hosts (netdev MTU for RoCE, SM/switch MTU for IB); a QP between different MTUs uses the smaller one")
	}
	if len(ethernet) > 0 {
		add(doctor.SevInfo, "roce-link-layer", fmt.Sprintf("link layer Ethernet on %s: this is RoCE, not InfiniBand", strings.Join(ethernet, ", ")),
			"RoCE needs the right GID (NCCL_IB_GID_INDEX or NCCL 2.21+ auto-selection), a lossless or ECN-configured fabric (PFC/ECN, NCCL_IB_TC) and IP reachability between hosts")
	}
	return fs
}

// WriteText prints one line per port with its GIDs, then the findings.
func (rep *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, d := range rep.Devices {
		fmt.Fprintf(&b, "%s (%s)", doctor.OneLine(d.Name, 64), strings.Join(d.Sources, ", "))
		if d.FWVersion != "" {
			fmt.Fprintf(&b, " fw %s", doctor.OneLine(d.FWVersion, 40))
		}
		if d.CAType != "" {
			fmt.Fprintf(&b, " %s", doctor.OneLine(d.CAType, 40))
		}
		b.WriteByte('\n')
		for _, p := range d.Ports {
			fmt.Fprintf(&b, "  port %d: state %s, phys %s, link layer %s", p.Port, ibvOr(p.State), ibvOr(p.PhysState), ibvOr(p.LinkLayer))
			if p.ActiveMTU > 0 || p.MaxMTU > 0 {
				fmt.Fprintf(&b, ", mtu %d/%d", p.ActiveMTU, p.MaxMTU)
			}
			if p.RateGbps > 0 {
				fmt.Fprintf(&b, ", %g Gb/s", p.RateGbps)
			}
			if p.Netdev != "" {
				fmt.Fprintf(&b, ", netdev %s", doctor.OneLine(p.Netdev, 32))
			}
			b.WriteByte('\n')
			for _, g := range p.GIDs {
				fmt.Fprintf(&b, "    GID %3d %-40s %-7s", g.Index, doctor.OneLine(g.GID, 45), g.Type)
				if g.IPv4 != "" {
					fmt.Fprintf(&b, " ipv4 %s", g.IPv4)
				}
				if g.LinkLocal {
					b.WriteString(" link-local")
				}
				b.WriteByte('\n')
			}
		}
	}
	doctor.WriteFindings(&b, rep.Findings)
	_, err := io.WriteString(w, b.String())
	return err
}

func ibvOr(s string) string {
	if s == "" {
		return "?"
	}
	return doctor.OneLine(s, 32)
}
