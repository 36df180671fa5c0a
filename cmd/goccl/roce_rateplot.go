package main

import (
	"bufio"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/goccl/goccl/internal/cluster"
)

const rateplotUsage = `usage: goccl roce rate-plot [-o rate.png] [--window 100ms] [--link RATE] [--title T] LOG[=LABEL]...

rate-plot reads the rate logs of goccl roce write-bw (--rate-log, one per
flow; the flows may run on several hosts: the logs carry wall-clock times),
draws each flow's goodput over time (bytes completed per --window, solid)
and, where the flow ran DCQCN, its rate limiter's rate (dashed), and prints
a markdown table per flow: bytes, time, goodput over the flow's own run and
over the span in which every flow ran, packets resent, CNPs and rate cuts;
then the aggregate goodput of that common span and, with --link, its share
of the link. MB = 10^6 bytes. The image format follows the extension of -o.
`

// rateSample is one line of a rate log.
type rateSample struct {
	t                                     float64 // seconds, Unix
	bytes                                 float64
	rate                                  float64 // bits/s, 0 without DCQCN
	cnps, cuts, resent, timeouts, seqNAKs uint64
}

// rateFlow is one rate log.
type rateFlow struct {
	label   string
	samples []rateSample
}

func runRatePlot(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("goccl roce rate-plot", stderr, func(fs *cliFlags) {
		fmt.Fprint(fs.Output(), rateplotUsage+"\nFlags:\n")
		fs.PrintDefaults()
	})
	out := fs.StringP("output", "o", "rate.png", "the image to write (.png, .svg, .pdf)")
	window := fs.Duration("window", 100e6, "goodput is averaged over windows of this length")
	title := fs.String("title", "", "the plot's title")
	var link cluster.Rate
	fs.Var(&link, "link", "the bottleneck link's rate (tc units: 1gbit), for the aggregate's share and a line in the plot")
	if status, exit := fs.parseOrExit(args); exit {
		return status
	}
	if fs.NArg() == 0 || *window <= 0 {
		fmt.Fprint(stderr, rateplotUsage)
		return 2
	}
	var flows []rateFlow
	for _, a := range fs.Args() {
		path, label, _ := strings.Cut(a, "=")
		if label == "" {
			label = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		}
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(stderr, "goccl roce rate-plot: %v\n", err)
			return 1
		}
		s, err := readRateLog(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "goccl roce rate-plot: %s: %v\n", path, err)
			return 1
		}
		flows = append(flows, rateFlow{label, s})
	}
	rateSummary(stdout, flows, float64(link))
	if err := drawRates(*out, *title, window.Seconds(), float64(link), flows); err != nil {
		fmt.Fprintf(stderr, "goccl roce rate-plot: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nplot: %s\n", *out)
	return 0
}

// readRateLog parses a rate log (write-bw --rate-log): comment lines, then
// rateLogHeader's columns.
func readRateLog(r io.Reader) ([]rateSample, error) {
	var out []rateSample
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 8 {
			return nil, fmt.Errorf("line %d: %d fields, want 8 (%s)", n, len(f), rateLogHeader)
		}
		var v [8]float64
		for i, x := range f {
			var err error
			if v[i], err = strconv.ParseFloat(x, 64); err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
		}
		out = append(out, rateSample{t: v[0] / 1e9, bytes: v[1], rate: v[2], cnps: uint64(v[3]), cuts: uint64(v[4]),
			resent: uint64(v[5]), timeouts: uint64(v[6]), seqNAKs: uint64(v[7])})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) < 2 {
		return nil, errors.New("fewer than two samples")
	}
	return out, nil
}

// bytesAt is the flow's bytes completed at time t, interpolated between
// samples.
func (f *rateFlow) bytesAt(t float64) float64 {
	s := f.samples
	switch {
	case t <= s[0].t:
		return s[0].bytes
	case t >= s[len(s)-1].t:
		return s[len(s)-1].bytes
	}
	i := 1
	for s[i].t < t {
		i++
	}
	a, b := s[i-1], s[i]
	return a.bytes + (b.bytes-a.bytes)*(t-a.t)/(b.t-a.t)
}

// span is when the flow moved data: from its first sample to the first
// one with all of its bytes.
func (f *rateFlow) span() (start, end float64) {
	s := f.samples
	last := s[len(s)-1]
	end = last.t
	for i := len(s) - 1; i > 0 && s[i-1].bytes == last.bytes; i-- {
		end = s[i-1].t
	}
	return s[0].t, end
}

// rateSummary prints the per-flow table and the common span's aggregate.
func rateSummary(w io.Writer, flows []rateFlow, link float64) {
	common0, common1 := math.Inf(-1), math.Inf(1)
	for i := range flows {
		a, b := flows[i].span()
		common0, common1 = math.Max(common0, a), math.Min(common1, b)
	}
	fmt.Fprintln(w, "| flow | MB | s | MB/s over its run | MB/s while all ran | resent | timeouts | seq NAKs | CNPs | cuts |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var agg, lo, hi float64
	lo = math.Inf(1)
	for i := range flows {
		f := &flows[i]
		a, b := f.span()
		last := f.samples[len(f.samples)-1]
		own := last.bytes / math.Max(b-a, 1e-9) / 1e6
		together := "–"
		if common1 > common0 {
			g := (f.bytesAt(common1) - f.bytesAt(common0)) / (common1 - common0) / 1e6
			agg += g
			lo, hi = math.Min(lo, g), math.Max(hi, g)
			together = fmt.Sprintf("%.1f", g)
		}
		fmt.Fprintf(w, "| %s | %.1f | %.2f | %.1f | %s | %d | %d | %d | %d | %d |\n", f.label, last.bytes/1e6, b-a, own, together,
			last.resent, last.timeouts, last.seqNAKs, last.cnps, last.cuts)
	}
	if common1 <= common0 {
		fmt.Fprintln(w, "\nthe flows never all ran at once")
		return
	}
	fmt.Fprintf(w, "\nall %d flows ran together for %.2f s: aggregate %.1f MB/s", len(flows), common1-common0, agg)
	if link > 0 {
		fmt.Fprintf(w, " (%.0f %% of the link's %.1f MB/s)", 100*agg*1e6/(link/8), link/8/1e6)
	}
	fmt.Fprintf(w, "; the smallest share is %.0f %% of the largest\n", 100*lo/hi)
}

// drawRates plots goodput per window (solid) and the DCQCN rate (dashed)
// of each flow in Mbit/s over seconds since the first flow started.
func drawRates(out, title string, window, link float64, flows []rateFlow) error {
	p := plot.New()
	if title == "" {
		title = "goodput and DCQCN rate per flow"
	}
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "Mbit/s"
	p.Legend.Top = true
	t0 := math.Inf(1)
	for _, f := range flows {
		t0 = math.Min(t0, f.samples[0].t)
	}
	for i, f := range flows {
		a, b := f.span()
		var good plotter.XYs
		for t := a; t < b; t += window {
			e := math.Min(t+window, b)
			if e-t < window/2 {
				break
			}
			good = append(good, plotter.XY{X: (t+e)/2 - t0, Y: (f.bytesAt(e) - f.bytesAt(t)) * 8 / (e - t) / 1e6})
		}
		if len(good) > 0 {
			l, err := plotter.NewLine(good)
			if err != nil {
				return err
			}
			l.Color, l.Width = plotutil.Color(i), vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(f.label+" goodput", l)
		}
		var rc plotter.XYs
		for _, s := range f.samples {
			if s.rate > 0 && s.t <= b {
				rc = append(rc, plotter.XY{X: s.t - t0, Y: s.rate / 1e6})
			}
		}
		if len(rc) > 1 {
			l, err := plotter.NewLine(rc)
			if err != nil {
				return err
			}
			l.Color, l.Dashes = plotutil.Color(i), []vg.Length{vg.Points(3), vg.Points(2)}
			p.Add(l)
			p.Legend.Add(f.label+" DCQCN rate", l)
		}
	}
	if link > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: link / 1e6 / float64(len(flows))}, {X: p.X.Max, Y: link / 1e6 / float64(len(flows))}})
		if err != nil {
			return err
		}
		l.Color, l.Dashes = color.Gray{Y: 0x60}, []vg.Length{vg.Points(1), vg.Points(3)}
		p.Add(l)
		p.Legend.Add("fair share of the link", l)
	}
	p.Y.Min = 0
	return p.Save(9*vg.Inch, 5*vg.Inch, out)
}
