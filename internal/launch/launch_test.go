package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/progress"
	"github.com/goccl/goccl/internal/progress/ptytest"
)

// The test binary doubles as the rank program: with GOCCL_LAUNCH_HELPER set,
// TestMain runs helper instead of the tests.
const helperEnv = "GOCCL_LAUNCH_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	if len(os.Args) == 2 && os.Args[1] == AgentCommand && os.Getenv(agentEnv) == "1" {
		os.Exit(ServeNode(os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func helper(mode string) int {
	rank, _ := strconv.Atoi(os.Getenv("GOCCL_RANK"))
	switch mode {
	case "env":
		for _, k := range append([]string{EnvRank, EnvWorldSize, EnvLocalRank, EnvLocalWorldSize, EnvStoreAddr, EnvJobID, EnvJobToken,
			"LAUNCH_TEST_PARENT", "LAUNCH_TEST_EXTRA", "MASTER_ADDR", "MASTER_PORT"}, CompatVars...) {
			fmt.Printf("%s=%s\n", k, os.Getenv(k))
		}
		fmt.Fprintf(os.Stderr, "args=%q\n", os.Args[1:])
		fmt.Print("partial") // no newline: must still come out, as a whole line
		return 0
	case "lines":
		// Many lines written in pieces, concurrently on both streams.
		var wg sync.WaitGroup
		for _, f := range []*os.File{os.Stdout, os.Stderr} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 200; i++ {
					f.WriteString("line ")
					f.WriteString(strconv.Itoa(i))
					f.WriteString(" of rank ")
					f.WriteString(strconv.Itoa(rank) + " " + strings.Repeat("x", i%37) + "\n")
				}
			}()
		}
		wg.Wait()
		fmt.Println(strings.Repeat("L", 200000))
		return 0
	case "fail1":
		// Rank 1 fails; the others would sleep for a minute. When stopped they
		// exit 7 (a cascade failure that must not be reported).
		if rank == 1 {
			time.Sleep(200 * time.Millisecond)
			fmt.Fprintln(os.Stderr, "rank 1 failing")
			return 3
		}
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		fmt.Println("sleeping")
		select {
		case <-c:
			return 7
		case <-time.After(time.Minute):
			return 0
		}
	case "kill2":
		if rank == 2 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		time.Sleep(time.Minute)
		return 0
	case "stubborn":
		// Ignores SIGTERM: needs the SIGKILL.
		signal.Ignore(syscall.SIGTERM)
		if rank == 0 {
			time.Sleep(100 * time.Millisecond)
			return 1
		}
		time.Sleep(time.Minute)
		return 0
	case "trap":
		c := make(chan os.Signal, 1)
		signal.Notify(c, os.Interrupt)
		fmt.Println("ready")
		select {
		case s := <-c:
			fmt.Println("got", s)
			return 0
		case <-time.After(time.Minute):
			return 0
		}
	case "sleep":
		time.Sleep(time.Minute)
		return 0
	case "pid-sleep":
		// Writes its pid to LAUNCH_TEST_DIR/pidRANK, then sleeps.
		file := filepath.Join(os.Getenv("LAUNCH_TEST_DIR"), "pid"+strconv.Itoa(rank))
		os.WriteFile(file+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o600)
		os.Rename(file+".tmp", file)
		time.Sleep(time.Minute)
		return 0
	case "signal-after-exit", "sigpipe-after-exit":
		// Rank 0 exits 1. Rank 1 waits until the launcher has reaped rank 0,
		// then dies of a signal, as a rank killed from outside does when its
		// peers notice first and exit 1 before the launcher reaps it. The
		// others wait to be stopped.
		pidFile := filepath.Join(os.Getenv("LAUNCH_TEST_DIR"), "pid0")
		switch rank {
		case 0:
			tmp := pidFile + ".tmp"
			os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), 0o600)
			os.Rename(tmp, pidFile)
			return 1
		case 1:
			if !waitReaped(pidFile, 10*time.Second) {
				return 98
			}
			time.Sleep(10 * time.Millisecond)
			if mode == "sigpipe-after-exit" {
				// A write to a closed pipe or socket: a consequence of a
				// peer's death, not a cause.
				syscall.Exec("/bin/sh", []string{"sh", "-c", "kill -PIPE $$"}, os.Environ())
				return 97
			}
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		time.Sleep(time.Minute)
		return 0
	case "together":
		// At the same moment rank 1 is killed and ranks 0 and 2 exit 1.
		at, _ := strconv.ParseInt(os.Getenv("LAUNCH_TEST_AT"), 10, 64)
		time.Sleep(time.Until(time.Unix(0, at)))
		switch rank {
		case 0, 2:
			return 1
		case 1:
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		time.Sleep(time.Minute)
		return 0
	case "ok":
		return 0
	case "restart":
		return restartHelper(rank)
	case "store":
		return storeHelper(rank)
	case "progress":
		// Rank 0 draws a bar (as goccl perf and the examples do); every
		// rank then prints a line and the descriptor it was named.
		if rank == 0 {
			b := progress.New("rank-bar", 3)
			for range 3 {
				b.Increment()
			}
			b.Done()
		}
		fmt.Printf("rank %d done, fd %q\n", rank, os.Getenv(EnvProgressFD))
		return 0
	}
	return 99
}

// waitReaped waits for the pid written to file to be gone from /proc (the
// launcher has waited for it), for at most d.
func waitReaped(file string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(file); err == nil {
			if _, err := os.Stat("/proc/" + string(b)); os.IsNotExist(err) {
				return true
			}
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

func selfExe(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// syncBuffer is a bytes.Buffer safe for the launcher's writes.
type syncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func helperConfig(t *testing.T, np int, mode string) (Config, *syncBuffer, *syncBuffer) {
	var out, errb syncBuffer
	return Config{
		NP:     np,
		Prog:   selfExe(t),
		Env:    []string{helperEnv + "=" + mode},
		Stdout: &out,
		Stderr: &errb,
	}, &out, &errb
}

func TestEnvAndPrefixes(t *testing.T) {
	t.Setenv("LAUNCH_TEST_PARENT", "from-parent")
	t.Setenv("RANK", "99") // a launcher's own variables override the parent's
	cfg, out, errb := helperConfig(t, 3, "env")
	cfg.Args = []string{"-x", "y z"}
	cfg.Env = append(cfg.Env, "LAUNCH_TEST_EXTRA=extra")
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v\nstderr:\n%s", err, errb)
	}
	vals := map[string]map[int]string{}
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		m := regexp.MustCompile(`^\[(\d)\] (.*)$`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("line without a rank prefix: %q", line)
		}
		r, _ := strconv.Atoi(m[1])
		k, v, ok := strings.Cut(m[2], "=")
		if !ok {
			if m[2] != "partial" {
				t.Errorf("unexpected line %q", line)
			}
			k, v = "partial", "yes"
		}
		if vals[k] == nil {
			vals[k] = map[int]string{}
		}
		vals[k][r] = v
	}
	for r := 0; r < 3; r++ {
		want := map[string]string{
			EnvRank: strconv.Itoa(r), EnvWorldSize: "3", EnvLocalRank: strconv.Itoa(r), EnvLocalWorldSize: "3",
			"LAUNCH_TEST_PARENT": "from-parent", "LAUNCH_TEST_EXTRA": "extra", "partial": "yes",
			"RANK": strconv.Itoa(r), "WORLD_SIZE": "3", "LOCAL_RANK": strconv.Itoa(r), "LOCAL_WORLD_SIZE": "3",
			"GROUP_RANK": "0", "OMPI_COMM_WORLD_RANK": strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE": "3",
			"OMPI_COMM_WORLD_LOCAL_RANK": strconv.Itoa(r), "OMPI_COMM_WORLD_LOCAL_SIZE": "3",
		}
		for k, v := range want {
			if got := vals[k][r]; got != v {
				t.Errorf("rank %d: %s=%q, want %q", r, k, got, v)
			}
		}
		if !regexp.MustCompile(`^127\.0\.0\.1:\d+$`).MatchString(vals[EnvStoreAddr][r]) || vals[EnvStoreAddr][r] != vals[EnvStoreAddr][0] {
			t.Errorf("rank %d: store address %q (rank 0: %q)", r, vals[EnvStoreAddr][r], vals[EnvStoreAddr][0])
		}
		if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(vals[EnvJobID][r]) || vals[EnvJobID][r] != vals[EnvJobID][0] {
			t.Errorf("rank %d: job id %q (rank 0: %q)", r, vals[EnvJobID][r], vals[EnvJobID][0])
		}
		if want := fmt.Sprintf("[%d] args=[\"-x\" \"y z\"]\n", r); !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb)
		}
	}
}

func TestWholeLines(t *testing.T) {
	cfg, out, errb := helperConfig(t, 3, "lines")
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v", err)
	}
	re := regexp.MustCompile(`^\[(\d)\] line (\d+) of rank (\d) (x*)$`)
	for _, s := range []*syncBuffer{out, errb} {
		count := map[string]int{}
		for _, line := range strings.Split(strings.TrimSuffix(s.String(), "\n"), "\n") {
			if strings.HasSuffix(line, "LLLL") {
				if line != "["+line[1:2]+"] "+strings.Repeat("L", 200000) {
					t.Errorf("long line mangled (%d bytes)", len(line))
				}
				count["long"]++
				continue
			}
			m := re.FindStringSubmatch(line)
			if m == nil || m[1] != m[3] {
				t.Fatalf("mixed or unprefixed line %q", line)
			}
			if i, _ := strconv.Atoi(m[2]); len(m[4]) != i%37 {
				t.Fatalf("torn line %q", line)
			}
			count[m[1]]++
		}
		for r := 0; r < 3; r++ {
			if n := count[strconv.Itoa(r)]; n != 200 {
				t.Errorf("rank %d: %d lines, want 200", r, n)
			}
		}
		if s == out && count["long"] != 3 {
			t.Errorf("%d long lines, want 3", count["long"])
		}
	}
}

func TestFirstFailureStopsOthers(t *testing.T) {
	cfg, out, errb := helperConfig(t, 4, "fail1")
	start := time.Now()
	err := Run(context.Background(), cfg)
	elapsed := time.Since(start)
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("Run = %v, want *ExitError\nstdout:\n%s\nstderr:\n%s", err, out, errb)
	}
	if ee.Rank != 1 || ee.Status != 3 || ee.Signal != 0 || ee.Stopped != 3 || ee.Pid <= 0 {
		t.Errorf("ExitError = %+v, want rank 1 status 3, 3 stopped", *ee)
	}
	if ee.ExitCode() != 3 {
		t.Errorf("ExitCode = %d, want 3", ee.ExitCode())
	}
	want := fmt.Sprintf("rank 1 (pid %d) exited with status 3; stopped the other 3 ranks", ee.Pid)
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if elapsed > 5*time.Second {
		t.Errorf("took %v to stop the sleeping ranks", elapsed)
	}
	if !strings.Contains(errb.String(), "[1] rank 1 failing\n") {
		t.Errorf("stderr lacks rank 1's message:\n%s", errb)
	}
}

func TestKilledBySignal(t *testing.T) {
	cfg, _, _ := helperConfig(t, 3, "kill2")
	err := Run(context.Background(), cfg)
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("Run = %v, want *ExitError", err)
	}
	if ee.Rank != 2 || ee.Signal != syscall.SIGKILL || ee.Status != -1 {
		t.Errorf("ExitError = %+v", *ee)
	}
	if !strings.Contains(err.Error(), "rank 2 (pid ") || !strings.Contains(err.Error(), "killed by signal: killed; stopped the other 2 ranks") {
		t.Errorf("Error() = %q", err)
	}
	if ee.ExitCode() != 128+9 {
		t.Errorf("ExitCode = %d", ee.ExitCode())
	}
}

// TestSignalBeatsEarlierExit: a rank killed by a signal is the root cause
// even when another rank's exit with status 1 (its reaction to the death)
// reached the launcher first.
func TestSignalBeatsEarlierExit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("uses /proc")
	}
	for _, tc := range []struct {
		mode   string
		rank   int
		status int
		signal syscall.Signal
	}{
		{"signal-after-exit", 1, -1, syscall.SIGKILL},
		// SIGPIPE follows a peer's death: the exit status stays the cause.
		{"sigpipe-after-exit", 0, 1, 0},
		{"together", 1, -1, syscall.SIGKILL},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			cfg, out, errb := helperConfig(t, 4, tc.mode)
			cfg.Env = append(cfg.Env, "LAUNCH_TEST_DIR="+t.TempDir(),
				// "together": the moment all four ranks act, far enough
				// ahead that every one has started by then on a loaded
				// machine (a rank starting late would meet the stop).
				"LAUNCH_TEST_AT="+strconv.FormatInt(time.Now().Add(2*time.Second).UnixNano(), 10))
			err := Run(context.Background(), cfg)
			var ee *ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("Run = %v, want *ExitError\nstdout:\n%s\nstderr:\n%s", err, out, errb)
			}
			stopped := 2
			if tc.mode == "together" {
				stopped = 1
			}
			if ee.Rank != tc.rank || ee.Status != tc.status || ee.Signal != tc.signal || ee.Stopped != stopped {
				t.Errorf("Run = %v (%+v), want rank %d status %d signal %d, %d stopped", err, *ee, tc.rank, tc.status, tc.signal, stopped)
			}
			if tc.signal == syscall.SIGKILL && ee.ExitCode() != 128+9 {
				t.Errorf("ExitCode = %d, want 137", ee.ExitCode())
			}
		})
	}
}

func TestSigkillAfterGrace(t *testing.T) {
	cfg, _, _ := helperConfig(t, 2, "stubborn")
	cfg.Grace = 300 * time.Millisecond
	start := time.Now()
	err := Run(context.Background(), cfg)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Rank != 0 || ee.Status != 1 {
		t.Fatalf("Run = %v, want rank 0 status 1", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestSuccess(t *testing.T) {
	cfg, _, _ := helperConfig(t, 4, "ok")
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
}

func TestContextCancel(t *testing.T) {
	cfg, _, _ := helperConfig(t, 2, "sleep")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := Run(ctx, cfg)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestForwardSignals(t *testing.T) {
	cfg, out, _ := helperConfig(t, 2, "trap")
	cfg.ForwardSignals = true
	// Signal this process once both ranks are ready.
	cfg.Stdout = writerFunc(func(p []byte) (int, error) {
		n, err := out.Write(p)
		if strings.Count(out.String(), "ready") == 2 && bytes.Contains(p, []byte("ready")) {
			syscall.Kill(os.Getpid(), syscall.SIGINT)
		}
		return n, err
	})
	err := Run(context.Background(), cfg)
	var se *SignalError
	if !errors.As(err, &se) || se.Signal != os.Interrupt || se.Stopped != 2 || se.ExitCode() != 130 {
		t.Fatalf("Run = %#v, want SignalError(interrupt, 2 stopped)", err)
	}
	for r := 0; r < 2; r++ {
		if want := fmt.Sprintf("[%d] got interrupt\n", r); !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestLabel(t *testing.T) {
	cfg, out, errb := helperConfig(t, 2, "env")
	cfg.Label = func(rank int, stderr bool) string {
		if stderr {
			return DefaultLabel(rank, stderr)
		}
		return ""
	}
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "[") || !strings.HasPrefix(out.String(), "GOCCL_RANK=") {
		t.Errorf("stdout should be unprefixed:\n%s", out)
	}
	if !strings.Contains(errb.String(), "[1] args=") {
		t.Errorf("stderr should be prefixed:\n%s", errb)
	}
}

func TestBadProgram(t *testing.T) {
	for _, prog := range []string{"./testdata/no-such-thing", "no-such-command-goccl", "./testdata/notmain", "./testdata", "./launch.go"} {
		err := Run(context.Background(), Config{NP: 2, Prog: prog, Stdout: &syncBuffer{}, Stderr: &syncBuffer{}})
		if err == nil {
			t.Errorf("Run(%q) succeeded", prog)
		} else {
			t.Logf("%s: %v", prog, err)
		}
	}
	if err := Run(context.Background(), Config{NP: 0, Prog: "true"}); err == nil {
		t.Error("NP 0 accepted")
	}
}

func TestPathProgram(t *testing.T) {
	var out syncBuffer
	err := Run(context.Background(), Config{NP: 2, Prog: "sh", Args: []string{"-c", "echo rank $GOCCL_RANK; exit $GOCCL_RANK"}, Stdout: &out})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Rank != 1 || ee.Status != 1 {
		t.Fatalf("Run = %v, want rank 1 status 1", err)
	}
	if !strings.Contains(out.String(), "[1] rank 1\n") {
		t.Errorf("output %q", out.String())
	}
}

func TestBuildPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go package")
	}
	for _, prog := range []string{"./testdata/hello", "github.com/goccl/goccl/internal/launch/testdata/hello"} {
		var out, errb syncBuffer
		err := Run(context.Background(), Config{NP: 2, Prog: prog, Stdout: &out, Stderr: &errb})
		if err != nil {
			t.Fatalf("Run(%s): %v\n%s", prog, err, errb.String())
		}
		for r := 0; r < 2; r++ {
			if want := fmt.Sprintf("[%d] hello from rank %d of 2\n", r, r); !strings.Contains(out.String(), want) {
				t.Errorf("%s: output lacks %q:\n%s", prog, want, out.String())
			}
		}
		// One build, launched twice, removed afterwards.
		exes := regexp.MustCompile(`\] exe (.*)\n`).FindAllStringSubmatch(out.String(), -1)
		if len(exes) != 2 || exes[0][1] != exes[1][1] || !strings.HasSuffix(exes[0][1], "/hello") {
			t.Fatalf("%s: executables %q", prog, exes)
		}
		if _, err := os.Stat(exes[0][1]); !os.IsNotExist(err) {
			t.Errorf("%s: built binary %s still exists (err %v)", prog, exes[0][1], err)
		}
	}
}

// processGone reports whether pid has exited (a zombie counts as gone).
func processGone(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(stat))
	return len(f) > 2 && f[2] == "Z"
}

func TestLeftoverProcesses(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process groups are used on Linux")
	}
	// Rank 1 fails; rank 0's background child would otherwise keep running
	// (and hold the output pipe open).
	var out syncBuffer
	start := time.Now()
	err := Run(context.Background(), Config{NP: 2, Prog: "sh", Stdout: &out, Stderr: &out, Args: []string{"-c",
		`sleep 60 & echo "child $!"; if [ "$GOCCL_RANK" = 1 ]; then sleep 0.2; exit 4; fi; wait`}})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Rank != 1 || ee.Status != 4 {
		t.Fatalf("Run = %v", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("took %v", d)
	}
	m := regexp.MustCompile(`child (\d+)`).FindAllStringSubmatch(out.String(), -1)
	if len(m) != 2 {
		t.Fatalf("output %q", out.String())
	}
	time.Sleep(100 * time.Millisecond)
	for _, c := range m {
		pid, _ := strconv.Atoi(c[1])
		if !processGone(pid) {
			t.Errorf("child %d still running", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestProgressForwarding: with Config.Progress, rank 0 (and only rank 0) is
// given that file as descriptor 3, named by GOCCL_PROGRESS_FD, and draws
// its bar there untouched, unprefixed; a stale GOCCL_PROGRESS_FD of the
// launcher's own is not inherited by the other ranks. On a terminal (auto:
// GOCCL_PROGRESS unset) each line Run forwards to a terminal starts by
// erasing the line, and Run erases it once more at the end; on a file
// (GOCCL_PROGRESS=1) lines are forwarded as they are.
func TestProgressForwarding(t *testing.T) {
	for _, onTTY := range []bool{true, false} {
		t.Run(map[bool]string{true: "terminal", false: "file"}[onTTY], func(t *testing.T) {
			t.Setenv(EnvProgressFD, "9") // as if this launcher were rank 0 of another
			cfg, out, errb := helperConfig(t, 2, "progress")
			var tty *ptytest.PTY
			if onTTY {
				tty = ptytest.Open(t)
				t.Setenv(config.Progress.Name, "")
				cfg.Progress, cfg.Stdout = tty.TTY, tty.TTY
			} else {
				f, err := os.Create(filepath.Join(t.TempDir(), "progress"))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				t.Setenv(config.Progress.Name, "1")
				cfg.Progress = f
			}
			if err := Run(context.Background(), cfg); err != nil {
				t.Fatalf("Run: %v\nstderr:\n%s", err, errb)
			}
			if errb.String() != "" {
				t.Errorf("stderr: %q", errb.String())
			}
			var bars, lines string
			if onTTY {
				all := strings.ReplaceAll(tty.Output(), "\r\n", "\n") // ONLCR
				if !strings.HasSuffix(all, "\n"+progress.ClearLine) {
					t.Errorf("the launcher did not erase the line at the end: %q", all)
				}
				// Lines come whole, each erasing the line first; the rest is the bar's.
				re := regexp.MustCompile(`\r\x1b\[K(\[\d\] [^\r\n]*\n)`)
				for _, m := range re.FindAllStringSubmatch(all, -1) {
					lines += m[1]
				}
				bars = re.ReplaceAllString(all, "")
			} else {
				lines = out.String()
				b, err := os.ReadFile(cfg.Progress.Name())
				if err != nil {
					t.Fatal(err)
				}
				bars = string(b)
			}
			want := "[0] rank 0 done, fd \"3\"\n[1] rank 1 done, fd \"\"\n"
			if lines != want && lines != "[1] rank 1 done, fd \"\"\n[0] rank 0 done, fd \"3\"\n" {
				t.Errorf("forwarded lines %q, want %q (either order)", lines, want)
			}
			if !strings.HasPrefix(bars, "\rrank-bar ") || !strings.Contains(bars, " 3/3 ") || strings.Contains(bars, "\n") || strings.Contains(bars, "[0]") {
				t.Errorf("rank 0's bar did not reach the progress file whole: %q", bars)
			}
		})
	}
}

// appsLines parses the "[rank] KEY=VALUE" lines of out into values by key
// and rank ("partial" lines without "=" are skipped).
func appsLines(t *testing.T, out string) map[string]map[int]string {
	t.Helper()
	vals := map[string]map[int]string{}
	re := regexp.MustCompile(`^\[(\d+)\] ([^=]*)=(.*)$`)
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		r, _ := strconv.Atoi(m[1])
		if vals[m[2]] == nil {
			vals[m[2]] = map[int]string{}
		}
		vals[m[2]][r] = m[3]
	}
	return vals
}

// TestApps: a job of several programs (the test binary, sh, the test
// binary again) numbers the ranks across them in order, gives every rank
// the total as world size (and local world size), Config.Env to every
// rank and each App's Env and Args to its own ranks only.
func TestApps(t *testing.T) {
	script := `for k in GOCCL_RANK GOCCL_WORLD_SIZE GOCCL_LOCAL_RANK GOCCL_LOCAL_WORLD_SIZE RANK WORLD_SIZE OMPI_COMM_WORLD_SIZE LAUNCH_TEST_PARENT LAUNCH_TEST_EXTRA; do eval "echo $k=\$$k"; done
echo "args=$*"`
	out, errb := &syncBuffer{}, &syncBuffer{}
	exe := selfExe(t)
	cfg := Config{
		Apps: []App{
			{NP: 1, Prog: exe, Args: []string{"-a"}, Env: []string{helperEnv + "=env", "LAUNCH_TEST_EXTRA=first"}},
			{NP: 2, Prog: "sh", Args: []string{"-c", script, "sh", "x", "y z"}, Env: []string{"LAUNCH_TEST_PARENT=second"}},
			{NP: 2, Prog: exe, Args: []string{"-c"}, Env: []string{helperEnv + "=env"}},
		},
		Env:    []string{"LAUNCH_TEST_EXTRA=all", "LAUNCH_TEST_PARENT=all"},
		Stdout: out,
		Stderr: errb,
	}
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v\nstderr:\n%s", err, errb)
	}
	vals := appsLines(t, out.String())
	for r := 0; r < 5; r++ {
		rs := strconv.Itoa(r)
		want := map[string]string{
			EnvRank: rs, EnvWorldSize: "5", EnvLocalRank: rs, EnvLocalWorldSize: "5",
			"RANK": rs, "WORLD_SIZE": "5", "OMPI_COMM_WORLD_SIZE": "5",
		}
		switch r {
		case 0:
			want["LAUNCH_TEST_EXTRA"], want["LAUNCH_TEST_PARENT"] = "first", "all"
		case 1, 2:
			want["LAUNCH_TEST_EXTRA"], want["LAUNCH_TEST_PARENT"], want["args"] = "all", "second", "x y z"
		default:
			want["LAUNCH_TEST_EXTRA"], want["LAUNCH_TEST_PARENT"] = "all", "all"
		}
		for k, v := range want {
			if got, ok := vals[k][r]; got != v || !ok {
				t.Errorf("rank %d: %s=%q, want %q\nstdout:\n%s", r, k, got, v, out)
			}
		}
	}
	for r, args := range map[int]string{0: `["-a"]`, 3: `["-c"]`, 4: `["-c"]`} {
		if want := fmt.Sprintf("[%d] args=%s\n", r, args); !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb)
		}
	}
	if strings.Contains(errb.String(), "[1] ") || strings.Contains(errb.String(), "[2] ") {
		t.Errorf("sh ranks wrote to stderr:\n%s", errb)
	}
}

// TestAppsFailure: a rank of the second program fails; the first
// program's ranks are stopped, and the error names the rank and its
// program.
func TestAppsFailure(t *testing.T) {
	dir := t.TempDir()
	out := &syncBuffer{}
	cfg := Config{
		Apps: []App{
			// Each writes its pid, then sleeps until stopped.
			{NP: 2, Prog: selfExe(t), Env: []string{helperEnv + "=pid-sleep"}},
			// Fails once both are up.
			{NP: 1, Prog: "sh", Args: []string{"-c", `while [ ! -e "$LAUNCH_TEST_DIR/pid1" ] || [ ! -e "$LAUNCH_TEST_DIR/pid0" ]; do sleep 0.01; done; exit 5`}},
		},
		Env:    []string{"LAUNCH_TEST_DIR=" + dir},
		Stdout: out,
		Stderr: out,
	}
	start := time.Now()
	err := Run(context.Background(), cfg)
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("Run = %v, want *ExitError\noutput:\n%s", err, out)
	}
	if ee.Rank != 2 || ee.Status != 5 || ee.Signal != 0 || ee.Stopped != 2 || ee.App != 1 || ee.Prog != "sh" || len(ee.Args) != 2 {
		t.Errorf("ExitError = %+v, want rank 2 status 5 of app 1 (sh), 2 stopped", *ee)
	}
	want := fmt.Sprintf(`rank 2 (pid %d, sh -c "while [ ! -e \"$LAUNCH_TEST_DIR/pid1\" ] || [ ! -e \"$LAUNCH_TEST_DIR/pid...`+
		`) exited with status 5; stopped the other 2 ranks`, ee.Pid)
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v to stop the first program's ranks", d)
	}
	for r := 0; r < 2; r++ {
		b, err := os.ReadFile(filepath.Join(dir, "pid"+strconv.Itoa(r)))
		if err != nil {
			t.Fatal(err)
		}
		if pid, _ := strconv.Atoi(string(b)); !processGone(pid) {
			t.Errorf("rank %d (pid %d) still running", r, pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestAppsBuildOnce: a Go package named by several apps, under several
// spellings, is built once and removed afterwards.
func TestAppsBuildOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go package")
	}
	out, errb := &syncBuffer{}, &syncBuffer{}
	err := Run(context.Background(), Config{
		Apps: []App{
			{NP: 1, Prog: "./testdata/hello"},
			{NP: 1, Prog: "sh", Args: []string{"-c", "echo sh rank $GOCCL_RANK"}},
			{NP: 2, Prog: "github.com/goccl/goccl/internal/launch/testdata/hello"},
			{NP: 1, Prog: "testdata/hello/"},
		},
		Stdout: out, Stderr: errb,
	})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, errb.String())
	}
	for r, want := range []string{"hello from rank 0 of 5", "sh rank 1", "hello from rank 2 of 5", "hello from rank 3 of 5", "hello from rank 4 of 5"} {
		if want := fmt.Sprintf("[%d] %s\n", r, want); !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	exes := regexp.MustCompile(`\] exe (.*)\n`).FindAllStringSubmatch(out.String(), -1)
	if len(exes) != 4 {
		t.Fatalf("executables %q", exes)
	}
	for _, e := range exes {
		if e[1] != exes[0][1] || !strings.HasSuffix(e[1], "/hello") {
			t.Fatalf("executables %q: want one build", exes)
		}
	}
	if _, err := os.Stat(exes[0][1]); !os.IsNotExist(err) {
		t.Errorf("built binary %s still exists (err %v)", exes[0][1], err)
	}
}

// TestAppsConfigErrors: Apps and NP/Prog/Args are exclusive, and each
// App needs ranks and a program; the errors name the app.
func TestAppsConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{NP: 1, Apps: []App{{NP: 1, Prog: "true"}}}, "launch: give the ranks as Apps or as NP, Prog and Args, not both"},
		{Config{Prog: "true", Apps: []App{{NP: 1, Prog: "true"}}}, "not both"},
		{Config{Args: []string{}, Apps: []App{{NP: 1, Prog: "true"}}}, "not both"},
		{Config{Apps: []App{{NP: 1, Prog: "true"}, {Prog: "sh", Args: []string{"-c", "exit 0"}}}}, `launch: app 2 of 2 (sh -c "exit 0"): need at least 1 rank, got 0`},
		{Config{Apps: []App{{NP: -1, Prog: "true"}}}, "launch: app 1 of 1 (true): need at least 1 rank, got -1"},
		{Config{Apps: []App{{NP: 1, Prog: "true"}, {NP: 2}, {NP: 1, Prog: "true"}}}, "launch: app 2 of 3: no program given"},
		{Config{Apps: []App{{NP: 1, Prog: "true"}, {NP: 1, Prog: "./testdata/no-such-thing"}}}, "no-such-thing"},
	} {
		err := Run(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		prog string
		args []string
		want string
	}{
		{"/usr/bin/python3", []string{"train.py", "--lr", "0.1"}, "/usr/bin/python3 train.py --lr 0.1"},
		{"sh", []string{"-c", "echo $X; exit 1", ""}, `sh -c "echo $X; exit 1" ""`},
		{"./prog", []string{strings.Repeat("a", 50), strings.Repeat("b", 22)}, "./prog " + strings.Repeat("a", 50) + " " + strings.Repeat("b", 22)},
		{"./prog", []string{strings.Repeat("a", 50), strings.Repeat("b", 23), "c"}, "./prog " + strings.Repeat("a", 50) + " " + strings.Repeat("b", 22) + "..."},
		{strings.Repeat("p", 100), []string{"x"}, strings.Repeat("p", 80) + "..."},
		{"./é", []string{strings.Repeat("a", 75)}, "./é " + strings.Repeat("a", 75)},
		{"./é", []string{strings.Repeat("a", 76)}, "./é " + strings.Repeat("a", 75) + "..."},
		{"./" + strings.Repeat("a", 77) + "é", nil, "./" + strings.Repeat("a", 77) + "..."},
	} {
		if got := commandLine(tc.prog, tc.args); got != tc.want {
			t.Errorf("commandLine(%q, %q) = %q, want %q", tc.prog, tc.args, got, tc.want)
		}
	}
}
