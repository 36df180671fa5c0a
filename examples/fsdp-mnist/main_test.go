package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/examples/internal/mnist"
	"github.com/goccl/goccl/fsdp"
	"github.com/goccl/goccl/internal/ranktest"
)

// trainOn runs the example's train on n goroutine ranks and returns
// rank 0's result and output.
func trainOn(t *testing.T, n int, args ...string) (result, string) {
	t.Helper()
	trainSet, testSet, err := mnist.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	results := make([]result, n)
	ranktest.Run(t, n, 2*time.Minute, func(ctx context.Context, c *goccl.Comm) (err error) {
		w := io.Discard
		if c.Rank() == 0 {
			w = &out
		}
		results[c.Rank()], err = train(ctx, c, cfg, trainSet, testSet, w)
		return err
	})
	for r := range results {
		if results[r].accuracy != results[0].accuracy || results[r].loss != results[0].loss {
			t.Errorf("rank %d ended with accuracy %v loss %v, rank 0 with %v %v", r, results[r].accuracy, results[r].loss, results[0].accuracy, results[0].loss)
		}
	}
	return results[0], out.String()
}

// TestStagesAgree: ZeRO-1, 2 and 3 and HSDP train the same model to the
// same loss (the same arithmetic up to the reductions' summation order),
// hold the sharded state in 1/P (P: the shard group's size) by the bytes
// fsdp.Memory counts, and print their lines.
func TestStagesAgree(t *testing.T) {
	common := []string{"-steps", "150", "-hidden", "64,64,64"}
	cfg, err := parseFlags(common)
	if err != nil {
		t.Fatal(err)
	}
	var base result
	for _, tc := range []struct {
		stage, replicate, shardGroup int
	}{{1, 1, 4}, {2, 1, 4}, {3, 1, 4}, {3, 2, 2}} {
		t.Run(fmt.Sprintf("stage=%d/replicate=%d", tc.stage, tc.replicate), func(t *testing.T) {
			res, out := trainOn(t, 4, append(common, "-stage", fmt.Sprint(tc.stage), "-replicate", fmt.Sprint(tc.replicate))...)
			t.Logf("\n%s", out)
			if res.accuracy < 0.9 || res.steps != 150 {
				t.Errorf("%d steps, test accuracy %.4f: want 150 and >= 0.9", res.steps, res.accuracy)
			}
			for _, want := range []string{"epoch 1 loss ", "memory per rank: ", "final test accuracy: ", fmt.Sprintf("summary: ranks=4 stage=%d replicate=%d ", tc.stage, tc.replicate)} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q", want)
				}
			}
			if base.steps == 0 {
				base = res
			} else if math.Abs(res.loss-base.loss) > 1e-4*base.loss {
				t.Errorf("loss %.6f, ZeRO-1's %.6f", res.loss, base.loss)
			}
			// The bytes: a unit of n elements has shards of ceil(n/P).
			p := tc.shardGroup
			var shard, whole, largest int64
			for l := 1; l < len(cfg.sizes); l++ {
				s := int64((cfg.sizes[l]*cfg.sizes[l-1] + cfg.sizes[l] + p - 1) / p)
				shard, whole, largest = shard+s, whole+s*int64(p), max(largest, s*int64(p))
			}
			want := fsdp.Memory{Params: 4 * whole, Grads: 4 * whole, OptState: 8 * shard}
			switch tc.stage {
			case 2:
				want.Grads = 4*shard + 2*4*largest
			case 3:
				want.Params, want.Grads, want.Gather = 4*shard, 4*shard+2*4*largest, 2*4*largest
			}
			if res.memory != want {
				t.Errorf("memory %+v, want %+v", res.memory, want)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"-stage", "4"}, {"-stage", "1", "-replicate", "2"}, {"-hidden", "0"}, {"-lr", "0"}, {"x"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	ranktest.Run(t, 2, time.Minute, func(ctx context.Context, c *goccl.Comm) error {
		cfg, err := parseFlags([]string{"-replicate", "3"})
		if err != nil {
			return err
		}
		if _, err := train(ctx, c, cfg, nil, nil, io.Discard); err == nil || !strings.Contains(err.Error(), "does not divide") {
			return fmt.Errorf("-replicate 3 on 2 ranks: %v", err)
		}
		return nil
	})
}
