// Command ddp-mnist trains a multi-layer perceptron (about a million
// parameters) on MNIST with synchronous data-parallel Adam over goccl: every
// rank holds a replica of the model, takes its shard of each global batch,
// and package ddp averages the float32 gradients: they live in buckets, and
// each bucket's AllReduce(Avg) is issued as soon as the backward pass has
// finished its part of the gradient (weight gradients are computed in blocks
// of -chunk-rows rows, so a large layer spans several buckets). By default
// (-overlap=ab) the odd steps do that and the even ones reduce every bucket
// only after the whole backward pass, so one run measures the exposed
// communication with and without overlap under the same conditions; the
// arithmetic, hence the training, is the same either way. The matrix
// products go through gonum's float32 BLAS.
//
//	go run ./cmd/goccl run -np 4 ./examples/ddp-mnist
//	go run ./cmd/goccl run -np 4 ./examples/ddp-mnist -overlap=false
//	go run ./cmd/goccl run -np 4 ./examples/ddp-mnist -steps 200 -compress bf16
//	go run ./examples/ddp-mnist          # world size 1
//
// Rank 0 prints one line per epoch (with the share of the step time the
// gradient communication was exposed, i.e. Wait was blocked, per overlap
// setting), the final test accuracy, whether the parameters ended up
// bit-identical on all ranks (checked with collectives), the exposed
// communication per step with and without overlap, and a summary line for
// scripts (on a terminal it also shows a bar over each epoch's steps on
// stderr, see GOCCL_PROGRESS):
//
//	summary: ranks=4 batch=128 steps=200 warmup=10 step_ms=21.5 compute_ms=16.2 wait_ms=5.3 bytes_per_step=4275240 accuracy=0.9512 loss=0.1623 overlap=true bucket_mb=0.5 compress=none wait_ms_overlap=5.3 wait_ms_nooverlap=0 chunk_rows=128 step_p50_ms=21.1 step_p99_ms=24.8 comm_ms=9.6 comm_overlap_pct=44.79
//
// step_ms is rank 0's mean wall time of a whole step (batch preparation,
// forward, backward, gradient reduction, Adam update) over the steps after
// the first warmup; wait_ms the mean time ddp's Wait was blocked in them
// (Stats.Exposed), compute_ms their difference; bytes_per_step the gradient
// payload rank 0 put into AllReduce per step (Stats.CommBytes);
// wait_ms_overlap and wait_ms_nooverlap wait_ms over the steps of each
// overlap setting; step_p50_ms and step_p99_ms the median and 99th
// percentile (nearest rank) of rank 0's step times after the warmup, the
// step-time jitter a congested fabric shows; comm_ms the mean time the
// gradient AllReduces ran per step (the union of their spans, Stats.Comm)
// and comm_overlap_pct the share of it that ran before Wait, behind the
// step's compute (Stats.CommHidden): what `goccl doctor trace --skip
// WARMUP` reports as rank 0's overlap on the GOCCL_TRACE_FILE trace of
// the run.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/examples/internal/exmain"
	"github.com/goccl/goccl/examples/internal/mnist"
	"github.com/goccl/goccl/internal/progress"
)

// The example's gradient layout. With ddp's defaults (PyTorch's 25 MiB cap)
// this 4.3 MB model has two buckets, the second holding the first layer's
// whole 3.2 MB weight gradient, which is final only when the backward pass
// ends, so almost nothing can overlap. Computed in blocks of 128 rows, each
// block its own ddp tensor, with a 0.5 MiB cap it spans 8 buckets, all but
// one issued while later blocks are computed (10 buckets in all). Measured
// on 2 cores (docs/benchmarks.md, issue 14).
const (
	defaultChunkRows = 128
	defaultBucketMB  = 0.5
)

// config holds the command-line settings.
type config struct {
	epochs  int
	steps   int   // > 0: stop after this many steps in total (and -epochs is ignored)
	batch   int   // global batch size, split over the ranks
	hidden  []int // hidden layer widths
	lr      float64
	seed    uint64
	tr      trainerOptions
	overlap overlapMode
	// elastic: survive rank failures and take joiners in (elastic.go);
	// join: this process joins a running job (goccl.Join) instead of
	// starting one; killRank, killAtEpoch: the chaos test.
	elastic, join         bool
	killRank, killAtEpoch int
	// dataParallel > 0: the DataParallel pattern, this many replicas in
	// one process (dataparallel.go), instead of DDP.
	dataParallel int
}

// overlapMode is the -overlap flag: on, off, or ab (the odd steps with
// overlap, the even ones without: both measured in one run, under the same
// conditions, for a side-by-side figure; the arithmetic is the same either
// way, so the training is too).
type overlapMode int

const (
	overlapAB overlapMode = iota
	overlapOn
	overlapOff
)

func (m *overlapMode) String() string {
	return [...]string{"ab", "true", "false"}[*m]
}

func (m *overlapMode) Set(v string) error {
	switch v {
	case "ab":
		*m = overlapAB
	case "true", "on", "1":
		*m = overlapOn
	case "false", "off", "0":
		*m = overlapOff
	default:
		return fmt.Errorf("want true, false or ab")
	}
	return nil
}

// IsBoolFlag lets -overlap alone mean -overlap=true.
func (m *overlapMode) IsBoolFlag() bool { return true }

func (c config) sizes() []int {
	return append(append([]int{mnist.Features}, c.hidden...), mnist.Classes)
}

func parseFlags(args []string) (config, error) {
	var cfg config
	var hidden string
	fs := flag.NewFlagSet("ddp-mnist", flag.ContinueOnError)
	fs.IntVar(&cfg.epochs, "epochs", 5, "training epochs")
	fs.IntVar(&cfg.batch, "batch", 128, "global batch size (split over the ranks; need not divide evenly)")
	fs.StringVar(&hidden, "hidden", "1024,256", "comma-separated hidden layer widths")
	fs.Float64Var(&cfg.lr, "lr", 1e-3, "Adam learning rate at the start (cosine decay towards 0 over the run)")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the initialisation and the shuffling")
	cfg.overlap = overlapAB
	fs.Var(&cfg.overlap, "overlap", "true: reduce each gradient bucket as soon as the backward pass has finished it; false: all after the backward pass; ab: alternate the two step by step and report both")
	fs.Float64Var(&cfg.tr.bucketMB, "bucket-mb", defaultBucketMB, "gradient bucket cap in MiB (the first bucket: 1 MiB; ddp's default is PyTorch's 25)")
	fs.IntVar(&cfg.tr.chunkRows, "chunk-rows", defaultChunkRows, "compute and register weight gradients in blocks of this many rows, so a large layer's gradient spans several buckets (0: whole matrices)")
	fs.IntVar(&cfg.steps, "steps", 0, "stop after this many steps in total, the last epoch partial (0: -epochs full epochs)")
	fs.StringVar(&cfg.tr.compress, "compress", "none", "gradient compression hook: none, fp16 (ddp.FP16Compress) or bf16 (ddp.BF16Compress)")
	fs.BoolVar(&cfg.elastic, "elastic", false, "survive rank failures: agree on every step's commit, shrink after a failure, grow when processes join")
	fs.BoolVar(&cfg.join, "join", false, "join a running elastic job (goccl.Join) instead of starting one (implies -elastic; set by goccl run --max-restarts for a replacement)")
	fs.IntVar(&cfg.killRank, "kill-rank", -1, "chaos test: the process that starts as this rank kills itself (SIGKILL) before the first step of -kill-at-epoch (implies -elastic)")
	fs.IntVar(&cfg.killAtEpoch, "kill-at-epoch", 2, "chaos test: the epoch of -kill-rank's death")
	fs.IntVar(&cfg.dataParallel, "dataparallel", 0, "N > 0: no communicator: one process drives N replicas, the DataParallel pattern (replicate, scatter, gather and add the gradients on the main replica), for comparison with DDP")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.tr.noOverlap = cfg.overlap == overlapOff
	// A replacement that goccl run --max-restarts started joins the job.
	cfg.join = cfg.join || goccl.Joining()
	cfg.elastic = cfg.elastic || cfg.join || cfg.killRank >= 0
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, f := range strings.Split(hidden, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || w < 1 {
			return cfg, fmt.Errorf("-hidden: %q is not a positive width", f)
		}
		cfg.hidden = append(cfg.hidden, w)
	}
	switch {
	case cfg.epochs < 1:
		return cfg, fmt.Errorf("-epochs must be >= 1")
	case cfg.batch < 1:
		return cfg, fmt.Errorf("-batch must be >= 1")
	case !(cfg.lr > 0):
		return cfg, fmt.Errorf("-lr must be > 0")
	case !(cfg.tr.bucketMB > 0):
		return cfg, fmt.Errorf("-bucket-mb must be > 0")
	case cfg.tr.chunkRows < 0:
		return cfg, fmt.Errorf("-chunk-rows must be >= 0")
	case cfg.steps < 0:
		return cfg, fmt.Errorf("-steps must be >= 0")
	case cfg.dataParallel < 0 || (cfg.dataParallel > 0 && cfg.elastic):
		return cfg, fmt.Errorf("-dataparallel must be >= 0, and cannot be elastic")
	case cfg.tr.compress != "none" && cfg.tr.compress != "fp16" && cfg.tr.compress != "bf16":
		return cfg, fmt.Errorf("-compress must be none, fp16 or bf16")
	}
	return cfg, nil
}

// result is what a training run ends with (the same on every rank).
type result struct {
	lastLoss     float64
	testAccuracy float64
	identical    bool
	worldSize    int
	numParams    int
	steps        int // steps run
}

// warmupSteps is the number of first steps the summary's timings leave out.
func warmupSteps(total int) int { return min(10, total/2) }

// train runs the whole job on one rank (c == nil: a single process without
// collectives). Only the writer out sees output; pass io.Discard on ranks
// other than 0.
func train(ctx context.Context, c *goccl.Comm, cfg config, trainSet, testSet *mnist.Dataset, out io.Writer) (result, error) {
	return trainElastic(ctx, c, cfg, trainSet, testSet, out, nil)
}

// trainElastic is train, elastic when el is not nil: then every rank
// passes the same out, which whoever is rank 0 at the moment writes to.
func trainElastic(ctx context.Context, c *goccl.Comm, cfg config, trainSet, testSet *mnist.Dataset, out io.Writer, el *elastic) (result, error) {
	t, err := newTrainer(ctx, c, cfg.sizes(), cfg.seed, cfg.lr, cfg.tr)
	if err != nil {
		return result{}, err
	}
	w := func() io.Writer { return out }
	pos := position{epoch: 1}
	if el != nil {
		t.elastic, w = true, func() io.Writer { return el.out(t) }
		if el.joined {
			if pos, err = t.syncState(ctx, pos); err != nil {
				return result{}, err
			}
			fmt.Fprintf(os.Stderr, "ddp-mnist: joined as rank %d of %d at epoch %d step %d\n", t.rank, t.size, pos.epoch, pos.step)
		}
	}
	n := trainSet.Len()
	stepsPerEpoch := (n + cfg.batch - 1) / cfg.batch
	totalSteps, step := cfg.epochs*stepsPerEpoch, pos.step
	epochs := cfg.epochs
	if cfg.steps > 0 {
		totalSteps, epochs = cfg.steps, (cfg.steps+stepsPerEpoch-1)/stepsPerEpoch
	}
	warmup := warmupSteps(totalSteps)
	var timed, waited time.Duration // over the steps after the warm-up
	var comm, hidden time.Duration  // the gradient AllReduces' time and its part before Wait, ditto
	var stepTimes []time.Duration   // each step's after the warm-up
	var bytesPerStep int64
	var modes [2]modeStats // [0]: steps without overlap, [1]: with, after the warm-up
	res := result{worldSize: t.size, numParams: len(t.model.Params)}
	fmt.Fprintf(w(), "MLP %v: %d parameters; %d ranks, global batch %d, %d train / %d test images; %d gradient buckets, overlap %v\n",
		cfg.sizes(), res.numParams, t.size, cfg.batch, n, testSet.Len(), len(t.dp.Buckets()), cfg.overlap.String())
	// The epoch's steps on rank 0's terminal, erased if an error ends the run.
	var bar *progress.Bar
	defer func() { bar.Abort() }()
	for epoch := pos.epoch; epoch <= epochs; epoch++ {
		// Every rank draws the same permutation: same seed, same epoch.
		perm := rand.New(rand.NewPCG(cfg.seed, uint64(epoch))).Perm(n)
		loss := []float64{0, 0} // summed loss, samples
		var epochModes [2]modeStats
		start, epochSteps := time.Now(), 0
		bar = exmain.EpochBar(t.rank, epoch, epochs, min(stepsPerEpoch, totalSteps-step))
		first := 0
		if epoch == pos.epoch {
			first = pos.offset
		}
		for s := first; s < n && step < totalSteps; s += cfg.batch {
			if el != nil {
				el.chaos(epoch)
			}
			// Cosine decay of the learning rate from lr towards 0.
			t.opt.lr = exmain.CosineLR(cfg.lr, step, totalSteps)
			step++
			epochSteps++
			if cfg.overlap == overlapAB {
				t.overlap = step%2 == 1
			}
			t0 := time.Now()
			l, k, err := t.elasticStep(ctx, el, trainSet, perm[s:min(s+cfg.batch, n)], position{epoch, s + cfg.batch, step})
			if err != nil {
				return res, fmt.Errorf("epoch %d: %w", epoch, err)
			}
			dt, st := time.Since(t0), t.dp.Stats()
			m := 0
			if t.overlap {
				m = 1
			}
			epochModes[m].add(dt, st.Exposed)
			if step > warmup {
				stepTimes = append(stepTimes, dt)
				timed += dt
				waited += st.Exposed
				comm += st.Comm
				hidden += st.CommHidden
				bytesPerStep = st.CommBytes
				modes[m].add(dt, st.Exposed)
			}
			loss[0] += l
			loss[1] += float64(k)
			bar.Increment()
		}
		bar.Done()
		elapsed := time.Since(start)
		if err := t.sumAll(ctx, loss); err != nil {
			return res, fmt.Errorf("epoch %d: loss allreduce: %w", epoch, err)
		}
		acc, err := t.Evaluate(ctx, testSet)
		if err != nil {
			return res, fmt.Errorf("epoch %d: %w", epoch, err)
		}
		res.lastLoss, res.testAccuracy = loss[0]/loss[1], acc
		// Exposed communication: the time Wait was blocked, i.e. the gradient
		// AllReduce not hidden behind the backward pass.
		fmt.Fprintf(w(), "epoch %d loss %.4f test-accuracy %.4f step %.1f ms allreduce exposed %s\n", epoch, res.lastLoss, acc,
			float64(elapsed.Microseconds())/1e3/float64(epochSteps), exposedText(epochModes))
	}
	res.steps, res.worldSize = step, t.size
	if res.identical, err = t.ParamsIdentical(ctx); err != nil {
		return res, err
	}
	yesNo := map[bool]string{true: "yes", false: "no"}
	fmt.Fprintf(w(), "final test accuracy: %.4f\n", res.testAccuracy)
	fmt.Fprintf(w(), "parameters identical on all %d ranks: %s\n", t.size, yesNo[res.identical])
	if el != nil {
		el.summary(w())
	}
	if modes[0].steps > 0 && modes[1].steps > 0 {
		fmt.Fprintf(w(), "exposed communication per step: with overlap %.2f ms (%.1f%% of %.1f ms), without %.2f ms (%.1f%% of %.1f ms)\n",
			modes[1].exposedMS(), modes[1].exposedPct(), modes[1].stepMS(), modes[0].exposedMS(), modes[0].exposedPct(), modes[0].stepMS())
	}
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(max(step-warmup, 1)) }
	fmt.Fprintf(w(), "summary: ranks=%d batch=%d steps=%d warmup=%d step_ms=%.3f compute_ms=%.3f wait_ms=%.3f bytes_per_step=%d accuracy=%.4f loss=%.4f overlap=%v bucket_mb=%g compress=%s wait_ms_overlap=%.3f wait_ms_nooverlap=%.3f chunk_rows=%d step_p50_ms=%.3f step_p99_ms=%.3f comm_ms=%.3f comm_overlap_pct=%.2f\n",
		t.size, cfg.batch, step, warmup, ms(timed), ms(timed-waited), ms(waited), bytesPerStep, res.testAccuracy, res.lastLoss, cfg.overlap.String(), cfg.tr.bucketMB, cmp.Or(cfg.tr.compress, "none"),
		modes[1].exposedMS(), modes[0].exposedMS(), cfg.tr.chunkRows, percentileMS(stepTimes, 50), percentileMS(stepTimes, 99),
		ms(comm), overlapPct(hidden, comm))
	return res, nil
}

// overlapPct is hidden as a percentage of comm (0 without communication).
func overlapPct(hidden, comm time.Duration) float64 {
	if comm <= 0 {
		return 0
	}
	return 100 * hidden.Seconds() / comm.Seconds()
}

// percentileMS is the p-th percentile of ds in milliseconds, by the
// nearest-rank method (the smallest value with at least p % of ds at or
// below it); 0 for none. It sorts ds.
func percentileMS(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(p/100*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)].Seconds() * 1e3
}

// modeStats sums the steps of one overlap setting.
type modeStats struct {
	steps         int
	step, exposed time.Duration
}

func (m *modeStats) add(step, exposed time.Duration) {
	m.steps++
	m.step += step
	m.exposed += exposed
}

func (m modeStats) stepMS() float64    { return m.step.Seconds() * 1e3 / float64(max(m.steps, 1)) }
func (m modeStats) exposedMS() float64 { return m.exposed.Seconds() * 1e3 / float64(max(m.steps, 1)) }
func (m modeStats) exposedPct() float64 {
	if m.step == 0 {
		return 0
	}
	return 100 * m.exposed.Seconds() / m.step.Seconds()
}

// exposedText is the exposed communication of an epoch's steps: the share
// of the step time, per overlap setting when both ran.
func exposedText(ms [2]modeStats) string {
	switch {
	case ms[0].steps > 0 && ms[1].steps > 0:
		return fmt.Sprintf("%.1f%% of step with overlap, %.1f%% without", ms[1].exposedPct(), ms[0].exposedPct())
	case ms[1].steps > 0:
		return fmt.Sprintf("%.1f%% of step", ms[1].exposedPct())
	}
	return fmt.Sprintf("%.1f%% of step", ms[0].exposedPct())
}

func run(ctx context.Context, args []string, stdout io.Writer) (rank int, err error) {
	rank = -1 // not known before Init
	cfg, err := parseFlags(args)
	if err != nil {
		return rank, err
	}
	trainSet, testSet, err := mnist.Load()
	if err != nil {
		return rank, err
	}
	if cfg.dataParallel > 0 {
		return 0, runDataParallel(ctx, cfg, trainSet, testSet, stdout)
	}
	if cfg.elastic {
		return runElastic(ctx, cfg, trainSet, testSet, stdout)
	}
	return exmain.WithComm(ctx, stdout, func(c *goccl.Comm, out io.Writer) error {
		res, err := train(ctx, c, cfg, trainSet, testSet, out)
		if err == nil && !res.identical {
			err = errors.New("the ranks' parameters diverged")
		}
		return err
	})
}

func main() { exmain.Main("ddp-mnist", run) }
