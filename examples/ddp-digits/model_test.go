package main

import (
	"bytes"
	"context"
	"github.com/goccl/goccl/examples/internal/digits"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goccl/goccl/ddp"
	gocclconfig "github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/progress/ptytest"
)

func TestLoadDigits(t *testing.T) {
	ds, err := digits.Load()
	if err != nil {
		t.Fatal(err)
	}
	if ds.Len() != 1797 || len(ds.X) != 1797*digits.Features {
		t.Fatalf("got %d rows, %d features; want 1797 rows of 64", ds.Len(), len(ds.X))
	}
	var perClass [digits.Classes]int
	for _, y := range ds.Y {
		if y < 0 || y >= digits.Classes {
			t.Fatalf("label %d", y)
		}
		perClass[y]++
	}
	// Class counts of the scikit-learn digits set.
	if want := [digits.Classes]int{178, 182, 177, 183, 181, 182, 181, 179, 174, 180}; perClass != want {
		t.Errorf("class counts %v, want %v", perClass, want)
	}
	lo, hi := float32(1), float32(0)
	for _, v := range ds.X {
		lo, hi = min(lo, v), max(hi, v)
	}
	if lo != 0 || hi != 1 {
		t.Errorf("features span [%v,%v], want [0,1]", lo, hi)
	}
	// First row: "0,0,5,13,9,1,0,0,..." with label 0 (no header line).
	if r := ds.Row(0); r[2] != 5.0/16 || r[3] != 13.0/16 || ds.Y[0] != 0 || ds.Y[1] != 1 || ds.Y[2] != 2 {
		t.Errorf("first rows parsed wrongly: %v labels %v", r[:8], ds.Y[:3])
	}

	train, test := digits.SplitTrainTest(ds, 1)
	if train.Len() != 1438 || test.Len() != 359 {
		t.Errorf("split %d/%d, want 1438/359", train.Len(), test.Len())
	}
	tr, te := digits.SplitIndices(ds.Len(), 1)
	seen := make([]bool, ds.Len())
	for _, i := range append(append([]int{}, tr...), te...) {
		if seen[i] {
			t.Fatalf("sample %d in the split twice", i)
		}
		seen[i] = true
	}
	tr2, _ := digits.SplitIndices(ds.Len(), 1)
	tr3, _ := digits.SplitIndices(ds.Len(), 2)
	if !equalInts(tr, tr2) || equalInts(tr, tr3) {
		t.Error("split is not a deterministic function of the seed")
	}
}

func TestParseDigitsCSVErrors(t *testing.T) {
	row := strings.Repeat("0,", digits.Features)
	for name, in := range map[string]string{
		"short":  "1,2,3\n",
		"pixel":  "17," + row[2:] + "3\n",
		"label":  row + "10\n",
		"number": row + "x\n",
		"empty":  "",
	} {
		if _, err := digits.Parse(strings.NewReader(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func toFloat64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// TestGradientCheck compares the analytic gradient of the mean loss with
// central finite differences, in float64, for every parameter of a 64-16-10
// model on 8 real samples; and the float32 model used for training against
// the float64 one.
func TestGradientCheck(t *testing.T) {
	ds, err := digits.Load()
	if err != nil {
		t.Fatal(err)
	}
	const nb = 8
	x := toFloat64(ds.X[:nb*digits.Features])
	y := ds.Y[:nb]
	m := newMLP[float64](digits.Features, 16, digits.Classes, 7)
	// Non-zero biases so that their gradients matter and ReLUs are mixed.
	_, b1, _, b2 := m.split(m.Params)
	for i := range b1 {
		b1[i] = 0.1 * float64(i%5-2)
	}
	for i := range b2 {
		b2[i] = 0.05 * float64(i%3-1)
	}
	grad := make([]float64, len(m.Params))
	m.meanGrad(x, y, grad)

	meanLoss := func() float64 { l, _ := m.lossGrad(x, y, nil); return l / nb }
	const h = 1e-6
	worst := 0.0
	for i := range m.Params {
		p := m.Params[i]
		m.Params[i] = p + h
		up := meanLoss()
		m.Params[i] = p - h
		down := meanLoss()
		m.Params[i] = p
		num := (up - down) / (2 * h)
		err := math.Abs(num-grad[i]) / math.Max(1e-3, math.Abs(num)+math.Abs(grad[i]))
		worst = max(worst, err)
		if err > 1e-5 {
			t.Errorf("param %d: analytic %.9g, numeric %.9g", i, grad[i], num)
		}
	}
	t.Logf("worst relative error %.3g over %d parameters", worst, len(m.Params))

	// The float32 instantiation agrees with float64 on the same parameters.
	m32 := &MLP[float32]{In: m.In, Hidden: m.Hidden, Out: m.Out, Params: make([]float32, len(m.Params))}
	for i, v := range m.Params {
		m32.Params[i] = float32(v)
	}
	g32 := make([]float32, len(grad))
	m32.meanGrad(ds.X[:nb*digits.Features], y, g32)
	if d := relDiff(toFloat64(g32), grad); d > 1e-5 {
		t.Errorf("float32 gradient differs from float64 by %.3g", d)
	}
}

// relDiff is max|a-b| / max(max|b|, tiny).
func relDiff(a, b []float64) float64 {
	var num, den float64
	for i := range a {
		num = max(num, math.Abs(a[i]-b[i]))
		den = max(den, math.Abs(b[i]))
	}
	return num / max(den, 1e-30)
}

func TestShardRange(t *testing.T) {
	for size := 1; size <= 9; size++ {
		for n := 0; n <= 70; n++ {
			next := 0
			for r := range size {
				lo, hi := ddp.Shard(n, size, r)
				if lo != next || hi < lo || hi-lo < n/size || hi-lo > n/size+1 {
					t.Fatalf("ddp.Shard(%d,%d,%d) = [%d,%d), next %d", n, size, r, lo, hi, next)
				}
				next = hi
			}
			if next != n {
				t.Fatalf("shards of %d over %d cover %d", n, size, next)
			}
		}
	}
}

// TestWeightedShardGradients checks the data-parallel arithmetic without any
// collective: sum over ranks of n_r * (mean-loss gradient of shard r), divided
// by the batch size, is the mean-loss gradient of the whole batch, also when
// the batch does not split evenly or some shards are empty.
func TestWeightedShardGradients(t *testing.T) {
	ds, err := digits.Load()
	if err != nil {
		t.Fatal(err)
	}
	m := newMLP[float64](digits.Features, 32, digits.Classes, 3)
	p := len(m.Params)
	for _, b := range []int{64, 67, 3} {
		x, y := toFloat64(ds.X[:b*digits.Features]), ds.Y[:b]
		full := make([]float64, p)
		fullLoss := m.meanGrad(x, y, full)
		for _, size := range []int{1, 2, 3, 4, 5, 7} {
			sum := make([]float64, p)
			g := make([]float64, p)
			var lossSum float64
			for r := range size {
				lo, hi := ddp.Shard(b, size, r)
				l := m.meanGrad(x[lo*digits.Features:hi*digits.Features], y[lo:hi], g)
				for i := range g {
					sum[i] += g[i] * float64(hi-lo)
				}
				lossSum += l * float64(hi-lo)
			}
			for i := range sum {
				sum[i] /= float64(b)
			}
			if d := relDiff(sum, full); d > 1e-12 {
				t.Errorf("batch %d over %d ranks: gradient differs by %.3g", b, size, d)
			}
			if d := math.Abs(lossSum/float64(b) - fullLoss); d > 1e-12 {
				t.Errorf("batch %d over %d ranks: loss differs by %.3g", b, size, d)
			}
		}
	}
}

func testConfig(epochs int) config {
	cfg, err := parseFlags(nil)
	if err != nil {
		panic(err)
	}
	cfg.epochs = epochs
	return cfg
}

var outputLine = regexp.MustCompile(`^epoch [1-9][0-9]* loss [0-9]+\.[0-9]{4} test-accuracy [01]\.[0-9]{4}$`)

// checkOutput checks rank 0's output format for a run of epochs epochs on
// world ranks.
func checkOutput(t *testing.T, out string, epochs, world int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != epochs+2 {
		t.Fatalf("%d output lines, want %d:\n%s", len(lines), epochs+2, out)
	}
	for i, l := range lines[:epochs] {
		if !outputLine.MatchString(l) || !strings.HasPrefix(l, "epoch "+strconv.Itoa(i+1)+" ") {
			t.Errorf("bad epoch line %q", l)
		}
	}
	if !regexp.MustCompile(`^final test accuracy: [01]\.[0-9]{4}$`).MatchString(lines[epochs]) {
		t.Errorf("bad final line %q", lines[epochs])
	}
	if want := "parameters identical on all " + strconv.Itoa(world) + " ranks: yes"; lines[epochs+1] != want {
		t.Errorf("last line %q, want %q", lines[epochs+1], want)
	}
}

// TestTrainSingleProcess: a short run without collectives learns the task.
func TestTrainSingleProcess(t *testing.T) {
	ds, err := digits.Load()
	if err != nil {
		t.Fatal(err)
	}
	train0, test0 := digits.SplitTrainTest(ds, 1)
	var out bytes.Buffer
	res, err := train(context.Background(), nil, testConfig(4), train0, test0, &out)
	if err != nil {
		t.Fatal(err)
	}
	checkOutput(t, out.String(), 4, 1)
	if res.testAccuracy <= 0.9 {
		t.Errorf("test accuracy %.4f after 4 epochs, want > 0.9", res.testAccuracy)
	}
	t.Logf("\n%s", out.String())
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-epochs", "3", "-batch", "10", "-hidden", "64", "-lr", "0.1", "-seed", "9"})
	if err != nil || cfg.epochs != 3 || cfg.batch != 10 || cfg.hidden != 64 || cfg.lr != 0.1 || cfg.seed != 9 {
		t.Errorf("got %+v, %v", cfg, err)
	}
	for _, bad := range [][]string{{"-epochs", "0"}, {"-batch", "0"}, {"-lr", "-1"}, {"-momentum", "1"}, {"-hidden", "0"}, {"extra"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// TestEpochBars: on a terminal (GOCCL_PROGRESS unset: auto), rank 0 draws
// a bar per epoch over its steps; the output lines are untouched.
func TestEpochBars(t *testing.T) {
	ds, err := digits.Load()
	if err != nil {
		t.Fatal(err)
	}
	train0, test0 := digits.SplitTrainTest(ds, 1)
	pty := ptytest.Open(t)
	stderr := os.Stderr
	os.Stderr = pty.TTY
	defer func() { os.Stderr = stderr }()
	t.Setenv(gocclconfig.Progress.Name, "")
	t.Setenv(gocclconfig.ProgressFD.Name, "")
	cfg := testConfig(2)
	var out bytes.Buffer
	res, err := train(context.Background(), nil, cfg, train0, test0, &out)
	if err != nil {
		t.Fatal(err)
	}
	os.Stderr = stderr
	last, rest := ptytest.LastFrames(pty.Output())
	if rest != "" {
		t.Errorf("the terminal got more than bars: %q", rest)
	}
	steps := " " + strconv.Itoa(res.stepsPerEpoch) + "/" + strconv.Itoa(res.stepsPerEpoch) + " "
	for _, name := range []string{"epoch 1/2", "epoch 2/2"} {
		if !strings.Contains(last[name], steps) {
			t.Errorf("last frame of %q: %q, want %q in it (bars %q)", name, last[name], steps, last)
		}
	}
	if len(last) != 2 || strings.Contains(out.String(), "\x1b") {
		t.Errorf("bars %q; output %q", last, out.String())
	}
}
