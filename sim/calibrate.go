package sim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
)

// Calibration is what `goccl sim calibrate` measured on a machine or a
// namespace cluster with goccl itself (point-to-point send/recv between two
// ranks: goccl perf sendrecv), fitted to Hockney's model t = α + n·β
// (Hockney, "The communication challenge for MPP", Parallel Computing
// 20(3), 1994; FitHockney says how). It replaces a topology's latencies and rates (Apply);
// collectives are never among the points, so a validation of collectives
// against a calibrated topology compares with points the fit never saw.
type Calibration struct {
	Source string `json:"source"` // the command and the machine (CPU model, cores)
	// Intra is the link between two ranks of one host (shared memory).
	Intra *LinkFit `json:"intra,omitempty"`
	// Inter is the link between two hosts (one rank on each). Its rate is
	// also given as Efficiency, the share of the shaped rate (RateGbps)
	// that carried payload, so that one calibration serves clusters of
	// other rates.
	Inter *LinkFit `json:"inter,omitempty"`
}

// LinkFit is one link's fitted α and β, and the points they were fitted to.
type LinkFit struct {
	LatencyUs float64 `json:"latency_us"` // α, µs
	GBps      float64 `json:"GBps"`       // 1/β, GB/s = 1e9 B/s
	RateGbps  float64 `json:"rate_gbps,omitempty"`
	// Efficiency is GBps over RateGbps/8 (Inter only; 0 when unshaped).
	Efficiency float64 `json:"efficiency,omitempty"`
	// MedianAbsError is the fit's median |relative error| on its points.
	MedianAbsError float64 `json:"median_abs_error"`
	Points         []Point `json:"points"`
}

// Point is one measured size: bytes moved and the time it took, µs.
type Point struct {
	Bytes  int64   `json:"bytes"`
	TimeUs float64 `json:"time_us"`
}

// FitHockney fits t = α + n·β to the points in the two regimes each term
// rules, as LogGP-style parameter extraction does (Alexandrov et al.,
// "LogGP", SPAA 1995; Hockney 1994 reads r∞ and n½ off the same curve): α
// is the least t − n·β over the latency-bound sizes (≤ LatencyMaxBytes;
// the smallest third when none is: the least disturbed, since a busy
// machine only ever adds to a latency), β the least-squares slope of t − α
// over the bandwidth-bound sizes (≥ BandwidthMinBytes; the largest third
// when none is), four times over, so that exact points give α and β back
// (to 1e-9). A
// single weighted fit over every size lets the middle sizes decide, where
// caches (shared memory) and a shaper's burst (tbf passes its bucket at
// line rate) bend the curve. α is in µs, 1/β in GB/s. It needs two sizes
// or more and a positive slope.
func FitHockney(pts []Point) (*LinkFit, error) {
	sizes := map[int64]bool{}
	for _, p := range pts {
		if !(p.TimeUs > 0) || p.Bytes < 0 || math.IsInf(p.TimeUs, 0) {
			return nil, fmt.Errorf("sim: calibration: point %d B in %v µs: want a positive time", p.Bytes, p.TimeUs)
		}
		sizes[p.Bytes] = true
	}
	switch {
	case len(pts) < 2:
		return nil, fmt.Errorf("sim: calibration: %d points: want 2 sizes or more", len(pts))
	case len(sizes) < 2:
		return nil, fmt.Errorf("sim: calibration: the points have one size: want two or more")
	}
	sorted := slices.Clone(pts)
	slices.SortStableFunc(sorted, func(a, b Point) int { return cmp.Compare(a.Bytes, b.Bytes) })
	third := max(1, len(sorted)/3)
	small, large := sorted[:third], sorted[len(sorted)-third:]
	if i := slices.IndexFunc(sorted, func(p Point) bool { return p.Bytes > LatencyMaxBytes }); i > 0 {
		small = sorted[:i]
	}
	if i := slices.IndexFunc(sorted, func(p Point) bool { return p.Bytes >= BandwidthMinBytes }); i >= 0 {
		large = sorted[i:]
	}
	var alpha, beta float64 // µs, µs per byte
	for range 4 {
		alpha = max(0, slices.Min(mapPoints(small, func(p Point) float64 { return p.TimeUs - beta*float64(p.Bytes) })))
		var num, den float64
		for _, p := range large {
			x := float64(p.Bytes)
			num += x * (p.TimeUs - alpha)
			den += x * x
		}
		if !(den > 0) || !(num > 0) {
			return nil, fmt.Errorf("sim: calibration: time does not grow with size over %d B to %d B: measure larger sizes", large[0].Bytes, large[len(large)-1].Bytes)
		}
		beta = num / den
	}
	f := &LinkFit{LatencyUs: alpha, GBps: 1e-3 / beta, Points: slices.Clone(pts)}
	f.MedianAbsError = median(mapPoints(pts, func(p Point) float64 { return math.Abs((alpha+beta*float64(p.Bytes))/p.TimeUs - 1) }))
	return f, nil
}

// The regimes of FitHockney.
const (
	LatencyMaxBytes   = 1 << 10 // sizes up to it time α
	BandwidthMinBytes = 1 << 20 // sizes from it time β
)

func mapPoints(pts []Point, f func(Point) float64) []float64 {
	out := make([]float64, len(pts))
	for i, p := range pts {
		out[i] = f(p)
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Apply is a copy of t with the calibration's figures: the intra-host
// fabric's latency and rate; the network's latency, and its NICs' rate
// from the inter-host Efficiency at t's own NIC rate (so a calibration at
// 1 Gbit/s predicts a cluster shaped to 100 Mbit/s) or, unshaped, the
// measured rate itself. Only runtime "goccl" topologies take one.
func (t *Topology) Apply(c *Calibration) (*Topology, error) {
	if t.Runtime != "goccl" {
		return nil, fmt.Errorf("sim: topology %q: a calibration is for goccl's clusters (runtime goccl), not runtime %q", t.Name, t.Runtime)
	}
	out := *t
	if c.Intra != nil {
		out.Intra.LatencyUs, out.Intra.GBps = c.Intra.LatencyUs, c.Intra.GBps
	}
	if c.Inter != nil && out.NICsPerNode > 0 {
		out.Network.LatencyUs = c.Inter.LatencyUs
		// GocclCosts takes NICs × NICGbps × tcpPayload: give it the rate
		// that makes the measured payload rate.
		payload := c.Inter.GBps
		if c.Inter.Efficiency > 0 {
			payload = c.Inter.Efficiency * out.NICGbps / 8
		} else {
			payload /= float64(out.NICsPerNode)
		}
		out.NICGbps = payload * 8 / tcpPayload
	}
	out.Name = t.Name + " (calibrated)"
	return &out, out.Validate()
}

// LoadCalibration reads a calibration file (JSON, as goccl sim calibrate
// writes it); unknown fields are errors.
func LoadCalibration(r io.Reader) (*Calibration, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var c Calibration
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("sim: calibration: %w", err)
	}
	for name, f := range map[string]*LinkFit{"intra": c.Intra, "inter": c.Inter} {
		if f != nil && (!(f.GBps > 0) || !(f.LatencyUs >= 0) || math.IsInf(f.GBps, 0)) {
			return nil, fmt.Errorf("sim: calibration: %s: GBps %v, latency_us %v: want a positive rate and a latency of zero or more", name, f.GBps, f.LatencyUs)
		}
	}
	if c.Intra == nil && c.Inter == nil {
		return nil, fmt.Errorf("sim: calibration: neither intra nor inter is given")
	}
	return &c, nil
}
