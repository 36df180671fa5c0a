package launch

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// agentEnv, set to 1, makes the test binary run as goccl rund does
// (ServeNode) when its argument is AgentCommand.
const agentEnv = "GOCCL_LAUNCH_TEST_AGENT"

// fakeSSH is a remote shell for tests: "fakessh HOST COMMAND" runs COMMAND
// with sh here, as ssh would on HOST; the host named down refuses, as an
// unreachable one does.
var fakeSSH = []string{"sh", "-c", `if [ "$1" = down ]; then echo "ssh: connect to host down port 22: Connection refused" >&2; exit 255; fi; exec sh -c "$2"`, "fakessh"}

// hostsConfig is helperConfig on hosts, started through fakeSSH with this
// test binary as the agent.
func hostsConfig(t *testing.T, np int, mode string, hosts ...Host) (Config, *syncBuffer, *syncBuffer) {
	t.Setenv(agentEnv, "1")
	cfg, out, errb := helperConfig(t, np, mode)
	cfg.Hosts, cfg.Rsh, cfg.Agent = hosts, fakeSSH, selfExe(t)
	cfg.Grace = time.Second
	return cfg, out, errb
}

func TestMapRanks(t *testing.T) {
	a, b := App{Prog: "a"}, App{Prog: "b"}
	withNP := func(x App, n int) App { x.NP = n; return x }
	hosts := []Host{{"h0", 2}, {"h1", 2}, {"h2", 3}}
	for _, tc := range []struct {
		apps []App
		want []hostShare
	}{
		{[]App{withNP(a, 3)}, []hostShare{
			{host: hosts[0], node: 0, firstRank: 0, apps: []App{withNP(a, 2)}, appIndex: []int{0}},
			{host: hosts[1], node: 1, firstRank: 2, apps: []App{withNP(a, 1)}, appIndex: []int{0}},
		}},
		{[]App{withNP(a, 1), withNP(b, 6)}, []hostShare{
			{host: hosts[0], node: 0, firstRank: 0, apps: []App{withNP(a, 1), withNP(b, 1)}, appIndex: []int{0, 1}},
			{host: hosts[1], node: 1, firstRank: 2, apps: []App{withNP(b, 2)}, appIndex: []int{1}},
			{host: hosts[2], node: 2, firstRank: 4, apps: []App{withNP(b, 3)}, appIndex: []int{1}},
		}},
	} {
		got, err := mapRanks(hosts, tc.apps)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("mapRanks(%v) =\n%+v, %v\nwant\n%+v", tc.apps, got, err, tc.want)
		}
	}
	_, err := mapRanks(hosts, []App{withNP(a, 8)})
	if err == nil || err.Error() != "launch: 8 ranks but the hosts have 7 slots (h0:2,h1:2,h2:3): give fewer ranks or more slots" {
		t.Errorf("too many ranks: %v", err)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/bin/goccl": "/usr/bin/goccl", "": "''", "/a b/goccl": "'/a b/goccl'", "it's": `'it'\''s'`, "$HOME": "'$HOME'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
		if out, err := exec.Command("sh", "-c", "printf %s "+shellQuote(in)).Output(); err != nil || string(out) != in {
			t.Errorf("sh read %s as %q (%v)", shellQuote(in), out, err)
		}
	}
}

func TestParseControl(t *testing.T) {
	a := &agent{}
	for line, want := range map[string]agentEvent{
		"store 10.0.0.1:5 10.0.0.1:6":                    {agent: a, kind: "store", store: [2]string{"10.0.0.1:5", "10.0.0.1:6"}},
		`exit {"rank":3,"pid":9,"status":-1,"signal":9}`: {agent: a, kind: "exit", rank: 3, failure: &ExitError{Rank: 3, Pid: 9, Status: -1, Signal: syscall.SIGKILL}},
		"ok 7":                    {agent: a, kind: "ok", rank: 7},
		"done":                    {agent: a, kind: "done"},
		"error no such interface": {agent: a, kind: "error", msg: "no such interface"},
		"store 1":                 {agent: a, kind: "error", msg: `unreadable control line from its agent: "store 1"`},
		"exit {":                  {agent: a, kind: "error", msg: `unreadable control line from its agent: "exit {"`},
		"frobnicate":              {agent: a, kind: "error", msg: `unreadable control line from its agent: "frobnicate"`},
	} {
		if got := parseControl(a, line); !reflect.DeepEqual(got, want) {
			t.Errorf("parseControl(%q) = %+v, want %+v", line, got, want)
		}
	}
}

// rankVars reads the "[r] KEY=VALUE" lines of the env helper.
func rankVars(t *testing.T, out string) map[int]map[string]string {
	t.Helper()
	vals := map[int]map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		m := regexp.MustCompile(`^\[(\d+)\] ([A-Z_]+)=(.*)$`).FindStringSubmatch(line)
		if m == nil {
			continue
		}
		r, _ := strconv.Atoi(m[1])
		if vals[r] == nil {
			vals[r] = map[string]string{}
		}
		vals[r][m[2]] = m[3]
	}
	return vals
}

// TestRunHostsEnv: each host's agent gives its ranks their place in the
// whole job: ranks numbered across the hosts, local ranks within each,
// GROUP_RANK the host's index, and the same store, job id and token
// everywhere (the store on rank 0's host, not on loopback); localhost is
// started without the remote shell.
func TestRunHostsEnv(t *testing.T) {
	cfg, out, errb := hostsConfig(t, 5, "env", Host{"localhost", 2}, Host{"nodeB", 2}, Host{"nodeC", 4})
	cfg.Env = append(cfg.Env, "LAUNCH_TEST_EXTRA=extra")
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v\nstderr:\n%s", err, errb)
	}
	vals := rankVars(t, out.String())
	if len(vals) != 5 {
		t.Fatalf("%d ranks reported, want 5:\n%s", len(vals), out)
	}
	place := [][3]int{{0, 2, 0}, {1, 2, 0}, {0, 2, 1}, {1, 2, 1}, {0, 1, 2}} // local rank, local world, node
	for r, p := range place {
		v := vals[r]
		want := map[string]string{EnvRank: strconv.Itoa(r), EnvWorldSize: "5", "RANK": strconv.Itoa(r), "WORLD_SIZE": "5",
			EnvLocalRank: strconv.Itoa(p[0]), EnvLocalWorldSize: strconv.Itoa(p[1]), "LOCAL_RANK": strconv.Itoa(p[0]),
			"GROUP_RANK": strconv.Itoa(p[2]), "OMPI_COMM_WORLD_LOCAL_SIZE": strconv.Itoa(p[1]), "LAUNCH_TEST_EXTRA": "extra"}
		for k, w := range want {
			if v[k] != w {
				t.Errorf("rank %d: %s=%q, want %q", r, k, v[k], w)
			}
		}
		for _, k := range []string{EnvStoreAddr, EnvJobID, EnvJobToken, "MASTER_ADDR", "MASTER_PORT"} {
			if v[k] == "" || v[k] != vals[0][k] {
				t.Errorf("rank %d: %s=%q, rank 0 has %q", r, k, v[k], vals[0][k])
			}
		}
	}
	if s := vals[0][EnvStoreAddr]; strings.HasPrefix(s, "127.") {
		t.Errorf("store at %s: the other hosts cannot reach a loopback address", s)
	}
	if vals[0][EnvStoreAddr] == vals[0]["MASTER_ADDR"]+":"+vals[0]["MASTER_PORT"] {
		t.Errorf("goccl's store and PyTorch's share %s", vals[0][EnvStoreAddr])
	}
}

// TestRunHostsFailure: a rank that fails on one host is named with its
// host, and the ranks on every host are stopped.
func TestRunHostsFailure(t *testing.T) {
	for _, tc := range []struct {
		mode, want string
		rank       int
		signal     syscall.Signal
	}{
		{"fail1", "exited with status 3", 1, 0},     // on the first host
		{"kill2", "killed by signal: killed", 2, 9}, // on the second, by a signal
	} {
		t.Run(tc.mode, func(t *testing.T) {
			cfg, out, errb := hostsConfig(t, 4, tc.mode, Host{"nodeA", 2}, Host{"nodeB", 2})
			start := time.Now()
			err := Run(context.Background(), cfg)
			var ee *ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("Run = %v, want *ExitError\nstdout:\n%s\nstderr:\n%s", err, out, errb)
			}
			host := []string{"nodeA", "nodeA", "nodeB", "nodeB"}[tc.rank]
			if ee.Rank != tc.rank || ee.Host != host || ee.Signal != tc.signal || ee.Stopped != 3 {
				t.Errorf("ExitError = %+v", *ee)
			}
			want := fmt.Sprintf("rank %d (pid %d on %s) %s; stopped the other 3 ranks", tc.rank, ee.Pid, host, tc.want)
			if err.Error() != want {
				t.Errorf("Error() = %q, want %q", err, want)
			}
			if d := time.Since(start); d > 30*time.Second { // they sleep a minute
				t.Errorf("took %v to stop the other ranks", d)
			}
		})
	}
}

// TestRunHostsKillsEverywhere: when a rank fails, the sleeping ranks on
// every host are gone by the time Run returns.
func TestRunHostsKillsEverywhere(t *testing.T) {
	dir := t.TempDir()
	cfg, out, errb := hostsConfig(t, 4, "pid-sleep", Host{"nodeA", 2}, Host{"nodeB", 2})
	cfg.Env = append(cfg.Env, "LAUNCH_TEST_DIR="+dir)
	cfg.Apps = []App{{NP: 3, Prog: cfg.Prog}, {NP: 1, Prog: cfg.Prog, Args: []string{"x"}, Env: []string{helperEnv + "=fail1"}}}
	cfg.NP, cfg.Prog = 0, ""
	// Rank 3 runs "fail1" but is not rank 1: it sleeps too. Kill it from
	// outside once every pid file is there.
	// It looks until Run returns (race-built ranks on a loaded machine may
	// take seconds to start); the ranks sleep a minute.
	ran := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if files, _ := filepath.Glob(filepath.Join(dir, "pid[0-9]")); len(files) == 3 { // not pidN.tmp
				exec.Command("pkill", "-TERM", "-f", "-x", regexp.QuoteMeta(selfExe(t))+" x").Run()
				return
			}
			select {
			case <-ran:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	err := Run(context.Background(), cfg)
	close(ran)
	<-watched
	var ee *ExitError
	// Rank 3 exits 7 on SIGTERM, or dies of it if it comes before the
	// rank set up its handler.
	if !errors.As(err, &ee) || ee.Rank != 3 || ee.Host != "nodeB" || (ee.Status != 7 && ee.Signal != syscall.SIGTERM) {
		t.Fatalf("Run = %v, want rank 3 on nodeB failed\nstdout:\n%s\nstderr:\n%s", err, out, errb)
	}
	for r := range 3 {
		b, err := os.ReadFile(filepath.Join(dir, "pid"+strconv.Itoa(r)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat("/proc/" + string(b)); err == nil {
			t.Errorf("rank %d (pid %s) still runs after Run returned", r, b)
		}
	}
}

// TestRunHostsUnreachable: a host whose remote shell fails is named, with
// what the remote shell said and that nothing was started there, and the
// ranks already started elsewhere (none when it is rank 0's host, whose
// agent starts first) are stopped and counted.
func TestRunHostsUnreachable(t *testing.T) {
	for _, tc := range []struct {
		hosts   []Host
		stopped string
	}{
		{[]Host{{"down", 2}, {"nodeB", 2}}, "no other ranks were left running"},
		{[]Host{{"nodeA", 2}, {"down", 2}}, "stopped the other 2 ranks"},
	} {
		t.Run(tc.hosts[0].Name, func(t *testing.T) {
			cfg, out, errb := hostsConfig(t, 4, "sleep", tc.hosts...)
			start := time.Now()
			err := Run(context.Background(), cfg)
			var he *HostError
			if !errors.As(err, &he) || he.Host != "down" || !strings.Contains(he.Output, "ssh: connect to host down port 22: Connection refused") {
				t.Fatalf("Run = %v, want a *HostError for host down\nstdout:\n%s\nstderr:\n%s", err, out, errb)
			}
			want := "host down: could not be reached (the remote shell: exit status 255) (it said: ssh: connect to host down port 22: Connection refused); nothing was started there; " + tc.stopped
			if !he.NotStarted || err.Error() != want {
				t.Errorf("Error() = %q\nwant      %q", err, want)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

// TestServeNodeInputEnds: an agent whose launcher is gone (its standard
// input ends) stops its ranks.
func TestServeNodeInputEnds(t *testing.T) {
	dir := t.TempDir()
	exe := selfExe(t)
	spec := nodeSpec{Host: "here", Apps: []App{{NP: 2, Prog: exe}}, Env: []string{helperEnv + "=pid-sleep", "LAUNCH_TEST_DIR=" + dir},
		Place: Place{FirstRank: 4, WorldSize: 6, Node: 2, StoreAddr: "127.0.0.1:1", JobID: "j"}, Grace: time.Second}
	line, _ := json.Marshal(spec)
	cmd := exec.Command(exe, AgentCommand)
	cmd.Env = append(os.Environ(), agentEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdin.Write(append(line, '\n'))
	var pids []string
	for r := 4; r < 6; r++ {
		file := filepath.Join(dir, "pid"+strconv.Itoa(r))
		for i := 0; i < 2400; i++ { // a minute: race-built ranks on a loaded machine
			if b, err := os.ReadFile(file); err == nil {
				pids = append(pids, string(b))
				break
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
	if len(pids) != 2 {
		cmd.Process.Kill()
		t.Fatalf("ranks 4 and 5 did not start (pids %v)", pids)
	}
	stdin.Close()
	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := cmd.Wait(); err == nil {
		t.Errorf("agent exited 0 after its ranks were stopped")
	}
	if len(lines) == 0 || lines[len(lines)-1] != ctlPrefix+"done" {
		t.Errorf("agent's output %q does not end with done", lines)
	}
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + pid); err == nil {
			t.Errorf("rank pid %s still runs after its agent's input ended", pid)
		}
	}
}

// TestServeNodeBadInput: what is not a job gets a clear error, not a hang.
func TestServeNodeBadInput(t *testing.T) {
	var out, errb strings.Builder
	if code := ServeNode(strings.NewReader("{not json\n"), &out, &errb); code != 2 || !strings.HasPrefix(out.String(), ctlPrefix+"error reading the job: ") {
		t.Errorf("bad JSON: exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := ServeNode(strings.NewReader(""), &out, &errb); code != 2 || !strings.Contains(errb.String(), "started by goccl run -H") {
		t.Errorf("no input: exit %d, %q", code, errb.String())
	}
}
