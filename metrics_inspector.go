package goccl

import (
	"cmp"
	"math"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Per-operation series under NCCL Inspector's names and labels (its
// Prometheus mode, plugins/profiler/inspector in NCCL), so that its
// Grafana dashboard works on goccl jobs:
//
//	nccl_bus_bandwidth_gbs{...,collective,message_size,algo_proto}      bus bandwidth, GB/s (10^9 bytes/s), geometric mean
//	nccl_collective_exec_time_microseconds{...,collective,message_size,algo_proto}  execution time, µs, arithmetic mean
//	nccl_p2p_bus_bandwidth_gbs{...,p2p_operation,message_size}          the same for Send, Recv (SendRecv when both)
//	nccl_p2p_exec_time_microseconds{...,p2p_operation,message_size}
//
// with the labels version, slurm_job_id, node, gpu, comm_name, n_nodes,
// nranks as the Inspector writes them: version is the Inspector format
// goccl follows (v5.1), slurm_job_id is SLURM_JOB_ID or "unknown", node
// the host name, gpu "CPU<local rank>" (a goccl rank has no GPU; the local
// rank numbers a node's ranks as Inspector's GPU<device> does), comm_name
// the communicator's job id. message_size is Inspector's bucket of the
// operation's bytes (element size times count, per rank as NCCL counts
// them): the size in its largest binary unit, floored, and one more
// ("1-2MB" for 1 to 2 MiB, "8-9KB", "1000-1001B"). Bus bandwidth is
// nccl-tests' (and Inspector's): algorithm bandwidth times 2(n-1)/n for
// AllReduce, (n-1)/n for AllGather, ReduceScatter, AllToAll, Gather and
// Scatter (whose traffic is n times the per-rank bytes), 1 for the rest.
// The Inspector writes the mean of each bucket over its dump interval (30 s
// at least in Prometheus mode); goccl's values are over the operations of
// the last 30 to 60 s, a bucket without one there disappears. Failed
// operations, Barriers and groups are left out. Counting takes an
// uncontended mutex and allocates nothing once a bucket exists.

// inspectorWindow is the span the Inspector series average over (and
// Inspector's shortest Prometheus dump interval).
const inspectorWindow = 30 * time.Second

// inspectorVersion is the version label: Inspector's Prometheus format
// (profiler interface 5, format minor 1) that goccl's series follow.
const inspectorVersion = "v5.1"

// inspKey is one bucket: the operation (its name: Send and Recv are
// SendRecv's), the message size's bucket (its lower bound) and the
// schedule.
type inspKey struct {
	kind opKind
	size uint64
	algo string
}

// inspAgg is a bucket's sums: operations, execution µs, and the logarithms
// of the positive bus bandwidths (for the geometric mean, as Inspector).
type inspAgg struct {
	n, busN      uint64
	execUs, logs float64
}

// inspector collects the Inspector series.
type inspector struct {
	mu        sync.Mutex
	start     time.Time           // the current window's
	cur, prev map[inspKey]inspAgg // this window's sums and the last one's
	nranks    int
	coll, p2p [2]*prometheus.Desc // bus bandwidth, execution time
}

func newInspector(nranks, nnodes, localRank int, comm string) *inspector {
	host, _ := os.Hostname()
	cl := prometheus.Labels{"version": inspectorVersion, "slurm_job_id": cmp.Or(os.Getenv("SLURM_JOB_ID"), "unknown"),
		"node": cmp.Or(host, "unknown"), "gpu": "CPU" + strconv.Itoa(max(localRank, 0)), "comm_name": cmp.Or(comm, "unknown"),
		"n_nodes": strconv.Itoa(nnodes), "nranks": strconv.Itoa(nranks)}
	coll := []string{"collective", "message_size", "algo_proto"}
	p2p := []string{"p2p_operation", "message_size"}
	return &inspector{start: time.Now(), cur: map[inspKey]inspAgg{}, prev: map[inspKey]inspAgg{}, nranks: nranks,
		coll: [2]*prometheus.Desc{
			prometheus.NewDesc("nccl_bus_bandwidth_gbs", "NCCL Inspector's bus bandwidth of collectives, GB/s (geometric mean over the last 30-60 s).", coll, cl),
			prometheus.NewDesc("nccl_collective_exec_time_microseconds", "NCCL Inspector's execution time of collectives, µs (mean over the last 30-60 s).", coll, cl)},
		p2p: [2]*prometheus.Desc{
			prometheus.NewDesc("nccl_p2p_bus_bandwidth_gbs", "NCCL Inspector's bus bandwidth of point-to-point operations, GB/s (geometric mean over the last 30-60 s).", p2p, cl),
			prometheus.NewDesc("nccl_p2p_exec_time_microseconds", "NCCL Inspector's execution time of point-to-point operations, µs (mean over the last 30-60 s).", p2p, cl)},
	}
}

// busFactor is the kind's traffic (in per-rank bytes) and bus factor, as
// Inspector and nccl-tests compute them; ok is false for kinds Inspector
// does not count.
func busFactor(k opKind, n int) (traffic, factor float64, ok bool) {
	fn := float64(n)
	switch k {
	case opAllReduce:
		return 1, 2 * (fn - 1) / fn, true
	case opAllGather, opReduceScatter, opAllToAll, opGather, opScatter:
		return fn, (fn - 1) / fn, true
	case opBroadcast, opReduce, opSendRecv, opSend, opRecv:
		return 1, 1, true
	}
	return 0, 0, false
}

// observe counts one successful operation named name, of bytes per rank,
// that ran d with schedule algo (c.mu held; allocates nothing once its
// bucket exists).
func (m *inspector) observe(name opKind, bytes int64, algo string, d time.Duration) {
	traffic, factor, ok := busFactor(name, m.nranks)
	if !ok || d <= 0 {
		return
	}
	us := float64(d) / float64(time.Microsecond)
	bus := traffic * float64(bytes) / 1e9 / d.Seconds() * factor
	if name == opSendRecv || name == opSend || name == opRecv {
		algo = ""
	}
	k := inspKey{kind: name, size: sizeBucket(uint64(bytes)), algo: algo}
	m.mu.Lock()
	m.roll(time.Now())
	a := m.cur[k]
	a.n++
	a.execUs += us
	if bus > 0 {
		a.busN++
		a.logs += math.Log(bus)
	}
	m.cur[k] = a
	m.mu.Unlock()
}

// roll starts a new window when the current one is inspectorWindow old
// (m.mu held): its sums become the previous window's, in place.
func (m *inspector) roll(now time.Time) {
	age := now.Sub(m.start)
	if age < inspectorWindow {
		return
	}
	m.prev, m.cur = m.cur, m.prev
	clear(m.cur)
	if age >= 2*inspectorWindow {
		clear(m.prev) // nothing in the last window
	}
	m.start = now
}

// sizeBucket is Inspector's message-size bucket of n bytes: the lower
// bound of [k, k+1) units of the largest binary unit (up to TiB) not
// above n.
func sizeBucket(n uint64) uint64 {
	unit := uint64(1)
	for i := 0; i < 4 && n >= unit*1024; i++ {
		unit *= 1024
	}
	return n / unit * unit
}

// sizeLabel is the message_size label of a bucket ("1-2MB", "0B").
func sizeLabel(lower uint64) string {
	if lower == 0 {
		return "0B"
	}
	units := [...]string{"B", "KB", "MB", "GB", "TB"}
	unit, i := uint64(1), 0
	for ; i < 4 && lower >= unit*1024; i++ {
		unit *= 1024
	}
	k := lower / unit
	return strconv.FormatUint(k, 10) + "-" + strconv.FormatUint(k+1, 10) + units[i]
}

func (m *inspector) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.coll[0]
	ch <- m.coll[1]
	ch <- m.p2p[0]
	ch <- m.p2p[1]
}

func (m *inspector) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	m.roll(time.Now())
	sums := make(map[inspKey]inspAgg, len(m.cur)+len(m.prev))
	for _, w := range []map[inspKey]inspAgg{m.prev, m.cur} {
		for k, a := range w {
			s := sums[k]
			s.n, s.busN, s.execUs, s.logs = s.n+a.n, s.busN+a.busN, s.execUs+a.execUs, s.logs+a.logs
			sums[k] = s
		}
	}
	m.mu.Unlock()
	for k, a := range sums {
		bus := 0.0
		if a.busN > 0 {
			bus = math.Exp(a.logs / float64(a.busN))
		}
		exec := a.execUs / float64(a.n)
		descs, labels := m.coll, []string{k.kind.String(), sizeLabel(k.size), cmp.Or(k.algo, "unknown") + "_Simple"}
		if k.kind == opSendRecv || k.kind == opSend || k.kind == opRecv {
			descs, labels = m.p2p, labels[:2]
		}
		ch <- prometheus.MustNewConstMetric(descs[0], prometheus.GaugeValue, bus, labels...)
		ch <- prometheus.MustNewConstMetric(descs[1], prometheus.GaugeValue, exec, labels...)
	}
}
