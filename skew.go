package goccl

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/transport"
	"github.com/prometheus/client_golang/prometheus"
)

// StragglerWindow is how many of a communicator's last operations
// Stragglers looks back on.
const StragglerWindow = 1000

// Stragglers is the arrival skew of a communicator's last operations, as
// one rank knows it (Comm.Stragglers). Every collective starts with each
// rank's entry time, and the messages of the operation carry the latest
// entry known so far (see docs/design.md, "Arrival skew"): at the end of an
// AllReduce, AllGather, ReduceScatter, AllToAll, AllToAllv or Barrier every
// rank knows which rank entered last and how long after the first, the
// root of a Reduce or a Gather knows it too, and the other operations
// (Broadcast, Scatter, point to point, groups, CollNet's AllReduce) are
// not counted. Entry times are wall-clock: on one host exact to about a
// microsecond, across hosts only as good as the hosts' clock
// synchronization (NTP: often a millisecond or worse; PTP: microseconds).
type Stragglers struct {
	// Ops is the number of operations counted: the last ones whose last
	// arrival this rank knows, at most StragglerWindow.
	Ops int
	// Ranks has one entry per rank of the communicator, by rank.
	Ranks []RankLateness
}

// RankLateness is one rank's share of Stragglers' operations.
type RankLateness struct {
	Rank int
	// Last is how many of the operations this rank entered last, Fraction
	// the same as a share of Stragglers.Ops (0 when there are none).
	Last     int
	Fraction float64
	// Median and P95 are how long after the first rank this rank entered
	// the operations it entered last (to the microsecond; 0 when Last is 0).
	Median, P95 time.Duration
}

// Worst is the rank that entered last most often (the lowest rank on a
// tie); false when no operation is counted.
func (s Stragglers) Worst() (RankLateness, bool) {
	var worst RankLateness
	found := false
	for _, r := range s.Ranks {
		if r.Last > worst.Last {
			worst, found = r, true
		}
	}
	return worst, found
}

// String says who arrived last most often: "rank 5 arrived last in 86 %
// of the last 1,000 operations, 3.2ms late at the median (p95 4.1ms)".
func (s Stragglers) String() string {
	w, ok := s.Worst()
	if !ok {
		return "no operation's last arrival known"
	}
	return fmt.Sprintf("rank %d arrived last in %.0f %% of the last %s operations, %v late at the median (p95 %v)",
		w.Rank, 100*w.Fraction, thousands(s.Ops), w.Median, w.P95)
}

// thousands formats n with comma separators: 1,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Stragglers reports which ranks entered this rank's last operations
// last, and how late (see the type). It is safe to call from any
// goroutine, also while an operation is running or stuck; it then leaves
// out up to the last 255 operations. With GOCCL_ARRIVAL_SKEW=0, on a
// communicator of one rank or a nil one, it counts no operation.
func (c *Comm) Stragglers() Stragglers {
	if c == nil {
		return Stragglers{}
	}
	if c.skew == nil {
		return Stragglers{Ranks: make([]RankLateness, c.size)}
	}
	return skewReport(c.skewWindow(), c.size)
}

// skewWindow copies the window's entries (in no particular order): all of
// them when no operation runs, else those of the sealed chunks.
func (c *Comm) skewWindow() []skewEntry {
	if c.mu.TryLock() {
		// Entries are written by end, under c.mu: nothing writes now.
		defer c.mu.Unlock()
		return c.skew.window(true)
	}
	return c.skew.window(false)
}

// skewStats is a communicator's record of the last operations' arrivals,
// in chunks of skewChunk entries used in turn. The operation that ends
// writes its entry into the current chunk (c.mu held) with no lock of its
// own: an atomic operation would cost 1-2 % of a small AllReduce. A full
// chunk is sealed under mu's write lock, and readers that cannot take
// c.mu (an operation runs) read the sealed chunks under its read lock;
// with one chunk more than the window needs, the writer never writes a
// chunk a reader may be reading.
type skewStats struct {
	wall0 int64     // Unix ns at mono0
	mono0 time.Time // has a monotonic reading: entry costs one clock read
	size  int

	chunks [skewChunks][skewChunk]skewEntry
	cur    int // the chunk being written (c.mu)
	fill   int // entries in it (c.mu)

	mu     sync.RWMutex
	sealed int // chunks sealed so far; chunk i is chunks[i%skewChunks]
}

// Chunks: skewChunks-1 sealed ones hold the window, and one is written.
const (
	skewChunk  = 256
	skewChunks = (StragglerWindow+skewChunk-1)/skewChunk + 1
)

// skewEntry is one operation: the rank that entered last and its
// lateness in microseconds.
type skewEntry struct {
	rank int32
	lag  uint32
}

// newSkewStats returns the record for a communicator of size ranks, or
// nil when GOCCL_ARRIVAL_SKEW=0 or there is no other rank.
// clock0 is the communicator's clock base (Comm.clock0).
func newSkewStats(size int, clock0 time.Time) (*skewStats, error) {
	on, err := config.ArrivalSkew.Bool()
	if err != nil || !on || size < 2 {
		return nil, err
	}
	return &skewStats{wall0: clock0.UnixNano(), mono0: clock0, size: size}, nil
}

// entry is this rank's entry into an operation at mono after mono0: the
// wall clock through the monotonic clock (one vDSO call instead of two; a
// step of the wall clock after Init is not seen, NTP's slewing is).
func (s *skewStats) entry(rank int, mono time.Duration) transport.Arrival {
	return transport.Arrival{Rank: int32(rank), At: s.wall0 + int64(mono)}
}

// add records one operation's last arrival (c.mu held).
func (s *skewStats) add(a transport.Arrival) {
	if uint32(a.Rank) >= uint32(s.size) {
		return // not a rank of this communicator: a peer's bug, not counted
	}
	s.chunks[s.cur][s.fill] = skewEntry{rank: a.Rank, lag: a.Spread}
	if s.fill++; s.fill == skewChunk {
		s.mu.Lock()
		s.sealed++
		s.mu.Unlock()
		s.cur, s.fill = s.sealed%skewChunks, 0
	}
}

// window copies the last StragglerWindow entries: of the sealed chunks and,
// with current (c.mu held), of the chunk being written.
func (s *skewStats) window(current bool) []skewEntry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var w []skewEntry
	if current {
		w = append(w, s.chunks[s.cur][:s.fill]...)
	}
	for i := s.sealed - 1; i >= max(0, s.sealed-(skewChunks-1)) && len(w) < StragglerWindow; i-- {
		c := &s.chunks[i%skewChunks]
		w = append(w, c[max(0, skewChunk-(StragglerWindow-len(w))):]...)
	}
	return w
}

// lagsByRank returns the window's lateness in microseconds by rank, sorted.
func lagsByRank(w []skewEntry, size int) [][]uint32 {
	lags := make([][]uint32, size)
	for _, e := range w {
		lags[e.rank] = append(lags[e.rank], e.lag)
	}
	for _, l := range lags {
		slices.Sort(l)
	}
	return lags
}

// quantile is the q-quantile of sorted (nearest rank), in microseconds.
func quantile(sorted []uint32, q float64) uint32 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// skewReport builds Stragglers from a window.
func skewReport(w []skewEntry, size int) Stragglers {
	lags := lagsByRank(w, size)
	out := Stragglers{Ops: len(w), Ranks: make([]RankLateness, size)}
	for r, l := range lags {
		rl := RankLateness{Rank: r, Last: len(l)}
		if len(l) > 0 {
			rl.Fraction = float64(len(l)) / float64(len(w))
			rl.Median = time.Duration(quantile(l, 0.5)) * time.Microsecond
			rl.P95 = time.Duration(quantile(l, 0.95)) * time.Microsecond
		}
		out.Ranks[r] = rl
	}
	return out
}

// skewCollector serves the Prometheus series of the arrival skew at scrape
// time, from the window Stragglers reports (see metrics.go), for each rank
// that entered any of its operations last:
//
//	goccl_rank_arrival_lag_seconds{last_rank,quantile}  how long after the first rank last_rank entered the operations it entered last: quantile 0.5 and 0.95
//	goccl_rank_arrived_last_ratio{last_rank}            share of the operations last_rank entered last
type skewCollector struct {
	c          *Comm
	lag, ratio *prometheus.Desc
}

func newSkewCollector(cl prometheus.Labels, c *Comm) *skewCollector {
	return &skewCollector{c: c,
		lag: prometheus.NewDesc("goccl_rank_arrival_lag_seconds",
			"How long after the first rank last_rank entered the operations it entered last, among the last 1000 (quantiles).", []string{"last_rank", "quantile"}, cl),
		ratio: prometheus.NewDesc("goccl_rank_arrived_last_ratio",
			"Share of the last 1000 operations that the rank entered last.", []string{"last_rank"}, cl),
	}
}

func (k *skewCollector) Describe(ch chan<- *prometheus.Desc) { ch <- k.lag; ch <- k.ratio }

func (k *skewCollector) Collect(ch chan<- prometheus.Metric) {
	w := k.c.skewWindow()
	for r, lags := range lagsByRank(w, k.c.size) {
		if len(lags) == 0 {
			continue
		}
		label := strconv.Itoa(r)
		ch <- prometheus.MustNewConstMetric(k.lag, prometheus.GaugeValue, float64(quantile(lags, 0.5))/1e6, label, "0.5")
		ch <- prometheus.MustNewConstMetric(k.lag, prometheus.GaugeValue, float64(quantile(lags, 0.95))/1e6, label, "0.95")
		ch <- prometheus.MustNewConstMetric(k.ratio, prometheus.GaugeValue, float64(len(lags))/float64(len(w)), label)
	}
}

// noteArrival ends an operation's arrival record (c.mu held, the
// operation succeeded): it returns the last arrival this rank knows when it
// knows every rank's entry, and records it. See Stragglers for which
// operations count.
func (c *Comm) noteArrival(kind opKind) (transport.Arrival, bool) {
	a := c.op.Header.Arrival
	if c.skew == nil || c.skewSkip || a.At == 0 {
		return a, false
	}
	switch kind {
	case opAllReduce, opAllGather, opReduceScatter, opAllToAll, opAllToAllv, opBarrier:
	case opReduce, opGather:
		if int(c.op.Header.Root) != c.rank {
			return a, false
		}
	default:
		return a, false
	}
	c.skew.add(a)
	return a, true
}
