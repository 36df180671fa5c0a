package ddp

import (
	"context"

	"github.com/goccl/goccl"
	"github.com/x448/float16"
)

// compressed is a Hook that reduces the buckets in a 16-bit type T: it
// converts the bucket into a per-bucket buffer of T (kept from step to step),
// issues IAllReduce(Avg) in T on it, and on Wait converts the result back
// into the bucket. Halves the bytes on the wire at the cost of T's precision
// (goccl's reduction rounds each partial sum over the ranks to T). With
// prescale it divides by the world size while converting and reduces with
// Sum instead: the partial sums then stay within the range of the average,
// which matters for Float16 (largest finite 65504).
type compressed[T goccl.Float16 | goccl.BFloat16] struct {
	prescale bool
	to       func(float32) T
	from     func(T) float32
	works    []*compressedWork[T] // per bucket
}

type compressedWork[T goccl.Float16 | goccl.BFloat16] struct {
	h    *compressed[T]
	buf  []T
	dst  []float32
	req  goccl.Request
	done bool
	err  error
}

// FP16Compress returns a Hook that reduces each bucket in IEEE binary16
// (goccl.Float16): about 3 significant decimal digits, magnitudes from 6e-8
// (subnormal) to 65504, beyond which values become infinite. The gradients
// are divided by the world size before the conversion and summed, so that
// the partial sums do not overflow where the average would not (tiny
// gradients lose precision instead, in the subnormal range). Each DDP needs
// its own hook value.
func FP16Compress() Hook {
	return &compressed[goccl.Float16]{prescale: true,
		to:   float16.Fromfloat32,
		from: goccl.Float16.Float32,
	}
}

// BF16Compress returns a Hook that reduces each bucket in bfloat16
// (goccl.BFloat16): float32's range with about 2 to 3 significant decimal
// digits (8 bits of mantissa). Each DDP needs its own hook value.
func BF16Compress() Hook {
	return &compressed[goccl.BFloat16]{to: goccl.BFloat16From, from: goccl.BFloat16.Float32}
}

// payloadSizer is a Hook that tells the bytes per gradient element it hands
// to AllReduce (Stats.CommBytes).
type payloadSizer interface{ elemBytes() int64 }

func (h *compressed[T]) elemBytes() int64 { return 2 }

func (h *compressed[T]) Issue(ctx context.Context, c *goccl.Comm, b int, grad []float32) (Work, error) {
	for len(h.works) <= b {
		h.works = append(h.works, &compressedWork[T]{h: h})
	}
	w := h.works[b]
	if cap(w.buf) < len(grad) {
		w.buf = make([]T, len(grad))
	}
	w.buf = w.buf[:len(grad)]
	op := goccl.Avg
	if s := float32(c.Size()); h.prescale && s != 1 {
		op = goccl.Sum
		for i, v := range grad {
			w.buf[i] = h.to(v / s)
		}
	} else {
		for i, v := range grad {
			w.buf[i] = h.to(v)
		}
	}
	w.dst, w.done, w.err = grad, false, nil
	var err error
	w.req, err = goccl.IAllReduce(ctx, c, w.buf, w.buf, len(w.buf), op)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Wait waits for the reduction and decompresses into the bucket (once).
func (w *compressedWork[T]) Wait(ctx context.Context) error {
	if w.done {
		return w.err
	}
	if err := w.req.Wait(ctx); err != nil {
		if ctx != nil && ctx.Err() != nil {
			return err // not done: may be waited for again
		}
		w.done, w.err = true, err
		return err
	}
	for i, v := range w.buf {
		w.dst[i] = w.h.from(v)
	}
	w.done = true
	return nil
}
