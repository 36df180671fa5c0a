// Package nccllog analyses NCCL debug logs (`goccl doctor nccl-log FILE`):
// which network, transports and interfaces NCCL chose, and what went wrong.
//
// Input: the text NCCL prints with NCCL_DEBUG=INFO (or WARN), as posted in
// bug reports. A line normally looks like
//
//	host:pid:tid [dev] NCCL INFO payload                      (debug.cc, 2.3+)
//	host:pid:tid [dev] file.cc:123 NCCL WARN payload           (debug.cc, WARN adds file:line)
//	host:pid:tid [dev] INFO payload                           (before 2.3: no "NCCL ")
//	host:pid:tid [dev] misc/ibvwrap.cu:60 WARN payload
//
// but the reader also accepts payloads with that prefix stripped (a
// channel line's tail alone, "9[1a000] -> 2[6b000] [send] via
// NET/IB/0/GDRDMA", as pasted into issues, is a connection line), launcher
// tags in front of it (`[1,0]<stdout>:` from Open MPI, `[0]`/`[default0]:`
// from other launchers), ANSI colour escapes and their remnants (`[0m ` left
// by Ray's log forwarding), interleaved non-NCCL lines, lines hard-wrapped by
// a terminal, CRLF line ends and log collectors that repeat the line (the
// last NCCL prefix on a line wins). A line starting with a blank is taken as
// the terminal-wrapped rest of the NCCL line before it only when that
// physical line was at least logMinWrapWidth bytes long (a terminal wraps at
// its width) or the continuation is an NCCL list item ("[1]mlx5_1:1/IB");
// indented text after a short NCCL line (a Python traceback's `  File "…"`,
// pasted tool output) stays a line of its own. Lines longer than 64 KiB
// are truncated, never rejected, and no pattern runs over more than 64 KiB
// of a joined line.
//
// Each logical line goes through a table of line rules (rules.go): a cheap
// literal gate, then a regexp, then a handler that records what the line
// says. Each rule names the NCCL source that prints its lines and the
// versions in which they were seen; none of NCCL's code or text is copied,
// only the shape of the log lines.
//
// Finding codes are stable; every code the analyser emits:
//
//	no-nccl-lines                 info: the input holds no NCCL debug line
//	no-socket-interface           error: NCCL found no usable socket interface
//	socket-on-loopback            error in a multi-node job, else info: bootstrap/socket on lo / 127.x / ::1
//	socket-on-virtual-interface   warn/info, error if connections through it failed: docker/veth/bridge/VPN/tunnel
//	socket-on-link-local-ipv6     warn, error if connections through it failed: an interface whose only address
//	                              is link-local (IPv6 fe80::/10 or IPv4 169.254.0.0/16; the code keeps its name)
//	connection-refused            error: "Connection refused" connecting to a peer
//	connection-timeout            error: a connect timed out
//	network-unreachable           error: "Network is unreachable" / "No route to host"
//	connection-reset              error: "Connection reset by peer" / "Software caused connection abort"
//	ib-completion-error-gdr       error: IB completion error 4 (local protection), usually ACS/IOMMU breaking GDR
//	ib-completion-error           error: any other IB completion error (12: retry exceeded, RoCE GID hint)
//	ib-modify-qp-failed           error: ibv_modify_qp failed (unreachable peer, wrong RoCE GID)
//	ib-disabled-by-env            warn if IB hardware is listed, else info: NCCL_IB_DISABLE set to a non-zero integer
//	socket-while-ib-listed        warn: Socket transport used although IB devices or IPoIB interfaces are listed
//	no-libibverbs                 warn if IPoIB exists, else info: libibverbs.so could not be opened
//	ib-no-device                  info: NET/IB found no usable device and NCCL fell back to sockets
//	gdr-disabled-for-hca          warn: "GPU Direct RDMA Disabled for … HCA" and no GPU uses GDR with that HCA
//	gdr-partial                   warn: some NICs use GPUDirect RDMA (in any direction), others in no direction
//	gdr-mixed-connection          warn, info when only sends lack it (GDR read off): one NET connection's channel
//	                              lines with and without /GDRDMA
//	gdr-not-used                  warn: NET connections without /GDRDMA on every NIC
//	collnet-unsupported           warn: CollNet requested but no collnet plugin / not supported
//	p2p-level-forced              info: NCCL_P2P_LEVEL overrides NCCL's P2P choice
//	p2p-disabled-by-env           warn: NCCL_P2P_DISABLE non-zero or NCCL_P2P_LEVEL=LOC/0
//	shm-disabled-by-env           warn: NCCL_SHM_DISABLE set to a non-zero integer
//	nccl-version-mismatch         warn: several NCCL versions in one log
//	hca-mixed-link-layers         info: both InfiniBand and RoCE ports in use
//	roce-mtu-low                  info: RoCE QPs with an MTU of 1024 bytes or less
package nccllog

import (
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/goccl/goccl/doctor"
)

// Report is what Analyze learnt from one log. Empty strings,
// zero counts and "unknown" mean the log did not say.
type Report struct {
	// NCCLVersion is the first "NCCL version X" seen (init.cc, all 2.x),
	// e.g. "2.18.5+cuda12.0"; NCCLVersionsSeen lists every distinct one.
	NCCLVersion      string   `json:"nccl_version"`
	NCCLVersionsSeen []string `json:"nccl_versions_seen,omitempty"`
	// CUDADriverVersion is "cudaDriverVersion N" (init.cc, 2.11+), e.g. "12020".
	CUDADriverVersion string `json:"cuda_driver_version,omitempty"`
	// Net is the inter-node transport: "IB", "Socket", a plugin network name
	// ("IBext_v8", "AWS Libfabric", "Libfabric"), or "COLLNET" when only
	// CollNet connections were seen; "" when unknown.
	Net string `json:"net"`
	// NetPlugin is the external net plugin ("NCCL RDMA Plugin v8",
	// "aws-ofi-nccl 1.7.4-aws", "IBext_v8"), "" for NCCL's internal IB/Socket.
	NetPlugin     string `json:"net_plugin"`
	NetPluginPath string `json:"net_plugin_path,omitempty"`
	// OFIProvider is the libfabric provider the AWS OFI plugin selected ("efa").
	OFIProvider string `json:"ofi_provider,omitempty"`
	// GDRDMA is "on" (every NIC seen in NET connection lines or GPU Direct
	// RDMA lines uses GPUDirect RDMA), "off" (none does, or the transport is
	// Socket), "partial" (some NICs do, others not) or "unknown". A NIC counts
	// as using GDR when any of its connections does, in either direction: on
	// PCIe-only nodes NCCL disables GDR for sends (GDR read) by default before
	// Ampere, so "[send] via NET/IB/0" next to "[receive] via
	// NET/IB/0/GDRDMA" is one NIC with GDR on (finding gdr-mixed-connection
	// names such connections).
	GDRDMA string `json:"gdrdma"`
	// GDRDMASend and GDRDMAReceive are the same verdict over the "[send]" and
	// "[receive]" channel lines alone (2.4+), "" when none was logged.
	GDRDMASend    string `json:"gdrdma_send,omitempty"`
	GDRDMAReceive string `json:"gdrdma_receive,omitempty"`
	// IntraNode lists the intra-node transports seen in channel lines:
	// "P2P/IPC", "P2P/CUMEM", "P2P/direct pointer", "SHM", "NET loopback"
	// (NET connections in a single-node job).
	IntraNode []string `json:"intra_node"`
	// NVLS is NVLink SHARP: availability and channel count.
	NVLS NVLS `json:"nvls"`
	// CollNet is in-network reduction (SHARP via a collnet plugin).
	CollNet CollNet `json:"collnet"`
	// Interfaces are the socket interfaces NCCL chose, per role.
	Interfaces []Interface `json:"interfaces"`
	// HCAs are the RDMA devices NET/IB (or an IB-style plugin) listed.
	HCAs []HCA `json:"hcas"`
	// NRanks is the largest communicator size seen; NNodes the number of
	// nodes when the log says or shows it (0 unknown); MultiNode is true when
	// something points at more than one node: NNodes > 1 ("nNodes N", several
	// hosts, a launcher's --nnodes), two ranks on one busId, or a failed
	// connection to an address no listed interface has. A connection error
	// alone (a peer on the same node may have died) does not.
	NRanks    int      `json:"nranks"`
	NNodes    int      `json:"nnodes"`
	MultiNode bool     `json:"multi_node"`
	Hosts     []string `json:"hosts"`
	// Channels is the number of collective channels (rings), P2PChannels the
	// p2p channels; 0 when not logged.
	Channels    int `json:"channels"`
	P2PChannels int `json:"p2p_channels,omitempty"`
	// InitComplete counts "Init COMPLETE" / "- COMPLETE" lines (one per rank).
	InitComplete int `json:"init_complete"`
	// Env holds NCCL_* variables from "NCCL_X set by environment to Y" and
	// "NCCL_X set to Y" lines (param.cc / misc/utils.cc, all 2.x).
	Env map[string]string `json:"env"`
	// AvgBusBandwidthGBs is nccl-tests' "# Avg bus bandwidth : X" when the log
	// is an nccl-tests run, in GB/s with GB = 1e9 bytes (nccl-tests' unit).
	AvgBusBandwidthGBs float64 `json:"avg_bus_bandwidth_gbs,omitempty"`
	// Warnings are the distinct NCCL WARN payloads (first logMaxWarnings).
	Warnings []string `json:"warnings,omitempty"`
	// Lines is the number of physical lines read, NCCLLines those carrying
	// an NCCL prefix.
	Lines     int `json:"lines"`
	NCCLLines int `json:"nccl_lines"`
	// Findings are sorted errors first, then warnings, then info.
	Findings []doctor.Finding `json:"findings"`
}

// NVLS: Available is "yes" / "no" from "NVLS multicast support is
// [not] available on dev N" (transport/nvls.cc, 2.17+), "unknown" otherwise;
// Channels is from "N coll channels, [M collnet channels,] K nvls channels"
// (init.cc, 2.17+), null when not logged; DisabledByEnv is NCCL_NVLS_ENABLE=0.
type NVLS struct {
	Available     string `json:"available"`
	Channels      *int   `json:"channels"`
	DisabledByEnv bool   `json:"disabled_by_env,omitempty"`
}

// CollNet: Requested is NCCL_COLLNET_ENABLE=1 (or NCCL_ALGO naming
// CollNet) set by environment; Plugin the loaded collnet plugin ("SHARP");
// Supported "yes" (plugin loaded or COLLNET connections seen), "no"
// (requested but no collnet plugin / NCCL said it is not supported) or
// "unknown".
type CollNet struct {
	Requested bool   `json:"requested"`
	Plugin    string `json:"plugin,omitempty"`
	Supported string `json:"supported"`
}

// Interface is one socket interface NCCL chose. Role is "bootstrap"
// ("Bootstrap : Using", bootstrap.cc 2.4+; "NET : Using interface", 2.0-2.3),
// "net-socket" ("NET/Socket : Using", transport/net_socket.cc) or "ib-oob"
// (the "; OOB" part of "NET/IB : Using", or "NET/IB : Using interface X for
// sideband communication" in 2.0-2.3). Index is the position in its list.
// Kind is "loopback", "virtual" (docker/veth/bridge/VPN/tunnel by name),
// "link-local-ipv6" (fe80::/10), "link-local-ipv4" (169.254.0.0/16), "ipoib"
// or "" (an ordinary NIC).
type Interface struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	Role    string `json:"role"`
	Index   int    `json:"index"`
	Host    string `json:"host,omitempty"`
	Kind    string `json:"kind,omitempty"`
}

// HCA is one RDMA device from "NET/IB : Using [0]mlx5_0:1/IB [1]..."
// (transport/net_ib.cc 2.4+; "NET/IB: [0] mlx5_0:1/IB" in 2.0-2.3). Flags are
// the extra "/SHARP" parts and "RO" for a trailing "[RO]" (relaxed ordering,
// 2.12+). GDR is "enabled"/"disabled" from "GPU Direct RDMA Enabled|Disabled
// for [GPU g / ]HCA N" (2.5+); "enabled" wins when one GPU may use the HCA
// and another may not. MTU is the QP path MTU in bytes (256..4096), converted
// from the IB enum M (1..5) of "NET/IB: Dev N Port P qpn Q mtu M GID G"
// (2.12+), which also gives GIDIndex.
type HCA struct {
	Name      string   `json:"name"`
	Port      int      `json:"port"`
	LinkLayer string   `json:"link_layer"`
	Flags     []string `json:"flags,omitempty"`
	GDR       string   `json:"gdr,omitempty"`
	MTU       int      `json:"mtu,omitempty"`
	GIDIndex  *int     `json:"gid_index,omitempty"`
}

// Limits that keep memory bounded whatever the input.
const (
	logMaxLine       = 64 << 10 // bytes kept of one physical line
	logMaxJoined     = 64 << 10 // bytes of a hard-wrapped logical line
	logMinWrapWidth  = 80       // a terminal wraps lines at least this long
	logMaxItems      = 256      // interfaces, HCAs, env variables, hosts
	logMaxWarnings   = 20
	logMaxAddrs      = 4 // addresses named per connection finding
	logMaxPrefixHits = 16
	logMaxConnLines  = 8 // distinct line forms kept per NET connection
)

// Analyze reads an NCCL debug log and returns what it shows and what
// is wrong with it. The error is only ever an I/O error from r; any text,
// however malformed, gives a report.
func Analyze(r io.Reader) (*Report, error) {
	a := logNewAnalyzer()
	_, err := doctor.ReadLines(r, logMaxLine, 0, func(_ int, line string) { a.feedPhysical(strings.TrimRight(line, "\r")) })
	a.flushPending()
	rep := a.finish()
	if err != nil {
		return rep, err
	}
	return rep, nil
}

// logRecord is one logical log line after prefix handling.
type logRecord struct {
	host     string
	level    string // INFO, WARN, TRACE, ABORT; "" when no NCCL prefix
	payload  string
	prefixed bool
	// wrapped holds hard-wrapped continuation lines, joined at flush (joining
	// line by line would be quadratic); size is the joined length so far.
	wrapped []string
	size    int
}

var (
	// logPrefixRe is NCCL's debug prefix (debug.cc): optional
	// "host:pid:tid ", optional "[cudaDev] ", for WARN "file.cc:line ", then
	// "NCCL INFO|WARN|...". The host part may be missing (some collectors
	// strip it) and launcher tags may precede it.
	logPrefixRe = regexp.MustCompile(`(?:([A-Za-z0-9_.\-]+):(\d+):(\d+) +)?(?:\[(\d+)\] +)?(?:[\w./\-]+\.\w+:\d+ +)?NCCL (INFO|WARN|TRACE|ABORT)(?: +|$)`)
	// logOldPrefixRe is the prefix before 2.3, without "NCCL ": host:pid:tid
	// and [cudaDev] are required (a bare "INFO" is too common), the
	// submatches are numbered as in logPrefixRe.
	logOldPrefixRe = regexp.MustCompile(`([A-Za-z0-9_.\-]+):(\d+):(\d+) +\[(\d+)\] +(?:[\w./\-]+\.\w+:\d+ +)?(INFO|WARN|TRACE|ABORT)(?: +|$)`)
	// logANSIRe is an ANSI CSI escape sequence (colour codes).
	logANSIRe = regexp.MustCompile("\x1b\\[[0-9;?]*[A-Za-z]|\x1b")
	// logLeadNoiseRe is what launchers put before a line: bare ANSI remnants
	// ("[0m "), Open MPI "[1,0]<stdout>:", torchrun "[default0]:", "[0]:".
	logLeadNoiseRe = regexp.MustCompile(`^(?:\[[0-9;]*m ?|\[\d+,\d+\]<std(?:out|err)>:|\[[A-Za-z_]*\d+\]: ?)`)
	// logTableRowRe is an nccl-tests result row, never a wrapped NCCL line.
	logTableRowRe = regexp.MustCompile(`^\d+\s+\d+\s+\w+\s`)
	// logWrappedListRe is a hard-wrapped continuation of an interface/HCA list.
	logWrappedListRe = regexp.MustCompile(`^\[\d+\][A-Za-z0-9_.\-]+:`)
	// logTracebackRe is a Python traceback line, never a wrapped NCCL line.
	logTracebackRe = regexp.MustCompile(`^(?:File "|Traceback \(most recent call last\))`)
)

// logAnalyzer accumulates facts line by line.
type logAnalyzer struct {
	rep     Report
	pending *logRecord
	prevLen int // bytes of the previous physical line (after CR/ANSI handling)

	hosts      map[string]bool
	tableHosts map[string]bool
	tableRanks map[int]bool
	ringRanks  map[int]bool
	versions   []string

	netUsing        string         // "Using network X" (init.cc 2.5+) / "Using internal Network X" (2.0-2.4)
	netChannelNames map[string]int // NET/<name>/ from channel lines
	netSocketListed bool
	netIBListed     bool
	noPluginFound   bool
	collSymMissing  bool
	collExplicitNo  bool
	collConnSeen    bool
	noIBVerbs       bool
	ibNoDevice      bool

	gdrDevYes    map[string]bool        // NIC (HCA name or "dev N") with GDR in a channel or GPU Direct RDMA line
	gdrDevNo     map[string]bool        // NIC seen without GDR (it may be in gdrDevYes too)
	gdrDir       map[string]*logGDRSets // the same per "send" / "receive" channel lines
	netConnCount int
	connLines    int                    // connection lines of any transport
	netConns     map[string]*logNetConn // by "from -> to"
	netConnOrder []string
	netConnsCut  bool // some connection or line form was not kept
	intra        map[string]bool
	hcaByIndex   map[int]int // "[N]" index in the latest NET/IB list -> rep.HCAs position
	sameBusPeers bool        // a channel line joins two ranks with one busId: different nodes
	nNodesLogged int
	cmdNNodes    int
	ringChannels int

	conn       map[string]*logConnIssue // by finding code
	connOrder  []string
	completion []logCompletion
	modifyQP   []string
	socketNone []string
}

// logGDRSets are the NICs seen with and without GPUDirect RDMA.
type logGDRSets struct{ yes, no map[string]bool }

// verdict is "on", "off", "partial" or "" (no NIC seen): a NIC seen with GDR
// at least once counts as using it.
func (g *logGDRSets) verdict() string {
	without := 0
	for k := range g.no {
		if !g.yes[k] {
			without++
		}
	}
	switch {
	case len(g.yes) > 0 && without > 0:
		return "partial"
	case len(g.yes) > 0:
		return "on"
	case without > 0:
		return "off"
	}
	return ""
}

// withoutGDR lists the NICs never seen with GDR, sorted.
func (g *logGDRSets) withoutGDR() []string {
	out := []string{}
	for _, k := range logSortedKeys(g.no) {
		if !g.yes[k] {
			out = append(out, k)
		}
	}
	return out
}

// note records NIC dev as seen with or without GDR (first logMaxItems NICs).
func (g *logGDRSets) note(dev string, gdr bool) {
	switch {
	case len(g.yes)+len(g.no) >= logMaxItems:
	case gdr:
		g.yes[dev] = true
	default:
		g.no[dev] = true
	}
}

// logNetConn is one NET connection, a sending rank and a receiving one
// ("9[1a000] -> 2[6b000]"), with the distinct forms its channel lines took:
// the [send] side is logged by the sender's node, the [receive] side by the
// receiver's, each naming its own NIC.
type logNetConn struct {
	name  string
	lines []logNetLine
}

type logNetLine struct {
	dir, via, dev string // dir "send", "receive" or "" (not logged)
	gdr           bool
}

// gdrSplit returns the connection's line forms with and without /GDRDMA.
func (c *logNetConn) gdrSplit() (with, without []logNetLine) {
	for _, l := range c.lines {
		if l.gdr {
			with = append(with, l)
		} else {
			without = append(without, l)
		}
	}
	return with, without
}

// describe names the connection and its line forms: "9[1a000] -> 2[6b000]
// ([send] via NET/IB/0/GDRDMA; [receive] via NET/IB/1)".
func (c *logNetConn) describe() string {
	forms := make([]string, 0, len(c.lines))
	for _, l := range c.lines {
		f := "via " + l.via
		if l.dir != "" {
			f = "[" + l.dir + "] " + f
		}
		forms = append(forms, f)
	}
	return c.name + " (" + strings.Join(forms, "; ") + ")"
}

type logConnIssue struct {
	count int
	addrs []string
	text  string
}

type logCompletion struct {
	status, vendor int
	host, text     string
}

func logNewAnalyzer() *logAnalyzer {
	return &logAnalyzer{
		rep: Report{
			GDRDMA:     "unknown",
			IntraNode:  []string{},
			Interfaces: []Interface{},
			HCAs:       []HCA{},
			Hosts:      []string{},
			Env:        map[string]string{},
			Findings:   []doctor.Finding{},
			NVLS:       NVLS{Available: "unknown"},
			CollNet:    CollNet{Supported: "unknown"},
		},
		hosts:           map[string]bool{},
		tableHosts:      map[string]bool{},
		tableRanks:      map[int]bool{},
		ringRanks:       map[int]bool{},
		netChannelNames: map[string]int{},
		gdrDevYes:       map[string]bool{},
		gdrDevNo:        map[string]bool{},
		gdrDir:          map[string]*logGDRSets{},
		netConns:        map[string]*logNetConn{},
		intra:           map[string]bool{},
		hcaByIndex:      map[int]int{},
		conn:            map[string]*logConnIssue{},
	}
}

// feedPhysical handles one physical line: strips noise, finds the NCCL
// prefix, joins hard-wrapped continuations to the previous NCCL line.
func (a *logAnalyzer) feedPhysical(line string) {
	a.rep.Lines++
	if i := strings.LastIndexByte(line, '\r'); i >= 0 {
		line = line[i+1:] // a bare CR overwrote the start of the line
	}
	if strings.IndexByte(line, 0x1b) >= 0 {
		line = logANSIRe.ReplaceAllString(line, "")
	}
	prevLen := a.prevLen
	a.prevLen = len(line)
	rec := logRecord{}
	if hits := logFindPrefixes(line); len(hits) > 0 {
		m := hits[len(hits)-1]
		rec.prefixed = true
		if m[2] >= 0 {
			rec.host = line[m[2]:m[3]]
		}
		rec.level = line[m[10]:m[11]]
		rec.payload = strings.TrimSpace(line[m[1]:])
	} else {
		rest := line
		for {
			loc := logLeadNoiseRe.FindStringIndex(rest)
			if loc == nil {
				break
			}
			rest = rest[loc[1]:]
		}
		startsBlank := rest != "" && (rest[0] == ' ' || rest[0] == '\t')
		rec.payload = strings.TrimSpace(rest)
		if rec.payload == "" {
			a.flushPending()
			return
		}
		if a.joinable(rec.payload, startsBlank, prevLen) {
			p := a.pending
			p.wrapped = append(p.wrapped, rec.payload)
			p.size += 1 + len(rec.payload)
			return
		}
	}
	a.flushPending()
	r := rec
	r.size = len(r.payload)
	a.pending = &r
}

// logFindPrefixes returns the NCCL prefixes on a line (submatch indexes):
// the "NCCL INFO" ones, or failing those the pre-2.3 "host:pid:tid [dev]
// INFO" ones. Literal gates keep the regexps off most lines.
func logFindPrefixes(line string) [][]int {
	if strings.Contains(line, "NCCL ") {
		if hits := logPrefixRe.FindAllStringSubmatchIndex(line, logMaxPrefixHits); len(hits) > 0 {
			return hits
		}
	}
	if strings.Contains(line, "] ") && (strings.Contains(line, "INFO") || strings.Contains(line, "WARN")) {
		return logOldPrefixRe.FindAllStringSubmatchIndex(line, logMaxPrefixHits)
	}
	return nil
}

// joinable reports whether the unprefixed payload (after a blank when
// startsBlank) is the terminal-wrapped rest of the pending NCCL line, whose
// last physical line was prevLen bytes long. A terminal only wraps a line as
// long as its width, so a blank-led line after a short NCCL line is
// something else (a Python traceback, pasted tool output); an interface/HCA
// list item in NCCL's shape is joined whatever the width.
func (a *logAnalyzer) joinable(payload string, startsBlank bool, prevLen int) bool {
	p := a.pending
	if p == nil || !p.prefixed || p.size+1+len(payload) > logMaxJoined {
		return false
	}
	if logWrappedListRe.MatchString(payload) {
		return true
	}
	return startsBlank && prevLen >= logMinWrapWidth &&
		!logTableRowRe.MatchString(payload) && !strings.HasPrefix(payload, "#") &&
		!strings.HasPrefix(payload, "NCCL ") && !logTracebackRe.MatchString(payload)
}

func (a *logAnalyzer) flushPending() {
	if a.pending == nil {
		return
	}
	r := *a.pending
	a.pending = nil
	if len(r.wrapped) > 0 {
		r.payload += " " + strings.Join(r.wrapped, " ")
		r.wrapped = nil
	}
	a.process(r)
}

// Patterns the rules' helpers use.
var (
	// an interface item "[0]name:addr<port>" or "name:addr<port>".
	logIfItemRe = regexp.MustCompile(`(?:\[(\d+)\])?([A-Za-z0-9_.@\-]+):([^\s<>]+)<\d+>`)
	// an HCA item of "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB
	// ib0:10.0.0.1<0>" (2.4+; "/SHARP" and other flags from the rdma-sharp
	// plugin; 2.0-2.3 "NET/IB: [0] mlx5_0:1/IB"), and the OOB interface.
	logHCAItemRe = regexp.MustCompile(`\[(\d+)\] ?([A-Za-z0-9_.\-]+):(\d+)/(IB|RoCE|ETH)((?:/[A-Za-z0-9_]+)*)`)
	logOOBRe     = regexp.MustCompile(`; ?OOB (\S+<\d+>)`)
	// The NET part of a channel line is NET/<name>/<dev>, then "(<proxy
	// rank>)" when the connection goes through another rank's NIC (PXN,
	// 2.12+), then "/GDRDMA" ("/GDRDMA(PCI)" when GDR is reached through
	// PCI BAR mappings, 2.2x) and "/Shared" (2.12+) as they apply: "via
	// NET/IB/0(7)/GDRDMA", "via NET/IB/1/GDRDMA(PCI)/Shared".
	logViaNetRe = regexp.MustCompile(`^NET/(.+?)/(\d+)(?:\(\d+\))?((?:/.*)?)$`)
)

func (a *logAnalyzer) addHost(set map[string]bool, h string) {
	if len(set) < logMaxItems {
		set[h] = true
	}
}

func (a *logAnalyzer) setEnv(name, value string) {
	value = strings.TrimSpace(value)
	value = strings.TrimSuffix(value, ".")
	if _, ok := a.rep.Env[name]; !ok && len(a.rep.Env) >= logMaxItems {
		return
	}
	a.rep.Env[name] = logClip(value, 200)
}

// addInterfaces parses a "[0]name:addr<port> [1]..." list.
func (a *logAnalyzer) addInterfaces(list, role, host string) {
	for i, m := range logIfItemRe.FindAllStringSubmatch(list, logMaxItems) {
		idx := i
		if m[1] != "" {
			idx = logAtoi(m[1])
		}
		a.addInterface(m[2], m[3], role, idx, host)
	}
}

func (a *logAnalyzer) addInterface(name, addr, role string, idx int, host string) {
	for _, it := range a.rep.Interfaces {
		if it.Name == name && it.Address == addr && it.Role == role {
			return
		}
	}
	if len(a.rep.Interfaces) >= logMaxItems {
		return
	}
	a.rep.Interfaces = append(a.rep.Interfaces, Interface{
		Name: name, Address: addr, Role: role, Index: idx, Host: host, Kind: logInterfaceKind(name, addr),
	})
}

// logVirtualIfRe names container, bridge, VPN and tunnel interfaces that are
// rarely the cluster network: docker0, br-xxxx, virbr0, veth*, cni0,
// flannel.1, cali*, tun0/tap0, wg0 (WireGuard), tailscale0, zt* (ZeroTier),
// ip6tnl0/sit0/gre*/ipip (kernel tunnels), vxlan*.
var logVirtualIfRe = regexp.MustCompile(`^(?:docker\d*|br-|virbr|veth|cni|flannel|cali|kube-|lxcbr|lxdbr|tun\d|tap\d|utun|wg\d|tailscale|zt|ip6tnl|ip6gre|ip_vti|ip6_vti|sit\d|gre\d|gretap|erspan|ipip|tunl|vxlan|genev|nebula|vmnet)`)

func logInterfaceKind(name, addr string) string {
	la := strings.ToLower(addr)
	switch {
	case name == "lo" || strings.HasPrefix(name, "lo:") || strings.HasPrefix(la, "127.") || la == "::1":
		return "loopback"
	case logVirtualIfRe.MatchString(name):
		return "virtual"
	case logLinkLocal(addr) == "IPv6":
		return "link-local-ipv6"
	case logLinkLocal(addr) == "IPv4":
		return "link-local-ipv4"
	case strings.HasPrefix(name, "ib"):
		return "ipoib"
	}
	return ""
}

// addHCAList parses "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE/SHARP [RO]; OOB ib0:addr<0>".
func (a *logAnalyzer) addHCAList(p, host string) {
	a.netIBListed = true
	list, oob, _ := strings.Cut(p, "OOB")
	relaxed := strings.Contains(list, "[RO]")
	for _, m := range logHCAItemRe.FindAllStringSubmatch(list, logMaxItems) {
		idx, port := logAtoi(m[1]), logAtoi(m[3])
		var flags []string
		for _, f := range strings.Split(m[5], "/") {
			if f != "" {
				flags = append(flags, f)
			}
		}
		if relaxed {
			flags = append(flags, "RO")
		}
		pos := -1
		for i, h := range a.rep.HCAs {
			if h.Name == m[2] && h.Port == port {
				pos = i
				break
			}
		}
		if pos < 0 {
			if len(a.rep.HCAs) >= logMaxItems {
				continue
			}
			a.rep.HCAs = append(a.rep.HCAs, HCA{Name: m[2], Port: port, LinkLayer: m[4], Flags: flags})
			pos = len(a.rep.HCAs) - 1
		}
		a.hcaByIndex[idx] = pos
	}
	if oob != "" {
		if m := logOOBRe.FindStringSubmatch(p); m != nil {
			a.addInterfaces(m[1], "ib-oob", host)
		}
	}
}

func (a *logAnalyzer) setHCAGDR(enabled bool, index, name string) {
	state := "disabled"
	if enabled {
		state = "enabled"
	}
	pos := -1
	if name != "" {
		for i, h := range a.rep.HCAs {
			if h.Name == name {
				pos = i
				break
			}
		}
		if pos < 0 && len(a.rep.HCAs) < logMaxItems {
			a.rep.HCAs = append(a.rep.HCAs, HCA{Name: name})
			pos = len(a.rep.HCAs) - 1
		}
	} else if p, ok := a.hcaByIndex[logAtoi(index)]; ok {
		pos = p
	}
	// 2.12+ prints one line per GPU/HCA pair: the HCA has GDR when any GPU
	// may use it with GDR.
	if pos >= 0 && (enabled || a.rep.HCAs[pos].GDR != "enabled") {
		a.rep.HCAs[pos].GDR = state
	}
	key := name
	if key == "" {
		key = a.nicKey(index)
	}
	if enabled {
		a.gdrDevYes[key] = true
	} else {
		a.gdrDevNo[key] = true
	}
}

// nicKey names NET device index (the "[N]" of the latest NET/IB list, the N
// of "HCA N" and of "via NET/IB/N") by its HCA name when the list is known,
// so that one NIC gets one key whichever line names it.
func (a *logAnalyzer) nicKey(index string) string {
	if pos, ok := a.hcaByIndex[logAtoi(index)]; ok {
		return a.rep.HCAs[pos].Name
	}
	return "dev " + index
}

// logIBMTUBytes converts the IB MTU enum NCCL logs (1..5) to bytes
// (256..4096); 0 for anything else.
func logIBMTUBytes(enum int) int {
	if enum < 1 || enum > 5 {
		return 0
	}
	return 128 << enum
}

func (a *logAnalyzer) setHCAQP(m []string) {
	pos, ok := a.hcaByIndex[logAtoi(m[1])]
	if !ok {
		return
	}
	a.rep.HCAs[pos].MTU = logIBMTUBytes(logAtoi(m[3]))
	if m[4] != "" {
		g := logAtoi(m[4])
		a.rep.HCAs[pos].GIDIndex = &g
	}
}

// addChannelConn records a connection line ("Channel 00 : 2[c7000] ->
// 0[87000] [receive] via NET/IB/5/GDRDMA" or its tail alone): the
// transport, and for NET its network, NIC and GDR use.
func (a *logAnalyzer) addChannelConn(m []string) {
	from, to, busFrom, busTo, dir, via := m[2], m[4], m[3], m[5], m[6], strings.TrimSpace(m[7])
	if busFrom != "" && busFrom == busTo && from != to {
		a.sameBusPeers = true
	}
	switch {
	case strings.HasPrefix(via, "NET/"):
		a.addNetConn(logPeer(from, busFrom)+" -> "+logPeer(to, busTo), dir, via)
	case strings.HasPrefix(via, "P2P/"):
		kind := strings.TrimPrefix(via, "P2P/")
		if strings.HasPrefix(kind, "direct pointer") {
			kind = "direct pointer"
		} else if i := strings.IndexAny(kind, "/ "); i >= 0 {
			kind = kind[:i]
		}
		a.intra["P2P/"+kind] = true
	case strings.HasPrefix(via, "SHM") || strings.Contains(via, "shared memory"):
		a.intra["SHM"] = true
	case strings.HasPrefix(strings.ToUpper(via), "COLLNET"):
		a.collConnSeen = true
	default:
		return
	}
	a.connLines++
}

// logPeer names a rank as a channel line does: "9[1a000]", or "9" when the
// line gives no device.
func logPeer(rank, dev string) string {
	if dev == "" {
		return rank
	}
	return rank + "[" + dev + "]"
}

// addNetConn records the NET part of connection conn's line ("NET/IB/0/GDRDMA"):
// the network's name and, for networks other than Socket, the NIC and
// whether it uses GDR, overall, per direction and per connection.
func (a *logAnalyzer) addNetConn(conn, dir, via string) {
	nm := logViaNetRe.FindStringSubmatch(via)
	if nm == nil {
		return
	}
	if len(a.netChannelNames) < logMaxItems {
		a.netChannelNames[nm[1]]++
	}
	a.netConnCount++
	if nm[1] == "Socket" {
		return
	}
	dev := a.nicKey(nm[2])
	gdr := strings.Contains(nm[3], "/GDRDMA")
	all := logGDRSets{yes: a.gdrDevYes, no: a.gdrDevNo}
	all.note(dev, gdr)
	if dir != "" {
		d := a.gdrDir[dir]
		if d == nil {
			d = &logGDRSets{yes: map[string]bool{}, no: map[string]bool{}}
			a.gdrDir[dir] = d
		}
		d.note(dev, gdr)
	}
	a.noteNetLine(conn, logNetLine{dir: dir, via: via, dev: dev, gdr: gdr})
}

// noteNetLine adds a distinct line form to connection name, first
// logMaxItems connections and logMaxConnLines forms each; netConnsCut
// says when something was left out.
func (a *logAnalyzer) noteNetLine(name string, l logNetLine) {
	c := a.netConns[name]
	if c == nil {
		if len(a.netConns) >= logMaxItems {
			a.netConnsCut = true
			return
		}
		c = &logNetConn{name: name}
		a.netConns[name] = c
		a.netConnOrder = append(a.netConnOrder, name)
	}
	switch {
	case slices.Contains(c.lines, l):
	case len(c.lines) >= logMaxConnLines:
		a.netConnsCut = true
	default:
		c.lines = append(c.lines, l)
	}
}

func (a *logAnalyzer) addRingList(m []string) {
	if m[2] != "" {
		if n := logAtoi(m[2]); n > a.ringChannels {
			a.ringChannels = n
		}
	} else if n := logAtoi(m[1]) + 1; n > a.ringChannels {
		a.ringChannels = n
	}
	for _, f := range strings.Fields(m[3]) {
		if r := logAtoi(f); r >= 0 && len(a.ringRanks) < 1<<16 {
			a.ringRanks[r] = true
		}
	}
}

// finish derives the summary fields and the findings.
func (a *logAnalyzer) finish() *Report {
	rep := &a.rep
	rep.Hosts = logSortedKeys(a.hosts, a.tableHosts)
	if len(a.versions) > 1 {
		rep.NCCLVersionsSeen = a.versions
	}
	if rep.Channels == 0 {
		rep.Channels = a.ringChannels
	}
	if n := len(a.tableRanks); n > rep.NRanks {
		rep.NRanks = n
	}
	if n := len(a.ringRanks); n > rep.NRanks {
		rep.NRanks = n
	}
	switch {
	case a.nNodesLogged > 0:
		rep.NNodes = a.nNodesLogged
	case len(rep.Hosts) > 1:
		rep.NNodes = len(rep.Hosts)
	case len(a.tableRanks) > 0 && len(a.tableHosts) > 0:
		rep.NNodes = len(a.tableHosts)
	case a.cmdNNodes > 0:
		rep.NNodes = a.cmdNNodes
	}
	// A failed connection alone says nothing about the node count (a peer on
	// the same node may have died); its address does when it belongs to no
	// interface the log's hosts listed.
	rep.MultiNode = rep.NNodes > 1 || a.sameBusPeers || a.remotePeerAddr()

	// Network.
	switch {
	case a.netUsing != "":
		rep.Net = a.netUsing
	case len(a.netChannelNames) > 0:
		best, n := "", -1
		for k, v := range a.netChannelNames {
			if v > n || (v == n && k < best) {
				best, n = k, v
			}
		}
		rep.Net = best
	case a.netIBListed:
		rep.Net = "IB"
	case a.netSocketListed:
		rep.Net = "Socket"
	case a.collConnSeen:
		rep.Net = "COLLNET"
	}
	if rep.Net == "" && rep.NetPlugin != "" && strings.Contains(rep.NetPlugin, "aws-ofi") {
		rep.Net = "AWS Libfabric"
	}

	// GPUDirect RDMA.
	all := logGDRSets{yes: a.gdrDevYes, no: a.gdrDevNo}
	switch v := all.verdict(); {
	case v != "":
		rep.GDRDMA = v
	case rep.Net == "Socket":
		rep.GDRDMA = "off" // TCP sockets never use GPUDirect RDMA
	}
	if d := a.gdrDir["send"]; d != nil {
		rep.GDRDMASend = d.verdict()
	}
	if d := a.gdrDir["receive"]; d != nil {
		rep.GDRDMAReceive = d.verdict()
	}

	// Intra-node transports.
	if rep.NNodes == 1 && a.netConnCount > 0 {
		a.intra["NET loopback"] = true
	}
	for _, k := range []string{"P2P/IPC", "P2P/CUMEM", "P2P/direct pointer", "SHM", "NET loopback"} {
		if a.intra[k] {
			rep.IntraNode = append(rep.IntraNode, k)
			delete(a.intra, k)
		}
	}
	rep.IntraNode = append(rep.IntraNode, logSortedKeys(a.intra)...)

	// NVLS / CollNet.
	if n, ok := logEnvInt(rep.Env, "NCCL_NVLS_ENABLE"); ok && n == 0 {
		rep.NVLS.DisabledByEnv = true
	}
	if n, ok := logEnvInt(rep.Env, "NCCL_COLLNET_ENABLE"); (ok && n != 0) || strings.Contains(strings.ToLower(rep.Env["NCCL_ALGO"]), "collnet") {
		rep.CollNet.Requested = true
	}
	switch {
	case a.collConnSeen || (rep.CollNet.Plugin != "" && !a.collExplicitNo):
		rep.CollNet.Supported = "yes"
	case a.collExplicitNo || (rep.CollNet.Requested && (a.collSymMissing || a.noPluginFound) && rep.CollNet.Plugin == ""):
		rep.CollNet.Supported = "no"
	}

	a.findings()
	doctor.SortFindings(rep.Findings)
	return rep
}

func (a *logAnalyzer) add(sev doctor.Severity, code, msg, fix string) {
	a.rep.Findings = append(a.rep.Findings, doctor.Finding{Severity: sev, Code: code, Message: msg, Fix: fix})
}

// findings emits root causes before their consequences (the sort keeps this
// order within one severity).
func (a *logAnalyzer) findings() {
	rep := &a.rep
	env := rep.Env

	if rep.NCCLLines == 0 && rep.NCCLVersion == "" && len(rep.Interfaces) == 0 && len(rep.HCAs) == 0 && rep.Net == "" && a.connLines == 0 {
		a.add(doctor.SevInfo, "no-nccl-lines", "no NCCL debug lines found in the input",
			"rerun with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH) and pass the full output")
	}
	if len(a.socketNone) > 0 {
		a.add(doctor.SevError, "no-socket-interface", "NCCL found no usable socket interface: "+a.socketNone[0],
			"set NCCL_SOCKET_IFNAME to an interface that exists and is up on every node (e.g. =eth0, or =^docker,lo to exclude)")
	}
	a.interfaceFindings()

	for _, code := range a.connOrder {
		ci := a.conn[code]
		where := "(no address logged)"
		if len(ci.addrs) > 0 {
			where = "to " + strings.Join(ci.addrs, ", ")
		}
		what := map[string]string{
			"connection-refused":  "connection refused",
			"connection-timeout":  "connection timed out",
			"network-unreachable": "network unreachable",
			"connection-reset":    "connection reset/aborted",
		}[code]
		msg := fmt.Sprintf("%s %s, %d time(s): %s", what, where, ci.count, ci.text)
		fix := "make sure every rank runs and listens, that the address belongs to a network all nodes share (not loopback, docker or a tunnel), that no firewall blocks NCCL's ports, and that NCCL_SOCKET_IFNAME selects the same network on every node"
		if code == "connection-reset" {
			fix = "a peer process died or closed its socket first: look for the first error on the other ranks; also check NCCL_SOCKET_IFNAME selects the same network on every node"
		}
		a.add(doctor.SevError, code, msg, fix)
	}

	a.ibFailureFindings()
	a.networkChoiceFindings()
	a.gdrFindings()

	if rep.CollNet.Requested && rep.CollNet.Supported == "no" {
		why := "no collnet plugin was loaded"
		if a.collExplicitNo {
			why = "NCCL reported CollNet as not supported"
		}
		a.add(doctor.SevWarn, "collnet-unsupported",
			fmt.Sprintf("CollNet requested (NCCL_COLLNET_ENABLE=%s) but %s; collectives fall back to ring/tree", doctor.OrDefault(env["NCCL_COLLNET_ENABLE"], "?"), why),
			"install the SHARP collnet plugin (libnccl-net.so from nccl-rdma-sharp-plugins / HPC-X) on every node and make sure sharp_am runs on the subnet manager; otherwise unset NCCL_COLLNET_ENABLE")
	}

	// Intra-node transports forced by environment.
	p2pOff := logEnvOn(env, "NCCL_P2P_DISABLE")
	if lvl, ok := env["NCCL_P2P_LEVEL"]; ok && !p2pOff {
		if strings.EqualFold(lvl, "LOC") || lvl == "0" {
			p2pOff = true
		} else {
			a.add(doctor.SevInfo, "p2p-level-forced", "NCCL_P2P_LEVEL="+lvl+" set by environment overrides NCCL's P2P topology choice",
				"unset NCCL_P2P_LEVEL unless it works around a known platform problem")
		}
	}
	shmOff := logEnvOn(env, "NCCL_SHM_DISABLE")
	loop := ""
	if p2pOff && shmOff {
		loop = "; with SHM also disabled, GPUs on one node talk through the NIC (NET loopback)"
	}
	if p2pOff {
		var set []string
		if v, ok := env["NCCL_P2P_DISABLE"]; ok {
			set = append(set, "NCCL_P2P_DISABLE="+v)
		}
		if v, ok := env["NCCL_P2P_LEVEL"]; ok {
			set = append(set, "NCCL_P2P_LEVEL="+v)
		}
		a.add(doctor.SevWarn, "p2p-disabled-by-env", "GPU peer-to-peer (NVLink/PCIe P2P) disabled by environment ("+strings.Join(set, ", ")+")"+loop,
			"unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL unless P2P is known broken on this platform (then fix IOMMU/ACS instead)")
	}
	if shmOff {
		a.add(doctor.SevWarn, "shm-disabled-by-env", "shared-memory transport disabled by environment (NCCL_SHM_DISABLE="+env["NCCL_SHM_DISABLE"]+")"+loop,
			"unset NCCL_SHM_DISABLE; if /dev/shm is too small in a container, enlarge it (docker --shm-size=1g or --ipc=host)")
	}

	if len(a.versions) > 1 {
		a.add(doctor.SevWarn, "nccl-version-mismatch", "several NCCL versions in one log: "+strings.Join(a.versions, ", "),
			"run the same NCCL build on every rank (check LD_LIBRARY_PATH and the framework's bundled libnccl)")
	}
	a.hcaInfoFindings()
}

// interfaceFindings flags loopback, virtual and link-local interfaces.
func (a *logAnalyzer) interfaceFindings() {
	rep := &a.rep
	type agg struct {
		it    Interface
		roles []string
		first bool
	}
	var order []string
	byName := map[string]*agg{}
	for _, it := range rep.Interfaces {
		if it.Kind == "" || it.Kind == "ipoib" {
			continue
		}
		g := byName[it.Name]
		if g == nil {
			g = &agg{it: it}
			byName[it.Name] = g
			order = append(order, it.Name)
		}
		if !logContains(g.roles, it.Role) {
			g.roles = append(g.roles, it.Role)
		}
		if it.Index == 0 {
			g.first = true
		}
	}
	good := logGoodInterface(rep.Interfaces)
	current := ""
	if v, ok := rep.Env["NCCL_SOCKET_IFNAME"]; ok {
		current = " (currently NCCL_SOCKET_IFNAME=" + v + ")"
	}
	fix := "set NCCL_SOCKET_IFNAME=" + good + " on every rank" + current
	if good == "" {
		fix = "set NCCL_SOCKET_IFNAME to the interface carrying the nodes' routable cluster address (see `ip -br addr`), e.g. NCCL_SOCKET_IFNAME=eth0 or =ib0, or exclude bad ones with NCCL_SOCKET_IFNAME=^lo,docker,veth" + current
	}
	for _, name := range order {
		g := byName[name]
		it := g.it
		roles := strings.Join(g.roles, ", ")
		failed := a.connNames(it)
		switch it.Kind {
		case "loopback":
			if rep.MultiNode {
				a.add(doctor.SevError, "socket-on-loopback",
					fmt.Sprintf("%s uses loopback interface %s (%s) in a multi-node job; other nodes cannot reach it", roles, it.Name, it.Address), fix)
			} else {
				a.add(doctor.SevInfo, "socket-on-loopback",
					fmt.Sprintf("%s uses loopback interface %s (%s): works on a single node only", roles, it.Name, it.Address), fix)
			}
		case "virtual":
			fix := fix
			if name == good {
				fix = "nothing to change if " + name + " is this container's own network; otherwise " + fix
			}
			sev := doctor.SevWarn
			extra := ""
			if v := logLinkLocal(it.Address); v != "" {
				extra = " with only a link-local " + v + " address"
			} else if !g.first {
				sev = doctor.SevInfo
				extra = " (routable address, not first in the list: may be the container's own NIC)"
			}
			if failed {
				sev = doctor.SevError
				extra += "; connections through it failed"
			}
			a.add(sev, "socket-on-virtual-interface",
				fmt.Sprintf("%s uses %s, a container/bridge/VPN/tunnel interface (%s)%s", roles, it.Name, it.Address, extra), fix)
		case "link-local-ipv6", "link-local-ipv4":
			sev := doctor.SevWarn
			extra := ""
			if failed {
				sev = doctor.SevError
				extra = "; connections through it failed"
			}
			// One code for both families: the code predates IPv4 support and
			// codes are stable.
			a.add(sev, "socket-on-link-local-ipv6",
				fmt.Sprintf("%s uses %s with link-local %s address %s, not routable between nodes%s", roles, it.Name, logLinkLocal(it.Address), it.Address, extra), fix)
		}
	}
}

// remotePeerAddr reports whether a failed connection went to an address
// that is neither loopback nor an address of an interface listed in the
// log: a peer on another node. It needs at least one listed address to
// compare with.
func (a *logAnalyzer) remotePeerAddr() bool {
	local := map[string]bool{}
	for _, it := range a.rep.Interfaces {
		if ip, ok := logAddrIP(it.Address); ok {
			local[ip.String()] = true
		}
	}
	if len(local) == 0 {
		return false
	}
	for _, ci := range a.conn {
		for _, ad := range ci.addrs {
			host, _, _ := strings.Cut(ad, "<")
			ip, ok := logAddrIP(host)
			if ok && !ip.IsLoopback() && !ip.IsUnspecified() && !local[ip.String()] {
				return true
			}
		}
	}
	return false
}

// logAddrIP parses an interface or peer address as logged ("10.0.0.1",
// "fe80::1%eth0", "::ffff:10.0.0.1"), dropping the IPv6 scope.
func logAddrIP(s string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return ip.WithZone("").Unmap(), true
}

// connNames reports whether a connection failure named this interface's
// address or its IPv6 scope ("%ip6tnl0").
func (a *logAnalyzer) connNames(it Interface) bool {
	for _, ci := range a.conn {
		for _, ad := range ci.addrs {
			if strings.Contains(ad, "%"+it.Name+"<") || (it.Address != "" && strings.HasPrefix(ad, it.Address+"<")) {
				return true
			}
		}
	}
	return false
}

// logGoodInterface picks the interface to recommend: the first ordinary or
// IPoIB NIC, else the first virtual one with a routable address.
func logGoodInterface(ifs []Interface) string {
	for _, it := range ifs {
		if it.Address != "" && (it.Kind == "" || it.Kind == "ipoib") {
			return it.Name
		}
	}
	for _, it := range ifs {
		if it.Kind == "virtual" && it.Address != "" && logLinkLocal(it.Address) == "" {
			return it.Name
		}
	}
	return ""
}

// logLinkLocal returns "IPv6" for an fe80::/10 address (with or without a
// "%scope"), "IPv4" for 169.254.0.0/16 (also IPv4-mapped) and "" otherwise.
func logLinkLocal(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		if strings.HasPrefix(strings.ToLower(addr), "fe80:") {
			return "IPv6"
		}
		return ""
	}
	ip = ip.Unmap()
	switch {
	case !ip.IsLinkLocalUnicast():
		return ""
	case ip.Is4():
		return "IPv4"
	}
	return "IPv6"
}

// ibFailureFindings covers verbs completion errors and QP setup failures.
func (a *logAnalyzer) ibFailureFindings() {
	rep := &a.rep
	roce := false
	for _, h := range rep.HCAs {
		if h.LinkLayer == "RoCE" {
			roce = true
		}
	}
	gid := "NCCL_IB_GID_INDEX"
	if v, ok := rep.Env["NCCL_IB_GID_INDEX"]; ok {
		gid += " (currently " + v + ")"
	}
	seen := map[int]bool{}
	for _, c := range a.completion {
		if seen[c.status] {
			continue
		}
		seen[c.status] = true
		where := ""
		if c.host != "" {
			where = " on " + c.host
		}
		switch c.status {
		case 4:
			a.add(doctor.SevError, "ib-completion-error-gdr",
				fmt.Sprintf("NET/IB completion error 4 (local protection error), vendor err %d%s with GPUDirect RDMA %s: %s", c.vendor, where, rep.GDRDMA, c.text),
				"this is usually PCIe ACS or the IOMMU breaking GPUDirect RDMA: confirm by rerunning with NCCL_NET_GDR_LEVEL=0 (GDR off); if that passes, disable ACS on the PCIe bridges (bare metal) and set the IOMMU off or to passthrough (iommu=pt), and check nvidia-peermem / DMA-BUF support")
		case 12:
			hint := "check the link and switch path between the nodes (ibv_rc_pingpong / ib_write_bw between them); raise NCCL_IB_TIMEOUT only if the fabric is merely slow"
			if roce {
				hint = "on RoCE this is usually the wrong GID: set " + gid + " to the RoCE v2 GID of the routable address (see show_gids; often 3), and check PFC/ECN and VLAN on the switches; " + hint
			}
			a.add(doctor.SevError, "ib-completion-error",
				fmt.Sprintf("NET/IB completion error 12 (transport retry counter exceeded), vendor err %d%s: %s", c.vendor, where, c.text), hint)
		default:
			a.add(doctor.SevError, "ib-completion-error",
				fmt.Sprintf("NET/IB completion error %d, vendor err %d%s: %s", c.status, c.vendor, where, c.text),
				"look for the first failing rank's error; status 5 (flush) follows another failure; run ib_write_bw between the nodes to check the fabric")
		}
	}
	if len(a.modifyQP) > 0 {
		fix := "the QP could not reach the peer's address: check that both ports are Active (ibstat) and in the same subnet/VLAN"
		if roce || len(rep.HCAs) == 0 {
			fix = "on RoCE set " + gid + " to a valid RoCE v2 GID present on every node (show_gids; often 3 for IPv4), and check that both ports are Active and routable; " + fix
		}
		a.add(doctor.SevError, "ib-modify-qp-failed", "ibv_modify_qp failed: "+a.modifyQP[0], fix)
	}
}

// networkChoiceFindings covers Socket chosen while IB exists, IB disabled by
// env and a missing verbs library.
func (a *logAnalyzer) networkChoiceFindings() {
	rep := &a.rep
	var ipoib []string
	for _, it := range rep.Interfaces {
		if it.Kind == "ipoib" && !logContains(ipoib, it.Name) {
			ipoib = append(ipoib, it.Name)
		}
	}
	var hcas []string
	for _, h := range rep.HCAs {
		if !logContains(hcas, h.Name) {
			hcas = append(hcas, h.Name)
		}
	}
	ibEvidence := strings.Join(append(append([]string{}, hcas...), ipoib...), ", ")
	ibDisabled := logEnvOn(rep.Env, "NCCL_IB_DISABLE")
	if ibDisabled {
		set := "NCCL_IB_DISABLE=" + rep.Env["NCCL_IB_DISABLE"]
		if ibEvidence != "" {
			a.add(doctor.SevWarn, "ib-disabled-by-env",
				fmt.Sprintf("InfiniBand disabled by environment (%s): %s transport used although IB hardware is present (%s)", set, doctor.OrDefault(rep.Net, "Socket"), ibEvidence),
				"unset NCCL_IB_DISABLE (or set it to 0) so NCCL uses RDMA; TCP over IPoIB is several times slower")
		} else {
			a.add(doctor.SevInfo, "ib-disabled-by-env", "InfiniBand disabled by environment ("+set+"); no IB device seen in the log",
				"if the nodes have IB/RoCE NICs, unset NCCL_IB_DISABLE")
		}
	}
	if rep.Net == "Socket" && !ibDisabled && ibEvidence != "" {
		why := ""
		if a.noIBVerbs {
			why = " (libibverbs could not be loaded)"
		}
		a.add(doctor.SevWarn, "socket-while-ib-listed",
			fmt.Sprintf("Socket (TCP) transport used while IB-capable devices are listed (%s)%s", ibEvidence, why),
			"install rdma-core/libibverbs (libibverbs.so.1) and expose /dev/infiniband in containers; check NCCL_IB_HCA matches an Active port and NCCL_NET is not forcing Socket")
	}
	if a.noIBVerbs {
		sev, extra := doctor.SevInfo, "; fine if the nodes have no InfiniBand/RoCE NIC"
		if ipoib != nil {
			sev, extra = doctor.SevWarn, "; yet IPoIB interface(s) "+strings.Join(ipoib, ", ")+" exist"
		}
		a.add(sev, "no-libibverbs", "libibverbs.so could not be opened, so NET/IB is unavailable and NCCL falls back to sockets"+extra,
			"if RDMA NICs exist: install rdma-core (libibverbs1 / libibverbs) in the image and mount /dev/infiniband")
	}
	if a.ibNoDevice && !ibDisabled && rep.Net == "Socket" && !a.noIBVerbs {
		a.add(doctor.SevInfo, "ib-no-device", "NET/IB found no usable device (no Active port matched NCCL_IB_HCA)",
			"check ibstat for Active ports and that NCCL_IB_HCA names existing devices")
	}
}

// gdrFindings covers GPUDirect RDMA off, partial or explicitly disabled.
func (a *logAnalyzer) gdrFindings() {
	rep := &a.rep
	var disabled []string
	for _, h := range rep.HCAs {
		if h.GDR == "disabled" {
			disabled = append(disabled, h.Name)
		}
	}
	gdrFix := "load nvidia-peermem (modprobe nvidia_peermem) or use a DMA-BUF capable driver and kernel, disable PCIe ACS on bare metal, and check NCCL_NET_GDR_LEVEL (e.g. =SYS allows GPU and NIC on different CPU sockets)"
	if v, ok := rep.Env["NCCL_NET_GDR_LEVEL"]; ok {
		gdrFix += "; currently NCCL_NET_GDR_LEVEL=" + v
	}
	if len(disabled) > 0 {
		a.add(doctor.SevWarn, "gdr-disabled-for-hca",
			"GPUDirect RDMA disabled for "+strings.Join(disabled, ", ")+": network traffic is staged through host memory", gdrFix)
	}
	mixed, explained := a.mixedNetConns()
	switch rep.GDRDMA {
	case "partial":
		all := logGDRSets{yes: a.gdrDevYes, no: a.gdrDevNo}
		without := all.withoutGDR()
		if slices.ContainsFunc(without, func(dev string) bool { return !explained[dev] }) {
			a.add(doctor.SevWarn, "gdr-partial",
				fmt.Sprintf("GPUDirect RDMA used on %s but not on %s", strings.Join(logSortedKeys(a.gdrDevYes), ", "), strings.Join(without, ", ")),
				"check the PCIe distance of the NICs without GDR to their GPUs (nvidia-smi topo -m) and NCCL_NET_GDR_LEVEL; "+gdrFix)
		}
	case "off":
		if len(disabled) == 0 && rep.Net != "Socket" && rep.Net != "" && a.netConnCount > 0 {
			a.add(doctor.SevWarn, "gdr-not-used",
				fmt.Sprintf("%s connections without /GDRDMA: GPUDirect RDMA is not used", rep.Net), gdrFix)
		}
	}
	if len(mixed) > 0 {
		a.mixedConnFinding(mixed)
	}
}

// mixedNetConns returns the NET connections whose channel lines disagree on
// /GDRDMA, and the NICs they explain: seen without GDR on such connections
// and on no other (none when some connection lines were not kept).
func (a *logAnalyzer) mixedNetConns() ([]*logNetConn, map[string]bool) {
	var mixed []*logNetConn
	inMixed, elsewhere := map[string]bool{}, map[string]bool{}
	for _, name := range a.netConnOrder {
		c := a.netConns[name]
		with, without := c.gdrSplit()
		set := elsewhere
		if len(with) > 0 && len(without) > 0 {
			mixed = append(mixed, c)
			set = inMixed
		}
		for _, l := range without {
			set[l.dev] = true
		}
	}
	explained := map[string]bool{}
	for dev := range inMixed {
		if !elsewhere[dev] && !a.netConnsCut {
			explained[dev] = true
		}
	}
	return mixed, explained
}

// mixedConnFinding names the connections whose channel lines use
// GPUDirect RDMA in some channels or directions but not others. Receives
// with GDR and sends without it on every such connection is GDR read being
// off, NCCL's default on PCIe-only nodes (info); anything else means one
// side or one NIC cannot use GDR (warn).
func (a *logAnalyzer) mixedConnFinding(mixed []*logNetConn) {
	list, readOff, sendNo := logMixedSummary(mixed)
	env := a.rep.Env
	read := "set NCCL_NET_GDR_READ=1 to use it for sends too"
	if v, ok := env["NCCL_NET_GDR_READ"]; ok {
		read += " (currently NCCL_NET_GDR_READ=" + v + ")"
	}
	if readOff {
		a.add(doctor.SevInfo, "gdr-mixed-connection",
			"GPUDirect RDMA used for receives but not for sends, so sends are staged through host memory: "+list,
			"this is GDR read being off (NCCL_NET_GDR_READ=0, NCCL's default when GPU and NIC share only PCIe); "+read+", and keep that only if it measures faster")
		return
	}
	fix := "the side without /GDRDMA does not use GPUDirect RDMA with its NIC: on that side's node load nvidia-peermem (modprobe nvidia-peermem; /sys/kernel/mm/memory_peers/nv_mem exists only where it is loaded) or use a DMA-BUF capable driver and kernel, then check its GPU-NIC PCIe distance (nvidia-smi topo -m; GPU and NIC under different PCIe switches) against NCCL_NET_GDR_LEVEL"
	if v, ok := env["NCCL_NET_GDR_LEVEL"]; ok {
		fix += " (currently NCCL_NET_GDR_LEVEL=" + v + ")"
	}
	if sendNo {
		fix += "; a [send] side without it while its [receive] side has it may only be GDR read being off: " + read
	}
	a.add(doctor.SevWarn, "gdr-mixed-connection",
		"GPUDirect RDMA used for some channels or directions of a connection but not others, so part of its traffic is staged through host memory: "+list, fix)
}

// logMixedSummary lists the first logMaxAddrs of the mixed connections and
// says whether on all of them only sends lack GDR (readOff) and whether on
// any a send lacks it (sendNo).
func logMixedSummary(mixed []*logNetConn) (list string, readOff, sendNo bool) {
	readOff = true
	var names []string
	for _, c := range mixed {
		with, without := c.gdrSplit()
		for _, l := range with {
			readOff = readOff && l.dir == "receive"
		}
		for _, l := range without {
			readOff = readOff && l.dir == "send"
			sendNo = sendNo || l.dir == "send"
		}
		if len(names) < logMaxAddrs {
			names = append(names, c.describe())
		}
	}
	list = strings.Join(names, ", ")
	if n := len(mixed) - len(names); n > 0 {
		list += fmt.Sprintf(" and %d more", n)
	}
	return list, readOff, sendNo
}

// hcaInfoFindings covers mixed link layers and a small RoCE MTU.
func (a *logAnalyzer) hcaInfoFindings() {
	var ib, roce []string
	var smallMTU []string
	for _, h := range a.rep.HCAs {
		switch h.LinkLayer {
		case "IB":
			ib = append(ib, h.Name)
		case "RoCE":
			roce = append(roce, h.Name)
			if h.MTU > 0 && h.MTU <= 1024 {
				smallMTU = append(smallMTU, h.Name)
			}
		}
	}
	if len(ib) > 0 && len(roce) > 0 {
		a.add(doctor.SevInfo, "hca-mixed-link-layers",
			fmt.Sprintf("NCCL uses both InfiniBand (%s) and RoCE (%s) ports; an IB port cannot talk to a RoCE port", strings.Join(ib, ", "), strings.Join(roce, ", ")),
			"restrict NCCL_IB_HCA to ports of one fabric, e.g. NCCL_IB_HCA="+strings.Join(ib, ","))
	}
	if len(smallMTU) > 0 {
		a.add(doctor.SevInfo, "roce-mtu-low", "RoCE QPs on "+strings.Join(smallMTU, ", ")+" use an MTU of 1024 bytes or less (Ethernet MTU 1500)",
			"enable jumbo frames (MTU 9000 gives RoCE MTU 4096) on the NICs and switches, or set NCCL_IB_MTU if the fabric allows")
	}
}

// WriteText prints the report for a person: facts, then findings with their
// severity, code, message and fix.
func (rep *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	dash := func(s string) string { return doctor.OrDefault(s, "-") }
	num := func(n int) string {
		if n == 0 {
			return "-"
		}
		return strconv.Itoa(n)
	}
	fmt.Fprintf(tw, "NCCL version:\t%s\n", dash(rep.NCCLVersion))
	if len(rep.NCCLVersionsSeen) > 1 {
		fmt.Fprintf(tw, "Versions seen:\t%s\n", strings.Join(rep.NCCLVersionsSeen, ", "))
	}
	fmt.Fprintf(tw, "CUDA driver:\t%s\n", dash(rep.CUDADriverVersion))
	netDesc := dash(rep.Net)
	if rep.NetPlugin != "" {
		netDesc += " (plugin " + rep.NetPlugin + ")"
	} else if rep.Net == "IB" || rep.Net == "Socket" {
		netDesc += " (internal)"
	}
	fmt.Fprintf(tw, "Network:\t%s\n", netDesc)
	if rep.NetPluginPath != "" {
		fmt.Fprintf(tw, "Plugin path:\t%s\n", rep.NetPluginPath)
	}
	if rep.OFIProvider != "" {
		fmt.Fprintf(tw, "OFI provider:\t%s\n", rep.OFIProvider)
	}
	gdr := rep.GDRDMA
	if rep.GDRDMASend != "" || rep.GDRDMAReceive != "" {
		gdr += fmt.Sprintf(" (send %s, receive %s)", dash(rep.GDRDMASend), dash(rep.GDRDMAReceive))
	}
	fmt.Fprintf(tw, "GPUDirect RDMA:\t%s\n", gdr)
	fmt.Fprintf(tw, "Intra-node:\t%s\n", dash(strings.Join(rep.IntraNode, ", ")))
	nvls := "available " + rep.NVLS.Available
	if rep.NVLS.Channels != nil {
		nvls += fmt.Sprintf(", %d channels", *rep.NVLS.Channels)
	}
	if rep.NVLS.DisabledByEnv {
		nvls += ", disabled by NCCL_NVLS_ENABLE=0"
	}
	fmt.Fprintf(tw, "NVLS:\t%s\n", nvls)
	coll := fmt.Sprintf("requested %t, supported %s", rep.CollNet.Requested, rep.CollNet.Supported)
	if rep.CollNet.Plugin != "" {
		coll += ", plugin " + rep.CollNet.Plugin
	}
	fmt.Fprintf(tw, "CollNet:\t%s\n", coll)
	nodes := num(rep.NNodes)
	if rep.NNodes == 0 && rep.MultiNode {
		nodes = ">1"
	}
	fmt.Fprintf(tw, "Ranks / nodes:\t%s / %s\n", num(rep.NRanks), nodes)
	if len(rep.Hosts) > 0 {
		fmt.Fprintf(tw, "Hosts:\t%s\n", strings.Join(rep.Hosts, ", "))
	}
	if rep.Channels > 0 || rep.P2PChannels > 0 {
		fmt.Fprintf(tw, "Channels:\t%s coll, %s p2p\n", num(rep.Channels), num(rep.P2PChannels))
	}
	if rep.InitComplete > 0 {
		fmt.Fprintf(tw, "Init complete:\t%d\n", rep.InitComplete)
	}
	if rep.AvgBusBandwidthGBs > 0 {
		fmt.Fprintf(tw, "Avg bus bandwidth:\t%g GB/s (nccl-tests)\n", rep.AvgBusBandwidthGBs)
	}
	for i, it := range rep.Interfaces {
		label := ""
		if i == 0 {
			label = "Interfaces:"
		}
		extra := ""
		if it.Kind != "" {
			extra = " [" + it.Kind + "]"
		}
		if it.Host != "" {
			extra += " on " + it.Host
		}
		fmt.Fprintf(tw, "%s\t%-10s %s %s%s\n", label, it.Role, it.Name, dash(it.Address), extra)
	}
	for i, h := range rep.HCAs {
		label := ""
		if i == 0 {
			label = "HCAs:"
		}
		desc := fmt.Sprintf("%s port %d %s", h.Name, h.Port, dash(h.LinkLayer))
		if len(h.Flags) > 0 {
			desc += " [" + strings.Join(h.Flags, ",") + "]"
		}
		if h.GDR != "" {
			desc += " GDR " + h.GDR
		}
		if h.GIDIndex != nil {
			desc += fmt.Sprintf(" GID %d", *h.GIDIndex)
		}
		if h.MTU > 0 {
			desc += fmt.Sprintf(" mtu %d", h.MTU)
		}
		fmt.Fprintf(tw, "%s\t%s\n", label, desc)
	}
	keys := make([]string, 0, len(rep.Env))
	for k := range rep.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		label := ""
		if i == 0 {
			label = "Environment:"
		}
		fmt.Fprintf(tw, "%s\t%s=%s\n", label, k, rep.Env[k])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return doctor.WriteFindings(w, rep.Findings)
}

// logEnvInt reads an integer NCCL parameter from env the way NCCL does
// (doctor.ParseNCCLInt); ok is false when the variable is unset or has no
// leading integer.
func logEnvInt(env map[string]string, name string) (int64, bool) {
	v, set := env[name]
	if !set {
		return 0, false
	}
	return doctor.ParseNCCLInt(v)
}

// logEnvOn reports whether an integer NCCL switch (NCCL_IB_DISABLE, ...) is
// set to a non-zero value.
func logEnvOn(env map[string]string, name string) bool {
	n, ok := logEnvInt(env, name)
	return ok && n != 0
}

func logAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func logContains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func logClip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func logSortedKeys(sets ...map[string]bool) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, set := range sets {
		for k := range set {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}
