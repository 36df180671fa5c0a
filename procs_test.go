package goccl_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
)

// procs is the harness of the multi-process recovery tests: it starts
// worker processes (copies of the test binary in a GOCCL_TEST_WORKER mode),
// keeps each one's output (stdout and stderr share one pipe) and when each
// line came, and waits for them with a bound past which it dumps every
// process's goroutines (SIGQUIT) and fails the test as hung. Its readers
// never block: lines go into the output and wake waiters (waitLine), so a
// process can always write.
type procs struct {
	t       testing.TB
	addr    string // the store the test serves (GOCCL_TEST_STORE), if any
	token   string // its job token (GOCCL_TEST_TOKEN)
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every line and exit
	ps      []*proc
	readers sync.WaitGroup
}

type proc struct {
	cmd    *exec.Cmd
	out    strings.Builder
	lines  []procLine
	exited chan struct{}
}

type procLine struct {
	text string
	at   time.Time
}

// newProcs is a harness that serves a store with token (GOCCL_TEST_STORE
// and GOCCL_TEST_TOKEN in every worker's environment: a rank's death
// reaches the store at once), or none if token is "". Every process is killed when the test ends.
func newProcs(t testing.TB, token string) *procs {
	p := &procs{t: t, changed: make(chan struct{})}
	if token != "" {
		srv, err := rendezvous.NewTCPServer("127.0.0.1:0", rendezvous.WithToken([]byte(token)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		p.addr, p.token = srv.Addr(), token
	}
	t.Cleanup(func() {
		for _, q := range p.ps {
			q.cmd.Process.Kill()
		}
		p.readers.Wait()
	})
	return p
}

// start starts a worker in mode with env added to the test's environment
// (and the store's, if the harness serves one) and returns its index.
func (p *procs) start(mode string, env ...string) int {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOCCL_TEST_WORKER="+mode)
	if p.addr != "" {
		cmd.Env = append(cmd.Env, "GOCCL_TEST_STORE="+p.addr, "GOCCL_TEST_TOKEN="+p.token)
	}
	cmd.Env = append(cmd.Env, env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	q := &proc{cmd: cmd, exited: make(chan struct{})}
	p.mu.Lock()
	i := len(p.ps)
	p.ps = append(p.ps, q)
	p.mu.Unlock()
	p.readers.Add(1)
	go func() {
		defer p.readers.Done()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			q.out.WriteString(sc.Text() + "\n")
			q.lines = append(q.lines, procLine{sc.Text(), time.Now()})
			p.wakeLocked()
			p.mu.Unlock()
		}
		io.Copy(io.Discard, pr)
	}()
	go func() {
		cmd.Wait()
		pw.Close()
		p.mu.Lock()
		close(q.exited)
		p.wakeLocked()
		p.mu.Unlock()
	}()
	return i
}

func (p *procs) wakeLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// signal sends sig to process i.
func (p *procs) signal(i int, sig syscall.Signal) { p.ps[i].cmd.Process.Signal(sig) }

// out is process i's output so far.
func (p *procs) out(i int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ps[i].out.String()
}

// lineAt is the first line of process i that starts with prefix, and when
// it came (ok false if none yet).
func (p *procs) lineAt(i int, prefix string) (line string, at time.Time, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.ps[i].lines {
		if strings.HasPrefix(l.text, prefix) {
			return l.text, l.at, true
		}
	}
	return "", time.Time{}, false
}

// waitLine waits until one of the processes in which (all if nil) has
// printed a line starting with prefix, and returns its index; it fails
// the test as hung after bound.
func (p *procs) waitLine(which []int, prefix string, bound time.Duration) int {
	p.t.Helper()
	if which == nil {
		for i := range p.ps {
			which = append(which, i)
		}
	}
	deadline := time.After(bound)
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		for _, i := range which {
			if _, _, ok := p.lineAt(i, prefix); ok {
				return i
			}
		}
		select {
		case <-changed:
		case <-deadline:
			p.hung(fmt.Sprintf("no process of %v printed %q after %v", which, prefix, bound))
		}
	}
}

// waitAll waits until every process in which (all if nil) has printed a
// line starting with prefix.
func (p *procs) waitAll(which []int, prefix string, bound time.Duration) {
	p.t.Helper()
	if which == nil {
		for i := range p.ps {
			which = append(which, i)
		}
	}
	end := time.Now().Add(bound)
	for _, i := range which {
		p.waitLine([]int{i}, prefix, max(time.Until(end), time.Millisecond))
	}
}

// exited reports whether process i has exited.
func (p *procs) exited(i int) bool {
	select {
	case <-p.ps[i].exited:
		return true
	default:
		return false
	}
}

// wait waits until every process but those in skip has exited; past bound
// it fails the test as hung. It then kills the skipped ones and waits for
// all output.
func (p *procs) wait(bound time.Duration, skip ...int) {
	p.t.Helper()
	deadline := time.After(bound)
	for i, q := range p.ps {
		if slicesContainsInt(skip, i) {
			continue
		}
		select {
		case <-q.exited:
		case <-deadline:
			p.hung(fmt.Sprintf("process %d still running after %v", i, bound))
		}
	}
	for _, i := range skip {
		p.ps[i].cmd.Process.Kill()
		<-p.ps[i].exited
	}
	p.readers.Wait()
}

// hung dumps every live process's goroutines into its output (SIGQUIT),
// logs all outputs and fails the test.
func (p *procs) hung(why string) {
	p.t.Helper()
	for _, q := range p.ps {
		q.cmd.Process.Signal(syscall.SIGQUIT)
	}
	time.Sleep(3 * time.Second)
	p.logAll()
	p.t.Fatalf("%s: hung", why)
}

// logAll logs every process's output.
func (p *procs) logAll() {
	for i := range p.ps {
		p.t.Logf("process %d:\n%s", i, p.out(i))
	}
}

func slicesContainsInt(v []int, x int) bool {
	for _, y := range v {
		if y == x {
			return true
		}
	}
	return false
}

// testInit is a worker's communicator: rank GOCCL_RANK of GOCCL_WORLD_SIZE
// over the store the test serves (testStore), with the timeout given.
// It prints the error ("ERR dial: ..." or "ERR init: ...") if it fails;
// done closes the communicator and the store.
func testInit(ctx context.Context, timeout time.Duration) (c *goccl.Comm, done func(), err error) {
	rank, _ := strconv.Atoi(os.Getenv("GOCCL_RANK"))
	size, _ := strconv.Atoi(os.Getenv("GOCCL_WORLD_SIZE"))
	store, err := testStore(ctx, rank)
	if err != nil {
		fmt.Println("ERR dial:", err)
		return nil, nil, err
	}
	opts := []goccl.Option{goccl.WithRank(rank), goccl.WithWorldSize(size), goccl.WithStore(store)}
	if timeout > 0 {
		opts = append(opts, goccl.WithTimeout(timeout))
	}
	c, err = goccl.Init(ctx, opts...)
	if err != nil {
		store.Close()
		fmt.Println("ERR init:", err)
		return nil, nil, err
	}
	return c, func() { c.Close(); store.Close() }, nil
}

// faultIters is the number of runs of a fault-injection test: the
// environment variable env's, else def. The test is skipped with -short.
func faultIters(t *testing.T, env string, def int) int {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	if s := os.Getenv(env); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			t.Fatalf("%s=%q: want a count", env, s)
		}
		return n
	}
	return def
}

// rankOutputs keeps each rank's output lines for a test's failure
// messages; its readers write from their own goroutines.
type rankOutputs struct {
	mu   sync.Mutex
	outs []strings.Builder
}

// add appends rank r's line.
func (o *rankOutputs) add(r int, line string) {
	o.mu.Lock()
	o.outs[r].WriteString(line + "\n")
	o.mu.Unlock()
}

// output is every rank's output, rank by rank.
func (o *rankOutputs) output() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var b strings.Builder
	for r := range o.outs {
		fmt.Fprintf(&b, "rank %d:\n%s", r, o.outs[r].String())
	}
	return b.String()
}
