package goccl

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/goccl/goccl/internal/algo"
)

// hierKinds are the operations that have a hierarchical schedule, in the
// order a tuning message carries their crossovers.
var hierKinds = [...]opKind{opAllReduce, opBroadcast, opAllGather, opReduceScatter}

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

// tuning is the outcome of the tuner's probe, the same on every rank (rank
// 0 measures and derives it, and broadcasts it): what rank 0 measured
// (zero without a probe) and, for each of hierKinds, the smallest buffer
// that runs the hierarchical schedule (math.MaxInt: none does).
type tuning struct {
	costs   algo.Costs
	hierMin [len(hierKinds)]int
}

// tuningBytes is the size of an encoded tuning: four float64 and an int64
// per kind, little-endian.
const tuningBytes = 4*8 + len(hierKinds)*8

func (t *tuning) encode() (b [tuningBytes]byte) {
	for i, f := range [4]float64{t.costs.Intra.Alpha, t.costs.Intra.Beta, t.costs.Inter.Alpha, t.costs.Inter.Beta} {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(f))
	}
	for i, n := range t.hierMin {
		binary.LittleEndian.PutUint64(b[32+8*i:], uint64(int64(n)))
	}
	return b
}

func decodeTuning(b []byte) tuning {
	f := func(i int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])) }
	t := tuning{costs: algo.Costs{Intra: algo.LinkCost{Alpha: f(0), Beta: f(1)}, Inter: algo.LinkCost{Alpha: f(2), Beta: f(3)}}}
	for i := range t.hierMin {
		n := int64(binary.LittleEndian.Uint64(b[32+8*i:]))
		t.hierMin[i] = int(min(n, math.MaxInt)) // a 64-bit rank 0's MaxInt on a 32-bit rank
	}
	return t
}

// hierCrossovers is, for each of hierKinds, the smallest buffer from which
// the cost model (algo.CostModel) predicts the hierarchical schedule
// faster than the flat one the tuner would run instead, for ranks on hosts
// hostOf (Hierarchy.HostOf) whose links cost costs; ok is false, and the
// crossovers hierMinBytes, when costs are not usable measurements.
func hierCrossovers(hostOf []int, costs algo.Costs) (hierMin [len(hierKinds)]int, ok bool) {
	if !costs.Valid() {
		for i := range hierMin {
			hierMin[i] = hierMinBytes
		}
		return hierMin, false
	}
	m := algo.NewCostModel(hostOf, costs)
	hierMin[0] = algo.Crossover(
		func(n int) float64 { return m.AllReduce(n, flatAllReduce(m.P, n, false)) },
		func(n int) float64 { return m.AllReduceHier(n, interAlgoFor(m.Hosts, m.PerHost, n)) })
	for i, predict := range [...]func(int, bool) float64{m.Broadcast, m.AllGather, m.ReduceScatter} {
		hierMin[i+1] = algo.Crossover(func(n int) float64 { return predict(n, false) }, func(n int) float64 { return predict(n, true) })
	}
	return hierMin, true
}

// tunerDecides reports whether the tuner, not GOCCL_ALGO, chooses between
// the flat and the hierarchical schedules: nothing forced, or direct, which
// never runs across hosts.
func (c *Comm) tunerDecides() bool {
	return c.algoForced == algo.Auto || c.algoForced == algo.Direct && !c.group.Direct()
}

// tune runs the tuner's probe, the last step of Init, where the
// hierarchical schedules apply and GOCCL_TUNER_PROBE and GOCCL_ALGO leave
// the choice to it: rank 0 measures a link within its host and one to the
// next host (algo.Group.ProbeHier), derives the crossovers from the
// measurements and broadcasts both, so that every rank decides alike. When
// the measurements are unusable (not positive, not finite) the fixed
// thresholds stay. A failure to exchange fails Init.
func (c *Comm) tune(ctx context.Context) error {
	if !c.hierarchical() || !c.tunerProbe || !c.tunerDecides() {
		return nil
	}
	start := time.Now()
	ctx, err := c.begin(ctx, opBarrier, Uint8, 0, -1, probeCount)
	if err != nil {
		return err
	}
	h := c.group.Hierarchy()
	costs, measured, err := c.group.ProbeHier(ctx, &c.op, h, probeIntra, probeInter)
	var msg [tuningBytes]byte
	if err == nil && measured {
		t := tuning{costs: costs}
		t.hierMin, _ = hierCrossovers(h.HostOf, costs)
		msg = t.encode()
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
	c.tuned = decodeTuning(msg[:])
	for i, k := range hierKinds {
		c.hierMin[k] = c.tuned.hierMin[i]
	}
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
	t := &c.tuned
	measured := "measurements unusable, fixed thresholds"
	if t.costs.Valid() {
		measured = fmt.Sprintf("inter-host %s, %s; intra-host %s, %s", rateString(t.costs.Inter), latencyString(t.costs.Inter),
			rateString(t.costs.Intra), latencyString(t.costs.Intra))
	}
	from := func(i int) string {
		if t.hierMin[i] == math.MaxInt {
			return "never"
		}
		return "from " + sizeString(t.hierMin[i])
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
