package goccl_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

func init() { extraMains["resbench"] = resBenchWorker }

// resBenchWorker times 20 Agrees, then (the benchmark kills the last rank
// once this rank prints "ready") a Shrink, then a Grow by one joiner; it
// prints "TIMES agree shrink grow" in microseconds (Agree's median).
func resBenchWorker(ctx context.Context) int {
	rank, _ := strconv.Atoi(os.Getenv("GOCCL_RANK"))
	size, _ := strconv.Atoi(os.Getenv("GOCCL_WORLD_SIZE"))
	store, err := testStore(ctx, rank)
	if err != nil {
		fmt.Println("ERR dial:", err)
		return 2
	}
	defer store.Close()
	c, err := goccl.Init(ctx, goccl.WithRank(rank), goccl.WithWorldSize(size), goccl.WithStore(store), goccl.WithTimeout(60*time.Second))
	if err != nil {
		fmt.Println("ERR init:", err)
		return 2
	}
	defer c.Close()
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
	g := newGrowRun(b)
	for r := range np {
		g.start("resbench", "GOCCL_RANK="+strconv.Itoa(r), "GOCCL_WORLD_SIZE="+strconv.Itoa(np), "GOCCL_LOCAL_RANK="+strconv.Itoa(r))
	}
	for range np {
		select {
		case <-g.ready:
		case <-time.After(120 * time.Second):
			b.Fatal("ranks not ready after 120 s")
		}
	}
	g.cmds[np-1].Process.Kill()
	g.start("join")
	for i := range g.cmds {
		if i != np-1 {
			<-g.exited[i]
		}
	}
	g.readers.Wait()
	for i := 0; i < np-1; i++ {
		out := g.outs[i].String()
		j := strings.Index(out, "TIMES ")
		if j < 0 {
			for k, o := range g.outs {
				b.Logf("process %d:\n%s", k, o.String())
			}
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
