package goccl

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/goccl/goccl/internal/algo"
	"github.com/goccl/goccl/internal/config"
)

// The probes of Init (algo.Probe). Over the network, 256 KiB transfers
// (2.1 ms each at 1 Gbit/s), one untimed (TCP's slow start and buffer
// growth, a shaper's burst) and three timed, of which the median counts:
// 8.4 ms of transfers at 1 Gbit/s, 42 ms at 200 Mbit/s (the whole probe,
// over 20 Inits on namespace hosts so shaped, 4 ranks on a loaded 2-vCPU
// VM: median 21 ms, 16-48, at 1 Gbit/s; median 55 ms, 49-74, at 200
// Mbit/s).
// Over shared memory, 64 KiB transfers, ten of them timed, the fastest
// counting, because the first pass through a ring touches its pages for
// the first time (0.1 to 0.4 ms per transfer on a 2-vCPU VM, against 10 to
// 20 µs once touched): a few ms in all.
var (
	probeIntra = algo.Probe{Pings: 10, Warmups: 1, Transfers: 10, Bytes: 64 << 10}
	probeInter = algo.Probe{Pings: 10, Warmups: 1, Transfers: 3, Bytes: 256 << 10, Median: true}
)

// probeCount is the Count of the probe's message headers, so that a rank
// that runs the probe while a peer runs a Barrier (Count 0) or agreeDirect's
// exchange (1), because their GOCCL_TUNER_PROBE differ, fails with a
// mismatch instead of taking one for the other.
const probeCount = 2

// tune runs the tuner's probe, the last step of Init, where the
// hierarchical schedules apply and GOCCL_TUNER_PROBE and GOCCL_ALGO leave
// the choice of AllReduce's schedule to the tuner: rank 0 measures a link
// within its host and one to the next host (algo.Group.ProbeHier), derives
// the crossovers from the measurements (algo.HierCrossovers) and
// broadcasts both (algo.Tuning), so that every rank decides alike. When
// the measurements are unusable (not positive, not finite) the fixed
// thresholds stay. A failure to exchange fails Init.
func (c *Comm) tune(ctx context.Context) error {
	probe, err := config.TunerProbe.Bool()
	if err != nil || !probe || !c.sel.Hierarchical() || c.sel.Forced(algo.KindAllReduce) != nil {
		return err
	}
	start := time.Now()
	ctx, err = c.begin(ctx, opBarrier, Uint8, 0, -1, probeCount)
	if err != nil {
		return err
	}
	h := c.group.Hierarchy()
	costs, measured, err := c.group.ProbeHier(ctx, &c.op, h, probeIntra, probeInter)
	var msg [algo.TuningBytes]byte
	if err == nil && measured {
		t := algo.Tuning{Costs: costs}
		t.HierMin, _ = algo.HierCrossovers(h.HostOf, costs)
		msg = t.Encode()
	}
	if err == nil {
		if err = c.group.Broadcast(ctx, &c.op, msg[:], msg[:], len(msg), 0); err != nil {
			c.explainMismatch(err) // before the message is made
			err = fmt.Errorf("tuner probe, receiving rank 0's measurements: %w", err)
		}
	}
	if err != nil {
		return c.end(opBarrier, &Error{Rank: c.rank, Op: "Init", Seq: c.op.Header.Seq, Err: err})
	}
	c.setFacts(func(f *algo.Facts) { f.Tuning = algo.DecodeTuning(msg[:]) })
	if err := c.end(opBarrier, nil); err != nil {
		return err
	}
	if c.rank == 0 {
		c.logTuning(time.Since(start))
	}
	return nil
}

// logTuning reports the probe's measurements and the crossovers
// (GOCCL_DEBUG=INFO, subsystem INIT).
func (c *Comm) logTuning(took time.Duration) {
	t := c.sel.Facts().Tuning
	measured := "measurements unusable, fixed thresholds"
	if t.Costs.Valid() {
		measured = fmt.Sprintf("inter-host %s, %s; intra-host %s, %s", rateString(t.Costs.Inter), latencyString(t.Costs.Inter),
			rateString(t.Costs.Intra), latencyString(t.Costs.Intra))
	}
	from := func(i int) string {
		if t.HierMin[i] == math.MaxInt {
			return "never"
		}
		return "from " + sizeString(t.HierMin[i])
	}
	c.log.Infof(subInit, "tuner: %s; hierarchical AllReduce %s, Broadcast %s, AllGather %s, ReduceScatter %s (probe %v)",
		measured, from(0), from(1), from(2), from(3), took.Round(10*time.Microsecond))
}

// rateString is a link's bandwidth in decimal units: "118 MB/s", "3.1 GB/s".
func rateString(l algo.LinkCost) string {
	bw := l.Bandwidth()
	for _, u := range []struct {
		scale float64
		name  string
	}{{1e9, "GB/s"}, {1e6, "MB/s"}, {1e3, "kB/s"}} {
		if bw >= u.scale {
			return fmt.Sprintf("%.3g %s", bw/u.scale, u.name)
		}
	}
	return fmt.Sprintf("%.3g B/s", bw)
}

// latencyString is a link's one-way latency (Alpha): "210 µs".
func latencyString(l algo.LinkCost) string {
	return fmt.Sprintf("%.3g µs", l.Alpha*1e6)
}

// sizeString is n bytes in binary units when it is a whole number of
// them: "16 KiB", "64 B".
func sizeString(n int) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}
