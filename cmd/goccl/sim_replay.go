package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/trace"
	"github.com/goccl/goccl/sim"
	"github.com/goccl/goccl/sim/chakra"
)

// simReplayConfig is what goccl sim replay reads and writes.
type simReplayConfig struct {
	chakraGlob, gocclGlob string
	preset, topoFile      string
	nodes                 int
	asJSON                bool
	traceOut, chakraDir   string
	calibration           string
	spmd                  bool
	opt                   sim.ReplayOptions
}

func runSimReplay(name string, args []string, stdout, stderr io.Writer) int {
	fs := simFlags(name, stderr)
	var cfg simReplayConfig
	fs.StringVar(&cfg.chakraGlob, "chakra", "", "Chakra execution traces, one per rank: a glob ('DIR/et.*.et'); the rank is the file name's last number")
	fs.StringVar(&cfg.gocclGlob, "goccl-trace", "", "goccl's trace files of one run ("+config.TraceFile.Name+"), one per rank: a glob ('trace-*.json')")
	fs.StringVarP(&cfg.preset, "preset", "t", "", "a preset (default dgx-h100 unless --topo)")
	fs.StringVar(&cfg.topoFile, "topo", "", "a topology file (JSON or a topology dump XML)")
	fs.IntVar(&cfg.nodes, "nodes", 0, "scale the topology to N nodes (0: as it is, or the nodes the ranks need)")
	fs.StringVar(&cfg.calibration, "calibration", "", "a calibration (goccl sim calibrate -o FILE) for a goccl cluster's topology")
	fs.BoolVar(&cfg.spmd, "spmd", false, "the ranks run one program: give each the median over ranks of every compute gap (a trace with more ranks than cores)")
	fs.BoolVar(&cfg.asJSON, "json", false, "print the result as JSON")
	fs.StringVar(&cfg.traceOut, "trace", "", "write the replay as Chrome trace-event JSON (Perfetto) to this file")
	fs.StringVar(&cfg.chakraDir, "write-chakra", "", "with --goccl-trace: write the ops as Chakra ET files DIR/et.RANK.et")
	fs.Float64Var(&cfg.opt.ComputeEff, "compute-eff", 1, "achieved fraction of the GPU's peak FLOP/s for compute given as FLOPs")
	fs.Float64Var(&cfg.opt.MemEff, "mem-eff", 1, "achieved fraction of the GPU's peak HBM bandwidth for compute given as bytes")
	if status, exit := simParse(fs, args, stderr); exit {
		return status
	}
	usageErr := func(err error) int {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	ranks, err := simReplayInput(&cfg)
	if err == nil && cfg.spmd {
		err = sim.SameCompute(ranks)
	}
	if err != nil {
		return usageErr(err)
	}
	topo, err := simTopology(cfg.preset, cfg.topoFile, cfg.nodes)
	if err != nil {
		return usageErr(err)
	}
	if cfg.nodes == 0 && len(ranks) > topo.GPUs() {
		topo = topo.WithNodes((len(ranks) + topo.GPUsPerNode - 1) / topo.GPUsPerNode)
	}
	if cfg.calibration != "" {
		if topo, err = simApplyCalibration(topo, cfg.calibration); err != nil {
			return usageErr(err)
		}
	}
	res, err := sim.Replay(topo, ranks, cfg.opt)
	if err == nil {
		err = simReplayOutput(stdout, &cfg, topo, res)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// simReplayInput reads the ranks' ops from the Chakra or goccl traces, and
// writes the Chakra files --write-chakra asks for.
func simReplayInput(cfg *simReplayConfig) ([][]sim.Op, error) {
	switch {
	case (cfg.chakraGlob == "") == (cfg.gocclGlob == ""):
		return nil, errors.New("give one of --chakra 'DIR/et.*.et' and --goccl-trace 'trace-*.json'")
	case cfg.chakraDir != "" && cfg.gocclGlob == "":
		return nil, errors.New("--write-chakra converts a goccl trace: it needs --goccl-trace")
	case cfg.chakraGlob != "":
		return simReadChakra(cfg.chakraGlob)
	}
	files, err := simGlob("--goccl-trace", cfg.gocclGlob)
	if err != nil {
		return nil, err
	}
	events := make([][]json.RawMessage, len(files))
	for i, f := range files {
		if events[i], err = trace.ReadFile(f); err != nil {
			return nil, fmt.Errorf("--goccl-trace: %w", err)
		}
	}
	ranks, err := sim.GocclTraceOps(events)
	if err != nil {
		return nil, fmt.Errorf("--goccl-trace %s: %w", cfg.gocclGlob, err)
	}
	if cfg.chakraDir != "" {
		if err := simWriteChakra(cfg.chakraDir, ranks); err != nil {
			return nil, fmt.Errorf("--write-chakra: %w", err)
		}
	}
	return ranks, nil
}

// simGlob is the files of a glob, sorted; none is an error.
func simGlob(flag, pattern string) ([]string, error) {
	files, err := filepath.Glob(pattern)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", flag, pattern, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s %q: no such files", flag, pattern)
	}
	return files, nil
}

var simLastNumber = regexp.MustCompile(`(\d+)\D*$`)

// simReadChakra reads one Chakra file per rank, the rank being the last
// number of the file's name (ASTRA-sim's PREFIX.RANK.et); ranks must run
// 0 to n-1.
func simReadChakra(pattern string) ([][]sim.Op, error) {
	files, err := simGlob("--chakra", pattern)
	if err != nil {
		return nil, err
	}
	ranks := make([][]sim.Op, len(files))
	seen := make([]string, len(files))
	for _, f := range files {
		m := simLastNumber.FindStringSubmatch(filepath.Base(f))
		r := -1
		if m != nil {
			r, _ = strconv.Atoi(m[1])
		}
		switch {
		case r < 0 || r >= len(files):
			return nil, fmt.Errorf("--chakra %s: want a rank 0 to %d as the file name's last number (PREFIX.RANK.et)", f, len(files)-1)
		case seen[r] != "":
			return nil, fmt.Errorf("--chakra: %s and %s are both rank %d", seen[r], f, r)
		}
		seen[r] = f
		if ranks[r], err = simChakraFile(f); err != nil {
			return nil, fmt.Errorf("--chakra %s: %w", f, err)
		}
	}
	return ranks, nil
}

func simChakraFile(path string) ([]sim.Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := chakra.Read(f)
	if err != nil {
		return nil, err
	}
	return chakra.Ops(t)
}

func simWriteChakra(dir string, ranks [][]sim.Op) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for r, ops := range ranks {
		t, err := chakra.FromOps(r, ops)
		if err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("et.%d.et", r)))
		if err != nil {
			return err
		}
		err = chakra.Write(f, t)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// simReplayOutput prints the result (a table or JSON) and writes the
// Chrome trace.
func simReplayOutput(w io.Writer, cfg *simReplayConfig, topo *sim.Topology, res *sim.ReplayResult) error {
	if cfg.traceOut != "" {
		f, err := os.Create(cfg.traceOut)
		if err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
		err = res.WriteChromeTrace(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
	}
	if cfg.asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# goccl sim replay: predicted by the closed-form model, not measured\n# topology: %s\n", simDescribe(topo))
	fmt.Fprintf(&b, "# %d ranks, %d ops\n\ntotal %.3f µs\n\n", len(res.Ranks), len(res.Spans), res.TotalUs)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank\tend µs\tcompute µs\thost µs\tcomm µs\texposed comm µs\t")
	for _, r := range res.Ranks {
		fmt.Fprintf(tw, "%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n", r.Rank, r.EndUs, r.ComputeUs, r.HostUs, r.CommUs, r.ExposedCommUs)
	}
	tw.Flush()
	b.WriteString("\ncritical path (rank, op, kind, start µs – end µs):\n")
	path := res.CriticalPath
	if len(path) > 40 {
		fmt.Fprintf(&b, "  ... %d earlier ops\n", len(path)-40)
		path = path[len(path)-40:]
	}
	for _, s := range slices.Clip(path) {
		what := string(s.Kind)
		if s.Algo != "" {
			what += " " + s.Algo
		}
		fmt.Fprintf(&b, "  %d\t%d %s\t%s\t%.3f – %.3f\n", s.Rank, s.ID, simShorten(s.Name, 40), what, s.StartUs, s.EndUs)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
