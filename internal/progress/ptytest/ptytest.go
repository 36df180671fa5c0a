// Package ptytest opens pseudo-terminals for tests: a terminal for a
// program's output whose bytes the test reads back.
package ptytest

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// PTY is a pseudo-terminal whose output is collected as it comes (a
// terminal that nobody reads blocks its writers once its buffer is full).
type PTY struct {
	// TTY is the terminal side: give it to the program under test.
	TTY *os.File

	master  *os.File
	mu      sync.Mutex
	out     bytes.Buffer
	drained chan struct{}
}

// Open opens a pseudo-terminal or skips the test when there is none; the
// test's cleanup closes it.
func Open(t testing.TB) *PTY {
	t.Helper()
	master, tty, err := open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	p := &PTY{TTY: tty, master: master, drained: make(chan struct{})}
	go func() {
		defer close(p.drained)
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			p.mu.Lock()
			p.out.Write(b[:n])
			p.mu.Unlock()
			if err != nil {
				return // EIO once the terminal side is closed everywhere and read out
			}
		}
	}()
	t.Cleanup(func() {
		p.TTY.Close()
		<-p.drained
		p.master.Close()
	})
	return p
}

// Output closes the terminal side and returns everything written to it,
// once every process it was passed to has closed it too (exited). The
// terminal translates "\n" into "\r\n" (ONLCR).
func (p *PTY) Output() string {
	p.TTY.Close()
	<-p.drained
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// frame is a progress bar's frame drawn in place (package progress), or an
// erasure (no text).
var frame = regexp.MustCompile(`\r([^\r\n]*)\x1b\[K`)

// Frames splits out, what a terminal received, into the text of the
// frames of progress bars drawn in place ("\r" + text + "\x1b[K") and the
// rest; erasures ("\r\x1b[K") are left out of both, and the terminal's
// "\r\n" for "\n" is undone.
func Frames(out string) (frames []string, rest string) {
	out = strings.ReplaceAll(out, "\r\n", "\n")
	for _, m := range frame.FindAllStringSubmatch(out, -1) {
		if m[1] != "" {
			frames = append(frames, m[1])
		}
	}
	return frames, frame.ReplaceAllString(out, "")
}

// LastFrames is the last frame of each bar in out, by bar name (the frame's
// text before " ["), and the rest of out as Frames gives it.
func LastFrames(out string) (last map[string]string, rest string) {
	frames, rest := Frames(out)
	last = map[string]string{}
	for _, f := range frames {
		name, _, _ := strings.Cut(f, " [")
		last[name] = f
	}
	return last, rest
}
