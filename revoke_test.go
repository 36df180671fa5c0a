package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
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

func init() { extraMains["revokefi"] = revokeFIWorker }

// revokeFIWorker runs AllReduces until one fails; rank GOCCL_TEST_REVOKER
// revokes, from another goroutine, when it gets SIGUSR1 (the test picks
// the moment), printing "REVOKE done". On the failure it prints "FAILED
// revoked", "FAILED lost R" or "FAILED other", then shrinks and checks
// the new communicator (shrinkAndCheck: "SHRUNK size sum").
func revokeFIWorker(ctx context.Context) int {
	c, done, err := testInit(ctx, 8*time.Second)
	if err != nil {
		return 2
	}
	defer done()
	if r, _ := strconv.Atoi(os.Getenv("GOCCL_TEST_REVOKER")); r == c.Rank() {
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		go func() {
			<-usr1
			if err := c.Revoke(ctx); err != nil {
				fmt.Println("ERR revoke:", err)
				return
			}
			fmt.Println("REVOKE done")
		}()
	}
	buf := make([]float32, 1<<14)
	for i := 0; ; i++ {
		err := goccl.AllReduce(ctx, c, buf, buf, len(buf), goccl.Sum)
		var lost *goccl.PeerLostError
		switch {
		case err == nil:
			if i == 2 {
				fmt.Println("ready")
			}
			continue
		case errors.Is(err, goccl.ErrRevoked):
			fmt.Println("FAILED revoked")
		case errors.As(err, &lost):
			fmt.Println("FAILED lost", lost.Rank)
		default:
			fmt.Println("FAILED other")
		}
		fmt.Println("error:", err)
		break
	}
	return shrinkAndCheck(ctx, c, c.Rank()+1)
}

// TestRevokeFaultInjection: 3 to 8 ranks (processes) run AllReduces; a
// random rank revokes the communicator at a random moment, and a random
// rank (maybe the revoker) is SIGKILLed, or SIGSTOPped and SIGKILLed up to
// a second later, before the Revoke, while it runs, or just after. Every
// survivor's operation must fail with ErrRevoked or the loss within 5 s of
// the event that ends it (the revocation, else the kill), and all must
// shrink to the same communicator of the survivors (checked by an
// AllReduce of their original ranks + 1), without a hang. Runs alternate
// between shared memory and TCP. GOCCL_TEST_REVOKE_ITERS sets the runs
// (default 4).
func TestRevokeFaultInjection(t *testing.T) {
	iters := faultIters(t, "GOCCL_TEST_REVOKE_ITERS", 4)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for it := range iters {
		n := 3 + rng.IntN(6)
		fc := faultCase{revoker: rng.IntN(n), victim: rng.IntN(n), stop: rng.IntN(3) == 0,
			when:  []string{"before", "during", "after"}[rng.IntN(3)],
			delay: time.Duration(rng.IntN(50)) * time.Millisecond, stopFor: time.Duration(100+rng.IntN(900)) * time.Millisecond}
		if fc.when == "during" {
			fc.delay = time.Duration(rng.IntN(2000)) * time.Microsecond // Revoke takes about a millisecond
		}
		net := []string{"shm", "tcp"}[it%2]
		t.Run(fmt.Sprintf("%d/%s/np%d/%v", it, net, n, fc), func(t *testing.T) {
			runRevokeKill(t, newProcs(t, "revoke test"), net, n, fc)
		})
	}
}

// faultCase is one run's fault: the victim is killed (or stopped, then
// killed after stopFor) delay before, during or after (when) the call
// (the revoker's Revoke, -1 for none: Grow).
type faultCase struct {
	revoker, victim int
	stop            bool
	when            string
	delay, stopFor  time.Duration
}

// inject runs call (what makes the workers act) and signals the victim
// delay before it ("before") or after it, once reached (if not nil) has
// returned; a stopped victim is killed stopFor later. It returns when the
// victim was killed.
func (f faultCase) inject(p *procs, call, reached func()) time.Time {
	sig := syscall.SIGKILL
	if f.stop {
		sig = syscall.SIGSTOP
	}
	if f.when == "before" {
		p.signal(f.victim, sig)
		time.Sleep(f.delay)
		call()
	} else {
		call()
		if reached != nil {
			reached()
		}
		time.Sleep(f.delay)
		p.signal(f.victim, sig)
	}
	if f.stop {
		time.Sleep(f.stopFor)
		p.signal(f.victim, syscall.SIGKILL)
	}
	return time.Now()
}

func (f faultCase) String() string {
	s := fmt.Sprintf("victim%d/%s%v", f.victim, f.when, f.delay)
	if f.revoker >= 0 {
		s = fmt.Sprintf("revoker%d/%s", f.revoker, s)
	}
	if f.stop {
		s += fmt.Sprintf("/stop%v", f.stopFor)
	}
	return s
}

func runRevokeKill(t *testing.T, p *procs, net string, n int, fc faultCase) {
	for r := range n {
		p.start("revokefi", append(rankEnv(r, n, net), "GOCCL_TEST_REVOKER="+strconv.Itoa(fc.revoker))...)
	}
	p.waitAll(nil, "ready", 60*time.Second)
	var revokedAt time.Time
	revoke := func() { revokedAt = time.Now(); p.signal(fc.revoker, syscall.SIGUSR1) }
	var reached func()
	if fc.when == "after" {
		reached = func() { p.waitLine([]int{fc.revoker}, "REVOKE done", 30*time.Second) }
	}
	killedAt := fc.inject(p, revoke, reached)
	p.wait(90*time.Second, fc.victim)
	var survivors []int
	for r := range n {
		if r == fc.victim {
			continue
		}
		survivors = append(survivors, r)
		// The revocation ends every operation if it was made (the
		// revoker lived to store it), else the kill does.
		by := killedAt
		if _, _, ok := p.lineAt(fc.revoker, "REVOKE done"); ok {
			by = revokedAt
		}
		line, at, ok := p.lineAt(r, "FAILED ")
		switch {
		case !ok:
			t.Errorf("process %d: no operation failed", r)
		case line == "FAILED other":
			t.Errorf("process %d: the operation failed with neither ErrRevoked nor the loss", r)
		case at.Sub(by) > 5*time.Second:
			t.Errorf("process %d: the operation failed %v after the revocation or kill, want within 5 s", r, at.Sub(by).Round(time.Millisecond))
		}
	}
	// A victim signalled after the revocation may have shrunk with the
	// others first.
	maybe := fc.victim
	if fc.when == "before" {
		maybe = -1
	}
	checkShrunk(t, p, survivors, maybe, net)
}
