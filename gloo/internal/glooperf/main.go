// Command glooperf is a Go rank of scripts/peers/gloo_coll_perf.py, the
// Gloo peer benchmark: it runs the same sequence of operations, so it can
// replace any of that script's ranks, and when it is rank 0 it prints the
// same table. scripts/gloo-interop-bench.sh runs it beside the all-Python
// job to measure what a Go rank costs or saves.
//
//	MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 RANK=1 WORLD_SIZE=2 go run ./gloo/internal/glooperf [-b 8] [-e 128M] [-f 4] [-n 20] [-w 5]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/gloo"
)

func size(s string) (int, error) {
	mult := map[byte]int{'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
	if m, ok := mult[strings.ToUpper(s[len(s)-1:])[0]]; ok && len(s) > 1 {
		f, err := strconv.ParseFloat(s[:len(s)-1], 64)
		return int(f * float64(m)), err
	}
	return strconv.Atoi(s)
}

type sizeFlag struct{ v *int }

func (f sizeFlag) String() string {
	if f.v == nil {
		return ""
	}
	return strconv.Itoa(*f.v)
}
func (f sizeFlag) Set(s string) (err error) { *f.v, err = size(s); return err }

func main() {
	b, e := 8, 128<<20
	fs := flag.NewFlagSet("glooperf", flag.ExitOnError)
	fs.Var(sizeFlag{&b}, "b", "smallest size in bytes (K, M, G suffixes)")
	fs.Var(sizeFlag{&e}, "e", "largest size in bytes")
	f := fs.Int("f", 4, "size factor between rows")
	n := fs.Int("n", 20, "timed iterations (a quarter, at least 3, from 8 MiB)")
	w := fs.Int("w", 5, "warm-up iterations")
	fs.Parse(os.Args[1:])
	if err := run(b, e, *f, *n, *w); err != nil {
		fmt.Fprintln(os.Stderr, "glooperf:", err)
		os.Exit(1)
	}
}

func run(b, e, f, n, w int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	g, err := gloo.JoinEnv(ctx)
	if err != nil {
		return err
	}
	defer g.Close()
	r, size := g.Rank(), g.Size()
	if r == 0 {
		fmt.Printf("# goccl gloo (Go rank 0) all_reduce, %d ranks (Gloo peer, out-of-place only)\n", size)
		fmt.Printf("#%12s %12s %6s %6s %6s %10s %8s %8s %6s\n", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong")
	}
	fill := func(t []float32) {
		for i := range t {
			t[i] = float32(r + 1)
		}
	}
	for ; b <= e; b *= f {
		c := max(1, b/4)
		t := make([]float32, c)
		fill(t)
		for i := 0; i < w; i++ {
			if err := gloo.AllReduce(ctx, g, t, goccl.Sum); err != nil {
				return err
			}
		}
		it := n
		if b >= 8<<20 {
			it = max(3, n/4)
		}
		if err := gloo.Barrier(ctx, g); err != nil {
			return err
		}
		t0 := time.Now()
		for i := 0; i < it; i++ {
			if err := gloo.AllReduce(ctx, g, t, goccl.Sum); err != nil {
				return err
			}
		}
		dt := []float64{time.Since(t0).Seconds() / float64(it)}
		if err := gloo.AllReduce(ctx, g, dt, goccl.Max); err != nil {
			return err
		}
		fill(t)
		if err := gloo.AllReduce(ctx, g, t, goccl.Sum); err != nil {
			return err
		}
		want := float32(size * (size + 1) / 2)
		wrong := []int64{0}
		for _, v := range t {
			if v != want {
				wrong[0]++
			}
		}
		if err := gloo.AllReduce(ctx, g, wrong, goccl.Sum); err != nil {
			return err
		}
		if r == 0 {
			alg := float64(b) / dt[0] / 1e9
			fmt.Printf(" %12d %12d %6s %6s %6d %10.2f %8.2f %8.2f %6d\n", b, c, "float", "sum", -1, dt[0]*1e6, alg, alg*2*float64(size-1)/float64(size), wrong[0])
		}
	}
	return nil
}
