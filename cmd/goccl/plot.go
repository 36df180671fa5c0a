package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/goccl/goccl/doctor/nccltests"
)

const plotUsage = `usage: goccl plot [-o busbw.png] [-y busbw|algbw|time] [--inplace] [--title T] FILE[=LABEL]...

plot draws the result tables of nccl-tests-format outputs (goccl perf, NVIDIA's
nccl-tests, or a file holding several runs; the text report or the JSON file
of -J) as curves over the message size (log2 axis, bytes), several runs
overlaid, for example goccl against a peer:

    goccl run -np 2 goccl perf allreduce -b 8 -e 64M -f 2 > goccl.txt
    goccl plot -o busbw.png goccl.txt=goccl mpi.txt=OpenMPI

-y (--metric) chooses the value: busbw (GB/s, 1 GB = 1e9 B; the default),
algbw (GB/s) or time (µs, log axis). Out-of-place results unless --inplace.
Each table of a file is one curve, labelled LABEL (or the file name) with
the collective and the rank count. The image format follows the extension
of -o (--output): .png, .svg, .pdf, .eps, .jpg, .tif. Flags may come before
or after the files; long ones also take one dash (-inplace).
`

func init() {
	register(&command{
		name:    "plot",
		summary: "plot busbw/algbw/time curves of nccl-tests-format outputs (goccl perf, nccl-tests), runs overlaid",
		usage:   "goccl plot [-o OUT.png] [-y busbw|algbw|time] [--inplace] FILE[=LABEL]...",
		run:     runPlot,
	})
}

// curve is one table's points.
type curve struct {
	label string
	xy    plotter.XYs
}

func runPlot(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("goccl plot", stderr, func(fs *cliFlags) {
		fmt.Fprint(fs.Output(), plotUsage+"\nFlags:\n")
		fs.PrintDefaults()
	})
	out := fs.StringP("output", "o", "busbw.png", "output image; the format follows the extension")
	metric := fs.StringP("metric", "y", "busbw", "busbw, algbw or time")
	inPlace := fs.Bool("inplace", false, "plot the in-place results")
	title := fs.String("title", "", "plot title (default: the collectives plotted)")
	if status, exit := fs.parseOrExit(args); exit {
		return status
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "goccl plot: no input files given")
		return 2
	}
	switch *metric {
	case "busbw", "algbw", "time":
	default:
		fmt.Fprintf(stderr, "goccl plot: -y %q: want busbw, algbw or time\n", *metric)
		return 2
	}
	var curves []curve
	colls := map[string]bool{}
	for _, arg := range fs.Args() {
		path, label, _ := strings.Cut(arg, "=")
		cs, names, err := readCurves(path, label, *metric, *inPlace)
		if err != nil {
			fmt.Fprintf(stderr, "goccl plot: %v\n", err)
			return 1
		}
		curves = append(curves, cs...)
		for _, n := range names {
			colls[n] = true
		}
	}
	if err := drawPlot(*out, *title, *metric, *inPlace, curves, colls); err != nil {
		fmt.Fprintf(stderr, "goccl plot: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "goccl plot: %d curve(s) in %s\n", len(curves), *out)
	return 0
}

// plotReport draws the busbw curves of goccl perf's own report (for -plot).
func plotReport(report io.Reader, out string) error {
	cs, names, err := tableCurves(report, "goccl perf", "busbw", false)
	if err != nil {
		return err
	}
	colls := map[string]bool{}
	for _, n := range names {
		colls[n] = true
	}
	return drawPlot(out, "", "busbw", false, cs, colls)
}

// readCurves reads the tables of one file.
func readCurves(path, label, metric string, inPlace bool) ([]curve, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if label == "" {
		label = filepath.Base(path)
	}
	cs, names, err := tableCurves(f, label, metric, inPlace)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return cs, names, nil
}

// readTests reads the result tables of nccl-tests-format output: the text
// report, or the JSON that -J (and nccl-tests' own JSON output) writes.
func readTests(r io.Reader) ([]nccltests.Test, error) {
	br := bufio.NewReader(r)
	for {
		b, err := br.ReadByte()
		if err != nil {
			break // empty or unreadable: the text reader says so
		}
		if b == ' ' || b == '\t' || b == '\r' || b == '\n' {
			continue
		}
		br.UnreadByte()
		if b == '{' {
			return jsonTests(br)
		}
		break
	}
	rep, err := nccltests.Read(br, nccltests.Options{})
	if err != nil {
		return nil, err
	}
	if len(rep.Tests) == 0 {
		return nil, errors.New("no nccl-tests result table")
	}
	return rep.Tests, nil
}

// jsonTests reads one or more JSON reports (jsonReport, one after the
// other) as one table each.
func jsonTests(r io.Reader) ([]nccltests.Test, error) {
	dec := json.NewDecoder(r)
	var tests []nccltests.Test
	for n := 1; ; n++ {
		var rep jsonReport
		if err := dec.Decode(&rep); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("JSON report %d: %w", n, err)
		}
		tests = append(tests, jsonTest(&rep))
	}
	if len(tests) == 0 {
		return nil, errors.New("no JSON report")
	}
	return tests, nil
}

// jsonTest is a JSON report's results as a table: the collective from
// goccl's section, else from the program's name (nccl-tests'
// all_reduce_perf), the ranks from goccl's section, else the devices.
func jsonTest(rep *jsonReport) nccltests.Test {
	t := nccltests.Test{Collective: rep.Goccl.Collective, Ranks: rep.Goccl.NRanks, Format: "json"}
	if t.Collective == "" && len(rep.Args) > 0 {
		if c, err := lookupColl(filepath.Base(rep.Args[0])); err == nil {
			t.Collective = c.name
		}
	}
	if t.Collective == "" {
		t.Collective = "unknown"
	}
	if t.Ranks == 0 {
		t.Ranks = len(rep.Config.Devices)
	}
	for _, row := range rep.Results {
		in := jsonResultOf(row.InPlace)
		t.Rows = append(t.Rows, nccltests.Row{Size: row.Size, Count: row.Count, Type: row.Type, Redop: row.Redop,
			OutOfPlace: *jsonResultOf(row.OutOfPlace), InPlace: in})
	}
	return t
}

// jsonResultOf is one JSON result as the text reader gives it; the time is
// "time", or "cpu_time" (-C 1).
func jsonResultOf(r jsonResult) *nccltests.Result {
	res := &nccltests.Result{AlgBW: r.AlgBW, BusBW: r.BusBW}
	switch {
	case r.Time != nil:
		res.TimeUS = *r.Time
	case r.CPUTime != nil:
		res.TimeUS = *r.CPUTime
	}
	if r.NWrong != nil {
		res.Wrong = int64(*r.NWrong)
	}
	return res
}

// tableCurves reads the tables of nccl-tests-format output (text or JSON)
// as curves.
func tableCurves(r io.Reader, label, metric string, inPlace bool) ([]curve, []string, error) {
	tests, err := readTests(r)
	if err != nil {
		return nil, nil, err
	}
	var cs []curve
	var names []string
	for _, t := range tests {
		c := curve{label: fmt.Sprintf("%s: %s", label, t.Collective)}
		if t.Ranks > 0 {
			c.label += fmt.Sprintf(", %d ranks", t.Ranks)
		}
		for _, r := range t.Rows {
			res := &r.OutOfPlace
			if inPlace {
				if r.InPlace == nil {
					continue
				}
				res = r.InPlace
			}
			y := res.BusBW
			switch metric {
			case "algbw":
				y = res.AlgBW
			case "time":
				y = res.TimeUS
			}
			if r.Size <= 0 || (metric == "time" && y <= 0) {
				continue // no point on a log axis
			}
			c.xy = append(c.xy, plotter.XY{X: float64(r.Size), Y: y})
		}
		if len(c.xy) == 0 {
			continue
		}
		cs = append(cs, c)
		names = append(names, t.Collective)
	}
	if len(cs) == 0 {
		return nil, nil, errors.New("no row with a positive size to plot")
	}
	return cs, names, nil
}

// drawPlot draws the curves and saves the image.
func drawPlot(out, title, metric string, inPlace bool, curves []curve, colls map[string]bool) error {
	p := plot.New()
	if title == "" {
		var names []string
		for n := range colls {
			names = append(names, n)
		}
		sort.Strings(names)
		title = strings.Join(names, ", ")
		if inPlace {
			title += " (in place)"
		}
	}
	p.Title.Text = title
	p.X.Label.Text = "message size (bytes)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = sizeTicks{}
	switch metric {
	case "busbw":
		p.Y.Label.Text = "bus bandwidth (GB/s)"
	case "algbw":
		p.Y.Label.Text = "algorithm bandwidth (GB/s)"
	case "time":
		p.Y.Label.Text = "time (µs)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top, p.Legend.Left = true, true
	for i, c := range curves {
		l, pts, err := plotter.NewLinePoints(c.xy)
		if err != nil {
			return err
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(c.label, l, pts)
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, out)
}

// sizeTicks marks powers of 4 on the size axis as 8B, 1KiB, 64MiB, ...
type sizeTicks struct{}

func (sizeTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log2(math.Max(min, 1))); math.Exp2(e) <= max; e++ {
		v := math.Exp2(e)
		if v < min {
			continue
		}
		t := plot.Tick{Value: v}
		if int(e)%2 == 1 || e < 3 {
			t.Label = sizeLabel(int64(v))
		}
		ts = append(ts, t)
	}
	return ts
}

func sizeLabel(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprintf("%d", n)
}
