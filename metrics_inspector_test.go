package goccl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/ranktest"
)

// sample finds the gauge of family name whose labels include want.
func sample(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue next
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestInspectorSeries: one AllReduce of 1 MiB, one AllGather of 8 KiB
// per rank and a 1000-byte Send/Recv give NCCL Inspector's series with its
// labels and size buckets; bus bandwidth times execution time is the bytes
// nccl-tests' formula moves (one operation per bucket, so both means are
// that operation's).
func TestInspectorSeries(t *testing.T) {
	if os.Getenv("SLURM_JOB_ID") != "" {
		t.Skip("SLURM_JOB_ID is set: the slurm_job_id label differs")
	}
	reg := prometheus.NewRegistry()
	ranktest.RunWith(t, 2, 30*time.Second, []goccl.Option{goccl.WithMetrics(reg)}, func(ctx context.Context, c *goccl.Comm) error {
		r := c.Rank()
		big := make([]float32, 256<<10)
		small := make([]float32, 2048)
		out := make([]float32, 4096)
		p2p := make([]byte, 1000)
		if err := goccl.AllReduce(ctx, c, big, big, len(big), goccl.Sum); err != nil {
			return err
		}
		if err := goccl.AllGather(ctx, c, small, out, len(small)); err != nil {
			return err
		}
		var err error
		if r == 0 {
			err = goccl.Send(ctx, c, p2p, len(p2p), 1)
		} else {
			err = goccl.Recv(ctx, c, p2p, len(p2p), 0)
		}
		if err != nil {
			return err
		}
		host, _ := os.Hostname()
		with := func(kv ...string) map[string]string {
			m := map[string]string{"version": "v5.1", "slurm_job_id": "unknown", "node": host, "gpu": fmt.Sprint("CPU", c.LocalRank()),
				"n_nodes": "1", "nranks": "2"}
			for i := 0; i < len(kv); i += 2 {
				m[kv[i]] = kv[i+1]
			}
			return m
		}
		for _, tc := range []struct {
			bus, exec string
			labels    map[string]string
			bytes     float64
		}{
			{"nccl_bus_bandwidth_gbs", "nccl_collective_exec_time_microseconds", with("collective", "AllReduce", "message_size", "1-2MB"), 1 << 20},
			{"nccl_bus_bandwidth_gbs", "nccl_collective_exec_time_microseconds", with("collective", "AllGather", "message_size", "8-9KB"), 8 << 10},
			{"nccl_p2p_bus_bandwidth_gbs", "nccl_p2p_exec_time_microseconds", with("p2p_operation", map[int]string{0: "Send", 1: "Recv"}[r], "message_size", "1000-1001B"), 1000},
		} {
			bus, ok1 := sample(t, reg, tc.bus, tc.labels)
			us, ok2 := sample(t, reg, tc.exec, tc.labels)
			if !ok1 || !ok2 || bus <= 0 || us <= 0 {
				return fmt.Errorf("no %s / %s with %v (%v, %v)", tc.bus, tc.exec, tc.labels, bus, us)
			}
			// AllReduce on 2 ranks: factor 2(n-1)/n = 1; AllGather: traffic
			// 2 × 8 KiB, factor 1/2; point to point: 1.
			if moved := bus * 1e9 * us / 1e6; math.Abs(moved-tc.bytes) > 1e-6*tc.bytes {
				return fmt.Errorf("%v: bus bandwidth × time = %v bytes, want %v", tc.labels, moved, tc.bytes)
			}
		}
		return nil
	})
}

// recordingRegisterer registers with a registry and remembers what was
// registered.
type recordingRegisterer struct {
	*prometheus.Registry
	mu   sync.Mutex
	cols []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.mu.Lock()
	r.cols = append(r.cols, c)
	r.mu.Unlock()
	return r.Registry.Register(c)
}

// registeredSeries is every series name the communicator's metrics
// register, with the label names each carries.
func registeredSeries(t *testing.T) map[string][]string {
	t.Helper()
	rec := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	ranktest.RunWith(t, 2, 30*time.Second, []goccl.Option{goccl.WithMetrics(rec)}, func(ctx context.Context, c *goccl.Comm) error { return nil })
	nameRe := regexp.MustCompile(`fqName: "([^"]+)"`)
	constRe := regexp.MustCompile(`constLabels: \{([^}]*)\}`)
	varRe := regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	out := map[string][]string{}
	for _, col := range rec.cols {
		ch := make(chan *prometheus.Desc, 64)
		col.Describe(ch)
		close(ch)
		for d := range ch {
			s := d.String()
			name := nameRe.FindStringSubmatch(s)[1]
			var labels []string
			for _, kv := range strings.Split(constRe.FindStringSubmatch(s)[1], ",") {
				if k, _, ok := strings.Cut(kv, "="); ok {
					labels = append(labels, strings.TrimSpace(k))
				}
			}
			for _, l := range strings.Split(varRe.FindStringSubmatch(s)[1], ",") {
				if l = strings.Trim(strings.TrimSpace(l), "{}"); l != "" {
					labels = append(labels, l)
				}
			}
			out[name] = labels
		}
	}
	if len(out) == 0 {
		t.Fatal("no series registered: the check proves nothing")
	}
	return out
}

var (
	seriesRe  = regexp.MustCompile(`\b((?:goccl|nccl)_[a-z0-9_]+)`)
	matcherRe = regexp.MustCompile(`([a-z0-9_]+)\s*(?:=~|!~|!=|=)\s*"`)
	byRe      = regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
)

// checkQueries reports every series, matcher label and grouping label of
// the PromQL queries that the registered metrics lack (histograms carry
// le and their _bucket, _sum, _count).
func checkQueries(t *testing.T, what string, queries []string, have map[string][]string, external ...string) {
	t.Helper()
	for _, q := range queries {
		var labels []string
		for _, m := range seriesRe.FindAllStringSubmatch(q, -1) {
			name := m[1]
			base := name
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suf); ok && have[b] != nil {
					base = b
				}
			}
			ls, ok := have[base]
			if !ok {
				t.Errorf("%s queries %s, which goccl does not register: %s", what, name, q)
			}
			labels = append(labels, ls...)
			if base != name {
				labels = append(labels, "le")
			}
		}
		var used []string
		for _, m := range matcherRe.FindAllStringSubmatch(q, -1) {
			used = append(used, m[1])
		}
		for _, m := range byRe.FindAllStringSubmatch(q, -1) {
			for _, l := range strings.Split(m[1], ",") {
				used = append(used, strings.TrimSpace(l))
			}
		}
		for _, l := range used {
			if l != "" && !slices.Contains(labels, l) && !slices.Contains(external, l) {
				t.Errorf("%s uses label %q, which its series lack: %s", what, l, q)
			}
		}
	}
}

// dashboardQueries collects every "expr" and variable "definition" of a
// Grafana dashboard.
func dashboardQueries(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && (k == "expr" || k == "definition") {
				*out = append(*out, s)
			}
			dashboardQueries(e, out)
		}
	case []any:
		for _, e := range x {
			dashboardQueries(e, out)
		}
	}
}

// TestGrafanaDashboard: every series and label that docs/grafana/goccl.json
// queries is one the communicator's metrics register.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("docs/grafana/goccl.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana/goccl.json: %v", err)
	}
	var qs []string
	dashboardQueries(dash, &qs)
	if len(qs) < 10 {
		t.Fatalf("only %d queries found in the dashboard", len(qs))
	}
	checkQueries(t, "docs/grafana/goccl.json", qs, registeredSeries(t))
}

// TestInspectorDashboardQueries: the series and labels that NCCL
// Inspector's Grafana dashboard queries
// (plugins/profiler/inspector/grafana/nccl-inspector-job-performance-template.json
// in NCCL: one query of each shape it uses) are registered. Its cluster
// label comes from the scrape configuration, not from the exporter.
func TestInspectorDashboardQueries(t *testing.T) {
	var qs []string
	for _, coll := range []string{"AllReduce", "AllGather", "ReduceScatter"} {
		for _, m := range []string{"nccl_bus_bandwidth_gbs", "nccl_collective_exec_time_microseconds"} {
			qs = append(qs,
				`avg by(message_size, nranks) (`+m+`{cluster="$cluster", slurm_job_id="$jobid", collective="`+coll+`", n_nodes="1"})`,
				`avg by(message_size, nranks, n_nodes) (`+m+`{cluster="$cluster", slurm_job_id="$jobid", collective="`+coll+`", n_nodes!="1"})`)
		}
	}
	for _, op := range []string{"Send", "Recv"} {
		for _, m := range []string{"nccl_p2p_bus_bandwidth_gbs", "nccl_p2p_exec_time_microseconds"} {
			qs = append(qs, `avg by(message_size, nranks) (`+m+`{cluster="$cluster", slurm_job_id="$jobid", p2p_operation="`+op+`", n_nodes="1"})`)
		}
	}
	checkQueries(t, "NCCL Inspector's dashboard", qs, registeredSeries(t), "cluster")
}
