package nccllog

import (
	"regexp"
	"strconv"
	"strings"
)

// logLine is a logical line as the rules see it.
type logLine struct {
	*logRecord
	lower string // the payload in lower case
}

// logRule is one kind of payload line. gate is a cheap literal test that
// every line the rule is about passes (most lines pass few gates); re,
// run only on lines past the gate, must match too (nil: the gate decides
// alone), and do records what the line says, given re's submatches (nil
// without re). Of consecutive rules in one group, only the first that
// matches applies; a line a last rule matched goes to no later rule.
type logRule struct {
	gate  func(l *logLine) bool
	re    *regexp.Regexp
	do    func(a *logAnalyzer, l *logLine, m []string)
	group string
	last  bool
}

// contains, hasPrefix and lowerContains are the gates: the payload
// contains s, starts with s, or contains one of subs in lower case.
func contains(s string) func(*logLine) bool {
	return func(l *logLine) bool { return strings.Contains(l.payload, s) }
}

func hasPrefix(s string) func(*logLine) bool {
	return func(l *logLine) bool { return strings.HasPrefix(l.payload, s) }
}

func lowerContains(subs ...string) func(*logLine) bool {
	return func(l *logLine) bool {
		for _, s := range subs {
			if strings.Contains(l.lower, s) {
				return true
			}
		}
		return false
	}
}

// process applies the rules to one logical line.
func (a *logAnalyzer) process(r logRecord) {
	p := r.payload
	if r.prefixed {
		a.rep.NCCLLines++
		if r.host != "" {
			a.addHost(a.hosts, r.host)
		}
	}
	if p == "" {
		return
	}
	if r.level == "WARN" && len(a.rep.Warnings) < logMaxWarnings && !logContains(a.rep.Warnings, p) {
		a.rep.Warnings = append(a.rep.Warnings, logClip(p, 300))
	}
	l := logLine{logRecord: &r, lower: strings.ToLower(p)}
	applied := "" // the group of the last rule that applied
	for i := range logRules {
		rule := &logRules[i]
		if rule.group != "" && rule.group == applied || !rule.gate(&l) {
			continue
		}
		var m []string
		if rule.re != nil {
			if m = rule.re.FindStringSubmatch(p); m == nil {
				continue
			}
		}
		rule.do(a, &l, m)
		if rule.last {
			return
		}
		applied = rule.group
	}
}

// logRules are the payload patterns, in the order they apply. Each
// comment: the NCCL source file that prints the line and the versions.
var logRules = []logRule{
	{
		// init.cc "NCCL version 2.18.5+cuda12.0" (all 2.x; printed by rank 0).
		gate: contains("NCCL version"),
		re:   regexp.MustCompile(`NCCL version (\d+\.\d+\.\d+[\w.+\-]*)`),
		do: func(a *logAnalyzer, _ *logLine, m []string) {
			if a.rep.NCCLVersion == "" {
				a.rep.NCCLVersion = m[1]
			}
			if !logContains(a.versions, m[1]) && len(a.versions) < logMaxItems {
				a.versions = append(a.versions, m[1])
			}
		},
	},
	{
		// init.cc "cudaDriverVersion 12020" (2.11+).
		gate: contains("cudaDriverVersion"),
		re:   regexp.MustCompile(`cudaDriverVersion (\d+)`),
		do: func(a *logAnalyzer, _ *logLine, m []string) {
			if a.rep.CUDADriverVersion == "" {
				a.rep.CUDADriverVersion = m[1]
			}
		},
	},
	{
		// param.cc / utils: "NCCL_X set by environment to Y." (all 2.x; ints
		// get a trailing dot) and "NCCL_X set to Y" (older string params).
		gate: contains("NCCL_"),
		re:   regexp.MustCompile(`\b(NCCL_[A-Z0-9_]+) set (?:by environment )?to (.*)$`),
		do:   func(a *logAnalyzer, _ *logLine, m []string) { a.setEnv(m[1], m[2]) },
	},

	// Interface and HCA lists: one of them per line.
	{
		// bootstrap.cc "Bootstrap : Using [0]eth0:10.0.0.1<0> [1]..." (2.4-2.11),
		// "Bootstrap : Using eth0:10.0.0.1<0>" (2.12+), "Bootstrap: Using" (2.23+).
		group: "lists",
		gate:  hasPrefix("Bootstrap"),
		re:    regexp.MustCompile(`^Bootstrap ?: ?Using (.*)$`),
		do:    func(a *logAnalyzer, l *logLine, m []string) { a.addInterfaces(m[1], "bootstrap", l.host) },
	},
	{
		// 2.0-2.3 "NET : Using interface eth0:10.0.0.1<0>".
		group: "lists",
		gate:  hasPrefix("NET"),
		re:    regexp.MustCompile(`^NET ?: ?Using interface (.*)$`),
		do:    func(a *logAnalyzer, l *logLine, m []string) { a.addInterfaces(m[1], "bootstrap", l.host) },
	},
	{
		// transport/net_socket.cc "NET/Socket : Using [0]eth0:10.0.0.1<0> ...".
		group: "lists",
		gate:  hasPrefix("NET"),
		re:    regexp.MustCompile(`^NET/Socket ?: ?Using (.*)$`),
		do: func(a *logAnalyzer, l *logLine, m []string) {
			a.netSocketListed = true
			a.addInterfaces(m[1], "net-socket", l.host)
		},
	},
	{
		// 2.0-2.3 "NET/IB : Using interface ib0 for sideband communication".
		group: "lists",
		gate:  hasPrefix("NET"),
		re:    regexp.MustCompile(`^NET/IB ?: ?Using interface (\S+) for sideband`),
		do:    func(a *logAnalyzer, l *logLine, m []string) { a.addInterface(m[1], "", "ib-oob", 0, l.host) },
	},
	{
		// transport/net_ib.cc "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>"
		// (2.4+; "/SHARP" and other flags from the rdma-sharp plugin; 2.0-2.3
		// "NET/IB: [0] mlx5_0:1/IB").
		group: "lists",
		gate:  hasPrefix("NET/IB"),
		re:    logHCAItemRe,
		do:    func(a *logAnalyzer, l *logLine, _ []string) { a.addHCAList(l.payload, l.host) },
	},

	{
		// net_ib.cc "NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'" (2.7+),
		// "GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 (distance 4 > 2)" (2.5-2.6,
		// cudaDev[nvmlDev]) and "GPU Direct RDMA Enabled for GPU 1a000 / HCA 0
		// (distance 4 <= 5)" (2.12+, busId).
		gate: contains("GPU Direct RDMA"),
		re:   regexp.MustCompile(`GPU Direct RDMA (Enabled|Disabled) for (?:GPU [0-9a-fA-F]+(?:\[\d+\])? / )?HCA (\d+)(?: '([^']+)')?`),
		do:   func(a *logAnalyzer, _ *logLine, m []string) { a.setHCAGDR(m[1] == "Enabled", m[2], m[3]) },
	},
	{
		// net_ib.cc "NET/IB: Dev 0 Port 1 qpn 58 mtu 3 GID 3 (0/A10B...)" (2.12+;
		// "LID n" for IB).
		gate: contains("qpn"),
		re:   regexp.MustCompile(`NET/IB ?: ?Dev (\d+) Port (\d+) qpn \d+ mtu (\d+)(?: GID (\d+))?`),
		do:   func(a *logAnalyzer, _ *logLine, m []string) { a.setHCAQP(m) },
	},
	{
		// init.cc "Using network IB" (2.5+), "Using internal Network Socket" (2.0-2.4).
		gate: contains("Using"),
		re:   regexp.MustCompile(`^Using (?:network|internal Network) (.+?)\s*$`),
		do:   func(a *logAnalyzer, _ *logLine, m []string) { a.netUsing = m[1] },
	},
	{
		// net.cc / plugin loader: "NET/Plugin: Loaded net plugin NCCL RDMA
		// Plugin v8 (v8)" (2.19+).
		gate: contains("Loaded net"),
		re:   regexp.MustCompile(`Loaded net plugin (.+?)(?: \(v\d+\))?\s*$`),
		do:   func(a *logAnalyzer, _ *logLine, m []string) { a.rep.NetPlugin = m[1] },
	},
	{
		// "Loaded collnet plugin SHARP (v8)" (2.19+), "Loaded coll plugin" (older).
		gate: contains("Loaded coll"),
		re:   regexp.MustCompile(`Loaded coll(?:net)? plugin (.+?)(?: \(v\d+\))?\s*$`),
		do:   func(a *logAnalyzer, _ *logLine, m []string) { a.rep.CollNet.Plugin = m[1] },
	},
	{
		gate: contains("Plugin Path"),
		re:   regexp.MustCompile(`^Plugin Path ?: ?(\S+)`),
		do:   func(a *logAnalyzer, _ *logLine, m []string) { a.rep.NetPluginPath = m[1] },
	},
	{
		// rdma-sharp plugin "P2P plugin IBext_v8".
		gate: contains("P2P plugin"),
		re:   regexp.MustCompile(`^P2P plugin (\S+)`),
		do:   (*logAnalyzer).setNetPluginOnce,
	},
	{
		// aws-ofi-nccl "NET/OFI Using aws-ofi-nccl 1.7.4-aws".
		gate: contains("NET/OFI"),
		re:   regexp.MustCompile(`NET/OFI Using (aws-ofi-nccl \S+)`),
		do:   (*logAnalyzer).setNetPluginOnce,
	},
	{
		// aws-ofi-nccl "NET/OFI Selected Provider is efa".
		gate: contains("NET/OFI"),
		re:   regexp.MustCompile(`NET/OFI Selected Provider is (\S+)`),
		do:   func(a *logAnalyzer, _ *logLine, m []string) { a.rep.OFIProvider = m[1] },
	},
	{
		// net.cc "NET/Plugin : No plugin found (libnccl-net.so), using internal implementation".
		gate: contains("No plugin found"),
		do:   func(a *logAnalyzer, _ *logLine, _ []string) { a.noPluginFound = true },
	},
	{
		// Lines about CollNet: the plugin loader giving up, or CollNet not
		// supported or disabled.
		gate: lowerContains("collnet"),
		do: func(a *logAnalyzer, l *logLine, _ []string) {
			p, lower := l.payload, l.lower
			switch {
			case strings.Contains(p, "ncclCollNetPlugin symbol (>=") || strings.Contains(p, "ncclCollNetPlugin symbols v"):
				a.collSymMissing = true // the loader gave up on every version
			case strings.Contains(p, "ncclCollNetPlugin_v"):
				// one version probe failing is normal
			case strings.Contains(lower, "not supported") || strings.Contains(lower, "unsupported") ||
				strings.Contains(lower, "not available") || strings.Contains(lower, "could not") ||
				strings.Contains(lower, "disabled"):
				a.collExplicitNo = true
			}
		},
	},
	{
		// misc/ibvwrap.cc "Failed to open libibverbs.so[.1]" (2.x).
		gate: contains("Failed to open libibverbs"),
		do:   func(a *logAnalyzer, _ *logLine, _ []string) { a.noIBVerbs = true },
	},
	{
		// net_ib.cc "NET/IB : No device found."
		gate: func(l *logLine) bool {
			return strings.HasPrefix(l.payload, "NET/IB") && strings.Contains(l.payload, "No device found")
		},
		do: func(a *logAnalyzer, _ *logLine, _ []string) { a.ibNoDevice = true },
	},

	// Channel lines: a connection or a ring listing.
	{
		// "1 -> 2 via P2P/IPC" (2.0-2.2), "Ring 00 : 0[0] -> 1[1] via P2P/IPC"
		// (2.3-2.4), "Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0",
		// "Channel 00 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA"
		// (2.5+), "Channel 00/1 : 0[0] -> 1[1] via P2P/CUMEM/read" (2.19+),
		// and any of their tails pasted alone ("9[1a000] -> 2[6b000] [send]
		// via NET/IB/0/GDRDMA"); the part after "via" is read by
		// addChannelConn.
		group: "channel",
		gate:  contains(" via "),
		re:    regexp.MustCompile(`^(?:(?:Ring|Channel) (\d+)(?:/\d+)? ?: )?(\d+)(?:\[([0-9a-fA-F]+)\])? -> (\d+)(?:\[([0-9a-fA-F]+)\])?(?: \[(send|receive)\])? via (.+)$`),
		do:    func(a *logAnalyzer, _ *logLine, m []string) { a.addChannelConn(m) },
	},
	{
		// "Ring 00 :    0   1" (2.2-2.6) / "Channel 00/04 :    0   1" (2.7+).
		group: "channel",
		gate:  contains(":"),
		re:    regexp.MustCompile(`^(?:Ring|Channel) (\d+)(?:/(\d+))? ?:((?:\s+-?\d+)+)\s*$`),
		do:    func(a *logAnalyzer, _ *logLine, m []string) { a.addRingList(m) },
	},

	{
		// init.cc "2 coll channels, [2 collnet channels, ][0 nvls channels, ]2
		// p2p channels, 2 p2p channels per peer".
		gate: contains("coll channels"),
		re:   regexp.MustCompile(`(\d+) coll channels, (?:(\d+) collnet channels, )?(?:(\d+) nvls channels, )?(\d+) p2p channels`),
		do: func(a *logAnalyzer, _ *logLine, m []string) {
			a.rep.Channels = logAtoi(m[1])
			if m[3] != "" {
				n := logAtoi(m[3])
				a.rep.NVLS.Channels = &n
			}
			a.rep.P2PChannels = logAtoi(m[4])
		},
	},
	{
		// transport/nvls.cc "NVLS multicast support is [not ]available on dev 0" (2.17+).
		gate: contains("NVLS"),
		re:   regexp.MustCompile(`NVLS multicast support is (not )?available`),
		do: func(a *logAnalyzer, _ *logLine, m []string) {
			if m[1] == "" {
				a.rep.NVLS.Available = "yes"
			} else if a.rep.NVLS.Available != "yes" {
				a.rep.NVLS.Available = "no"
			}
		},
	},
	{
		// init.cc "comm 0x.. rank 0 nranks 2 ..." (2.3+), "Init timings: rank 2 nranks 16" (2.22+).
		gate: contains("nranks"),
		re:   regexp.MustCompile(`\brank (\d+) nranks (\d+)\b`),
		do:   func(a *logAnalyzer, _ *logLine, m []string) { a.rep.NRanks = max(a.rep.NRanks, logAtoi(m[2])) },
	},
	{
		// init.cc "nRanks 2 nNodes 1 localRanks 2 localRank 0" (2.19+).
		gate: contains("nNodes"),
		re:   regexp.MustCompile(`nRanks (\d+) nNodes (\d+)`),
		do:   func(a *logAnalyzer, _ *logLine, m []string) { a.nNodesLogged = max(a.nNodesLogged, logAtoi(m[2])) },
	},
	{
		// "Init COMPLETE" / "- COMPLETE" lines, one per rank.
		gate: func(l *logLine) bool {
			return strings.Contains(l.payload, "Init COMPLETE") || strings.HasSuffix(l.payload, "- COMPLETE")
		},
		do: func(a *logAnalyzer, _ *logLine, _ []string) { a.rep.InitComplete++ },
	},
	{
		// nccl-tests "#  Rank  1 Group  0 Pid 565139 on node4 device  0 [0x4c] NVIDIA H800".
		gate: contains("Rank"),
		re:   regexp.MustCompile(`^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device`),
		do: func(a *logAnalyzer, _ *logLine, m []string) {
			if len(a.tableRanks) < 1<<16 {
				a.tableRanks[logAtoi(m[1])] = true
			}
			a.addHost(a.tableHosts, m[2])
		},
	},
	{
		// nccl-tests "# Avg bus bandwidth    : 70.742".
		gate: contains("Avg bus"),
		re:   regexp.MustCompile(`^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)`),
		do: func(a *logAnalyzer, _ *logLine, m []string) {
			a.rep.AvgBusBandwidthGBs, _ = strconv.ParseFloat(m[1], 64)
		},
	},
	{
		// A launcher command line in the log (not an NCCL line): "--nnode=2",
		// "--nnodes 2".
		gate: func(l *logLine) bool { return !l.prefixed && strings.Contains(l.payload, "--nnode") },
		re:   regexp.MustCompile(`--nnodes?[= ](\d+)\b`),
		do:   func(a *logAnalyzer, _ *logLine, m []string) { a.cmdNNodes = logAtoi(m[1]) },
	},

	// Failures.
	{
		// net_ib.cc "NET/IB : Got completion [from peer ]with error 4, opcode 0,
		// len 0, vendor err 81" (2.x).
		gate: contains("Got completion"),
		re:   regexp.MustCompile(`Got completion (?:from peer )?with error (\d+), opcode \d+, len \d+, vendor err (\d+)`),
		do: func(a *logAnalyzer, l *logLine, m []string) {
			if len(a.completion) < logMaxItems {
				a.completion = append(a.completion, logCompletion{status: logAtoi(m[1]), vendor: logAtoi(m[2]), host: l.host, text: logClip(l.payload, 300)})
			}
		},
		last: true,
	},
	{
		// net_ib.cc: a queue pair could not be set up (ibv_modify_qp).
		gate: contains("ibv_modify_qp"),
		do: func(a *logAnalyzer, l *logLine, _ []string) {
			if len(a.modifyQP) < logMaxAddrs {
				a.modifyQP = append(a.modifyQP, logClip(l.payload, 300))
			}
		},
		last: true,
	},
	{
		// bootstrap.cc / net_socket.cc "no socket interface found" / "No usable
		// listening interface found".
		gate: lowerContains("no socket interface found", "no usable listening interface"),
		do: func(a *logAnalyzer, l *logLine, _ []string) {
			if len(a.socketNone) < logMaxAddrs {
				a.socketNone = append(a.socketNone, logClip(l.payload, 300))
			}
		},
	},

	// misc/socket.cc: "Connect to 10.0.0.1<43235> failed : Connection
	// refused", "Call to connect returned Connection refused, retrying"
	// (2.7-2.9), "socketProgressOpt: Call to recv from a<p> failed :
	// Connection reset by peer". One finding code per line.
	{
		group: "connection",
		gate:  lowerContains("connection refused"),
		do:    func(a *logAnalyzer, l *logLine, _ []string) { a.connFailure("connection-refused", l) },
	},
	{
		group: "connection",
		gate: func(l *logLine) bool {
			return strings.Contains(l.lower, "timed out") && (strings.Contains(l.lower, "connect") || l.level == "WARN")
		},
		do: func(a *logAnalyzer, l *logLine, _ []string) { a.connFailure("connection-timeout", l) },
	},
	{
		group: "connection",
		gate:  lowerContains("network is unreachable", "no route to host"),
		do:    func(a *logAnalyzer, l *logLine, _ []string) { a.connFailure("network-unreachable", l) },
	},
	{
		group: "connection",
		gate:  lowerContains("connection reset by peer", "software caused connection abort"),
		do:    func(a *logAnalyzer, l *logLine, _ []string) { a.connFailure("connection-reset", l) },
	},
}

// setNetPluginOnce records the net plugin a line names unless one is
// known already ("Loaded net plugin" wins).
func (a *logAnalyzer) setNetPluginOnce(_ *logLine, m []string) {
	if a.rep.NetPlugin == "" {
		a.rep.NetPlugin = m[1]
	}
}

// logAddrRe is a peer address as NCCL prints it, "10.0.0.1<43235>".
var logAddrRe = regexp.MustCompile(`([^\s<>]+<\d+>)`)

// connFailure counts a failed connection under its finding code and keeps
// the first line and the first few peer addresses.
func (a *logAnalyzer) connFailure(code string, l *logLine) {
	ci := a.conn[code]
	if ci == nil {
		ci = &logConnIssue{text: logClip(l.payload, 300)}
		a.conn[code] = ci
		a.connOrder = append(a.connOrder, code)
	}
	ci.count++
	if m := logAddrRe.FindStringSubmatch(l.payload); m != nil && len(ci.addrs) < logMaxAddrs && !logContains(ci.addrs, m[1]) {
		ci.addrs = append(ci.addrs, m[1])
	}
}
