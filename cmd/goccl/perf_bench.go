package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
	"unsafe"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/progress"
)

// benchComm is the part of *goccl.Comm the benchmark uses (an interface so
// that tests can run the benchmark over a fake communicator).
type benchComm interface {
	Rank() int
	Size() int
	LocalRank() int
	Barrier(ctx context.Context) error
	AllReduceBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, op goccl.RedOp) error
	BroadcastBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, root int) error
	ReduceBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, op goccl.RedOp, root int) error
	AllGatherBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType) error
	ReduceScatterBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, op goccl.RedOp) error
	AllToAllBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType) error
	SendRecvBytes(ctx context.Context, send []byte, sendPeer int, recv []byte, recvPeer int, count int, dt goccl.DataType) error
}

var _ benchComm = (*goccl.Comm)(nil)

// asyncComm is the non-blocking part of *goccl.Comm that -z 0 and -z 3 use.
// A benchComm without it (the tests' fakes) runs those operations blocking.
type asyncComm interface {
	IAllReduceBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, op goccl.RedOp) (goccl.Request, error)
	IBroadcastBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, root int) (goccl.Request, error)
	IReduceBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, op goccl.RedOp, root int) (goccl.Request, error)
	IAllGatherBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType) (goccl.Request, error)
	IReduceScatterBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, op goccl.RedOp) (goccl.Request, error)
	IAllToAllBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType) (goccl.Request, error)
	ISendRecvBytes(ctx context.Context, send []byte, sendPeer int, recv []byte, recvPeer int, count int, dt goccl.DataType) (goccl.Request, error)
}

var _ asyncComm = (*goccl.Comm)(nil)

// guardBytes follow every buffer extent; a run must leave them alone.
const guardBytes = 256

// How -a combines the per-rank times (nccl-tests' -a values).
const (
	avgRank0 = 0
	avgMean  = 1
	avgMin   = 2
	avgMax   = 3
)

// bench runs the benchmark of one collective on one rank.
type bench struct {
	cfg   *perfConfig
	c     benchComm
	ac    asyncComm // nil: c has no non-blocking forms
	ctx   context.Context
	out   io.Writer // rank 0's report; io.Discard elsewhere
	diag  io.Writer // mismatch details (stderr)
	rank  int
	n     int
	coll  *coll
	diags int           // mismatch lines printed so far
	bar   *progress.Bar // rank 0's bar over the rows (nil: none)

	sendBuf, recvBuf   []byte // the buffers of the current test: -u elements into the bases
	sendBase, recvBase []byte // allocated once, maxBytes + guard + 8 bytes per -u each

	// The current test.
	dt    goccl.DataType
	op    goccl.RedOp
	root  int
	elt   int
	lay   layout
	pat   *pattern
	extS  int // out-of-place send extent, bytes
	extR  int // out-of-place receive extent, bytes
	extIP int // in-place region, bytes
	// Slices handed to the collective; they run to the end of the guard.
	oopSend, oopRecv, ipSend, ipRecv []byte

	// The last operation start issued and complete has not waited for:
	// operations run in issue order and a failed one fails the ones after,
	// so waiting for the last one waits for all.
	last    goccl.Request
	pending bool

	// Scratch for the cross-rank reductions of times and error counts.
	f64  [2]float64
	i64  [4]int64
	f64b []byte
	i64b []byte

	// Totals.
	bwSum   float64
	bwCount int
	errors  int64 // tests with wrong elements, plus out-of-bounds elements
	rows    []jsonRow
}

// testResult is one half of a row.
type testResult struct {
	us, algbw, busbw float64
	wrong            int64 // -1: not checked
	oob              int64
}

func newBench(ctx context.Context, cfg *perfConfig, c benchComm, out, diag io.Writer) *bench {
	b := &bench{cfg: cfg, c: c, ctx: ctx, out: out, diag: diag, rank: c.Rank(), n: c.Size(), coll: cfg.coll}
	if b.rank != 0 {
		b.out = io.Discard
	}
	b.ac, _ = c.(asyncComm)
	pad := 8 * cfg.unalign // the largest element times -u, as nccl-tests
	b.sendBase = alignedBytes(int(cfg.maxBytes) + guardBytes + pad)
	b.recvBase = alignedBytes(int(cfg.maxBytes) + guardBytes + pad)
	b.sendBuf, b.recvBuf = b.sendBase, b.recvBase
	b.f64b = unsafe.Slice((*byte)(unsafe.Pointer(&b.f64[0])), 16)
	b.i64b = unsafe.Slice((*byte)(unsafe.Pointer(&b.i64[0])), 32)
	return b
}

// alignedBytes allocates n bytes aligned for any element type.
func alignedBytes(n int) []byte {
	w := make([]uint64, (n+7)/8)
	if len(w) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

func (b *bench) printf(format string, args ...any) {
	fmt.Fprintf(b.out, format+"\n", args...)
}

// setup prepares the buffers' slices for size bytes of the current type.
func (b *bench) setup(size int64) {
	count := int(size / int64(b.elt))
	b.lay = b.coll.layoutFor(count, b.elt, b.n)
	b.extS = b.lay.sendCount * b.elt
	b.extR = b.lay.recvCount * b.elt
	b.extIP = b.lay.inplaceRegion(b.rank) * b.elt
	b.oopSend = b.sendBuf[:b.extS+guardBytes]
	b.oopRecv = b.recvBuf[:b.extR+guardBytes]
	b.ipSend = b.recvBuf[b.lay.sendInplaceOff*b.rank*b.elt : b.extIP+guardBytes]
	b.ipRecv = b.recvBuf[b.lay.recvInplaceOff*b.rank*b.elt : b.extIP+guardBytes]
}

// runOnce calls the collective once; it allocates nothing.
func (b *bench) runOnce(inPlace bool) error {
	send, recv := b.oopSend, b.oopRecv
	if inPlace {
		send, recv = b.ipSend, b.ipRecv
	}
	ctx, c, cnt, dt := b.ctx, b.c, b.lay.paramCount, b.dt
	switch b.coll.kind {
	case collAllReduce:
		return c.AllReduceBytes(ctx, send, recv, cnt, dt, b.op)
	case collAllGather:
		return c.AllGatherBytes(ctx, send, recv, cnt, dt)
	case collReduceScatter:
		return c.ReduceScatterBytes(ctx, send, recv, cnt, dt, b.op)
	case collBroadcast:
		return c.BroadcastBytes(ctx, send, recv, cnt, dt, b.root)
	case collReduce:
		return c.ReduceBytes(ctx, send, recv, cnt, dt, b.op, b.root)
	case collAllToAll:
		return c.AllToAllBytes(ctx, send, recv, cnt, dt)
	case collSendRecv:
		return c.SendRecvBytes(ctx, send, (b.rank+1)%b.n, recv, (b.rank-1+b.n)%b.n, cnt, dt)
	}
	return fmt.Errorf("unknown collective %v", b.coll.kind)
}

// issueOnce issues the collective once without waiting for it.
func (b *bench) issueOnce(inPlace bool) (goccl.Request, error) {
	send, recv := b.oopSend, b.oopRecv
	if inPlace {
		send, recv = b.ipSend, b.ipRecv
	}
	ctx, c, cnt, dt := b.ctx, b.ac, b.lay.paramCount, b.dt
	switch b.coll.kind {
	case collAllReduce:
		return c.IAllReduceBytes(ctx, send, recv, cnt, dt, b.op)
	case collAllGather:
		return c.IAllGatherBytes(ctx, send, recv, cnt, dt)
	case collReduceScatter:
		return c.IReduceScatterBytes(ctx, send, recv, cnt, dt, b.op)
	case collBroadcast:
		return c.IBroadcastBytes(ctx, send, recv, cnt, dt, b.root)
	case collReduce:
		return c.IReduceBytes(ctx, send, recv, cnt, dt, b.op, b.root)
	case collAllToAll:
		return c.IAllToAllBytes(ctx, send, recv, cnt, dt)
	case collSendRecv:
		return c.ISendRecvBytes(ctx, send, (b.rank+1)%b.n, recv, (b.rank-1+b.n)%b.n, cnt, dt)
	}
	return goccl.Request{}, fmt.Errorf("unknown collective %v", b.coll.kind)
}

// start is nccl-tests' startColl: it issues the collective once, without
// waiting for it when -z is 0 or 3 (and the communicator has non-blocking
// forms), running it to completion otherwise, with a barrier after it for
// -z 1.
func (b *bench) start(inPlace bool) error {
	if b.cfg.blocking == 1 || b.cfg.blocking == 2 || b.ac == nil {
		if err := b.runOnce(inPlace); err != nil {
			return err
		}
		if b.cfg.blocking == 1 {
			return b.c.Barrier(b.ctx)
		}
		return nil
	}
	r, err := b.issueOnce(inPlace)
	if err != nil {
		return err
	}
	b.last, b.pending = r, true
	return nil
}

// complete is nccl-tests' completeColl: it waits for what start issued.
func (b *bench) complete() error {
	if !b.pending {
		return nil
	}
	b.pending = false
	return b.last.Wait(b.ctx)
}

// opError wraps a collective's error with what was being run.
func (b *bench) opError(err error, size int64, inPlace bool, what string) error {
	place := "out-of-place"
	if inPlace {
		place = "in-place"
	}
	if b.cfg.timeout > 0 && errors.Is(err, context.DeadlineExceeded) {
		what += fmt.Sprintf(", timeout -T %d s", b.cfg.timeout)
	}
	return fmt.Errorf("rank %d: %s %s %s size %d %s (%s): %w", b.rank, b.coll.name, b.dt, b.opName(), size, place, what, err)
}

func (b *bench) opName() string {
	if b.coll.reduces || b.coll.opColumn {
		return b.op.String()
	}
	return "none"
}

func (b *bench) rootColumn() int {
	if b.coll.rooted {
		return b.root
	}
	return -1
}

// sizes lists the benchmark sizes: minBytes, then times stepFactor (when
// > 1) or plus stepBytes, up to maxBytes.
func (cfg *perfConfig) sizes() []int64 {
	var s []int64
	for size := cfg.minBytes; size <= cfg.maxBytes; {
		s = append(s, size)
		next := size + cfg.stepBytes
		if cfg.stepFactor > 1 {
			next = size * cfg.stepFactor
		}
		if next <= size { // overflow, or a step of 0 (rejected by the flags)
			break
		}
		size = next
	}
	return s
}

// skipTest reports whether run leaves out the test of dt and op: goccl
// (like NCCL's float-only avg) rejects integer avg.
func skipTest(c *coll, dt goccl.DataType, op goccl.RedOp) bool {
	return c.reduces && op == goccl.Avg && !dt.IsFloat()
}

// rowOverhead is what a row costs besides its bytes, in bytes: the
// latency-bound part of its iterations (tens of microseconds at a few GB/s).
const rowOverhead = 64 << 10

// rowWeights is the cost of each row run prints, in its order (one per
// size, test and cycle; nil for -N 0: no end), for the progress bar's
// ETA: its size plus rowOverhead, so that a sweep's large last rows count
// for what they take.
func (cfg *perfConfig) rowWeights(types []goccl.DataType, ops []goccl.RedOp, roots []int) []int64 {
	tests := 0
	for _, dt := range types {
		for _, op := range ops {
			if !skipTest(cfg.coll, dt, op) {
				tests += len(roots)
			}
		}
	}
	sizes := cfg.sizes()
	var w []int64
	for range tests * cfg.runCycles {
		for _, s := range sizes {
			w = append(w, s+rowOverhead)
		}
	}
	return w
}

// run benchmarks every (type, op, root) combination and prints the report.
func (b *bench) run(types []goccl.DataType, ops []goccl.RedOp, roots []int) error {
	for _, dt := range types {
		for _, op := range ops {
			if skipTest(b.coll, dt, op) {
				continue
			}
			for _, root := range roots {
				if err := b.runTest(dt, op, root); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// runTest is nccl-tests' TimeTest: warm up, then one row per size.
func (b *bench) runTest(dt goccl.DataType, op goccl.RedOp, root int) error {
	b.dt, b.op, b.root, b.elt = dt, op, root, dt.Size()
	// -u: misalign both buffers by that many elements (nccl-tests' unalign).
	off := b.cfg.unalign * b.elt
	b.sendBuf, b.recvBuf = b.sendBase[off:], b.recvBase[off:]
	kind := patCopy
	if b.coll.reduces {
		switch op {
		case goccl.Sum, goccl.Avg:
			kind = patSum
		case goccl.Prod:
			kind = patProd
		default:
			kind = patMinMax
		}
	}
	b.pat = newPattern(dt, kind, op, b.n)

	if err := b.c.Barrier(b.ctx); err != nil {
		return fmt.Errorf("rank %d: barrier: %w", b.rank, err)
	}
	for _, size := range []int64{b.cfg.maxBytes, b.cfg.minBytes} {
		b.setup(size)
		for i := 0; i < b.cfg.warmup; i++ {
			if err := b.start(false); err != nil {
				return b.opError(err, size, false, "warm-up")
			}
		}
		if err := b.complete(); err != nil {
			return b.opError(err, size, false, "warm-up")
		}
	}
	for cycle := 0; b.cfg.runCycles == 0 || cycle < b.cfg.runCycles; cycle++ {
		for _, size := range b.cfg.sizes() {
			b.setup(size)
			var res [2]testResult
			for ip := 0; ip < 2; ip++ {
				r, err := b.measure(size, ip == 1)
				if err != nil {
					return err
				}
				res[ip] = r
			}
			b.report(res)
			b.bar.Increment()
		}
	}
	return nil
}

// measure times one size, in or out of place, and checks the result.
func (b *bench) measure(size int64, inPlace bool) (testResult, error) {
	var res testResult
	if err := b.runOnce(inPlace); err != nil {
		return res, b.opError(err, size, inPlace, "first call")
	}
	if err := b.c.Barrier(b.ctx); err != nil {
		return res, fmt.Errorf("rank %d: barrier: %w", b.rank, err)
	}
	d, err := b.timedLoop(inPlace)
	if err != nil {
		return res, b.opError(err, size, inPlace, "timed loop")
	}
	sec, err := b.combineTime(d.Seconds() / float64(b.cfg.iters*b.cfg.aggIters))
	if err != nil {
		return res, fmt.Errorf("rank %d: combining times: %w", b.rank, err)
	}
	res.us = sec * 1e6
	res.algbw, res.busbw = b.coll.bandwidth(b.lay.paramCount, b.elt, b.n, sec)

	res.wrong = -1
	if b.cfg.check > 0 && (!inPlace || b.coll.inPlaceChecked) {
		res.wrong = 0
		for c := 0; c < b.cfg.check; c++ {
			b.initData(inPlace)
			if err := b.runOnce(inPlace); err != nil {
				return res, b.opError(err, size, inPlace, "check run")
			}
			wrong, oob := b.verify(size, inPlace)
			b.i64[0], b.i64[1] = wrong, oob
			if err := b.c.AllReduceBytes(b.ctx, b.i64b[:16], b.i64b[16:32], 2, goccl.Int64, goccl.Sum); err != nil {
				return res, fmt.Errorf("rank %d: summing error counts: %w", b.rank, err)
			}
			res.wrong, res.oob = b.i64[2], b.i64[3]
			if res.wrong != 0 || res.oob != 0 {
				break
			}
		}
	}
	return res, nil
}

// timedLoop is the loop of nccl-tests' BenchTime: -n iterations of -m
// operations each, started as -z says. It returns the time until all are
// done or, with -C 1, until all are issued; with -z 3 only the time of the
// operations counts, not the barrier after each iteration.
func (b *bench) timedLoop(inPlace bool) (time.Duration, error) {
	var collOnly time.Duration
	z3 := b.cfg.blocking == 3
	start := time.Now()
	for i := 0; i < b.cfg.iters; i++ {
		var t0 time.Time
		if z3 { // a clock read per iteration costs as much as an 8-byte operation's issue
			t0 = time.Now()
		}
		for a := 0; a < b.cfg.aggIters; a++ {
			if err := b.start(inPlace); err != nil {
				return 0, err
			}
		}
		if z3 {
			if err := b.complete(); err != nil {
				return 0, err
			}
			collOnly += time.Since(t0)
			if err := b.c.Barrier(b.ctx); err != nil {
				return 0, err
			}
		}
	}
	issued := time.Since(start)
	if err := b.complete(); err != nil {
		return 0, err
	}
	done := time.Since(start)
	switch {
	case z3:
		return collOnly, nil
	case b.cfg.cputime == 1:
		return issued, nil
	}
	return done, nil
}

// combineTime reduces the per-rank time across ranks as -a says.
func (b *bench) combineTime(sec float64) (float64, error) {
	b.f64[0] = sec
	var err error
	switch b.cfg.average {
	case avgRank0:
		err = b.c.BroadcastBytes(b.ctx, b.f64b[:8], b.f64b[8:16], 1, goccl.Float64, 0)
	case avgMean:
		err = b.c.AllReduceBytes(b.ctx, b.f64b[:8], b.f64b[8:16], 1, goccl.Float64, goccl.Sum)
		b.f64[1] /= float64(b.n)
	case avgMin:
		err = b.c.AllReduceBytes(b.ctx, b.f64b[:8], b.f64b[8:16], 1, goccl.Float64, goccl.Min)
	default:
		err = b.c.AllReduceBytes(b.ctx, b.f64b[:8], b.f64b[8:16], 1, goccl.Float64, goccl.Max)
	}
	return b.f64[1], err
}

// report prints a row and accumulates the totals.
func (b *bench) report(res [2]testResult) {
	size := b.lay.printedSize(b.elt)
	line := formatRowParams(size, int64(b.lay.paramCount), b.dt.String(), b.opName(), b.rootColumn())
	row := jsonRow{Size: size, Count: int64(b.lay.paramCount), Type: b.dt.String(), Redop: b.opName(), Root: rootColumn(b.rootColumn()),
		ActualIterations: b.cfg.iters}
	for i, r := range res {
		line += formatResult(r.us, r.algbw, r.busbw, r.wrong)
		b.bwSum += r.busbw
		b.bwCount++
		if r.wrong > 0 {
			b.errors++
		}
		b.errors += r.oob
		us := r.us
		jr := jsonResult{AlgBW: r.algbw, BusBW: r.busbw, OutOfBounds: r.oob}
		if b.cfg.cputime == 1 {
			jr.CPUTime = &us
		} else {
			jr.Time = &us
		}
		if r.wrong >= 0 {
			w := float64(r.wrong)
			jr.NWrong = &w
		}
		if i == 0 {
			row.OutOfPlace = jr
		} else {
			row.InPlace = jr
		}
	}
	b.printf("%s", line)
	if b.rank == 0 {
		b.rows = append(b.rows, row)
	}
}

// initData fills the send data for a checked run, the receive area and the
// guards with the sentinel.
func (b *bench) initData(inPlace bool) {
	in := b.pat.inputSeq(b.rank)
	if !inPlace {
		in.fill(b.sendBuf, b.lay.sendCount, 0)
		fillSentinel(b.sendBuf[b.extS : b.extS+guardBytes])
		fillSentinel(b.recvBuf[:b.extR+guardBytes])
		return
	}
	fillSentinel(b.recvBuf[:b.extIP+guardBytes])
	in.fill(b.recvBuf[b.lay.sendInplaceOff*b.rank*b.elt:], b.lay.sendCount, 0)
}

const maxDiags = 20 // mismatch lines per rank

func (b *bench) diagf(size int64, inPlace bool, format string, args ...any) {
	b.diags++
	if b.diags > maxDiags || b.diag == nil {
		return
	}
	place := "out-of-place"
	if inPlace {
		place = "in-place"
	}
	fmt.Fprintf(b.diag, "goccl perf: rank %d: %s %s %s root %d size %d %s: %s\n",
		b.rank, b.coll.name, b.dt, b.opName(), b.rootColumn(), size, place, fmt.Sprintf(format, args...))
	if b.diags == maxDiags {
		fmt.Fprintf(b.diag, "goccl perf: rank %d: (further mismatches not shown)\n", b.rank)
	}
}

// verify checks every element of this rank's result and returns the number
// of wrong elements and of elements written out of bounds (guards, parts
// of the buffers the operation must not write).
func (b *bench) verify(size int64, inPlace bool) (wrong, oob int64) {
	p, rank, n, lay, elt := b.pat, b.rank, b.n, b.lay, b.elt
	recvOff := 0 // elements from recvBuf[0] to the receive area
	if inPlace {
		recvOff = lay.recvInplaceOff * rank
	}
	area := b.recvBuf[recvOff*elt:]
	recvWritten := !(b.coll.kind == collReduce && rank != b.root) // non-root reduce receives nothing

	show := func(k int, wantI int64, wantF float64) {
		if b.diags >= maxDiags {
			b.diags++
			return
		}
		got, want := fmt.Sprint(p.codec.loadInt(area, k)), fmt.Sprint(wantI)
		if p.isFloat {
			got, want = fmt.Sprint(p.codec.loadFloat(area, k)), fmt.Sprint(wantF)
		}
		b.diagf(size, inPlace, "receive buffer element %d: got %s, want %s", recvOff+k, got, want)
	}
	// reducedAt checks count elements of area from element at against the
	// reductions of inputs idx0...
	reducedAt := func(at, count, idx0 int) {
		wrong += p.reducedSeq().mismatches(area[at*elt:], count, idx0, func(k int) bool {
			wi, wf := p.reduced(idx0 + k)
			if p.matches(area, at+k, wi, wf) {
				return true
			}
			show(at+k, wi, wf)
			return false
		})
	}
	// copiedAt checks against rank r's inputs idx0...
	copiedAt := func(at, count, r, idx0 int) {
		wrong += p.inputSeq(r).mismatches(area[at*elt:], count, idx0, func(k int) bool {
			wi, wf := p.copied(r, idx0+k)
			if p.matches(area, at+k, wi, wf) {
				return true
			}
			show(at+k, wi, wf)
			return false
		})
	}
	if recvWritten {
		base := lay.paramCount
		switch b.coll.kind {
		case collAllReduce, collReduce:
			reducedAt(0, lay.recvCount, 0)
		case collReduceScatter:
			reducedAt(0, lay.recvCount, rank*base)
		case collBroadcast:
			copiedAt(0, lay.recvCount, b.root, 0)
		case collAllGather:
			for j := 0; j < n; j++ {
				copiedAt(j*base, base, j, 0)
			}
		case collAllToAll:
			for j := 0; j < n; j++ {
				copiedAt(j*base, base, j, rank*base)
			}
		case collSendRecv:
			copiedAt(0, lay.recvCount, (rank-1+n)%n, 0)
		}
	}

	// Out of bounds: everything else the slices reached must be as it was.
	untouched := func(where string, buf []byte, fromElt, toElt int) { // sentinel expected
		for i := fromElt; i < toElt; {
			// Fast path: whole runs of sentinel bytes.
			c := min(4096, toElt-i)
			if allSentinel(buf[i*elt : (i+c)*elt]) {
				i += c
				continue
			}
			for k := i; k < i+c; k++ {
				if countModified(buf[k*elt:(k+1)*elt], elt) != 0 {
					oob++
					b.diagf(size, inPlace, "%s element %d was overwritten", where, k)
				}
			}
			i += c
		}
	}
	// inputIntact checks that buf's elements at.. still hold this rank's
	// inputs idx0...
	inputIntact := func(where string, buf []byte, at, count, idx0 int) {
		oob += p.inputSeq(rank).mismatches(buf[at*elt:], count, idx0, func(k int) bool {
			if p.matchesInput(buf, at+k, rank, idx0+k) {
				return true
			}
			b.diagf(size, inPlace, "%s element %d was overwritten", where, at+k)
			return false
		})
	}
	guard := guardBytes / elt
	if !inPlace {
		inputIntact("send buffer", b.sendBuf, 0, lay.sendCount, 0)
		untouched("send guard", b.sendBuf, lay.sendCount, lay.sendCount+guard)
		if recvWritten {
			untouched("receive guard", b.recvBuf, lay.recvCount, lay.recvCount+guard)
		} else {
			untouched("receive buffer (non-root)", b.recvBuf, 0, lay.recvCount+guard)
		}
		return wrong, oob
	}
	// In place: outside the receive area, the send data must be intact and
	// the rest of the region and the guard untouched.
	region := b.extIP / elt
	sendLo, sendHi := lay.sendInplaceOff*rank, lay.sendInplaceOff*rank+lay.sendCount
	recvLo, recvHi := recvOff, recvOff+lay.recvCount
	if !recvWritten {
		recvLo, recvHi = 0, 0
	}
	// Walk the region in runs that are entirely receive area, send data, or neither.
	for i := 0; i < region; {
		switch {
		case i >= recvLo && i < recvHi:
			i = recvHi
		case i >= sendLo && i < sendHi:
			end := sendHi
			if recvLo > i && recvLo < end {
				end = recvLo
			}
			inputIntact("send data outside the receive area", b.recvBuf, i, end-i, i-sendLo)
			i = end
		default:
			end := region
			for _, e := range []int{recvLo, sendLo} {
				if e > i && e < end {
					end = e
				}
			}
			untouched("region", b.recvBuf, i, end)
			i = end
		}
	}
	untouched("guard", b.recvBuf, region, region+guard)
	return wrong, oob
}

// gatherDevices collects every rank's pid, host and local rank.
func gatherDevices(ctx context.Context, c benchComm) ([]deviceInfo, error) {
	const rec = 256
	n := c.Size()
	send := make([]byte, rec)
	recv := make([]byte, rec*n)
	host, _ := os.Hostname()
	if len(host) > rec-16 {
		host = host[:rec-16]
	}
	put := func(b []byte, v uint32) { b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24) }
	get := func(b []byte) uint32 { return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24 }
	put(send[0:], uint32(os.Getpid()))
	put(send[4:], uint32(c.LocalRank()))
	put(send[8:], uint32(len(host)))
	copy(send[16:], host)
	if err := c.AllGatherBytes(ctx, send, recv, rec, goccl.Uint8); err != nil {
		return nil, err
	}
	devs := make([]deviceInfo, n)
	for r := range devs {
		b := recv[r*rec:]
		hl := min(int(get(b[8:])), rec-16)
		devs[r] = deviceInfo{Rank: r, Pid: int(get(b[0:])), Device: int(get(b[4:])), Host: string(b[16 : 16+hl])}
	}
	return devs, nil
}
