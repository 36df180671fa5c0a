package goccl

import (
	"log/slog"
	"os"
	"strconv"
	"testing"
)

// TestExpandDebugFile: %h is the host name, %p the process id, %% a %;
// other sequences stay.
func TestExpandDebugFile(t *testing.T) {
	h, p := hostname(), strconv.Itoa(os.Getpid())
	for in, want := range map[string]string{
		"":                "",
		"/tmp/x.log":      "/tmp/x.log",
		"/tmp/g.%h.%p":    "/tmp/g." + h + "." + p,
		"%p%p":            p + p,
		"100%%-%x-%":      "100%-%x-%",
		"/tmp/%h/%%h.log": "/tmp/" + h + "/%h.log",
	} {
		if got := expandDebugFile(in); got != want {
			t.Errorf("expandDebugFile(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLogOffIsCheap: with logging off the hot path's check allocates
// nothing.
func TestLogOffIsCheap(t *testing.T) {
	t.Setenv("GOCCL_DEBUG", "")
	l := newLogger(0, nil)
	if n := testing.AllocsPerRun(100, func() {
		if l.on(slog.LevelInfo, subColl) {
			l.Infof(subColl, "%d", 1)
		}
	}); n != 0 {
		t.Errorf("%v allocations with logging off", n)
	}
}
