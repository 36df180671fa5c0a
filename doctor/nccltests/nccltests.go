// Package nccltests reads the tables of NVIDIA's nccl-tests and of `goccl
// perf` (`goccl doctor nccl-tests FILE`) and checks them: busbw against
// algbw, wrong results, the footer, and the bandwidth expected.
//
// The *_perf programs of NVIDIA's nccl-tests (the printing lives in
// src/common.cu; each collective's bandwidth factor in src/<name>.cu) print a
// preamble, a table and a footer:
//
//	# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 ...
//	# Using devices
//	#  Rank  0 Group  0 Pid   6899 on host device  0 [0000:04:00] NVIDIA H100 80GB HBM3
//	#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
//	#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
//	           8             2     float     sum      -1    135.8    0.00    0.00      0    123.5    0.00    0.00      0
//	# Out of bounds values : 0 OK
//	# Avg bus bandwidth    : 70.742
//
// Sizes are bytes, counts elements, times microseconds, algbw and busbw
// GB/s with 1 GB = 1e9 bytes. Each row has the parameters (size, count,
// type, and in most versions redop and root) then an out-of-place and an
// in-place group of four: time, algbw, busbw and a check column. The check
// column is "#wrong" (a count of wrong elements, "N/A" where the test does
// not check, e.g. sendrecv in place) in current versions and the largest
// error printed like "0e+00" in old ones (2019-2020). Old versions also
// print no root column (all_reduce) or neither redop nor root (all_gather).
// The row layout is recognised from the number of fields, not the header,
// since pastes often lose the header.
//
// goccl's own `goccl perf` prints the same preamble, table and footer
// (cmd/goccl/perf_format.go), with "[cpu] goccl" as the device.
//
// Which collective a table is: in order, (1) the "# Collective test
// starting: X" line, (2) a program name in a command line of the paste
// (".../all_reduce_perf -b 8 ..." or "goccl perf all_reduce ..."), (3) the
// layout: redop and root columns, whether size/count/typesize is 1 (all_reduce,
// sendrecv, reduce, broadcast) or the rank count (all_gather, reduce_scatter,
// alltoall), an in-place check column that is always N/A (sendrecv), and,
// among what remains, the busbw/algbw ratio. Test.CollectiveFrom says
// which ("banner", "command", "layout"); a layout guess that fits nothing is
// "unknown" and its busbw is not checked.
//
// The rank count n: the number of "#  Rank N" lines under "# Using devices"
// (all processes print there through rank 0); else nThread*nGpus of the
// "# nThread" line times the process count of a launcher command line;
// else -t/-g of the program's command line times that count; else
// size/(count*typesize) where that ratio is the rank count (all_gather,
// reduce_scatter, alltoall, hypercube). Test.RanksFrom says which
// ("devices", "config", "command", "size-count").
//
// The process count is read from the launcher's flags before the program
// name only (after it, -n is nccl-tests' iteration count), including
// continuation lines ("\" or a quoted "> " block): -n, -np, --np, -c
// (Open MPI) and srun's -n/--ntasks are the total; srun's -N/--nodes is
// nodes (times --ntasks-per-node, else one task per node, srun's default
// without -c); Open MPI's -N, -npernode, --map-by ppr:N:node and Hydra's
// -ppn are per node, times the hosts of -H/--host. A launcher whose count
// is not on its command line (a hostfile, an allocation) leaves n unknown;
// no launcher means one process (or goccl perf's own -np).
//
// busbw is recomputed from algbw with nccl-tests' factors: all_reduce
// 2(n-1)/n; all_gather, reduce_scatter, alltoall, gather, scatter,
// hypercube (n-1)/n; broadcast, reduce, sendrecv 1. Both numbers are
// printed with two decimals, so a row disagrees when
// |busbw - algbw*f| > 0.005*(f+1) + 1e-9.
//
// The input is read as a stream, whatever its length, in memory that does
// not grow with it: each table is checked when it ends, and only the first
// 128 tables (fewer when they hold more than 16384 rows; the first table
// whatever its size) stay in the report; rows of one table after its
// 65536th are not read. Findings that repeat from table to table with
// other numbers (a burn-in loop's log holds the same run thousands of
// times) are folded into one with a count and the first and last line
// (doctor.Folder).
//
// Finding codes (severity):
//
//	no-results              warn   no result row in the input
//	collective-unknown      info   a table's collective could not be told; busbw not checked
//	ranks-unknown           info   the rank count is unknown and the collective's factor needs it
//	busbw-mismatch          warn   rows whose busbw is not algbw times the collective's factor
//	wrong-results           error  rows with #wrong > 0 (or an old-format error above tolerance)
//	out-of-bounds-values    error  "# Out of bounds values" above 0
//	avg-busbw               info   the "# Avg bus bandwidth" footer and the peak
//	avg-busbw-mismatch      info   the rows do not average to the footer (trimmed or edited)
//	peak-busbw              info   the peak busbw of a table without a footer
//	busbw-below-expected    warn   sizes >= 64 MiB below 80 % of Options.ExpectBusBW
//	expect-busbw-unchecked  info   ExpectBusBW given but no size >= 64 MiB
//	tables-not-listed       info   tables checked but left out of the report to keep it small
package nccltests

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/goccl/goccl/doctor"
)

// Options tunes Read.
type Options struct {
	// ExpectBusBW is the bus bandwidth the fabric should reach, GB/s
	// (1 GB = 1e9 B); 0 means no expectation. Rows of at least
	// ExpectMinSize bytes whose best busbw (out-of-place or in-place)
	// is below 80 % of it are flagged.
	ExpectBusBW float64
}

// ExpectMinSize is the smallest message size, bytes (64 MiB), at which
// the ExpectBusBW check applies: below it latency dominates and busbw is
// not expected to reach the fabric's bandwidth.
const ExpectMinSize = 64 << 20

// testsExpectFraction is the share of ExpectBusBW below which a row is
// flagged.
const testsExpectFraction = 0.8

// Report is what Read found: one Test per table (the first 128, see
// above) and the findings over all of them.
type Report struct {
	Tests []Test `json:"tests"`
	// TablesNotListed counts the tables after those in Tests: checked
	// (their findings are in Findings) but not kept, so that the report
	// stays small whatever the input.
	TablesNotListed int              `json:"tables_not_listed,omitempty"`
	Findings        []doctor.Finding `json:"findings"`
}

// Limits that keep memory and the report bounded whatever the input.
const (
	maxTableRows    = 1 << 16 // rows read of one table
	maxListedTables = 128     // tables kept in Report.Tests
	maxListedRows   = 1 << 14 // rows of the tables kept (the first table is kept whatever its size)
)

// Test is one table: one run of one collective.
type Test struct {
	Collective     string `json:"collective"`      // "all_reduce", ..., "unknown"
	CollectiveFrom string `json:"collective_from"` // banner, command, layout
	Ranks          int    `json:"ranks"`           // 0 when unknown
	RanksFrom      string `json:"ranks_from,omitempty"`
	// Format is "current" (#wrong counts), "old" (float error columns).
	Format string `json:"format"`
	// Line is the input line of the first row (1-based).
	Line int   `json:"line"`
	Rows []Row `json:"rows"`
	// AvgBusBW is the "# Avg bus bandwidth" footer, GB/s (1 GB = 1e9 B);
	// HasAvg says whether it was there.
	AvgBusBW float64 `json:"avg_busbw_gbs"`
	HasAvg   bool    `json:"has_avg"`
	// OutOfBounds is the "# Out of bounds values" count, -1 when absent.
	OutOfBounds int64 `json:"out_of_bounds"`
	// PeakBusBW is the largest busbw of any row, GB/s (1 GB = 1e9 B), and
	// PeakSize that row's message size in bytes.
	PeakBusBW float64 `json:"peak_busbw_gbs"`
	PeakSize  int64   `json:"peak_size"`
}

// Row is one result row.
type Row struct {
	Line  int    `json:"line"`
	Size  int64  `json:"size"`  // bytes
	Count int64  `json:"count"` // elements
	Type  string `json:"type"`
	Redop string `json:"redop,omitempty"` // empty when the layout has no redop column
	Root  int    `json:"root"`            // -1 when not rooted or no root column
	// HasRoot says whether the row had a root column.
	HasRoot    bool    `json:"has_root"`
	OutOfPlace Result  `json:"out_of_place"`
	InPlace    *Result `json:"in_place,omitempty"`
	// BusBWMismatch is set when a printed busbw disagrees with algbw times
	// the collective's factor.
	BusBWMismatch bool `json:"busbw_mismatch,omitempty"`
}

// Result is one half of a row.
type Result struct {
	TimeUS float64 `json:"time_us"`   // microseconds
	AlgBW  float64 `json:"algbw_gbs"` // GB/s, 1 GB = 1e9 B: size / time
	BusBW  float64 `json:"busbw_gbs"` // GB/s, 1 GB = 1e9 B: algbw times the collective's factor
	// Wrong is the #wrong count; -1 for "N/A". In the old format it is
	// 0 or 1 (error above the type's tolerance) and Error holds the value.
	Wrong int64   `json:"wrong"`
	Error float64 `json:"error,omitempty"`
}

// BusBWFactor is nccl-tests' busbw/algbw factor (its doc/PERFORMANCE.md)
// for a collective named as nccl-tests names its programs without "_perf"
// ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast",
// "reduce", "sendrecv", "gather", "scatter", "hypercube") and n ranks:
// 2(n-1)/n for all_reduce; (n-1)/n for all_gather, reduce_scatter,
// alltoall, gather, scatter and hypercube; 1 for broadcast, reduce and
// sendrecv. ok is false for an unknown name or, where n matters, n < 1.
// goccl perf uses it too.
func BusBWFactor(coll string, n int) (factor float64, ok bool) {
	switch coll {
	case "broadcast", "reduce", "sendrecv":
		return 1, true
	}
	if n <= 0 {
		return 0, false
	}
	switch coll {
	case "all_reduce":
		return 2 * float64(n-1) / float64(n), true
	case "all_gather", "reduce_scatter", "alltoall", "gather", "scatter", "hypercube":
		return float64(n-1) / float64(n), true
	}
	return 0, false
}

// testsTypeSize is the size in bytes of an nccl-tests type name, 0 if unknown.
func testsTypeSize(t string) int64 {
	switch strings.ToLower(t) {
	case "int8", "uint8", "char", "f8e4m3", "f8e5m2", "fp8_e4m3", "fp8_e5m2":
		return 1
	case "half", "float16", "bfloat16", "bf16":
		return 2
	case "int32", "uint32", "int", "float", "float32":
		return 4
	case "int64", "uint64", "double", "float64":
		return 8
	}
	return 0
}

// testsTolerance is the largest error old nccl-tests accepted for a type.
func testsTolerance(t string) float64 {
	switch strings.ToLower(t) {
	case "half", "float16", "bfloat16", "bf16", "f8e4m3", "f8e5m2":
		return 1e-2
	case "float", "float32":
		return 1e-5
	case "double", "float64":
		return 1e-12
	}
	return 0
}

// testsCollName maps a program or argument name to a collective name.
func testsCollName(s string) string {
	s = strings.ToLower(s)
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[i+1:]
	}
	s = strings.TrimSuffix(s, "_mpi")
	s = strings.TrimSuffix(s, "_perf")
	s = strings.ReplaceAll(strings.ReplaceAll(s, "_", ""), "-", "")
	switch s {
	case "allreduce":
		return "all_reduce"
	case "allgather":
		return "all_gather"
	case "reducescatter":
		return "reduce_scatter"
	case "broadcast", "reduce", "alltoall", "sendrecv", "gather", "scatter", "hypercube":
		return s
	}
	return ""
}

var (
	testsBannerRe  = regexp.MustCompile(`^#\s*Collective test starting:\s*(\S+)`)
	testsProgRe    = regexp.MustCompile(`^([a-z_]+)_perf(?:_mpi)?$`)
	testsConfigRe  = regexp.MustCompile(`^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)`)
	testsRankRe    = regexp.MustCompile(`^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+`)
	testsAvgRe     = regexp.MustCompile(`^#\s*Avg bus bandwidth\s*:\s*(\S+)`)
	testsOOBRe     = regexp.MustCompile(`^#\s*Out of bounds values\s*:\s*(\d+)`)
	testsHeaderRe  = regexp.MustCompile(`^#\s*size\s+count\s+type`)
	testsGpusRe    = regexp.MustCompile(`\s(?:-g|--ngpus)[\s=]?(\d+)`)
	testsThreadsRe = regexp.MustCompile(`\s(?:-t|--nthreads)[\s=]?(\d+)`)
	testsGocclNpRe = regexp.MustCompile(`\s--?np[\s=](\d+)`)
)

// testsBuilder accumulates one table and its context.
type testsBuilder struct {
	t          Test
	rankSet    map[int]bool
	cfgRanks   int         // nThread*nGpus
	cmdRanks   int         // -t * -g of the program's command line
	launch     testsLaunch // the launcher command line, if any
	layoutKey  string
	closed     bool // footer seen: the next row starts a new table
	haveConfig bool
}

func testsNewBuilder() *testsBuilder {
	return &testsBuilder{rankSet: map[int]bool{}, t: Test{OutOfBounds: -1}}
}

// Read parses the output of nccl-tests' *_perf programs (any
// version) or of `goccl perf`, possibly several runs in one file, and checks
// it: busbw against algbw times the collective's factor, #wrong, the
// out-of-bounds count, the average bus bandwidth footer and, with
// opt.ExpectBusBW, large sizes against the expected bandwidth. It fails only
// when r fails.
func Read(r io.Reader, opt Options) (*Report, error) {
	tp := &testsParser{tr: &testsReader{rep: &Report{Tests: []Test{}}, opt: opt}, cur: testsNewBuilder()}
	if _, err := doctor.ReadLines(r, doctor.TableMaxLine, 0, tp.line); err != nil {
		return nil, err
	}
	tp.finish(false)
	return tp.tr.done(), nil
}

// testsParser is Read's state: the checked tables and the one being read.
type testsParser struct {
	tr  *testsReader
	cur *testsBuilder
}

// finish ends the current table and starts a fresh one; when keepCtx,
// the new one inherits the rank context (same launch, another table).
func (tp *testsParser) finish(keepCtx bool) {
	cur := tp.cur
	next := testsNewBuilder()
	if keepCtx {
		next.rankSet, next.cfgRanks, next.cmdRanks, next.launch, next.haveConfig = cur.rankSet, cur.cfgRanks, cur.cmdRanks, cur.launch, cur.haveConfig
	}
	if len(cur.t.Rows) > 0 {
		tp.tr.table(cur)
	}
	tp.cur = next
}

// context starts a new table when the current one already has rows.
func (tp *testsParser) context() {
	if len(tp.cur.t.Rows) > 0 {
		tp.finish(false)
	}
}

// line reads line n of the input.
func (tp *testsParser) line(n int, raw string) {
	line := strings.TrimSpace(doctor.CleanLine(raw))
	if line == "" {
		return
	}
	// A launcher line without the program continues on the next lines
	// (shell "\" or a markdown quote "> "): their flags are the
	// launcher's until the program's line.
	wasPending := tp.cur.launch.pending
	tp.cur.launch.pending = false
	if tp.commentLine(line) || strings.HasPrefix(line, "#") {
		return
	}
	// A command line: a *_perf program or goccl perf, possibly under
	// mpirun/srun. Only the flags before the program are the
	// launcher's: after it, -n is nccl-tests' iteration count.
	if coll, before, after, ok := testsCommand(line); ok {
		tp.commandLine(coll, before, after, wasPending)
		return
	}
	if tp.launcherLine(line, wasPending) || strings.HasPrefix(line, ">") {
		return
	}
	tp.rowLine(n, line)
}

// commentLine reads the "#" lines that matter (banner, thread and GPU
// configuration, ranks, footers, table header) and reports whether line
// was one.
func (tp *testsParser) commentLine(line string) bool {
	cur := tp.cur
	if m := testsBannerRe.FindStringSubmatch(line); m != nil {
		tp.context()
		if c := testsCollName(m[1]); c != "" {
			tp.cur.t.Collective, tp.cur.t.CollectiveFrom = c, "banner"
		}
		return true
	}
	if m := testsConfigRe.FindStringSubmatch(line); m != nil {
		tp.configLine(m)
		return true
	}
	if m := testsRankRe.FindStringSubmatch(line); m != nil {
		if len(cur.t.Rows) > 0 {
			tp.finish(false)
		}
		if k, err := strconv.Atoi(m[1]); err == nil && k >= 0 && k < 1<<20 && len(tp.cur.rankSet) < 1<<16 {
			tp.cur.rankSet[k] = true
		}
		return true
	}
	if m := testsAvgRe.FindStringSubmatch(line); m != nil {
		if v, err := strconv.ParseFloat(m[1], 64); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
			cur.t.AvgBusBW, cur.t.HasAvg = v, true
		}
		cur.closed = true
		return true
	}
	if m := testsOOBRe.FindStringSubmatch(line); m != nil {
		if v, err := strconv.ParseInt(m[1], 10, 64); err == nil {
			cur.t.OutOfBounds = v
		}
		cur.closed = true
		return true
	}
	if testsHeaderRe.MatchString(line) {
		if len(cur.t.Rows) > 0 {
			tp.finish(true)
		}
		return true
	}
	return false
}

// configLine reads "# nThread T nGpus G" (testsConfigRe's match m): a
// second one, or one after rows, starts a new table.
func (tp *testsParser) configLine(m []string) {
	cur := tp.cur
	if len(cur.t.Rows) > 0 || cur.haveConfig {
		ctxColl, ctxFrom, launch := "", "", cur.launch
		if len(cur.t.Rows) == 0 {
			ctxColl, ctxFrom = cur.t.Collective, cur.t.CollectiveFrom
		}
		tp.finish(false)
		tp.cur.t.Collective, tp.cur.t.CollectiveFrom, tp.cur.launch = ctxColl, ctxFrom, launch
	}
	t, _ := strconv.Atoi(m[1])
	g, _ := strconv.Atoi(m[2])
	if t > 0 && g > 0 && t < 1<<16 && g < 1<<16 {
		tp.cur.cfgRanks = t * g
	}
	tp.cur.haveConfig = true
}

// commandLine reads the command line of a test program (testsCommand's
// coll, before and after): the collective, the launcher's flags and the
// ranks the program's own flags give.
func (tp *testsParser) commandLine(coll string, before, after []string, wasPending bool) {
	tp.context()
	cur := tp.cur
	if coll != "" {
		cur.t.Collective, cur.t.CollectiveFrom = coll, "command"
	}
	if k := testsLauncherAt(before); k >= 0 {
		cur.launch = testsNewLaunch(before[k])
		cur.launch.flags(before[k+1:])
	} else if wasPending {
		cur.launch.flags(before)
	}
	args := " " + strings.Join(after, " ")
	g, t := 1, 1
	if m := testsGpusRe.FindStringSubmatch(args); m != nil {
		g, _ = strconv.Atoi(m[1])
	}
	if m := testsThreadsRe.FindStringSubmatch(args); m != nil && coll != "" {
		t, _ = strconv.Atoi(m[1])
	}
	if coll != "" && g > 0 && t > 0 && g < 1<<16 && t < 1<<16 {
		cur.cmdRanks = g * t
	}
	if len(before) == 0 && !cur.launch.seen && !wasPending {
		// goccl perf -np N starts N processes itself.
		if m := testsGocclNpRe.FindStringSubmatch(args); m != nil {
			if v := testsCount(m[1]); v > 0 {
				cur.launch = testsLaunch{seen: true, total: v}
			}
		}
	}
}

// launcherLine reads a launcher line without the program (continued with
// "\") or one of its continuation lines, and reports whether line was one.
func (tp *testsParser) launcherLine(line string, wasPending bool) bool {
	cur := tp.cur
	toks := strings.Fields(strings.TrimLeft(line, "$> "))
	if k := testsLauncherAt(toks); k >= 0 {
		cur.launch = testsNewLaunch(toks[k])
		cur.launch.flags(toks[k+1:])
		cur.launch.pending = true
		return true
	}
	if wasPending && (strings.HasPrefix(line, ">") || strings.HasPrefix(line, "-")) {
		cur.launch.flags(toks)
		cur.launch.pending = true
		return true
	}
	return false
}

// rowLine reads a table row (line n): a row of another layout, or one
// after the footer, starts a new table.
func (tp *testsParser) rowLine(n int, line string) {
	row, key, ok := testsParseRow(line)
	if !ok {
		return
	}
	row.Line = n
	if len(tp.cur.t.Rows) > 0 && (tp.cur.closed || key != tp.cur.layoutKey) {
		tp.finish(false)
	}
	cur := tp.cur
	if len(cur.t.Rows) == 0 {
		cur.layoutKey = key
		cur.t.Line = n
		cur.t.Format = "current"
		if strings.HasSuffix(key, "old") {
			cur.t.Format = "old"
		}
	}
	if len(cur.t.Rows) < maxTableRows {
		cur.t.Rows = append(cur.t.Rows, row)
	}
}

// testsReader checks the tables as they end and keeps the first ones.
type testsReader struct {
	rep  *Report
	opt  Options
	fold doctor.Folder
	n    int // tables read
	rows int // rows of the tables in rep.Tests
	// full: a table was left out; so are all after it. first and last are
	// the lines of the first and the last table left out.
	full        bool
	first, last int
}

// table resolves, checks and, while there is room, keeps a finished table.
func (tr *testsReader) table(b *testsBuilder) {
	tr.n++
	b.resolve()
	t := &b.t
	testsCheck(tr.n, t, tr.opt, func(f doctor.Finding) { tr.fold.Add(f, t.Line) })
	kept := len(tr.rep.Tests)
	if !tr.full && (kept == 0 || kept < maxListedTables && tr.rows+len(t.Rows) <= maxListedRows) {
		tr.rep.Tests = append(tr.rep.Tests, *t)
		tr.rows += len(t.Rows)
		return
	}
	if !tr.full {
		tr.full, tr.first = true, t.Line
	}
	tr.last = t.Line
	tr.rep.TablesNotListed++
}

// done adds the findings about the input as a whole and returns the report.
func (tr *testsReader) done() *Report {
	rep := tr.rep
	if tr.n == 0 {
		tr.fold.Add(doctor.Finding{Severity: doctor.SevWarn, Code: "no-results",
			Message: "no nccl-tests result rows found",
			Fix:     "paste the whole output of the *_perf program, from the '# nThread' line to '# Avg bus bandwidth'"}, 0)
	}
	if rep.TablesNotListed > 0 {
		tr.fold.Add(doctor.Finding{Severity: doctor.SevInfo, Code: "tables-not-listed",
			Message: fmt.Sprintf("tables %d to %d (lines %d to %d) were checked but are not listed: the report keeps the first %d tables (%d rows)",
				len(rep.Tests)+1, tr.n, tr.first, tr.last, len(rep.Tests), tr.rows),
			Fix: "their findings are above, folded with those of the listed tables; to see their rows, split the input"}, 0)
	}
	rep.Findings = tr.fold.Findings()
	doctor.SortFindings(rep.Findings)
	return rep
}

// testsCommand recognises a command line running a benchmark and returns
// the collective it names ("" when the line is a command but names none),
// the words before the program (a launcher and its flags) and the program's
// arguments.
func testsCommand(line string) (coll string, before, after []string, ok bool) {
	l := strings.TrimLeft(line, "$># ")
	if i := strings.Index(l, "$ "); i >= 0 && i < 200 {
		l = l[i+2:] // shell prompt "user@host:~$ cmd"
	}
	toks := strings.Fields(l)
	for i, t := range toks {
		base := t[strings.LastIndexByte(t, '/')+1:]
		if base == "goccl" && i+1 < len(toks) && toks[i+1] == "perf" {
			rest := toks[i+2:]
			if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
				coll, rest = testsCollName(rest[0]), rest[1:]
			}
			return coll, toks[:i], rest, true
		}
		if m := testsProgRe.FindStringSubmatch(base); m != nil {
			if c := testsCollName(m[1]); c != "" {
				return c, toks[:i], toks[i+1:], true
			}
		}
	}
	return "", nil, nil, false
}

// testsLaunch is what a launcher command line (mpirun, mpiexec, orterun,
// prterun, srun) says about the number of processes.
type testsLaunch struct {
	seen  bool // a launcher was seen
	srun  bool // srun: -N is nodes; MPI launchers: -N is processes per node
	total int  // -n, -np, --np, -c (Open MPI), --ntasks (srun)
	nodes int  // srun -N/--nodes, or the distinct hosts of -H/--host
	per   int  // per node: --ntasks-per-node, -N/-npernode/-ppn, --map-by ppr:N:node
	cpt   bool // srun -c/--cpus-per-task, which changes srun's default task count
	// pending: the launcher's line has no program yet; the next lines
	// continue it.
	pending bool
}

// testsLauncherAt returns the index of a launcher word in toks, -1 if none.
func testsLauncherAt(toks []string) int {
	for i, t := range toks {
		switch t[strings.LastIndexByte(t, '/')+1:] {
		case "mpirun", "mpiexec", "mpiexec.hydra", "orterun", "prterun", "srun":
			return i
		}
	}
	return -1
}

func testsNewLaunch(word string) testsLaunch {
	return testsLaunch{seen: true, srun: strings.HasSuffix(word, "srun")}
}

// testsCount parses a process or node count, 0 when it is not one.
func testsCount(s string) int {
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 || v >= 1<<20 {
		return 0
	}
	return v
}

// flags reads the launcher's options among toks (words that are not options
// are skipped: options this reader does not know and their values).
func (l *testsLaunch) flags(toks []string) {
	for i := 0; i < len(toks); i++ {
		name, val, hasVal := strings.Cut(toks[i], "=")
		if !strings.HasPrefix(name, "-") {
			continue
		}
		// srun's short options take their value attached too: -n16, -N2.
		if l.srun && !hasVal && len(name) > 2 && name[1] != '-' && strings.ContainsRune("nNc", rune(name[1])) {
			if testsCount(name[2:]) > 0 {
				name, val, hasVal = name[:2], name[2:], true
			}
		}
		value := func() string {
			if hasVal {
				return val
			}
			if i+1 < len(toks) {
				i++
				return toks[i]
			}
			return ""
		}
		if l.srun {
			switch name {
			case "-n", "--ntasks":
				l.total = testsCount(value())
			case "-N", "--nodes":
				v := value()
				if lo, hi, ok := strings.Cut(v, "-"); ok && lo == hi {
					v = lo // --nodes=2-2
				}
				l.nodes = testsCount(v)
			case "--ntasks-per-node":
				l.per = testsCount(value())
			case "-c", "--cpus-per-task":
				value()
				l.cpt = true
			}
			continue
		}
		switch name {
		case "-n", "-np", "--np", "--n", "-c":
			l.total = testsCount(value())
		case "-N", "-npernode", "--npernode", "-ppn", "--ppn", "-perhost", "--perhost":
			l.per = testsCount(value())
		case "--map-by", "-map-by":
			// ppr:8:node
			if f := strings.Split(value(), ":"); len(f) >= 3 && f[0] == "ppr" && strings.HasPrefix(f[2], "node") {
				l.per = testsCount(f[1])
			}
		case "-H", "--host", "-host", "--hosts", "-hosts":
			hosts := map[string]bool{}
			for _, h := range strings.Split(value(), ",") {
				if h, _, _ = strings.Cut(h, ":"); h != "" {
					hosts[h] = true
				}
			}
			l.nodes = len(hosts)
		}
	}
}

// np is the number of processes: 0 when no launcher was seen (one
// process), -1 when one was but its flags do not tell how many.
func (l *testsLaunch) np() int {
	switch {
	case !l.seen:
		return 0
	case l.total > 0:
		return l.total
	case l.per > 0 && l.nodes > 0:
		return l.per * l.nodes
	case l.srun && l.nodes > 0 && l.per == 0 && !l.cpt:
		return l.nodes // srun's default: one task per node
	}
	return -1
}

// testsParseRow parses a result row; key names its layout (number of
// parameter columns, whether the check columns are old float errors).
func testsParseRow(line string) (Row, string, bool) {
	var row Row
	f := strings.Fields(line)
	if len(f) < 7 || len(f) > 16 {
		return row, "", false
	}
	size, err1 := strconv.ParseInt(f[0], 10, 64)
	count, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || size < 0 || count < 0 {
		return row, "", false
	}
	if !testsIsWord(f[2]) {
		return row, "", false
	}
	// Copies, so that a row kept does not keep its whole line.
	row.Size, row.Count, row.Type, row.Root = size, count, strings.Clone(f[2]), -1
	rest := f[3:]
	params := 3
	if len(rest) > 0 && testsIsWord(rest[0]) && rest[0] != "N/A" {
		row.Redop = strings.Clone(rest[0])
		rest = rest[1:]
		params++
	}
	switch len(rest) {
	case 9, 5: // root + one or two groups
		root, err := strconv.Atoi(rest[0])
		if err != nil || root < -1 {
			return row, "", false
		}
		row.Root, row.HasRoot = root, true
		rest = rest[1:]
		params++
	case 8, 4:
	default:
		return row, "", false
	}
	old := false
	var groups []Result
	for len(rest) >= 4 {
		g, isOld, ok := testsParseGroup(rest[:4], row.Type)
		if !ok {
			return row, "", false
		}
		old = old || isOld
		groups = append(groups, g)
		rest = rest[4:]
	}
	row.OutOfPlace = groups[0]
	if len(groups) > 1 {
		g := groups[1]
		row.InPlace = &g
	}
	key := fmt.Sprintf("p%d-g%d", params, len(groups))
	if old {
		key += "-old"
	}
	return row, key, true
}

// testsIsWord reports whether s looks like a type or op name.
func testsIsWord(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	c := s[0]
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'
}

// testsParseGroup parses time, algbw, busbw and the check column.
func testsParseGroup(f []string, typ string) (Result, bool, bool) {
	var g Result
	vals := [3]float64{}
	for i := 0; i < 3; i++ {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return g, false, false
		}
		vals[i] = v
	}
	g.TimeUS, g.AlgBW, g.BusBW = vals[0], vals[1], vals[2]
	w := f[3]
	if w == "N/A" || w == "n/a" {
		g.Wrong = -1
		return g, false, true
	}
	if k, err := strconv.ParseInt(w, 10, 64); err == nil && k >= 0 {
		g.Wrong = k
		return g, false, true
	}
	if e, err := strconv.ParseFloat(w, 64); err == nil && !math.IsNaN(e) && !math.IsInf(e, 0) && strings.ContainsAny(w, "eE.") {
		g.Error = e
		if math.Abs(e) > testsTolerance(typ) {
			g.Wrong = 1
		}
		return g, true, true
	}
	return g, false, false
}

// resolve fills in the collective (from the layout if needed), the rank
// count and the peak.
func (b *testsBuilder) resolve() {
	t := &b.t
	// ranks
	switch {
	case len(b.rankSet) > 0:
		t.Ranks, t.RanksFrom = len(b.rankSet), "devices"
	case b.launch.np() < 0:
		// a launcher whose process count is not on its command line
	case b.cfgRanks > 0:
		t.Ranks, t.RanksFrom = b.cfgRanks*max(b.launch.np(), 1), "config"
	case b.cmdRanks > 0:
		t.Ranks, t.RanksFrom = b.cmdRanks*max(b.launch.np(), 1), "command"
	}
	ratio := testsSizeRatio(t.Rows) // size/(count*typesize), 0 if unknown
	if t.Collective == "" {
		t.Collective, t.CollectiveFrom = testsGuess(t, ratio), "layout"
	}
	if t.Ranks == 0 && ratio > 1 {
		switch t.Collective {
		case "all_gather", "reduce_scatter", "alltoall", "gather", "scatter", "hypercube":
			t.Ranks, t.RanksFrom = ratio, "size-count"
		}
	}
	for _, r := range t.Rows {
		for _, g := range []*Result{&r.OutOfPlace, r.InPlace} {
			if g != nil && g.BusBW > t.PeakBusBW {
				t.PeakBusBW, t.PeakSize = g.BusBW, r.Size
			}
		}
	}
}

// testsSizeRatio returns size/(count*typesize) from the largest row where it
// is a whole number, 0 if none.
func testsSizeRatio(rows []Row) int {
	best := int64(-1)
	ratio := 0
	for _, r := range rows {
		ts := testsTypeSize(r.Type)
		if ts == 0 || r.Count <= 0 || r.Count > math.MaxInt64/ts || r.Size <= best {
			continue
		}
		d := r.Count * ts
		if r.Size%d != 0 || r.Size/d > 1<<20 {
			continue
		}
		best, ratio = r.Size, int(r.Size/d)
	}
	return ratio
}

// testsGuess picks the collective from the layout; see the package comment.
func testsGuess(t *Test, ratio int) string {
	if len(t.Rows) == 0 {
		return "unknown"
	}
	r0 := t.Rows[0]
	reduces := r0.Redop != "" && r0.Redop != "none"
	rooted := r0.HasRoot && r0.Root >= 0
	allNA, oopChecked := true, false
	for _, r := range t.Rows {
		if r.InPlace == nil || r.InPlace.Wrong != -1 {
			allNA = false
		}
		if r.OutOfPlace.Wrong >= 0 {
			oopChecked = true
		}
	}
	allNA = allNA && oopChecked
	var cands []string
	switch {
	case allNA && !rooted:
		cands = []string{"sendrecv"}
	case rooted && reduces:
		cands = []string{"reduce"}
	case rooted:
		cands = []string{"broadcast", "gather", "scatter"}
	case reduces && ratio == 1:
		cands = []string{"all_reduce", "sendrecv"}
	case reduces && ratio > 1:
		cands = []string{"reduce_scatter"}
	case reduces:
		cands = []string{"all_reduce", "reduce_scatter", "sendrecv"}
	case ratio > 1:
		cands = []string{"all_gather", "alltoall"}
	case ratio == 1:
		cands = []string{"sendrecv"}
	default:
		cands = []string{"all_gather", "alltoall", "sendrecv"}
	}
	if len(cands) == 1 {
		return cands[0]
	}
	// Keep the candidates whose factor fits the observed busbw/algbw ratio.
	n := t.Ranks
	if n == 0 && ratio > 1 {
		n = ratio
	}
	obs, ok := testsObservedFactor(t.Rows)
	if !ok {
		return cands[0]
	}
	for _, c := range cands {
		cn := n
		if cn == 0 && c == "all_reduce" {
			// 2(n-1)/n fits any observed value in [1,2): accept it.
			if obs >= 0.99 && obs < 2.01 {
				return c
			}
			continue
		}
		if f, ok := BusBWFactor(c, cn); ok && math.Abs(f-obs) < 0.02*f+0.01 {
			return c
		}
		if cn == 0 && (c == "all_gather" || c == "alltoall" || c == "reduce_scatter") && obs >= 0.49 && obs < 1.0 {
			return c
		}
	}
	return "unknown"
}

// testsObservedFactor is the median busbw/algbw over values large enough
// (algbw >= 1 GB/s) for the two printed decimals not to matter.
func testsObservedFactor(rows []Row) (float64, bool) {
	var rs []float64
	for _, r := range rows {
		for _, g := range []*Result{&r.OutOfPlace, r.InPlace} {
			if g != nil && g.AlgBW >= 1 {
				rs = append(rs, g.BusBW/g.AlgBW)
			}
		}
	}
	if len(rs) == 0 {
		return 0, false
	}
	sort.Float64s(rs)
	return rs[len(rs)/2], true
}

// testsCheck checks table t, the i-th of the input, and passes each
// finding to add.
func testsCheck(i int, t *Test, opt Options, add func(doctor.Finding)) {
	name := fmt.Sprintf("table %d (%s, line %d)", i, t.Collective, t.Line)
	if t.Collective == "unknown" {
		add(doctor.Finding{Severity: doctor.SevInfo, Code: "collective-unknown",
			Message: fmt.Sprintf("%s: the collective could not be told from the layout; busbw not checked", name),
			Fix:     "include the command line or the '# Collective test starting' line"})
	}
	f, known := BusBWFactor(t.Collective, t.Ranks)
	if !known && t.Collective != "unknown" {
		add(doctor.Finding{Severity: doctor.SevInfo, Code: "ranks-unknown",
			Message: fmt.Sprintf("%s: rank count unknown; busbw of %s depends on it and was not checked", name, t.Collective),
			Fix:     "include the '# Using devices' block"})
	}
	// busbw vs algbw
	if known {
		bad := 0
		first := ""
		for j := range t.Rows {
			r := &t.Rows[j]
			for _, g := range []*Result{&r.OutOfPlace, r.InPlace} {
				if g == nil {
					continue
				}
				want := g.AlgBW * f
				if math.Abs(g.BusBW-want) > 0.005*(f+1)+1e-9 {
					if !r.BusBWMismatch {
						bad++
					}
					r.BusBWMismatch = true
					if first == "" {
						first = fmt.Sprintf("size %d: busbw %.2f, algbw %.2f x %.4g = %.2f", r.Size, g.BusBW, g.AlgBW, f, want)
					}
				}
			}
		}
		if bad > 0 {
			add(doctor.Finding{Severity: doctor.SevWarn, Code: "busbw-mismatch",
				Message: fmt.Sprintf("%s: %d row(s) whose busbw is not algbw x %.4g (%s, %d ranks), first %s", name, bad, f, t.Collective, t.Ranks, first),
				Fix:     "check the rank count and the collective; a tool that recomputes busbw differently is not comparable with nccl-tests"})
		}
	}
	// #wrong
	wrongRows, firstWrong := 0, int64(-1)
	for _, r := range t.Rows {
		w := r.OutOfPlace.Wrong > 0 || (r.InPlace != nil && r.InPlace.Wrong > 0)
		if w {
			wrongRows++
			if firstWrong < 0 {
				firstWrong = r.Size
			}
		}
	}
	if wrongRows > 0 {
		add(doctor.Finding{Severity: doctor.SevError, Code: "wrong-results",
			Message: fmt.Sprintf("%s: %d row(s) with wrong elements, first at size %d", name, wrongRows, firstWrong),
			Fix:     "results are corrupted: rerun with NCCL_DEBUG=WARN, check GPU/NIC errors (dmesg, Xid), and try NCCL_P2P_DISABLE=1 / NCCL_PROTO=Simple to isolate the path"})
	}
	if t.OutOfBounds > 0 {
		add(doctor.Finding{Severity: doctor.SevError, Code: "out-of-bounds-values",
			Message: fmt.Sprintf("%s: '# Out of bounds values : %d'", name, t.OutOfBounds),
			Fix:     "the test saw wrong data; see the rows with #wrong > 0"})
	}
	// footer average
	if t.HasAvg {
		sum, cnt := 0.0, 0
		for _, r := range t.Rows {
			sum += r.OutOfPlace.BusBW
			cnt++
			if r.InPlace != nil {
				sum += r.InPlace.BusBW
				cnt++
			}
		}
		avg := sum / float64(cnt)
		msg := fmt.Sprintf("%s: avg bus bandwidth %g GB/s (footer); peak %.2f GB/s at %d B", name, t.AvgBusBW, t.PeakBusBW, t.PeakSize)
		add(doctor.Finding{Severity: doctor.SevInfo, Code: "avg-busbw", Message: msg,
			Fix: "the average includes small, latency-bound sizes: compare the busbw of the largest sizes instead"})
		if math.Abs(avg-t.AvgBusBW) > 0.01*t.AvgBusBW+0.01 {
			add(doctor.Finding{Severity: doctor.SevInfo, Code: "avg-busbw-mismatch",
				Message: fmt.Sprintf("%s: rows average %.4g GB/s but the footer says %g: rows are missing (trimmed paste?) or were edited", name, avg, t.AvgBusBW)})
		}
	} else {
		add(doctor.Finding{Severity: doctor.SevInfo, Code: "peak-busbw",
			Message: fmt.Sprintf("%s: peak busbw %.2f GB/s at %d B (no avg bus bandwidth footer)", name, t.PeakBusBW, t.PeakSize)})
	}
	// expectation
	if opt.ExpectBusBW > 0 && !math.IsNaN(opt.ExpectBusBW) && !math.IsInf(opt.ExpectBusBW, 0) {
		var low []string
		checked := 0
		for _, r := range t.Rows {
			if r.Size < ExpectMinSize {
				continue
			}
			checked++
			best := r.OutOfPlace.BusBW
			if r.InPlace != nil && r.InPlace.BusBW > best {
				best = r.InPlace.BusBW
			}
			if best < testsExpectFraction*opt.ExpectBusBW {
				low = append(low, fmt.Sprintf("%d B: %.2f", r.Size, best))
			}
		}
		switch {
		case checked == 0:
			add(doctor.Finding{Severity: doctor.SevInfo, Code: "expect-busbw-unchecked",
				Message: fmt.Sprintf("%s: no size >= %d B, the expected busbw %g GB/s was not checked", name, ExpectMinSize, opt.ExpectBusBW),
				Fix:     "run with -e 1G or more"})
		case len(low) > 0:
			if len(low) > 8 {
				low = append(low[:8], "...")
			}
			add(doctor.Finding{Severity: doctor.SevWarn, Code: "busbw-below-expected",
				Message: fmt.Sprintf("%s: %d of %d sizes >= 64 MiB below 80%% of the expected %g GB/s (%s)", name, len(low), checked, opt.ExpectBusBW, strings.Join(low, ", ")),
				Fix:     "check with `goccl doctor nccl-log` which transport was used (NET/Socket instead of IB, no GDR, few channels) and `goccl doctor topo` for GPU-NIC locality"})
		}
	}
}

// WriteText prints the report: per table its collective, ranks and rows,
// rows whose busbw disagrees marked with "!", then the findings.
func (rep *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for i, t := range rep.Tests {
		fmt.Fprintf(&b, "table %d: %s (from %s), ", i+1, doctor.OneLine(t.Collective, 32), t.CollectiveFrom)
		if t.Ranks > 0 {
			fmt.Fprintf(&b, "%d ranks (from %s), ", t.Ranks, t.RanksFrom)
		} else {
			b.WriteString("ranks unknown, ")
		}
		fmt.Fprintf(&b, "%d rows, %s format, line %d\n", len(t.Rows), t.Format, t.Line)
		fmt.Fprintf(&b, "  %12s %12s %8s %6s %4s | %9s %7s %7s %6s | %9s %7s %7s %6s\n",
			"size(B)", "count", "type", "redop", "root", "time(us)", "algbw", "busbw", "#wrong", "time(us)", "algbw", "busbw", "#wrong")
		for _, r := range t.Rows {
			mark := " "
			if r.BusBWMismatch {
				mark = "!"
			}
			root := "-"
			if r.HasRoot {
				root = strconv.Itoa(r.Root)
			}
			redop := r.Redop
			if redop == "" {
				redop = "-"
			}
			fmt.Fprintf(&b, "%s %12d %12d %8s %6s %4s | %s", mark, r.Size, r.Count, doctor.OneLine(r.Type, 8), doctor.OneLine(redop, 8), root, testsFmtGroup(&r.OutOfPlace))
			if r.InPlace != nil {
				fmt.Fprintf(&b, " | %s", testsFmtGroup(r.InPlace))
			}
			b.WriteByte('\n')
		}
		if t.HasAvg {
			fmt.Fprintf(&b, "  avg bus bandwidth %g GB/s; ", t.AvgBusBW)
		} else {
			b.WriteString("  ")
		}
		fmt.Fprintf(&b, "peak busbw %.2f GB/s at %d B\n", t.PeakBusBW, t.PeakSize)
	}
	if rep.TablesNotListed > 0 {
		fmt.Fprintf(&b, "%d more tables checked, not listed\n", rep.TablesNotListed)
	}
	doctor.WriteFindings(&b, rep.Findings)
	_, err := io.WriteString(w, b.String())
	return err
}

func testsFmtGroup(g *Result) string {
	wrong := strconv.FormatInt(g.Wrong, 10)
	if g.Wrong < 0 {
		wrong = "N/A"
	} else if g.Error != 0 {
		wrong = strconv.FormatFloat(g.Error, 'e', 0, 64)
	}
	return fmt.Sprintf("%9.2f %7.2f %7.2f %6s", g.TimeUS, g.AlgBW, g.BusBW, wrong)
}
