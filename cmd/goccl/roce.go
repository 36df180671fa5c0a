package main

import (
	"fmt"
	"io"
)

const roceUsage = `usage: goccl roce check-pcap FILE
       goccl roce write-bw|write-lat|read-bw|read-lat|send-bw|send-lat [-s SIZE | -a] [-n ITERS] [-p PORT] [-d IFNAME] [--pcap FILE] [--report_gbits] [SERVER]
       goccl roce devinfo
       goccl roce rate-plot [-o rate.png] [--link RATE] LOG[=LABEL]...

devinfo lists, in ibv_devinfo's shape, the soft device goccl opens on each
interface with an Ethernet or IPv4 address (port state from the interface,
active MTU the largest IB MTU whose RoCE v1 and v2 packets fit it; GID 0 the
link-local GID of its MAC for RoCE v1, then its IPv4 addresses as RoCE v2
GIDs).

The bandwidth and latency tools play perftest's ib_write_bw, ib_write_lat,
ib_read_bw, ib_read_lat, ib_send_bw and ib_send_lat over goccl's soft RoCE
device: RoCE v2 over UDP, or with -d IFNAME RoCE v1 as raw Ethernet frames
on that interface (root; both sides on one L2 segment). Start one side
without SERVER, the other with the first one's address (the TCP side
channel's) and the same -s/-a/-n; flags may come before or after SERVER, as
perftest's do. Each side prints perftest's parameter banner and both sides'
addresses; the client then prints perftest's columns (MB = 2^20 bytes, or
Gb = 10^9 bits with --report_gbits; latency in µs, half the round trip,
except read-lat, whose READ is a round trip by itself).
` + "`" + `goccl roce write-bw -h` + "`" + ` lists the flags.

rate-plot draws the rate logs of write-bw --rate-log (one per flow, e.g.
the flows of an incast) as goodput and DCQCN rate over time and prints a
table of each flow's goodput, resends, CNPs and rate cuts; goccl roce
rate-plot -h says more.

check-pcap reads a pcap or pcapng capture of link type Ethernet (1, with or
without an 802.1Q tag), Linux cooked v1 or v2 (113, 276: tcpdump -i any) or
raw IP (101, 12, 228 IPv4, 229 IPv6), decodes every frame as RoCE v2 (UDP
port 4791 over IPv4 or IPv6) or RoCE v1 (Ethertype 0x8915), verifies its
ICRC (IBTA annex A16/A17), and prints one line per frame:

	frame N: RoCEv2 RC RDMA_WRITE_ONLY dqp 0x000011 psn 256 len 7 icrc ok

A frame whose ICRC does not match says "icrc BAD"; one that does not decode
says why. The exit status is 1 if any frame is bad or undecodable, 0 if all
are good, 2 for usage errors.
`

func init() {
	register(&command{
		name:    "roce",
		summary: "soft RoCE tools: check-pcap, devinfo, rate-plot, and perftest's roles (write-bw, write-lat, read-bw, read-lat, send-bw, send-lat)",
		usage:   "goccl roce check-pcap FILE | devinfo | rate-plot LOG... | write-bw|write-lat|read-bw|read-lat|send-bw|send-lat [flags] [SERVER]",
		run:     runRoce,
	})
}

func runRoce(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, roceUsage)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, roceUsage)
		return 0
	case "write-bw", "write-lat", "read-bw", "read-lat", "send-bw", "send-lat":
		return runRocePerf(args[0], args[1:], stdout, stderr)
	case "devinfo":
		return roceDevinfo(args[1:], stdout, stderr)
	case "rate-plot":
		return runRatePlot(args[1:], stdout, stderr)
	case "check-pcap":
		if len(args) != 2 {
			fmt.Fprint(stderr, roceUsage)
			return 2
		}
		return checkPcap(args[1], stdout, stderr)
	}
	fmt.Fprintf(stderr, "goccl roce: unknown subcommand %q\n\n%s", args[0], roceUsage)
	return 2
}
