package launch

// A job on several hosts (Config.Hosts) is started the way mpirun starts
// one with its orted daemons: the launcher starts an agent on each host
// through the remote shell (ssh HOST 'goccl rund'), hands it that host's
// share of the job on its standard input, and the agent starts the host's
// ranks with Run (Config.Place). The agent's standard streams are the
// whole control channel, so nothing needs to reach the launcher over the
// network and the remote shell's own transport (ssh, or ip netns exec for
// namespace hosts) carries everything:
//
//   - launcher to agent: one line of JSON, the nodeSpec; then "term" (stop
//     the ranks: SIGTERM, SIGKILL after the grace period). End of input
//     means the same: a launcher that dies takes the ranks with it. With
//     MaxRestarts, the answers to "restart?": "restart RANK N" (replace
//     it; N is the job's count of restarts with this one) or "norestart
//     RANK".
//   - agent to launcher, on its standard output, between the ranks' lines
//     (which begin with "[rank] "): lines beginning with ctlPrefix:
//     "store ADDR TORCH" (the agent of rank 0's host chose where rank 0
//     serves goccl's store and where the agent serves PyTorch's c10d store),
//     "exit {json}" (a rank failed: exitRecord), "restart? {json}" (a rank
//     failed, may it be replaced? MaxRestarts), "ok RANK" (a rank exited
//     with status 0), "error MESSAGE" (the agent cannot run its share),
//     "done" (every rank of the host has exited; the agent that serves
//     goccl's store, with MaxRestarts, then serves it until its input
//     ends, which the launcher closes once every agent is done).
//
// The ranks' standard error goes to the agent's, already prefixed.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport/tcp"
)

// AgentCommand is the subcommand of the goccl executable that runs a
// host's share of a multi-host job (goccl rund; see ServeNode).
const AgentCommand = "rund"

// ctlPrefix begins the agent's control lines; a rank's lines begin with
// "[".
const ctlPrefix = "goccl-rund: "

// agentStartTimeout bounds the wait for the agent of rank 0's host to say
// where the store is: a remote shell that neither connects nor fails.
const agentStartTimeout = 60 * time.Second

// nodeSpec is one host's share of the job, sent to its agent.
type nodeSpec struct {
	Host      string        // as the launcher names it, for messages
	Dir       string        // working directory of the ranks ("": the agent's)
	Apps      []App         // the host's ranks of each program, in rank order
	Env       []string      // for every rank, after the agent's environment
	Place     Place         // StoreAddr "": this agent chooses (rank 0's host)
	TorchAddr string        // PyTorch's c10d store, "" on rank 0's host
	Grace     time.Duration // Config.Grace
	Settle    time.Duration // Config.Settle
	// MaxRestarts is Config.MaxRestarts: the launcher keeps the count.
	MaxRestarts int `json:",omitempty"`
}

// exitRecord is a rank's failure as an agent reports it.
type exitRecord struct {
	Rank   int `json:"rank"`
	Pid    int `json:"pid"`
	Status int `json:"status"`
	Signal int `json:"signal"`
}

// HostError reports a host whose agent failed: the remote shell could not
// start it, it could not run the host's ranks, or it ended before they did.
type HostError struct {
	Host    string
	Err     error
	Output  string // the last lines the agent (or the remote shell) wrote to its standard error
	Stopped int    // ranks on other hosts' agents, not known to have exited, that the launcher stopped
	// NotStarted: the agent never ran (the host could not be reached, or
	// the agent's command not run there), so none of the host's ranks started.
	NotStarted bool
}

func (e *HostError) Error() string {
	s := fmt.Sprintf("host %s: %v", e.Host, e.Err)
	if e.Output != "" {
		s += " (it said: " + e.Output + ")"
	}
	if e.NotStarted {
		return s + "; nothing was started there; " + stoppedPhrase(e.Stopped, true)
	}
	return s + "; " + stoppedPhrase(e.Stopped, false)
}

// notStarted is the error of an agent that ended having said nothing, when
// its exit status shows that it never ran: the remote shell's 255 (ssh: the
// host could not be reached) or the shell's 126 and 127 (the agent's
// command could not be run there); nil otherwise.
func notStarted(a *agent, err error) error {
	var ee *exec.ExitError
	if a.heard || isLocalHost(a.share.host.Name) || !errors.As(err, &ee) {
		return nil
	}
	switch ee.ExitCode() {
	case 255:
		return fmt.Errorf("could not be reached (the remote shell: %w)", err)
	case 126, 127:
		return fmt.Errorf("could not run goccl's agent there (the remote shell: %w)", err)
	}
	return nil
}

func (e *HostError) Unwrap() error { return e.Err }

// isLocalHost reports whether name is this host as goccl run -H takes it:
// started without the remote shell.
func isLocalHost(name string) bool {
	switch name {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}

// shellQuote quotes s for a POSIX shell (the remote shell runs the agent's
// command line through one, as ssh does).
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n\"'\\$`;&|<>()*?[]{}~#!") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// hostShare is the ranks one host runs.
type hostShare struct {
	host      Host
	node      int   // index among the hosts that run ranks
	firstRank int   // the job-wide rank of its first rank
	apps      []App // its ranks of each program (NP > 0 each)
	appIndex  []int // appIndex[i]: apps[i]'s index in the job's programs
}

// mapRanks assigns the ranks of apps (numbered across them in order) to
// hosts, filling each host's slots before the next (OpenMPI's --map-by
// slot). A host left without ranks gets no share.
func mapRanks(hosts []Host, apps []App) ([]hostShare, error) {
	np, slots := 0, 0
	for _, a := range apps {
		np += a.NP
	}
	var names []string
	for _, h := range hosts {
		if h.Slots < 1 {
			return nil, fmt.Errorf("launch: host %s has %d slots", h.Name, h.Slots)
		}
		slots += h.Slots
		names = append(names, h.Name+":"+strconv.Itoa(h.Slots))
	}
	if np > slots {
		return nil, fmt.Errorf("launch: %d ranks but the hosts have %d slots (%s): give fewer ranks or more slots", np, slots, strings.Join(names, ","))
	}
	var shares []hostShare
	app, left := 0, apps[0].NP // the program of the next rank, its ranks not yet placed
	rank := 0
	for _, h := range hosts {
		if rank == np {
			break
		}
		s := hostShare{host: h, node: len(shares), firstRank: rank}
		for free := h.Slots; free > 0 && rank < np; {
			n := min(free, left)
			s.apps = append(s.apps, App{NP: n, Prog: apps[app].Prog, Args: apps[app].Args, Env: apps[app].Env})
			s.appIndex = append(s.appIndex, app)
			free, left, rank = free-n, left-n, rank+n
			if left == 0 && app+1 < len(apps) {
				app++
				left = apps[app].NP
			}
		}
		shares = append(shares, s)
	}
	return shares, nil
}

// forwardedEnv is the environment the ranks on every host get from the
// launcher: its GOCCL_* variables (but the ones a launcher sets per rank),
// the variables Export names, a job token, then extra (Config.Env).
func forwardedEnv(export, extra []string) []string {
	var env []string
	perRank := map[string]bool{EnvRank: true, EnvWorldSize: true, EnvLocalRank: true, EnvLocalWorldSize: true,
		EnvStoreAddr: true, EnvJobID: true, EnvProgressFD: true}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, config.Prefix) && !perRank[k] {
			env = append(env, kv)
		}
	}
	for _, name := range export {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	if os.Getenv(EnvJobToken) == "" {
		env = append(env, EnvJobToken+"="+NewJobToken())
	}
	return append(env, extra...)
}

// agent is the launcher's side of one host's agent.
type agent struct {
	share  hostShare
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	done   bool     // it said "done"
	gone   bool     // its process (or the remote shell) has exited
	heard  bool     // it said anything on its control stream
	left   int      // its ranks not known to have exited
	tail   []string // the last lines of its standard error
	tailMu sync.Mutex
}

// agentEvent is what an agent's streams and process tell the launcher.
type agentEvent struct {
	agent   *agent
	kind    string // "store", "exit", "restart?", "ok", "error", "done", "gone"
	rank    int
	failure *ExitError
	store   [2]string // goccl's and PyTorch's store addresses
	msg     string
	err     error // "gone": the process's exit
}

// runHosts is Run for a job on several hosts (Config.Hosts).
func runHosts(ctx context.Context, cfg Config) error {
	if cfg.Place != nil || cfg.Progress != nil {
		return errors.New("launch: Hosts cannot be combined with Place or Progress")
	}
	apps, err := jobApps(cfg)
	if err != nil {
		return err
	}
	shares, err := mapRanks(cfg.Hosts, apps)
	if err != nil {
		return err
	}
	fillDefaults(&cfg)
	np := 0
	for _, a := range apps {
		np += a.NP
	}
	agentPath := cfg.Agent
	if agentPath == "" {
		if agentPath, err = os.Executable(); err != nil {
			return fmt.Errorf("launch: finding this program to start on the hosts: %w", err)
		}
	}
	rsh := cfg.Rsh
	if len(rsh) == 0 {
		rsh = []string{"ssh"}
	}

	sigs := catchSignals(cfg.ForwardSignals)
	defer signal.Stop(sigs)
	// The programs, built or found here, by absolute path: the hosts see
	// this host's file system at the same paths (a shared file system, as
	// for mpirun).
	rv := newResolver(cfg.Dir, cfg.Stderr)
	defer rv.cleanup()
	for i := range shares {
		for j := range shares[i].apps {
			a := &shares[i].apps[j]
			if a.Prog, err = rv.resolve(ctx, a.Prog); err != nil {
				return err
			}
			if a.Prog, err = absIn(cfg.Dir, a.Prog); err != nil {
				return err
			}
		}
	}
	dir, err := absIn(cfg.Dir, ".")
	if err != nil {
		return err
	}

	l := &hostLauncher{cfg: cfg, apps: apps, np: np, running: np, events: make(chan agentEvent, 4*len(shares)+np),
		agentArgv: rsh, agentPath: agentPath}
	spec := nodeSpec{Dir: dir, Env: forwardedEnv(cfg.Export, cfg.Env), Grace: cfg.Grace, Settle: cfg.Settle,
		Place: Place{WorldSize: np, JobID: NewJobID(), Served: cfg.MaxRestarts > 0}, MaxRestarts: cfg.MaxRestarts}
	return l.run(ctx, shares, spec, sigs)
}

// fillDefaults gives cfg's unset output, label, grace and settle their
// defaults.
func fillDefaults(cfg *Config) {
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if cfg.Label == nil {
		cfg.Label = DefaultLabel
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Settle <= 0 {
		cfg.Settle = DefaultSettle
	}
}

// absIn is path made absolute against dir ("" for the current directory).
func absIn(dir, path string) (string, error) {
	if !filepath.IsAbs(path) && dir != "" {
		path = filepath.Join(dir, path)
	}
	return filepath.Abs(path)
}

// hostLauncher runs the agents of a multi-host job.
type hostLauncher struct {
	cfg       Config
	apps      []App
	np        int
	running   int // ranks not known to have exited
	events    chan agentEvent
	agentArgv []string // the remote shell's words
	agentPath string
	agents    []*agent
	outMu     sync.Mutex
	readers   sync.WaitGroup
	restarts  int // replacements granted (Config.MaxRestarts)
}

// start starts the agent of share with spec (its Place and Apps filled in
// here) and the goroutines that read its streams and wait for it.
func (l *hostLauncher) start(share hostShare, spec nodeSpec) (*agent, error) {
	spec.Host = share.host.Name
	spec.Apps = share.apps
	spec.Place.FirstRank = share.firstRank
	spec.Place.Node = share.node
	line, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	if isLocalHost(share.host.Name) {
		cmd = exec.Command(l.agentPath, AgentCommand)
	} else {
		argv := append(append([]string(nil), l.agentArgv[1:]...), share.host.Name, shellQuote(l.agentPath)+" "+AgentCommand)
		cmd = exec.Command(l.agentArgv[0], argv...)
	}
	cmd.SysProcAttr = sysProcAttr() // a terminal's ^C reaches the launcher only, which passes it on
	a := &agent{share: share, cmd: cmd}
	for _, app := range share.apps {
		a.left += app.NP
	}
	if a.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, &HostError{Host: share.host.Name, Err: fmt.Errorf("starting %s: %w", strings.Join(cmd.Args, " "), err)}
	}
	l.agents = append(l.agents, a)
	var read sync.WaitGroup
	read.Add(2)
	l.readers.Add(1)
	go func() {
		defer read.Done()
		l.readControl(a, stdout)
	}()
	go func() {
		defer read.Done()
		l.readStderr(a, stderr)
	}()
	go func() {
		defer l.readers.Done()
		// Wait only after the readers are done with the pipes (exec.Cmd's
		// rule: Wait closes them), so that "done" is always read before
		// the agent counts as gone.
		read.Wait()
		err := cmd.Wait()
		l.events <- agentEvent{agent: a, kind: "gone", err: err}
	}()
	a.stdin.Write(append(line, '\n'))
	return a, nil
}

// readControl forwards a's rank lines to Stdout and turns its control
// lines into events.
func (l *hostLauncher) readControl(a *agent, r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if ctl, ok := bytes.CutPrefix(line, []byte(ctlPrefix)); ok {
				l.events <- parseControl(a, strings.TrimSpace(string(ctl)))
			} else {
				l.write(l.cfg.Stdout, line)
			}
		}
		if err != nil {
			return
		}
	}
}

// readStderr forwards a's standard error to Stderr, keeping its last lines.
func (l *hostLauncher) readStderr(a *agent, r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			l.write(l.cfg.Stderr, line)
			if line[0] != '[' { // the agent's or the remote shell's own
				a.tailMu.Lock()
				a.tail = append(a.tail, strings.TrimSpace(string(line)))
				if len(a.tail) > 3 {
					a.tail = a.tail[1:]
				}
				a.tailMu.Unlock()
			}
		}
		if err != nil {
			return
		}
	}
}

func (l *hostLauncher) write(w io.Writer, line []byte) {
	if line[len(line)-1] != '\n' {
		line = append(line, '\n')
	}
	l.outMu.Lock()
	w.Write(line)
	l.outMu.Unlock()
}

// parseControl is the event of one control line of a.
func parseControl(a *agent, line string) agentEvent {
	verb, rest, _ := strings.Cut(line, " ")
	ev := agentEvent{agent: a, kind: verb}
	bad := func() agentEvent {
		return agentEvent{agent: a, kind: "error", msg: "unreadable control line from its agent: " + strconv.Quote(line)}
	}
	switch verb {
	case "store":
		f := strings.Fields(rest)
		if len(f) != 2 {
			return bad()
		}
		ev.store = [2]string{f[0], f[1]}
	case "exit", "restart?":
		var rec exitRecord
		if err := json.Unmarshal([]byte(rest), &rec); err != nil {
			return bad()
		}
		ev.rank = rec.Rank
		ev.failure = &ExitError{Rank: rec.Rank, Pid: rec.Pid, Status: rec.Status, Signal: syscall.Signal(rec.Signal)}
	case "ok":
		n, err := strconv.Atoi(rest)
		if err != nil {
			return bad()
		}
		ev.rank = n
	case "error":
		ev.msg = rest
	case "done":
	default:
		return bad()
	}
	return ev
}

// run starts the agents (rank 0's host first: its agent says where the
// stores are) and ties the ranks' lifetimes together until every agent
// has ended.
func (l *hostLauncher) run(ctx context.Context, shares []hostShare, spec nodeSpec, sigs chan os.Signal) error {
	var (
		first    error // *ExitError or *HostError
		settle   <-chan time.Time
		sigErr   *SignalError
		ctxErr   error
		stopping bool
		kill     <-chan time.Time
		done     = ctx.Done()
		live     = 0  // agents whose process has not ended
		released bool // every agent is done: their input was closed
		stopped  = 0  // ranks running when the launcher stopped them
	)
	fail := func(err error) {
		if first == nil {
			first = err
		} else if ee, ok := err.(*ExitError); ok {
			if fe, ok := first.(*ExitError); ok && ee.causes(fe) {
				first = err
			}
		}
		if settle == nil && !stopping {
			settle = time.After(l.cfg.Settle)
		}
	}
	stop := func() {
		if stopping {
			return
		}
		stopping, settle = true, nil
		stopped = l.liveRanks()
		for _, a := range l.agents {
			if !a.gone {
				io.WriteString(a.stdin, "term\n")
			}
		}
		// The agents stop their ranks within the grace period; then their
		// input is closed (a remote agent that cannot be killed from here
		// kills its ranks at end of input) and the remote shells killed.
		kill = time.After(l.cfg.Grace + 2*time.Second)
	}
	startRest := func(store [2]string) {
		if stopping {
			return
		}
		spec.Place.StoreAddr, spec.TorchAddr = store[0], store[1]
		for _, s := range shares[1:] {
			if _, err := l.start(s, spec); err != nil {
				fail(err)
				stop()
				return
			}
			live++
		}
	}

	if _, err := l.start(shares[0], spec); err != nil {
		return err
	}
	live++
	waitStore := time.After(agentStartTimeout)
	for live > 0 {
		select {
		case ev := <-l.events:
			if ev.kind == "restart?" {
				l.answerRestart(ev, stopping)
				break
			}
			l.handle(ev, fail, &live, startRest)
			if ev.kind == "store" || ev.kind == "gone" || ev.kind == "error" {
				waitStore = nil
			}
		case <-waitStore:
			waitStore = nil
			fail(&HostError{Host: shares[0].host.Name, Err: fmt.Errorf("its agent said nothing in %v", agentStartTimeout)})
			stop()
		case <-settle:
			stop()
		case s := <-sigs:
			if first == nil && sigErr == nil && ctxErr == nil {
				sigErr = &SignalError{Signal: s, Stopped: l.liveRanks()}
			}
			stop()
		case <-done:
			done = nil
			if first == nil && sigErr == nil {
				ctxErr = ctx.Err()
			}
			stop()
		case <-kill:
			kill = nil
			for _, a := range l.agents {
				a.stdin.Close()
				if !a.gone {
					signalGroup(a.cmd.Process, syscall.SIGKILL)
				}
			}
		}
		if first != nil && l.failedHard(first) {
			stop()
		}
		if spec.Place.Served && !released && l.allDone(len(shares)) {
			// The agent that serves the store waits for this.
			released = true
			for _, a := range l.agents {
				a.stdin.Close()
			}
		}
	}
	l.readers.Wait()
	switch e := first.(type) {
	case *ExitError:
		e.Stopped = stopped
		return e
	case *HostError:
		e.Stopped = stopped
		return e
	}
	switch {
	case sigErr != nil:
		return sigErr
	case ctxErr != nil:
		return fmt.Errorf("launch: %w; %s", ctxErr, stoppedPhrase(stopped, false))
	}
	return nil
}

// allDone reports whether all n agents have started and every one has
// said done or is gone.
func (l *hostLauncher) allDone(n int) bool {
	if len(l.agents) < n {
		return false
	}
	for _, a := range l.agents {
		if !a.done && !a.gone {
			return false
		}
	}
	return true
}

// answerRestart answers an agent that asks whether its failed rank may be
// replaced: yes while the job's restarts (Config.MaxRestarts) remain and
// it is not stopping.
func (l *hostLauncher) answerRestart(ev agentEvent, stopping bool) {
	a := ev.agent
	a.heard = true
	if stopping || l.restarts >= l.cfg.MaxRestarts {
		fmt.Fprintf(a.stdin, "norestart %d\n", ev.rank)
		return
	}
	l.restarts++
	fmt.Fprintf(a.stdin, "restart %d %d\n", ev.rank, l.restarts)
}

// liveRanks is how many ranks of the agents still running are not known to
// have exited: those that stopping the agents stops (the ranks of a host
// whose agent is gone, or was never started, are not among them).
func (l *hostLauncher) liveRanks() int {
	n := 0
	for _, a := range l.agents {
		if !a.gone {
			n += a.left
		}
	}
	return n
}

// failedHard reports whether err needs no settling: a host that failed
// (its ranks' exits cannot all be known).
func (l *hostLauncher) failedHard(err error) bool {
	_, ok := err.(*HostError)
	return ok
}

// handle applies one event.
func (l *hostLauncher) handle(ev agentEvent, fail func(error), live *int, startRest func([2]string)) {
	a := ev.agent
	host := a.share.host.Name
	if ev.kind != "gone" {
		a.heard = true
	}
	switch ev.kind {
	case "store":
		if a.share.node == 0 {
			startRest(ev.store)
		}
	case "ok":
		l.running--
		a.left--
	case "exit":
		l.running--
		a.left--
		ee := ev.failure
		ee.Host = host
		ee.apps = len(l.apps)
		if max := l.cfg.MaxRestarts; max > 0 && l.restarts >= max {
			ee.Restarts, ee.MaxRestarts = l.restarts, max
		}
		if i := ev.rank - a.share.firstRank; i >= 0 {
			for j, sa := range a.share.apps {
				if i < sa.NP {
					ee.App = a.share.appIndex[j]
					ee.Prog, ee.Args = l.apps[ee.App].Prog, l.apps[ee.App].Args
					break
				}
				i -= sa.NP
			}
		}
		fail(ee)
	case "error":
		fail(&HostError{Host: host, Err: errors.New(ev.msg)})
	case "done":
		a.done = true
	case "gone":
		a.gone = true
		*live--
		if !a.done {
			a.tailMu.Lock()
			out := strings.Join(a.tail, " / ")
			a.tailMu.Unlock()
			if err := notStarted(a, ev.err); err != nil {
				fail(&HostError{Host: host, Err: err, Output: out, NotStarted: true})
				break
			}
			err := ev.err
			if err == nil {
				err = errors.New("its agent ended before its ranks")
			} else {
				err = fmt.Errorf("its agent ended before its ranks: %w", err)
			}
			fail(&HostError{Host: host, Err: err, Output: out})
		}
	}
}

// ServeNode is the agent of a multi-host job on one host (goccl rund): it
// reads its share of the job (a nodeSpec) from in, starts the ranks with
// Run, reports their exits on out (see the top of this file) and stops them
// when in says "term" or ends. The ranks' output goes to out and errOut,
// prefixed. It returns the process's exit status: 0 when every rank exited
// with 0.
func ServeNode(in io.Reader, out, errOut io.Writer) int {
	br := bufio.NewReader(in)
	line, err := br.ReadBytes('\n')
	ctl := &lockedWriter{w: out}
	report := func(format string, args ...any) {
		fmt.Fprintf(ctl, ctlPrefix+format+"\n", args...)
	}
	if err != nil {
		fmt.Fprintf(errOut, "goccl %s: reading the job from standard input: %v (this command is started by goccl run -H)\n", AgentCommand, err)
		return 2
	}
	var spec nodeSpec
	if err := json.Unmarshal(line, &spec); err != nil {
		report("error reading the job: %v", err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answers := make(chan restartAnswer, 16)
	go readLauncher(br, cancel, answers)

	env := spec.Env
	serving := false // goccl's store, for the whole job (MaxRestarts)
	if spec.Place.StoreAddr == "" {
		serving = spec.Place.Served
		store, torch, closeStores, err := serveStores(spec.Env, spec.Place.Served)
		if err != nil {
			report("error %v", err)
			return 1
		}
		defer closeStores()
		spec.Place.StoreAddr, spec.TorchAddr = store, torch
		report("store %s %s", store, torch)
	}
	if host, port, err := net.SplitHostPort(spec.TorchAddr); err == nil {
		env = append(TorchEnv(host, port), env...)
	}
	dir := spec.Dir
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		fmt.Fprintf(errOut, "goccl %s on %s: no directory %s here; the ranks run in %s\n", AgentCommand, spec.Host, dir, mustGetwd())
		dir = ""
	}
	cfg := Config{
		Apps:   spec.Apps,
		Env:    env,
		Dir:    dir,
		Stdout: ctl,
		Stderr: errOut,
		Grace:  spec.Grace,
		Settle: spec.Settle,
		Place:  &spec.Place,
		// The launcher keeps the job's count of restarts: ask it.
		MaxRestarts: spec.MaxRestarts,
		askRestart: func(f *ExitError) (int, bool) {
			rec, _ := json.Marshal(exitRecord{Rank: f.Rank, Pid: f.Pid, Status: f.Status, Signal: int(f.Signal)})
			report("restart? %s", rec)
			return awaitRestart(ctx, answers, f.Rank)
		},
		hostName: spec.Host,
		OnExit: func(rank int, f *ExitError) {
			if f == nil {
				report("ok %d", rank)
				return
			}
			rec, _ := json.Marshal(exitRecord{Rank: f.Rank, Pid: f.Pid, Status: f.Status, Signal: int(f.Signal)})
			report("exit %s", rec)
		},
	}
	err = Run(ctx, cfg)
	var ee *ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
	case errors.Is(err, context.Canceled):
	default:
		report("error %v", err)
	}
	report("done")
	if serving {
		// The ranks of other hosts may still use the store: serve it
		// until the launcher, once every host is done, ends the input.
		<-ctx.Done()
	}
	if err != nil {
		return 1
	}
	return 0
}

// restartAnswer is the launcher's answer to an agent's "restart?".
type restartAnswer struct {
	rank, n int
	ok      bool
}

// readLauncher reads the launcher's lines after the job: "term", or the
// end of input (the launcher is gone), calls cancel; the answers to
// "restart?" go to answers.
func readLauncher(br *bufio.Reader, cancel func(), answers chan<- restartAnswer) {
	for {
		l, err := br.ReadString('\n')
		f := strings.Fields(l)
		switch {
		case err != nil || len(f) == 1 && f[0] == "term":
			cancel()
			return
		case len(f) == 3 && f[0] == "restart", len(f) == 2 && f[0] == "norestart":
			var a restartAnswer
			a.rank, err = strconv.Atoi(f[1])
			if a.ok = f[0] == "restart"; a.ok && err == nil {
				a.n, err = strconv.Atoi(f[2])
			}
			if err == nil {
				answers <- a
			}
		}
	}
}

// awaitRestart waits for the launcher's answer about rank: no when ctx
// ends (the job stops) or none comes in agentStartTimeout.
func awaitRestart(ctx context.Context, answers <-chan restartAnswer, rank int) (int, bool) {
	t := time.NewTimer(agentStartTimeout)
	defer t.Stop()
	for {
		select {
		case a := <-answers:
			if a.rank == rank {
				return a.n, a.ok
			}
		case <-ctx.Done():
			return 0, false
		case <-t.C:
			return 0, false
		}
	}
}

func mustGetwd() string {
	wd, err := os.Getwd()
	if err != nil {
		return "?"
	}
	return wd
}

// serveStores chooses, on rank 0's host, the address where rank 0 serves
// goccl's store (the address of the interface GOCCL_SOCKET_IFNAME picks, as
// the ranks' TCP links do, and a free port) and serves PyTorch's c10d store
// beside it. env is the job's environment (it may give GOCCL_SOCKET_IFNAME
// and holds the job token). With served (Config.MaxRestarts), this agent
// serves goccl's store there too, with the job token, instead of rank 0.
func serveStores(env []string, served bool) (store, torch string, closeStores func(), err error) {
	spec := config.SocketIfname.Get()
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, config.SocketIfname.Name+"="); ok {
			spec = v
		}
	}
	ifc, err := tcp.SelectInterface(spec)
	if err != nil {
		return "", "", nil, err
	}
	ip := ifc.IP.String()
	closeGoccl := func() {}
	if served {
		var opts []rendezvous.Option
		if tok := lastValue(env, EnvJobToken); tok != "" {
			opts = append(opts, rendezvous.WithToken([]byte(tok)))
		}
		srv, err := rendezvous.NewTCPServer(net.JoinHostPort(ip, "0"), opts...)
		if err != nil {
			return "", "", nil, fmt.Errorf("serving the job's store on %s: %w", ip, err)
		}
		store, closeGoccl = srv.Addr(), func() { srv.Close() }
	} else {
		port, err := FreePort(ip)
		if err != nil {
			return "", "", nil, fmt.Errorf("the store's port on %s: %w", ifc.Name, err)
		}
		store = net.JoinHostPort(ip, strconv.Itoa(port))
	}
	tln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		closeGoccl()
		return "", "", nil, fmt.Errorf("serving a c10d store for PyTorch on %s: %w", ip, err)
	}
	srv := rendezvous.ServeC10d(tln)
	return store, srv.Addr(), func() { srv.Close(); closeGoccl() }, nil
}

// TorchEnv is what PyTorch's ranks need to find the c10d store that a
// launcher serves for them, as torchrun's agent serves one: MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE=True and
// TORCHELASTIC_RESTART_COUNT=0.
func TorchEnv(host, port string) []string {
	return []string{"MASTER_ADDR=" + host, "MASTER_PORT=" + port,
		"TORCHELASTIC_USE_AGENT_STORE=True", "TORCHELASTIC_RESTART_COUNT=0"}
}

// lockedWriter makes each Write whole: the ranks' lines and the agent's
// control lines share the agent's standard output.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
