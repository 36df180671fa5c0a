package progress

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vbauerster/mpb/v8/decor"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/progress/ptytest"
)

// childHelper, set in the environment, makes the test binary draw a bar
// (see TestMain): the child's side of TestPassedFD.
const childHelper = "PROGRESS_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childHelper) == "1" {
		b := New("child", 2)
		if b == nil {
			fmt.Println("no bar")
			os.Exit(1)
		}
		b.Increment()
		b.Increment()
		b.Done()
		fmt.Println("child done")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// setStderr makes f this process's stderr for the test.
func setStderr(t *testing.T, f *os.File) {
	old := os.Stderr
	os.Stderr = f
	t.Cleanup(func() { os.Stderr = old })
}

// clearEnv unsets GOCCL_PROGRESS and GOCCL_PROGRESS_FD for the test.
func clearEnv(t *testing.T) {
	t.Setenv(config.Progress.Name, "")
	t.Setenv(config.ProgressFD.Name, "")
}

// lastFrame is the last frame drawn in out: the text between the last
// "\r" that starts a frame and the "\x1b[K" ending it.
func lastFrame(t *testing.T, out string) string {
	t.Helper()
	out = strings.TrimSuffix(out, ClearLine)
	i := strings.LastIndex(out, "\r")
	if i < 0 || !strings.HasSuffix(out, "\x1b[K") {
		t.Fatalf("no frame in %q", out)
	}
	return strings.TrimSuffix(out[i+1:], "\x1b[K")
}

// TestOffWritesNothing: when stderr is not a terminal (auto) or
// GOCCL_PROGRESS is 0, New returns a bar that writes nothing and whose
// Increment allocates nothing.
func TestOffWritesNothing(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	setStderr(t, f)
	clearEnv(t)
	for _, mode := range []string{"", "auto", "0"} {
		t.Setenv(config.Progress.Name, mode)
		b := New("quiet", 10)
		if b != nil {
			t.Fatalf("GOCCL_PROGRESS=%q, stderr a file: New returned a bar", mode)
		}
		if allocs := testing.AllocsPerRun(1000, b.Increment); allocs != 0 {
			t.Errorf("GOCCL_PROGRESS=%q: Increment allocates %v times", mode, allocs)
		}
		var buf bytes.Buffer
		if w := b.Guard(&buf); w != io.Writer(&buf) {
			t.Errorf("Guard of an off bar wraps its writer")
		}
		b.Done()
		b.Abort()
	}
	if st, err := f.Stat(); err != nil || st.Size() != 0 {
		t.Errorf("stderr got %d bytes (%v), want none", st.Size(), err)
	}

	// GOCCL_PROGRESS=0 on a terminal: still nothing.
	p := ptytest.Open(t)
	setStderr(t, p.TTY)
	t.Setenv(config.Progress.Name, "0")
	b := New("quiet", 3)
	if b != nil {
		t.Fatal("GOCCL_PROGRESS=0: New returned a bar on a terminal")
	}
	if allocs := testing.AllocsPerRun(1000, b.Increment); allocs != 0 {
		t.Errorf("GOCCL_PROGRESS=0: Increment allocates %v times", allocs)
	}
	b.Done()
	if out := p.Output(); out != "" {
		t.Errorf("GOCCL_PROGRESS=0: the terminal got %q", out)
	}
}

// TestTerminal: on a terminal (GOCCL_PROGRESS unset: auto) the bar's name
// and count reach it, redrawn in place (no newline), its final state is
// drawn and then erased.
func TestTerminal(t *testing.T) {
	for _, tc := range []struct {
		name       string
		total, inc int
		abort      bool
		final      string // the count in the last frame
	}{
		{"complete", 5, 5, false, "5/5"},
		{"done-short", 10, 3, false, "3/3"}, // Done: the count reached is the total
		{"aborted", 10, 3, true, "3/10"},
		{"no-total", 0, 4, false, "4/4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ptytest.Open(t)
			setStderr(t, p.TTY)
			clearEnv(t)
			b := New("sweep-"+tc.name, tc.total)
			if b == nil {
				t.Fatal("New returned no bar on a terminal")
			}
			for range tc.inc {
				b.Increment()
			}
			if tc.abort {
				b.Abort()
			} else {
				b.Done()
			}
			b.Done() // a no-op after the first
			out := p.Output()
			if !strings.HasPrefix(out, "\rsweep-"+tc.name+" ") {
				t.Errorf("output does not start with the bar's name: %q", out)
			}
			if !strings.HasSuffix(out, "\x1b[K"+ClearLine) {
				t.Errorf("the last frame is not erased: %q", out)
			}
			if strings.ContainsAny(out, "\n") {
				t.Errorf("the bar wrote a newline: %q", out)
			}
			last := lastFrame(t, out)
			if !strings.Contains(last, " "+tc.final) || !strings.Contains(last, "elapsed ") {
				t.Errorf("last frame %q lacks %q and the elapsed time", last, tc.final)
			}
			if strings.Contains(last, "ETA") {
				t.Errorf("last frame %q has an ETA", last)
			}
			if n := len([]rune(last)); n > maxWidth {
				t.Errorf("frame of %d columns: %q", n, last)
			}
		})
	}
}

// TestGuard: a line written through Guard to the bar's terminal erases the
// bar first whenever one is drawn, so it never follows a frame on its line.
func TestGuard(t *testing.T) {
	p := ptytest.Open(t)
	setStderr(t, p.TTY)
	clearEnv(t)
	b := New("guarded", 3)
	if b == nil {
		t.Fatal("New returned no bar on a terminal")
	}
	w := b.Guard(p.TTY)
	for i := range 3 {
		fmt.Fprintf(w, "row %d\n", i)
		b.Increment()
	}
	b.Done()
	fmt.Fprintf(w, "footer\n") // after Done: nothing to erase, written as is
	// The terminal turns "\n" into "\r\n" (ONLCR).
	out := strings.ReplaceAll(p.Output(), "\r\n", "\n")
	for _, l := range []string{"row 0\n", "row 1\n", "row 2\n", "footer\n"} {
		i := strings.Index(out, l)
		if i < 0 {
			t.Fatalf("%q missing from %q", l, out)
		}
		if before := out[:i]; before != "" && !strings.HasSuffix(before, ClearLine) && !strings.HasSuffix(before, "\n") {
			t.Errorf("%q follows a frame on its line: %q", l, out)
		}
	}
	if !strings.HasSuffix(out, ClearLine+"footer\n") && !strings.HasSuffix(out, "\nfooter\n") {
		t.Errorf("the bar was not erased before the footer: %q", out)
	}
	if strings.Count(out, "3/3") == 0 {
		t.Errorf("final state not drawn: %q", out)
	}

	// Guard of a writer that is not a terminal is the writer itself.
	f, err := os.CreateTemp(t.TempDir(), "bar")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b2 := start(f, "x", 1, nil, time.Now)
	var buf bytes.Buffer
	if w := b2.Guard(&buf); w != io.Writer(&buf) {
		t.Error("Guard wrapped a buffer")
	}
	if w := b2.Guard(f); w != io.Writer(f) {
		t.Error("Guard wrapped a file")
	}
	b2.Abort()
}

// TestMode: GOCCL_PROGRESS=0|1|auto (and a bad value: auto, warned about)
// against a terminal and a file, for this process (Output) and for the
// ranks of a launcher (ForRanks).
func TestMode(t *testing.T) {
	p := ptytest.Open(t)
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	clearEnv(t)
	warned.Delete(config.Progress.Name) // warned once per process: again in this test
	for _, tc := range []struct {
		env  string
		tty  bool // stderr is the terminal (else the file)
		want bool // bars drawn
		mode Mode
	}{
		{"", true, true, Auto}, {"auto", true, true, Auto}, {"AUTO", true, true, Auto}, {"1", true, true, On}, {"0", true, false, Off},
		{"", false, false, Auto}, {"auto", false, false, Auto}, {"1", false, true, On}, {"0", false, false, Off},
		{"yes", true, true, Auto}, {"yes", false, false, Auto},
	} {
		stderr := f
		if tc.tty {
			stderr = p.TTY
		}
		os.Stderr, stderr = stderr, os.Stderr
		t.Setenv(config.Progress.Name, tc.env)
		mode, out, ranks := CurrentMode(), Output(), ForRanks(os.Stderr)
		bufRanks := ForRanks(&bytes.Buffer{})
		os.Stderr = stderr
		if mode != tc.mode {
			t.Errorf("GOCCL_PROGRESS=%q: mode %v, want %v", tc.env, mode, tc.mode)
		}
		if (out != nil) != tc.want || (ranks != nil) != tc.want {
			t.Errorf("GOCCL_PROGRESS=%q, terminal %v: Output %v, ForRanks %v; want bars %v", tc.env, tc.tty, out, ranks, tc.want)
		}
		if bufRanks != nil {
			t.Errorf("GOCCL_PROGRESS=%q: ForRanks passes a buffer's file", tc.env)
		}
	}
	if err := config.Progress.Check("yes"); err == nil || config.CheckEnv() != nil {
		t.Error("GOCCL_PROGRESS=yes: refused by Check, yet ignored (WarnOnly) by CheckEnv")
	}
	if !strings.Contains(p.Output(), config.Progress.Name+`="yes"`) {
		t.Error("GOCCL_PROGRESS=yes not warned about")
	}
}

// TestPassedFD: a process whose GOCCL_PROGRESS_FD names a terminal it was
// given as an extra file (as goccl run gives rank 0) draws its bar there,
// not on its stderr; a value that names no usable file leaves stderr.
func TestPassedFD(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := ptytest.Open(t)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childHelper+"=1", config.Progress.Name+"=", config.ProgressFD.Name+"=3")
	cmd.ExtraFiles = []*os.File{p.TTY}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || stdout.String() != "child done\n" {
		t.Fatalf("child: %v; stdout %q, stderr %q", err, stdout.String(), stderr.String())
	}
	if stderr.Len() != 0 {
		t.Errorf("the child wrote to its stderr: %q", stderr.String())
	}
	out := p.Output()
	if !strings.HasPrefix(out, "\rchild ") || !strings.Contains(lastFrame(t, out), " 2/2 ") {
		t.Errorf("the passed terminal got %q", out)
	}

	clearEnv(t)
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	setStderr(t, f)                                    // for the warnings
	for _, v := range []string{"x", "-1", "1000000"} { // not a number; out of range; not open
		t.Setenv(config.ProgressFD.Name, v)
		if f := passed(); f != nil {
			t.Errorf("GOCCL_PROGRESS_FD=%s: passed file %v", v, f)
		}
	}
	// A socket is no place for bars.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sock, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	t.Setenv(config.ProgressFD.Name, fmt.Sprint(sock.Fd()))
	t.Setenv(config.Progress.Name, "1")
	if f := passed(); f != nil {
		t.Errorf("GOCCL_PROGRESS_FD names a socket: passed file %v", f)
	}
	if f := Output(); f != os.Stderr { // GOCCL_PROGRESS=1: stderr, a file
		t.Errorf("GOCCL_PROGRESS_FD names a socket: Output %v, want stderr", f)
	}
}

// TestStatus: the text after the bar.
func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		cur, total int64
		done       bool
		el         time.Duration
		want       string
	}{
		{0, 10, false, 0, "0/10  elapsed 0s"},
		{5, 10, false, 4 * time.Second, "5/10  elapsed 4s  ETA 4s"},
		{1, 4, false, 65 * time.Second, "1/4  elapsed 1m5s  ETA 3m15s"},
		{10, 10, true, 9 * time.Second, "10/10  elapsed 9s"},
		{7, 0, false, 2400 * time.Millisecond, "7  elapsed 2s"},
	} {
		got := status(decor.Statistics{Current: tc.cur, Total: tc.total, Completed: tc.done}, tc.el, nil)
		if got != tc.want {
			t.Errorf("status(%d/%d, %v) = %q, want %q", tc.cur, tc.total, tc.el, got, tc.want)
		}
	}
}

// TestWeightedETA: with weights, the ETA is the elapsed time scaled by the
// weight left over the weight done. A sweep over sizes doubling from 8 B to
// 64 MiB whose rows take time in proportion to their bytes gets, at 22 of
// its 24 rows, the time its last two rows take (three times the elapsed
// time), where counting rows says a tenth of the elapsed time.
func TestWeightedETA(t *testing.T) {
	var sizes []int64
	for s := int64(8); s <= 64<<20; s *= 2 {
		sizes = append(sizes, s)
	}
	total := int64(len(sizes))
	cum := cumulative(sizes)
	if len(cum) != len(sizes)+1 || cum[total] != 2*(64<<20)-8 {
		t.Fatalf("cumulative(%v) = %v", sizes, cum)
	}
	const unit = time.Microsecond // per byte
	for done := int64(1); done < total; done++ {
		var doneB, leftB int64
		for i, s := range sizes {
			if int64(i) < done {
				doneB += s
			} else {
				leftB += s
			}
		}
		elapsed := time.Duration(doneB) * unit
		got, want := eta(done, total, elapsed, cum), time.Duration(leftB)*unit
		if d := got - want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%d/%d rows: ETA %v, want %v", done, total, got, want)
		}
	}
	elapsed := time.Duration(cum[22]) * unit
	left := time.Duration(cum[total]-cum[22]) * unit
	if left < 3*elapsed {
		t.Fatalf("the last two rows take %v, less than three times the first 22's %v", left, elapsed)
	}
	if got, want := status(decor.Statistics{Current: 22, Total: total}, elapsed, cum), "ETA "+seconds(left); !strings.HasSuffix(got, want) {
		t.Errorf("weighted status %q, want %q", got, want)
	}
	if got, want := status(decor.Statistics{Current: 22, Total: total}, elapsed, nil), "ETA "+seconds(elapsed*2/22); !strings.HasSuffix(got, want) {
		t.Errorf("unweighted status %q, want %q", got, want)
	}
	for _, bad := range [][]int64{nil, {}, {1, 0, 2}, {4, -1}} {
		if c := cumulative(bad); c != nil {
			t.Errorf("cumulative(%v) = %v, want nil (rows weigh the same)", bad, c)
		}
	}
	if got := eta(1, 4, 3*time.Second, nil); got != 9*time.Second {
		t.Errorf("unweighted eta(1/4, 3s) = %v, want 9s", got)
	}
}

// TestNewWeighted: a weighted bar counts its units (len(weights)) as New
// does.
func TestNewWeighted(t *testing.T) {
	p := ptytest.Open(t)
	setStderr(t, p.TTY)
	clearEnv(t)
	b := NewWeighted("weighted", []int64{1, 10, 100})
	if b == nil {
		t.Fatal("NewWeighted returned no bar on a terminal")
	}
	for range 3 {
		b.Increment()
	}
	b.Done()
	if last := lastFrame(t, p.Output()); !strings.Contains(last, " 3/3 ") {
		t.Errorf("last frame %q lacks 3/3", last)
	}
}
