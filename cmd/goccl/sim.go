package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/sim"
)

var simUsage = `usage: goccl sim collective [-t PRESET | --topo FILE.json|FILE.xml] [--nodes N] [--ranks N]
                            [-c COLL] [-b MIN] [-e MAX] [-f FACTOR | -i STEP] [-a ALGO] [--json]
                            [--level closed|flow] [--routing ecmp|spread]
       goccl sim validate --csv FILE [--calibration FILE] [--json]
       goccl sim presets [--json]
       goccl sim calibrate [--cluster NAME] [-e MAX] [-n ITERS] [-o FILE]
       goccl sim compare TOPOLOGY_A TOPOLOGY_B [-c COLL] [-b MIN] [-e MAX] [-f FACTOR] [--ranks N]
       goccl sim step [-t PRESET | --topo FILE] [--nodes N] --workload "SPEC" [--json] [--trace FILE]
       goccl sim serve [-t PRESET | --topo FILE] --model "SPEC" [--prompt N] [--output N] [--batch N]
                       [--tp N] [--disaggregated] [--json]
       goccl sim plan [-t PRESET]... [--nodes N,...] --model "SPEC" --gbs N [--objective time|gpu-seconds]
       goccl sim replay (--chakra 'DIR/et.*.et' | --goccl-trace 'trace-*.json') [-t PRESET | --topo FILE]
                        [--nodes N] [--spmd] [--json] [--trace OUT.json] [--write-chakra DIR]

sim predicts what collectives, training steps and inference cost on a
cluster described as data (a preset, a topology JSON file or a topology
dump), with the models of package sim; it runs nothing but calibrate.
docs/sim.md has the topology schema, the presets, the models and their
validation.

collective  prints an nccl-tests table of predicted times and bandwidths
            over the sizes -b to -e (goccl plot overlays it on measured
            tables); -a forces an algorithm, else the runtime's own
            choice runs; the algorithm and protocol per size follow the
            table. Algorithms: ` + strings.Join(sim.Algos, ", ") + `
            --level flow runs max-min fair flows on the topology's graph
            (its network shape, ECMP collisions) instead of the closed form
validate    predicts each row of a CSV of published measurements (columns
            ` + strings.Join(sim.PublishedColumns, ",") + `; the
            repository's is sim/testdata/published.csv) and prints predicted,
            published and the error per row, then the median and 95th
            percentile of |error|; rows it cannot model are listed with why
presets     lists the presets and their parameters
compare     predicts one collective on two topologies (each a preset or a
            file, with an optional @NODES: nvl72 dgx-b200@9) on the same
            ranks and prints them side by side with A's time over B's
calibrate   measures send/recv between two ranks of this host and, with
            --cluster, between two hosts of a namespace cluster (goccl run
            and goccl perf, this binary), fits latency and rate to each
            (t = α + bytes/rate) and prints the calibration JSON that
            validate --calibration applies to goccl clusters' rows
step        predicts one training iteration of a model and its split
            (TP × PP × CP × DP, EP, ZeRO, recomputation, schedule) and
            prints its breakdown (goccl sim step -h)
serve       predicts an inference: prefill, decode, TTFT, TPOT and the
            KV-cache transfer of a disaggregated deployment (-h)
plan        searches the splits of a training job on one or more
            topologies and ranks those that fit by step time or cost (-h)
replay      replays per-rank operation graphs on the topology: Chakra
            execution traces (one per rank), or goccl's own trace of a run
            (` + config.TraceFile.Name + `: its collectives re-predicted, the gaps
            between them kept as measured compute); prints each rank's end,
            compute, communication and exposed communication, and the
            critical path; --trace writes a Perfetto trace of the replay,
            --write-chakra the goccl trace as Chakra ET files; --spmd gives
            every rank the median over ranks of each compute gap

Exit status: 0 done (validate: whatever the errors), 1 a prediction failed,
2 usage errors and bad input (validate: a file it cannot read, or a row that
names an unknown system, workload, metric or algorithm).
`

func init() {
	register(&command{
		name:    "sim",
		summary: "predict collectives on a described cluster; validate the model against published measurements",
		usage:   "goccl sim collective|validate|presets [flags]",
		run:     runSim,
	})
}

// simSub is one goccl sim subcommand; a new one is one more row of simSubs.
type simSub struct {
	name string
	run  func(name string, args []string, stdout, stderr io.Writer) int
}

var simSubs = []simSub{
	{name: "collective", run: runSimCollective},
	{name: "validate", run: runSimValidate},
	{name: "presets", run: runSimPresets},
	{name: "calibrate", run: runSimCalibrate},
	{name: "compare", run: runSimCompare},
	{name: "replay", run: runSimReplay},
	{name: "step", run: runSimStep},
	{name: "serve", run: runSimServe},
	{name: "plan", run: runSimPlan},
}

func runSim(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, simUsage)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, simUsage)
		return 0
	}
	names := make([]string, len(simSubs))
	for i, s := range simSubs {
		if s.name == args[0] {
			return s.run("goccl sim "+s.name, args[1:], stdout, stderr)
		}
		names[i] = s.name
	}
	fmt.Fprintf(stderr, "goccl sim: unknown subcommand %q%s (this build has: %s)\n", args[0], didYouMean(args[0], names), strings.Join(names, ", "))
	return 2
}

// simFlags is newFlags with the usage of goccl sim and the flags below it.
func simFlags(name string, stderr io.Writer) *cliFlags {
	return newFlags(name, stderr, func(fs *cliFlags) {
		fmt.Fprintf(fs.Output(), "%s\nFlags of %s:\n", simUsage, name)
		fs.PrintDefaults()
	})
}

// simParse parses a subcommand's flags and refuses positional arguments;
// exit says the command ends there, with status.
func simParse(fs *cliFlags, args []string, stderr io.Writer) (status int, exit bool) {
	if status, exit := fs.parseOrExit(args); exit {
		return status, true
	}
	if !simNoArgs(fs, stderr) {
		return 2, true
	}
	return 0, false
}

// simUsageErr returns a function that prints "NAME: message" (and, with
// hint, where the usage is) to stderr and returns exit status 2.
func simUsageErr(stderr io.Writer, name string, hint bool) func(format string, a ...any) int {
	return func(format string, a ...any) int {
		fmt.Fprintf(stderr, "%s: %s\n", name, fmt.Sprintf(format, a...))
		if hint {
			fmt.Fprintf(stderr, "Run '%s -h' for usage.\n", name)
		}
		return 2
	}
}

// simNoArgs complains about positional arguments: the subcommands take flags only.
func simNoArgs(fs *cliFlags, stderr io.Writer) bool {
	if fs.NArg() == 0 {
		return true
	}
	fmt.Fprintf(stderr, "%s: unexpected argument %q\nRun '%s -h' for usage.\n", fs.cmd, fs.Arg(0), fs.cmd)
	return false
}

// simCollectiveConfig is what goccl sim collective predicts.
type simCollectiveConfig struct {
	args   []string // the command line, for the JSON's "args"
	topo   *sim.Topology
	coll   *coll // the nccl-tests collective: its layout and columns
	algo   string
	ranks  int
	mapBy  string     // "slot" (node 0 first) or "node" (round-robin): sim.Collective.MapBy
	sizes  perfConfig // minBytes, maxBytes, stepFactor, stepBytes: its sizes()
	asJSON bool
	flow   simFlowConfig // --level, --routing
}

func runSimCollective(name string, args []string, stdout, stderr io.Writer) int {
	fs := simFlags(name, stderr)
	preset := fs.StringP("preset", "t", "", "a preset (goccl sim presets lists them; default dgx-h100 unless --topo)")
	topoFile := fs.String("topo", "", "a topology file: JSON (docs/sim.md has the schema) or a topology dump (NCCL_TOPO_DUMP_FILE, "+config.TopoDumpFile.Name+" XML)")
	nodes := fs.Int("nodes", 0, "scale the topology to N nodes (0: as it is)")
	ranks := fs.Int("ranks", 0, "ranks taking part (0: every GPU of the topology)")
	collName := fs.StringP("collective", "c", "all_reduce", "all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall or sendrecv")
	cfg := simCollectiveConfig{args: append(strings.Fields(name), args...),
		sizes: perfConfig{minBytes: 8, maxBytes: 8 << 30, stepFactor: 2, stepBytes: 1 << 20}}
	fs.VarP(sizeValue{&cfg.sizes.minBytes}, "minbytes", "b", "smallest size (K, M, G, T: 1024-based)")
	fs.VarP(sizeValue{&cfg.sizes.maxBytes}, "maxbytes", "e", "largest size")
	fs.Int64VarP(&cfg.sizes.stepFactor, "stepfactor", "f", 2, "multiply the size by this (> 1), or with 0 or 1 add -i")
	fs.VarP(sizeValue{&cfg.sizes.stepBytes}, "stepbytes", "i", "add this to the size when -f is 0 or 1")
	fs.StringVarP(&cfg.algo, "algo", "a", "", "force an algorithm (default: the runtime's choice)")
	fs.StringVar(&cfg.mapBy, "map-by", "slot", "rank placement: slot (fill node 0, then node 1, ...) or node (round-robin over the nodes, as mpirun --map-by node); only goccl's runtime depends on it")
	fs.BoolVar(&cfg.asJSON, "json", false, "print nccl-tests' JSON (as goccl perf -J writes it) with a \"sim\" section")
	fs.StringVar(&cfg.flow.level, "level", "closed", "closed (the closed form) or flow (max-min fair flows on the topology graph)")
	fs.StringVar(&cfg.flow.routing, "routing", "ecmp", "--level flow: ecmp (hashed paths, collisions) or spread (least-loaded paths)")
	if status, exit := simParse(fs, args, stderr); exit {
		return status
	}
	usageErr := simUsageErr(stderr, name, false)
	var err error
	if cfg.topo, err = simTopology(*preset, *topoFile, *nodes); err != nil {
		return usageErr("%v", err)
	}
	if cfg.coll, err = lookupColl(*collName); err != nil {
		return usageErr("-c: %v", err)
	}
	switch {
	case cfg.mapBy != "slot" && cfg.mapBy != "node":
		return usageErr("--map-by %q: want slot or node", cfg.mapBy)
	case cfg.mapBy == "node" && cfg.flow.level == "flow":
		return usageErr("--map-by node: the flow level places the ranks node by node only")
	}
	switch s := &cfg.sizes; {
	case s.minBytes > s.maxBytes:
		return usageErr("-b %d is larger than -e %d", s.minBytes, s.maxBytes)
	case s.minBytes == 0 && s.stepFactor > 1:
		return usageErr("-b 0 with -f %d never grows: start at -b 8, or step by bytes with -f 1 -i SIZE", s.stepFactor)
	case s.stepFactor <= 1 && s.stepBytes <= 0:
		return usageErr("-f must be > 1, or -i > 0 when -f is 0 or 1")
	case simSizeCount(s) > simMaxSizes:
		return usageErr("%d sizes from -b %d to -e %d: at most %d", simSizeCount(s), s.minBytes, s.maxBytes, simMaxSizes)
	}
	if err := cfg.flow.check(); err != nil {
		return usageErr("%v", err)
	}
	if cfg.algo != "" && !slices.Contains(sim.Algos, cfg.algo) {
		return usageErr("-a %q: want one of %s", cfg.algo, strings.Join(sim.Algos, ", "))
	}
	cfg.ranks = *ranks
	switch all := cfg.topo.GPUs(); {
	case cfg.ranks == 0:
		cfg.ranks = all
	case cfg.ranks < 0 || cfg.ranks > all:
		return usageErr("--ranks %d: the topology %s has %d GPUs", cfg.ranks, cfg.topo.Name, all)
	}
	rows, err := simPredict(&cfg)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	if cfg.asJSON {
		err = writeSimJSON(stdout, &cfg, rows)
	} else {
		err = writeSimTable(stdout, &cfg, rows)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// simMaxSizes bounds the rows of one table.
const simMaxSizes = 100000

// simSizeCount is len(s.sizes()) without listing them (-i 1 up to 8G would
// be billions).
func simSizeCount(s *perfConfig) int64 {
	if s.stepFactor <= 1 {
		return (s.maxBytes-s.minBytes)/s.stepBytes + 1
	}
	n := int64(0)
	for v := s.minBytes; v <= s.maxBytes; v *= s.stepFactor {
		n++
		if v > s.maxBytes/s.stepFactor {
			break // the next one passes maxBytes (or overflows)
		}
	}
	return n
}

// simTopology is the topology of the flags: --topo's file, else the
// preset (dgx-h100 when neither is given), scaled to nodes when > 0.
func simTopology(preset, file string, nodes int) (*sim.Topology, error) {
	var t *sim.Topology
	var err error
	switch {
	case preset != "" && file != "":
		return nil, errors.New("-t (--preset) and --topo: give one")
	case file != "":
		var f *os.File
		if f, err = os.Open(file); err != nil {
			return nil, fmt.Errorf("--topo: %w", err)
		}
		defer f.Close()
		if t, err = simLoadTopology(f, file); err != nil {
			return nil, fmt.Errorf("--topo %s: %w", file, err)
		}
	default:
		if preset == "" {
			preset = "dgx-h100"
		}
		if t, err = sim.Preset(preset); err != nil {
			return nil, fmt.Errorf("-t: %w", err)
		}
	}
	if nodes < 0 {
		return nil, fmt.Errorf("--nodes %d: want 1 or more (0: the topology's %d)", nodes, t.Nodes)
	}
	if nodes > 0 {
		t = t.WithNodes(nodes)
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("--nodes %d: %w", nodes, err)
		}
	}
	return t, nil
}

// simLoadTopology reads a topology file: JSON (docs/sim.md's schema), or
// XML in the shape of NCCL's topology dump (NCCL_TOPO_DUMP_FILE) or goccl's
// (GOCCL_TOPO_DUMP_FILE), named after the file.
func simLoadTopology(f *os.File, path string) (*sim.Topology, error) {
	br := bufio.NewReader(f)
	for {
		b, err := br.Peek(1)
		if err != nil || !unicode.IsSpace(rune(b[0])) {
			break
		}
		br.ReadByte()
	}
	if b, err := br.Peek(1); err == nil && b[0] == '<' {
		return sim.ImportXML(br, strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)))
	}
	return sim.Load(br)
}

// simRow is one predicted size.
type simRow struct {
	Size  int64      `json:"size"` // nccl-tests' size column
	Count int64      `json:"count"`
	Res   sim.Result `json:"-"`
}

// simElt is the element size of the table's type, float.
const simElt = 4

// simPredict predicts every size. The size and count columns follow
// nccl-tests' layout (the per-rank block of all_gather, reduce_scatter and
// alltoall is rounded down to 16 bytes), and the size column is what the
// model is asked for (sim.Collective's Bytes).
func simPredict(cfg *simCollectiveConfig) ([]simRow, error) {
	var rows []simRow
	for _, size := range cfg.sizes.sizes() {
		lay := cfg.coll.layoutFor(int(size/simElt), simElt, cfg.ranks)
		printed := lay.printedSize(simElt)
		res, err := cfg.flow.predict(cfg.topo, sim.Collective{Kind: cfg.coll.name, Bytes: printed, Algo: cfg.algo, Ranks: cfg.ranks, MapBy: cfg.mapBy})
		if err != nil {
			return nil, fmt.Errorf("%s of %d bytes on %d ranks of %s: %w", cfg.coll.name, printed, cfg.ranks, cfg.topo.Name, err)
		}
		rows = append(rows, simRow{Size: printed, Count: int64(lay.paramCount), Res: res})
	}
	return rows, nil
}

// simColumns are the type, redop and root columns of the table.
func simColumns(c *coll) (typ, op string, root int) {
	op, root = "none", -1
	if c.reduces || c.opColumn {
		op = "sum"
	}
	if c.rooted {
		root = 0
	}
	return "float", op, root
}

// simThreadsGPUs splits ranks into the "# nThread T nGpus G" of the
// configuration line: T*G = ranks with G below the 65536 that readers of
// nccl-tests output accept.
func simThreadsGPUs(ranks int) (t, g int) {
	t, g = 1, ranks
	for g >= 1<<16 && g%2 == 0 {
		t, g = t*2, g/2
	}
	return t, g
}

// writeSimTable prints the nccl-tests table: the banner and the
// configuration line that name the collective and the rank count, a note
// on the topology, the rows (out-of-place and in-place alike, #wrong
// N/A), the footer, then the algorithm and protocol per size.
func writeSimTable(w io.Writer, cfg *simCollectiveConfig, rows []simRow) error {
	var b strings.Builder
	line := func(s string) { b.WriteString(s + "\n") }
	s := &cfg.sizes
	t, g := simThreadsGPUs(cfg.ranks)
	config := formatConfigLine(s.minBytes, s.maxBytes, s.stepFactor, s.stepBytes, 0, 0, 0, 0)
	config = strings.Replace(config, "nThread 1 nGpus 1 ", fmt.Sprintf("nThread %d nGpus %d ", t, g), 1)
	line("# Collective test starting: " + cfg.coll.name + "_perf")
	line(config)
	line("#")
	line("# goccl sim: predicted by " + cfg.flow.describe() + ", not measured")
	line("# topology: " + simDescribe(cfg.topo))
	line(fmt.Sprintf("# ranks %d mapped by %s, algorithm %s", cfg.ranks, cfg.mapBy, orDefault(cfg.algo, "the runtime's choice")))
	line("#")
	for _, l := range columnHeader() {
		line(l)
	}
	typ, op, root := simColumns(cfg.coll)
	sum := 0.0
	for _, r := range rows {
		half := formatResult(r.Res.TimeUs, r.Res.AlgBW, r.Res.BusBW, -1)
		line(formatRowParams(r.Size, r.Count, typ, op, root) + half + half)
		sum += 2 * r.Res.BusBW
	}
	for _, l := range footer(0, sum/float64(2*max(len(rows), 1))) {
		line(l)
	}
	line("# algorithm and protocol by size:")
	for _, l := range simAlgoRanges(rows) {
		line("#   " + l)
	}
	for _, l := range cfg.flow.notes() {
		line("# " + l)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// simDescribe is the topology in one line.
func simDescribe(t *sim.Topology) string {
	d := fmt.Sprintf("%s, %d node(s) × %d GPUs, %s %g GB/s per GPU", t.Name, t.Nodes, t.GPUsPerNode, t.Intra.Kind, t.Intra.GBps)
	if t.Intra.NVLS {
		d += " (NVLS)"
	}
	if t.NICsPerNode > 0 {
		d += fmt.Sprintf(", %d × %g Gbit/s NICs", t.NICsPerNode, t.NICGbps)
	}
	if t.Network.Kind != "" {
		d += ", " + t.Network.Kind
		if t.Network.SHARP {
			d += " (SHARP)"
		}
	}
	return d + ", runtime " + t.Runtime
}

// simAlgoRanges groups consecutive sizes with the same algorithm and
// protocol: "8 B – 64 KiB: nvls/LL".
func simAlgoRanges(rows []simRow) []string {
	var out []string
	for i := 0; i < len(rows); {
		j := i
		for j+1 < len(rows) && rows[j+1].Res.Algo == rows[i].Res.Algo && rows[j+1].Res.Proto == rows[i].Res.Proto {
			j++
		}
		span := simSize(rows[i].Size)
		if j > i {
			span += " – " + simSize(rows[j].Size)
		}
		what := rows[i].Res.Algo
		if rows[i].Res.Proto != "" {
			what += "/" + rows[i].Res.Proto
		}
		out = append(out, span+": "+what)
		i = j + 1
	}
	return out
}

// simSize is a size as "512 B", "64 KiB", "8 GiB" (exact multiples only).
func simSize(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// simJSONReport is goccl perf -J's JSON (so goccl plot reads it) with the
// prediction's own section.
type simJSONReport struct {
	jsonReport
	Sim simJSONSection `json:"sim"`
}

type simJSONSection struct {
	Topology *sim.Topology `json:"topology"`
	Ranks    int           `json:"ranks"`
	Algo     string        `json:"algo_requested"` // "": the runtime's choice
	Level    string        `json:"level"`          // closed or flow
	Rows     []simJSONRow  `json:"rows"`
}

type simJSONRow struct {
	Size   int64   `json:"size"`
	Algo   string  `json:"algo"`
	Proto  string  `json:"proto"`
	TimeUs float64 `json:"time_us"`
	AlgBW  float64 `json:"alg_bw"`
	BusBW  float64 `json:"bus_bw"`
}

func writeSimJSON(w io.Writer, cfg *simCollectiveConfig, rows []simRow) error {
	s := &cfg.sizes
	t, g := simThreadsGPUs(cfg.ranks)
	typ, op, root := simColumns(cfg.coll)
	rep := simJSONReport{
		jsonReport: jsonReport{
			Version: jsonFileVersion, Args: cfg.args, Env: []string{},
			Config:  jsonConfig{NThreads: t, NGpus: g, MinimumBytes: s.minBytes, MaximumBytes: s.maxBytes},
			Results: []jsonRow{}, Errors: []string{},
			Goccl:    jsonGocclEx{Version: versionString(), Collective: cfg.coll.name, NRanks: cfg.ranks, Op: op, Datatype: typ, Root: root, IgnoredFlags: []string{}},
			AvgBusBW: jsonAvgBW{Okay: "unchecked"},
		},
		Sim: simJSONSection{Topology: cfg.topo, Ranks: cfg.ranks, Algo: cfg.algo, Level: cfg.flow.level, Rows: []simJSONRow{}},
	}
	if s.stepFactor > 1 {
		rep.Config.StepFactor = &s.stepFactor
	} else {
		rep.Config.StepBytes = &s.stepBytes
	}
	sum := 0.0
	for _, r := range rows {
		us := r.Res.TimeUs
		res := jsonResult{Time: &us, AlgBW: r.Res.AlgBW, BusBW: r.Res.BusBW}
		rep.Results = append(rep.Results, jsonRow{Size: r.Size, Count: r.Count, Type: typ, Redop: op, Root: rootColumn(root),
			OutOfPlace: res, InPlace: res, ExperimentName: "goccl sim"})
		rep.Sim.Rows = append(rep.Sim.Rows, simJSONRow{Size: r.Size, Algo: r.Res.Algo, Proto: r.Res.Proto, TimeUs: us, AlgBW: r.Res.AlgBW, BusBW: r.Res.BusBW})
		sum += r.Res.BusBW
	}
	if len(rows) > 0 {
		rep.AvgBusBW.Bandwidth = sum / float64(len(rows))
	}
	rep.OutOfBounds.Okay = true
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(&rep)
}

func runSimPresets(name string, args []string, stdout, stderr io.Writer) int {
	fs := simFlags(name, stderr)
	asJSON := fs.Bool("json", false, "print the presets as topology JSON (docs/sim.md has the schema)")
	if status, exit := simParse(fs, args, stderr); exit {
		return status
	}
	var topos []*sim.Topology
	for _, p := range sim.Presets() {
		t, err := sim.Preset(p)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
		topos = append(topos, t)
	}
	var err error
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(topos)
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "preset\tnodes\tGPUs/node\tgpu\tintra\tGB/s\tµs\tNICs\tGbit/s\tnetwork\tµs\toversub\truntime")
		for _, t := range topos {
			intra := t.Intra.Kind
			if t.Intra.NVLS {
				intra += "+nvls"
			}
			net := orDefault(t.Network.Kind, "-")
			if t.Network.SHARP {
				net += "+sharp"
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%g\t%g\t%d\t%g\t%s\t%g\t%g\t%s\n", t.Name, t.Nodes, t.GPUsPerNode, orDefault(t.GPU.Name, "-"),
				intra, t.Intra.GBps, t.Intra.LatencyUs, t.NICsPerNode, t.NICGbps, net, t.Network.LatencyUs, t.Network.Oversubscription, t.Runtime)
		}
		err = tw.Flush()
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// simValidateInput is what --csv - reads; tests replace it.
var simValidateInput io.Reader = os.Stdin

func runSimValidate(name string, args []string, stdout, stderr io.Writer) int {
	fs := simFlags(name, stderr)
	csvFile := fs.String("csv", "", "the CSV to validate against (- for standard input); the repository's is sim/testdata/published.csv")
	asJSON := fs.Bool("json", false, "print the rows and the summary as JSON")
	calFile := fs.String("calibration", "", "a calibration (goccl sim calibrate -o FILE) for the rows of goccl's namespace clusters")
	if status, exit := simParse(fs, args, stderr); exit {
		return status
	}
	var cal *sim.Calibration
	if *calFile != "" {
		var err error
		if cal, err = simLoadCalibration(*calFile); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 2
		}
	}
	if *csvFile == "" {
		fmt.Fprintf(stderr, "%s: --csv FILE is required (the repository's published measurements: --csv sim/testdata/published.csv)\n", name)
		return 2
	}
	in := simValidateInput
	if *csvFile != "-" {
		f, err := os.Open(*csvFile)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 2
		}
		defer f.Close()
		in = f
	}
	rows, err := sim.ReadPublished(in)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s: %v\n", name, *csvFile, err)
		return 2
	}
	rep := sim.ValidatePublished(rows, cal)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = writeValidation(stdout, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	if rep.Summary.Errors > 0 {
		fmt.Fprintf(stderr, "%s: %d row(s) could not be read as a known system, workload, metric or algorithm (status error)\n", name, rep.Summary.Errors)
		return 2
	}
	return 0
}

// writeValidation prints the rows and the summary as text.
func writeValidation(w io.Writer, rep *sim.ValidationReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "line\tsystem\tgpus\tworkload\tbytes\tmetric\tpublished\tpredicted\terror\tstatus\tmodel")
	for _, r := range rep.Rows {
		pred, errPct, model := "-", "-", r.Reason
		if r.Status == sim.StatusOK {
			pred, errPct = fmt.Sprintf("%.4g", r.Predicted), fmt.Sprintf("%+.1f %%", 100*r.Error)
			model = r.ModelAlgo
			if r.ModelProto != "" {
				model += "/" + r.ModelProto
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%g\t%s\t%s\t%s\t%s\n", r.Line, r.System, r.GPUs, simShorten(r.Workload, 32),
			orDefault(r.Bytes, "-"), r.Metric, r.Value, pred, errPct, r.Status, model)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := rep.Summary
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d rows: %d ok, %d not modelled, %d errors\n", s.Rows, s.OK, s.NotModelled, s.Errors)
	for _, c := range []struct {
		label string
		st    sim.ErrorStats
	}{{"collectives ≥ 1 MiB", s.Large}, {"collectives < 1 MiB", s.Small}, {"training steps", s.Steps}, {"transfers", s.Transfers}} {
		if c.st.Rows == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s: %d rows", c.label, c.st.Rows)
		switch {
		case c.st.Goal == 0:
			fmt.Fprintf(&b, ", median |error| %.1f %%, p95 %.1f %%", 100*c.st.MedianAbs, 100*c.st.P95Abs)
		default:
			verdict := "met"
			if !c.st.Met {
				verdict = "missed"
			}
			fmt.Fprintf(&b, ", median |error| %.1f %%, p95 %.1f %% (goal: median ≤ %.0f %%, %s)",
				100*c.st.MedianAbs, 100*c.st.P95Abs, 100*c.st.Goal, verdict)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// simLoadCalibration reads a calibration file; errors name the flag.
func simLoadCalibration(path string) (*sim.Calibration, error) {
	f, err := os.Open(path)
	if err == nil {
		defer f.Close()
		var cal *sim.Calibration
		if cal, err = sim.LoadCalibration(f); err == nil {
			return cal, nil
		}
	}
	return nil, fmt.Errorf("--calibration %s: %w", path, err)
}

// simApplyCalibration is t with the calibration file's figures.
func simApplyCalibration(t *sim.Topology, path string) (*sim.Topology, error) {
	cal, err := simLoadCalibration(path)
	if err != nil {
		return nil, err
	}
	if t, err = t.Apply(cal); err != nil {
		return nil, fmt.Errorf("--calibration %s: %w", path, err)
	}
	return t, nil
}

// simShorten cuts s to n runes, marking the cut with "…".
func simShorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
