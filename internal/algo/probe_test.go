package algo

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/memlink"
	"github.com/goccl/goccl/transport"
)

// shapedLink delays every message it receives by delay plus its bytes at
// rate bytes per second: a link with a known latency and bandwidth. It
// waits by polling the clock, not by sleeping, whose overshoot (up to a
// millisecond on a VM) varies from one sleep to the next: a delay is then
// never shorter than asked, and longer only by preemption.
type shapedLink struct {
	transport.Link
	delay time.Duration
	rate  float64
}

func (l *shapedLink) Recv(ctx context.Context, want *transport.Header, buf []byte, reduce transport.ReduceFunc) error {
	if err := l.Link.Recv(ctx, want, buf, reduce); err != nil {
		return err
	}
	until := time.Now().Add(l.delay + time.Duration(float64(len(buf))/l.rate*float64(time.Second)))
	for time.Now().Before(until) {
		runtime.Gosched()
	}
	return nil
}

// TestProbeHier: 2 hosts × 2 ranks whose links between hosts take 200 µs
// plus 20 MB/s: the lead (rank 0) measures the network's latency at least
// 200 µs and its bandwidth at most 20 MB/s (the delays make these hard
// bounds; 20 % are allowed for the round trips' own noise), the in-memory
// links within a host faster; the other ranks get no measurement.
func TestProbeHier(t *testing.T) {
	const delay, rate = 200 * time.Microsecond, 20e6
	hosts := []string{"a", "a", "b", "b"}
	mesh := memlink.MeshInline(4, 4)
	for i := range mesh {
		for j, l := range mesh[i] {
			if l != nil && hosts[i] != hosts[j] {
				mesh[i][j] = &shapedLink{Link: l, delay: delay, rate: rate}
			}
		}
	}
	var lead Costs
	probe := Probe{Pings: 3, Transfers: 2, Bytes: 64 << 10}
	median := Probe{Pings: 3, Transfers: 3, Bytes: 64 << 10, Median: true}
	errs := runRanksOn(t, mesh, func(g *Group) error {
		h, err := NewHier(g, hosts)
		if err != nil {
			return err
		}
		c, measured, err := g.ProbeHier(context.Background(), testOp(1, 0), h, probe, median)
		if err != nil {
			return err
		}
		if measured != (g.Rank == 0) || !measured && c != (Costs{}) {
			return fmt.Errorf("rank %d: measured %v, %+v", g.Rank, measured, c)
		}
		if measured {
			lead = c
		}
		return nil
	})
	noErrors(t, errs)
	t.Logf("inter-host %.1f MB/s, %v; intra-host %.1f MB/s, %v", lead.Inter.Bandwidth()/1e6, time.Duration(lead.Inter.Alpha*1e9),
		lead.Intra.Bandwidth()/1e6, time.Duration(lead.Intra.Alpha*1e9))
	if !lead.Valid() {
		t.Fatalf("measured %+v", lead)
	}
	if lead.Inter.Alpha < delay.Seconds() {
		t.Errorf("inter-host latency %g s, under the links' %v", lead.Inter.Alpha, delay)
	}
	if bw := lead.Inter.Bandwidth(); bw > 1.2*rate {
		t.Errorf("inter-host bandwidth %.1f MB/s, above the links' %.0f MB/s by more than 20 %%", bw/1e6, rate/1e6)
	}
	if lead.Intra.Beta >= lead.Inter.Beta {
		t.Errorf("intra-host %g s/byte, not below the shaped links' %g", lead.Intra.Beta, lead.Inter.Beta)
	}
}

// TestProbeHierErrors: a probe that cannot run says why, and a partner that
// fails makes the lead's error name the link, the step and the rank.
func TestProbeHierErrors(t *testing.T) {
	hosts := []string{"a", "a", "b", "b"}
	ok := Probe{Pings: 1, Transfers: 1, Bytes: 8}
	errs := runRanks(t, 4, func(g *Group) error {
		h, err := NewHier(g, hosts)
		if err != nil {
			return err
		}
		if _, _, err := g.ProbeHier(context.Background(), testOp(1, 0), h, Probe{Pings: 1, Bytes: 8}, ok); err == nil {
			return fmt.Errorf("a probe without transfers ran")
		}
		if _, _, err := g.ProbeHier(context.Background(), testOp(1, 0), nil, ok, ok); err == nil {
			return fmt.Errorf("a probe without hierarchy ran")
		}
		if g.Rank == 2 { // the lead's partner across hosts fails
			g.Abort()
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _, err = g.ProbeHier(ctx, testOp(1, 0), h, ok, ok)
		if g.Rank == 0 && (err == nil || !strings.Contains(err.Error(), "inter-host link, round trip with rank 2")) {
			return fmt.Errorf("lead: %v, want the inter-host link's round trip with rank 2", err)
		}
		if g.Rank != 0 && err != nil {
			return err
		}
		return nil
	})
	noErrors(t, errs)
}
