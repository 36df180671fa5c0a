package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// With GOCCL_CLI_TEST_MAIN=1 the test binary is the goccl command, so tests
// can run it as a process (and goccl perf -np can re-execute it).
// With rankEnvHelper=1 the test binary is instead a rank program that
// prints its launcher variables and what rendezvous.FromEnv makes of them;
// with progressHelper=1, one that draws a progress bar on rank 0; with
// pidSleepHelper set to a directory, one that writes its pid there and
// sleeps.
func TestMain(m *testing.M) {
	if os.Getenv(rankEnvHelper) == "1" {
		os.Exit(printRankEnv())
	}
	if dir := os.Getenv(pidSleepHelper); dir != "" {
		os.Exit(pidSleep(dir))
	}
	if os.Getenv(progressHelper) == "1" {
		os.Exit(drawProgress())
	}
	if os.Getenv("GOCCL_CLI_TEST_MAIN") == "1" {
		os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
	}
	code := m.Run()
	removeElasticExe()
	os.Exit(code)
}

// goccl runs the command as a separate process.
func runGoccl(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "GOCCL_CLI_TEST_MAIN=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

func TestUsage(t *testing.T) {
	var o, e bytes.Buffer
	if code := cli(nil, &o, &e); code != 2 || o.Len() != 0 {
		t.Errorf("no args: code %d stdout %q", code, o.String())
	}
	for _, name := range []string{"run ", "perf ", "version "} {
		if !strings.Contains(e.String(), "\t"+name) {
			t.Errorf("usage lacks %q:\n%s", name, e.String())
		}
	}
	o.Reset()
	if code := cli([]string{"help"}, &o, &e); code != 0 || !strings.Contains(o.String(), "Commands:") {
		t.Errorf("help: code %d\n%s", code, o.String())
	}
	o.Reset()
	if code := cli([]string{"version"}, &o, &e); code != 0 || !regexp.MustCompile(`^goccl \S+.* go1\.\S+ \w+/\w+\n$`).MatchString(o.String()) {
		t.Errorf("version: code %d %q", code, o.String())
	}
	e.Reset()
	if code := cli([]string{"frobnicate"}, &o, &e); code != 2 || !strings.Contains(e.String(), `unknown command "frobnicate"`) {
		t.Errorf("unknown: code %d %q", code, e.String())
	}
	o.Reset()
	if code := cli([]string{"help", "perf"}, &o, &e); code != 0 || !strings.Contains(o.String(), "usage: goccl perf COLL") {
		t.Errorf("help perf: code %d\n%s\n%s", code, o.String(), e.String())
	}
	e.Reset()
	// Without a program: the reason and a short usage, not the whole help.
	if code := cli([]string{"run"}, &o, &e); code != 2 || !strings.Contains(e.String(), "no program given") ||
		!strings.Contains(e.String(), "usage: goccl run -n N") || strings.Count(e.String(), "\n") > 3 {
		t.Errorf("run: code %d %q", code, e.String())
	}
	e.Reset()
	if code := cli([]string{"perf", "all_reduce", "-b", "1M", "-e", "1K"}, &o, &e); code != 2 || !strings.Contains(e.String(), "invalid sizes") {
		t.Errorf("perf: code %d %q", code, e.String())
	}
}

func TestRunCommand(t *testing.T) {
	start := time.Now()
	stdout, stderr, code := runGoccl(t, "run", "-np", "3", "-env", "GREETING=hi", "sh", "-c",
		`echo "$GREETING $GOCCL_RANK/$GOCCL_WORLD_SIZE"; echo oops >&2; if [ "$GOCCL_RANK" = 1 ]; then sleep 0.3; exit 3; fi; exec sleep 30`)
	if code != 3 {
		t.Errorf("exit code %d, want 3\nstderr:\n%s", code, stderr)
	}
	for r := 0; r < 3; r++ {
		if want := "[" + string(rune('0'+r)) + "] hi " + string(rune('0'+r)) + "/3\n"; !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
		if want := "[" + string(rune('0'+r)) + "] oops\n"; !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if !regexp.MustCompile(`(?m)^goccl run: rank 1 \(pid \d+\) exited with status 3; stopped the other 2 ranks$`).MatchString(stderr) {
		t.Errorf("stderr:\n%s", stderr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
	if _, _, code := runGoccl(t, "run", "-np", "2", "true"); code != 0 {
		t.Errorf("true: exit code %d", code)
	}
}

// TestPerfLaunch runs goccl perf -np 2 end to end over the real library.
func TestPerfLaunch(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	stdout, stderr, code := runGoccl(t, "perf", "all_reduce", "-np", "2", "-b", "8", "-e", "64K", "-n", "2", "-w", "1", "-d", "all", "-o", "all")
	if code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	rows, tail := parseReport(t, stdout, 2)
	if len(rows) != 14*(6*4+4*5) || tail[0] != "# Out of bounds values : 0 OK" {
		t.Errorf("%d rows, %q", len(rows), tail[0])
	}
	for _, r := range rows {
		if r.wrongOOP != "0" || r.wrongIP != "0" {
			t.Errorf("row %+v", r)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	var want string
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var o, e bytes.Buffer
		code := cli(args, &o, &e)
		if code != 0 || e.Len() != 0 || !regexp.MustCompile(`^goccl \S+.* go1\.\S+ \w+/\w+\n$`).MatchString(o.String()) {
			t.Errorf("%q: code %d stdout %q stderr %q", args, code, o.String(), e.String())
		}
		if want == "" {
			want = o.String()
		} else if o.String() != want {
			t.Errorf("%q printed %q, version printed %q", args, o.String(), want)
		}
	}
	if !strings.Contains(want, runtime.Version()) {
		t.Errorf("version %q lacks the Go version %s", want, runtime.Version())
	}
}

func TestSuggestions(t *testing.T) {
	tests := []struct {
		args []string
		want string // in stderr; the exit status is 2
	}{
		{[]string{"rnu"}, `goccl: unknown command "rnu"; did you mean "run"?`},
		{[]string{"pref", "all_reduce"}, `unknown command "pref"; did you mean "perf"?`},
		{[]string{"verison"}, `unknown command "verison"; did you mean "version"?`},
		{[]string{"help", "rnu"}, `goccl help: unknown command "rnu"; did you mean "run"?`},
		{[]string{"--verison"}, `goccl: unknown flag "--verison"; did you mean "--version"?`},
		{[]string{"-versio"}, `unknown flag "-versio"; did you mean "-version"?`},
		{[]string{"run", "--nproc-per-nod", "2", "true"}, `goccl run: unknown flag "--nproc-per-nod"; did you mean "--nproc-per-node"?`},
		{[]string{"run", "--nproc-per-nodes=2", "true"}, `unknown flag "--nproc-per-nodes"; did you mean "--nproc-per-node"?`},
		{[]string{"run", "-npp", "2", "true"}, `unknown flag "-npp"; did you mean "-np"?`},
		{[]string{"run", "-N", "2", "true"}, `unknown flag "-N"; did you mean "-n"?`},
		{[]string{"run", "-evn", "A=1", "true"}, `unknown flag "-evn"; did you mean "-env"?`},
		{[]string{"run", "-gracee", "1s", "true"}, `unknown flag "-gracee"; did you mean "-grace"?`},
	}
	for _, tt := range tests {
		var o, e bytes.Buffer
		if code := cli(tt.args, &o, &e); code != 2 || !strings.Contains(e.String(), tt.want+"\n") {
			t.Errorf("%q: code %d, stderr %q, want it to contain %q", tt.args, code, e.String(), tt.want)
		}
	}
	// Nothing close: no suggestion.
	for _, args := range [][]string{{"frobnicate"}, {"--frobnicate"}, {"run", "-q", "1", "true"}, {"run", "--bogus", "true"}} {
		var o, e bytes.Buffer
		if code := cli(args, &o, &e); code != 2 || !strings.Contains(e.String(), "unknown") || strings.Contains(e.String(), "did you mean") {
			t.Errorf("%q: code %d, stderr %q", args, code, e.String())
		}
	}
}
