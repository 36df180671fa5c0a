package goccl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/ranktest"
	"github.com/goccl/goccl/internal/ras"
)

func init() { extraWorkers["ras"] = rasWorker }

// rasWorker runs 1 MiB AllReduces until one fails, printing "ready" after
// the first two; then it stays alive (its communicator open, so that rank
// 0 keeps serving the health query) until its standard input closes.
func rasWorker(ctx context.Context, c *goccl.Comm) int {
	buf := make([]float32, 256<<10)
	for i := 0; ; i++ {
		if err := goccl.AllReduce(ctx, c, buf, buf, len(buf), goccl.Sum); err != nil {
			fmt.Printf("failed: %v\n", err)
			break
		}
		if i == 1 {
			fmt.Println("ready")
		}
	}
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// rasJob is a job of rasWorker ranks serving the health query.
type rasJob struct {
	addr  string
	cmds  []*exec.Cmd
	stdin []io.WriteCloser
	rankOutputs
}

func startRASJob(t *testing.T, n int, env ...string) *rasJob {
	t.Helper()
	j := &rasJob{addr: freeAddr(t), rankOutputs: rankOutputs{outs: make([]strings.Builder, n)}}
	store := freeAddr(t)
	ready := make(chan int, n)
	var readers sync.WaitGroup
	for r := 0; r < n; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "GOCCL_TEST_WORKER=ras", "GOCCL_RANK="+strconv.Itoa(r),
			"GOCCL_WORLD_SIZE="+strconv.Itoa(n), "GOCCL_LOCAL_RANK="+strconv.Itoa(r), "GOCCL_STORE_ADDR="+store,
			"GOCCL_TIMEOUT=120s", "GOCCL_RAS_ADDR="+j.addr)
		cmd.Env = append(cmd.Env, env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no orphan loops on if the test dies
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		j.cmds, j.stdin = append(j.cmds, cmd), append(j.stdin, in)
		startWatched(t, cmd, &readers, func(line string) {
			j.add(r, line)
			if line == "ready" {
				ready <- r
			}
		}, nil)
	}
	t.Cleanup(func() {
		for r, c := range j.cmds {
			c.Process.Signal(syscall.SIGCONT)
			j.stdin[r].Close()
			c.Process.Kill()
		}
		readers.Wait()
	})
	for i := 0; i < n; i++ {
		select {
		case <-ready:
		case <-time.After(60 * time.Second):
			t.Fatalf("ranks not ready after 60 s:\n%s", j.output())
		}
	}
	return j
}

// query runs one STATUS session (json: SET FORMAT json) with TIMEOUT secs.
func (j *rasJob) query(t *testing.T, secs int, asJSON, verbose bool) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	c, err := ras.Dial(context.Background(), j.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetTimeout(time.Duration(secs) * time.Second); err != nil {
		t.Fatal(err)
	}
	if asJSON {
		if err := c.SetFormat("json"); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := c.Status(&out, verbose); err != nil {
		t.Fatalf("status: %v\n%s", err, out.String())
	}
	return out.String(), time.Since(start)
}

// TestHealthQueryStoppedRank: one of 3 ranks is SIGSTOPped inside an
// AllReduce. STATUS answers within its timeout plus slack, names the
// stopped rank as not progressing (its process stopped) and the two others
// as in AllReduce op #N (or one of them in #N+1); the JSON reply parses and
// says the same; then
// MONITOR streams PEER_DEAD for that rank once it is killed. Shared memory
// and TCP.
func TestHealthQueryStoppedRank(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	for _, tr := range []struct{ name, env string }{{"shm", "GOCCL_SHM_DISABLE=0"}, {"tcp", "GOCCL_SHM_DISABLE=1"}} {
		t.Run(tr.name, func(t *testing.T) { testHealthQueryStoppedRank(t, tr.env) })
	}
}

func testHealthQueryStoppedRank(t *testing.T, env string) {
	const n, victim, secs = 3, 2, 1
	j := startRASJob(t, n, env)
	if err := j.cmds[victim].Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The others block in the next AllReduce; after ras.StallAfter (and a
	// tick of the watchers, 1 s with this timeout, which time the links'
	// idleness) the status says what they wait on.
	time.Sleep(ras.StallAfter + 1500*time.Millisecond)
	text, took := j.query(t, secs, false, true)
	t.Logf("VERBOSE STATUS (%v):\n%s", took, text)
	if took > secs*time.Second+3*time.Second {
		t.Errorf("STATUS took %v with TIMEOUT %d", took, secs)
	}
	for _, want := range []string{"Job summary", "Communicators...", "INCOMPLETE", "(NCCL RAS client protocol 2)",
		fmt.Sprintf("Rank %d is not progressing: not answering (no answer in %ds; process %d is stopped (SIGSTOP", victim, secs, j.cmds[victim].Process.Pid)} {
		if !strings.Contains(text, want) {
			t.Errorf("STATUS lacks %q:\n%s", want, text)
		}
	}
	// The answering ranks wait (on rank 2, or on the rank that waits on
	// it); none of them is the cause.
	for r := range victim {
		if !regexp.MustCompile(fmt.Sprintf(`  Rank %d is waiting on rank \d in op #\d+ AllReduce`, r)).MatchString(text) {
			t.Errorf("STATUS does not say what rank %d waits on:\n%s", r, text)
		}
	}
	if !strings.Contains(text, fmt.Sprintf("is waiting on rank %d in op #", victim)) || strings.Contains(text, "but is not progressing") {
		t.Errorf("STATUS does not say that the others wait on rank %d, or says that one of them is not progressing:\n%s", victim, text)
	}
	// Ranks 0 and 1 wait in op #N, or one of them already in #N+1 when it
	// had all it needed of #N (a TCP send buffered ahead, for example).
	seqOf := map[int]uint64{}
	re := regexp.MustCompile(`  \d ranks? (?:is|are) in op #(\d+) AllReduce \(count 262144, 1\.0 MiB\) for [0-9.-]+s: ranks? ([0-9, ]+)\n`)
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		seq, _ := strconv.ParseUint(m[1], 10, 64)
		for _, r := range strings.Split(m[2], ", ") {
			k, _ := strconv.Atoi(r)
			seqOf[k] = seq
		}
	}
	if len(seqOf) != 2 || seqOf[0] == 0 || seqOf[1] == 0 || max(seqOf[0], seqOf[1])-min(seqOf[0], seqOf[1]) > 1 {
		t.Fatalf("STATUS does not show ranks 0 and 1 in AllReduce #N or #N+1 (%v):\n%s", seqOf, text)
	}

	js, _ := j.query(t, secs, true, false)
	var doc struct {
		Comms []struct {
			Size  int `json:"size"`
			Ranks []struct {
				Rank int     `json:"rank"`
				Op   *ras.Op `json:"operation"`
			} `json:"ranks"`
			Missing []struct {
				Rank   int `json:"rank"`
				Status struct {
					Unresponsive bool `json:"unresponsive"`
					Dead         bool `json:"considered_dead"`
				} `json:"status"`
			} `json:"missing_ranks"`
		} `json:"communicators"`
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatalf("JSON reply does not parse: %v\n%s", err, js)
	}
	if len(doc.Comms) != 1 || doc.Comms[0].Size != n || len(doc.Comms[0].Ranks) != n-1 || len(doc.Comms[0].Missing) != 1 ||
		doc.Comms[0].Missing[0].Rank != victim || !doc.Comms[0].Missing[0].Status.Unresponsive {
		t.Fatalf("JSON reply: %+v\n%s", doc, js)
	}
	for _, r := range doc.Comms[0].Ranks {
		if r.Op == nil || r.Op.Seq != seqOf[r.Rank] || r.Op.Kind != "AllReduce" {
			t.Errorf("JSON: rank %d's operation is %+v, want op #%d AllReduce", r.Rank, r.Op, seqOf[r.Rank])
		}
	}

	// MONITOR: the stopped rank is killed; a PEER_DEAD event names it.
	c, err := ras.Dial(context.Background(), j.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { pw.CloseWithError(c.Monitor(ctx, pw, "")) }()
	time.Sleep(1500 * time.Millisecond) // the monitor's first probe sees the rank stopped
	j.cmds[victim].Process.Kill()
	killed := time.Now()
	lines := make(chan string, 16)
	go func() {
		b := make([]byte, 4096)
		for {
			k, err := pr.Read(b)
			if k > 0 {
				lines <- string(b[:k])
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	want := fmt.Sprintf("PEER_DEAD: Process %d on node ", j.cmds[victim].Process.Pid)
	var got strings.Builder
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("monitor ended without PEER_DEAD:\n%s", got.String())
			}
			got.WriteString(l)
			if strings.Contains(got.String(), want) && strings.Contains(got.String(), fmt.Sprintf("managing rank %d", victim)) {
				t.Logf("PEER_DEAD %v after the kill: %s", time.Since(killed).Round(time.Millisecond), strings.TrimSpace(got.String()))
				return
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("no PEER_DEAD 15 s after the kill; monitor said:\n%s\njob:\n%s", got.String(), j.output())
		}
	}
}

// TestHealthQueryInProcess: with GOCCL_RAS_ADDR set, 2 ranks (goroutines
// of this process) run AllReduces, which allocate nothing; then rank 1
// waits in a Barrier that rank 0 has not entered: STATUS says so (rank 1
// in op #N Barrier, rank 0 idle after op #N-1, "has not entered"), and
// VERBOSE STATUS lists each rank's link with the bytes it moved.
func TestHealthQueryInProcess(t *testing.T) {
	j := &rasJob{addr: freeAddr(t)}
	t.Setenv("GOCCL_RAS_ADDR", j.addr)
	ranktest.Run(t, 2, 30*time.Second, func(ctx context.Context, c *goccl.Comm) error {
		x := make([]float32, 1024)
		op := func() {
			if err := goccl.AllReduce(ctx, c, x, x, len(x), goccl.Sum); err != nil {
				panic(err)
			}
		}
		op()
		if n := testing.AllocsPerRun(100, op); n != 0 && !testing.Short() {
			return fmt.Errorf("%v allocations per AllReduce with the health query on", n)
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			time.Sleep(200 * time.Millisecond) // rank 1 waits in the next Barrier
			text, _ := j.query(t, 2, false, true)
			m := regexp.MustCompile(`  1 rank is in op #(\d+) Barrier for [0-9.]+s: rank 1\n`).FindStringSubmatch(text)
			if m == nil {
				return fmt.Errorf("STATUS does not show rank 1 in a Barrier:\n%s", text)
			}
			n, _ := strconv.Atoi(m[1])
			for _, want := range []string{
				fmt.Sprintf("  Rank 0 has not entered op #%d: idle for ", n),
				fmt.Sprintf("s after op #%d -- Process %d on node ", n-1, os.Getpid()),
				"    peer 1 shm: sent 4", "    peer 0 shm: sent 4"} {
				if !strings.Contains(text, want) {
					return fmt.Errorf("STATUS lacks %q:\n%s", want, text)
				}
			}
		}
		return c.Barrier(ctx)
	})
}
