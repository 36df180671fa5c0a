package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/goccl/goccl/ddp"
	"github.com/goccl/goccl/examples/internal/exmain"
	"github.com/goccl/goccl/examples/internal/mnist"
)

// dataParallel is the single-process DataParallel pattern
// (torch.nn.DataParallel) that DDP replaced, for the seeds'
// dataparallel-vs-ddp lab: one process drives n replicas of the model.
// Each step the main replica's parameters are copied into the others
// (DataParallel's replicate: a broadcast), the batch is scattered into
// contiguous shards, every replica runs forward and backward on its own
// goroutine, and the gradients are gathered on the main replica and added
// up there (reduce-add), which then applies the update alone. (DataParallel
// also gathers the outputs and computes the loss on the main device; the
// loss here is computed per replica, which for a per-sample loss is the
// same arithmetic without moving 10 logits per sample.)
type dataParallel struct {
	replicas []*MLP
	grads    [][]float32 // per replica: the gradient of the mean loss over its shard
	xs       [][]float32
	opt      *adam
	// serial is the time the main replica spent alone in the last step:
	// replicating the parameters, adding up the gradients, the update.
	serial time.Duration
}

func newDataParallel(sizes []int, seed uint64, lr float64, n int) *dataParallel {
	d := &dataParallel{}
	for range n {
		m := newMLP(sizes, seed)
		d.replicas = append(d.replicas, m)
		d.grads = append(d.grads, make([]float32, len(m.Params)))
		d.xs = append(d.xs, nil)
	}
	d.opt = newAdam(len(d.replicas[0].Params), lr)
	return d
}

// step trains on the global batch idx of ds and returns the summed loss.
func (d *dataParallel) step(ds *mnist.Dataset, idx []int) float64 {
	n := len(d.replicas)
	main := d.replicas[0]
	t0 := time.Now()
	// Replicate: the main replica's parameters into every other.
	for _, r := range d.replicas[1:] {
		copy(r.Params, main.Params)
	}
	d.serial = time.Since(t0)
	losses := make([]float64, n)
	var wg sync.WaitGroup
	for i, r := range d.replicas {
		lo, hi := ddp.Shard(len(idx), n, i)
		if hi == lo {
			clear(d.grads[i])
			continue
		}
		wg.Go(func() {
			if cap(d.xs[i]) < (hi-lo)*mnist.Features {
				d.xs[i] = make([]float32, (hi-lo)*mnist.Features)
			}
			x := d.xs[i][:(hi-lo)*mnist.Features]
			ds.Input(idx[lo:hi], x)
			y := make([]uint8, hi-lo)
			for k, j := range idx[lo:hi] {
				y[k] = ds.Labels[j]
			}
			losses[i], _ = r.lossGrad(x, y, d.grads[i])
			// Weight the shard's mean by its share of the batch.
			scaleBy(d.grads[i], float32(hi-lo)/float32(len(idx)))
		})
	}
	wg.Wait()
	t0 = time.Now()
	// Gather and reduce-add on the main replica.
	g := d.grads[0]
	for _, o := range d.grads[1:] {
		for j, v := range o {
			g[j] += v
		}
	}
	d.opt.step(main.Params, g)
	d.serial += time.Since(t0)
	var sum float64
	for _, l := range losses {
		sum += l
	}
	return sum
}

// evaluate is the main replica's test accuracy.
func (d *dataParallel) evaluate(ds *mnist.Dataset) float64 {
	m := d.replicas[0]
	const chunk = 500
	x := make([]float32, chunk*mnist.Features)
	idx := make([]int, 0, chunk)
	correct := 0
	for s := 0; s < ds.Len(); s += chunk {
		idx = idx[:0]
		for i := s; i < min(s+chunk, ds.Len()); i++ {
			idx = append(idx, i)
		}
		ds.Input(idx, x)
		_, c := m.lossGrad(x[:len(idx)*mnist.Features], ds.Labels[s:s+len(idx)], nil)
		correct += c
	}
	return float64(correct) / float64(ds.Len())
}

// runDataParallel trains with -dataparallel replicas in this one process
// (no communicator) and prints ddp-mnist's epoch lines and a summary line
// with mode=dataparallel.
func runDataParallel(ctx context.Context, cfg config, trainSet, testSet *mnist.Dataset, out io.Writer) error {
	d := newDataParallel(cfg.sizes(), cfg.seed, cfg.lr, cfg.dataParallel)
	n := trainSet.Len()
	_, total, epochs, warmup := exmain.Schedule(n, cfg.batch, cfg.epochs, cfg.steps)
	fmt.Fprintf(out, "MLP %v: %d parameters; DataParallel: %d replicas in one process, global batch %d\n",
		cfg.sizes(), len(d.replicas[0].Params), cfg.dataParallel, cfg.batch)
	var timed, serial time.Duration
	step := 0
	acc, lastLoss := 0.0, 0.0
	for epoch := 1; epoch <= epochs; epoch++ {
		perm := rand.New(rand.NewPCG(cfg.seed, uint64(epoch))).Perm(n)
		var loss float64
		samples, start := 0, time.Now()
		for s := 0; s < n && step < total; s += cfg.batch {
			if err := ctx.Err(); err != nil {
				return err
			}
			d.opt.lr = exmain.CosineLR(cfg.lr, step, total)
			step++
			idx := perm[s:min(s+cfg.batch, n)]
			t0 := time.Now()
			loss += d.step(trainSet, idx)
			if step > warmup {
				timed, serial = timed+time.Since(t0), serial+d.serial
			}
			samples += len(idx)
		}
		acc, lastLoss = d.evaluate(testSet), loss/float64(samples)
		fmt.Fprintf(out, "epoch %d loss %.4f test-accuracy %.4f step %.1f ms\n", epoch, lastLoss, acc,
			time.Since(start).Seconds()*1e3/float64(max(samples/cfg.batch, 1)))
	}
	fmt.Fprintf(out, "final test accuracy: %.4f\n", acc)
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(max(step-warmup, 1)) }
	fmt.Fprintf(out, "summary: mode=dataparallel replicas=%d batch=%d steps=%d warmup=%d step_ms=%.3f serial_ms=%.3f accuracy=%.4f loss=%.4f\n",
		cfg.dataParallel, cfg.batch, step, warmup, ms(timed), ms(serial), acc, lastLoss)
	return nil
}
