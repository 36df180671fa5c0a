package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/ras"
)

func init() {
	register(&command{
		name:    "status",
		summary: "query a running job's health (NCCL RAS protocol: goccl's " + config.RASAddr.Name + " or NCCL's RAS port)",
		usage:   "goccl status [--addr HOST:PORT] [--json] [--verbose] [--monitor[=GROUPS]] [--timeout SECS]",
		run:     runStatus,
	})
}

var statusHelp = `usage: goccl status [--addr HOST:PORT] [--json] [--verbose] [--monitor[=GROUPS]] [--timeout SECS]

Asks a running job how it is, in NCCL RAS's client protocol: rank 0 of a
goccl job started with ` + config.RASAddr.Name + `=HOST:PORT probes every rank and answers
with the job summary, the communicators (ranks, hosts, sizes, status,
errors) and, beyond NCCL's RAS, the operation each rank is in (sequence
number, kind, how long), the ranks that hold the others up (dead, not
answering, or idle before the operation the others are in), arrival skew,
and with --verbose every rank's links (bytes each way, closed or open).
A rank that is stopped or dead shows as such: every wait is bounded.

It speaks the same protocol as NCCL's ncclras, so it also queries an NCCL
job's RAS port (NCCL_RAS_ADDR, default localhost:28028).

  --addr HOST:PORT   where the job serves (default: ` + config.RASAddr.Name + `, else ` + ras.DefaultAddr + `)
  --json             JSON instead of text (SET FORMAT json)
  -v, --verbose      every rank's details, not only the outliers' (VERBOSE STATUS)
  -m, --monitor[=GROUPS]
                     stream events until interrupted or the job ends
                     (MONITOR): GROUPS is lifecycle (default: ranks that
                     die, communicators that fail), trace (ranks that stop
                     or resume answering), all, or lifecycle,trace
  -t, --timeout SECS how long the server waits for each rank (TIMEOUT;
                     default 5; 0: the server's longest, 60 for goccl)
`

func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("goccl status", stderr, func(fs *cliFlags) { fmt.Fprint(fs.Output(), statusHelp) })
	addr := fs.String("addr", "", "")
	asJSON := fs.Bool("json", false, "")
	verbose := fs.BoolP("verbose", "v", false, "")
	monitor := fs.StringP("monitor", "m", "", "")
	fs.Lookup("monitor").NoOptDefVal = "lifecycle"
	timeout := fs.IntP("timeout", "t", -1, "")
	if status, exit := fs.parseOrExit(args); exit {
		return status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "goccl status: unexpected arguments %q\n", fs.Args())
		return 2
	}
	a := cmp.Or(*addr, config.RASAddr.Get(), ras.DefaultAddr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := queryStatus(ctx, a, *asJSON, *verbose, *monitor, *timeout, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "goccl status: %v\n", err)
		return 1
	}
	return 0
}

// queryStatus runs one session with the RAS server at addr.
func queryStatus(ctx context.Context, addr string, asJSON, verbose bool, monitor string, timeout int, stdout, stderr io.Writer) error {
	c, err := ras.Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if c.ServerProtocol != ras.ProtocolVersion {
		fmt.Fprintf(stderr, "goccl status: RAS protocol version mismatch (server %d, client %d); going on\n", c.ServerProtocol, ras.ProtocolVersion)
	}
	if timeout >= 0 {
		if err := c.SetTimeout(time.Duration(timeout) * time.Second); err != nil {
			return err
		}
	}
	if asJSON {
		if err := c.SetFormat("json"); err != nil {
			return err
		}
	}
	if monitor != "" {
		fmt.Fprintln(stderr, "RAS Monitor Mode - watching for peer changes (Ctrl+C to exit)...")
		return c.Monitor(ctx, stdout, monitor)
	}
	return c.Status(stdout, verbose)
}
