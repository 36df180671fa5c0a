package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/goccl/goccl/internal/cluster"
	"github.com/goccl/goccl/sim"
	"github.com/goccl/goccl/topo"
)

// simCalibrateConfig is what goccl sim calibrate measures.
type simCalibrateConfig struct {
	cluster, stateDir string // the namespace cluster for the inter-host link; "": none
	maxBytes          string // goccl perf's -e
	iters             string // goccl perf's -n
}

func runSimCalibrate(name string, args []string, stdout, stderr io.Writer) int {
	fs := simFlags(name, stderr)
	var cfg simCalibrateConfig
	fs.StringVar(&cfg.cluster, "cluster", "", "also measure between the first two hosts of this namespace cluster (goccl cluster up --name)")
	fs.StringVar(&cfg.stateDir, "state-dir", cluster.DefaultStateDir, "directory of the cluster's state file")
	fs.StringVarP(&cfg.maxBytes, "maxbytes", "e", "16M", "the largest size measured (goccl perf -e)")
	fs.StringVarP(&cfg.iters, "iters", "n", "20", "iterations per size (goccl perf -n)")
	out := fs.StringP("output", "o", "", "write the calibration JSON to this file (default: standard output)")
	if status, exit := simParse(fs, args, stderr); exit {
		return status
	}
	cal, err := simCalibrate(context.Background(), cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
		defer f.Close()
		w = f
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cal); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// simCalibrate measures send/recv between two ranks of this host and, with
// a cluster, between its first two hosts, with goccl run and goccl perf
// (this binary), and fits each link.
func simCalibrate(ctx context.Context, cfg simCalibrateConfig, log io.Writer) (*sim.Calibration, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cal := &sim.Calibration{Source: "goccl sim calibrate (goccl perf sendrecv, 2 ranks) on " + simMachine()}
	perf := []string{exe, "perf", "sendrecv", "-b", "8", "-e", cfg.maxBytes, "-f", "4", "-n", cfg.iters, "-w", "5"}
	fmt.Fprintf(log, "calibrate: two ranks on this host\n")
	if cal.Intra, err = simFitRun(ctx, append([]string{exe, "run", "-np", "2"}, perf...)); err != nil {
		return nil, fmt.Errorf("between two ranks of this host: %w", err)
	}
	if cfg.cluster == "" {
		return cal, nil
	}
	c, err := cluster.Load(cfg.cluster, cfg.stateDir)
	if err != nil {
		return nil, err
	}
	if len(c.Hosts) < 2 {
		return nil, fmt.Errorf("cluster %s has %d host(s): want 2 or more", c.Name, len(c.Hosts))
	}
	fmt.Fprintf(log, "calibrate: %s and %s (cluster %s, %s)\n", c.Hosts[0].Name, c.Hosts[1].Name, c.Name, c.Config.Rate)
	hosts := c.Hosts[0].Name + ":1," + c.Hosts[1].Name + ":1"
	run := []string{exe, "run", "-H", hosts, "--rsh", exe + " cluster rsh"}
	if cal.Inter, err = simFitRun(ctx, append(run, perf...)); err != nil {
		return nil, fmt.Errorf("between hosts %s: %w", hosts, err)
	}
	if r := float64(c.Config.Rate); r > 0 {
		cal.Inter.RateGbps = r / 1e9
		cal.Inter.Efficiency = cal.Inter.GBps / (r / 8 / 1e9)
	}
	return cal, nil
}

// simFitRun runs one goccl perf job writing JSON (-J) and fits its
// out-of-place times.
func simFitRun(ctx context.Context, argv []string) (*sim.LinkFit, error) {
	dir, err := os.MkdirTemp("", "goccl-calibrate-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "perf.json")
	cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], "-J", file)...)
	var outBuf strings.Builder
	cmd.Stdout, cmd.Stderr = &outBuf, &outBuf
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, outBuf.String())
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tests, err := readTests(f)
	if err != nil {
		return nil, fmt.Errorf("goccl perf's JSON: %w", err)
	}
	var pts []sim.Point
	for _, r := range tests[0].Rows {
		pts = append(pts, sim.Point{Bytes: r.Size, TimeUs: r.OutOfPlace.TimeUS})
	}
	return sim.FitHockney(pts)
}

// simMachine names this machine: its CPU model and logical CPUs.
func simMachine() string {
	cpu := "unknown CPU"
	if h, err := topo.Detect(topo.Options{}); err == nil && h.CPU.ModelName != "" {
		cpu = h.CPU.ModelName
	}
	return fmt.Sprintf("%s, %d logical CPUs", cpu, runtime.NumCPU())
}
