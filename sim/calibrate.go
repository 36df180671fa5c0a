package sim

import (
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
// 20(3), 1994). It replaces a topology's latencies and rates (Apply);
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

// FitHockney fits t = α + n·β to the points by least squares on the
// relative error (weights 1/t², so 8 bytes and 64 MiB count alike), and
// returns α in µs and 1/β in GB/s. It needs two sizes or more and a
// positive slope.
func FitHockney(pts []Point) (*LinkFit, error) {
	if len(pts) < 2 {
		return nil, fmt.Errorf("sim: calibration: %d points: want 2 sizes or more", len(pts))
	}
	var sw, sx, sy, sxx, sxy float64
	for _, p := range pts {
		if !(p.TimeUs > 0) || p.Bytes < 0 || math.IsInf(p.TimeUs, 0) {
			return nil, fmt.Errorf("sim: calibration: point %d B in %v µs: want a positive time", p.Bytes, p.TimeUs)
		}
		w := 1 / (p.TimeUs * p.TimeUs)
		x := float64(p.Bytes)
		sw += w
		sx += w * x
		sy += w * p.TimeUs
		sxx += w * x * x
		sxy += w * x * p.TimeUs
	}
	det := sw*sxx - sx*sx
	if det <= 0 {
		return nil, fmt.Errorf("sim: calibration: the points have one size: want two or more")
	}
	beta := (sw*sxy - sx*sy) / det // µs per byte
	alpha := (sy - beta*sx) / sw
	if !(beta > 0) {
		return nil, fmt.Errorf("sim: calibration: time does not grow with size (slope %.3g µs/B): measure larger sizes", beta)
	}
	alpha = max(alpha, 0)
	f := &LinkFit{LatencyUs: alpha, GBps: 1e-3 / beta, Points: slices.Clone(pts)}
	errs := make([]float64, len(pts))
	for i, p := range pts {
		errs[i] = math.Abs((alpha+beta*float64(p.Bytes))/p.TimeUs - 1)
	}
	f.MedianAbsError = median(errs)
	return f, nil
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
