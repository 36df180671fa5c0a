package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/goccl/goccl"
)

func TestParseSize(t *testing.T) {
	good := map[string]int64{"8": 8, "0": 0, "1K": 1024, "1k": 1024, "128M": 128 << 20, "8G": 8 << 30, "1.5K": 1536, "1KB": 1024, "2 M": 2 << 20, "32M": 32 << 20,
		"1T": 1 << 40, "2tb": 2 << 40, "4194304T": 1 << 62}
	for s, want := range good {
		if got, err := parseSize(s); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "K", "1X", "-1", "abc", "1KX", "1e3", "1P"} {
		if v, err := parseSize(s); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", s, v)
		} else if !strings.Contains(err.Error(), "optional K, M, G or T suffix (1024-based)") {
			t.Errorf("parseSize(%q): %v: the error does not say what a size is", s, err)
		}
	}
	if v, err := parseSize("4194305T"); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("parseSize(4194305T) = %d, %v", v, err)
	}
}

func TestParsePerfArgs(t *testing.T) {
	cfg, err := parsePerfArgs([]string{"all_reduce", "-b", "8", "-e", "128M", "-f", "2", "-np", "4"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.coll.kind != collAllReduce || cfg.minBytes != 8 || cfg.maxBytes != 128<<20 || cfg.stepFactor != 2 || cfg.np != 4 ||
		cfg.iters != 20 || cfg.warmup != 5 || cfg.check != 1 || cfg.op != "sum" || cfg.dtype != "float" || cfg.root != 0 || cfg.average != avgMean {
		t.Errorf("cfg %+v", cfg)
	}
	// Defaults, flags before the collective, long names, the _perf suffix.
	cfg, err = parsePerfArgs([]string{"--minbytes", "1K", "-maxbytes=4K", "-iters", "3", "-d", "all", "-o", "all", "-r", "-1", "-J", "x.json", "reduce_perf"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.coll.kind != collReduce || cfg.minBytes != 1024 || cfg.maxBytes != 4096 || cfg.iters != 3 || cfg.root != -1 || cfg.jsonFile != "x.json" {
		t.Errorf("cfg %+v", cfg)
	}
	types, _ := cfg.types()
	ops, _ := cfg.ops()
	roots, _ := cfg.roots(3)
	if len(types) != 10 || len(ops) != 5 || ops[2] != goccl.Max || ops[3] != goccl.Min || len(roots) != 3 {
		t.Errorf("types %v ops %v roots %v", types, ops, roots)
	}
	cfg, _ = parsePerfArgs([]string{"all_gather", "-o", "all"}, io.Discard)
	if ops, _ := cfg.ops(); len(ops) != 1 {
		t.Errorf("all_gather runs ops %v", ops)
	}
	if r, _ := cfg.roots(4); len(r) != 1 || r[0] != -1 {
		t.Errorf("all_gather roots %v", r)
	}
	if cfg.minBytes != 8 || cfg.maxBytes != 32<<20 {
		t.Errorf("default sizes %d %d", cfg.minBytes, cfg.maxBytes)
	}
	cfg, _ = parsePerfArgs([]string{"broadcast", "-r", "5"}, io.Discard)
	if _, err := cfg.roots(4); err == nil {
		t.Error("root 5 of 4 accepted")
	}

	bad := [][]string{
		{}, {"-b", "8"}, {"all_reduc"}, {"all_reduce", "extra"}, {"all_reduce", "-b", "1M", "-e", "1K"},
		{"all_reduce", "-f", "1", "-i", "0"}, {"all_reduce", "-n", "0"}, {"all_reduce", "-d", "float8"},
		{"all_reduce", "-o", "mulsum"}, {"all_reduce", "-o", "avg", "-d", "int32"}, {"all_reduce", "-g", "2"},
		{"all_reduce", "-a", "4"}, {"all_reduce", "-x"}, {"all_reduce", "-b", "1Q"},
		{"all_reduce", "-b", "0", "-e", "64"}, // size 0 times 2 stays 0: 8-64 would be skipped
	}
	for _, args := range bad {
		if _, err := parsePerfArgs(args, io.Discard); err == nil {
			t.Errorf("parsePerfArgs(%q) succeeded", args)
		}
	}
	// From 0, stepping by bytes; and size 0 alone.
	for _, args := range [][]string{{"all_reduce", "-b", "0", "-e", "64", "-f", "1", "-i", "8"}, {"all_reduce", "-b", "0", "-e", "0"}} {
		if _, err := parsePerfArgs(args, io.Discard); err != nil {
			t.Errorf("parsePerfArgs(%q): %v", args, err)
		}
	}
	if _, err := parsePerfArgs([]string{"all_reduce", "-b", "0", "-e", "64"}, io.Discard); err == nil || !strings.Contains(err.Error(), "-b 0 with -f 2 never grows past 0 bytes") {
		t.Errorf("-b 0 -e 64: %v", err)
	}
	// avg with all types is fine: integer types are skipped.
	if _, err := parsePerfArgs([]string{"all_reduce", "-o", "avg", "-d", "all"}, io.Discard); err != nil {
		t.Error(err)
	}
}

func TestSizes(t *testing.T) {
	cfg := &perfConfig{minBytes: 8, maxBytes: 100, stepFactor: 2}
	if got := cfg.sizes(); len(got) != 4 || got[3] != 64 {
		t.Errorf("sizes %v", got)
	}
	cfg = &perfConfig{minBytes: 0, maxBytes: 10, stepFactor: 1, stepBytes: 4}
	if got := cfg.sizes(); len(got) != 3 || got[2] != 8 {
		t.Errorf("sizes %v", got)
	}
	// The flags reject -b 0 with a factor; sizes() still ends (0*2 = 0).
	cfg = &perfConfig{minBytes: 0, maxBytes: 10, stepFactor: 2, stepBytes: 4}
	if got := cfg.sizes(); len(got) != 1 || got[0] != 0 {
		t.Errorf("sizes from 0 by a factor: %v", got)
	}
}

func TestLookupColl(t *testing.T) {
	for name, want := range map[string]string{"all_reduce": "all_reduce", "allreduce": "all_reduce", "AllReduce": "all_reduce",
		"all_reduce_perf": "all_reduce", "alltoall": "alltoall", "all_to_all": "alltoall", "sendrecv": "sendrecv", "reduce_scatter_perf": "reduce_scatter"} {
		c, err := lookupColl(name)
		if err != nil || c.name != want {
			t.Errorf("lookupColl(%q) = %v, %v", name, c, err)
		}
	}
}

func TestLayouts(t *testing.T) {
	get := func(name string) *coll { c, _ := lookupColl(name); return c }
	cases := []struct {
		coll              string
		count, elt, n     int
		want              layout
		printed, algBytes float64
	}{
		{"all_reduce", 1000, 4, 3, layout{1000, 1000, 1000, 0, 0}, 4000, 4000},
		{"broadcast", 7, 8, 3, layout{7, 7, 7, 0, 0}, 56, 56},
		{"sendrecv", 5, 1, 2, layout{5, 5, 5, 0, 0}, 5, 5},
		// Blocks of count/n rounded down to 16 bytes.
		{"all_gather", 1000, 4, 3, layout{332, 996, 332, 332, 0}, 3984, 3984},
		{"all_gather", 2, 4, 2, layout{0, 0, 0, 0, 0}, 0, 0},
		{"all_gather", 8, 4, 2, layout{4, 8, 4, 4, 0}, 32, 32},
		{"reduce_scatter", 1000, 2, 3, layout{328 * 3, 328, 328, 0, 328}, 1968, 1968},
		{"alltoall", 1000, 1, 3, layout{320 * 3, 320 * 3, 320, 0, 0}, 960, 960},
		{"alltoall", 100, 8, 4, layout{24 * 4, 24 * 4, 24, 0, 0}, 768, 768},
	}
	for _, c := range cases {
		co := get(c.coll)
		l := co.layoutFor(c.count, c.elt, c.n)
		if l != c.want || float64(l.printedSize(c.elt)) != c.printed || co.algBytes(l.paramCount, c.elt, c.n) != c.algBytes {
			t.Errorf("%s(%d x %d B, %d ranks) = %+v printed %d alg %v", c.coll, c.count, c.elt, c.n, l, l.printedSize(c.elt), co.algBytes(l.paramCount, c.elt, c.n))
		}
	}
	// In-place regions.
	if r := get("all_gather").layoutFor(8, 4, 2).inplaceRegion(1); r != 8 {
		t.Errorf("all_gather region %d", r)
	}
	if r := get("reduce_scatter").layoutFor(96, 4, 3).inplaceRegion(2); r != 96 {
		t.Errorf("reduce_scatter region %d", r)
	}
}

func TestBusFactors(t *testing.T) {
	want := map[string]float64{"all_reduce": 2 * 3.0 / 4, "all_gather": 3.0 / 4, "reduce_scatter": 3.0 / 4, "alltoall": 3.0 / 4, "broadcast": 1, "reduce": 1, "sendrecv": 1}
	for name, f := range want {
		c, _ := lookupColl(name)
		if got := c.busFactor(4); got != f {
			t.Errorf("%s: %v, want %v", name, got, f)
		}
		alg, bus := c.bandwidth(1e6, 4, 4, 1e-3)
		wantAlg := 4.0
		if c.kind == collAllGather || c.kind == collReduceScatter || c.kind == collAllToAll {
			wantAlg = 16
		}
		if math.Abs(alg-wantAlg) > 1e-9 || math.Abs(bus-wantAlg*f) > 1e-9 {
			t.Errorf("%s: bandwidth %v %v", name, alg, bus)
		}
	}
	c, _ := lookupColl("all_reduce")
	if a, b := c.bandwidth(100, 4, 2, 0); a != 0 || b != 0 {
		t.Error("zero time must give zero bandwidth")
	}
}

func TestHalfConversion(t *testing.T) {
	// Every half value decodes like the library's Float16 type and encodes back.
	for h := 0; h < 1<<16; h++ {
		f := halfToFloat64(uint16(h))
		lib := float64(goccl.Float16(h).Float32())
		if math.IsNaN(f) {
			if !math.IsNaN(lib) {
				t.Fatalf("%#04x: NaN vs %v", h, lib)
			}
			continue
		}
		if f != lib {
			t.Fatalf("%#04x: %v, library %v", h, f, lib)
		}
		if back := halfFromFloat64(f); back != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, back)
		}
	}
	// Rounding to nearest even, overflow, underflow.
	for v, want := range map[float64]uint16{2049: 0x6800, 2051: 0x6802, 65519: 0x7bff, 65520: 0x7c00, 1e6: 0x7c00, -1e6: 0xfc00, 0x1p-25: 0, 0x1.8p-25: 1, 0x1p-24: 1} {
		if got := halfFromFloat64(v); got != want {
			t.Errorf("halfFromFloat64(%v) = %#04x, want %#04x", v, got, want)
		}
	}
	if got := halfFromFloat64(math.Copysign(0, -1)); got != 0x8000 {
		t.Errorf("-0 = %#04x", got)
	}
}

// TestPatternsExact: for the world sizes perf is meant for, every float
// expected result other than avg is exact in the element type, so the
// checker compares for equality.
func TestPatternsExact(t *testing.T) {
	for _, dt := range goccl.DataTypes() {
		if !dt.IsFloat() {
			continue
		}
		for n := 1; n <= 32; n++ {
			for _, op := range []goccl.RedOp{goccl.Sum, goccl.Prod, goccl.Min, goccl.Max} {
				kind := map[goccl.RedOp]patKind{goccl.Sum: patSum, goccl.Prod: patProd, goccl.Min: patMinMax, goccl.Max: patMinMax}[op]
				p := newPattern(dt, kind, op, n)
				if !p.exact {
					t.Errorf("%s %s n=%d: not exact", dt, op, n)
				}
				for i := 0; i < 64; i++ {
					_, want := p.reduced(i)
					// The exact float64 reduction must survive rounding to dt.
					var exact float64
					for r := 0; r < n; r++ {
						v := float64(p.value(r, i))
						switch {
						case r == 0:
							exact = v
						case op == goccl.Sum:
							exact += v
						case op == goccl.Prod:
							exact *= v
						case op == goccl.Min:
							exact = math.Min(exact, v)
						default:
							exact = math.Max(exact, v)
						}
					}
					if want != exact {
						t.Fatalf("%s %s n=%d i=%d: %v rounds to %v", dt, op, n, i, exact, want)
					}
				}
			}
		}
	}
}

func TestIntegerExpectations(t *testing.T) {
	// int8 sums wrap; uint8 min/max compare unsigned; uint64 compares unsigned.
	p := newPattern(goccl.Int8, patSum, goccl.Sum, 3)
	var s int8
	for r := 0; r < 3; r++ {
		s += int8(p.value(r, 5))
	}
	if got, _ := p.reduced(5); got != int64(s) {
		t.Errorf("int8 sum %d, want %d", got, s)
	}
	p = newPattern(goccl.Uint8, patMinMax, goccl.Max, 4)
	var m uint8
	for r := 0; r < 4; r++ {
		m = max(m, uint8(p.value(r, 9)))
	}
	if got, _ := p.reduced(9); got != int64(m) {
		t.Errorf("uint8 max %d, want %d", got, m)
	}
	p = newPattern(goccl.Uint64, patMinMax, goccl.Min, 4)
	mm := ^uint64(0)
	for r := 0; r < 4; r++ {
		mm = min(mm, uint64(p.value(r, 2)))
	}
	if got, _ := p.reduced(2); uint64(got) != mm {
		t.Errorf("uint64 min %d, want %d", uint64(got), mm)
	}
	p = newPattern(goccl.Int32, patProd, goccl.Prod, 5)
	var pr int32 = 1
	for r := 0; r < 5; r++ {
		pr *= int32(p.value(r, 7))
	}
	if got, _ := p.reduced(7); got != int64(pr) {
		t.Errorf("int32 prod %d, want %d", got, pr)
	}
}

// ncclTestsFlags is every option of nccl-tests' all_reduce_perf (src/common.cu
// longopts, getopt string "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:")
// with a value that is valid for it.
var ncclTestsFlags = []struct{ short, long, value string }{
	{"t", "nthreads", "1"}, {"g", "ngpus", "1"}, {"b", "minbytes", "8"}, {"e", "maxbytes", "1K"},
	{"i", "stepbytes", "1K"}, {"f", "stepfactor", "2"}, {"n", "iters", "3"}, {"m", "agg_iters", "2"},
	{"w", "warmup_iters", "1"}, {"N", "run_cycles", "2"}, {"p", "parallel_init", "1"}, {"c", "check", "1"},
	{"o", "op", "sum"}, {"d", "datatype", "float"}, {"r", "root", "0"}, {"z", "blocking", "1"},
	{"y", "stream_null", "1"}, {"T", "timeout", "30"}, {"G", "cudagraph", "1"}, {"C", "report_cputime", "1"},
	{"S", "report_timestamps", "1"}, {"J", "output_file", "x.json"}, {"a", "average", "2"},
	{"R", "local_register", "1"}, {"x", "cta_policy", "1"}, {"D", "device_implementation", "1"},
	{"V", "device_cta_count", "8"}, {"M", "memory", "1"}, {"u", "unalign", "1"}, {"I", "per_iter_timing", "1"},
	{"K", "per_iter_skip", "1"},
}

// TestPerfAcceptsNcclTestsFlags: every nccl-tests flag, short and long (with
// nccl-tests' two dashes), is accepted (-z, -m, -T, -G, -R, ... were "flag
// provided but not defined"), in every GNU form (-b 8, -b8, -b=8, --minbytes
// 8, --minbytes=8) and in the single-dash long form of Go's flag package
// (-minbytes 8, -minbytes=8), each setting the same value.
func TestPerfAcceptsNcclTestsFlags(t *testing.T) {
	var all []string
	for _, f := range ncclTestsFlags {
		want := ""
		for _, args := range [][]string{
			{"-" + f.short, f.value}, {"-" + f.short + f.value}, {"-" + f.short + "=" + f.value},
			{"--" + f.long, f.value}, {"--" + f.long + "=" + f.value},
			{"-" + f.long, f.value}, {"-" + f.long + "=" + f.value},
		} {
			args = append([]string{"all_reduce"}, args...)
			cfg, err := parsePerfArgs(args, io.Discard)
			if err != nil {
				t.Errorf("%q: %v", args, err)
				continue
			}
			if got := perfState(cfg); want == "" {
				want = got
			} else if got != want {
				t.Errorf("%q: %s, want %s (-%s %s)", args, got, want, f.short, f.value)
			}
		}
		all = append(all, "-"+f.short, f.value)
	}
	// The usage text names every one.
	for _, f := range ncclTestsFlags {
		if !regexp.MustCompile(`(?m)^  -` + f.short + `, --` + f.long + ` |-` + f.short + `/--` + f.long + `\b`).MatchString(perfHelp) {
			t.Errorf("goccl perf -h does not name -%s, --%s", f.short, f.long)
		}
	}
	// All at once, as an nccl-tests command line.
	if _, err := parsePerfArgs(append([]string{"all_reduce_perf"}, all...), io.Discard); err != nil {
		t.Errorf("%q: %v", all, err)
	}
}

// perfState is the parsed configuration as text, with the values of the
// ignored flags.
func perfState(cfg *perfConfig) string {
	c := *cfg
	var ignored []string
	for _, f := range c.ignored {
		ignored = append(ignored, fmt.Sprintf("%s=%d", f.long, f.v))
	}
	c.ignored, c.coll = nil, nil
	return fmt.Sprintf("%+v %s %v", c, cfg.coll.name, ignored)
}

func TestPerfFlagValues(t *testing.T) {
	cfg, err := parsePerfArgs([]string{"all_reduce"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// nccl-tests' defaults: -a 1 (the mean over ranks), -m 1, -z 0, -T 0, -N 1, -C 0.
	if cfg.average != avgMean || cfg.aggIters != 1 || cfg.blocking != 0 || cfg.timeout != 0 || cfg.runCycles != 1 || cfg.cputime != 0 {
		t.Errorf("defaults %+v", cfg)
	}
	if l := cfg.headerNotes(); len(l) != 0 {
		t.Errorf("default header notes %q", l)
	}
	cfg, err = parsePerfArgs([]string{"all_reduce", "-z", "3", "--agg_iters", "4", "-T", "30", "-N", "0", "-C", "1", "-a", "0",
		"-G", "1", "--local_register=2", "-S", "1", "-p", "1", "-x", "-1", "-V", "16", "-J", "a.json"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.blocking != 3 || cfg.aggIters != 4 || cfg.timeout != 30 || cfg.runCycles != 0 || cfg.cputime != 1 || cfg.average != avgRank0 ||
		cfg.jsonFile != "a.json" || cfg.timeLabel() != "cputime" {
		t.Errorf("cfg %+v", cfg)
	}
	// -x -1 and -V 16 are nccl-tests' defaults: not reported.
	want := []string{
		"# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier ",
		"# Local registration: send and receive buffers registered with the communicator (-R 2; RoCE links send from and receive into them without staging)",
		"# No effect on CPU (no GPU, one thread per rank): -p 1 (parallel_init), -G 1 (cudagraph)",
		"# Not implemented by goccl perf, ignored: -S 1 (report_timestamps)",
	}
	if got := cfg.headerNotes(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("header notes\n%q\nwant\n%q", got, want)
	}
	for z, w := range map[string]string{"1": "wait and barrier after each inner iteration (-m) ", "2": "wait after each inner iteration (-m), no barrier "} {
		cfg, _ := parsePerfArgs([]string{"all_reduce", "-z", z}, io.Discard)
		if l := cfg.headerNotes(); len(l) != 1 || l[0] != "# Blocking Enabled: "+w {
			t.Errorf("-z %s: %q", z, l)
		}
	}
	// -json stays an alias of -J.
	if cfg, err := parsePerfArgs([]string{"all_reduce", "-json", "b.json"}, io.Discard); err != nil || cfg.jsonFile != "b.json" {
		t.Errorf("-json: %v", err)
	}
}

// TestPerfBadFlagValues: a bad value is an error naming the flag and the value.
func TestPerfBadFlagValues(t *testing.T) {
	cases := map[string][]string{
		"-z (blocking) must be 0, 1, 2 or 3, not 4":                  {"-z", "4"},
		"-m (agg_iters) must be at least 1, not 0":                   {"-m", "0"},
		"-T (timeout) must be 0 (the communicator's timeout)":        {"-T", "-1"},
		"-N (run_cycles) must be 0 (for ever) or more, not -2":       {"--run_cycles", "-2"},
		"-C (report_cputime) must be 0 or 1, not 2":                  {"-C", "2"},
		"-a (average) must be 0, 1, 2 or 3, not 4":                   {"-a", "4"},
		"-R (local_register) must be from 0 to 2, not 3":             {"-R", "3"},
		"-G (cudagraph) must be at least 0, not -1":                  {"-G", "-1"},
		"-V (device_cta_count) must be from 1 to 128, not 0":         {"-V", "0"},
		"-x (cta_policy) must be from -1 to 2, not -2":               {"-x", "-2"},
		`invalid value "1.5" for flag --timeout: must be an integer`: {"--timeout", "1.5"},
		`invalid value "1.5" for flag -T: must be an integer`:        {"-T1.5"},
		`invalid value "x" for flag -timeout: must be an integer`:    {"-timeout=x"},
		`invalid value "fast" for flag -z: must be an integer`:       {"-z", "fast"},
		`invalid value "1Q" for flag --minbytes`:                     {"--minbytes=1Q"},
		"flag needs an argument: -b":                                 {"-b"},
		"flag needs an argument: --maxbytes":                         {"--maxbytes"},
		"-m (agg_iters) must be at least 1, not -3":                  {"--agg_iters=-3"},
		"-I (per_iter_timing) must be from 0 to 1, not 2":            {"-I", "2"},
		"-K (per_iter_skip) must be at least 0, not -1":              {"-K", "-1"},
		"-S (report_timestamps) must be from 0 to 1, not 7":          {"-S", "7"},
		"-y (stream_null) must be from 0 to 1, not 2":                {"-y", "2"},
		"-D (device_implementation) must be at least 0, not -1":      {"-D", "-1"},
		"-M (memory) must be from 0 to 1, not 5":                     {"-M", "5"},
		"-u (unalign) must be from 0 to 1048576 elements, not -1":    {"-u", "-1"},
		"-p (parallel_init) must be from 0 to 1, not 3":              {"-p", "3"},
	}
	for want, flags := range cases {
		var stderr strings.Builder
		_, err := parsePerfArgs(append([]string{"all_reduce"}, flags...), &stderr)
		msg := ""
		if err != nil {
			msg = err.Error() + stderr.String()
		}
		if err == nil || !strings.Contains(msg, want) {
			t.Errorf("%q: %v, want an error with %q", flags, err, want)
		}
	}
}

// countComm is a real one-rank communicator that counts the AllReduce calls
// of the timed loop: blocking, issued non-blocking, and barriers.
type countComm struct {
	*goccl.Comm
	blocking, issued, barriers int
}

func (c *countComm) AllReduceBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, op goccl.RedOp) error {
	c.blocking++
	return c.Comm.AllReduceBytes(ctx, send, recv, count, dt, op)
}

func (c *countComm) IAllReduceBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, op goccl.RedOp) (goccl.Request, error) {
	c.issued++
	return c.Comm.IAllReduceBytes(ctx, send, recv, count, dt, op)
}

func (c *countComm) Barrier(ctx context.Context) error {
	c.barriers++
	return c.Comm.Barrier(ctx)
}

// countFake is the fake world's rank (no non-blocking forms) with counts.
type countFake struct {
	*fakeComm
	blocking, barriers int
}

func (c *countFake) AllReduceBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, op goccl.RedOp) error {
	c.blocking++
	return c.fakeComm.AllReduceBytes(ctx, send, recv, count, dt, op)
}

func (c *countFake) Barrier(ctx context.Context) error {
	c.barriers++
	return c.fakeComm.Barrier(ctx)
}

// TestPerfBlockingAndAggIters: -n 4 -m 3 runs 12 operations per timed loop,
// issued non-blocking and waited for once (-z 0), or per iteration with a
// barrier after (-z 3), or each blocking with (-z 1) or without (-z 2) a
// barrier after each, as nccl-tests' BenchTime and startColl.
func TestPerfBlockingAndAggIters(t *testing.T) {
	ctx := context.Background()
	comm, err := goccl.Init(ctx, goccl.WithRank(0), goccl.WithWorldSize(1))
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Close()
	cases := []struct {
		z                          string
		blocking, issued, barriers int
	}{
		{"0", 0, 12, 0}, {"1", 12, 0, 12}, {"2", 12, 0, 0}, {"3", 0, 12, 4},
	}
	for _, c := range cases {
		cfg, err := parsePerfArgs([]string{"all_reduce", "-n", "4", "-m", "3", "-z", c.z, "-e", "4K"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cc := &countComm{Comm: comm}
		b := newBench(ctx, cfg, cc, io.Discard, io.Discard)
		if b.ac == nil {
			t.Fatal("a *goccl.Comm has no non-blocking forms")
		}
		b.dt, b.op, b.root, b.elt = goccl.Float32, goccl.Sum, 0, 4
		b.setup(4096)
		d, err := b.timedLoop(false)
		if err != nil || d <= 0 {
			t.Fatalf("-z %s: %v, %v", c.z, d, err)
		}
		if cc.blocking != c.blocking || cc.issued != c.issued || cc.barriers != c.barriers || b.pending {
			t.Errorf("-z %s -m 3 -n 4: %d blocking, %d issued, %d barriers, pending %v; want %d, %d, %d",
				c.z, cc.blocking, cc.issued, cc.barriers, b.pending, c.blocking, c.issued, c.barriers)
		}
	}
	// Issuing and waiting allocates nothing.
	cfg, _ := parsePerfArgs([]string{"all_reduce", "-e", "4K"}, io.Discard)
	b := newBench(ctx, cfg, comm, io.Discard, io.Discard)
	b.dt, b.op, b.elt = goccl.Float32, goccl.Sum, 4
	b.setup(4096)
	if a := testing.AllocsPerRun(100, func() { b.start(false); b.start(true); b.complete() }); a != 0 {
		t.Errorf("start, start, complete: %v allocations", a)
	}
	// Without non-blocking forms (the fake), -z 0 runs them blocking.
	cfg, _ = parsePerfArgs([]string{"all_reduce", "-n", "2", "-m", "5", "-e", "64"}, io.Discard)
	cf := &countFake{fakeComm: newFakeWorld(1)[0]}
	b = newBench(ctx, cfg, cf, io.Discard, io.Discard)
	b.dt, b.op, b.elt = goccl.Float32, goccl.Sum, 4
	b.setup(64)
	if _, err := b.timedLoop(true); err != nil || cf.blocking != 10 || cf.barriers != 0 {
		t.Errorf("fake: %v, %d blocking, %d barriers", err, cf.blocking, cf.barriers)
	}
}

// deadlineComm fails every AllReduce as a timed-out operation does.
type deadlineComm struct{ nopComm }

func (deadlineComm) AllReduceBytes(context.Context, []byte, []byte, int, goccl.DataType, goccl.RedOp) error {
	return context.DeadlineExceeded
}

func TestPerfTimeoutError(t *testing.T) {
	cfg, _ := parsePerfArgs([]string{"all_reduce", "-T", "30", "-e", "64"}, io.Discard)
	b := newBench(context.Background(), cfg, deadlineComm{}, io.Discard, io.Discard)
	b.dt, b.op, b.elt = goccl.Float32, goccl.Sum, 4
	b.setup(64)
	_, err := b.timedLoop(false)
	if err == nil {
		t.Fatal("no error")
	}
	if e := b.opError(err, 64, false, "timed loop"); !strings.Contains(e.Error(), "timed loop, timeout -T 30 s") || !errors.Is(e, context.DeadlineExceeded) {
		t.Errorf("%v", e)
	}
}

// TestPerfFakeNcclTestsFlags runs the benchmark with nccl-tests' flags:
// the header says what they do, -N 2 prints the sweep twice.
func TestPerfFakeNcclTestsFlags(t *testing.T) {
	out, errs, status := runFake(t, 3, []string{"all_reduce", "-b", "64", "-e", "256", "-n", "2", "-w", "1", "-z", "1", "-m", "2",
		"-G", "1", "-R", "1", "-T", "30", "-N", "2", "-C", "1"}, nil)
	rows, tail := parseReport(t, out, 3)
	if len(rows) != 6 || tail[0] != "# Out of bounds values : 0 OK" || status[0] != 0 || errs != "" {
		t.Errorf("rows %+v tail %q status %v stderr %s", rows, tail, status, errs)
	}
	lines := strings.Split(out, "\n")
	if !strings.Contains(lines[0], " iters: 2 agg iters: 2 validation: 1 graph: 0") ||
		lines[1] != "# Blocking Enabled: wait and barrier after each inner iteration (-m) " ||
		lines[2] != "# Local registration: send and receive buffers registered with the communicator (-R 1; RoCE links send from and receive into them without staging)" ||
		lines[3] != "# No effect on CPU (no GPU, one thread per rank): -G 1 (cudagraph)" ||
		lines[4] != "#" || !strings.Contains(out, "cputime") {
		t.Errorf("header:\n%s", out)
	}
}

// TestPerfLaunchNcclTestsFlags runs `goccl perf -np 2` over the real library
// with an nccl-tests command line.
func TestPerfLaunchNcclTestsFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	for _, z := range []string{"0", "1", "3"} {
		stdout, stderr, code := runGoccl(t, "perf", "all_reduce", "-np", "2", "-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-w", "1",
			"-z", z, "-m", "2", "-G", "1", "-R", "1", "-T", "30", "-u", "1")
		if code != 0 {
			t.Fatalf("-z %s: exit code %d\nstdout:\n%s\nstderr:\n%s", z, code, stdout, stderr)
		}
		rows, tail := parseReport(t, stdout, 2)
		if len(rows) != 5 || tail[0] != "# Out of bounds values : 0 OK" {
			t.Errorf("-z %s: %d rows, %q", z, len(rows), tail[0])
		}
		for _, r := range rows {
			if r.wrongOOP != "0" || r.wrongIP != "0" {
				t.Errorf("-z %s: row %+v", z, r)
			}
		}
		if !strings.Contains(stdout, "agg iters: 2") || !strings.Contains(stdout, "-G 1 (cudagraph)") || !strings.Contains(stdout, "# Local registration") ||
			(z != "0") != strings.Contains(stdout, "# Blocking Enabled") {
			t.Errorf("-z %s: header:\n%s", z, stdout)
		}
	}
}

// alignFake is the fake world's rank noting the address of every
// benchmarked AllReduce's buffers modulo 8.
type alignFake struct {
	*fakeComm
	mis map[uintptr]bool
}

func (c *alignFake) AllReduceBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, op goccl.RedOp) error {
	if count > 2 { // not perf's own reductions of times and error counts
		c.mis[uintptr(unsafe.Pointer(&send[0]))%8] = true
		c.mis[uintptr(unsafe.Pointer(&recv[0]))%8] = true
	}
	return c.fakeComm.AllReduceBytes(ctx, send, recv, count, dt, op)
}

// TestPerfUnalign: -u N shifts both buffers by N elements, and the checks
// (results, guards) still pass on the shifted buffers.
func TestPerfUnalign(t *testing.T) {
	out, errs, status := runFake(t, 3, []string{"all_gather", "-b", "64", "-e", "1K", "-n", "1", "-w", "0", "-d", "all", "-u", "3"}, nil)
	rows, tail := parseReport(t, out, 3)
	if len(rows) == 0 || tail[0] != "# Out of bounds values : 0 OK" || status[0] != 0 || errs != "" {
		t.Errorf("rows %d tail %q status %v stderr %s", len(rows), tail, status, errs)
	}
	if !strings.HasSuffix(strings.SplitN(out, "\n", 2)[0], " graph: 0 unalign: 3") {
		t.Errorf("config line: %s", out)
	}
	for _, tc := range []struct {
		u, dt string
		want  uintptr
	}{{"0", "float", 0}, {"1", "float", 4}, {"3", "double", 0}, {"1", "half", 2}} {
		cfg, err := parsePerfArgs([]string{"all_reduce", "-b", "64", "-e", "64", "-n", "2", "-u", tc.u, "-d", tc.dt}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		c := &alignFake{fakeComm: newFakeWorld(1)[0], mis: map[uintptr]bool{}}
		if st, err := perfRank(context.Background(), cfg, c, io.Discard, io.Discard); st != 0 || err != nil {
			t.Fatalf("-u %s: %d %v", tc.u, st, err)
		}
		if len(c.mis) != 1 || !c.mis[tc.want] {
			t.Errorf("-u %s -d %s: buffers at %v mod 8, want %d", tc.u, tc.dt, c.mis, tc.want)
		}
	}
}

// TestPerfUnknownTypeOp: -d and -o with a value goccl perf does not know
// say which values it takes.
func TestPerfUnknownTypeOp(t *testing.T) {
	for _, tc := range []struct {
		flag, value string
		valid       []string
	}{
		{"-d", "float8", typeNames(allTypes)},
		{"-o", "mulsum", typeNames(allOps)},
	} {
		_, err := parsePerfArgs([]string{"all_reduce", tc.flag, tc.value}, io.Discard)
		if err == nil {
			t.Fatalf("%s %s accepted", tc.flag, tc.value)
		}
		msg := err.Error()
		for _, v := range append(tc.valid, "all", strconv.Quote(tc.value)) {
			if !strings.Contains(msg, v) {
				t.Errorf("%s %s: %q does not name %s", tc.flag, tc.value, msg, v)
			}
		}
	}
}

// typeNames is the names of v, for TestPerfUnknownTypeOp.
func typeNames[T fmt.Stringer](v []T) []string {
	var s []string
	for _, x := range v {
		s = append(s, x.String())
	}
	return s
}

// TestRowWeights: the progress bar weighs each row run prints, in its
// order, by its size (plus rowOverhead): a row per size, test and cycle;
// none for -N 0.
func TestRowWeights(t *testing.T) {
	cfg, err := parsePerfArgs([]string{"all_reduce", "-b", "8", "-e", "1K", "-f", "4", "-d", "all", "-o", "avg", "-N", "2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	types, _ := cfg.types()
	ops, _ := cfg.ops()
	roots, _ := cfg.roots(2)
	w := cfg.rowWeights(types, ops, roots)
	floats := 0
	for _, dt := range types {
		if dt.IsFloat() {
			floats++ // avg skips the integer types
		}
	}
	sizes := cfg.sizes() // 8, 32, 128, 512
	if len(w) != floats*2*len(sizes) {
		t.Fatalf("%d weights, want %d (%d float types, 2 cycles, %d sizes)", len(w), floats*2*len(sizes), floats, len(sizes))
	}
	for i, x := range w {
		if want := sizes[i%len(sizes)] + rowOverhead; x != want {
			t.Fatalf("weight %d is %d, want %d", i, x, want)
		}
	}
	cfg.runCycles = 0
	if w := cfg.rowWeights(types, ops, roots); w != nil {
		t.Errorf("-N 0: %d weights, want none (no end)", len(w))
	}
}
