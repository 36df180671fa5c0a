// Package launch starts the ranks of a local goccl job: N copies of one
// program, or of several programs (Config.Apps, as mpirun -n 1 a : -n 2
// b), each told its place in the world through GOCCL_* environment
// variables (and torchrun's and OpenMPI's, see CompatVars), with their output prefixed line by line and their lifetimes tied
// together (when one rank fails the others are stopped, unless
// Config.MaxRestarts lets a replacement join the running job).
//
// It is the engine behind `goccl run -np N PROG` (and `goccl run -n N1
// PROG1 : -n N2 PROG2`) and `goccl perf -np N`.
package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/progress"
	"github.com/goccl/goccl/rendezvous"
)

// DefaultGrace is how long ranks get between SIGTERM and SIGKILL.
const DefaultGrace = 3 * time.Second

// DefaultSettle is how long Run keeps collecting exits after the first
// failure before it picks the rank to report and stops the others.
const DefaultSettle = 250 * time.Millisecond

// Config describes a local job: NP ranks of one program (NP, Prog, Args),
// or the ranks of several programs (Apps).
type Config struct {
	// NP is the number of ranks to start (at least 1).
	NP int
	// Prog is what to run: an executable path, a name looked up on PATH, or a
	// Go main package given as a directory ("./examples/ddp-digits") or an
	// import path. A package is built once, with `go build` in Dir (so the
	// current module applies), into a temporary directory that Run removes.
	Prog string
	// Args are the arguments passed to every rank.
	Args []string
	// Apps, instead of NP, Prog and Args, makes a job of several programs
	// (mpirun's multiple program, multiple data: the application contexts
	// of mpirun -n 1 a : -n 2 b). The ranks are numbered across them in
	// order: Apps[0]'s are 0 to Apps[0].NP-1, Apps[1]'s follow, and so
	// on; each rank's world size is the total. A Go package among them is
	// built once, however many apps name it.
	Apps []App
	// Env holds extra "KEY=VALUE" entries for every rank. They come after the
	// parent environment and the GOCCL_* variables, so they override both.
	Env []string
	// Dir is the working directory of the ranks and of the build; "" means the
	// current directory.
	Dir string
	// Stdout and Stderr receive the ranks' output, one whole line per Write;
	// nil means os.Stdout and os.Stderr. Build output goes to Stderr.
	Stdout, Stderr io.Writer
	// Label returns the prefix written before each line a rank prints on
	// stdout (stderr false) or stderr (stderr true). nil means DefaultLabel.
	Label func(rank int, stderr bool) string
	// Grace is the time between SIGTERM and SIGKILL when ranks are stopped;
	// 0 means DefaultGrace.
	Grace time.Duration
	// Settle is how long Run waits, after the first rank fails, for other
	// ranks' exits before it picks the rank to report (see ExitError) and
	// stops the rest; 0 means DefaultSettle.
	Settle time.Duration
	// ForwardSignals makes Run catch SIGINT and SIGTERM while the ranks run and
	// pass them on to the ranks (which get SIGKILL if they are still alive
	// Grace later). Run then returns a *SignalError.
	ForwardSignals bool
	// Progress, when not nil, is where rank 0 draws its progress bars
	// (package internal/progress): the launcher's terminal
	// (progress.ForRanks), which rank 0 cannot reach through its stderr, a
	// pipe whose lines Run prefixes. It is passed to rank 0 as an extra
	// file, descriptor 3, named by GOCCL_PROGRESS_FD, so that the bar's
	// redraws in place reach it untouched. Each line Run writes to Stdout
	// or Stderr, when they are terminals, then starts with
	// progress.ClearLine, which erases a bar on the line instead of
	// following it; after the ranks exit Run erases the line once more (a
	// bar left by a rank that was killed).
	Progress *os.File

	// Place, when not nil, makes these ranks one host's share of a job
	// that spans several (goccl run -H starts one such share per host
	// through its agent, ServeNode; under Slurm or Kubernetes each node's
	// goccl run is one): their ranks are numbered from Place.FirstRank in
	// a world of Place.WorldSize, their store is Place.StoreAddr and their
	// job id Place.JobID. nil means a job of this host alone: ranks from 0,
	// a store at a free port of 127.0.0.1, a fresh job id.
	Place *Place
	// OnExit, when not nil, is called (from Run's goroutine, in order) for
	// every rank that exits before Run stops the ranks, with nil for a rank
	// that exited with status 0 and the rank's failure otherwise (before
	// Run has picked the failure it reports). The agent of goccl run -H
	// reports the exits to the launcher with it.
	OnExit func(rank int, failure *ExitError)

	// Hosts, when not empty, makes Run start the ranks on these hosts
	// (goccl run -H, --hostfile), filling each host's slots in order
	// (OpenMPI's --map-by slot): Run then starts an agent on each host
	// (Agent, through Rsh) that starts the host's ranks, and ties their
	// lifetimes together across the hosts. See RunHosts for the rest.
	Hosts []Host
	// Rsh is the remote shell command, as words ("ssh", or "goccl cluster
	// rsh" for namespace hosts), run as Rsh... HOST COMMAND as ssh is:
	// COMMAND is one string for the remote shell. nil means ssh. A host
	// named localhost (or 127.0.0.1, ::1) is started without it.
	Rsh []string
	// Agent is the goccl executable on the hosts, run as "Agent rund"
	// (OpenMPI's --launch-agent); "" means this program's own path.
	Agent string
	// Export names variables of this process's environment that the ranks
	// on other hosts also get (mpirun -x); GOCCL_* variables always go.
	Export []string

	// MaxRestarts, when above 0, makes the job elastic (torchrun's
	// elastic agent, goccl run --max-restarts): the launcher serves the
	// job's goccl store itself (a job of this host alone: on a free port of
	// 127.0.0.1; with Hosts: the agent of rank 0's host, at the address it
	// chooses), so that it outlives every rank, rank 0 included, and tells
	// the ranks so (GOCCL_STORE_SERVED=launcher: every rank is a client).
	// A rank that fails (a non-zero status or a signal) while restarts
	// remain does not end the job: Run prints a line naming it and starts a
	// replacement, the same program with the same arguments and
	// environment plus GOCCL_JOIN=1 (its GOCCL_RANK is the failed rank's,
	// for its logs only), which is to call goccl.Join while the live ranks
	// shrink past the failure and grow it back in. The count is the job's,
	// across its ranks and hosts (per node with Place: each node's goccl
	// run keeps its own). A failure once it is spent ends the job as
	// without MaxRestarts; a rank that exits with status 0 is done.
	MaxRestarts int

	// askRestart, when not nil, decides instead of MaxRestarts's count
	// whether the failed rank f is replaced, and returns the job's count
	// of restarts with this one: the agent of a multi-host job asks the
	// launcher.
	askRestart func(f *ExitError) (n int, ok bool)
	// hostName names this host in the lines about restarts (an agent's).
	hostName string
}

// Place is one host's share of a multi-host job (Config.Place).
type Place struct {
	FirstRank int    // the job-wide rank of the host's first rank
	WorldSize int    // the job's number of ranks
	Node      int    // the host's index among the job's hosts (torchrun's GROUP_RANK)
	StoreAddr string // host:port of rank 0's store, reachable from every host
	JobID     string // the job's id, the same on every host
	// Served: the launcher serves the store at StoreAddr (MaxRestarts),
	// not rank 0; the ranks get GOCCL_STORE_SERVED=launcher.
	Served bool
}

// App is one program of a job of several (Config.Apps).
type App struct {
	// NP is the number of ranks of the program (at least 1).
	NP int
	// Prog is what to run, as Config.Prog.
	Prog string
	// Args are the arguments passed to each of its ranks.
	Args []string
	// Env holds "KEY=VALUE" entries for its ranks only; they come after
	// Config.Env.
	Env []string
}

// DefaultLabel prefixes every line with "[rank] ".
func DefaultLabel(rank int, stderr bool) string { return "[" + strconv.Itoa(rank) + "] " }

// Environment variables set for every rank (declared in internal/config).
var (
	EnvRank           = config.Rank.Name
	EnvWorldSize      = config.WorldSize.Name
	EnvLocalRank      = config.LocalRank.Name
	EnvLocalWorldSize = config.LocalWorldSize.Name
	EnvStoreAddr      = config.StoreAddr.Name
	EnvJobID          = config.JobID.Name
	// EnvJobToken is the job's shared secret: every store and peer
	// connection proves it (package internal/auth). Run makes a random one
	// per job unless the environment already holds one.
	EnvJobToken = config.JobToken.Name
	// EnvProgressFD names the descriptor on which rank 0 draws its progress
	// bars (Config.Progress).
	EnvProgressFD = config.ProgressFD.Name
)

// progressFD is the descriptor of Config.Progress in rank 0: the first of
// exec.Cmd.ExtraFiles.
const progressFD = 3

// slot is where one rank runs: its rank and the job's world size, its
// local rank among the host's ranks and their number, and the host's index
// among the job's hosts.
type slot struct{ rank, world, local, localWorld, node int }

// RankEnv returns the GOCCL_* variables of the rank at s.
func (s slot) RankEnv(storeAddr, jobID string) []string {
	return []string{
		EnvRank + "=" + strconv.Itoa(s.rank),
		EnvWorldSize + "=" + strconv.Itoa(s.world),
		EnvLocalRank + "=" + strconv.Itoa(s.local),
		EnvLocalWorldSize + "=" + strconv.Itoa(s.localWorld),
		EnvStoreAddr + "=" + storeAddr,
		EnvJobID + "=" + jobID,
	}
}

// CompatVars are the other launchers' variables every rank also gets, so
// that programs written for torchrun (PyTorch) or OpenMPI's mpirun find their
// rank under goccl run: torchrun's RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE and GROUP_RANK (the host's index; 0 on one host) and OpenMPI's
// OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK and
// OMPI_COMM_WORLD_LOCAL_SIZE. (MASTER_ADDR and MASTER_PORT, for PyTorch's
// env:// initialisation, come from `goccl run`, which serves a c10d store:
// the store at GOCCL_STORE_ADDR is goccl's.) goccl itself reads its GOCCL_*
// variables first (rendezvous.FromEnv), so these never override them.
var CompatVars = []string{
	"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
}

// CompatEnv returns CompatVars set for the rank at s.
func (s slot) CompatEnv() []string {
	r, n := strconv.Itoa(s.rank), strconv.Itoa(s.world)
	l, ln := strconv.Itoa(s.local), strconv.Itoa(s.localWorld)
	return []string{
		"RANK=" + r, "WORLD_SIZE=" + n, "LOCAL_RANK=" + l, "LOCAL_WORLD_SIZE=" + ln, "GROUP_RANK=" + strconv.Itoa(s.node),
		"OMPI_COMM_WORLD_RANK=" + r, "OMPI_COMM_WORLD_SIZE=" + n,
		"OMPI_COMM_WORLD_LOCAL_RANK=" + l, "OMPI_COMM_WORLD_LOCAL_SIZE=" + ln,
	}
}

// ExitError reports the rank whose failure ended the job: it exited with a
// non-zero status or was killed by a signal. When several ranks fail within
// Settle of the first failure, a rank killed by a signal (other than
// SIGPIPE) is reported before one that exited with a status, since the
// survivors of a killed rank usually notice its death and exit with an error
// before the launcher has seen it die; otherwise the first failure is
// reported. Ranks that failed later (usually because of it, or because they
// were stopped) are not reported.
//
// In a job of several programs (Config.Apps) the error names the rank's
// program too: "rank 1 (pid 4242, /usr/bin/python3 train.py) exited with
// status 3; stopped the other 2 ranks".
type ExitError struct {
	Rank    int
	Pid     int
	Status  int            // exit status; -1 when Signal is set
	Signal  syscall.Signal // the signal that killed the rank, or 0
	Stopped int            // other ranks still running when Run stopped them
	// App is the index in Config.Apps of the rank's program (0 in a job
	// of one program); Prog and Args are that program and its arguments
	// as configured.
	App  int
	Prog string
	Args []string
	// Host is the host the rank ran on, in a job of several hosts (as
	// Config.Hosts names it); "" otherwise.
	Host string
	// Restarts and MaxRestarts, when MaxRestarts is above 0, say that
	// the job's restarts were spent when the rank failed (Config.MaxRestarts):
	// Restarts of MaxRestarts.
	Restarts, MaxRestarts int
	apps                  int // the job's number of programs: Error names Prog when more than 1
}

func (e *ExitError) Error() string {
	spent := ""
	if e.MaxRestarts > 0 {
		spent = fmt.Sprintf(" with no restart left (%d of %d used)", e.Restarts, e.MaxRestarts)
	}
	return e.what() + spent + "; " + stoppedPhrase(e.Stopped, true)
}

// what is the failure without the consequences: "rank 1 (pid 4242)
// exited with status 3".
func (e *ExitError) what() string {
	var what string
	if e.Signal != 0 {
		what = "killed by signal: " + e.Signal.String()
	} else {
		what = "exited with status " + strconv.Itoa(e.Status)
	}
	where := ""
	if e.Host != "" {
		where = " on " + e.Host
	}
	if e.apps > 1 {
		where += ", " + commandLine(e.Prog, e.Args)
	}
	return fmt.Sprintf("rank %d (pid %d%s) %s", e.Rank, e.Pid, where, what)
}

// commandLine is prog and args as a shell would take them (arguments with
// spaces or quotes quoted), cut short after 80 bytes.
func commandLine(prog string, args []string) string {
	const max = 80
	var b strings.Builder
	for i, a := range append([]string{prog}, args...) {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`;&|<>()*?[]{}~#") {
			a = strconv.Quote(a)
		}
		b.WriteString(a)
		if b.Len() > max {
			break
		}
	}
	s := b.String()
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// ExitCode is the status a launcher should exit with: the rank's exit status,
// or 128 plus the signal number.
func (e *ExitError) ExitCode() int {
	if e.Signal != 0 {
		return 128 + int(e.Signal)
	}
	if e.Status <= 0 || e.Status > 255 {
		return 1
	}
	return e.Status
}

// SignalError reports that the launcher received a signal (with
// Config.ForwardSignals) and passed it on to the ranks.
type SignalError struct {
	Signal  os.Signal
	Stopped int // ranks still running when it arrived
}

func (e *SignalError) Error() string {
	return fmt.Sprintf("received signal: %v; %s", e.Signal, stoppedPhrase(e.Stopped, false))
}

// ExitCode is 128 plus the signal number (130 for SIGINT).
func (e *SignalError) ExitCode() int {
	if s, ok := e.Signal.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

func stoppedPhrase(n int, other bool) string {
	o := ""
	if other {
		o = "other "
	}
	switch n {
	case 0:
		return "no " + o + "ranks were left running"
	case 1:
		return "stopped the " + o + "1 rank"
	}
	return fmt.Sprintf("stopped the %s%d ranks", o, n)
}

// catchSignals returns the channel SIGINT and SIGTERM arrive on when
// forward is set (the caller calls signal.Stop on it), or nil (a channel
// that never delivers).
func catchSignals(forward bool) chan os.Signal {
	if !forward {
		return nil
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	return sigs
}

// NewJobID returns a random 16-digit hex job identifier.
func NewJobID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return strconv.FormatInt(time.Now().UnixNano(), 16)
	}
	return hex.EncodeToString(b[:])
}

// NewJobToken returns a fresh random job token (256 bits, hex).
func NewJobToken() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type rank struct {
	id      int
	cmd     *exec.Cmd
	done    bool
	readers sync.WaitGroup
	pipes   []*os.File // read ends
}

type exit struct {
	rank  int
	state *os.ProcessState
	err   error
}

// exitError describes the failed exit e of the rank with process id pid.
func exitError(e exit, pid int) *ExitError {
	ee := &ExitError{Rank: e.rank, Pid: pid, Status: -1}
	if e.state != nil {
		ee.Pid = e.state.Pid()
		ee.Status = e.state.ExitCode()
		if ws, ok := e.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ee.Signal = ws.Signal()
		}
	}
	return ee
}

// causes reports whether e, a failure seen after f, is more likely the cause
// of the job's end than f: e was killed by a signal and f was not. SIGPIPE
// does not count: it kills a process that writes to a peer that is gone.
func (e *ExitError) causes(f *ExitError) bool {
	killed := func(x *ExitError) bool { return x.Signal != 0 && x.Signal != syscall.SIGPIPE }
	return killed(e) && !killed(f)
}

// jobApps returns the programs of cfg (Apps, or one of NP, Prog and
// Args), checked.
func jobApps(cfg Config) ([]App, error) {
	if len(cfg.Apps) == 0 {
		if cfg.NP < 1 {
			return nil, fmt.Errorf("launch: need at least 1 rank, got %d", cfg.NP)
		}
		if cfg.Prog == "" {
			return nil, errors.New("launch: no program given")
		}
		return []App{{NP: cfg.NP, Prog: cfg.Prog, Args: cfg.Args}}, nil
	}
	if cfg.NP != 0 || cfg.Prog != "" || cfg.Args != nil {
		return nil, errors.New("launch: give the ranks as Apps or as NP, Prog and Args, not both")
	}
	for i, a := range cfg.Apps {
		if a.NP < 1 {
			return nil, fmt.Errorf("launch: app %d of %d (%s): need at least 1 rank, got %d", i+1, len(cfg.Apps), commandLine(a.Prog, a.Args), a.NP)
		}
		if a.Prog == "" {
			return nil, fmt.Errorf("launch: app %d of %d: no program given", i+1, len(cfg.Apps))
		}
	}
	return cfg.Apps, nil
}

// Run starts cfg.NP ranks of cfg.Prog (or those of every program of
// cfg.Apps) and waits for all of them. It returns
// nil when every rank exits with status 0, an *ExitError naming the rank whose
// failure ended the job (after stopping the others: SIGTERM cfg.Settle after
// the first failure, then SIGKILL after cfg.Grace), a *SignalError when ForwardSignals is set and a signal arrived,
// or another error (bad config, build or start failure, ctx ended: the ranks
// are then stopped the same way). With cfg.MaxRestarts, a failure while
// restarts remain starts a replacement instead (see Config.MaxRestarts).
func Run(ctx context.Context, cfg Config) error {
	if len(cfg.Hosts) > 0 {
		return runHosts(ctx, cfg)
	}
	apps, err := jobApps(cfg)
	if err != nil {
		return err
	}
	var app []int // app[rank]: the rank's index in apps
	for i, a := range apps {
		for range a.NP {
			app = append(app, i)
		}
	}
	fillDefaults(&cfg)

	sigs := catchSignals(cfg.ForwardSignals) // from the start, the build included
	defer signal.Stop(sigs)

	rv := newResolver(cfg.Dir, cfg.Stderr)
	defer rv.cleanup()
	paths := make([]string, len(apps)) // the executables
	for i, a := range apps {
		if paths[i], err = rv.resolve(ctx, a.Prog); err != nil {
			return err
		}
	}
	select {
	case s := <-sigs:
		return &SignalError{Signal: s}
	default:
	}

	place, err := jobPlace(cfg, len(app))
	if err != nil {
		return err
	}
	j := &localJob{cfg: &cfg, apps: apps, app: app, paths: paths, place: place, exits: make(chan exit, len(app)),
		env: jobEnv(cfg), outMu: new(sync.Mutex)}
	if cfg.MaxRestarts > 0 && cfg.Place == nil {
		srv, err := j.serveStore()
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	startErr := j.start()
	w := j.wait(ctx, sigs, startErr)
	j.drain()
	return w.result(startErr)
}

// jobPlace returns where the np ranks of this host sit in the job:
// cfg.Place, checked, or a job of their own with a store on a free port of
// 127.0.0.1.
func jobPlace(cfg Config, np int) (Place, error) {
	place := Place{WorldSize: np, JobID: NewJobID()}
	if cfg.Place != nil {
		place = *cfg.Place
		if place.FirstRank < 0 || place.FirstRank+np > place.WorldSize || place.StoreAddr == "" || place.JobID == "" {
			return Place{}, fmt.Errorf("launch: bad place %+v for %d ranks", place, np)
		}
		return place, nil
	}
	port, err := FreePort("127.0.0.1")
	if err != nil {
		return Place{}, fmt.Errorf("launch: the store's port: %w", err)
	}
	place.StoreAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	return place, nil
}

// localJob is Run's ranks on this host.
type localJob struct {
	cfg   *Config
	apps  []App
	app   []int    // app[rank]: the rank's index in apps
	paths []string // the executables of apps
	place Place
	ranks []*rank // the started ones, by rank (the latest of each)
	exits chan exit
	env   []string    // the parent environment of every rank (jobEnv)
	outMu *sync.Mutex // one line at a time, across both streams
	// Restarts (Config.MaxRestarts): the ranks replaced, for drain, and
	// their count.
	replaced []*rank
	restarts int
}

// jobEnv is the environment every rank of cfg starts from: this
// process's, with a fresh job token unless it holds one.
func jobEnv(cfg Config) []string {
	env := os.Environ()
	if os.Getenv(EnvJobToken) == "" && cfg.Place == nil {
		// A share of a bigger job has the job's token in cfg.Env, or none
		// (every host must hold the same one: it cannot be made here).
		env = append(env, EnvJobToken+"="+NewJobToken())
	}
	return env
}

// lastValue is the value of the last entry of key in env ("" if none): the
// one a process started with env sees.
func lastValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// serveStore serves the job's goccl store on a free port of 127.0.0.1,
// with the ranks' job token, for the ranks to reach as clients
// (Config.MaxRestarts).
func (j *localJob) serveStore() (*rendezvous.TCPServer, error) {
	var opts []rendezvous.Option
	if tok := lastValue(append(j.env[:len(j.env):len(j.env)], j.cfg.Env...), EnvJobToken); tok != "" {
		opts = append(opts, rendezvous.WithToken([]byte(tok)))
	}
	srv, err := rendezvous.NewTCPServer("127.0.0.1:0", opts...)
	if err != nil {
		return nil, fmt.Errorf("launch: serving the job's store: %w", err)
	}
	j.place.StoreAddr, j.place.Served = srv.Addr(), true
	return srv, nil
}

// start starts the ranks in order and returns the error of the first that
// cannot start (the ranks before it run; the caller stops them).
func (j *localJob) start() error {
	for i := range j.app {
		r, err := j.startRank(i, false)
		if err != nil {
			return err
		}
		j.ranks = append(j.ranks, r)
	}
	return nil
}

// startRank starts rank i of this host (a replacement that joins the
// running job with join), its output copied line by line under its label,
// and a goroutine that reports its exit on j.exits.
func (j *localJob) startRank(i int, join bool) (*rank, error) {
	r := &rank{id: i}
	a, path := j.apps[j.app[i]], j.paths[j.app[i]]
	cmd := exec.Command(path, a.Args...)
	cmd.Dir = j.cfg.Dir
	cmd.Env, cmd.ExtraFiles = j.rankEnv(i, a, join)
	cmd.SysProcAttr = sysProcAttr()
	ws, err := j.pipeOutput(r, cmd, j.outMu)
	if err == nil {
		err = cmd.Start()
	}
	for _, w := range ws {
		w.Close()
	}
	if err != nil {
		for _, p := range r.pipes {
			p.Close()
		}
		return nil, fmt.Errorf("launch: starting rank %d (%s): %w", i, path, err)
	}
	r.cmd = cmd
	go func() {
		err := cmd.Wait()
		j.exits <- exit{rank: r.id, state: cmd.ProcessState, err: err}
	}()
	return r, nil
}

// rankEnv returns the environment of rank i of this host (a program of
// app a; with join, a replacement that joins the running job) and the
// files it inherits beyond stdio (the progress pipe, to rank 0).
func (j *localJob) rankEnv(i int, a App, join bool) (env []string, extra []*os.File) {
	cfg, place := j.cfg, j.place
	env = make([]string, 0, len(j.env)+10+len(CompatVars)+len(cfg.Env)+len(a.Env))
	env = append(env, j.env...)
	at := slot{rank: place.FirstRank + i, world: place.WorldSize, local: i, localWorld: len(j.app), node: place.Node}
	env = append(env, at.CompatEnv()...)
	env = append(env, at.RankEnv(place.StoreAddr, place.JobID)...)
	if place.Served {
		env = append(env, config.StoreServed.Name+"=launcher")
	}
	if join {
		env = append(env, config.Join.Name+"=1")
	}
	if i == 0 && cfg.Progress != nil {
		extra = []*os.File{cfg.Progress}
		env = append(env, EnvProgressFD+"="+strconv.Itoa(progressFD))
	} else if os.Getenv(EnvProgressFD) != "" {
		// Our own launcher's descriptor: not open in this rank.
		env = append(env, EnvProgressFD+"=")
	}
	env = append(env, cfg.Env...)
	env = append(env, a.Env...)
	return env, extra
}

// pipeOutput gives cmd a pipe for stdout and one for stderr, whose read
// ends r keeps and copies to cfg's streams under the rank's label; it
// returns the write ends, for the caller to close once cmd started (or
// failed to).
func (j *localJob) pipeOutput(r *rank, cmd *exec.Cmd, outMu *sync.Mutex) ([]*os.File, error) {
	var ws []*os.File
	for _, isErr := range []bool{false, true} {
		pr, pw, err := os.Pipe()
		if err != nil {
			return ws, err
		}
		out := j.cfg.Stdout
		if isErr {
			out = j.cfg.Stderr
			cmd.Stderr = pw
		} else {
			cmd.Stdout = pw
		}
		r.pipes = append(r.pipes, pr)
		ws = append(ws, pw)
		prefix := j.cfg.Label(j.place.FirstRank+r.id, isErr)
		if j.cfg.Progress != nil && progress.IsTerminal(out) {
			prefix = progress.ClearLine + prefix
		}
		lw := &lineWriter{prefix: []byte(prefix), out: out, mu: outMu}
		r.readers.Add(1)
		go func() {
			defer r.readers.Done()
			lw.copyFrom(pr)
		}()
	}
	return ws, nil
}

// jobWait is the state of localJob.wait.
type jobWait struct {
	first    *ExitError
	settle   <-chan time.Time // runs while failures are collected
	sigErr   *SignalError
	stopping bool
	kill     <-chan time.Time
	ctxErr   error
	ctxRun   int
	running  int
}

// wait collects the started ranks' exits. The first failure (or a signal,
// ctx's end or startErr) stops the others: SIGTERM cfg.Settle after a
// failure (at once otherwise), SIGKILL cfg.Grace later.
func (j *localJob) wait(ctx context.Context, sigs <-chan os.Signal, startErr error) *jobWait {
	w := &jobWait{running: len(j.ranks)}
	done := ctx.Done()
	// Ranks lead their own process groups (on Linux): signals reach the
	// processes a rank started as well, even after the rank itself exited.
	signalAll := func(s os.Signal) {
		for _, r := range j.ranks {
			signalGroup(r.cmd.Process, s)
		}
	}
	stop := func(s os.Signal) {
		signalAll(s)
		if !w.stopping {
			w.stopping = true
			w.kill = time.After(j.cfg.Grace)
			w.settle = nil
			if w.first != nil {
				w.first.Stopped = w.running
			}
		}
	}
	if startErr != nil {
		stop(syscall.SIGTERM)
	}
	for w.running > 0 {
		select {
		case e := <-j.exits:
			j.exited(w, e)
		case <-w.settle:
			stop(syscall.SIGTERM)
		case s := <-sigs:
			if w.first == nil && w.sigErr == nil && w.ctxErr == nil && startErr == nil {
				w.sigErr = &SignalError{Signal: s, Stopped: w.running}
			}
			stop(s)
		case <-done:
			done = nil
			if w.first == nil && w.sigErr == nil && startErr == nil {
				w.ctxErr, w.ctxRun = ctx.Err(), w.running
			}
			stop(syscall.SIGTERM)
		case <-w.kill:
			w.kill = nil
			signalAll(syscall.SIGKILL)
		}
	}
	return w
}

// exited records rank exit e: a failure before the job is stopping becomes
// the job's failure if it is the first or a likelier cause (ExitError.causes),
// and starts the settle timer.
func (j *localJob) exited(w *jobWait, e exit) {
	w.running--
	r := j.ranks[e.rank]
	r.done = true
	if w.stopping {
		return
	}
	if e.err == nil {
		if j.cfg.OnExit != nil {
			j.cfg.OnExit(j.place.FirstRank+e.rank, nil)
		}
		return
	}
	ee := exitError(e, r.cmd.Process.Pid)
	a := j.apps[j.app[e.rank]]
	ee.Rank += j.place.FirstRank
	ee.App, ee.Prog, ee.Args, ee.apps = j.app[e.rank], a.Prog, a.Args, len(j.apps)
	if j.replace(w, ee) {
		return
	}
	if j.cfg.OnExit != nil {
		j.cfg.OnExit(ee.Rank, ee)
	}
	if w.first == nil || ee.causes(w.first) {
		w.first = ee
	}
	if w.settle == nil {
		w.settle = time.After(j.cfg.Settle)
	}
}

// replace starts a replacement for the failed rank ee when restarts
// remain (Config.MaxRestarts) and reports whether it did; otherwise it
// notes in ee that the restarts are spent.
func (j *localJob) replace(w *jobWait, ee *ExitError) bool {
	max := j.cfg.MaxRestarts
	if max <= 0 || w.stopping {
		return false
	}
	var n int
	var ok bool
	if j.cfg.askRestart != nil {
		n, ok = j.cfg.askRestart(ee)
	} else if ok = j.restarts < max; ok {
		j.restarts++
		n = j.restarts
	}
	if !ok {
		if j.cfg.askRestart == nil {
			ee.Restarts, ee.MaxRestarts = j.restarts, max
		}
		return false
	}
	i := ee.Rank - j.place.FirstRank
	what := *ee
	what.Host = j.cfg.hostName
	j.say("goccl run: %s; starting a replacement that joins the job (restart %d of %d)", what.what(), n, max)
	r, err := j.startRank(i, true)
	if err != nil {
		j.say("goccl run: %v", err)
		return false
	}
	j.replaced = append(j.replaced, j.ranks[i])
	j.ranks[i] = r
	w.running++
	return true
}

// say writes a line of the launcher's own to Stderr, between the ranks'.
func (j *localJob) say(format string, args ...any) {
	line := fmt.Sprintf(format+"\n", args...)
	if j.cfg.Progress != nil && progress.IsTerminal(j.cfg.Stderr) {
		line = progress.ClearLine + line
	}
	j.outMu.Lock()
	io.WriteString(j.cfg.Stderr, line)
	j.outMu.Unlock()
}

// drain waits for the exited ranks' output to be copied and closes their
// pipes. Their output pipes normally reach EOF at once; a grandchild
// holding a pipe open must not hang the launcher.
func (j *localJob) drain() {
	all := append(j.replaced, j.ranks...)
	drained := make(chan struct{})
	go func() {
		for _, r := range all {
			r.readers.Wait()
		}
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
		// Leftover processes of the ranks hold the pipes: end them.
		for _, r := range all {
			signalGroup(r.cmd.Process, syscall.SIGKILL)
			for _, p := range r.pipes {
				p.Close()
			}
		}
		<-drained
	}
	for _, r := range all {
		for _, p := range r.pipes {
			p.Close()
		}
	}
	if j.cfg.Progress != nil && progress.IsTerminal(j.cfg.Progress) {
		j.cfg.Progress.WriteString(progress.ClearLine)
	}
}

// result is Run's error once every rank exited.
func (w *jobWait) result(startErr error) error {
	switch {
	case startErr != nil:
		return startErr
	case w.first != nil:
		return w.first
	case w.sigErr != nil:
		return w.sigErr
	case w.ctxErr != nil:
		return fmt.Errorf("launch: %w; %s", w.ctxErr, stoppedPhrase(w.ctxRun, false))
	}
	return nil
}
