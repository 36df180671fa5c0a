package shm

import (
	"context"
	"fmt"
	"time"

	"github.com/goccl/goccl/transport"
)

// Taking rings back for a new link between the same two processes.
//
// Making a communicator of the survivors of a failure (goccl's Comm.Shrink)
// would otherwise create a ring for every pair of ranks on a host again: 4
// MiB each, zeroed by the kernel, 840 MiB for 15 ranks. Instead each side
// takes its two rings back from the old link (Reclaim), the two sides tell
// each other so out of band (the rendezvous store), each resets the ring it
// receives on (ResetInbound), and once both have (a barrier) each makes a
// new link over them with NewLink. The order matters: a side resets its
// inbound ring only after learning that the peer reclaimed its side, so no
// call of either process touches the ring during the reset; and neither
// makes the new link before both resets, since NewLink reads the counters
// and starts the CMA handshake.

// Reclaim aborts tl, a Link that NewLink made, on this side without
// unmapping its rings (its pending calls and the peer's fail), waits until no call of this process uses it (until
// ctx ends), and returns its rings for NewLink: out carries this process's
// messages to the peer, in the peer's to this one. Calls on tl fail from
// now on as after Close, and tl's Close no longer touches the rings. It
// fails, leaving tl to its Close, on a link of another transport, one
// already closed with Close, or reclaimed before.
func Reclaim(ctx context.Context, tl transport.Link) (out, in *Ring, err error) {
	l, ok := tl.(*link)
	if !ok {
		return nil, nil, fmt.Errorf("shm: reclaim: a %T is not a shared-memory link", tl)
	}
	if !l.released.CompareAndSwap(false, true) {
		return nil, nil, fmt.Errorf("shm: reclaim link to peer %d: already closed or reclaimed", l.peer)
	}
	// As Abort: no new call enters, and the calls waiting on either side
	// fail (the peer is leaving the link too).
	l.Abort(transport.NoLostRank)
	for i := 0; ; i++ {
		// Only NewLink's registration left: make the rings ours (unmappedBit:
		// nobody else unmaps them) in one swap, which a call registering
		// for a moment makes fail until it leaves.
		if l.state.CompareAndSwap(closedBit|1, closedBit|unmappedBit) {
			break
		}
		if err := ctx.Err(); err != nil {
			l.released.Store(false) // Close drops the registration
			return nil, nil, fmt.Errorf("shm: reclaim link to peer %d: calls still in flight: %w", l.peer, err)
		}
		if i < spinIters {
			continue
		}
		time.Sleep(50 * time.Microsecond)
	}
	l.peerProc.release()
	l.out.owned.Store(false)
	l.in.owned.Store(false)
	return l.out, l.in, nil
}

// ResetInbound makes a reclaimed ring that this side created (it receives
// on it) empty and open again, with the CMA handshake to redo: the state of
// a ring CreateRing just made. The peer must have reclaimed its side and
// neither side may use the ring until both have made their new links after
// the reset (see Reclaim).
func (r *Ring) ResetInbound() error {
	if r.opened || r.owned.Load() || r.unmapped.Load() {
		return fmt.Errorf("shm: reset ring %s: not a reclaimed ring this side created", r.path)
	}
	for _, w := range []interface{ Store(uint32) }{r.closeLost, r.recvWaiting, r.sendWaiting, r.readerActive, r.cmaOffer, r.cmaState} {
		w.Store(0)
	}
	r.tail.Store(0)
	r.head.Store(0)
	r.closed.Store(0) // last: the ring is open again
	return nil
}
