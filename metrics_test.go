package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/ranktest"
)

// series returns the value of every sample of the registry's families as
// "name{label=value,...}" -> value (histograms: their sample count).
func series(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				if l.GetName() != "comm" {
					ls = append(ls, l.GetName()+"="+l.GetValue())
				}
			}
			key := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] += m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] += m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestMetrics: WithMetrics registers the documented series; they count
// operations, bytes, durations and failures by reason, name each peer's
// transport, and are unregistered by Close.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	var mid map[string]float64
	var once sync.Once
	ranktest.RunWith(t, 2, 30*time.Second, []goccl.Option{goccl.WithMetrics(reg)}, func(ctx context.Context, c *goccl.Comm) error {
		x := make([]float32, 256)
		for range 3 {
			if err := goccl.AllReduce(ctx, c, x, x, len(x), goccl.Sum); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			once.Do(func() { mid = series(t, reg) })
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		y := make([]float32, 4+c.Rank())
		if err := goccl.AllReduce(ctx, c, y, y, len(y), goccl.Sum); err == nil {
			return errors.New("mismatched AllReduce succeeded")
		}
		return nil
	})
	for _, r := range []string{"0", "1"} {
		for key, want := range map[string]float64{
			"goccl_operations_total{op=AllReduce,rank=" + r + "}":                                                 3,
			"goccl_operation_bytes_total{op=AllReduce,rank=" + r + "}":                                            3 * 1024,
			"goccl_operation_duration_seconds{op=AllReduce,rank=" + r + "}":                                       3,
			"goccl_link_info{peer=" + map[string]string{"0": "1", "1": "0"}[r] + ",rank=" + r + ",transport=shm}": 1,
		} {
			if got := mid[key]; got != want {
				t.Errorf("%s = %v, want %v", key, got, want)
			}
		}
	}
	if mid["goccl_operations_total{op=Barrier,rank=0}"] != 1 { // the test's first (Init's came before the series)
		t.Errorf("Barriers not counted: %v", mid)
	}
	if t.Failed() {
		t.Logf("series: %v", mid)
	}
	// After Close nothing is left registered; the failures were counted
	// before (each rank's mismatch, seen as mismatch or closed).
	if left := series(t, reg); len(left) != 0 {
		t.Errorf("series left after Close: %v", left)
	}
}

// TestMetricsFailureReasons: the failure counter's reason label.
func TestMetricsFailureReasons(t *testing.T) {
	reg := prometheus.NewRegistry()
	var got map[string]float64
	ranktest.RunWith(t, 2, 30*time.Second, []goccl.Option{goccl.WithMetrics(reg)}, func(ctx context.Context, c *goccl.Comm) error {
		y := make([]float32, 4+c.Rank())
		err := goccl.AllReduce(ctx, c, y, y, len(y), goccl.Sum)
		if err == nil {
			return errors.New("mismatched AllReduce succeeded")
		}
		if c.Rank() == 0 {
			time.Sleep(50 * time.Millisecond) // let rank 1 count its failure too
			got = series(t, reg)
		}
		return nil
	})
	n := 0.0
	for key, v := range got {
		if strings.HasPrefix(key, "goccl_operation_failures_total{op=AllReduce,rank=0,reason=") {
			if !strings.Contains(key, "reason=mismatch") && !strings.Contains(key, "reason=closed") {
				t.Errorf("unexpected reason: %s", key)
			}
			n += v
		}
	}
	if n != 1 {
		t.Errorf("rank 0 counted %v failures, want 1: %v", n, got)
	}
}

// TestMetricsAllocs: with metrics on, an AllReduce still allocates nothing.
func TestMetricsAllocs(t *testing.T) {
	reg := prometheus.NewRegistry()
	ranktest.RunWith(t, 2, 30*time.Second, []goccl.Option{goccl.WithMetrics(reg)}, func(ctx context.Context, c *goccl.Comm) error {
		x := make([]float32, 64)
		op := func() {
			if err := goccl.AllReduce(ctx, c, x, x, len(x), goccl.Sum); err != nil {
				panic(err)
			}
		}
		op()
		if n := testing.AllocsPerRun(200, op); n != 0 {
			return fmt.Errorf("%v allocations per AllReduce with metrics on", n)
		}
		return nil
	})
}

// TestPeerBytes: Comm.PeerBytes and the goccl_peer_bytes_*_total series
// count the payload that crossed each link: a 1000-byte Send counts 1000
// sent on the sender and 1000 received on the receiver, nothing on the
// way back; the series equal PeerBytes.
func TestPeerBytes(t *testing.T) {
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	got := map[string]float64{}
	ranktest.RunWith(t, 2, 30*time.Second, []goccl.Option{goccl.WithMetrics(reg)}, func(ctx context.Context, c *goccl.Comm) error {
		peer := 1 - c.Rank()
		if s, r := c.PeerBytes(c.Rank()); s != 0 || r != 0 {
			return fmt.Errorf("rank %d: PeerBytes of itself = %d, %d", c.Rank(), s, r)
		}
		if s, r := c.PeerBytes(7); s != 0 || r != 0 {
			return fmt.Errorf("rank %d: PeerBytes(7) = %d, %d", c.Rank(), s, r)
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		s0, r0 := c.PeerBytes(peer)
		buf := make([]uint8, 1000)
		var err error
		if c.Rank() == 0 {
			err = goccl.Send(ctx, c, buf, len(buf), 1)
		} else {
			err = goccl.Recv(ctx, c, buf, len(buf), 0)
		}
		if err != nil {
			return err
		}
		s1, r1 := c.PeerBytes(peer)
		wantS, wantR := uint64(1000), uint64(0)
		if c.Rank() == 1 {
			wantS, wantR = 0, 1000
		}
		if s1-s0 != wantS || r1-r0 != wantR {
			return fmt.Errorf("rank %d: the Send moved %d sent, %d received; want %d, %d", c.Rank(), s1-s0, r1-r0, wantS, wantR)
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			mu.Lock()
			got = series(t, reg)
			mu.Unlock()
		}
		return c.Barrier(ctx)
	})
	if got["goccl_peer_bytes_sent_total{peer=1,rank=0,transport=shm}"] < 1000 ||
		got["goccl_peer_bytes_received_total{peer=0,rank=1,transport=shm}"] < 1000 ||
		got["goccl_peer_bytes_received_total{peer=0,rank=1,transport=shm}"] != got["goccl_peer_bytes_sent_total{peer=1,rank=0,transport=shm}"] {
		t.Errorf("peer byte series: %v", got)
	}
}
