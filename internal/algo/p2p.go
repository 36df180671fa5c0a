package algo

import (
	"context"
	"sync"
)

// Msg is one point-to-point message of a group (see P2P): the peer it goes
// to or comes from, the per-pair sequence number, element type and element
// count its header carries, and its bytes.
type Msg struct {
	Peer  int
	Seq   uint64
	DType uint8
	Count uint64
	Buf   []byte
}

// P2P runs a group of point-to-point messages together, the schedule behind
// the communicator's groups (the ncclGroupStart/ncclGroupEnd idea): the
// sends to each peer run in the order given on one goroutine per peer, the
// receives from each peer in the order given on another, all at once, so
// any pattern in which every rank posts all its sends before its receives
// (a ring shift, an all-pairs exchange) completes at any size: no send
// waits for a receive of the same rank. Messages to this rank itself are
// copied, the n-th send to self into the n-th receive from self (the caller
// has checked that both lists have the same count and sizes).
//
// op.Header gives the operation's fields; each message's header takes Seq,
// DType, Count and Bytes from the Msg. On the first failure the group is
// aborted (peers fail fast, told a lost rank if the error names one) and
// that error returned. P2P allocates (goroutines, headers): it is for
// groups, not for the single-message fast path (SendRecvP2P).
func (g *Group) P2P(ctx context.Context, op *Op, sends, recvs []Msg) error {
	var self []Msg
	for _, m := range sends {
		if m.Peer == g.Rank {
			self = append(self, m)
		}
	}
	i := 0
	for _, m := range recvs {
		if m.Peer == g.Rank {
			copy(m.Buf, self[i].Buf)
			i++
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		g.abortFor(err)
	}
	// Sends and receives of each peer, in order, on their own goroutine.
	run := func(msgs []Msg, peer int, send bool) {
		defer wg.Done()
		for _, m := range msgs {
			if m.Peer != peer {
				continue
			}
			h := op.Header
			h.Seq, h.DType, h.Count, h.Bytes = m.Seq, m.DType, m.Count, uint64(len(m.Buf))
			var err error
			if send {
				err = g.links[peer].Send(ctx, &h, m.Buf)
			} else {
				err = g.links[peer].Recv(ctx, &h, m.Buf, nil)
			}
			if err != nil {
				fail(err)
				return
			}
		}
	}
	started := make([]uint8, g.Size) // bit 0: sends started, bit 1: receives
	for _, set := range [2]struct {
		msgs []Msg
		bit  uint8
	}{{sends, 1}, {recvs, 2}} {
		for _, m := range set.msgs {
			if m.Peer == g.Rank || started[m.Peer]&set.bit != 0 {
				continue
			}
			started[m.Peer] |= set.bit
			wg.Add(1)
			go run(set.msgs, m.Peer, set.bit == 1)
		}
	}
	wg.Wait()
	return first
}
