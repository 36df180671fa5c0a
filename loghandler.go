package goccl

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/goccl/goccl/internal/config"
)

// logHandler is the slog.Handler of goccl's default log: one NCCL-like,
// human-readable line per record,
//
//	host:pid [rank R] goccl LEVEL SUBSYS message key=value ...
//
// (LEVEL is WARN, INFO or TRACE; the attributes other than rank, subsys,
// peer, peers, op and transport, which the message already states, follow
// it). The host name
// is looked up once per process. It makes no choice of its own: every
// record it is given is written (the logger chooses them).
type logHandler struct {
	out    *logOutput
	attrs  []slog.Attr // from WithAttrs, keys qualified by their groups
	prefix string      // the groups of WithGroup, "a.b."
}

// logOutput is one destination, shared by every handler writing to it:
// lines are written whole, one at a time.
type logOutput struct {
	mu sync.Mutex
	w  io.Writer
}

var (
	hostname = sync.OnceValue(func() string {
		h, err := os.Hostname()
		if err != nil {
			return "unknown"
		}
		return h
	})
	stderrOutput = &logOutput{w: os.Stderr}
	// logFiles are the GOCCL_DEBUG_FILE files this process opened, by
	// expanded name: each is opened once and never closed (as NCCL does).
	logFiles struct {
		sync.Mutex
		m map[string]*logOutput
	}
)

// defaultHandler is the text handler onto GOCCL_DEBUG_FILE, or stderr when
// it is unset; err says why the file could not be opened (stderr then).
func defaultHandler() (slog.Handler, error) {
	out, err := debugOutput(config.DebugFile.Get())
	return &logHandler{out: out}, err
}

// debugOutput returns the output of the file named by pattern (%h: host
// name, %p: process id, %%: %), opened once per process and appended to;
// stderr for "".
func debugOutput(pattern string) (*logOutput, error) {
	if pattern == "" {
		return stderrOutput, nil
	}
	name := expandDebugFile(pattern)
	logFiles.Lock()
	defer logFiles.Unlock()
	if o := logFiles.m[name]; o != nil {
		return o, nil
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return stderrOutput, fmt.Errorf("%s=%q: %w; logging to stderr", config.DebugFile.Name, pattern, err)
	}
	if logFiles.m == nil {
		logFiles.m = make(map[string]*logOutput)
	}
	o := &logOutput{w: f}
	logFiles.m[name] = o
	return o, nil
}

// expandDebugFile replaces %h by the host name, %p by the process id and
// %% by %, as NCCL_DEBUG_FILE does; other % sequences stay as they are.
func expandDebugFile(pattern string) string {
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		if c != '%' || i+1 == len(pattern) {
			b.WriteByte(c)
			continue
		}
		switch pattern[i+1] {
		case 'h':
			b.WriteString(hostname())
		case 'p':
			b.WriteString(strconv.Itoa(os.Getpid()))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte(c)
			continue
		}
		i++
	}
	return b.String()
}

func (h *logHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := *h
	n.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range attrs {
		a.Key = h.prefix + a.Key
		n.attrs = append(n.attrs, a)
	}
	return &n
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	n.prefix = h.prefix + name + "."
	return &n
}

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	rank, sub := "?", ""
	var extra []slog.Attr
	take := func(a slog.Attr) {
		a.Value = a.Value.Resolve()
		switch a.Key {
		case "rank":
			rank = a.Value.String()
		case "subsys":
			sub = a.Value.String()
		case "peer", "peers", "op", "transport":
		default:
			if !a.Equal(slog.Attr{}) {
				extra = append(extra, a)
			}
		}
	}
	for _, a := range h.attrs {
		take(a)
	}
	r.Attrs(func(a slog.Attr) bool {
		a.Key = h.prefix + a.Key
		take(a)
		return true
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d [rank %s] goccl %s", hostname(), os.Getpid(), rank, levelName(r.Level))
	if sub != "" {
		b.WriteString(" " + sub)
	}
	b.WriteString(" " + r.Message)
	for _, a := range extra {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
	}
	b.WriteByte('\n')
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	_, err := io.WriteString(h.out.w, b.String())
	return err
}

// levelName is NCCL's name of a level: WARN, INFO or TRACE.
func levelName(l slog.Level) string {
	switch {
	case l >= slog.LevelWarn:
		return "WARN"
	case l >= slog.LevelInfo:
		return "INFO"
	}
	return "TRACE"
}
