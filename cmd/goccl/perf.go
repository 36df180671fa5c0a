package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/launch"
	"github.com/goccl/goccl/internal/progress"
)

func init() {
	register(&command{
		name:    "perf",
		summary: "benchmark a collective, with nccl-tests' flags and output",
		usage:   "goccl perf COLL [flags]",
		run:     runPerf,
	})
}

var perfHelp = `usage: goccl perf COLL [flags]

Benchmarks one collective like nccl-tests' COLL_perf and prints the same
table. COLL is all_reduce, all_gather, reduce_scatter, broadcast, reduce,
alltoall or sendrecv (a "_perf" suffix is accepted).

Ranks: with -np N (and no ` + config.Rank.Name + ` in the environment), goccl perf starts N
local ranks of itself with the same arguments (as goccl run would) and shows
rank 0's report. Otherwise it is one rank of the world its environment
describes (goccl run, torchrun, mpirun, srun), or a world of 1. Only rank 0
prints the report; when its stderr is a terminal (` + config.Progress.Name + `), it also
shows a progress bar over the report's rows there, erased before each row.

For each size, the collective runs -w warm-up iterations (at the largest and
smallest size, once per type/op/root), then -n timed iterations out of place
and -n in place, each of -m operations issued as -z says. time is the mean
time per operation in microseconds, then combined across ranks as -a says
(default: the mean over ranks); algbw is the bytes moved per rank over time
(1 GB = 1e9 B), busbw is algbw times the nccl-tests factor: 2(n-1)/n for
all_reduce, (n-1)/n for all_gather, reduce_scatter and alltoall, 1 for
broadcast, reduce and sendrecv.

With -c 1 each size is also run once more, out of place and in place, on
inputs of small integers per (rank, element), and every element of the
result is compared with a value the checker computes on its own; #wrong is
the number of wrong elements summed over ranks ("N/A" for in-place sendrecv
and with -c 0). Writes outside the operation's output (guard bytes after
every buffer, the send buffer, a non-root rank's reduce buffer) are counted
too. "Out of bounds values" is the number of tests with wrong elements plus
the number of elements written out of bounds; when it is not 0, goccl perf
exits with status 1.

Flags, as nccl-tests takes them (-b 8, -b8, --minbytes 8, --minbytes=8);
the long names also take one dash, as in Go programs (-minbytes 8):
  -b, --minbytes SIZE     smallest size in bytes, K, M, G or T for 1024-based
                          multiples (default 8); 0 needs -f 1
  -e, --maxbytes SIZE     largest size (default 32M); every rank allocates two
                          buffers of this size (three for alltoall), which
                          must fit in the host's available memory
  -f, --stepfactor N      multiply the size by N each step (default 2)
  -i, --stepbytes SIZE    add SIZE each step when -f is 0 or 1 (default 1M)
  -n, --iters N           timed iterations per size (default 20)
  -m, --agg_iters N       operations per iteration, issued back to back
                          without waiting in between (default 1); time is
                          per operation
  -w, --warmup_iters N    warm-up iterations (default 5)
  -N, --run_cycles N      run the sweep N times, printing each; 0 = forever
                          (default 1)
  -c, --check N           check the results N times, 0 to skip (default 1)
  -o, --op OP             sum, prod, min, max, avg or all (default sum)
  -d, --datatype TYPE     int8, uint8, int32, uint32, int64, uint64, half,
                          bfloat16, float, double or all (default float)
  -r, --root N            root of broadcast and reduce, -1 for every rank (default 0)
  -z, --blocking N        0: issue every operation of a size non-blocking
                          (the I forms) and wait once at the end (default);
                          1: run each operation blocking, then a barrier;
                          2: run each operation blocking, no barrier;
                          3: issue the -m operations of an iteration, wait
                          for them, then a barrier not counted in the time
  -T, --timeout SEC       operation timeout in seconds; 0 keeps the
                          communicator's (` + config.Timeout.Name + `, default 5m)
  -C, --report_cputime N  1: report the time to issue the operations (column
                          "cputime"), not to complete them (default 0)
  -u, --unalign N         misalign the send and receive buffers by N elements
                          (default 0)
  -R, --local_register N  1 or 2: register the send and receive buffers with
                          the communicator (goccl.Register, as nccl-tests
                          calls ncclCommRegister): RoCE links then send from
                          them without the staging copy (default 0)
  -a, --average N         time across ranks: 0 rank 0, 1 mean, 2 min, 3 max (default 1)
  -J, --output_file FILE  also write the results as JSON to FILE, in
                          nccl-tests' JSON layout (rank 0); --json is the same
      --plot FILE         also draw the busbw curve into FILE (.png, .svg,
                          .pdf; rank 0; goccl plot overlays several runs)
      --np N              start N local ranks of this command (also -np N)
      --map-by node       renumber the ranks round-robin over their hosts
                          (a communicator split with keys: mpirun --map-by
                          node's placement from a --map-by slot launch) to
                          measure what a placement costs; slot (the
                          default) keeps the launch's numbering
  -t, --nthreads N        threads per rank: only 1 is supported
  -g, --ngpus N           GPUs (devices) per thread: only 1 is supported

Accepted for nccl-tests command lines, with no effect here (the report's
header names those given): -G/--cudagraph, -y/--stream_null, -x/--cta_policy, -D/--device_implementation,
-V/--device_cta_count and -M/--memory are about GPUs; -p/--parallel_init is
about several threads per process; -S/--report_timestamps,
-I/--per_iter_timing and -K/--per_iter_skip are not implemented by goccl perf.
`

// perfConfig is the parsed command line.
type perfConfig struct {
	plotFile   string // -plot: rank 0 draws the table's busbw curve into this image
	mapBy      string // --map-by: slot (as launched) or node (round-robin over the hosts)
	coll       *coll
	minBytes   int64
	maxBytes   int64
	stepFactor int64
	stepBytes  int64
	iters      int
	warmup     int
	check      int
	op         string // "sum" ... or "all"
	dtype      string // "float" ... or "all"
	root       int
	average    int
	jsonFile   string
	np         int
	threads    int
	gpus       int
	aggIters   int // -m: operations per timed iteration
	blocking   int // -z: 0 non-blocking, 1 blocking + barrier, 2 blocking, 3 wait + barrier per iteration
	timeout    int // -T: operation timeout in seconds, 0 for the communicator's
	runCycles  int // -N: sweeps, 0 for ever
	cputime    int // -C: 1 reports the time to issue
	unalign    int // -u: elements by which the buffers are misaligned
	register   int // -R: register the buffers with the communicator
	ignored    []*ignoredFlag
}

// maxUnalign bounds -u (each buffer grows by 8 bytes per element of -u).
const maxUnalign = 1 << 20

// ignoredFlag is an nccl-tests flag that goccl perf accepts and ignores.
type ignoredFlag struct {
	short, long string
	def, min    int
	max         int  // 0: no maximum
	noEffect    bool // about GPUs or threads: no effect on CPU (else: not implemented)
	v           int
}

// ignoredFlags lists them, in nccl-tests' usage order, with nccl-tests'
// defaults and ranges.
func ignoredFlags() []*ignoredFlag {
	return []*ignoredFlag{
		{short: "p", long: "parallel_init", max: 1, noEffect: true},
		{short: "y", long: "stream_null", max: 1, noEffect: true},
		{short: "G", long: "cudagraph", noEffect: true},
		{short: "S", long: "report_timestamps", max: 1},
		{short: "x", long: "cta_policy", def: -1, min: -1, max: 2, noEffect: true},
		{short: "D", long: "device_implementation", noEffect: true},
		{short: "V", long: "device_cta_count", def: 16, min: 1, max: 128, noEffect: true},
		{short: "M", long: "memory", max: 1, noEffect: true},
		{short: "I", long: "per_iter_timing", max: 1},
		{short: "K", long: "per_iter_skip"},
	}
}

// sizeValue parses nccl-tests sizes: a number with an optional K, M, G or T.
type sizeValue struct{ v *int64 }

func (s sizeValue) String() string {
	if s.v == nil {
		return ""
	}
	return strconv.FormatInt(*s.v, 10)
}

func (s sizeValue) Type() string { return "size" }

func (s sizeValue) Set(str string) error {
	v, err := parseSize(str)
	if err != nil {
		return err
	}
	*s.v = v
	return nil
}

// parseSize reads nccl-tests' size syntax, with T added (config.ParseSize:
// 1024-based; a trailing "B" as in "1KB" is ignored, as nccl-tests ignores it).
var parseSize = config.ParseSize

// parsePerfArgs parses "COLL [flags]" (COLL may also come after the flags).
func parsePerfArgs(args []string, stderr io.Writer) (*perfConfig, error) {
	cfg := &perfConfig{
		minBytes: 8, maxBytes: 32 << 20, stepFactor: 2, stepBytes: 1 << 20,
		iters: 20, warmup: 5, check: 1, op: "sum", dtype: "float", average: avgMean,
		threads: 1, gpus: 1, aggIters: 1, runCycles: 1, ignored: ignoredFlags(),
	}
	fs := newFlags("goccl perf", stderr, func(fs *cliFlags) { fmt.Fprint(fs.Output(), perfHelp) })
	// nccl-tests' flags: the letter is the shorthand of the long name.
	fs.VarP(sizeValue{&cfg.minBytes}, "minbytes", "b", "")
	fs.VarP(sizeValue{&cfg.maxBytes}, "maxbytes", "e", "")
	fs.VarP(sizeValue{&cfg.stepBytes}, "stepbytes", "i", "")
	fs.Int64VarP(&cfg.stepFactor, "stepfactor", "f", cfg.stepFactor, "")
	fs.IntVarP(&cfg.iters, "iters", "n", cfg.iters, "")
	fs.IntVarP(&cfg.warmup, "warmup_iters", "w", cfg.warmup, "")
	fs.IntVarP(&cfg.check, "check", "c", cfg.check, "")
	fs.StringVarP(&cfg.op, "op", "o", cfg.op, "")
	fs.StringVarP(&cfg.dtype, "datatype", "d", cfg.dtype, "")
	fs.IntVarP(&cfg.root, "root", "r", cfg.root, "")
	fs.IntVarP(&cfg.average, "average", "a", cfg.average, "")
	fs.StringVarP(&cfg.jsonFile, "output_file", "J", "", "")
	fs.IntVarP(&cfg.aggIters, "agg_iters", "m", cfg.aggIters, "")
	fs.IntVarP(&cfg.blocking, "blocking", "z", 0, "")
	fs.IntVarP(&cfg.timeout, "timeout", "T", 0, "")
	fs.IntVarP(&cfg.runCycles, "run_cycles", "N", cfg.runCycles, "")
	fs.IntVarP(&cfg.cputime, "report_cputime", "C", 0, "")
	fs.IntVarP(&cfg.unalign, "unalign", "u", 0, "")
	fs.IntVarP(&cfg.register, "local_register", "R", 0, "")
	for _, f := range cfg.ignored {
		f.v = f.def
		fs.IntVarP(&f.v, f.long, f.short, f.def, "")
	}
	fs.IntVarP(&cfg.threads, "nthreads", "t", 1, "")
	fs.IntVarP(&cfg.gpus, "ngpus", "g", 1, "")
	// goccl's own.
	fs.StringVar(&cfg.jsonFile, "json", "", "") // = --output_file
	fs.StringVar(&cfg.plotFile, "plot", "", "")
	fs.IntVar(&cfg.np, "np", 0, "")
	fs.StringVar(&cfg.mapBy, "map-by", "slot", "")
	if err := fs.parse(args); err != nil {
		return nil, err
	}
	// COLL comes before, between or after the flags.
	var collName string
	rest := fs.Args()
	if len(rest) > 0 {
		collName, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", rest)
	}
	if collName == "" {
		return nil, errors.New("no collective given")
	}
	if cfg.mapBy != "slot" && cfg.mapBy != "node" {
		return nil, fmt.Errorf("--map-by %q: want slot or node", cfg.mapBy)
	}
	c, err := lookupColl(collName)
	if err != nil {
		return nil, err
	}
	cfg.coll = c
	switch {
	case cfg.minBytes > cfg.maxBytes:
		return nil, fmt.Errorf("invalid sizes for 'minbytes' and 'maxbytes': %d > %d", cfg.minBytes, cfg.maxBytes)
	case cfg.minBytes == 0 && cfg.maxBytes > 0 && cfg.stepFactor > 1:
		// nccl-tests repeats size 0 forever here (0 times the factor is 0).
		return nil, fmt.Errorf("-b 0 with -f %d never grows past 0 bytes: start at -b 8 (or the size of one element), or step by bytes with -f 1 -i SIZE", cfg.stepFactor)
	case cfg.stepFactor <= 1 && cfg.stepBytes <= 0:
		return nil, errors.New("-f must be > 1, or -i > 0 when -f is 0 or 1")
	case cfg.iters < 1:
		return nil, errors.New("-n must be at least 1")
	case cfg.warmup < 0 || cfg.check < 0:
		return nil, errors.New("-w and -c must not be negative")
	case cfg.average < 0 || cfg.average > 3:
		return nil, fmt.Errorf("-a (average) must be 0, 1, 2 or 3, not %d", cfg.average)
	case cfg.aggIters < 1:
		return nil, fmt.Errorf("-m (agg_iters) must be at least 1, not %d", cfg.aggIters)
	case cfg.blocking < 0 || cfg.blocking > 3:
		return nil, fmt.Errorf("-z (blocking) must be 0, 1, 2 or 3, not %d", cfg.blocking)
	case cfg.timeout < 0:
		return nil, fmt.Errorf("-T (timeout) must be 0 (the communicator's timeout) or a number of seconds, not %d", cfg.timeout)
	case cfg.runCycles < 0:
		return nil, fmt.Errorf("-N (run_cycles) must be 0 (for ever) or more, not %d", cfg.runCycles)
	case cfg.cputime < 0 || cfg.cputime > 1:
		return nil, fmt.Errorf("-C (report_cputime) must be 0 or 1, not %d", cfg.cputime)
	case cfg.unalign < 0 || cfg.unalign > maxUnalign:
		return nil, fmt.Errorf("-u (unalign) must be from 0 to %d elements, not %d", maxUnalign, cfg.unalign)
	case cfg.threads != 1 || cfg.gpus != 1:
		return nil, errors.New("-t and -g: goccl perf runs one thread and one device per rank; use -np for more ranks")
	case cfg.np < 0:
		return nil, errors.New("-np must not be negative")
	case cfg.root < -1:
		return nil, fmt.Errorf("invalid root %d", cfg.root)
	case cfg.register < 0 || cfg.register > 2:
		return nil, fmt.Errorf("-R (local_register) must be from 0 to 2, not %d", cfg.register)
	}
	for _, f := range cfg.ignored {
		if f.v < f.min || (f.max > 0 && f.v > f.max) {
			r := fmt.Sprintf("at least %d", f.min)
			if f.max > 0 {
				r = fmt.Sprintf("from %d to %d", f.min, f.max)
			}
			return nil, fmt.Errorf("-%s (%s) must be %s, not %d", f.short, f.long, r, f.v)
		}
	}
	types, err := cfg.types()
	if err != nil {
		return nil, err
	}
	if _, err := cfg.ops(); err != nil {
		return nil, err
	}
	if c.reduces && cfg.op == "avg" && cfg.dtype != "all" && !types[0].IsFloat() {
		return nil, fmt.Errorf("avg is only supported for floating-point types, not %s", types[0])
	}
	return cfg, nil
}

// timeLabel names the time columns: nccl-tests says "cputime" with -C 1.
func (cfg *perfConfig) timeLabel() string {
	if cfg.cputime == 1 {
		return "cputime"
	}
	return "time"
}

// headerNotes are the lines after the configuration line: nccl-tests'
// blocking line for -z, and which flags given were ignored.
func (cfg *perfConfig) headerNotes() []string {
	var l []string
	switch cfg.blocking {
	case 1:
		l = append(l, "# Blocking Enabled: wait and barrier after each inner iteration (-m) ")
	case 2:
		l = append(l, "# Blocking Enabled: wait after each inner iteration (-m), no barrier ")
	case 3:
		l = append(l, "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier ")
	}
	if cfg.register > 0 {
		l = append(l, fmt.Sprintf("# Local registration: send and receive buffers registered with the communicator (-R %d; RoCE links send from and receive into them without staging)", cfg.register))
	}
	var noEffect, notImpl []string
	for _, f := range cfg.ignored {
		if f.v == f.def {
			continue
		}
		d := fmt.Sprintf("-%s %d (%s)", f.short, f.v, f.long)
		if f.noEffect {
			noEffect = append(noEffect, d)
		} else {
			notImpl = append(notImpl, d)
		}
	}
	if len(noEffect) > 0 {
		l = append(l, "# No effect on CPU (no GPU, one thread per rank): "+strings.Join(noEffect, ", "))
	}
	if len(notImpl) > 0 {
		l = append(l, "# Not implemented by goccl perf, ignored: "+strings.Join(notImpl, ", "))
	}
	return l
}

// nccl-tests' orders for -d all and -o all.
var (
	allTypes = []goccl.DataType{goccl.Int8, goccl.Uint8, goccl.Int32, goccl.Uint32, goccl.Int64, goccl.Uint64,
		goccl.Float16Type, goccl.Float32, goccl.Float64, goccl.BFloat16Type}
	allOps = []goccl.RedOp{goccl.Sum, goccl.Prod, goccl.Max, goccl.Min, goccl.Avg}
)

func (cfg *perfConfig) types() ([]goccl.DataType, error) {
	if cfg.dtype == "all" {
		return allTypes, nil
	}
	dt, err := goccl.ParseDataType(cfg.dtype)
	if err != nil {
		return nil, fmt.Errorf("-d: unknown data type %q (want %s or all)", cfg.dtype, joinNames(allTypes))
	}
	return []goccl.DataType{dt}, nil
}

// ops lists the ops to run; collectives without a reduction (other than
// sendrecv, which prints the op like nccl-tests) run once.
func (cfg *perfConfig) ops() ([]goccl.RedOp, error) {
	var ops []goccl.RedOp
	if cfg.op == "all" {
		ops = allOps
	} else {
		op, err := goccl.ParseRedOp(cfg.op)
		if err != nil {
			return nil, fmt.Errorf("-o: unknown op %q (want %s or all)", cfg.op, joinNames(allOps))
		}
		ops = []goccl.RedOp{op}
	}
	if cfg.coll != nil && !cfg.coll.reduces && !cfg.coll.opColumn {
		ops = ops[:1]
	}
	return ops, nil
}

// joinNames lists the names of -d's types or -o's ops: "sum, prod, ...".
func joinNames[T fmt.Stringer](v []T) string {
	names := make([]string, len(v))
	for i, x := range v {
		names[i] = x.String()
	}
	return strings.Join(names, ", ")
}

func (cfg *perfConfig) roots(nranks int) ([]int, error) {
	if !cfg.coll.rooted {
		return []int{-1}, nil
	}
	if cfg.root == -1 {
		r := make([]int, nranks)
		for i := range r {
			r[i] = i
		}
		return r, nil
	}
	if cfg.root >= nranks {
		return nil, fmt.Errorf("root %d is out of range for %d ranks", cfg.root, nranks)
	}
	return []int{cfg.root}, nil
}

func runPerf(args []string, stdout, stderr io.Writer) int {
	cfg, err := parsePerfArgs(args, stderr)
	if err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "goccl perf: %v\nRun 'goccl perf -h' for usage.\n", err)
		return 2
	}
	if cfg.np > 0 && os.Getenv(launch.EnvRank) == "" {
		if _, err := cfg.roots(cfg.np); err != nil {
			fmt.Fprintf(stderr, "goccl perf: %v\n", err)
			return 2
		}
		// Check before starting ranks that would die allocating.
		if mem, ok := perfMemory(); ok {
			if err := cfg.checkMemory(cfg.np, mem); err != nil {
				fmt.Fprintf(stderr, "goccl perf: %v\n", err)
				return 2
			}
		}
		return perfLaunch(cfg, args, stdout, stderr)
	}
	ctx := context.Background()
	var opts []goccl.Option
	initCtx := ctx
	if cfg.timeout > 0 {
		// -T bounds the operations; Init keeps at least its own bound.
		t := time.Duration(cfg.timeout) * time.Second
		opts = append(opts, goccl.WithTimeout(t))
		initT := goccl.DefaultTimeout
		if d, ok, err := config.Timeout.Duration(); err == nil && ok {
			initT = d
		}
		if initT > 0 {
			var cancel context.CancelFunc
			initCtx, cancel = context.WithTimeout(ctx, max(initT, t))
			defer cancel()
		}
	}
	c, err := goccl.Init(initCtx, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "goccl perf: init: %v\n", err)
		return 1
	}
	defer c.Close()
	if cfg.np > 0 && cfg.np != c.Size() && c.Rank() == 0 {
		fmt.Fprintf(stderr, "goccl perf: -np %d ignored: the environment gives %d ranks\n", cfg.np, c.Size())
	}
	comm := c
	if cfg.mapBy == "node" {
		if comm, err = mapByNode(initCtx, c); err != nil {
			fmt.Fprintf(stderr, "goccl perf: --map-by node: rank %d: %v\n", c.Rank(), err)
			return 1
		}
		defer comm.Close()
		banner, err := mapByNodeBanner(initCtx, c, comm)
		if err != nil {
			fmt.Fprintf(stderr, "goccl perf: --map-by node: rank %d: %v\n", c.Rank(), err)
			return 1
		}
		if comm.Rank() == 0 {
			fmt.Fprintln(stdout, banner)
		}
	}
	status, err := perfRank(ctx, cfg, comm, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "goccl perf: %v\n", err)
	}
	return status
}

// perfLaunch starts cfg.np ranks of this executable with the same arguments.
func perfLaunch(cfg *perfConfig, args []string, stdout, stderr io.Writer) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "goccl perf: cannot find my executable to launch ranks: %v\n", err)
		return 1
	}
	err = launch.Run(context.Background(), launch.Config{
		NP:     cfg.np,
		Prog:   exe,
		Args:   append([]string{"perf"}, args...),
		Stdout: stdout,
		Stderr: stderr,
		Label: func(rank int, isStderr bool) string {
			if isStderr {
				return launch.DefaultLabel(rank, isStderr)
			}
			return "" // only rank 0 prints the report, verbatim
		},
		ForwardSignals: true,
		Progress:       progress.ForRanks(stderr), // rank 0's bar over the sizes
	})
	return reportLaunch("goccl perf", err, stderr)
}

// perfRank runs the benchmark on this rank. It returns the exit status: 0,
// 1 when results were wrong or out of bounds (then on every rank) or an
// error happened, 2 when the sizes do not fit (-r, or -e in memory).
func perfRank(ctx context.Context, cfg *perfConfig, c benchComm, stdout, stderr io.Writer) (int, error) {
	start := time.Now()
	rank, n := c.Rank(), c.Size()
	types, _ := cfg.types()
	ops, _ := cfg.ops()
	roots, err := cfg.roots(n)
	if err != nil {
		return 2, err
	}
	devs, err := gatherDevices(ctx, c)
	if err != nil {
		return 1, fmt.Errorf("rank %d: gathering device information: %w", rank, err)
	}
	if err := checkMemoryAll(ctx, cfg, c, devs); err != nil {
		return 2, err
	}
	// Rank 0 shows a bar over the rows when its stderr (or the terminal
	// goccl run passed it) is a terminal; Guard keeps it off the report's lines.
	var bar *progress.Bar
	if rank == 0 {
		bar = progress.NewWeighted(cfg.coll.name, cfg.rowWeights(types, ops, roots))
		defer bar.Abort()
		stdout, stderr = bar.Guard(stdout), bar.Guard(stderr)
	}
	var table bytes.Buffer // -plot: a copy of the report, read back as nccl-tests output
	if cfg.plotFile != "" && rank == 0 {
		stdout = io.MultiWriter(stdout, &table)
	}
	b := newBench(ctx, cfg, c, stdout, stderr)
	b.bar = bar
	if gc, ok := c.(*goccl.Comm); ok && cfg.register > 0 {
		// -R: nccl-tests registers the buffers (ncclCommRegister); 1 and 2
		// (its symmetric registration) are one here.
		for _, buf := range [][]byte{b.sendBase, b.recvBase} {
			reg, err := goccl.Register(gc, buf)
			if err != nil {
				return 1, err
			}
			defer reg.Deregister()
		}
	}
	b.printf("%s", formatConfigLine(cfg.minBytes, cfg.maxBytes, cfg.stepFactor, cfg.stepBytes, cfg.warmup, cfg.iters, cfg.aggIters, cfg.check)+unalignSuffix(cfg.unalign))
	for _, l := range cfg.headerNotes() {
		b.printf("%s", l)
	}
	b.printf("#")
	b.printf("# Using devices")
	for _, d := range devs {
		b.printf("%s", formatDeviceLine(d))
	}
	b.printf("#")
	for _, l := range columnHeaderTime(cfg.timeLabel()) {
		b.printf("%s", l)
	}
	if err := b.run(types, ops, roots); err != nil {
		return 1, err
	}
	bar.Done()
	avg := 0.0
	if b.bwCount > 0 {
		avg = b.bwSum / float64(b.bwCount)
	}
	for _, l := range footer(b.errors, avg) {
		b.printf("%s", l)
	}
	status := 0
	if b.errors != 0 {
		status = 1
	}
	if rank == 0 && cfg.plotFile != "" {
		if err := plotReport(&table, cfg.plotFile); err != nil {
			fmt.Fprintf(stderr, "goccl perf: -plot %s: %v\n", cfg.plotFile, err)
		}
	}
	if rank == 0 && cfg.jsonFile != "" {
		rep := newJSONReport(cfg, n, devs, start)
		rep.Results = append(rep.Results, b.rows...)
		rep.OutOfBounds = jsonOOB{Count: b.errors, Okay: b.errors == 0}
		rep.AvgBusBW.Bandwidth = avg
		rep.EndTime = time.Now().Format(jsonTimeFormat)
		if err := writeJSON(cfg.jsonFile, rep); err != nil {
			fmt.Fprintf(stderr, "goccl perf: writing %s: %v\n", cfg.jsonFile, err)
			status = 1
		}
	}
	// Rank 0 has printed everything: only now may ranks exit (a launcher
	// stops the others as soon as one exits with an error).
	if err := c.Barrier(ctx); err != nil {
		return 1, fmt.Errorf("rank %d: final barrier: %w", rank, err)
	}
	return status, nil
}
