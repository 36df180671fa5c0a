package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
)

// TestProducerConsumer runs the example at 3 ranks (rank 2 only joins the
// window) over shared memory and over RoCE: every block arrives with its
// sequence number (wrong = 0), every figure is measured, and the table
// names the path.
func TestProducerConsumer(t *testing.T) {
	for _, path := range []string{"shm", "roce"} {
		t.Run(path, func(t *testing.T) {
			if path == "roce" {
				t.Setenv("GOCCL_NET", "roce")
				t.Setenv("GOCCL_SHM_DISABLE", "1")
			}
			cfg, err := parseFlags([]string{"-sizes", "8,1000,300K", "-n", "50", "-stream", "40", "-slots", "3"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			store := rendezvous.NewMemStore()
			defer store.Close()
			const n = 3
			var wg sync.WaitGroup
			var out bytes.Buffer
			errs := make([]error, n)
			for r := range n {
				wg.Go(func() {
					c, err := goccl.Init(ctx, goccl.WithRank(r), goccl.WithWorldSize(n), goccl.WithStore(store))
					if err != nil {
						errs[r] = err
						return
					}
					defer c.Close()
					p, rows, err := measure(ctx, c, cfg)
					if err != nil {
						errs[r] = err
						cancel()
						return
					}
					if r != producer {
						return
					}
					printRows(&out, c, p, rows)
					if p != path {
						errs[r] = fmt.Errorf("path %q, want %q", p, path)
					}
					for _, row := range rows {
						if row.wrong != 0 || row.putP50 <= 0 || row.sendP50 <= 0 || row.putGBps <= 0 || row.sendGBps <= 0 {
							errs[r] = fmt.Errorf("row %+v: wrong blocks or a figure not measured", row)
						}
					}
				})
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			t.Log("\n" + out.String())
			if !strings.Contains(out.String(), "window via "+path) || strings.Count(out.String(), "\n") != 3+len(cfg.sizes) {
				t.Errorf("table:\n%s", out.String())
			}
		})
	}
}

// TestFlags: bad flags are refused naming the value.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"-sizes", "4"}, {"-sizes", "1X"}, {"-n", "0"}, {"-slots", "0"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	cfg, err := parseFlags([]string{"-sizes", "8,4K,2M"})
	if err != nil || fmt.Sprint(cfg.sizes) != "[8 4096 2097152]" {
		t.Errorf("sizes %v, %v", cfg.sizes, err)
	}
}
