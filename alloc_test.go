package goccl_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

// TestSteadyStateAllocations: after warm-up, collectives allocate nothing per
// operation (both ranks run in this process, so AllocsPerRun counts both).
func TestSteadyStateAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are checked by the full suite (the race detector allocates)")
	}
	for _, shmOff := range []string{"0", "1"} {
		t.Setenv("GOCCL_SHM_DISABLE", shmOff)
		for _, n := range []int{2, 1 << 18, 1 << 20} { // 1<<20: 4 MiB, striped over TCP sockets
			name := fmt.Sprintf("shm_disable=%s/count=%d", shmOff, n)
			var allocs float64
			errs := goroutineRanks(t, 2, time.Minute, func(c *goccl.Comm) error {
				ctx := context.Background()
				buf := make([]float32, n)
				out := make([]float32, 2*n)
				out2 := make([]float32, 2*n)
				op := func() {
					if err := goccl.AllReduce(ctx, c, buf, buf, n, goccl.Sum); err != nil {
						panic(err)
					}
					if err := goccl.AllGather(ctx, c, buf, out, n); err != nil {
						panic(err)
					}
					if err := goccl.Broadcast(ctx, c, buf, buf, n, 1); err != nil {
						panic(err)
					}
					if err := goccl.ReduceScatter(ctx, c, out, buf, n, goccl.Max); err != nil {
						panic(err)
					}
					if err := goccl.AllToAll(ctx, c, out, out2, n); err != nil {
						panic(err)
					}
				}
				for i := 0; i < 5; i++ {
					op()
				}
				const runs = 20
				if c.Rank() == 0 {
					allocs = testing.AllocsPerRun(runs, op)
				} else {
					for i := 0; i < runs+1; i++ {
						op()
					}
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("%s rank %d: %v", name, r, err)
				}
			}
			if allocs != 0 {
				t.Errorf("%s: %.1f allocations per round of 5 collectives, want 0", name, allocs)
			}
		}
	}
}
