package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/progress"
	"github.com/goccl/goccl/internal/progress/ptytest"
)

// progressHelper, set to 1, makes the test binary drawProgress (see
// TestMain).
const progressHelper = "CLI_TEST_PROGRESS"

// drawProgress is a rank that draws a bar on rank 0, as goccl perf and the
// training examples do, then prints a line.
func drawProgress() int {
	rank := os.Getenv(config.Rank.Name)
	if rank == "0" {
		b := progress.New("run-bar", 3)
		for range 3 {
			b.Increment()
		}
		b.Done()
	}
	fmt.Printf("rank %s done\n", rank)
	return 0
}

// runGocclOn runs goccl as a process with env added to this one's, its
// stdout and stderr going to the given writers (a terminal among them).
func runGocclOn(t *testing.T, env []string, stdout, stderr io.Writer, args ...string) int {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(append(os.Environ(), "GOCCL_CLI_TEST_MAIN=1"), env...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

// frames matches the frames of a bar (and the erasures, empty frames):
// "\r" + text + "\x1b[K".
var frames = regexp.MustCompile(`\r[^\r\n]*\x1b\[K`)

// TestRunProgress: goccl run passes rank 0 its stderr for bars, when that
// is a terminal (GOCCL_PROGRESS unset: auto) or GOCCL_PROGRESS=1 forces it
// (here a pipe); rank 0 draws there, unprefixed, and finishes its bar; the
// other rank draws nothing; GOCCL_PROGRESS=0 on a terminal: no bar.
func TestRunProgress(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "-np", "2", "-env", progressHelper + "=1", exe}
	for _, tc := range []struct {
		name, mode string
		tty        bool
		bar        bool
	}{
		{"auto-terminal", "", true, true},
		{"forced-pipe", "1", false, true},
		{"off-terminal", "0", true, false},
		{"auto-pipe", "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{config.Progress.Name + "=" + tc.mode}
			var stdout, pipe bytes.Buffer
			var code int
			var stderr string
			if tc.tty {
				pty := ptytest.Open(t)
				code = runGocclOn(t, env, &stdout, pty.TTY, args...)
				stderr = strings.ReplaceAll(pty.Output(), "\r\n", "\n")
			} else {
				code = runGocclOn(t, env, &stdout, &pipe, args...)
				stderr = pipe.String()
			}
			if code != 0 {
				t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%q", code, stdout.String(), stderr)
			}
			if out := stdout.String(); out != "[0] rank 0 done\n[1] rank 1 done\n" && out != "[1] rank 1 done\n[0] rank 0 done\n" {
				t.Errorf("stdout %q", out)
			}
			if !tc.bar {
				if stderr != "" {
					t.Errorf("no bar wanted; stderr got %q", stderr)
				}
				return
			}
			if !strings.HasPrefix(stderr, "\rrun-bar ") || strings.Contains(stderr, "\n") || strings.Contains(stderr, "[0]") {
				t.Errorf("stderr is not rank 0's bar alone, unprefixed: %q", stderr)
			}
			all := frames.FindAllString(stderr, -1)
			if strings.Join(all, "") != stderr {
				t.Fatalf("stderr holds more than frames: %q", stderr)
			}
			// The last frame drawn is the final state, then only erasures
			// (rank 0's, and goccl run's own on a terminal).
			last := len(all) - 1
			for last >= 0 && all[last] == progress.ClearLine {
				last--
			}
			if last < 0 || last == len(all)-1 || !strings.Contains(all[last], " 3/3 ") {
				t.Errorf("the bar's final state is not drawn, then erased: %q", stderr)
			}
		})
	}
}

// TestPerfProgress: goccl perf draws a bar over the sizes on rank 0 when its
// stderr is a terminal, both as one process and with -np (its ranks under
// the launcher); the report on stdout is untouched when stdout is not a
// terminal, and when it is the same terminal no report line ever follows a
// frame on its line (each erases the bar first).
func TestPerfProgress(t *testing.T) {
	args := []string{"perf", "all_reduce", "-b", "8", "-e", "64", "-n", "2", "-w", "1"} // 4 sizes
	for _, tc := range []struct {
		name      string
		np        string
		stdoutTTY bool
	}{
		{"np2", "2", false},
		{"one-process", "", false},
		{"one-process-same-terminal", "", true},
		{"np2-same-terminal", "2", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := args
			if tc.np != "" {
				a = append(a[:len(a):len(a)], "-np", tc.np)
			}
			env := []string{config.Progress.Name + "=", config.Rank.Name + "="}
			pty := ptytest.Open(t)
			var stdout bytes.Buffer
			var code int
			if tc.stdoutTTY {
				code = runGocclOn(t, env, pty.TTY, pty.TTY, a...)
			} else {
				code = runGocclOn(t, env, &stdout, pty.TTY, a...)
			}
			term := strings.ReplaceAll(pty.Output(), "\r\n", "\n")
			if code != 0 {
				t.Fatalf("exit code %d\nstdout:\n%s\nterminal:\n%q", code, stdout.String(), term)
			}
			report := stdout.String()
			if tc.stdoutTTY {
				// Each line: frames, then (if any) an erasure, then the report's line.
				lines := strings.Split(term, "\n")
				var kept []string
				for i, l := range lines {
					if j := strings.LastIndex(l, "\r"); j >= 0 {
						tail := l[j+1:]
						if !strings.HasPrefix(tail, "\x1b[K") && !(i == len(lines)-1 && strings.HasSuffix(tail, "\x1b[K")) {
							t.Errorf("line %d follows a frame: %q", i, l)
						}
					}
					kept = append(kept, frames.ReplaceAllString(l, ""))
				}
				report = strings.Join(kept, "\n")
			} else if strings.Contains(report, "\x1b") || strings.Contains(report, "\r") {
				t.Errorf("escape sequences in the report on stdout: %q", report)
			}
			rows := regexp.MustCompile(`(?m)^ +(8|16|32|64) +\d+ +float +sum `).FindAllString(report, -1)
			if len(rows) != 4 || !strings.Contains(report, "# Avg bus bandwidth") {
				t.Errorf("report lacks its 4 rows or its footer:\n%s", report)
			}
			all := frames.FindAllString(term, -1)
			var bars []string
			for _, f := range all {
				if f != progress.ClearLine {
					bars = append(bars, f)
				}
			}
			if len(bars) == 0 || !strings.HasPrefix(bars[0], "\rall_reduce ") || !strings.Contains(bars[len(bars)-1], " 4/4 ") {
				t.Fatalf("no bar reaching 4/4 on the terminal: %q", term)
			}
			if !tc.stdoutTTY && !strings.HasSuffix(term, progress.ClearLine) {
				t.Errorf("the bar is not erased at the end: %q", term)
			}
			if strings.Contains(term, "[0]") {
				t.Errorf("a prefixed line on the terminal: %q", term)
			}
		})
	}
}
