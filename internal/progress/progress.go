// Package progress draws the progress bars of goccl's long runs (goccl perf
// sweeps, the training examples) with github.com/vbauerster/mpb/v8: one
// line with a name, a bar, the count out of the total, the elapsed time and
// an estimate of the time left, redrawn in place.
//
// GOCCL_PROGRESS decides whether bars are drawn: auto (the default) only
// when the output is a terminal, 1 always, 0 never. The output is stderr,
// or the file descriptor GOCCL_PROGRESS_FD names: goccl run passes rank 0
// its own terminal that way, since a rank's stderr is a pipe to the
// launcher, which prefixes every line. When bars are off, New returns nil,
// a *Bar whose methods write nothing and allocate nothing.
//
// A bar is a single line, drawn as "\r" + frame + "\x1b[K" (erase to the end
// of the line) and never followed by a newline: whoever writes a line to the
// same terminal starts it with ClearLine, which erases the bar, and the bar
// is redrawn on the line below at its next refresh. In the process that
// draws the bar, Guard does that for the writers of its result lines; goccl
// run does it for every line it forwards (package internal/launch). Done
// and Abort draw the bar's last state and then erase it, so a finished run
// leaves only its result lines.
package progress

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/goccl/goccl/internal/config"
)

// ClearLine returns the cursor to the start of the line and erases the line:
// a line written after it to a terminal replaces a bar being drawn there.
const ClearLine = "\r\x1b[K"

// Mode is a GOCCL_PROGRESS setting.
type Mode uint8

// The settings.
const (
	Auto Mode = iota // draw on a terminal only (the default)
	Off              // never draw
	On               // always draw, terminal or not
)

// Width bounds: frames stay one column short of the terminal's width (a
// frame that fills the last column would wrap on some terminals and break
// the redraw in place) and at most maxWidth wide; outputs whose width is
// not known (files, pipes) get defaultWidth.
const (
	maxWidth     = 100
	defaultWidth = 80
)

var warned sync.Map // variable name -> struct{}: its bad value was warned about

// warn prints err about a variable once per process.
func warn(v *config.Var, err error) {
	if _, dup := warned.LoadOrStore(v.Name, struct{}{}); !dup {
		fmt.Fprintf(os.Stderr, "goccl: %v (ignored)\n", err)
	}
}

// CurrentMode returns GOCCL_PROGRESS's setting; a value it does not know is
// warned about (once) and counts as Auto.
func CurrentMode() Mode {
	w, err := config.Progress.Word()
	if err != nil {
		warn(config.Progress, err)
		return Auto
	}
	switch w {
	case "0":
		return Off
	case "1":
		return On
	}
	return Auto
}

// passedFile is a descriptor named by GOCCL_PROGRESS_FD.
type passedFile struct {
	f  *os.File
	ok bool // open and not a socket
}

var (
	passedMu sync.Mutex
	// passedFiles keeps every *os.File made for a passed descriptor for the
	// life of the process: os.NewFile's finalizer would close the
	// descriptor of one that was dropped, and it may not be ours to close.
	passedFiles = map[int]passedFile{}
)

// passed returns the file GOCCL_PROGRESS_FD names, or nil when it is unset,
// invalid (warned about once), closed or a socket.
func passed() *os.File {
	fd, ok, err := config.ProgressFD.Int()
	if err != nil {
		warn(config.ProgressFD, err)
		return nil
	}
	if !ok {
		return nil
	}
	passedMu.Lock()
	defer passedMu.Unlock()
	p, seen := passedFiles[fd]
	if !seen {
		p.f = os.NewFile(uintptr(fd), "progress")
		if p.f != nil {
			st, err := p.f.Stat()
			p.ok = err == nil && st.Mode()&os.ModeSocket == 0
		}
		passedFiles[fd] = p
	}
	if !p.ok {
		return nil
	}
	return p.f
}

// IsTerminal reports whether w is a file open on a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return false
	}
	isTerm := false
	// Control, not Fd: Fd would put a non-blocking file in blocking mode.
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { isTerm = term.IsTerminal(int(fd)) })
	}
	return isTerm
}

// Output returns the file this process's bars are drawn on, or nil when
// they are off: GOCCL_PROGRESS_FD's file, else stderr, if GOCCL_PROGRESS is
// 1, or auto (the default) and that file is a terminal.
func Output() *os.File {
	m := CurrentMode()
	if m == Off {
		return nil
	}
	f := passed()
	if f == nil {
		f = os.Stderr
	}
	if m == Auto && !IsTerminal(f) {
		return nil
	}
	return f
}

// ForRanks returns the file a launcher whose stderr is w passes to rank 0
// for its bars (launch.Config.Progress), or nil: w's file (or, when w is
// this process's stderr, the file it draws its own bars on) when
// GOCCL_PROGRESS is 1, or auto and that file is a terminal. The ranks
// inherit GOCCL_PROGRESS, so a rank started with a terminal draws on it
// (auto), and one started by a launcher told 0 draws nothing.
func ForRanks(w io.Writer) *os.File {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return nil
	}
	if f == os.Stderr {
		if p := passed(); p != nil {
			f = p
		}
	}
	switch CurrentMode() {
	case Off:
		return nil
	case Auto:
		if !IsTerminal(f) {
			return nil
		}
	}
	return f
}

// Bar is one progress bar. A nil *Bar is a bar that is off: its methods do
// nothing.
type Bar struct {
	p    *mpb.Progress
	b    *mpb.Bar
	c    *console
	once sync.Once
}

// New starts a bar called name that counts to total (total <= 0: a count
// without a known end) on Output, or returns nil when bars are off. The
// caller calls Increment as the work advances and Done (or Abort) at the
// end, before it exits. The ETA assumes that every unit takes as long.
func New(name string, total int) *Bar {
	f := Output()
	if f == nil {
		return nil
	}
	return start(f, name, total, nil, time.Now)
}

// NewWeighted is New for len(weights) units of unequal cost: weights[i] is
// the relative cost of unit i (in the order they are counted), for example
// the bytes it moves. The bar still counts units; the ETA is the elapsed
// time scaled by the weight left over the weight done, so that a sweep
// whose last rows are its largest is not reported nearly done after its
// many small ones. A weight that is not positive makes the units weigh the
// same (as New).
func NewWeighted(name string, weights []int64) *Bar {
	f := Output()
	if f == nil {
		return nil
	}
	return start(f, name, len(weights), cumulative(weights), time.Now)
}

// cumulative is the prefix sums of weights (cum[i]: the weight of the
// first i units), or nil when a weight is not positive.
func cumulative(weights []int64) []int64 {
	if len(weights) == 0 {
		return nil
	}
	cum := make([]int64, len(weights)+1)
	for i, w := range weights {
		if w <= 0 {
			return nil
		}
		cum[i+1] = cum[i] + w
	}
	return cum
}

// start draws a bar on f; cum weighs its units (nil: equally, see
// cumulative); now is the clock of its elapsed time and ETA.
func start(f *os.File, name string, total int, cum []int64, now func() time.Time) *Bar {
	c := &console{f: f}
	begin := now()
	var style mpb.BarFillerBuilder = mpb.BarStyle()
	if total <= 0 {
		total, style = 0, mpb.SpinnerStyle().PositionLeft()
	}
	p := mpb.New(mpb.WithConsoleWriter(c))
	b := p.New(int64(total), style,
		mpb.PrependDecorators(decor.Name(name)),
		mpb.AppendDecorators(decor.Any(func(s decor.Statistics) string { return status(s, now().Sub(begin), cum) })),
	)
	return &Bar{p: p, b: b, c: c}
}

// status is the text after the bar: "12/20  elapsed 3s  ETA 2s" ("12" and no
// ETA when the total is not known). cum weighs the units (see cumulative;
// nil: equally).
func status(s decor.Statistics, elapsed time.Duration, cum []int64) string {
	var buf []byte
	buf = strconv.AppendInt(buf, s.Current, 10)
	if s.Total > 0 {
		buf = append(buf, '/')
		buf = strconv.AppendInt(buf, s.Total, 10)
	}
	buf = append(buf, "  elapsed "...)
	buf = append(buf, seconds(elapsed)...)
	if s.Total > 0 && s.Current > 0 && s.Current < s.Total && !s.Completed && !s.Aborted {
		buf = append(buf, "  ETA "...)
		buf = append(buf, seconds(eta(s.Current, s.Total, elapsed, cum))...)
	}
	return string(buf)
}

// eta is the time left after done of total units took elapsed: elapsed
// times the weight left over the weight done (0 < done < total).
func eta(done, total int64, elapsed time.Duration, cum []int64) time.Duration {
	doneW, leftW := float64(done), float64(total-done)
	if int64(len(cum)) == total+1 {
		doneW, leftW = float64(cum[done]), float64(cum[total]-cum[done])
	}
	return time.Duration(float64(elapsed) * leftW / doneW)
}

// seconds is d rounded to the second: "0s", "42s", "1m5s".
func seconds(d time.Duration) string { return d.Round(time.Second).String() }

// Increment counts one unit of work done.
func (b *Bar) Increment() {
	if b == nil {
		return
	}
	b.b.Increment()
}

// Done ends the bar: it is drawn complete at the current count (which
// becomes its total, if it fell short), then erased. Done and Abort after
// the first are no-ops.
func (b *Bar) Done() {
	if b == nil {
		return
	}
	b.once.Do(func() {
		b.b.SetTotal(-1, true)
		b.finish()
	})
}

// Abort ends the bar without completing it: it is drawn at the current
// count, then erased. For a deferred call on a path that may fail; a no-op
// after Done.
func (b *Bar) Abort() {
	if b == nil {
		return
	}
	b.once.Do(func() {
		b.b.Abort(false)
		b.finish()
	})
}

// finish waits for the renderer to draw the bar's last state and stop, and
// erases the line.
func (b *Bar) finish() {
	b.p.Wait()
	b.c.mu.Lock()
	defer b.c.mu.Unlock()
	b.c.erase()
	b.c.done = true
}

// Guard returns a writer for whole lines to w that never mixes with the
// bar: when w is a terminal, each Write first erases the bar (it is redrawn
// below the line at the next refresh), and bar frames and writes never
// interleave. Otherwise (w is a file or a pipe, or the bar is off) Guard
// returns w.
func (b *Bar) Guard(w io.Writer) io.Writer {
	if b == nil || !IsTerminal(w) {
		return w
	}
	return &guarded{c: b.c, w: w}
}

type guarded struct {
	c *console
	w io.Writer
}

func (g *guarded) Write(p []byte) (int, error) {
	g.c.mu.Lock()
	defer g.c.mu.Unlock()
	g.c.erase()
	return g.w.Write(p)
}

// console is the mpb.ConsoleWriter of a bar: mpb renders each frame (the
// bar's row and a newline) into it and calls Flush, which writes the row
// as one line redrawn in place (see the package comment) in one Write.
type console struct {
	frame bytes.Buffer // the frame mpb is rendering (only mpb's goroutine touches it)

	mu    sync.Mutex // orders frames, erasures and guarded writes
	f     *os.File
	line  []byte // scratch: the bytes of the last frame written
	shown bool   // a frame is on the line (the cursor is at its end)
	done  bool   // finished: no more frames
}

func (c *console) Write(p []byte) (int, error)         { return c.frame.Write(p) }
func (c *console) ReadFrom(r io.Reader) (int64, error) { return c.frame.ReadFrom(r) }

// IsTerminal is true whatever the file: it makes mpb redraw on its own
// (Output already decided that this file gets bars).
func (c *console) IsTerminal() bool { return true }

// GetTermSize returns the width a frame may take, see maxWidth, and a height
// of at least one row.
func (c *console) GetTermSize() (width, height int, err error) {
	width, height = defaultWidth, 1
	if rc, err := c.f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if w, h, err := term.GetSize(int(fd)); err == nil && w > 1 {
				width, height = min(w-1, maxWidth), max(h, 1)
			}
		})
	}
	return width, height, nil
}

// Flush writes the frame mpb rendered: its last row, redrawn in place.
func (c *console) Flush(lines int) error {
	row := bytes.TrimRight(c.frame.Bytes(), "\n")
	if i := bytes.LastIndexByte(row, '\n'); i >= 0 {
		row = row[i+1:] // one bar per container: one row (keep the last, to be safe)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.line = append(append(append(c.line[:0], '\r'), row...), ClearLine[1:]...)
	c.frame.Reset()
	if c.done {
		return nil
	}
	c.shown = true
	_, err := c.f.Write(c.line)
	return err
}

// erase erases the frame on the line, if any; c.mu is held.
func (c *console) erase() {
	if c.shown {
		c.f.WriteString(ClearLine)
		c.shown = false
	}
}
