package goccl_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func init() { extraMains["resbench"] = resBenchWorker }

// resBenchWorker times 20 Agrees, then (the benchmark kills the last rank
// once this rank prints "ready") a Shrink, then a Grow by one joiner; it
// prints "TIMES agree shrink grow" in microseconds (Agree's median).
func resBenchWorker(ctx context.Context) int {
	c, done, err := testInit(ctx, 60*time.Second)
	if err != nil {
		return 2
	}
	defer done()
	var agree []time.Duration
	for range 20 {
		start := time.Now()
		if _, _, err := c.Agree(ctx, 1); err != nil {
			fmt.Println("ERR agree:", err)
			return 1
		}
		agree = append(agree, time.Since(start))
	}
	slices.Sort(agree)
	fmt.Println("ready")
	for {
		if err := c.Barrier(ctx); err != nil {
			break
		}
	}
	start := time.Now()
	nc, err := c.Shrink(ctx)
	if err != nil {
		fmt.Println("ERR shrink:", err)
		return 1
	}
	defer nc.Close()
	shrink := time.Since(start)
	start = time.Now()
	gc, err := nc.Grow(ctx, 1)
	if err != nil {
		fmt.Println("ERR grow:", err)
		return 1
	}
	defer gc.Close()
	fmt.Printf("TIMES %d %d %d\n", agree[len(agree)/2].Microseconds(), shrink.Microseconds(), time.Since(start).Microseconds())
	return 0
}

// BenchmarkResilience times Agree (median of 20), Shrink after a SIGKILL
// and Grow by one joiner, on 4, 8 and 16 processes, each an external
// TCP store's client (the median over the ranks is reported, in ms).
// Run: go test -run '^$' -bench Resilience -benchtime 1x .
func BenchmarkResilience(b *testing.B) {
	for _, np := range []int{4, 8, 16} {
		b.Run(fmt.Sprintf("np%d", np), func(b *testing.B) {
			var agree, shrink, grow []float64
			for range b.N {
				a, s, g := resBenchOnce(b, np)
				agree, shrink, grow = append(agree, a...), append(shrink, s...), append(grow, g...)
			}
			for _, m := range []struct {
				v    []float64
				unit string
			}{{agree, "agree-ms"}, {shrink, "shrink-ms"}, {grow, "grow-ms"}} {
				slices.Sort(m.v)
				b.ReportMetric(m.v[len(m.v)/2], m.unit)
			}
		})
	}
}

func resBenchOnce(b *testing.B, np int) (agree, shrink, grow []float64) {
	p := newProcs(b, "grow test")
	net := "shm" // GOCCL_SHM_DISABLE=1 in the benchmark's environment: tcp
	if os.Getenv("GOCCL_SHM_DISABLE") == "1" {
		net = "tcp"
	}
	for r := range np {
		p.start("resbench", rankEnv(r, np, net)...)
	}
	p.waitAll(nil, "ready", 120*time.Second)
	p.signal(np-1, syscall.SIGKILL)
	p.start("join")
	p.wait(10*time.Minute, np-1)
	for i := 0; i < np-1; i++ {
		out := p.out(i)
		j := strings.Index(out, "TIMES ")
		if j < 0 {
			p.logAll()
			b.Fatalf("rank %d gave no times", i)
		}
		if i == 0 && testing.Verbose() {
			b.Logf("rank 0:\n%s", out)
		}
		var a, s, gr float64
		fmt.Sscanf(out[j:], "TIMES %g %g %g", &a, &s, &gr)
		agree, shrink, grow = append(agree, a/1e3), append(shrink, s/1e3), append(grow, gr/1e3)
	}
	return agree, shrink, grow
}
