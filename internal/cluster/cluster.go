// Package cluster builds a cluster of "hosts" on one Linux machine for
// multi-host tests and experiments: H network namespaces, NAME-h0 ...
// NAME-h(H-1), each with a loopback and one veth per rail, eth0, eth1, ...,
// whose other end is a port of that rail's Linux bridge (its switch, br0,
// br1, ...) in a namespace of its own, NAME-sw, so the machine's own
// network is never touched. Rail r has a subnet of its own, the block r
// subnets after Subnet: host i has the address Subnet+i+1 on rail 0
// (10.200.0.1, 10.200.0.2, ... by default) and the same offset in rail r's
// subnet (10.200.1.1, ... on rail 1 of a /24), as a rail-optimized
// cluster gives each NIC of a host its own switch and subnet.
//
// Shaping (tc), per host link, as on a full-duplex NIC cable to a switch:
//
//   - Rate: tbf at the host's egress (eth0, host to switch) and at the
//     switch port's egress (switch to host), so a host sends at most Rate
//     and receives at most Rate however many hosts send to it at once.
//   - Delay, Jitter: netem at the host's egress only, so a packet from one
//     host to another is delayed once: Delay is the one-way latency
//     between two hosts and a round trip takes 2×Delay. With a rate, netem
//     is the root and tbf its child: a packet waits out the delay, then
//     its turn at the rate (propagation plus serialization).
//   - Loss: an nftables rule in the switch drops each packet that arrives
//     from a host's port with probability Loss (numgen random), counted
//     per port. nftables rather than netem, so that loss works on kernels
//     built without sch_netem (this project's development machine and CI
//     among them).
//   - ECN: the switch marks CE on ECN-capable packets to a host once more
//     than ECN bytes are queued for its port, as a switch's ECN marking
//     (RED with ecn, DCTCP's step threshold K) does. The kernels this
//     project runs on have no AQM qdisc (red, codel, fq_codel, pie), so
//     the queue is a virtual one: an nftables token bucket per port
//     draining at the link's rate in full RoCE v2 frames (ecnFrame),
//     ECN bytes deep, that every packet to the port fills and that marks an
//     ECN-capable packet finding it full (the "phantom queue" of HULL,
//     Alizadeh et al., NSDI 2012, at 100 % of the rate). It counts in
//     frames, so small packets count as whole frames.
//   - Order and fairness: a veth hands a packet it passes to the backlog
//     of whichever CPU sent it, so a tbf that a timer dequeues on one CPU
//     and then another reorders a flow (a RoCE flow, go-back-N from the
//     first gap, resent most of its packets on this project's 2-CPU
//     machine with no packet lost). RPS (rx-0/rps_cpus) steers instead:
//     a host's end by the flow's hash over every CPU, which keeps each
//     flow in order; a rail's switch ports all to one CPU (rail r to CPU
//     r mod the CPUs), so that the flows into one port meet in one
//     backlog in their order of arrival, as in a switch. Steered by hash
//     there too, two of three incast flows shared a CPU and got half the
//     share of the third when the CPUs were busy.
//
// Every rail's link is shaped alike.
//
// Up records what it makes in a state file (StateDir/cluster-NAME.json)
// before making it, and undoes its work when a step fails; Down removes a
// cluster from its state file and from the namespaces whose names follow
// the cluster's pattern, so it also cleans up after a crash, and it is
// idempotent. Every ip or tc command that fails is reported as a
// *CommandError with the command line and its stderr.
//
// It needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), iproute2's ip and tc, the
// kernel's sch_tbf (for a rate) and sch_netem (for delay or jitter), and
// nftables' nft (for a loss); each missing piece has its error
// (ErrNotRoot, ErrNoIP, ErrNoTC, ErrNoTBF, ErrNoNetem, ErrNoNft).
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/rdma/wire"
)

const (
	// DefaultName is the cluster name when Config.Name is empty.
	DefaultName = "goccl"
	// DefaultStateDir is where state files go when Config.StateDir is
	// empty (a tmpfs: the namespaces do not outlive a reboot either).
	DefaultStateDir = "/run/goccl"
	// DefaultMTU is the links' MTU when Config.MTU is 0.
	DefaultMTU = 1500
	// HostIface is the name of every host's rail-0 veth, in its
	// namespace (rail r's is eth<r>).
	HostIface = "eth0"
	// BridgeName is the bridge's name, in the switch namespace.
	BridgeName = "br0"
)

// DefaultSubnet is the hosts' subnet when Config.Subnet is not set. Each
// cluster has its own bridge in its own namespace, so clusters with the
// same subnet do not meet.
var DefaultSubnet = netip.MustParsePrefix("10.200.0.0/24")

var (
	ErrNotRoot  = errors.New("needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to make and remove network namespaces")
	ErrNoIP     = errors.New("the ip command (iproute2) is not installed")
	ErrNoTC     = errors.New("the tc command (iproute2) is not installed")
	ErrNoNetem  = errors.New("the kernel has no netem qdisc (sch_netem, CONFIG_NET_SCH_NETEM), which a delay or jitter needs: load it (modprobe sch_netem) or shape the rate alone (delay 0)")
	ErrNoNft    = errors.New("the nft command (nftables) is not installed, which a loss or ECN marking needs (apt-get install nftables)")
	ErrNoTBF    = errors.New("the kernel has no tbf qdisc (sch_tbf, CONFIG_NET_SCH_TBF), which a rate needs: load it (modprobe sch_tbf) or leave the links unshaped (rate 0)")
	ErrExists   = errors.New("a cluster of that name exists")
	ErrNotFound = errors.New("no such cluster")
)

// Config describes a cluster. The zero values of the fields with defaults
// take them.
type Config struct {
	// Name names the namespaces: Name-h0 ... and Name-sw. Letters,
	// digits, '.', '_' and '-', at most 64; default DefaultName.
	Name string `json:"name"`
	// Hosts is the number of hosts, at least 1 and at most what the
	// subnet holds.
	Hosts int `json:"hosts"`
	// Rate bounds each host link in each direction; 0: unshaped.
	Rate Rate `json:"rate"`
	// Delay is the one-way latency between two hosts (netem at the
	// sender's egress), whole microseconds; Jitter varies it (netem's
	// normal distribution; it reorders packets, as netem does).
	Delay  time.Duration `json:"delay"`
	Jitter time.Duration `json:"jitter"`
	// Loss is the percentage of packets from a host that its link drops
	// (in the switch, nftables), 0 to 100, on every rail. With a loss the
	// hosts' veths send MTU-sized packets (gso_max_segs 1), so the loss
	// applies per packet, not per 64 KiB super-packet (with ECN marking
	// too).
	Loss float64 `json:"loss"`
	// Rails is the links per host, each to a switch and subnet of its
	// own (see the package doc); 0 means 1.
	Rails int `json:"rails,omitempty"`
	// ECN, when > 0, is the queue in bytes above which the switch marks
	// CE on ECN-capable packets to a host (see the package doc); it needs
	// a rate.
	ECN int `json:"ecn,omitempty"`
	// Queue is the shaper's queue (tbf's limit) in bytes; 0: 2×Delay +
	// 20 ms of the rate, at least 4 bursts (see tbf). A deeper queue is a
	// switch with deep buffers: what a sender without congestion control
	// (the soft RoCE device) needs not to lose its window.
	Queue int `json:"queue,omitempty"`
	// PortQueue, when > 0, is the queue of the switch ports towards the
	// hosts instead of Queue (which the hosts' egress keeps): a shallow
	// switch buffer behind NICs that, like real ones, do not drop what
	// their host hands them faster than the wire.
	PortQueue int `json:"port_queue,omitempty"`
	// MTU of the veths (the bridge follows its ports); default DefaultMTU.
	// The kernel refuses what a veth cannot take (over 65535).
	MTU int `json:"mtu"`
	// Subnet holds the hosts' addresses (host i: the subnet's address
	// plus i+1); IPv4, a prefix of 8 to 30 bits; default DefaultSubnet.
	Subnet netip.Prefix `json:"subnet"`
	// StateDir holds the state file; default DefaultStateDir.
	StateDir string `json:"-"`
}

// Host is one host of a cluster.
type Host struct {
	Name  string     `json:"name"`  // its namespace, and its name in a hostfile
	Addr  netip.Addr `json:"addr"`  // on HostIface, in Subnet (rail 0's link)
	Iface string     `json:"iface"` // HostIface, in the host's namespace
	Port  string     `json:"port"`  // its bridge port, in the switch namespace
	// Links are its links, one per rail; Links[0] is Addr, Iface, Port.
	Links []Link `json:"links"`
}

// Link is one of a host's links: a veth to its rail's bridge.
type Link struct {
	Rail   int        `json:"rail"`
	Iface  string     `json:"iface"`  // in the host's namespace: eth<rail>
	Addr   netip.Addr `json:"addr"`   // in the rail's subnet
	Port   string     `json:"port"`   // the other end, a port of Bridge
	Bridge string     `json:"bridge"` // the rail's bridge, in the switch namespace
}

// ExecPrefix is the command line that runs a command on the host: append
// the command to it.
func (h Host) ExecPrefix() []string { return []string{"ip", "netns", "exec", h.Name} }

// Cluster is a cluster that Up made (or Load read): what its state file
// records.
type Cluster struct {
	Name     string    `json:"name"`
	Config   Config    `json:"config"`  // normalized: the defaults filled in
	Switch   string    `json:"switch"`  // the bridges' namespace
	Bridge   string    `json:"bridge"`  // rail 0's
	Bridges  []string  `json:"bridges"` // one per rail
	Hosts    []Host    `json:"hosts"`
	Created  time.Time `json:"created"`
	Complete bool      `json:"complete"` // false while Up runs, or after it crashed
	// StateFile is the path of the state file.
	StateFile string `json:"-"`
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// Normalize returns cfg with its defaults filled in, or an error naming
// the first field that is wrong.
func (cfg Config) Normalize() (Config, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if !namePattern.MatchString(cfg.Name) {
		return cfg, fmt.Errorf("invalid cluster name %q: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64", cfg.Name)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	if cfg.MTU < 68 {
		return cfg, fmt.Errorf("invalid MTU %d: at least 68", cfg.MTU)
	}
	if !cfg.Subnet.IsValid() {
		cfg.Subnet = DefaultSubnet
	}
	if !cfg.Subnet.Addr().Is4() || cfg.Subnet.Bits() < 8 || cfg.Subnet.Bits() > 30 {
		return cfg, fmt.Errorf("invalid subnet %s: want an IPv4 prefix of 8 to 30 bits (10.200.0.0/24)", cfg.Subnet)
	}
	cfg.Subnet = cfg.Subnet.Masked()
	if room := 1<<(32-cfg.Subnet.Bits()) - 2; cfg.Hosts < 1 || cfg.Hosts > room {
		return cfg, fmt.Errorf("invalid number of hosts %d: 1 to %d in %s", cfg.Hosts, room, cfg.Subnet)
	}
	if cfg.Rails == 0 {
		cfg.Rails = 1
	}
	if cfg.Rails < 1 || cfg.Rails > MaxRails {
		return cfg, fmt.Errorf("invalid number of rails %d: 1 to %d", cfg.Rails, MaxRails)
	}
	if last := railBase(cfg, cfg.Rails-1); !cfg.Subnet.Addr().Less(last) && cfg.Rails > 1 {
		return cfg, fmt.Errorf("invalid subnet %s for %d rails: their subnets run past 255.255.255.255", cfg.Subnet, cfg.Rails)
	}
	if cfg.Delay < 0 || cfg.Jitter < 0 {
		return cfg, fmt.Errorf("invalid delay %v or jitter %v: negative", cfg.Delay, cfg.Jitter)
	}
	if cfg.Delay%time.Microsecond != 0 || cfg.Jitter%time.Microsecond != 0 {
		return cfg, fmt.Errorf("invalid delay %v or jitter %v: whole microseconds (netem's resolution)", cfg.Delay, cfg.Jitter)
	}
	if cfg.Jitter > 0 && cfg.Delay == 0 {
		return cfg, fmt.Errorf("invalid jitter %v: it varies a delay, and the delay is 0", cfg.Jitter)
	}
	if cfg.Loss < 0 || cfg.Loss > 100 || math.IsNaN(cfg.Loss) {
		return cfg, fmt.Errorf("invalid loss %v: a percentage, 0 to 100", cfg.Loss)
	}
	if cfg.ECN < 0 || cfg.ECN > 0 && cfg.Rate == 0 {
		return cfg, fmt.Errorf("invalid ECN threshold %d bytes: the marking queue drains at the link's rate, which needs a rate", cfg.ECN)
	}
	if cfg.Queue < 0 || cfg.Queue > 0 && cfg.Rate == 0 {
		return cfg, fmt.Errorf("invalid queue %d bytes: it is the shaper's, and needs a rate (0: sized to the rate)", cfg.Queue)
	}
	if cfg.PortQueue < 0 || cfg.PortQueue > 0 && cfg.Rate == 0 {
		return cfg, fmt.Errorf("invalid port queue %d bytes: it is the switch ports' shaper's, and needs a rate (0: as the queue)", cfg.PortQueue)
	}
	return cfg, nil
}

// needsNetem reports whether the links need netem.
func (cfg Config) needsNetem() bool { return cfg.Delay > 0 }

// MaxRails is the most rails a cluster may have.
const MaxRails = 8

// railBase is the address of rail r's subnet: r subnets after cfg.Subnet
// (wrapping past 255.255.255.255, which Normalize refuses).
func railBase(cfg Config, r int) netip.Addr {
	b := cfg.Subnet.Addr().As4()
	n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	n += uint32(r) << (32 - cfg.Subnet.Bits())
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// RailSubnet is rail r's subnet.
func (cfg Config) RailSubnet(r int) netip.Prefix {
	return netip.PrefixFrom(railBase(cfg, r), cfg.Subnet.Bits())
}

// SwitchName is the switch namespace of cluster name.
func SwitchName(name string) string { return name + "-sw" }

// HostName is the namespace of host i of cluster name.
func HostName(name string, i int) string { return name + "-h" + strconv.Itoa(i) }

// StateFile is the path of the state file of cluster name in dir ("":
// DefaultStateDir).
func StateFile(name, dir string) string {
	if dir == "" {
		dir = DefaultStateDir
	}
	return filepath.Join(dir, "cluster-"+name+".json")
}

// owns reports whether ns is a namespace of cluster name: Name-sw or
// Name-h<number>, and nothing else (cluster "a" does not own "a-b-h0").
func owns(name, ns string) bool {
	rest, ok := strings.CutPrefix(ns, name+"-")
	if !ok {
		return false
	}
	if rest == "sw" {
		return true
	}
	digits, ok := strings.CutPrefix(rest, "h")
	if !ok || digits == "" || (len(digits) > 1 && digits[0] == '0') {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// geteuid is os.Geteuid; tests replace it.
var geteuid = os.Geteuid

// Up builds the cluster cfg describes and returns it. It refuses a name
// that a state file or a namespace already uses (ErrExists). When a step
// fails, Up removes what it made before returning the error.
func Up(ctx context.Context, cfg Config) (*Cluster, error) {
	return up(ctx, cfg, 0)
}

func up(ctx context.Context, cfg Config, failAt int) (*Cluster, error) {
	cfg, err := cfg.Normalize()
	if err != nil {
		return nil, err
	}
	if geteuid() != 0 {
		return nil, fmt.Errorf("cluster %s: %w", cfg.Name, ErrNotRoot)
	}
	r, err := newRunner(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cfg.Name, err)
	}
	c := plan(cfg)
	if err := r.checkFree(c); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster %s: state directory: %w", cfg.Name, err)
	}
	if err := c.save(); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cfg.Name, err)
	}
	r.failAt, r.n = failAt, 0 // count the build's commands
	if err := r.build(c); err != nil {
		err = fmt.Errorf("cluster %s: %w", cfg.Name, err)
		r.failAt = 0
		if _, derr := r.down(c.Name, c.Config.StateDir); derr != nil {
			err = errors.Join(err, fmt.Errorf("removing what was made: %w", derr))
		}
		return nil, err
	}
	c.Complete = true
	if err := c.save(); err != nil {
		return c, fmt.Errorf("cluster %s: %w", cfg.Name, err)
	}
	return c, nil
}

// plan is the cluster cfg describes, before anything is made.
func plan(cfg Config) *Cluster {
	c := &Cluster{
		Name:      cfg.Name,
		Config:    cfg,
		Switch:    SwitchName(cfg.Name),
		Bridge:    BridgeName,
		Created:   time.Now().UTC().Truncate(time.Second),
		StateFile: StateFile(cfg.Name, cfg.StateDir),
	}
	for r := range cfg.Rails {
		c.Bridges = append(c.Bridges, "br"+strconv.Itoa(r))
	}
	for i := range cfg.Hosts {
		h := Host{Name: HostName(cfg.Name, i)}
		for r := range cfg.Rails {
			a := railBase(cfg, r).As4()
			n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) + uint32(i) + 1
			l := Link{Rail: r, Iface: "eth" + strconv.Itoa(r), Port: "p" + strconv.Itoa(i), Bridge: c.Bridges[r],
				Addr: netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})}
			if r > 0 {
				l.Port += "r" + strconv.Itoa(r)
			}
			h.Links = append(h.Links, l)
		}
		h.Addr, h.Iface, h.Port = h.Links[0].Addr, h.Links[0].Iface, h.Links[0].Port
		c.Hosts = append(c.Hosts, h)
	}
	return c
}

// checkFree returns ErrExists when c's state file or one of its
// namespaces is there.
func (r *runner) checkFree(c *Cluster) error {
	var what []string
	if _, err := os.Stat(c.StateFile); err == nil {
		what = append(what, "state file "+c.StateFile)
	}
	all, err := r.namespaces()
	if err != nil {
		return fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	for _, ns := range all {
		if owns(c.Name, ns) {
			what = append(what, "namespace "+ns)
		}
	}
	if len(what) > 0 {
		return fmt.Errorf("cluster %s: %w (%s): remove it with 'goccl cluster down --name %s' (cluster.Down)", c.Name, ErrExists, strings.Join(what, ", "), c.Name)
	}
	return nil
}

// build makes c: the switch, then each host with its link and shaping.
func (r *runner) build(c *Cluster) error {
	sw := c.Switch
	if err := r.ipCmd("netns", "add", sw); err != nil {
		return err
	}
	if err := r.ipCmd("-n", sw, "link", "set", "lo", "up"); err != nil {
		return err
	}
	// Probe the qdiscs on the switch's loopback before building the
	// hosts: a kernel without them fails here, with the sentinel.
	if c.Config.needsNetem() {
		if err := r.tcCmd("-n", sw, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1us"); err != nil {
			return qdiscErr(err, "netem")
		}
		if err := r.tcCmd("-n", sw, "qdisc", "del", "dev", "lo", "root"); err != nil {
			return err
		}
	}
	if (c.Config.Loss > 0 || c.Config.ECN > 0) && r.nft == "" {
		return ErrNoNft
	}
	for _, br := range c.Bridges {
		if err := r.ipCmd("-n", sw, "link", "add", br, "type", "bridge"); err != nil {
			return err
		}
		if err := r.ipCmd("-n", sw, "link", "set", br, "up"); err != nil {
			return err
		}
	}
	mtu := strconv.Itoa(c.Config.MTU)
	for _, h := range c.Hosts {
		if err := r.ipCmd("netns", "add", h.Name); err != nil {
			return err
		}
		if err := r.ipCmd("-n", h.Name, "link", "set", "lo", "up"); err != nil {
			return err
		}
		for _, l := range h.Links {
			steps := [][]string{
				// Made in the switch namespace with its peer straight in
				// the host's: nothing passes through the machine's
				// namespace.
				{"-n", sw, "link", "add", l.Port, "type", "veth", "peer", "name", l.Iface, "netns", h.Name},
				// Set apart, the kernel says what is wrong with an MTU
				// ("mtu greater than device maximum"; at creation, only
				// "Invalid argument").
				{"-n", sw, "link", "set", l.Port, "mtu", mtu},
				{"-n", h.Name, "link", "set", l.Iface, "mtu", mtu},
				{"-n", sw, "link", "set", l.Port, "master", l.Bridge},
				{"-n", sw, "link", "set", l.Port, "up"},
				{"-n", h.Name, "addr", "add", netip.PrefixFrom(l.Addr, c.Config.Subnet.Bits()).String(), "dev", l.Iface},
			}
			if c.Config.Loss > 0 || c.Config.ECN > 0 {
				// Per-packet loss and marking: the switch must see
				// frames, not 64 KiB super-packets.
				steps = append(steps, []string{"-n", h.Name, "link", "set", l.Iface, "gso_max_segs", "1"})
			}
			steps = append(steps, []string{"-n", h.Name, "link", "set", l.Iface, "up"},
				rpsStep(sw, l.Port, rpsMask(l.Rail%runtime.NumCPU(), 1)), rpsStep(h.Name, l.Iface, rpsMask(0, runtime.NumCPU())))
			for _, s := range steps {
				if err := r.ipCmd(s...); err != nil {
					return err
				}
			}
			if err := r.shape(c, h.Name, l); err != nil {
				return err
			}
		}
	}
	if c.Config.Loss > 0 || c.Config.ECN > 0 {
		if err := r.nftCmd(c.Switch, "add", "table", "bridge", NftTable); err != nil {
			return err
		}
	}
	if c.Config.Loss > 0 {
		if err := r.loss(c); err != nil {
			return err
		}
	}
	if c.Config.ECN > 0 {
		return r.ecn(c)
	}
	return nil
}

// NftTable is the nftables table (family bridge, in the switch namespace)
// that holds a cluster's loss and ECN rules.
const NftTable = "goccl"

// ecnFrame is the frame the ECN marking's virtual queue counts in: a full
// RoCE v2 data packet of the soft device at this MTU (Ethernet, IPv4, UDP,
// BTH, the largest IB MTU that fits, ICRC), since the marked traffic is
// RoCE's (the hosts' TCP is not ECN-capable). Counted in MTU-sized frames
// instead, a link full of 1,082-byte RoCE frames (IB MTU 1024 at MTU 1500)
// looked 40 % over its rate and was marked throughout.
func ecnFrame(mtu int) int {
	return 14 + 20 + 8 + wire.BTHSize + rdma.V2ActiveMTU(mtu) + wire.ICRCSize
}

// ecn adds the ECN marking rules, one per switch port (see the package
// doc); their comments ("ecn PORT") name the ports for Stats. The loss's
// chain runs first (priority -10), so a dropped packet is never marked.
func (r *runner) ecn(c *Cluster) error {
	sw := c.Switch
	if err := r.nftCmd(sw, "add", "chain", "bridge", NftTable, "marking", "{ type filter hook forward priority 0; policy accept; }"); err != nil {
		return err
	}
	frame := ecnFrame(c.Config.MTU)
	rate := strconv.FormatInt(max(1, int64(c.Config.Rate)/8/int64(frame)), 10)
	depth := strconv.Itoa(max(1, c.Config.ECN/frame))
	for _, h := range c.Hosts {
		for _, l := range h.Links {
			if err := r.nftCmd(sw, "add", "rule", "bridge", NftTable, "marking", "oifname", l.Port,
				"limit", "rate", "over", rate+"/second", "burst", depth, "packets",
				"ip", "ecn", "{", "ect0,", "ect1", "}", "counter", "ip", "ecn", "set", "ce", "comment", strconv.Quote("ecn "+l.Port)); err != nil {
				return err
			}
		}
	}
	return nil
}

// lossPPM is the loss as numgen's threshold: drop when a random number in
// [0, 1000000) is below it.
func (cfg Config) lossPPM() int { return int(math.Round(cfg.Loss * 10000)) }

// loss adds the nftables rules that drop Loss of the packets arriving
// from each host's ports, one counting rule per port (its comment names
// the port: Stats reads the counters back).
func (r *runner) loss(c *Cluster) error {
	sw := c.Switch
	if err := r.nftCmd(sw, "add", "chain", "bridge", NftTable, "loss", "{ type filter hook forward priority -10; policy accept; }"); err != nil {
		return err
	}
	ppm := strconv.Itoa(c.Config.lossPPM())
	for _, h := range c.Hosts {
		for _, l := range h.Links {
			if err := r.nftCmd(sw, "add", "rule", "bridge", NftTable, "loss", "iifname", l.Port,
				"numgen", "random", "mod", "1000000", "<", ppm, "counter", "drop", "comment", strconv.Quote("loss "+l.Port)); err != nil {
				return err
			}
		}
	}
	return nil
}

// rpsStep is the ip command that has veth end dev in namespace ns steer
// what it receives to the CPUs of mask by flow hash (RPS; see the package
// doc). A kernel without RPS (no rps_cpus file) is left as it is.
func rpsStep(ns, dev, mask string) []string {
	f := "/sys/class/net/" + dev + "/queues/rx-0/rps_cpus"
	return []string{"netns", "exec", ns, "sh", "-c", "[ ! -e " + f + " ] || echo " + mask + " > " + f}
}

// rpsMask is the mask of CPUs first to first+n-1 (n ≥ 1) as rps_cpus
// reads it: hex, in comma-separated groups of 32 bits, no leading zeros.
func rpsMask(first, n int) string {
	n = max(n, 1)
	var groups []string
	for lo := 0; lo < first+n; lo += 32 {
		var g uint64
		for c := max(lo, first); c < min(lo+32, first+n); c++ {
			g |= 1 << (c - lo)
		}
		groups = append([]string{fmt.Sprintf("%08x", g)}, groups...)
	}
	groups[0] = strings.TrimLeft(groups[0], "0")
	if groups[0] == "" {
		groups[0] = "0"
	}
	return strings.Join(groups, ",")
}

// shape puts the qdiscs on link l of host: netem and tbf at the host's
// egress, tbf at the switch port's.
func (r *runner) shape(c *Cluster, host string, l Link) error {
	if c.Config.needsNetem() {
		args := []string{"-n", host, "qdisc", "add", "dev", l.Iface, "root", "handle", "1:", "netem",
			"limit", strconv.Itoa(c.netemLimit()), "delay", us(c.Config.Delay)}
		if c.Config.Jitter > 0 {
			args = append(args, us(c.Config.Jitter))
		}
		if err := r.tcCmd(args...); err != nil {
			return qdiscErr(err, "netem")
		}
	}
	if c.Config.Rate == 0 {
		return nil
	}
	parent := []string{"root"}
	if c.Config.needsNetem() {
		parent = []string{"parent", "1:1"}
	}
	if err := r.tcCmd(slices.Concat([]string{"-n", host, "qdisc", "add", "dev", l.Iface}, parent, []string{"handle", "2:"}, c.tbf(false))...); err != nil {
		return qdiscErr(err, "tbf")
	}
	if err := r.tcCmd(slices.Concat([]string{"-n", c.Switch, "qdisc", "add", "dev", l.Port, "root", "handle", "2:"}, c.tbf(true))...); err != nil {
		return qdiscErr(err, "tbf")
	}
	return nil
}

// us is d as tc reads a time, in microseconds.
func us(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) + "us" }

// tbf is the tbf qdisc's parameters for c's rate, at a switch port
// (port) or a host's egress. The burst (bytes sent at
// once after an idle spell) is 2 ms of the rate but at least gsoBurst, so a
// whole TSO/GSO packet passes in one piece and a timer that fires late on a
// loaded machine costs no throughput; the queue holds 2×Delay + 20 ms of the
// rate (a TCP flow's window at that delay, plus room), at least 4 bursts,
// unless Queue (or at a port PortQueue) says otherwise.
func (c *Cluster) tbf(port bool) []string {
	bytesPerSec := float64(c.Config.Rate) / 8
	frame := float64(c.Config.MTU + 14)
	burst := math.Max(math.Max(bytesPerSec*0.002, gsoBurst), 2*frame)
	limit := math.Max(bytesPerSec*(2*c.Config.Delay+2*c.Config.Jitter+20*time.Millisecond).Seconds(), 4*burst)
	if q := c.Config.Queue; q > 0 || port && c.Config.PortQueue > 0 {
		if port && c.Config.PortQueue > 0 {
			q = c.Config.PortQueue
		}
		limit = math.Max(float64(q), 2*frame)
	}
	return []string{"tbf", "rate", c.Config.Rate.String(), "burst", strconv.Itoa(int(burst)), "limit", strconv.Itoa(int(limit))}
}

// gsoBurst is the smallest tbf burst: tbf cuts a packet longer than its
// burst into its segments, and tc counts a GSO packet as its payload (up to
// 64 KiB) plus the headers of each segment (68.6 kB for 64 KiB at MTU 1500).
// A 64 KiB burst, as before, cut every full-sized TCP packet into 1,500-byte
// frames: 45× the packets through the veths and the bridge, which at 250
// Mbit/s kept this 2-core machine busy and held a 4 × 2 hierarchical
// AllReduce to 68-73 % of the link. Almost twice the largest GSO packet.
const gsoBurst = 128 << 10

// netemLimit is netem's queue, in packets: what the link carries during
// Delay+Jitter, twice over, counted in 256-byte packets (ACKs are small);
// at least netem's default 1000. Without a rate it assumes 40 Gbit/s,
// about what a veth carries.
func (c *Cluster) netemLimit() int {
	rate := float64(c.Config.Rate)
	if rate == 0 {
		rate = 40e9
	}
	n := 2 * rate / 8 * (c.Config.Delay + c.Config.Jitter).Seconds() / 256
	return int(math.Min(math.Max(n, 1000), 1<<24))
}

// save writes c's state file (through a temporary file and a rename).
func (c *Cluster) save() error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := c.StateFile + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	if err := os.Rename(tmp, c.StateFile); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("state file: %w", err)
	}
	return nil
}

// Load reads the state file of cluster name in stateDir (""
// DefaultStateDir); ErrNotFound when there is none.
func Load(name, stateDir string) (*Cluster, error) {
	if name == "" {
		name = DefaultName
	}
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	path := StateFile(name, stateDir)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("cluster %s: %w (no state file %s)", name, ErrNotFound, path)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	c := &Cluster{}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("cluster %s: state file %s: %w", name, path, err)
	}
	c.Config.StateDir, c.StateFile = stateDir, path
	// A state file from before rails: one link each, rail 0's.
	if c.Config.Rails == 0 {
		c.Config.Rails = 1
	}
	if len(c.Bridges) == 0 {
		c.Bridges = []string{c.Bridge}
	}
	for i, h := range c.Hosts {
		if len(h.Links) == 0 {
			c.Hosts[i].Links = []Link{{Iface: h.Iface, Addr: h.Addr, Port: h.Port, Bridge: c.Bridge}}
		}
	}
	return c, nil
}

// Removed is what Down removed.
type Removed struct {
	Namespaces []string // deleted, in the order deleted
	Killed     []int    // processes that were still running in them
	StateFile  string   // "" when there was none
}

// Down removes cluster name: the namespaces its state file lists and every
// namespace whose name follows its pattern (name-sw, name-h<N>), after
// killing (SIGKILL) the processes still running in them; then its state
// file (in stateDir, "": DefaultStateDir). The veths and the bridge go
// with their namespaces. Removing nothing is no error.
func Down(ctx context.Context, name, stateDir string) (*Removed, error) {
	if name == "" {
		name = DefaultName
	}
	if !namePattern.MatchString(name) {
		return nil, fmt.Errorf("invalid cluster name %q", name)
	}
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	if geteuid() != 0 {
		return nil, fmt.Errorf("cluster %s: %w", name, ErrNotRoot)
	}
	r, err := newRunner(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	rm, err := r.down(name, stateDir)
	if err != nil {
		return rm, fmt.Errorf("cluster %s: %w", name, err)
	}
	return rm, nil
}

// Down removes c (Down with c's name and state directory).
func (c *Cluster) Down(ctx context.Context) (*Removed, error) {
	return Down(ctx, c.Name, c.Config.StateDir)
}

func (r *runner) down(name, stateDir string) (*Removed, error) {
	rm := &Removed{}
	var errs []error
	path := StateFile(name, stateDir)
	want := map[string]bool{}
	if c, err := Load(name, stateDir); err == nil {
		want[c.Switch] = true
		for _, h := range c.Hosts {
			want[h.Name] = true
		}
	}
	// An unreadable state file is no error: the pattern finds what it
	// listed, and it goes with them.
	all, err := r.namespaces()
	if err != nil {
		return rm, err
	}
	var doomed []string
	for _, ns := range all {
		if want[ns] || owns(name, ns) {
			doomed = append(doomed, ns)
		}
	}
	for _, ns := range doomed {
		out, err := r.run("ip", "netns", "pids", ns)
		if err != nil {
			errs = append(errs, err)
		}
		for _, f := range strings.Fields(string(out)) {
			pid, err := strconv.Atoi(f)
			if err != nil || pid <= 1 || pid == os.Getpid() {
				continue
			}
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				rm.Killed = append(rm.Killed, pid)
			}
		}
	}
	waitGone(rm.Killed, 2*time.Second)
	left := false
	for _, ns := range doomed {
		if err := r.ipCmd("netns", "delete", ns); err != nil {
			errs = append(errs, err)
			left = true
			continue
		}
		rm.Namespaces = append(rm.Namespaces, ns)
	}
	// The state file goes once nothing it lists is left (an unreadable
	// one too: the pattern found what it listed).
	if !left {
		if err := os.Remove(path); err == nil {
			rm.StateFile = path
		} else if !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return rm, errors.Join(errs...)
}

// waitGone waits up to max for the processes pids to end (so that their
// namespaces, and the links in them, are gone when Down returns).
func waitGone(pids []int, max time.Duration) {
	deadline := time.Now().Add(max)
	for _, pid := range pids {
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err != nil || zombie(b) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// zombie reports whether /proc/PID/stat's contents b are a zombie's (dead,
// waiting for its parent to reap it: its namespaces are already released).
func zombie(b []byte) bool {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// namespaces lists the named network namespaces (ip netns list).
func (r *runner) namespaces() ([]string, error) {
	out, err := r.run("ip", "netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0]) // "NAME (id: 3)"
		}
	}
	slices.Sort(names)
	return names, nil
}

// Leftovers lists the namespaces of cluster name that exist now.
func Leftovers(ctx context.Context, name string) ([]string, error) {
	r, err := newRunner(ctx)
	if err != nil {
		return nil, err
	}
	all, err := r.namespaces()
	if err != nil {
		return nil, err
	}
	var mine []string
	for _, ns := range all {
		if owns(name, ns) {
			mine = append(mine, ns)
		}
	}
	return mine, nil
}

// Command returns a command that runs name with args on host i (ip netns
// exec HOST name args...).
func (c *Cluster) Command(ctx context.Context, i int, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", slices.Concat([]string{"netns", "exec", c.Hosts[i].Name, name}, args)...)
}

// Hostfile is an OpenMPI hostfile of the hosts: a line "NAME slots=N" for
// each.
func (c *Cluster) Hostfile(slots int) string {
	var b strings.Builder
	for _, h := range c.Hosts {
		fmt.Fprintf(&b, "%s slots=%d\n", h.Name, slots)
	}
	return b.String()
}

// Shaping describes the links' shaping in words: "rate 1gbit each way per
// host, delay 100us one way, loss 0%, mtu 1500".
func (cfg Config) Shaping() string {
	rate := "unshaped rate"
	if cfg.Rate > 0 {
		rate = "rate " + cfg.Rate.String() + " each way per host"
	}
	delay := "no added delay"
	if cfg.Delay > 0 {
		delay = "delay " + cfg.Delay.String()
		if cfg.Jitter > 0 {
			delay += " ± " + cfg.Jitter.String()
		}
		delay += " one way host to host"
	}
	rails := ""
	if cfg.Rails > 1 {
		rails = fmt.Sprintf(", %d rails", cfg.Rails)
	}
	if cfg.ECN > 0 {
		rails += fmt.Sprintf(", ECN marking above %d bytes queued", cfg.ECN)
	}
	return fmt.Sprintf("%s, %s, loss %s%%, mtu %d%s", rate, delay, strconv.FormatFloat(cfg.Loss, 'f', -1, 64), cfg.MTU, rails)
}
