package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rendezvous"
)

// Intervals of Connect's waiting notice: the first warning comes after
// noticeFirst (or half the time left before ctx's deadline, if sooner),
// then one every noticeEvery.
var (
	noticeFirst = 5 * time.Second
	noticeEvery = 30 * time.Second
)

// notice says, while Connect waits, what it waits for: at INFO when a phase
// starts, as a warning after a few seconds and then periodically, so that
// a rank that cannot reach its store is never silent until its deadline.
type notice struct {
	p     *Params
	start time.Time
	mu    sync.Mutex
	what  string // the phase waited in ("" once done)
	stop  chan struct{}
}

// startNotice starts the notice of a Connect call; call done when it ends.
func startNotice(ctx context.Context, p *Params) *notice {
	n := &notice{p: p, start: time.Now(), stop: make(chan struct{})}
	first := noticeFirst
	if dl, ok := ctx.Deadline(); ok && time.Until(dl)/2 < first {
		first = max(time.Until(dl)/2, time.Millisecond)
	}
	go n.loop(first)
	return n
}

// phase records and logs (INFO) what Connect now waits for.
func (n *notice) phase(format string, args ...any) {
	n.p.Log(slog.LevelInfo, "BOOTSTRAP", nil, "rank %d of %d: waiting for "+format, append([]any{n.p.Rank, n.p.Size}, args...)...)
	n.set(format, args...)
}

// set records what Connect now waits for, without logging it.
func (n *notice) set(format string, args ...any) {
	n.mu.Lock()
	n.what = fmt.Sprintf(format, args...)
	n.mu.Unlock()
}

// done stops the notice.
func (n *notice) done() { close(n.stop) }

func (n *notice) loop(first time.Duration) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		n.mu.Lock()
		what := n.what
		n.mu.Unlock()
		n.p.Log(slog.LevelWarn, "BOOTSTRAP", nil, "rank %d of %d: still waiting after %v for %s",
			n.p.Rank, n.p.Size, time.Since(n.start).Round(time.Second/10), what)
		t.Reset(noticeEvery)
	}
}

// storeWhere describes the store env names and the setting that named it,
// for the notice: "the rendezvous store at 10.0.0.1:29500 (GOCCL_STORE_ADDR)".
func storeWhere(env rendezvous.Env, rank int) string {
	from := env.StoreAddrFrom
	switch {
	case env.Etcd != "":
		return "the etcd store " + env.Etcd + " (" + config.Store.Name + ")"
	case env.AgentStore != "" && env.AgentStore == env.StoreAddr:
		return "torchrun's agent store at " + env.StoreAddr + " (" + from + ", TORCHELASTIC_USE_AGENT_STORE)"
	case env.StoreAddr != "" && rank == 0:
		return "its own rendezvous store to start serving at " + env.StoreAddr + " (" + from + ")"
	case env.StoreAddr != "":
		return "the rendezvous store rank 0 serves at " + env.StoreAddr + " (" + from + ")"
	case rank == 0:
		return "its own rendezvous store to start (address file " + rendezvous.AddrFilePath(env) + ", " + config.StoreDir.Name + ", " + config.JobID.Name + ")"
	}
	return "rank 0's rendezvous store through its address file " + rendezvous.AddrFilePath(env) + " (" + config.StoreDir.Name + ", " + config.JobID.Name + ")"
}
