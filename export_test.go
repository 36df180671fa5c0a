package goccl

import (
	"sync"

	"github.com/goccl/goccl/internal/algo"
	"github.com/goccl/goccl/internal/bootstrap"
	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/transport/roce"
)

// SetRoCEFaults makes every RoCE device this process's Init opens inject
// f's packet faults (GOCCL_NET=roce).
func SetRoCEFaults(f rdma.Faults) { bootstrap.SetRoCEDeviceOptions(rdma.WithFaults(f)) }

// Tuning is what the tuner's probe left on a communicator, for the tests of
// package goccl_test: the links rank 0 measured (bytes per second and
// one-way latency in seconds; zero without a probe) and, per operation with
// a hierarchical schedule, the smallest buffer that runs it.
type Tuning struct {
	InterBandwidth, InterLatency float64
	IntraBandwidth, IntraLatency float64
	HierMin                      map[string]int
}

// TuningOf returns c's Tuning.
func TuningOf(c *Comm) Tuning {
	t := Tuning{HierMin: map[string]int{}}
	tu := c.sel.Facts().Tuning
	if costs := tu.Costs; costs.Valid() {
		t.InterBandwidth, t.InterLatency = costs.Inter.Bandwidth(), costs.Inter.Alpha
		t.IntraBandwidth, t.IntraLatency = costs.Intra.Bandwidth(), costs.Intra.Alpha
	}
	for i, k := range algo.HierKinds {
		t.HierMin[opKind(k).String()] = tu.HierMin[i]
	}
	return t
}

// HasRoCE reports whether c's links to other hosts (or all links, with
// GOCCL_SHM_DISABLE=1) run over a RoCE device.
func HasRoCE(c *Comm) bool {
	_, ok := bootstrap.Cap[*bootstrap.OneSided](c.caps)
	return ok
}

// ZeroCopied sums, over c's RoCE links, the bytes sent straight from
// registered buffers.
func ZeroCopied(c *Comm) uint64 { return sumRoCE(c, (*roce.Link).ZeroCopied) }

// DirectReceived sums, over c's RoCE links, the bytes peers wrote
// straight into registered receive buffers.
func DirectReceived(c *Comm) uint64 { return sumRoCE(c, (*roce.Link).DirectReceived) }

// sumRoCE sums f over c's RoCE links.
func sumRoCE(c *Comm, f func(*roce.Link) uint64) uint64 {
	var n uint64
	for p := 0; p < c.size; p++ {
		if l, ok := c.group.Link(p).(*roce.Link); ok {
			n += f(l)
		}
	}
	return n
}

// UsesCollNet reports whether c's AllReduce goes through an aggregation
// tree.
func UsesCollNet(c *Comm) bool { return c.collnet != nil }

// CollNetOverRoCE reports whether c's aggregation tree data path runs
// over RoCE queue pairs.
func CollNetOverRoCE(c *Comm) bool { return c.collnet != nil && c.collnet.RoCE() }

// ServeMetrics starts the process's /metrics server as Init does for a
// communicator of local rank localRank with GOCCL_METRICS_ADDR=addr (once
// per process) and returns the address it listens on. After a failed start
// the next call tries again (a test's free port may be taken meanwhile).
func ServeMetrics(addr string, localRank int) (string, error) {
	if metricsServer.err != nil {
		metricsServer.once, metricsServer.err = sync.Once{}, nil
	}
	_, err := serveMetrics(addr, localRank)
	return metricsServer.addr, err
}

// LinkNames returns the name of c's link to each peer ("" for this rank).
func LinkNames(c *Comm) []string {
	names := make([]string, c.size)
	for p, l := range c.links() {
		if l != nil {
			names[p] = l.Name()
		}
	}
	return names
}
