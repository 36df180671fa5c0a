package goccl_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/goccl/goccl/internal/cluster"
	"github.com/goccl/goccl/internal/cluster/clustertest"
	"github.com/goccl/goccl/internal/ras"
)

func init() {
	extraWorkers["cutloop"] = cutLoopWorker
	extraMains["rasquery"] = rasQueryMain
}

// cutLoopWorker runs AllReduces of GOCCL_TEST_FLOATS floats until one
// fails, then prints "error: " and the error and exits 3; it prints
// "ready" after the second. With GOCCL_TEST_LINGER set it stays alive
// after the failure until its standard input closes (its communicator
// open: rank 0 keeps serving the health query).
func cutLoopWorker(ctx context.Context, c *goccl.Comm) int {
	n, _ := strconv.Atoi(os.Getenv("GOCCL_TEST_FLOATS"))
	buf := make([]float32, max(n, 1))
	for i := 1; ; i++ {
		if err := goccl.AllReduce(ctx, c, buf, buf, len(buf), goccl.Sum); err != nil {
			fmt.Printf("error: %v\n", err)
			if os.Getenv("GOCCL_TEST_LINGER") != "" {
				os.Stdin.Read(make([]byte, 1))
			}
			return 3
		}
		if i == 2 {
			fmt.Println("ready")
		}
	}
}

// rasQueryMain asks the health query at GOCCL_TEST_RAS_QUERY for one
// STATUS (GOCCL_TEST_RAS_FORMAT json: in JSON; GOCCL_TEST_RAS_VERBOSE:
// VERBOSE STATUS) with TIMEOUT 1 and prints the reply.
func rasQueryMain(ctx context.Context) int {
	c, err := ras.Dial(ctx, os.Getenv("GOCCL_TEST_RAS_QUERY"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer c.Close()
	if err := c.SetTimeout(time.Second); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if f := os.Getenv("GOCCL_TEST_RAS_FORMAT"); f != "" {
		if err := c.SetFormat(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	if err := c.Status(os.Stdout, os.Getenv("GOCCL_TEST_RAS_VERBOSE") != ""); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// cutJob is a job of cutLoopWorker ranks, rank r on host r of a cluster
// of network namespaces on one bridge.
type cutJob struct {
	c      *cluster.Cluster
	cmds   []*exec.Cmd
	waited []chan struct{}
	rankOutputs
	lines []string    // each rank's "error:" line (under mu)
	at    []time.Time // when it came
}

// startCutJob starts n ranks on a new cluster of n hosts, over TCP, with
// GOCCL_TIMEOUT timeout and env added, and waits until every rank is
// ready. It skips t where the cluster cannot be made.
func startCutJob(t *testing.T, n int, timeout time.Duration, env ...string) *cutJob {
	t.Helper()
	j := &cutJob{c: clustertest.New(t, cluster.Config{Hosts: n}), rankOutputs: rankOutputs{outs: make([]strings.Builder, n)},
		lines: make([]string, n), at: make([]time.Time, n), waited: make([]chan struct{}, n)}
	var hosts []string
	for _, h := range j.c.Hosts {
		hosts = append(hosts, h.Name)
	}
	store := j.c.Hosts[0].Addr.String() + ":29518"
	ready := make(chan int, n)
	var readers sync.WaitGroup
	for r := range n {
		cmd := j.c.Command(context.Background(), r, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "GOCCL_TEST_WORKER=cutloop", "GOCCL_TEST_FLOATS="+strconv.Itoa(4<<20),
			"GOCCL_TEST_HOSTS="+strings.Join(hosts, ","),
			"GOCCL_RANK="+strconv.Itoa(r), "GOCCL_WORLD_SIZE="+strconv.Itoa(n), "GOCCL_LOCAL_RANK=0",
			"GOCCL_STORE_ADDR="+store, "GOCCL_SOCKET_IFNAME=="+cluster.HostIface, "GOCCL_SHM_DISABLE=1",
			"GOCCL_TIMEOUT="+timeout.String())
		cmd.Env = append(cmd.Env, env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if _, err := cmd.StdinPipe(); err != nil { // closed when the test kills the rank
			t.Fatal(err)
		}
		j.cmds = append(j.cmds, cmd)
		j.waited[r] = startWatched(t, cmd, &readers, func(line string) {
			j.mu.Lock()
			j.outs[r].WriteString(line + "\n")
			if strings.HasPrefix(line, "error: ") && j.lines[r] == "" {
				j.lines[r], j.at[r] = line, time.Now()
			}
			j.mu.Unlock()
			if line == "ready" {
				ready <- r
			}
		}, nil)
	}
	t.Cleanup(func() {
		for r, c := range j.cmds {
			c.Process.Kill()
			<-j.waited[r]
		}
		readers.Wait()
	})
	for range n {
		select {
		case <-ready:
		case <-time.After(90 * time.Second):
			t.Fatalf("ranks not ready after 90 s:\n%s", j.output())
		}
	}
	return j
}

// cut cuts the link between ranks a and b, and only it: each one's host
// drops what it would send to the other (a blackhole route: no RST, no
// ICMP error to the peer; the packets just stop). The rest of the
// cluster's links, the store's included, stay up.
func (j *cutJob) cut(t *testing.T, a, b int) {
	t.Helper()
	for _, e := range [][2]int{{a, b}, {b, a}} {
		h, to := j.c.Hosts[e[0]], j.c.Hosts[e[1]]
		out, err := exec.Command("ip", "-n", h.Name, "route", "add", "blackhole", to.Addr.String()+"/32").CombinedOutput()
		if err != nil {
			t.Fatalf("cutting the link %d-%d: ip route add blackhole in %s: %v: %s", a, b, h.Name, err, out)
		}
	}
}

// query runs a STATUS query (rasQueryMain) from host 0 and returns the
// reply.
func (j *cutJob) query(t *testing.T, addr string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := j.c.Command(ctx, 0, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOCCL_TEST_WORKER=rasquery", "GOCCL_TEST_RAS_QUERY="+addr)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("status query: %v: %s\n%s", err, out, errOutput(err))
	}
	return string(out)
}

func errOutput(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// TestNetnsLinkCutRanks: 4 and 8 ranks, one per network namespace on one
// bridge, over TCP, loop over 16 MiB AllReduces with GOCCL_TIMEOUT=3s; the
// link between ranks 1 and 2 alone is cut (each drops what it sends to
// the other). Every rank must fail within the timeout + 1 s of the cut
// (+ 0.5 s of slack for a loaded machine), and its error must name ranks
// 1 and 2 (the one of them it is not) as "entered op #N but not
// progressing", with their link that moved no bytes, and blame no other
// rank: the ranks away from the cut have no byte counters of that link
// and judge from the two ranks' published waits.
func TestNetnsLinkCutRanks(t *testing.T) {
	if why := clustertest.Skip(); why != "" {
		t.Skip(why)
	}
	const timeout = 3 * time.Second
	for _, n := range []int{4, 8} {
		t.Run(fmt.Sprintf("np%d", n), func(t *testing.T) {
			j := startCutJob(t, n, timeout)
			time.Sleep(50 * time.Millisecond) // into the next operation
			cut := time.Now()
			j.cut(t, 1, 2)
			for r := range n {
				select {
				case <-j.waited[r]:
				case <-time.After(timeout + 10*time.Second):
					t.Fatalf("rank %d still running %v after the cut:\n%s", r, timeout+10*time.Second, j.output())
				}
			}
			j.mu.Lock()
			defer j.mu.Unlock()
			seq := map[int]string{} // the op # each rank of the cut link is named in
			for r := range n {
				line := j.lines[r]
				after := j.at[r].Sub(cut)
				t.Logf("rank %d (+%v): %s", r, after.Round(time.Millisecond), line)
				if line == "" {
					t.Errorf("rank %d printed no error:\n%s", r, j.outs[r].String())
					continue
				}
				if after > timeout+1500*time.Millisecond {
					t.Errorf("rank %d failed %v after the cut, want within %v + 1 s", r, after.Round(time.Millisecond), timeout)
				}
				_, blamed, ok := strings.Cut(line, "kept waiting by ")
				if !ok {
					t.Errorf("rank %d: the error names no rank that kept it waiting: %s", r, line)
					continue
				}
				for _, p := range []int{1, 2} {
					if p == r {
						continue
					}
					m := regexp.MustCompile(fmt.Sprintf(`rank %d: entered op #(\d+) but not progressing: [^;]*moved no bytes for`, p)).FindStringSubmatch(blamed)
					if m == nil {
						t.Errorf("rank %d: the error does not say that rank %d entered the operation but is not progressing, with the link that moved no bytes: %s", r, p, line)
						continue
					}
					if s, ok := seq[p]; ok && m[1] != s {
						t.Errorf("rank %d names rank %d in op #%s, another rank in op #%s", r, p, m[1], s)
					}
					seq[p] = m[1]
				}
				for o := range n {
					if o != 1 && o != 2 && strings.Contains(blamed, fmt.Sprintf("rank %d: ", o)) {
						t.Errorf("rank %d: blames rank %d too: %s", r, o, line)
					}
				}
			}
		})
	}
}

// TestHealthQueryLinkCut: 4 ranks as in TestNetnsLinkCutRanks serve the
// health query (GOCCL_TIMEOUT=60s: nothing fails); the link between
// ranks 1 and 2 is cut. Every rank still answers STATUS, and the reply
// names ranks 1 and 2, and only them, as "entered op #N AllReduce but is
// not progressing" with the link that moved no bytes; JSON says the same
// (not_progressing).
func TestHealthQueryLinkCut(t *testing.T) {
	if why := clustertest.Skip(); why != "" {
		t.Skip(why)
	}
	const n = 4
	j := startCutJob(t, n, time.Minute, "GOCCL_RAS_ADDR=10.200.0.1:29519")
	addr := j.c.Hosts[0].Addr.String() + ":29519"
	if !strings.HasPrefix(addr, "10.200.0.1:") {
		t.Fatalf("host 0's address is %s, not the one GOCCL_RAS_ADDR names", addr)
	}
	j.cut(t, 1, 2)
	// ras.StallAfter, plus a tick of the watchers (1 s with this timeout),
	// which time the links' idleness, plus slack.
	time.Sleep(ras.StallAfter + 2*time.Second)
	text := j.query(t, addr, "GOCCL_TEST_RAS_VERBOSE=1")
	t.Logf("VERBOSE STATUS:\n%s", text)
	if strings.Contains(text, "not answering") || strings.Contains(text, "INCOMPLETE") {
		t.Errorf("a rank did not answer:\n%s", text)
	}
	for r := range n {
		stuck := regexp.MustCompile(fmt.Sprintf(`\n  Rank %d entered op #\d+ AllReduce but is not progressing: [^\n]*their link moved no bytes for \d`, r)).MatchString(text)
		if want := r == 1 || r == 2; stuck != want {
			t.Errorf("STATUS: rank %d entered but not progressing: %v, want %v", r, stuck, want)
		}
	}
	js := j.query(t, addr, "GOCCL_TEST_RAS_FORMAT=json")
	var doc struct {
		Comms []struct {
			Ranks []struct {
				Rank           int    `json:"rank"`
				NotProgressing bool   `json:"not_progressing"`
				Progress       string `json:"progress"`
			} `json:"ranks"`
		} `json:"communicators"`
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil || len(doc.Comms) != 1 || len(doc.Comms[0].Ranks) != n {
		t.Fatalf("JSON reply (%v):\n%s", err, js)
	}
	for _, r := range doc.Comms[0].Ranks {
		if want := r.Rank == 1 || r.Rank == 2; r.NotProgressing != want {
			t.Errorf("JSON: rank %d not_progressing %v, want %v (%s)", r.Rank, r.NotProgressing, want, r.Progress)
		}
	}
}
