package trace

import (
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/goccl/goccl/doctor"
)

// transfer is one request of an xfer agent, as its trace records it.
type transfer struct {
	op, path, peer string
	bytes          int64
	ts, dur        float64 // µs
	failed         bool
}

// PathStats sums an agent's transfers that took one path (the lanes of a
// request: rdma, tcp, shm, local, joined by "+").
type PathStats struct {
	File    string  `json:"file"`
	Path    string  `json:"path"`
	Count   int     `json:"transfers"`
	Failed  int     `json:"failed"`
	Bytes   int64   `json:"bytes"`
	P50     float64 `json:"p50_us"` // post to end
	P99     float64 `json:"p99_us"`
	GBps    float64 `json:"gb_per_s"` // bytes over the summed durations (GB = 1e9)
	MedGBps float64 `json:"median_gb_per_s"`
}

// pathStats groups each rank's transfers by path.
func pathStats(rks []*Rank) []PathStats {
	var out []PathStats
	for _, rk := range rks {
		by := map[string][]transfer{}
		for _, t := range rk.transfers {
			by[t.path] = append(by[t.path], t)
		}
		for _, p := range slices.Sorted(maps.Keys(by)) {
			ts := by[p]
			s := PathStats{File: rk.File, Path: p, Count: len(ts)}
			var durs, rates []float64
			var sum float64
			for _, t := range ts {
				if t.failed {
					s.Failed++
					continue
				}
				s.Bytes += t.bytes
				sum += t.dur
				durs = append(durs, t.dur)
				if t.dur > 0 {
					rates = append(rates, float64(t.bytes)/t.dur/1e3)
				}
			}
			s.P50, s.P99 = nearestRank(durs, 50), nearestRank(durs, 99)
			s.MedGBps = nearestRank(rates, 50)
			if sum > 0 {
				s.GBps = float64(s.Bytes) / sum / 1e3
			}
			out = append(out, s)
		}
	}
	return out
}

// nearestRank is the p-th percentile of xs by the nearest-rank method
// (sorts xs); 0 for none.
func nearestRank(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(math.Ceil(p/100*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// findTransfers adds the transfers' findings: slow-path, a transfer over
// TCP to an agent that other transfers of the trace reached by RDMA (the
// issue's "TCP instead of RDMA"); transfer-failed.
func (rep *Report) findTransfers(rks []*Rank, add addFunc) {
	for _, rk := range rks {
		rdmaPeers := map[string]int{}
		for _, t := range rk.transfers {
			if strings.Contains(t.path, "rdma") && !t.failed {
				rdmaPeers[t.peer]++
			}
		}
		slow := map[string]int{}
		for _, t := range rk.transfers {
			if rdmaPeers[t.peer] > 0 && !strings.Contains(t.path, "rdma") && strings.Contains(t.path, "tcp") {
				slow[t.peer]++
			}
		}
		for _, p := range slices.Sorted(maps.Keys(slow)) {
			add(doctor.SevWarn, "slow-path",
				"a request goes by RDMA only between DRAM regions that both agents registered with an RDMA device (xfer.Options.RDMA); FILE regions, and memory registered on an agent without one, go over TCP: bring such blocks into registered DRAM first",
				"%s: %d transfer(s) to agent %q went over TCP while %d to it went by RDMA", rk.File, slow[p], p, rdmaPeers[p])
		}
	}
	for _, s := range rep.Transfers {
		if s.Failed > 0 {
			add(doctor.SevError, "transfer-failed", "the trace's events carry each failure's error; goccl doctor flight-recorder and the agents' logs name the peer's state",
				"%s: %d of %d %s transfer(s) failed", s.File, s.Failed, s.Count, s.Path)
		}
	}
}
