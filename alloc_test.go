package goccl_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

// TestSteadyStateAllocations: after warm-up, collectives allocate nothing per
// operation (both ranks run in this process, so AllocsPerRun counts both),
// blocking or non-blocking (issued together, then waited for).
func TestSteadyStateAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are checked by the full suite (the race detector allocates)")
	}
	for _, shmOff := range []string{"0", "1"} {
		t.Setenv("GOCCL_SHM_DISABLE", shmOff)
		for _, n := range []int{2, 1 << 18, 1 << 20} { // 1<<20: 4 MiB, striped over TCP sockets
			name := fmt.Sprintf("shm_disable=%s/count=%d", shmOff, n)
			var allocs, iallocs float64
			// Neither rank closes its communicator (which publishes a
			// report in the store, allocating) while rank 0 counts: the
			// count is the whole process's.
			var measured sync.WaitGroup
			measured.Add(2)
			errs := goroutineRanks(t, 2, time.Minute, func(c *goccl.Comm) error {
				ctx := context.Background()
				buf := make([]float32, n)
				out := make([]float32, 2*n)
				out2 := make([]float32, 2*n)
				agSend := [][]float32{buf, make([]float32, 3)}
				agRecv := [][]float32{out, make([]float32, 6)}
				rsSend := [][]float32{make([]float32, 2*n), make([]float32, 6)}
				rsRecv := [][]float32{make([]float32, n), make([]float32, 3)}
				splits := []int{n, n}
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
					if err := goccl.AllGatherCoalesced(ctx, c, agSend, agRecv); err != nil {
						panic(err)
					}
					if err := goccl.ReduceScatterCoalesced(ctx, c, rsSend, rsRecv, goccl.Sum); err != nil {
						panic(err)
					}
					if err := goccl.AllToAllSingle(ctx, c, out, splits, out2, splits); err != nil {
						panic(err)
					}
				}
				var reqs [8]goccl.Request
				must := func(r goccl.Request, err error) goccl.Request {
					if err != nil {
						panic(err)
					}
					return r
				}
				iop := func() {
					reqs[0] = must(goccl.IAllReduce(ctx, c, buf, buf, n, goccl.Sum))
					reqs[1] = must(goccl.IAllGather(ctx, c, buf, out, n))
					reqs[2] = must(goccl.IBroadcast(ctx, c, buf, buf, n, 1))
					reqs[3] = must(goccl.IReduceScatter(ctx, c, out, buf, n, goccl.Max))
					reqs[4] = must(goccl.IAllToAll(ctx, c, out, out2, n))
					reqs[5] = must(goccl.IAllGatherCoalesced(ctx, c, agSend, agRecv))
					reqs[6] = must(goccl.IReduceScatterCoalesced(ctx, c, rsSend, rsRecv, goccl.Sum))
					reqs[7] = must(goccl.IAllToAllSingle(ctx, c, out, splits, out2, splits))
					for _, r := range reqs {
						if err := r.Wait(ctx); err != nil {
							panic(err)
						}
					}
				}
				for i := 0; i < 5; i++ {
					op()
					iop()
				}
				const runs = 20
				if c.Rank() == 0 {
					allocs = testing.AllocsPerRun(runs, op)
					iallocs = testing.AllocsPerRun(runs, iop)
				} else {
					for i := 0; i < runs+1; i++ {
						op()
					}
					for i := 0; i < runs+1; i++ {
						iop()
					}
				}
				measured.Done()
				measured.Wait()
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("%s rank %d: %v", name, r, err)
				}
			}
			if allocs != 0 {
				t.Errorf("%s: %.1f allocations per round of 8 collectives, want 0", name, allocs)
			}
			if iallocs != 0 {
				t.Errorf("%s: %.1f allocations per round of 8 non-blocking collectives (issue, then Wait), want 0", name, iallocs)
			}
		}
	}
}
