package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/goccl/goccl/internal/collnet"
	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/transport/roce"
)

func init() {
	register(&command{
		name:    "aggd",
		summary: "an in-network aggregation node (the SHARP switch's role) for " + config.CollNetEnable.Name + "=1",
		usage:   "goccl aggd [--listen ADDR] [--parent ROOT] [--fanin N] [--advertise ADDR] [--roce [--ib-timeout N]] [-v]",
		run:     runAggd,
	})
}

var aggdHelp = `usage: goccl aggd [--listen ADDR] [--parent ROOT] [--fanin N] [--advertise ADDR] [--roce [--ib-timeout N]] [-v]

Runs an aggregation node: ranks of a job with ` + config.CollNetEnable.Name + `=1 send it their
AllReduce buffers as streams of 256 KiB chunks; it reduces each chunk as
soon as every child's copy has arrived and sends the result back to every
child (a root) or passes it up to its root (a leaf, --parent). Each rank
sends and receives its buffer once instead of 2(n-1)/n times (NVIDIA
SHARP's idea, NCCL's CollNet). Memory is bounded (4 chunks per child).

Ranks find the root through ` + config.CollNetAggd.Name + `=HOST:PORT (read by rank 0,
published in the store). A job of more ranks than the root's fan-in is
split over the leaves that registered with it, in contiguous blocks.
Killing a node fails the operations in progress at every rank, naming it.

  --listen ADDR     TCP address to listen on (default 0.0.0.0:7400; port 0: any)
  --parent ROOT     register as a leaf of the root at ROOT
  --fanin N         the most children one job may attach here (default 8)
  --advertise ADDR  the address the root sends ranks to (default: the
                    listener's; a leaf listening on 0.0.0.0 advertises the
                    address it reaches its root from)
  --roce            open a soft RoCE v2 device on the node's IP address
                    (--advertise's, else --listen's): children and parent
                    that have one too (ranks with ` + config.Net.Name + `=roce) move
                    their streams onto RC queue pairs after the hello; the
                    others stay on TCP
  --ib-timeout N    the queue pairs' ACK timeout exponent (4.096 µs × 2^N,
                    as ` + config.IBTimeout.Name + `; default 16: 268 ms)
  -v                log jobs and failures to standard error

It prints "goccl aggd: listening on ADDR ..." once ready and runs until
SIGINT or SIGTERM.
`

func runAggd(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("goccl aggd", stderr, func(fs *cliFlags) { fmt.Fprint(fs.Output(), aggdHelp) })
	listen := fs.String("listen", "0.0.0.0:7400", "")
	parent := fs.String("parent", "", "")
	fanin := fs.Int("fanin", 8, "")
	advertise := fs.String("advertise", "", "")
	useRoCE := fs.Bool("roce", false, "")
	ibTimeout := fs.Int("ib-timeout", 16, "")
	verbose := fs.BoolP("verbose", "v", false, "")
	if status, exit := fs.parseOrExit(args); exit {
		return status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "goccl aggd: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *ibTimeout < 1 || *ibTimeout > 31 {
		fmt.Fprintf(stderr, "goccl aggd: --ib-timeout %d: want 1 to 31\n", *ibTimeout)
		return 2
	}
	if *fanin < 1 || *fanin > 1024 {
		fmt.Fprintf(stderr, "goccl aggd: --fanin %d: want 1 to 1024\n", *fanin)
		return 2
	}
	var dom *roce.Domain
	if *useRoCE {
		addr := *listen
		if *advertise != "" {
			addr = *advertise
		}
		host, _, err := net.SplitHostPort(addr)
		ip := net.ParseIP(host)
		if err != nil || ip == nil || ip.IsUnspecified() {
			fmt.Fprintf(stderr, "goccl aggd: --roce needs a specific IP address in --advertise or --listen (have %q)\n", addr)
			return 2
		}
		dev, err := rdma.Open(net.JoinHostPort(host, "0"))
		if err != nil {
			fmt.Fprintf(stderr, "goccl aggd: --roce: %v\n", err)
			return 1
		}
		defer dev.Close()
		dom = roce.NewDomain(dev)
		dom.Timeout, dom.RetryCnt = uint8(*ibTimeout), 7
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "goccl aggd: %v\n", err)
		return 1
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	node := collnet.NewNode(ln, collnet.Config{Fanin: *fanin, Parent: *parent, Advertise: *advertise, RoCE: dom, Log: log})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	role := "root"
	if *parent != "" {
		role = "leaf of " + *parent
		if err := node.Register(ctx); err != nil {
			fmt.Fprintf(stderr, "goccl aggd: %v\n", err)
			return 1
		}
	}
	via := ""
	if dom != nil {
		via = ", RoCE v2 device " + rdma.GIDString(dom.Device().GID(), dom.Device().Addr().Port())
	}
	fmt.Fprintf(stdout, "goccl aggd: listening on %s (%s, fan-in %d%s)\n", ln.Addr(), role, *fanin, via)
	if err := node.Serve(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "goccl aggd: %v\n", err)
		return 1
	}
	return 0
}
