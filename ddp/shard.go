package ddp

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/goccl/goccl"
)

// Shard returns the half-open range [lo, hi) of a global batch of n samples
// that rank takes out of size ranks (the DistributedSampler idea): contiguous
// blocks, the first n%size ranks one sample longer, so the shards cover the
// batch exactly once. A rank's shard is empty when n < size.
func Shard(n, size, rank int) (lo, hi int) {
	q, r := n/size, n%size
	lo = rank*q + min(rank, r)
	hi = lo + q
	if rank < r {
		hi++
	}
	return lo, hi
}

// Identical reports whether params is bit-for-bit the same on every rank of
// c (nil c: one rank, true): an AllReduce Max and Min of the values' bit
// patterns, which agree exactly when every rank holds the same bits. It is
// the check that synchronous data parallelism kept the replicas in step.
func Identical(ctx context.Context, c *goccl.Comm, params []float32) (bool, error) {
	if c == nil {
		return true, nil
	}
	hi := make([]uint32, len(params))
	for i, v := range params {
		hi[i] = math.Float32bits(v)
	}
	lo := slices.Clone(hi)
	if err := goccl.AllReduce(ctx, c, hi, hi, len(hi), goccl.Max); err != nil {
		return false, fmt.Errorf("ddp: parameter check allreduce(max): %w", err)
	}
	if err := goccl.AllReduce(ctx, c, lo, lo, len(lo), goccl.Min); err != nil {
		return false, fmt.Errorf("ddp: parameter check allreduce(min): %w", err)
	}
	return slices.Equal(hi, lo), nil
}
