// Package mnist is the MNIST handwritten digits (LeCun, Cortes and Burges),
// embedded as the four published IDX files (data/README.md), for the
// training examples.
package mnist

import (
	"bytes"
	"compress/gzip"
	"embed"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
)

// The four MNIST files, gzip-compressed as published; see data/README.md.
//
//go:embed data/*.gz
var dataFS embed.FS

const (
	idxImagesMagic = 0x00000803 // unsigned bytes, 3 dimensions
	idxLabelsMagic = 0x00000801 // unsigned bytes, 1 dimension
	imageSide      = 28
	// Features is the pixels of an image, Classes the number of digits.
	Features = imageSide * imageSide
	Classes  = 10
)

// Dataset is a set of MNIST images: row i of Pixels (Features bytes,
// row-major, 0 background .. 255 ink) has the digit Labels[i].
type Dataset struct {
	Pixels []byte
	Labels []uint8
}

// Len is the number of samples.
func (d *Dataset) Len() int { return len(d.Labels) }

// Image returns the pixels of sample i.
func (d *Dataset) Image(i int) []byte { return d.Pixels[i*Features : (i+1)*Features] }

// Input scales the pixels of samples idx of d to [0, 1] into x
// (len(idx) x Features, row-major).
func (d *Dataset) Input(idx []int, x []float32) {
	for k, i := range idx {
		row := x[k*Features : (k+1)*Features]
		for j, p := range d.Image(i) {
			row[j] = float32(p) * (1.0 / 255)
		}
	}
}

// Subset returns the first n samples (sharing memory with d).
func (d *Dataset) Subset(n int) *Dataset {
	n = min(n, d.Len())
	return &Dataset{Pixels: d.Pixels[:n*Features], Labels: d.Labels[:n]}
}

// readIDX parses an uncompressed IDX file of unsigned bytes: the big-endian
// magic 0x00000800+ndim, ndim big-endian uint32 sizes, then the product of the
// sizes in bytes and nothing more. It returns the sizes and the data.
func readIDX(r io.Reader, ndim int) (dims []int, data []byte, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, nil, fmt.Errorf("reading the magic number: %w", err)
	}
	if want := uint32(0x800 + ndim); binary.BigEndian.Uint32(hdr[:]) != want {
		return nil, nil, fmt.Errorf("magic number %#08x, want %#08x (unsigned bytes, %d dimensions)", binary.BigEndian.Uint32(hdr[:]), want, ndim)
	}
	raw := make([]byte, 4*ndim)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, nil, fmt.Errorf("reading the %d dimension sizes: %w", ndim, err)
	}
	total := 1
	for i := range ndim {
		d := binary.BigEndian.Uint32(raw[4*i:])
		if d == 0 || d > 1<<24 || total > (1<<31)/int(d) {
			return nil, nil, fmt.Errorf("dimension %d has an implausible size %d", i, d)
		}
		dims = append(dims, int(d))
		total *= int(d)
	}
	data = make([]byte, total)
	if n, err := io.ReadFull(r, data); err != nil {
		return nil, nil, fmt.Errorf("file truncated: dimensions %v need %d data bytes, read %d: %w", dims, total, n, err)
	}
	// Trailing bytes mean the header and the data disagree.
	if n, _ := io.Copy(io.Discard, r); n > 0 {
		return nil, nil, fmt.Errorf("%d bytes after the %d data bytes of dimensions %v", n, total, dims)
	}
	return dims, data, nil
}

// parseMNIST reads a gzip-compressed image file and label file into a Dataset,
// checking that they describe the same number of 28x28 images and that every
// label is a digit.
func parseMNIST(imagesGz, labelsGz []byte) (*Dataset, error) {
	gunzip := func(b []byte) (io.Reader, error) { return gzip.NewReader(bytes.NewReader(b)) }
	zi, err := gunzip(imagesGz)
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	dims, pixels, err := readIDX(zi, 3)
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	if dims[1] != imageSide || dims[2] != imageSide {
		return nil, fmt.Errorf("images: %dx%d pixels, want %dx%d", dims[1], dims[2], imageSide, imageSide)
	}
	zl, err := gunzip(labelsGz)
	if err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	ldims, labels, err := readIDX(zl, 1)
	if err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	if ldims[0] != dims[0] {
		return nil, fmt.Errorf("%d images but %d labels", dims[0], ldims[0])
	}
	for i, l := range labels {
		if l >= Classes {
			return nil, fmt.Errorf("labels: label %d of sample %d is not a digit", l, i)
		}
	}
	return &Dataset{Pixels: pixels, Labels: labels}, nil
}

// Load returns the embedded training set (60,000 images) and test set
// (10,000 images), decoded once per process and shared: callers must not
// write to them.
func Load() (train, test *Dataset, err error) {
	sets, err := loadOnce()
	if err != nil {
		return nil, nil, err
	}
	return sets[0], sets[1], nil
}

var loadOnce = sync.OnceValues(func() ([2]*Dataset, error) {
	train, test, err := load()
	return [2]*Dataset{train, test}, err
})

func load() (train, test *Dataset, err error) {
	load := func(prefix string) (*Dataset, error) {
		img, err := dataFS.ReadFile("data/" + prefix + "-images-idx3-ubyte.gz")
		if err != nil {
			return nil, err
		}
		lab, err := dataFS.ReadFile("data/" + prefix + "-labels-idx1-ubyte.gz")
		if err != nil {
			return nil, err
		}
		d, err := parseMNIST(img, lab)
		if err != nil {
			return nil, fmt.Errorf("MNIST %s set: %w", prefix, err)
		}
		return d, nil
	}
	if train, err = load("train"); err != nil {
		return nil, nil, err
	}
	if test, err = load("t10k"); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}
