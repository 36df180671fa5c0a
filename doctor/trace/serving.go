package trace

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/goccl/goccl/doctor"
)

// servingSpan names the spans of a serving trace (goccl's form: a span
// per phase of an inference request, its number as args.seq), as
// examples/kv-handoff writes them: "request" from arrival to the end,
// "prefill", "kv transfer" (args.path: how the KV cache moved) and one
// "decode" per decode step (the first ends with the first token).
var servingSpan = map[string]bool{"request": true, "prefill": true, "kv transfer": true, "decode": true}

// servingReq is one inference request's spans (µs).
type servingReq struct {
	start, end         float64 // the request span; 0, 0: none
	prefill, transfer  float64
	firstDecode        float64 // end of the first decode step
	lastDecode         float64
	decodes            int
	path               string
	seen, seenTransfer bool
}

func (rk *Rank) addServing(name string, ts, dur float64, args json.RawMessage) {
	var a struct {
		Seq  int64  `json:"seq"`
		Path string `json:"path"`
	}
	if json.Unmarshal(args, &a) != nil || a.Seq == 0 {
		return
	}
	if rk.serving == nil {
		rk.serving = map[int64]*servingReq{}
	}
	r := rk.serving[a.Seq]
	if r == nil {
		r = &servingReq{}
		rk.serving[a.Seq] = r
	}
	end := ts + dur
	switch name {
	case "request":
		r.start, r.end, r.seen = ts, end, true
	case "prefill":
		r.prefill += dur
	case "kv transfer":
		r.transfer += dur
		r.path, r.seenTransfer = a.Path, true
	case "decode":
		r.decodes++
		if r.decodes == 1 || end < r.firstDecode {
			r.firstDecode = end
		}
		r.lastDecode = max(r.lastDecode, end)
	}
}

// ServingStats sums the requests of one KV transfer path (ms; shares in
// %): time to first token (request start to the first decode step's end),
// its prefill and KV transfer parts, the transfer's share of it at p50 and
// p99 over the requests, and the time per output token ((last decode end
// - first) / (steps - 1), NaN without two steps).
type ServingStats struct {
	File        string  `json:"file"`
	Path        string  `json:"path"`
	Requests    int     `json:"requests"`
	TTFTP50     float64 `json:"ttft_p50_ms"`
	TTFTP99     float64 `json:"ttft_p99_ms"`
	PrefillP50  float64 `json:"prefill_p50_ms"`
	TransferP50 float64 `json:"kv_transfer_p50_ms"`
	TransferP99 float64 `json:"kv_transfer_p99_ms"`
	ShareP50    float64 `json:"kv_share_of_ttft_p50_pct"`
	ShareP99    float64 `json:"kv_share_of_ttft_p99_pct"`
	TPOTP50     float64 `json:"tpot_p50_ms"` // NaN: fewer than two decode steps (JSON: null)
}

// servingStats groups each rank's complete requests by path.
func servingStats(rks []*Rank) []ServingStats {
	var out []ServingStats
	for _, rk := range rks {
		by := map[string][]*servingReq{}
		for _, r := range rk.serving {
			if r.seen && r.seenTransfer && r.decodes > 0 {
				by[r.path] = append(by[r.path], r)
			}
		}
		for _, p := range slices.Sorted(maps.Keys(by)) {
			s := ServingStats{File: rk.File, Path: p, Requests: len(by[p]), TPOTP50: math.NaN()}
			var ttft, pre, xfer, share, tpot []float64
			for _, r := range by[p] {
				t := r.firstDecode - r.start
				ttft = append(ttft, t/1e3)
				pre = append(pre, r.prefill/1e3)
				xfer = append(xfer, r.transfer/1e3)
				if t > 0 {
					share = append(share, 100*r.transfer/t)
				}
				if r.decodes >= 2 {
					tpot = append(tpot, (r.lastDecode-r.firstDecode)/float64(r.decodes-1)/1e3)
				}
			}
			s.TTFTP50, s.TTFTP99 = nearestRank(ttft, 50), nearestRank(ttft, 99)
			s.PrefillP50 = nearestRank(pre, 50)
			s.TransferP50, s.TransferP99 = nearestRank(slices.Clone(xfer), 50), nearestRank(xfer, 99)
			s.ShareP50, s.ShareP99 = nearestRank(slices.Clone(share), 50), nearestRank(share, 99)
			if len(tpot) > 0 {
				s.TPOTP50 = nearestRank(tpot, 50)
			}
			out = append(out, s)
		}
	}
	return out
}

// Thresholds of the serving findings.
const (
	kvShareMin = 50  // % of TTFT in the KV transfer at p99
	slowerMin  = 1.5 // a path's transfer p50 over the fastest's
)

// findServing adds kv-transfer-dominates (the transfer is most of the
// tail's TTFT) and slow-path (a path whose transfers take 1.5× the
// fastest path's, e.g. staging beside direct).
func (rep *Report) findServing(add addFunc) {
	best := map[string]ServingStats{} // the fastest path of each file
	for _, s := range rep.Serving {
		if b, ok := best[s.File]; !ok || s.TransferP50 < b.TransferP50 {
			best[s.File] = s
		}
	}
	for _, s := range rep.Serving {
		if s.ShareP99 >= kvShareMin {
			add(doctor.SevWarn, "kv-transfer-dominates",
				"overlap the KV transfer with prefill (send each layer's blocks as it finishes), move them with one READ of their descriptor list over RDMA rather than staged or over TCP, or place prefill and decode closer (same host, same rail)",
				"%s: the KV transfer is %.0f %% of the time to first token at p99 (%.0f %% at p50) for the %d %s requests (TTFT p99 %.2f ms)",
				s.File, s.ShareP99, s.ShareP50, s.Requests, orNone(s.Path), s.TTFTP99)
		}
		if b := best[s.File]; b.TransferP50 > 0 && s.TransferP50 >= slowerMin*b.TransferP50 {
			add(doctor.SevWarn, "slow-path",
				"staging (pack, READ, unpack) and cold tiers copy every byte more than once; a direct READ slower than another path points at its lane: the agents' traces (xfer.Options.TraceFile) name the lanes each request took (rdma, tcp, shm)",
				"%s: %s requests' KV transfer takes %.2f ms at p50, %.1f× the fastest path's (%s) %.2f ms",
				s.File, orNone(s.Path), s.TransferP50, s.TransferP50/b.TransferP50, orNone(b.Path), b.TransferP50)
		}
	}
}

func orNone(p string) string {
	if strings.TrimSpace(p) == "" {
		return "(no path)"
	}
	return p
}
