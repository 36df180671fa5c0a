package goccl_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

// TestInitNotSilent: a rank whose store nobody serves says at INFO what it
// waits for, and warns before its deadline (the first warning comes after
// 5 s, or at half the time left when that is sooner), naming the address
// and the variable that set it; Init then fails at its deadline.
func TestInitNotSilent(t *testing.T) {
	addr := freeAddr(t) // nobody listens there
	t.Setenv("GOCCL_DEBUG", "INFO")
	t.Setenv("GOCCL_DEBUG_FILE", "")
	t.Setenv("GOCCL_RANK", "1")
	t.Setenv("GOCCL_WORLD_SIZE", "2")
	t.Setenv("GOCCL_LOCAL_RANK", "1")
	t.Setenv("GOCCL_STORE_ADDR", addr)
	h := newRecorder(slog.LevelInfo)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	c, err := goccl.Init(ctx, goccl.WithLogger(slog.New(h)))
	if err == nil {
		c.Close()
		t.Fatal("Init succeeded without a store")
	}
	want := "the rendezvous store rank 0 serves at " + addr + " (GOCCL_STORE_ADDR)"
	var info, warn bool
	for _, rec := range h.records() {
		if !strings.Contains(rec.msg, want) {
			continue
		}
		info = info || rec.level == slog.LevelInfo && strings.Contains(rec.msg, "rank 1 of 2: waiting for")
		warn = warn || rec.level == slog.LevelWarn && strings.Contains(rec.msg, "rank 1 of 2: still waiting after")
	}
	if !info || !warn {
		t.Errorf("INFO record of the wait %v, warning %v; want both naming %q; records: %v", info, warn, want, h.records())
	}
}
