package goccl_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

// reinitSteps is how many times each rank of TestReinitMultiProcess makes
// and closes a communicator.
const reinitSteps = 30

// reinitWorker is a naive job under `goccl run`: every step it calls
// goccl.Init from the environment, checks one AllReduce, and closes the
// communicator, with no synchronization of its own between the steps (rank
// 0's store of one step is still up while the other ranks start the next).
// Each step has 15 s: a hang fails the test instead of stalling it.
func reinitWorker(ctx context.Context) int {
	const n = 1000
	buf := make([]float32, n)
	for step := 0; step < reinitSteps; step++ {
		sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := func() error {
			c, err := goccl.Init(sctx)
			if err != nil {
				return err
			}
			defer c.Close()
			for i := range buf {
				buf[i] = float32((c.Rank() + 1) * (step + i%7))
			}
			if err := goccl.AllReduce(sctx, c, buf, buf, n, goccl.Sum); err != nil {
				return err
			}
			size := c.Size()
			for i, v := range buf {
				if want := float32(size * (size + 1) / 2 * (step + i%7)); v != want {
					return fmt.Errorf("element %d = %v, want %v", i, v, want)
				}
			}
			return nil
		}()
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "step %d: %v\n", step, err)
			return 1
		}
	}
	fmt.Printf("%d steps\n", reinitSteps)
	return 0
}

// TestReinitMultiProcess: ranks that Init, AllReduce and Close a
// communicator 30 times in a row under the launcher's environment, as a
// naive training loop would, get a working communicator every time (the
// store of each Init is rank 0's new one, never its previous one, which may
// still be up at the same address), over shared memory and over TCP.
func TestReinitMultiProcess(t *testing.T) {
	for _, tc := range []struct {
		n   int
		env string
	}{{2, "GOCCL_SHM_DISABLE=0"}, {3, "GOCCL_SHM_DISABLE=0"}, {3, "GOCCL_SHM_DISABLE=1"}} {
		t.Run(fmt.Sprintf("np%d/%s", tc.n, map[bool]string{true: "tcp", false: "shm"}[strings.HasSuffix(tc.env, "=1")]), func(t *testing.T) {
			start := time.Now()
			outs := spawn(t, tc.n, "reinit", tc.env)
			for r, out := range outs {
				if !strings.Contains(out, strconv.Itoa(reinitSteps)+" steps") {
					t.Fatalf("rank %d did not finish:\n%s", r, out)
				}
			}
			t.Logf("%d ranks, %d steps: %v", tc.n, reinitSteps, time.Since(start).Round(time.Millisecond))
		})
	}
}
