package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/goccl/goccl/internal/cluster"
)

var clusterUsage = `usage: goccl cluster up --hosts N [--rails R] [--bw RATE] [--delay D] [--jitter D] [--loss P] [--ecn B] [--queue B] [--port-queue B] [--mtu M]
                        [--name NAME] [--subnet CIDR] [--slots N] [--hostfile FILE] [--json]
       goccl cluster status [--name NAME] [--json]
       goccl cluster down [--name NAME]
       goccl cluster rsh HOST COMMAND...

A cluster on this machine: N hosts, network namespaces NAME-h0 ... NAME-h(N-1),
each with one link (eth0, address SUBNET+i+1: 10.200.0.1, ...) to a bridge in
a namespace of its own, NAME-sw, so the machine's own network is untouched.
With --rails R each host has R links, eth0 ... eth(R-1), rail r to a bridge
(switch) and subnet of its own, the r-th after SUBNET (10.200.1.0/24 for
rail 1 of the default): a rail-optimized cluster.
Run a command on a host with 'ip netns exec NAME-hI COMMAND'.

up      builds the cluster, shapes the links with tc and prints the hosts,
        their OpenMPI hostfile lines and the remote shell to use
status  prints the hosts and what their links carried (tc qdisc counters)
down    removes the cluster: its namespaces (and so its links and bridge),
        the processes still running in them, its state file; it also finds
        what a crashed 'up' left, by name; removing nothing is no error
rsh     runs COMMAND on HOST as ssh would (ip netns exec HOST sh -c
        'COMMAND...'), with HOST as its host name (a UTS namespace of its
        own, where unshare is installed): the remote shell for goccl run -H
        and for mpirun, which runs inside a host (the hosts cannot reach the
        machine's own network):
          goccl run -H NAME-h0:2,NAME-h1:2 --rsh "goccl cluster rsh" PROG
          goccl cluster rsh NAME-h0 mpirun --hostfile FILE \
              --mca plm_rsh_agent "goccl cluster rsh" -np 4 PROG

Shaping (each host's link, like a full-duplex cable to a switch):
  --bw RATE    each host sends at most RATE and receives at most RATE (tbf at
               the host's egress and at the switch port); tc units: 100mbit,
               1gbit, 10gbit, 125mbps (bytes/s); 0: unshaped (default)
  --delay D    one-way latency between two hosts (netem at the sender's
               egress): a round trip takes 2×D; 100us, 5ms
  --jitter D   varies the delay (netem, normal distribution; reorders)
  --loss P     percent of packets from each host that its links drop (1,
               0.5%; an nftables rule in the switch, counted per link)
  --ecn B      the switch marks CE on ECN-capable packets to a host once
               more than B bytes are queued for it (a virtual queue at the
               rate, in RoCE frames: the kernel has no RED); needs --bw
  --queue B    the shaper's queue in bytes (default: 2×D + 20 ms of the
               rate, at least 4 bursts); deeper for senders without
               congestion control (the soft RoCE device)
  --port-queue B  the switch ports' queue alone (towards the hosts); the
               hosts' egress keeps --queue's, as a NIC does not drop what
               its host sends faster than the wire: a shallow-buffer
               switch for RoCE
  Delay and jitter need the kernel's netem (sch_netem), loss and ECN
  nftables' nft.
  Every rail's links are shaped alike.

Needs root and iproute2 (ip, tc). A state file, DIR/cluster-NAME.json
(--state-dir, default ` + cluster.DefaultStateDir + `), records what 'up' made.
Exit status: 0 done, 1 failed (status: the cluster is missing or broken),
2 usage errors.
`

func init() {
	register(&command{
		name:    "cluster",
		summary: "build a cluster of shaped network-namespace hosts on this machine (up, status, down, rsh)",
		usage:   "goccl cluster up|status|down [flags]",
		run:     runCluster,
	})
}

var clusterSubs = map[string]func(args []string, stdout, stderr io.Writer) int{
	"up":     runClusterUp,
	"status": runClusterStatus,
	"down":   runClusterDown,
	"rsh":    runClusterRsh,
}

func runCluster(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, clusterUsage)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, clusterUsage)
		return 0
	}
	run, ok := clusterSubs[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "goccl cluster: unknown subcommand %q%s\n\n%s", args[0], didYouMean(args[0], []string{"down", "rsh", "status", "up"}), clusterUsage)
		return 2
	}
	return run(args[1:], stdout, stderr)
}

// lossValue is --loss: a percentage, with or without '%'.
type lossValue float64

func (l *lossValue) String() string { return strconv.FormatFloat(float64(*l), 'f', -1, 64) }
func (l *lossValue) Type() string   { return "percent" }
func (l *lossValue) Set(s string) error {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || v < 0 || v > 100 {
		return errors.New("want a percentage, 0 to 100 (1, 0.5%)")
	}
	*l = lossValue(v)
	return nil
}

// clusterFlags are the flags every cluster subcommand has.
func clusterFlags(sub string, stderr io.Writer) (fs *cliFlags, name, stateDir *string) {
	fs = newFlags("goccl cluster "+sub, stderr, func(fs *cliFlags) {
		fmt.Fprintf(fs.Output(), "usage: goccl cluster %s [flags]\n\nFlags:\n", sub)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\nRun 'goccl cluster -h' for the cluster's shape and shaping.\n")
	})
	name = fs.String("name", cluster.DefaultName, "the cluster's name: namespaces NAME-h0 ... and NAME-sw")
	stateDir = fs.String("state-dir", cluster.DefaultStateDir, "directory of the state file cluster-NAME.json")
	return fs, name, stateDir
}

// clusterArgs parses args into fs and refuses positional arguments.
func clusterArgs(fs *cliFlags, args []string, stderr io.Writer) (status int, exit bool) {
	if status, exit := fs.parseOrExit(args); exit {
		return status, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\nRun '%s -h' for usage.\n", fs.cmd, fs.Arg(0), fs.cmd)
		return 2, true
	}
	return 0, false
}

func clusterContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt)
}

func runClusterUp(args []string, stdout, stderr io.Writer) int {
	fs, name, stateDir := clusterFlags("up", stderr)
	var cfg cluster.Config
	var loss lossValue
	var subnet string
	fs.IntVar(&cfg.Hosts, "hosts", 0, "number of hosts (required)")
	fs.IntVar(&cfg.Rails, "rails", 1, "links per host, each rail its own switch and subnet")
	fs.Var(&cfg.Rate, "bw", "each host link's rate, each way (tc units: 100mbit, 1gbit); 0: unshaped")
	fs.DurationVar(&cfg.Delay, "delay", 0, "one-way latency between two hosts (100us, 5ms)")
	fs.DurationVar(&cfg.Jitter, "jitter", 0, "variation of the delay")
	fs.Var(&loss, "loss", "percent of packets from each host that its links drop")
	fs.IntVar(&cfg.ECN, "ecn", 0, "mark CE above this many bytes queued to a host (needs --bw)")
	fs.IntVar(&cfg.Queue, "queue", 0, "the shaper's queue in bytes (0: 2×delay + 20 ms of the rate)")
	fs.IntVar(&cfg.PortQueue, "port-queue", 0, "the switch ports' queue in bytes, the hosts' egress keeping --queue's (0: --queue's)")
	fs.IntVar(&cfg.MTU, "mtu", cluster.DefaultMTU, "MTU of the links")
	fs.StringVar(&subnet, "subnet", cluster.DefaultSubnet.String(), "the hosts' subnet: host i gets its address plus i+1")
	slots := fs.Int("slots", 1, "slots of each host in the hostfile lines")
	hostfile := fs.String("hostfile", "", "also write the OpenMPI hostfile to this file")
	asJSON := fs.Bool("json", false, "print the cluster (its state file's contents) as JSON")
	if status, exit := clusterArgs(fs, args, stderr); exit {
		return status
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "goccl cluster up: "+format+"\nRun 'goccl cluster up -h' for usage.\n", a...)
		return 2
	}
	if !fs.Changed("hosts") {
		return usageErr("--hosts N is required")
	}
	if *slots < 1 {
		return usageErr("--slots %d: at least 1", *slots)
	}
	p, err := netip.ParsePrefix(subnet)
	if err != nil {
		return usageErr("--subnet %q: %v", subnet, err)
	}
	cfg.Name, cfg.StateDir, cfg.Loss, cfg.Subnet = *name, *stateDir, float64(loss), p
	if _, err := cfg.Normalize(); err != nil {
		return usageErr("%v", err)
	}
	ctx, stop := clusterContext()
	defer stop()
	c, err := cluster.Up(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "goccl cluster up: %v\n", err)
		return 1
	}
	if *hostfile != "" {
		if err := os.WriteFile(*hostfile, []byte(c.Hostfile(*slots)), 0o644); err != nil {
			fmt.Fprintf(stderr, "goccl cluster up: hostfile: %v (the cluster is up; 'goccl cluster down --name %s' removes it)\n", err, c.Name)
			return 1
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(c)
		return 0
	}
	fmt.Fprintf(stdout, "cluster %s: %d hosts on %s, switch namespace %s (bridge %s)\n", c.Name, len(c.Hosts), c.Config.Subnet, c.Switch, c.Bridge)
	fmt.Fprintf(stdout, "links: %s\n\n", c.Config.Shaping())
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if len(c.Bridges) > 1 {
		fmt.Fprintln(tw, "HOST\tRAIL\tIFACE\tADDRESS\tSWITCH")
		for _, h := range c.Hosts {
			for _, l := range h.Links {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", h.Name, l.Rail, l.Iface, l.Addr, l.Bridge)
			}
		}
	} else {
		fmt.Fprintln(tw, "HOST\tADDRESS")
		for _, h := range c.Hosts {
			fmt.Fprintf(tw, "%s\t%s\n", h.Name, h.Addr)
		}
	}
	tw.Flush()
	fmt.Fprint(stdout, "\nhostfile (OpenMPI):\n", c.Hostfile(*slots))
	if *hostfile != "" {
		fmt.Fprintf(stdout, "(written to %s)\n", *hostfile)
	}
	h0 := c.Hosts[0].Name
	rsh := rshAgent()
	fmt.Fprintf(stdout, "\nrun a command: ip netns exec %s COMMAND   (on %s; any host's name works)\n", h0, h0)
	fmt.Fprintf(stdout, "remote shell:  %s   (ssh-like: HOST COMMAND...)\n", rsh)
	fmt.Fprintf(stdout, "goccl run:     goccl run -H %s:N,... --rsh %q PROG\n", h0, rsh)
	fmt.Fprintf(stdout, "mpirun:        %s %s mpirun --hostfile HOSTFILE --mca plm_rsh_agent %q ...\n", rsh, h0, rsh)
	fmt.Fprintf(stdout, "state file:    %s\n", c.StateFile)
	fmt.Fprintf(stdout, "tear down:     goccl cluster down --name %s%s\n", c.Name, stateDirFlag(c.Config.StateDir))
	return 0
}

// stateDirFlag is " --state-dir DIR" unless DIR is the default.
func stateDirFlag(dir string) string {
	if dir == cluster.DefaultStateDir {
		return ""
	}
	return " --state-dir " + dir
}

func runClusterDown(args []string, stdout, stderr io.Writer) int {
	fs, name, stateDir := clusterFlags("down", stderr)
	if status, exit := clusterArgs(fs, args, stderr); exit {
		return status
	}
	ctx, stop := clusterContext()
	defer stop()
	rm, err := cluster.Down(ctx, *name, *stateDir)
	if rm != nil {
		if len(rm.Killed) > 0 {
			fmt.Fprintf(stdout, "killed %d processes still running in the hosts\n", len(rm.Killed))
		}
		for _, ns := range rm.Namespaces {
			fmt.Fprintf(stdout, "removed namespace %s\n", ns)
		}
		if rm.StateFile != "" {
			fmt.Fprintf(stdout, "removed state file %s\n", rm.StateFile)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "goccl cluster down: %v\n", err)
		return 1
	}
	if len(rm.Namespaces) == 0 && rm.StateFile == "" {
		fmt.Fprintf(stdout, "cluster %s: nothing to remove\n", *name)
	}
	return 0
}

func runClusterStatus(args []string, stdout, stderr io.Writer) int {
	fs, name, stateDir := clusterFlags("status", stderr)
	asJSON := fs.Bool("json", false, "print the cluster and its counters as JSON")
	if status, exit := clusterArgs(fs, args, stderr); exit {
		return status
	}
	ctx, stop := clusterContext()
	defer stop()
	c, err := cluster.Load(*name, *stateDir)
	if err != nil {
		fmt.Fprintf(stderr, "goccl cluster status: %v\n", err)
		if errors.Is(err, cluster.ErrNotFound) {
			if left, _ := cluster.Leftovers(ctx, *name); len(left) > 0 {
				fmt.Fprintf(stderr, "namespaces of it are left: %s; 'goccl cluster down --name %s' removes them\n", strings.Join(left, ", "), *name)
			}
		}
		return 1
	}
	stats, err := c.Stats(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "goccl cluster status: %v\n", err)
		return 1
	}
	status := 0
	if !c.Complete {
		status = 1
	}
	for _, s := range stats {
		if !s.Present {
			status = 1
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(struct {
			*cluster.Cluster
			Stats []cluster.HostStats `json:"stats"`
		}{c, stats})
		return status
	}
	state := "up"
	if !c.Complete {
		state = "INCOMPLETE ('up' failed or is running; 'goccl cluster down' removes it)"
	}
	fmt.Fprintf(stdout, "cluster %s: %s, %d hosts on %s, switch namespace %s, since %s\n", c.Name, state, len(c.Hosts), c.Config.Subnet, c.Switch, c.Created.Local().Format("2006-01-02 15:04:05"))
	fmt.Fprintf(stdout, "links: %s\n\n", c.Config.Shaping())
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tIFACE\tADDRESS\tEGRESS QDISC\tSENT BYTES\tPACKETS\tDROPS\tLOSS DROPS\tTO-HOST QDISC\tSENT BYTES\tDROPS\tECN MARKS\tLINK TX BYTES\tLINK RX BYTES")
	for _, s := range stats {
		if !s.Present {
			fmt.Fprintf(tw, "%s\t%s\t%s\tMISSING\n", s.Host.Name, s.Host.Iface, s.Host.Addr)
			continue
		}
		for _, l := range s.Links {
			eg, port := rootOf(l.Egress), rootOf(l.Port)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\n", s.Host.Name, l.Link.Iface, l.Link.Addr,
				kinds(l.Egress), eg.Bytes, eg.Packets, eg.Drops, l.LossDrops, kinds(l.Port), port.Bytes, port.Drops, l.ECNMarks, l.TxBytes, l.RxBytes)
		}
	}
	tw.Flush()
	fmt.Fprintln(stdout, "\nEGRESS: the host's link (host to switch); LOSS DROPS: what --loss dropped of it; TO-HOST: its switch port (switch to host); ECN MARKS: packets to the host marked CE.")
	return status
}

// rootOf is the root qdisc among qs (they come root first), or zero.
func rootOf(qs []cluster.QdiscStats) cluster.QdiscStats {
	if len(qs) > 0 && qs[0].Root {
		return qs[0]
	}
	return cluster.QdiscStats{}
}

// kinds is "netem+tbf": the qdiscs' kinds, root first; "-" for none.
func kinds(qs []cluster.QdiscStats) string {
	var k []string
	for _, q := range qs {
		k = append(k, q.Kind)
	}
	if len(k) == 0 {
		return "-"
	}
	return strings.Join(k, "+")
}

// rshAgent is the remote shell command for mpirun: this program's path
// (mpirun runs inside a host, where PATH may not lead to it) and "cluster
// rsh".
func rshAgent() string {
	exe, err := os.Executable()
	if err != nil || strings.ContainsAny(exe, " \t") {
		exe = "goccl"
	}
	return exe + " cluster rsh"
}

// runClusterRsh runs COMMAND... on HOST as ssh runs a remote command: its
// words joined by spaces and given to sh -c, in HOST's namespace (ip netns
// exec). It replaces this process with ip, so the exit status, signals and
// standard streams are the command's.
func runClusterRsh(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		fmt.Fprint(stdout, "usage: goccl cluster rsh HOST COMMAND...\n\nRuns COMMAND on the cluster host HOST as ssh would: ip netns exec HOST sh -c 'COMMAND...',\nwith HOST as the host name (in a UTS namespace of its own, where unshare is installed).\n")
		return 0
	}
	if len(args) < 2 {
		fmt.Fprint(stderr, "usage: goccl cluster rsh HOST COMMAND...\n")
		return 2
	}
	host := args[0]
	if strings.HasPrefix(host, "-") || strings.ContainsAny(host, "/ ") {
		fmt.Fprintf(stderr, "goccl cluster rsh: %q is not a host (a namespace name: NAME-hI)\n", host)
		return 2
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		fmt.Fprintf(stderr, "goccl cluster rsh: %v: %v\n", cluster.ErrNoIP, err)
		return 1
	}
	argv := []string{"ip", "netns", "exec", host, "sh", "-c", strings.Join(args[1:], " ")}
	if unshare, err := exec.LookPath("unshare"); err == nil {
		// The host's own host name, in a UTS namespace of its own: programs
		// that key shared state by host name (OpenMPI's shared-memory
		// segments) must not collide across the hosts, which share /dev/shm.
		argv = []string{"ip", "netns", "exec", host, unshare, "--uts", "--", "sh", "-c", `hostname "$0" && exec sh -c "$1"`, host, strings.Join(args[1:], " ")}
	}
	err = syscall.Exec(ip, argv, os.Environ())
	fmt.Fprintf(stderr, "goccl cluster rsh: %v\n", err)
	return 1
}
