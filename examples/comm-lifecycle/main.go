// Command comm-lifecycle measures what creating and destroying a
// communicator every training step costs, against one communicator reused
// for every step. Each step does the same small work: one AllReduce(Sum) of
// -n float32 (and, in a second set of rows, of -small float32), checked.
//
//	go run ./cmd/goccl run -np 4 ./examples/comm-lifecycle
//	go run ./cmd/goccl run -np 2 ./examples/comm-lifecycle -naive
//
// The modes:
//
//   - init+close: every step calls goccl.Init and, at its end, Close. The
//     ranks meet through one rendezvous store that lives for the whole job
//     (rank 0 serves it on the launcher's store address), each step's Init
//     under a key prefix of its own (rendezvous.PrefixStore), so the cost
//     is that of building the links (TCP endpoints and connections, shared-
//     memory rings, the Init barrier) and tearing them down.
//   - split+close: every step makes a new communicator with Split from one
//     that lives for the whole job, and closes it at the end of the step
//     (Split is the library's way to get fresh links from a live
//     communicator: its own store prefix and job id).
//   - reused: one communicator, made before the timed steps, for all of them.
//
// -naive runs the loop a naive job would write instead: goccl.Init(ctx)
// from the environment and Close, every step, with nothing else (README.md:
// why that once failed, and what makes it work).
//
// Rank 0 prints, per mode and size, the mean time per step (its own clock)
// and the part of it spent opening (Init or Split), closing, and in
// AllReduce.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/examples/internal/exmain"
	"github.com/goccl/goccl/rendezvous"
)

// config holds the command-line settings.
type config struct {
	count, small int // float32 elements of the AllReduce of each step
	steps        int
	modes        []string
	naive        bool
	timeout      time.Duration
}

// allModes are the modes in the order they run.
var allModes = []string{"init+close", "split+close", "reused"}

func parseFlags(args []string) (config, error) {
	var cfg config
	var modes string
	fs := flag.NewFlagSet("comm-lifecycle", flag.ContinueOnError)
	fs.IntVar(&cfg.count, "n", 1<<20, "float32 elements of each step's AllReduce (the large size)")
	fs.IntVar(&cfg.small, "small", 256, "float32 elements of the small size (0: skip it)")
	fs.IntVar(&cfg.steps, "steps", 20, "timed steps per mode and size")
	fs.StringVar(&modes, "modes", strings.Join(allModes, ","), "comma-separated modes: init+close, split+close, reused")
	fs.BoolVar(&cfg.naive, "naive", false, "run only the naive loop, goccl.Init(ctx) from the environment and Close every step (see README.md)")
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "deadline of the whole run")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case cfg.count < 1:
		return cfg, fmt.Errorf("-n must be >= 1, have %d", cfg.count)
	case cfg.small < 0:
		return cfg, fmt.Errorf("-small must be >= 0, have %d", cfg.small)
	case cfg.steps < 1:
		return cfg, fmt.Errorf("-steps must be >= 1, have %d", cfg.steps)
	case cfg.timeout <= 0:
		return cfg, fmt.Errorf("-timeout must be > 0, have %v", cfg.timeout)
	}
	for _, m := range strings.Split(modes, ",") {
		m = strings.TrimSpace(m)
		ok := false
		for _, k := range allModes {
			ok = ok || m == k
		}
		if !ok {
			return cfg, fmt.Errorf("-modes: unknown mode %q (want some of %s)", m, strings.Join(allModes, ", "))
		}
		cfg.modes = append(cfg.modes, m)
	}
	return cfg, nil
}

// row is one line of the table.
type row struct {
	mode  string
	count int
	st    stats
}

// measure runs every mode of cfg, for each size, on this rank: rank of size
// ranks that meet through store (every rank passes a store of the same job).
// The communicators of a mode are made with Init under a prefix of store of
// their own, so the modes and steps never see each other's keys. It returns
// the rows of this rank, in the order of the modes.
func measure(ctx context.Context, store rendezvous.Store, rank, size int, cfg config) (rows []row, err error) {
	initN := 0 // Inits so far, for their store prefixes
	initOpts := func() []goccl.Option {
		initN++
		return []goccl.Option{goccl.WithRank(rank), goccl.WithWorldSize(size),
			goccl.WithStore(rendezvous.PrefixStore(store, fmt.Sprintf("comm-lifecycle/init/%d/", initN)))}
	}
	// base serves split+close, and the barriers between the runs.
	base, err := goccl.Init(ctx, initOpts()...)
	if err != nil {
		return nil, fmt.Errorf("goccl.Init: %w", err)
	}
	defer func() {
		if cerr := base.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the communicator: %w", cerr)
		}
	}()
	counts := []int{cfg.count}
	if cfg.small > 0 {
		counts = append(counts, cfg.small)
	}
	for _, count := range counts {
		for _, mode := range cfg.modes {
			var open opener
			perStep := true
			switch mode {
			case "init+close":
				open = func(ctx context.Context, _ int) (*goccl.Comm, error) { return goccl.Init(ctx, initOpts()...) }
			case "split+close":
				open = func(ctx context.Context, _ int) (*goccl.Comm, error) { return base.Split(ctx, 0, rank) }
			case "reused":
				open = func(ctx context.Context, _ int) (*goccl.Comm, error) { return goccl.Init(ctx, initOpts()...) }
				perStep = false
			}
			// Start each run together, after the previous one has closed.
			if err := base.Barrier(ctx); err != nil {
				return rows, err
			}
			st, err := runSteps(ctx, open, perStep, count, cfg.steps)
			if err != nil {
				return rows, fmt.Errorf("%s, %d floats: %w", mode, count, err)
			}
			rows = append(rows, row{mode: mode, count: count, st: st})
		}
	}
	// Every rank is done with the store before rank 0 may close it.
	return rows, base.Barrier(ctx)
}

// printTable writes the rows.
func printTable(w io.Writer, rows []row) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d.Nanoseconds())/1e6) }
	fmt.Fprintf(w, "%-12s %10s %6s %12s %12s %12s %12s\n", "mode", "bytes", "steps", "ms/step", "open ms", "close ms", "allreduce ms")
	for _, r := range rows {
		s := r.st
		open, cl := "-", "-"
		if r.mode != "reused" {
			open, cl = ms(s.perStep(s.open)), ms(s.perStep(s.close))
		}
		fmt.Fprintf(w, "%-12s %10d %6d %12s %12s %12s %12s\n", r.mode, 4*r.count, s.steps,
			ms(s.perStep(s.total)), open, cl, ms(s.perStep(s.allReduce)))
	}
}

// naive runs the loop a naive job would write: goccl.Init from the
// environment and Close, every step.
func naive(ctx context.Context, cfg config, out io.Writer) (rank int, err error) {
	rank = -1
	open := func(ctx context.Context, _ int) (*goccl.Comm, error) {
		c, err := goccl.Init(ctx)
		if err == nil {
			rank = c.Rank()
		}
		return c, err
	}
	st, err := runSteps(ctx, open, true, cfg.count, cfg.steps)
	if err != nil {
		return rank, fmt.Errorf("naive Init+Close per step: %w (after %d good steps)", err, st.steps)
	}
	if st.rank == 0 {
		printTable(out, []row{{mode: "naive", count: cfg.count, st: st}})
	}
	return st.rank, nil
}

func run(ctx context.Context, args []string, stdout io.Writer) (rank int, err error) {
	rank = -1 // not known before the environment is read
	cfg, err := parseFlags(args)
	if err != nil {
		return rank, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	if cfg.naive {
		return naive(ctx, cfg, stdout)
	}
	env, ok, err := rendezvous.FromEnv()
	if err != nil {
		return rank, err
	}
	if !ok {
		env = rendezvous.Env{Rank: 0, WorldSize: 1}
	}
	rank = env.Rank
	// One store for the whole job: rank 0 serves it on the launcher's
	// address (with no address, under mpirun: the address file).
	store, err := rendezvous.Connect(ctx, env, "")
	if err != nil {
		return rank, fmt.Errorf("rendezvous store: %w", err)
	}
	defer func() {
		if cerr := store.Close(); cerr != nil && err == nil && !errors.Is(cerr, context.Canceled) {
			err = fmt.Errorf("closing the rendezvous store: %w", cerr)
		}
	}()
	rows, err := measure(ctx, store, env.Rank, env.WorldSize, cfg)
	if err != nil {
		return rank, err
	}
	if rank == 0 {
		fmt.Fprintf(stdout, "%d ranks; AllReduce(Sum) float32 per step; times are rank 0's means per step\n", env.WorldSize)
		printTable(stdout, rows)
	}
	return rank, nil
}

func main() { exmain.Main("comm-lifecycle", run) }
