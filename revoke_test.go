package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

func init() { extraWorkers["revoke"] = revokeWorker }

// revokeWorker: 5 AllReduces, then rank 1 revokes instead of the 6th (and,
// with GOCCL_TEST_REVOKE_DIE=1, kills itself at once) while the others call
// it; rank 3 first sleeps 1.5 s (an idle rank: its watcher must find the
// revocation). Each prints "REVOKED <ms>" when its 6th operation fails with
// ErrRevoked (ms after it was called) and the same for a 7th, then shrinks
// and prints "SHRUNK size sum".
func revokeWorker(ctx context.Context, c *goccl.Comm) int {
	buf := make([]float32, 1024)
	for range 5 {
		if err := goccl.AllReduce(ctx, c, buf, buf, len(buf), goccl.Sum); err != nil {
			fmt.Println("ERR", err)
			return 1
		}
	}
	if c.Rank() == 1 {
		if err := c.Revoke(ctx); err != nil {
			fmt.Println("ERR revoke:", err)
			return 1
		}
		if os.Getenv("GOCCL_TEST_REVOKE_DIE") == "1" {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
	if c.Rank() == 3 {
		time.Sleep(1500 * time.Millisecond)
	}
	for i := 6; i <= 7; i++ {
		start := time.Now()
		err := goccl.AllReduce(ctx, c, buf, buf, len(buf), goccl.Sum)
		switch {
		case errors.Is(err, goccl.ErrRevoked):
			fmt.Printf("REVOKED %d %d\n", i, time.Since(start).Milliseconds())
		case i == 6 && errors.Is(err, goccl.ErrPeerLost):
			fmt.Printf("LOST %d: %v\n", i, err) // the revoker died first
		default:
			fmt.Printf("ERR op %d: %v\n", i, err)
			return 1
		}
	}
	nc, err := c.Shrink(ctx)
	if err != nil {
		fmt.Println("ERR shrink:", err)
		return 1
	}
	defer nc.Close()
	x := []float32{1}
	if err := goccl.AllReduce(ctx, nc, x, x, 1, goccl.Sum); err != nil {
		fmt.Println("ERR after shrink:", err)
		return 1
	}
	fmt.Printf("SHRUNK %d %g\n", nc.Size(), x[0])
	return 0
}

// TestRevoke: 4 ranks; rank 1 revokes while ranks 0 and 2 wait in an
// AllReduce and rank 3 is idle: every rank's pending and later operations
// fail with ErrRevoked (rank 3's at once, its watcher having read the
// revocation from the store), then all shrink and go on; and the same
// when rank 1 dies right after Revoke returns (the shrink drops it; a
// pending operation may report its death instead). Shared memory and TCP.
func TestRevoke(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	for _, tr := range []struct{ name, env string }{{"shm", "GOCCL_SHM_DISABLE=0"}, {"tcp", "GOCCL_SHM_DISABLE=1"}} {
		for _, die := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/die=%v", tr.name, die), func(t *testing.T) {
				env := []string{tr.env, "GOCCL_TIMEOUT=4s", "GOCCL_JOB_TOKEN=revoke test"}
				if die {
					env = append(env, "GOCCL_TEST_REVOKE_DIE=1")
				}
				outs := spawnAll(t, 4, "revoke", env...)
				want := "SHRUNK 4 4"
				if die {
					want = "SHRUNK 3 3"
				}
				for r, out := range outs {
					if testing.Verbose() {
						t.Logf("rank %d:\n%s", r, out)
					}
					if die && r == 1 {
						continue
					}
					if !strings.Contains(out, want) || strings.Contains(out, "ERR") || !strings.Contains(out, "REVOKED 7") {
						t.Errorf("rank %d, want %q and ErrRevoked:\n%s", r, want, out)
					}
					if i := strings.Index(out, "REVOKED 6 "); r == 3 && i >= 0 {
						var ms int
						fmt.Sscanf(out[i+len("REVOKED 6 "):], "%d", &ms)
						if ms > 100 {
							t.Errorf("rank 3's operation after the revocation took %d ms to fail, want at once", ms)
						}
					}
				}
			})
		}
	}
}

// spawnAll is spawn for jobs in which a rank may die: it returns every
// rank's output, whatever their exit statuses (rank 0 serves the store).
func spawnAll(t *testing.T, n int, mode string, extraEnv ...string) []string {
	t.Helper()
	p := newProcs(t, "")
	addr := freeAddr(t)
	for r := range n {
		p.start(mode, append(append(rankEnv(r, n, "shm"), "GOCCL_STORE_ADDR="+addr, "GOCCL_TIMEOUT=120s"), extraEnv...)...)
	}
	p.wait(90 * time.Second)
	res := make([]string, n)
	for r := range res {
		res[r] = p.out(r)
	}
	return res
}
