package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport"
)

// A rank that dies or gives up while the others make their links would
// leave them waiting for its connections until their deadline: its peers
// wait in a socket accept that nothing ends. So while the links are made a
// goroutine waits in the store beside them for the news that ends it: the
// loss of a rank, which the store's server reports (a rendezvous.
// RankLostError on a wait), or a rank's note that it gave up (Abandon).

// abandonKey is the store key of the note a rank leaves when its Init of
// job jobID fails.
func abandonKey(jobID string) string { return "goccl/abandoned/" + jobID }

// AbandonedError: another rank's Init of the same communicator failed, so
// this one cannot finish.
type AbandonedError struct {
	Note string // the rank and its error
}

func (e *AbandonedError) Error() string { return "another rank gave up: " + e.Note }

// Abandon leaves in store the note that rank's Init of job jobID failed
// with err, so that the other ranks' Init fails at once instead of waiting
// for this rank's links. It waits at most 500 ms (the store may be gone
// too) and reports nothing: it is best effort.
func Abandon(store rendezvous.Store, jobID string, rank int, err error) {
	if store == nil || jobID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	// The note starts with the rank whose loss made this one give up (-1:
	// none), so that a reader reports that loss as the others' own would
	// be (whichever of the two news reaches it first).
	lost := transport.LostRank(err)
	if rl := (*rendezvous.RankLostError)(nil); errors.As(err, &rl) {
		lost = rl.Rank
	}
	store.Set(ctx, abandonKey(jobID), fmt.Appendf(nil, "%d|rank %d: %v", lost, rank, err))
}

// abandonCause is the cause a note (see Abandon) gives a waiting rank: the
// loss it names, else the note.
func abandonCause(v []byte) error {
	lostText, note, ok := strings.Cut(string(v), "|")
	lost, err := strconv.Atoi(lostText)
	if !ok || err != nil {
		return &AbandonedError{Note: string(v)}
	}
	if lost >= 0 {
		return &rendezvous.RankLostError{Rank: lost, Reason: "reported by " + note}
	}
	return &AbandonedError{Note: note}
}

// watchPeers returns a context derived from ctx that ends, with the loss
// or the note as its cause, when the store reports a lost rank or a rank
// abandoned (see Abandon); stop ends the watch. No other store call of
// this process may be made through b.store until stop returns: a client
// such as the TCP store runs one call at a time.
func (b *boot) watchPeers(ctx context.Context) (wctx context.Context, stop func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	gctx, gcancel := context.WithCancel(wctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		v, err := b.store.Get(gctx, abandonKey(b.jobID))
		var lost *rendezvous.RankLostError
		switch {
		case err == nil:
			cancel(abandonCause(v))
		case errors.As(err, &lost):
			cancel(lost)
		}
	}()
	return wctx, func() {
		gcancel()
		<-done
		cancel(nil)
		// A client such as the TCP store drops its connection when a call
		// is cancelled and dials again at its next call: until then the
		// store's server could not see this process die. A call that finds
		// its key at once (this rank's card) dials now.
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		b.store.Get(rctx, cardKey(b.p.Rank))
		rcancel()
	}
}

// watched runs f with a context that ends when a peer is lost or gives up
// (watchPeers); its error is then that cause.
func (b *boot) watched(ctx context.Context, f func(ctx context.Context) error) error {
	wctx, stop := b.watchPeers(ctx)
	err := f(wctx)
	cause := context.Cause(wctx)
	stop()
	if err != nil && ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}
