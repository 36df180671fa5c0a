package goccl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The Prometheus series of a communicator, all with the constant labels
// rank and comm (the communicator's job id, unique per Init or Split):
//
//	goccl_operations_total{op}                  operations completed (failed ones included)
//	goccl_operation_bytes_total{op}             bytes the caller's operations named (count x element size; a group: sent plus received)
//	goccl_operation_duration_seconds{op}        histogram of operation times, start to end on this rank
//	goccl_operation_failures_total{op,reason}   failed operations by cause: peer_lost, aborted, timeout, mismatch, closed, corrupt, invalid, other
//	goccl_link_info{peer,transport}             1 for each peer, naming its link's transport (shm, tcp, ...)
//	goccl_peer_bytes_sent_total{peer,transport}      payload bytes sent to each peer (its link's counters)
//	goccl_peer_bytes_received_total{peer,transport}  payload bytes received from each peer
//	goccl_rank_arrival_lag_seconds{last_rank,quantile}  how long after the first rank last_rank entered the operations it entered last, among the last 1000 (quantile 0.5 and 0.95; Comm.Stragglers)
//	goccl_rank_arrived_last_ratio{last_rank}   share of the last 1000 operations that last_rank entered last
//
// op is the operation's name (AllReduce, ..., Group). Beside them, the
// per-operation series of NCCL Inspector (nccl_bus_bandwidth_gbs, ...;
// metrics_inspector.go). Counting allocates
// nothing; with metrics off (the default) an operation pays one nil check.
// The per-peer byte series are read from the links' own counters when
// scraped (transport.Counters, one atomic add per message whether metrics
// are on or not): they count what crossed each link, algorithm traffic
// included, where goccl_operation_bytes_total counts what callers asked for.
// The arrival series are gauges computed from Comm.Stragglers' record when
// scraped too; last_rank names the rank that entered last (rank is the one
// that reports), and a rank that entered none of the last 1000 operations
// last has none.

// WithMetrics registers the communicator's series (see above) with reg, for
// programs that serve their own /metrics. Close unregisters them.
func WithMetrics(reg prometheus.Registerer) Option { return func(c *options) { c.metrics = reg } }

// metrics holds a communicator's series, resolved per operation kind in
// advance so that counting looks nothing up.
type metrics struct {
	reg      prometheus.Registerer
	ops      [numOpKinds]prometheus.Counter
	bytes    [numOpKinds]prometheus.Counter
	seconds  [numOpKinds]prometheus.Observer
	failures *prometheus.CounterVec
	links    *prometheus.GaugeVec
	insp     *inspector // NCCL Inspector's series
	all      []prometheus.Collector
}

// newMetrics makes the series of rank of a communicator c of size ranks
// on hosts hosts and registers them with reg.
func newMetrics(reg prometheus.Registerer, rank, size, hosts, localRank int, comm string, links []transport.Link, c *Comm) (*metrics, error) {
	cl := prometheus.Labels{"rank": strconv.Itoa(rank), "comm": comm}
	ops := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "goccl_operations_total", ConstLabels: cl,
		Help: "Operations completed on the communicator (failed ones included)."}, []string{"op"})
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "goccl_operation_bytes_total", ConstLabels: cl,
		Help: "Bytes the operations named (count times element size; a group: sent plus received)."}, []string{"op"})
	secs := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "goccl_operation_duration_seconds", ConstLabels: cl,
		Help:    "Time of an operation on this rank, start to end.",
		Buckets: prometheus.ExponentialBuckets(1e-6, 4, 14)}, []string{"op"}) // 1 µs to 67 s
	m := &metrics{reg: reg,
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "goccl_operation_failures_total", ConstLabels: cl,
			Help: "Failed operations by cause."}, []string{"op", "reason"}),
		links: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "goccl_link_info", ConstLabels: cl,
			Help: "1 for each peer, labelled with the transport of its link."}, []string{"peer", "transport"}),
	}
	m.insp = newInspector(size, hosts, localRank, comm)
	m.all = []prometheus.Collector{ops, bytes, secs, m.failures, m.links, newPeerBytes(cl, links), m.insp}
	if c.skew != nil {
		m.all = append(m.all, newSkewCollector(cl, c))
	}
	for k := opKind(1); k < numOpKinds; k++ {
		m.ops[k] = ops.WithLabelValues(k.String())
		m.bytes[k] = bytes.WithLabelValues(k.String())
		m.seconds[k] = secs.WithLabelValues(k.String())
	}
	for i, col := range m.all {
		if err := reg.Register(col); err != nil {
			for _, done := range m.all[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return m, nil
}

// peerBytes collects the per-peer byte series from the links' counters at
// scrape time.
type peerBytes struct {
	links          []transport.Link // by peer; nil for this rank
	sent, received *prometheus.Desc
}

func newPeerBytes(cl prometheus.Labels, links []transport.Link) *peerBytes {
	return &peerBytes{
		links: links,
		sent: prometheus.NewDesc("goccl_peer_bytes_sent_total",
			"Payload bytes sent to the peer over its link (what the algorithms moved, headers left out).", []string{"peer", "transport"}, cl),
		received: prometheus.NewDesc("goccl_peer_bytes_received_total",
			"Payload bytes received from the peer over its link.", []string{"peer", "transport"}, cl),
	}
}

func (p *peerBytes) Describe(ch chan<- *prometheus.Desc) { ch <- p.sent; ch <- p.received }

func (p *peerBytes) Collect(ch chan<- prometheus.Metric) {
	for peer, l := range p.links {
		if l == nil {
			continue
		}
		c, labels := l.Counters(), []string{strconv.Itoa(peer), l.Name()}
		ch <- prometheus.MustNewConstMetric(p.sent, prometheus.CounterValue, float64(c.Sent()), labels...)
		ch <- prometheus.MustNewConstMetric(p.received, prometheus.CounterValue, float64(c.Received()), labels...)
	}
}

// observe counts one finished operation of kind (named name: a Send or
// Recv runs as a SendRecv), of bytes, run with schedule algo.
func (m *metrics) observe(kind, name opKind, bytes int64, algo string, d time.Duration, err error) {
	m.ops[kind].Inc()
	m.bytes[kind].Add(float64(bytes))
	m.seconds[kind].Observe(d.Seconds())
	if err != nil {
		m.failures.WithLabelValues(kind.String(), failureReason(err)).Inc()
		return
	}
	m.insp.observe(name, bytes, algo, d)
}

// failureReason is the reason label of a failed operation.
func failureReason(err error) string {
	switch {
	case errors.Is(err, ErrPeerLost):
		return "peer_lost"
	case errors.Is(err, ErrAborted):
		return "aborted"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, ErrMismatch):
		return "mismatch"
	case errors.Is(err, ErrCorrupt):
		return "corrupt"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, ErrInvalidArgument):
		return "invalid"
	}
	return "other"
}

// close unregisters the series.
func (m *metrics) close() {
	if m == nil {
		return
	}
	for _, col := range m.all {
		m.reg.Unregister(col)
	}
}

// The process's /metrics server for GOCCL_METRICS_ADDR: one registry and
// one listener per process, shared by its communicators.
var metricsServer struct {
	once sync.Once
	reg  *prometheus.Registry
	addr string // the address it listens on
	err  error
}

// serveMetrics starts (once per process) the HTTP server of /metrics on
// addr, its port moved up by localRank so that the ranks of one host do not
// collide (":9400": local rank 0 on 9400, 1 on 9401, ...; port 0: any), and
// returns its registry.
func serveMetrics(addr string, localRank int) (*prometheus.Registry, error) {
	s := &metricsServer
	s.once.Do(func() {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			s.err = fmt.Errorf("metrics address %q: %w", addr, err)
			return
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 0 || p > 65535 {
			s.err = fmt.Errorf("metrics address %q: bad port", addr)
			return
		}
		if p != 0 {
			p += max(localRank, 0)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			s.err = fmt.Errorf("metrics: %w", err)
			return
		}
		s.reg = prometheus.NewRegistry()
		s.reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
		s.addr = ln.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
		go http.Serve(ln, mux) // for the life of the process
	})
	return s.reg, s.err
}
