package goccl

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport"
)

// Naming stuck ranks and relaying failures (docs/design.md, "Stuck, dead
// or slow ranks"). Each rank of a communicator of several ranks keeps a
// report in the rendezvous store, under its own key: a watcher goroutine
// publishes the rank's operation state once it has not changed for half
// the operation timeout (a rank busy in its own code says which operation
// it last ran and when), and a failing operation publishes why before the
// rank closes its links. At a timeout the ranks combine these reports with
// what they saw themselves (the messages heard, the links' byte counters,
// the state of a same-host peer's process) to name the ranks that kept
// them waiting; a rank whose link a peer closed takes the cause from that
// peer's report.

// Report states.
const (
	stIdle    = "idle"    // op Seq done, none running
	stIn      = "in"      // inside op Seq
	stTimeout = "timeout" // op Seq timed out on this rank (Waiting, Cause)
	stFailed  = "failed"  // op Seq failed on this rank (Cause, Origin)
	stClosed  = "closed"  // the communicator was closed after op Seq
	stRevoked = "revoked" // this rank revoked the communicator (Comm.Revoke)
)

// report is one rank's published state.
type report struct {
	State   string `json:"s"`
	Seq     uint64 `json:"q"`
	AgeMs   int64  `json:"a,omitempty"` // how long the rank had been in State when it published
	AtMs    int64  `json:"t"`           // when it published (Unix ms)
	Waiting []int  `json:"w,omitempty"` // timeout: the ranks no message of op Seq came from
	On      int    `json:"b"`           // timeout: the peer its timed-out call waited on (-1: not known)
	Origin  int    `json:"o"`           // failed, timeout: the rank that found the cause
	Cause   string `json:"c,omitempty"` // failed, timeout, closed: what happened, for the other ranks' errors
	// timeout: by peer, the payload bytes this rank's link to it sent and
	// received, and how long (ms) it had moved none: the ranks away from
	// a link judge it from its two ends' counters (stalledLinks).
	Sent []uint64 `json:"sb,omitempty"`
	Recv []uint64 `json:"rb,omitempty"`
	Idle []int64  `json:"i,omitempty"`
}

// final reports whether r says the rank's communicator failed or closed.
func (r *report) final() bool {
	return r.State == stTimeout || r.State == stFailed || r.State == stClosed || r.State == stRevoked
}

// age is how long the rank had been in r's state at now.
func (r *report) age(now time.Time) time.Duration {
	d := time.Duration(r.AgeMs) * time.Millisecond
	if gap := now.Sub(time.UnixMilli(r.AtMs)); gap > 0 {
		d += gap // across hosts, as good as the clocks agree
	}
	return d
}

// Bounds of the exchanges at a failure: all of them together stay well
// under a second, so that every rank fails within the timeout + 1 s.
const (
	healthPublish = 150 * time.Millisecond // one report written
	healthCollect = 700 * time.Millisecond // this rank's report written, the others' read
	healthPoll    = 50 * time.Millisecond  // between two reads of the reports missing
	healthLinger  = time.Second            // the store kept up after a failure (close)
)

// health is a communicator's watcher and its access to the reports.
type health struct {
	rank, size int
	op         *atomic.Uint64 // Comm.opState: seq<<1, |1 once done
	links      []transport.Link
	store      rendezvous.Store
	base       string   // key prefix of the reports
	hosts      []string // host identity by rank
	pids       []int    // process id by rank
	ctx        context.Context
	stop       context.CancelFunc
	// servesStore: this rank's process serves the store (rank 0 without
	// WithStore); failedAt: when the communicator failed other than by a
	// lost rank (op goroutine, then Close).
	servesStore bool
	failedAt    time.Time
	// onTick runs at a tick of the watcher that finds the operation state
	// unchanged since the last one (Comm.checkRevoked).
	onTick func(context.Context)

	mu       sync.Mutex
	since    time.Time   // when *op took its current value (as the watcher saw)
	lastMove []time.Time // by peer: when its link's byte counters last changed
}

// startHealth starts the watcher of c (several ranks, a store, a timeout);
// nil when c has none of those.
func startHealth(c *Comm, hosts []string, pids []int, servesStore bool) *health {
	if c.group == nil || c.rdv == nil || c.jobID == "" || c.timeout <= 0 {
		return nil
	}
	ctx, stop := context.WithCancel(context.Background())
	now := time.Now()
	h := &health{rank: c.rank, size: c.size, op: &c.opState, links: c.links(), store: c.rdv,
		base: "goccl/health/" + c.jobID + "/", hosts: hosts, pids: pids, ctx: ctx, stop: stop,
		since: now, lastMove: make([]time.Time, c.size), servesStore: servesStore}
	for p := range h.lastMove {
		h.lastMove[p] = now
	}
	h.onTick = c.checkRevoked
	tick := min(max(c.timeout/8, 50*time.Millisecond), time.Second)
	go h.watch(tick, c.timeout/2)
	return h
}

// watch notes when the operation state and each link's byte counters
// change, and publishes the state once it has held for publishAfter.
func (h *health) watch(tick, publishAfter time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	moved := make([]uint64, h.size)
	state, published := h.op.Load(), ^uint64(0)
	for {
		var now time.Time
		select {
		case <-h.ctx.Done():
			return
		case now = <-t.C:
		}
		st := h.op.Load()
		if st == state {
			// The rank has been in one state for a tick (idle, or inside a
			// slow operation): only then does the watcher ask the store,
			// so that a rank busy with operations allocates nothing here.
			h.onTick(h.ctx)
		}
		h.mu.Lock()
		if st != state {
			state, h.since = st, now
		}
		for p, l := range h.links {
			if l != nil {
				if v := l.Counters().Sent() + l.Counters().Received(); v != moved[p] {
					moved[p], h.lastMove[p] = v, now
				}
			}
		}
		since := h.since
		h.mu.Unlock()
		if st != published && now.Sub(since) >= publishAfter {
			published = st
			r := report{State: stIn, Seq: st >> 1, AgeMs: now.Sub(since).Milliseconds()}
			if st&1 != 0 {
				r.State = stIdle
			}
			ctx, cancel := context.WithTimeout(h.ctx, time.Second)
			h.publish(ctx, r)
			cancel()
		}
	}
}

// failed notes that the communicator failed with err (Close lingers).
func (h *health) failed(err error) {
	if h != nil && transport.LostRank(err) < 0 {
		h.failedAt = time.Now()
	}
}

// close stops the watcher. On the rank that serves the store, after a
// failure that the ranks learn of through the store, it first keeps the
// store up until healthLinger after the failure: the other ranks may
// still be reading the reports.
func (h *health) close() {
	if h == nil {
		return
	}
	h.stop()
	if h.servesStore && !h.failedAt.IsZero() {
		time.Sleep(healthLinger - time.Since(h.failedAt))
	}
}

// linkIdle is how long the link to peer has moved no bytes (as the
// watcher last saw).
func (h *health) linkIdle(peer int) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Since(h.lastMove[peer])
}

// linkState is, by peer, what each link sent and received and how long
// (ms) it has moved no bytes (at a failure: it allocates).
func (h *health) linkState() (sent, recv []uint64, idle []int64) {
	sent, recv, idle = make([]uint64, h.size), make([]uint64, h.size), make([]int64, h.size)
	for p, l := range h.links {
		if l != nil {
			sent[p], recv[p] = l.Counters().Sent(), l.Counters().Received()
			idle[p] = h.linkIdle(p).Milliseconds()
		}
	}
	return sent, recv, idle
}

func (h *health) key(rank int) string { return h.base + strconv.Itoa(rank) }

// publish writes this rank's report r: the value, then its version
// counter, which the readers poll (Add 0) without waiting on a missing key.
func (h *health) publish(ctx context.Context, r report) error {
	r.AtMs = time.Now().UnixMilli()
	b, err := json.Marshal(&r)
	if err != nil {
		return err
	}
	if err := h.store.Set(ctx, h.key(h.rank), b); err != nil {
		return err
	}
	_, err = h.store.Add(ctx, h.key(h.rank)+"/n", 1)
	return err
}

// publishWait publishes r, waiting at most healthPublish: the store may be
// unreachable (its rank stopped, its link cut), and a store client runs
// one call at a time. It reports whether r was published in time.
func (h *health) publishWait(r report) bool {
	ctx, cancel := context.WithTimeout(context.Background(), healthPublish)
	done := make(chan error, 1)
	go func() {
		defer cancel()
		done <- h.publish(ctx, r)
	}()
	select {
	case err := <-done:
		return err == nil
	case <-ctx.Done():
		return false
	}
}

// read returns rank's report if a newer one than version *seen exists
// (nil if none), without waiting for one.
func (h *health) read(ctx context.Context, rank int, seen *int64) (*report, error) {
	n, err := h.store.Add(ctx, h.key(rank)+"/n", 0)
	if err != nil || n <= *seen {
		return nil, err
	}
	b, err := h.store.Get(ctx, h.key(rank))
	if err != nil {
		return nil, err
	}
	r := new(report)
	if err := json.Unmarshal(b, r); err != nil {
		return nil, err
	}
	*seen = n
	return r, nil
}

// collect publishes first (when not nil), then reads the reports of ranks
// until enough says that those read suffice, all within healthCollect (a
// loaded store may be slow; one the publication finds out of reach ends
// it), and returns what it got (by rank, nil where none) and whether the
// store answered. A call still in flight at the bound is abandoned.
func (h *health) collect(first *report, ranks []int, enough func(got []*report) bool) ([]*report, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), healthCollect)
	var mu sync.Mutex
	got := make([]*report, h.size)
	var reached atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		if first != nil {
			if h.publish(ctx, *first) != nil {
				return
			}
		}
		reached.Store(true)
		seen := make([]int64, h.size)
		for {
			for _, p := range ranks {
				r, err := h.read(ctx, p, &seen[p])
				if ctx.Err() != nil {
					return
				}
				if err == nil && r != nil {
					mu.Lock()
					got[p] = r
					mu.Unlock()
				}
			}
			mu.Lock()
			ok := enough(slices.Clone(got))
			mu.Unlock()
			if ok || sleepCtx(ctx, healthPoll) != nil {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(got), reached.Load()
}

// sleepCtx sleeps for d or until ctx ends (then its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
