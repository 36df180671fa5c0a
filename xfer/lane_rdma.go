package xfer

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/goccl/goccl/rdma"
)

// The RDMA lane: when both agents have a soft RoCE device
// (Options.RDMA), DRAM descriptors between them move by RDMA WRITE and
// READ on one RC queue pair per pair of agents, straight between the
// registered memory regions (every DRAM registration is also a memory
// region of the agent's protection domain; its rkey travels in the
// metadata). The target's CPU takes no part. The queue pairs are
// connected over the first TCP stream (fQP / fQPInfo frames carrying
// rdma.ConnInfo), which also carries notifications and tells a dead peer:
// its loss fails the work requests still out.

// rdmaLane is a peer's RDMA lane: its current queue pair, made on first
// use and made again after one fails.
type rdmaLane struct {
	p   *peer
	mu  sync.Mutex
	qp  *rdmaQP // nil: none yet, or the last one failed
	err error   // the peer failed: queue pairs made later start failed
}

func (l *rdmaLane) post(cs []*chunk) { l.current().enqueueAll(cs) }
func (l *rdmaLane) inline() bool     { return false }
func (l *rdmaLane) count(n uint64)   { l.p.a.ctr.rdma.Add(n) }
func (l *rdmaLane) path() string     { return "rdma" }

// current returns the queue pair (made, not yet connected, on first use).
func (l *rdmaLane) current() *rdmaQP {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.qp == nil {
		l.qp = &rdmaQP{l: l, p: l.p, pending: map[uint64]*chunk{}, err: l.err}
	}
	return l.qp
}

// fail ends the lane with the peer: the queue pair's work fails with err,
// and so does what is posted later.
func (l *rdmaLane) fail(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	q := l.qp
	l.mu.Unlock()
	if q != nil {
		q.fail(err)
	}
}

// reset fails q's work with err and drops it: the next request connects a
// new queue pair.
func (l *rdmaLane) reset(q *rdmaQP, err error) {
	l.mu.Lock()
	if l.qp == q {
		l.qp = nil
	}
	l.mu.Unlock()
	q.fail(err)
}

// rdmaQP is the initiator's queue pair towards one peer.
type rdmaQP struct {
	l    *rdmaLane
	p    *peer
	once sync.Once

	mu      sync.Mutex
	q       []*chunk // posted before the queue pair is connected
	qp      *rdma.QP
	cq      *rdma.CQ
	pending map[uint64]*chunk // by work request ID
	nextID  uint64
	err     error
	cancel  context.CancelFunc
	wake    chan struct{} // work queued for the poster
}

// qpAnswer is the target's reply to an fQP frame (or the error that ended
// the stream first).
type qpAnswer struct {
	info []byte
	err  error
}

func (r *rdmaQP) enqueueAll(cs []*chunk) {
	r.mu.Lock()
	if err := r.err; err != nil {
		r.mu.Unlock()
		for _, c := range cs {
			c.finish(err)
		}
		return
	}
	// Posting sends the first packets (the soft device transmits in
	// PostSend), so a goroutine of the queue pair posts, not the caller.
	r.q = append(r.q, cs...)
	r.mu.Unlock()
	r.once.Do(func() {
		r.wake = make(chan struct{}, 1)
		r.p.a.wg.Add(1)
		go r.run()
	})
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// poster posts what enqueueAll queued, until ctx ends.
func (r *rdmaQP) poster(ctx context.Context) {
	defer r.p.a.wg.Done()
	for {
		select {
		case <-r.wake:
		case <-ctx.Done():
			return
		}
		r.mu.Lock()
		if r.err != nil {
			r.mu.Unlock()
			return
		}
		batch := r.q
		r.q = nil
		left, err := r.postLocked(batch)
		r.mu.Unlock()
		if err != nil {
			// The queue pair is in error: what was not posted fails with the
			// rest of its work; the next request connects a new one.
			err = fmt.Errorf("%w: agent %q: RDMA post: %v", ErrPeerLost, r.p.name, err)
			for _, c := range left {
				c.finish(err)
			}
			r.l.reset(r, err)
			return
		}
	}
}

// postLocked posts a work request per chunk. When a post fails (the queue
// pair went to error), it returns the chunks not posted, for the caller to
// fail outside the lock.
func (r *rdmaQP) postLocked(cs []*chunk) ([]*chunk, error) {
	for i, c := range cs {
		r.nextID++
		op := rdma.WRWrite
		if c.req.op == READ {
			op = rdma.WRRead
		}
		r.pending[r.nextID] = c
		err := r.qp.PostSend(rdma.SendWR{ID: r.nextID, Opcode: op, MR: c.mr, Offset: c.mrOff, Length: int(c.r.d.Len),
			RemoteAddr: c.r.d.Addr, RKey: c.rkey})
		if err != nil {
			delete(r.pending, r.nextID)
			return cs[i:], err
		}
	}
	return nil, nil
}

// run connects the queue pair through stream 0, posts what waited, then
// turns completions into finished chunks.
func (r *rdmaQP) run() {
	a := r.p.a
	defer a.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.mu.Lock()
	r.cancel = cancel
	if r.err != nil {
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	cq := a.dev.CreateCQ()
	q, err := a.pd.CreateQP(cq, cq)
	if err != nil {
		r.l.reset(r, fmt.Errorf("agent %q: create queue pair: %v", r.p.name, err))
		return
	}
	local := q.LocalInfo(nil)
	blob, _ := json.Marshal(&local)
	setup := &chunk{frame: fQP, msg: blob, answer: make(chan qpAnswer, 1)}
	r.p.control(setup)
	var ans qpAnswer
	select {
	case ans = <-setup.answer:
	case <-a.done:
		ans.err = ErrClosed
	}
	var remote rdma.ConnInfo
	if ans.err == nil {
		ans.err = json.Unmarshal(ans.info, &remote)
	}
	if ans.err == nil {
		ans.err = q.Connect(local, remote, rdma.ConnectOptions{Timeout: a.o.RDMATimeout,
			Access: rdma.AccessRemoteWrite | rdma.AccessRemoteRead})
	}
	if ans.err != nil {
		// The RDMA requests fail; the peer's TCP streams stay (when the
		// stream itself broke, the peer failed already).
		q.Destroy()
		r.l.reset(r, fmt.Errorf("agent %q: connect queue pair: %v", r.p.name, ans.err))
		return
	}
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		q.Destroy()
		return
	}
	r.qp, r.cq = q, cq
	r.mu.Unlock()
	a.wg.Add(1)
	go r.poster(ctx)
	select { // what was queued while connecting
	case r.wake <- struct{}{}:
	default:
	}
	for {
		wcs, err := cq.Wait(ctx, 64)
		if err != nil {
			return // failed or closed: fail() finished what was pending
		}
		for _, wc := range wcs {
			r.mu.Lock()
			c := r.pending[wc.WRID]
			delete(r.pending, wc.WRID)
			r.mu.Unlock()
			if c == nil {
				continue
			}
			if wc.Status != rdma.WCSuccess {
				err := fmt.Errorf("%w: agent %q: RDMA %s of %d bytes at %s: %v", ErrPeerLost, r.p.name, c.req.op, c.r.d.Len, c.r.d, wc.Status)
				if wc.Status == rdma.WCRemAccessErr {
					err = fmt.Errorf("agent %q refused RDMA %s of %d bytes at %s (not registered there): %v", r.p.name, c.req.op, c.r.d.Len, c.r.d, wc.Status)
				}
				c.finish(err)
				if wc.Status == rdma.WCRemAccessErr {
					// The queue pair is in error now (RC): the rest of its work
					// fails, and the next request to the peer connects a new one.
					r.l.reset(r, fmt.Errorf("%w: agent %q: the queue pair failed after a refused RDMA access", ErrPeerLost, r.p.name))
					return
				}
				r.p.fail(err)
				continue
			}
			c.finish(nil)
		}
	}
}

// fail ends the queue pair: what waits or is out fails with err.
func (r *rdmaQP) fail(err error) {
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return
	}
	r.err = err
	q, pend := r.q, r.pending
	r.q, r.pending = nil, nil
	if r.qp != nil {
		r.qp.Destroy()
	}
	if r.cancel != nil {
		r.cancel()
	}
	r.mu.Unlock()
	for _, c := range q {
		c.finish(err)
	}
	for _, c := range pend {
		c.finish(err)
	}
}

// serveQP is the target's side of an fQP frame: a queue pair of its own,
// connected to the initiator's, answered with its description.
func (a *Agent) serveQP(payload []byte) (*rdma.QP, []byte, error) {
	if a.pd == nil {
		return nil, nil, fmt.Errorf("agent %q has no RoCE device", a.name)
	}
	var remote rdma.ConnInfo
	if err := json.Unmarshal(payload, &remote); err != nil {
		return nil, nil, fmt.Errorf("%w: queue pair description: %v", ErrProtocol, err)
	}
	cq := a.dev.CreateCQ()
	q, err := a.pd.CreateQP(cq, cq)
	if err != nil {
		return nil, nil, err
	}
	local := q.LocalInfo(nil)
	if err := q.Connect(local, remote, rdma.ConnectOptions{Timeout: a.o.RDMATimeout,
		Access: rdma.AccessRemoteWrite | rdma.AccessRemoteRead}); err != nil {
		q.Destroy()
		return nil, nil, err
	}
	b, _ := json.Marshal(&local)
	return q, b, nil
}
