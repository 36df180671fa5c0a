package mnist

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"slices"
	"strings"
	"testing"
)

// TestLoadMNIST checks the embedded files against MNIST's published facts:
// the set sizes, the per-digit counts, and the first labels.
func TestLoadMNIST(t *testing.T) {
	train, test, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		d      *Dataset
		counts [Classes]int
		first  []uint8
	}{
		{"train", train, [Classes]int{5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949}, []uint8{5, 0, 4, 1, 9, 2, 1, 3, 1, 4}},
		{"test", test, [Classes]int{980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009}, []uint8{7, 2, 1, 0, 4, 1, 4, 9, 5, 9}},
	} {
		var counts [Classes]int
		for _, l := range tc.d.Labels {
			counts[l]++
		}
		if counts != tc.counts {
			t.Errorf("%s: label counts %v, want %v", tc.name, counts, tc.counts)
		}
		if got := tc.d.Labels[:len(tc.first)]; !slices.Equal(got, tc.first) {
			t.Errorf("%s: first labels %v, want %v", tc.name, got, tc.first)
		}
		if len(tc.d.Pixels) != tc.d.Len()*Features {
			t.Errorf("%s: %d pixel bytes for %d images", tc.name, len(tc.d.Pixels), tc.d.Len())
		}
	}
	// The images: MNIST's digits are centred in the 28x28 field, so the
	// outermost ring of pixels is blank in the first training image, and
	// its ink sum is a fixed checksum of the decoded bytes.
	img, sum := train.Image(0), 0
	for i, p := range img {
		sum += int(p)
		if r, c := i/imageSide, i%imageSide; (r == 0 || c == 0 || r == imageSide-1 || c == imageSide-1) && p != 0 {
			t.Errorf("first training image: pixel (%d,%d) = %d on the border", r, c, p)
		}
	}
	if sum != 27525 {
		t.Errorf("first training image: pixel sum %d, want 27525", sum)
	}
}

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// idxFile builds an IDX file of unsigned bytes with the given header words.
func idxFile(magic uint32, dims []uint32, data []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, magic)
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, d)
	}
	return append(b, data...)
}

// TestParseErrors feeds the parser broken files and checks that each is
// refused with an error that says what is wrong.
func TestParseErrors(t *testing.T) {
	realImg, err := dataFS.ReadFile("data/t10k-images-idx3-ubyte.gz")
	if err != nil {
		t.Fatal(err)
	}
	realLab, err := dataFS.ReadFile("data/t10k-labels-idx1-ubyte.gz")
	if err != nil {
		t.Fatal(err)
	}
	rawImg := gunzip(t, realImg)
	img2 := idxFile(idxImagesMagic, []uint32{2, 28, 28}, make([]byte, 2*784))
	lab2 := idxFile(idxLabelsMagic, []uint32{2}, []byte{3, 4})
	if d, err := parseMNIST(gz(t, img2), gz(t, lab2)); err != nil || d.Len() != 2 {
		t.Fatalf("a valid 2-image file: %v", err)
	}
	for _, tc := range []struct {
		name        string
		images, lab []byte // gzip-compressed
		want        string
	}{
		{"real images truncated", gz(t, rawImg[:len(rawImg)-1000]), realLab, "truncated"},
		{"real images gzip stream cut", realImg[:len(realImg)/2], realLab, "unexpected EOF"},
		{"header cut", gz(t, rawImg[:10]), realLab, "dimension sizes"},
		{"empty", gz(t, nil), realLab, "magic number"},
		{"labels as images", realLab, realLab, "magic number 0x00000801, want 0x00000803"},
		{"trailing bytes", gz(t, append(img2, 0)), gz(t, lab2), "1 bytes after"},
		{"not 28x28", gz(t, idxFile(idxImagesMagic, []uint32{1, 27, 28}, make([]byte, 27*28))), gz(t, lab2), "27x28"},
		{"zero size", gz(t, idxFile(idxImagesMagic, []uint32{0, 28, 28}, nil)), gz(t, lab2), "implausible size 0"},
		{"count mismatch", gz(t, img2), gz(t, idxFile(idxLabelsMagic, []uint32{3}, []byte{1, 2, 3})), "2 images but 3 labels"},
		{"label not a digit", gz(t, img2), gz(t, idxFile(idxLabelsMagic, []uint32{2}, []byte{1, 10})), "label 10 of sample 1"},
		{"not gzip", rawImg, realLab, "gzip"},
	} {
		_, err := parseMNIST(tc.images, tc.lab)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// TestShardAndCorrect: a rank's shard of a batch holds its contiguous
// share (the first ranks one more), and Correct counts argmax hits.
func TestShardAndCorrect(t *testing.T) {
	train, _, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	idx := []int{5, 9, 2, 7, 11}
	x := make([]float32, 3*Features)
	labels := make([]uint8, 0, 3)
	xs, ys := train.Shard(idx, 2, 1, x, labels) // rank 1 of 2: idx[3:5]
	if len(ys) != 2 || ys[0] != train.Labels[7] || ys[1] != train.Labels[11] || len(xs) != 2*Features {
		t.Fatalf("rank 1's shard: %d inputs, labels %v, want samples 7 and 11", len(xs)/Features, ys)
	}
	if xs[Features+300] != float32(train.Image(11)[300])*(1.0/255) {
		t.Errorf("pixel 300 of sample 11: %v", xs[Features+300])
	}
	logits := make([]float32, 2*Classes)
	logits[3], logits[Classes+int(ys[1])] = 1, 1
	want := 1
	if ys[0] == 3 {
		want = 2
	}
	if got := Correct(logits, ys); got != want {
		t.Errorf("Correct = %d, want %d", got, want)
	}
}
