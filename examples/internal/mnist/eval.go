package mnist

import (
	"context"
	"fmt"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ddp"
	"github.com/goccl/goccl/examples/internal/nn"
)

// Shard writes rank's contiguous share (ddp.Shard) of the batch idx of d,
// of size ranks, into x (as Input) and labels, and returns them cut to
// its length.
func (d *Dataset) Shard(idx []int, size, rank int, x []float32, labels []uint8) ([]float32, []uint8) {
	lo, hi := ddp.Shard(len(idx), size, rank)
	labels = labels[:0]
	for _, i := range idx[lo:hi] {
		labels = append(labels, d.Labels[i])
	}
	x = x[:(hi-lo)*Features]
	d.Input(idx[lo:hi], x)
	return x, labels
}

// Correct is how many rows of the n x Classes logits have their largest
// value at the label (the first of equal ones).
func Correct(logits []float32, labels []uint8) int {
	correct := 0
	for r, label := range labels {
		if nn.Argmax(logits[r*Classes:(r+1)*Classes]) == int(label) {
			correct++
		}
	}
	return correct
}

// Accuracy is the share of d a model classifies right, scored on c's
// ranks: each takes its shard (ddp.Shard) in chunks of 500 images, every
// rank the same number of chunks (some maybe empty, so forward may be a
// collective), and one AllReduce adds up the counts. forward returns the n
// x Classes logits of the n images x.
func Accuracy(ctx context.Context, c *goccl.Comm, d *Dataset, forward func(x []float32, n int) ([]float32, error)) (float64, error) {
	const chunk = 500
	lo, hi := ddp.Shard(d.Len(), c.Size(), c.Rank())
	rounds := ((d.Len()+c.Size()-1)/c.Size() + chunk - 1) / chunk
	x := make([]float32, chunk*Features)
	idx := make([]int, 0, chunk)
	correct := 0
	for i := range rounds {
		idx = idx[:0]
		for j := lo + i*chunk; j < min(lo+(i+1)*chunk, hi); j++ {
			idx = append(idx, j)
		}
		n := len(idx)
		d.Input(idx, x)
		logits, err := forward(x[:n*Features], n)
		if err != nil {
			return 0, fmt.Errorf("evaluation: %w", err)
		}
		if n > 0 {
			correct += Correct(logits, d.Labels[idx[0]:idx[0]+n])
		}
	}
	counts := []float64{float64(correct), float64(hi - lo)}
	if err := goccl.AllReduce(ctx, c, counts, counts, 2, goccl.Sum); err != nil {
		return 0, fmt.Errorf("evaluation allreduce: %w", err)
	}
	return counts[0] / counts[1], nil
}
