// Package digits loads the UCI handwritten digits data set (the 1797-sample
// copy scikit-learn ships; see testdata/README.md), embedded so that the
// examples need no files at run time.
package digits

import (
	"bufio"
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
)

// digitsCSVGz is the UCI "Optical Recognition of Handwritten Digits" data set
// (the 1797-row copy shipped with scikit-learn; see testdata/README.md),
// embedded so that the binary needs no files at run time.
//
//go:embed testdata/digits.csv.gz
var digitsCSVGz []byte

const (
	Features = 64 // 8x8 pixels
	Classes  = 10 // digits 0..9
	maxPixel = 16 // pixel values are counts in 0..16
)

// Dataset holds n samples: X is row-major n x Features with every feature
// scaled to [0,1], Y the labels in [0, Classes).
type Dataset struct {
	X []float32
	Y []int
}

// Len is the number of samples.
func (d *Dataset) Len() int { return len(d.Y) }

// Row returns sample i's features.
func (d *Dataset) Row(i int) []float32 { return d.X[i*Features : (i+1)*Features] }

// Load parses the embedded data set.
func Load() (*Dataset, error) {
	zr, err := gzip.NewReader(bytes.NewReader(digitsCSVGz))
	if err != nil {
		return nil, fmt.Errorf("digits data: %w", err)
	}
	defer zr.Close()
	ds, err := Parse(zr)
	if err != nil {
		return nil, fmt.Errorf("digits data: %w", err)
	}
	return ds, nil
}

// Parse reads headerless CSV lines of 64 integer pixels in 0..16
// followed by the integer label 0..9, and scales the pixels to [0,1].
func Parse(r io.Reader) (*Dataset, error) {
	ds := &Dataset{}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		fields := strings.Split(text, ",")
		if len(fields) != Features+1 {
			return nil, fmt.Errorf("line %d: %d fields, want %d", line, len(fields), Features+1)
		}
		for j, f := range fields {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return nil, fmt.Errorf("line %d field %d: %w", line, j+1, err)
			}
			if j < Features {
				if v < 0 || v > maxPixel {
					return nil, fmt.Errorf("line %d field %d: pixel %d outside 0..%d", line, j+1, v, maxPixel)
				}
				ds.X = append(ds.X, float32(v)/maxPixel)
				continue
			}
			if v < 0 || v >= Classes {
				return nil, fmt.Errorf("line %d: label %d outside 0..%d", line, v, Classes-1)
			}
			ds.Y = append(ds.Y, v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if ds.Len() == 0 {
		return nil, fmt.Errorf("no samples")
	}
	return ds, nil
}

// Subset returns the samples at idx, in that order.
func (d *Dataset) Subset(idx []int) *Dataset {
	s := &Dataset{X: make([]float32, 0, len(idx)*Features), Y: make([]int, 0, len(idx))}
	for _, i := range idx {
		s.X = append(s.X, d.Row(i)...)
		s.Y = append(s.Y, d.Y[i])
	}
	return s
}

// SplitIndices shuffles 0..n-1 with a PCG generator seeded by seed and puts
// the first n/5 (20%, rounded down) in the test set, the rest in the training
// set. The same seed gives the same split on every rank and every platform.
func SplitIndices(n int, seed uint64) (train, test []int) {
	perm := rand.New(rand.NewPCG(seed, 0x5b117)).Perm(n)
	nTest := n / 5
	return perm[nTest:], perm[:nTest]
}

// SplitTrainTest splits d 80/20 as SplitIndices does.
func SplitTrainTest(d *Dataset, seed uint64) (train, test *Dataset) {
	tr, te := SplitIndices(d.Len(), seed)
	return d.Subset(tr), d.Subset(te)
}
