package xfer

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/internal/trace"
)

// Op is a transfer's direction (nixl_xfer_op_t).
type Op uint8

const (
	// READ copies remote descriptors into local ones.
	READ Op = 1
	// WRITE copies local descriptors into remote ones.
	WRITE Op = 2
)

func (o Op) String() string {
	switch o {
	case READ:
		return "READ"
	case WRITE:
		return "WRITE"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Status is a request's state (nixl_status_t's NIXL_IN_PROG / NIXL_SUCCESS / errors).
type Status int

const (
	// Prepared: made, not posted yet (or released).
	Prepared Status = iota
	// InProgress: posted, some chunk still on its way.
	InProgress
	// Done: every byte landed (and the notification, if any, was sent).
	Done
	// Failed: see the error.
	Failed
	// released: ReleaseXferReq was called (XferStatus reports Failed).
	released
)

func (s Status) String() string {
	if s < 0 || s > released {
		return fmt.Sprintf("Status(%d)", int(s))
	}
	return [...]string{"prepared", "in progress", "done", "failed", "released"}[s]
}

// Dlist is a prepared descriptor list (nixlDlistH): descriptors of one
// memory type of one agent, checked against its registrations once so
// requests made from it only pick indices.
type Dlist struct {
	agent string
	typ   MemType
	descs []Desc
	p     *peer // nil: this agent's own memory
	// per descriptor: this agent's registration (own memory), or the
	// peer's Alloc region mapped here (same host), else nil.
	regs  []*region
	maps  []*mapping
	rkeys []uint32 // per descriptor: the peer region's rkey, 0: no RDMA
}

// Len is the number of descriptors.
func (l *Dlist) Len() int { return len(l.descs) }

// PrepXferDlist checks descs (all of type typ) against the registrations of
// agent (this agent's own when agent is "" or its name; a peer's from its
// metadata, fetched from the store with ctx when not loaded yet) and
// returns the prepared list.
func (a *Agent) PrepXferDlist(ctx context.Context, agent string, typ MemType, descs []Desc) (*Dlist, error) {
	if typ != DRAM && typ != FILE {
		return nil, fmt.Errorf("xfer: agent %q: prepare list for %q: memory type %d", a.name, agent, typ)
	}
	if len(descs) == 0 {
		return nil, fmt.Errorf("%w: agent %q: prepare list for %q: no descriptors", ErrBadRequest, a.name, agent)
	}
	l := &Dlist{typ: typ, descs: append([]Desc(nil), descs...)}
	if agent == "" || agent == a.name {
		l.agent = a.name
		l.regs = make([]*region, len(descs))
		a.mu.RLock()
		defer a.mu.RUnlock()
		for i, d := range descs {
			r := a.reg.find(typ, d)
			if d.Len == 0 || r == nil {
				return nil, fmt.Errorf("%w: agent %q: descriptor %d %s %s", ErrNotRegistered, a.name, i, typ, d)
			}
			if typ == FILE {
				if err := checkDirect(r, d); err != nil {
					return nil, fmt.Errorf("xfer: agent %q: descriptor %d: %w", a.name, i, err)
				}
			}
			l.regs[i] = r
		}
		return l, nil
	}
	p, err := a.peerFor(ctx, agent)
	if err != nil {
		return nil, err
	}
	l.agent, l.p = agent, p
	l.maps = make([]*mapping, len(descs))
	l.rkeys = make([]uint32, len(descs))
	md := p.metadata()
	for i, d := range descs {
		ri := md.find(typ, d)
		if d.Len == 0 || ri == nil {
			return nil, fmt.Errorf("%w: agent %q: descriptor %d %s %s is not in agent %q's registrations", ErrNotRegistered, a.name, i, typ, d, agent)
		}
		if m := p.mapped(ri); m != nil {
			l.maps[i] = m
		} else if md.RDMA && a.pd != nil {
			l.rkeys[i] = ri.RKey
		}
	}
	return l, nil
}

func (md *metadata) find(typ MemType, d Desc) *regionInfo {
	for i := range md.Regions {
		r := &md.Regions[i]
		if r.Type == typ && r.Dev == d.DevID && d.Addr >= r.Addr && d.Len <= r.Len && d.Addr-r.Addr <= r.Len-d.Len {
			return r
		}
	}
	return nil
}

// stripeMin is the smallest piece a descriptor is striped into.
const stripeMin = 64 << 10

// XferReq is a transfer request (nixlXferReqH): made once, posted any
// number of times (one post at a time), released at the end.
type XferReq struct {
	a      *Agent
	id     uint64
	op     Op
	p      *peer // nil: this agent's own memory
	remote string
	what   string
	chunks []chunk
	notif  *chunk
	// the chunks as posted, by lane (those that copy in the caller last);
	// made at the first post
	lanes []laneGroup
	regs  []*region  // local registrations kept busy while posted
	maps  []*mapping // peer mappings kept while posted
	dead  bool       // released

	path   string    // the lanes' names, for the trace
	bytes  int64     // the chunks' bytes, for the trace
	postAt time.Time // the last post's start, when the agent traces

	state     atomic.Int32
	remaining atomic.Int64
	mu        sync.Mutex
	err       error
	done      chan struct{}
}

// ID is the request's number on its agent, as errors name it.
func (r *XferReq) ID() uint64 { return r.id }

// MakeXferReq makes a request from prepared lists: local descriptor
// localIdx[i] is copied to (WRITE) or from (READ) remote descriptor
// remoteIdx[i]; each pair must have equal lengths. notif, when not nil, is
// delivered to the remote agent once all bytes landed. The local list must
// be this agent's; local FILE descriptors go with this agent's own memory
// only (the POSIX backend is local, as NIXL's).
func (a *Agent) MakeXferReq(op Op, local *Dlist, localIdx []int, remote *Dlist, remoteIdx []int, notif []byte) (*XferReq, error) {
	fail := func(format string, args ...any) (*XferReq, error) {
		return nil, fmt.Errorf("%w: agent %q: %s to %q: %s", ErrBadRequest, a.name, op, remote.agent, fmt.Sprintf(format, args...))
	}
	switch {
	case op != READ && op != WRITE:
		return nil, fmt.Errorf("%w: agent %q: operation %d", ErrBadRequest, a.name, op)
	case local == nil || remote == nil:
		return nil, fmt.Errorf("%w: agent %q: %s with a nil list", ErrBadRequest, a.name, op)
	case local.p != nil || local.agent != a.name:
		return fail("the local list is agent %q's", local.agent)
	case len(localIdx) != len(remoteIdx):
		return fail("%d local and %d remote indices", len(localIdx), len(remoteIdx))
	case len(localIdx) == 0:
		return fail("no descriptors")
	case len(notif) > maxNotif:
		return fail("notification of %d bytes (at most %d)", len(notif), maxNotif)
	case remote.p != nil && local.typ == FILE:
		return fail("local FILE descriptors go with this agent's own memory only")
	}
	// Registrations and mappings may have gone since the lists were
	// prepared: their memory is read below under the locks that free it.
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, l := range []*Dlist{local, remote} {
		for _, g := range l.regs {
			if g != nil && g.dead {
				return nil, fmt.Errorf("%w: agent %q: %s to %q: a %s registration of the lists was deregistered", ErrNotRegistered, a.name, op, remote.agent, g.typ)
			}
		}
	}
	for _, m := range remote.maps {
		if m != nil && !m.hold() {
			return nil, fmt.Errorf("%w: agent %q: %s to %q: the list's peer memory is gone", ErrInvalidated, a.name, op, remote.agent)
		}
	}
	defer func() {
		for _, m := range remote.maps {
			if m != nil {
				m.drop()
			}
		}
	}()
	r := &XferReq{a: a, op: op, p: remote.p, remote: remote.agent}
	r.chunks = make([]chunk, 0, len(localIdx)) // one per descriptor, often: grown for more
	var total uint64
	seen := map[*region]bool{}
	ck := uint64(a.o.ChunkBytes)
	stream := 0
	for i, li := range localIdx {
		ri := remoteIdx[i]
		if li < 0 || li >= len(local.descs) || ri < 0 || ri >= len(remote.descs) {
			return fail("pair %d: index %d of %d local, %d of %d remote descriptors", i, li, len(local.descs), ri, len(remote.descs))
		}
		ld, rd := local.descs[li], remote.descs[ri]
		if ld.Len != rd.Len {
			return fail("pair %d: local descriptor %d has %d bytes, remote %d has %d", i, li, ld.Len, ri, rd.Len)
		}
		total += ld.Len
		lreg := local.regs[li]
		if !seen[lreg] {
			seen[lreg] = true
			r.regs = append(r.regs, lreg)
		}
		if remote.p == nil { // this agent's memory at both ends: both kept busy
			if g := remote.regs[ri]; !seen[g] {
				seen[g] = true
				r.regs = append(r.regs, g)
			}
		}
		var m *mapping
		var rkey uint32
		if remote.p != nil {
			m = remote.maps[ri]
			if m != nil && !containsMap(r.maps, m) {
				r.maps = append(r.maps, m)
			}
			if local.typ == DRAM && lreg.mr != nil {
				rkey = remote.rkeys[ri]
			}
		}
		// Striped: a descriptor over stripeMin is cut into one piece per
		// stream (at most ChunkBytes each) so all connections carry it.
		// Copies are striped over the workers the same way.
		step := ck
		ways := a.o.Streams
		if remote.p == nil || m != nil {
			ways = a.o.Workers
		}
		if rkey != 0 {
			ways = 1 // one queue pair: pieces of ChunkBytes
		}
		if ld.Len > stripeMin {
			per := (ld.Len + uint64(ways) - 1) / uint64(ways)
			step = min(ck, max(stripeMin, (per+DirectAlignment-1)/DirectAlignment*DirectAlignment))
		}
		for off := uint64(0); off < ld.Len; off += step {
			n := min(step, ld.Len-off)
			c := chunk{req: r, l: mkSide(lreg, local.typ, ld.Sub(off, n))}
			rsub := rd.Sub(off, n)
			switch {
			case remote.p == nil:
				c.lane = a.local
				c.r = mkSide(remote.regs[ri], remote.typ, rsub)
			case m != nil:
				c.lane = a.shm
				c.r = side{mem: m.bytes(rsub), d: rsub}
			case rkey != 0:
				c.lane, c.rtyp, c.r.d, c.rkey = remote.p.rdma, remote.typ, rsub, rkey
				c.mr, c.mrOff = lreg.mr, int(ld.Addr-lreg.addr+off)
			default:
				c.lane, c.rtyp, c.r.d = remote.p.streams[stream%a.o.Streams], remote.typ, rsub
				c.frame = fRead
				if op == WRITE {
					c.frame = fWrite
				}
				stream++
			}
			r.chunks = append(r.chunks, c)
		}
	}
	if notif != nil {
		r.notif = &chunk{req: r, frame: fNotif, msg: append([]byte{}, notif...)}
	}
	r.what = fmt.Sprintf("%s of %d descriptors, %d bytes", op, len(localIdx), total)
	a.pmu.Lock()
	a.reqSeq++
	r.id = a.reqSeq
	a.pmu.Unlock()
	return r, nil
}

func containsMap(ms []*mapping, m *mapping) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}

func mkSide(reg *region, typ MemType, d Desc) side {
	if typ == DRAM {
		return side{mem: reg.bytes(d), d: d}
	}
	return side{reg: reg, d: d}
}

// CreateXferReq prepares both lists and makes a request of all their
// descriptors, pairwise in order (NIXL's createXferReq).
func (a *Agent) CreateXferReq(ctx context.Context, op Op, localType MemType, local []Desc, remoteAgent string, remoteType MemType, remote []Desc, notif []byte) (*XferReq, error) {
	ll, err := a.PrepXferDlist(ctx, "", localType, local)
	if err != nil {
		return nil, err
	}
	rl, err := a.PrepXferDlist(ctx, remoteAgent, remoteType, remote)
	if err != nil {
		return nil, err
	}
	return a.MakeXferReq(op, ll, seq(len(local)), rl, seq(len(remote)), notif)
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func (r *XferReq) fail(err error) error {
	return &Error{Agent: r.remote, Req: r.id, What: r.what, Err: err}
}

// PostXferReq starts r and returns at once (InProgress), or with Done
// when r was only memory copies small enough to do here, or with Failed
// and the error when r cannot start (its peer is lost or invalidated, a
// local registration was deregistered, the agent closed, r still in
// progress or released); XferStatus and Wait then report the same error.
func (a *Agent) PostXferReq(r *XferReq) (Status, error) {
	if r.a != a {
		return Failed, fmt.Errorf("%w: agent %q: request %d belongs to agent %q", ErrBadRequest, a.name, r.id, r.a.name)
	}
	switch st := Status(r.state.Load()); {
	case st == released:
		return Failed, r.fail(fmt.Errorf("%w: released", ErrBadRequest))
	case st == InProgress || !r.state.CompareAndSwap(int32(st), int32(InProgress)):
		return Failed, r.fail(fmt.Errorf("%w: posted while in progress or released", ErrBadRequest))
	}
	// Close waits for posts in progress before it unmaps memory.
	a.postMu.RLock()
	defer a.postMu.RUnlock()
	if a.isClosed() {
		return r.failPost(ErrClosed)
	}
	if r.p != nil {
		if err := r.p.usable(); err != nil {
			return r.failPost(err)
		}
	}
	for i, m := range r.maps {
		if !m.hold() {
			for _, h := range r.maps[:i] {
				h.drop()
			}
			return r.failPost(fmt.Errorf("%w: agent %q", ErrInvalidated, r.remote))
		}
	}
	// The local registrations stay busy (DeregisterMem refuses) until the
	// request ends; one deregistered since MakeXferReq fails it here.
	a.mu.RLock()
	for _, g := range r.regs {
		if g.dead {
			a.mu.RUnlock()
			for _, m := range r.maps {
				m.drop()
			}
			return r.failPost(fmt.Errorf("%w: agent %q: a local %s registration of the request was deregistered", ErrNotRegistered, a.name, g.typ))
		}
	}
	for _, g := range r.regs {
		g.busy.Add(1)
	}
	a.mu.RUnlock()
	r.mu.Lock()
	r.err = nil
	r.done = make(chan struct{})
	r.mu.Unlock()
	r.remaining.Store(int64(len(r.chunks)))
	r.sortChunks()
	if a.rec != nil {
		r.postAt = time.Now()
	}
	// A request may use several lanes (a peer's Alloc region mapped,
	// another of its regions over TCP or RDMA).
	for _, g := range r.lanes {
		g.l.post(g.cs)
	}
	return a.XferStatus(r)
}

// failPost ends a post that could not start: r is Failed with err, and
// Wait and XferStatus say so.
func (r *XferReq) failPost(err error) (Status, error) {
	e := r.fail(err)
	r.mu.Lock()
	r.err = e
	r.done = make(chan struct{})
	close(r.done)
	r.state.Store(int32(Failed))
	r.mu.Unlock()
	r.a.ctr.failed.Add(1)
	return Failed, e
}

// laneGroup is a request's chunks on one lane, in request order.
type laneGroup struct {
	l  lane
	cs []*chunk
}

// sortChunks makes, once, the lists PostXferReq hands out: the chunks by
// lane, the lanes that may copy in the caller last.
func (r *XferReq) sortChunks() {
	if r.lanes != nil {
		return
	}
	for i := range r.chunks {
		c := &r.chunks[i]
		g := slices.IndexFunc(r.lanes, func(g laneGroup) bool { return g.l == c.lane })
		if g < 0 {
			g = len(r.lanes)
			r.lanes = append(r.lanes, laneGroup{l: c.lane})
		}
		r.lanes[g].cs = append(r.lanes[g].cs, c)
	}
	var names []string
	for _, g := range r.lanes {
		if n := g.l.path(); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	r.path = strings.Join(names, "+")
	for i := range r.chunks {
		r.bytes += int64(r.chunks[i].l.d.Len)
	}
	slices.SortStableFunc(r.lanes, func(a, b laneGroup) int {
		switch {
		case a.l.inline() == b.l.inline():
			return 0
		case a.l.inline():
			return 1
		}
		return -1
	})
}

// chunkDone counts a finished chunk; the last one ends the request (after
// its notification, when it has one and all went well).
func (r *XferReq) chunkDone(err error) {
	if err != nil {
		r.mu.Lock()
		if r.err == nil {
			r.err = r.fail(err)
		}
		r.mu.Unlock()
	}
	n := r.remaining.Add(-1)
	if n == 0 && len(r.maps) > 0 {
		// Copies into a same-host peer's memory succeed even when the peer
		// died meanwhile: its stream says whether it is still there.
		if perr := r.p.usable(); perr != nil {
			r.mu.Lock()
			if r.err == nil {
				r.err = r.fail(perr)
			}
			r.mu.Unlock()
		}
	}
	switch {
	case n > 0:
		return
	case n == 0 && r.notif != nil:
		r.mu.Lock()
		ok := r.err == nil
		r.mu.Unlock()
		if ok {
			if r.p == nil {
				if !r.a.pushNotif(r.a.name, append([]byte(nil), r.notif.msg...)) {
					r.mu.Lock()
					r.err = r.fail(fmt.Errorf("%w: notification queue full (%d bytes waiting to be taken)", ErrInUse, maxQueuedNotif))
					r.mu.Unlock()
				}
			} else {
				r.remaining.Store(-1) // the notification's turn: it calls chunkDone once more
				r.p.control(r.notif)
				return
			}
		}
	}
	for _, g := range r.regs {
		g.busy.Add(-1)
	}
	for _, m := range r.maps {
		m.drop()
	}
	r.mu.Lock()
	st := Done
	switch {
	case r.err != nil:
		st = Failed
		r.a.ctr.failed.Add(1)
	case r.chunks != nil: // not a GenNotif
		r.a.ctr.reqs.Add(1)
	}
	if r.a.rec != nil && r.chunks != nil { // before the request is seen done
		e := trace.Event{Name: r.op.String(), Seq: r.id, Bytes: r.bytes, Start: r.postAt, End: time.Now(), Path: r.path, Peer: r.remote}
		if r.err != nil {
			e.Err = r.err.Error()
		}
		r.a.rec.Record(&e)
	}
	r.state.Store(int32(st))
	close(r.done)
	r.mu.Unlock()
}

// XferStatus reports r's state, and the error when it failed (nixl's
// getXferStatus). It never blocks.
func (a *Agent) XferStatus(r *XferReq) (Status, error) {
	st := Status(r.state.Load())
	if st == released {
		return Failed, r.fail(fmt.Errorf("%w: released", ErrBadRequest))
	}
	if st == Failed {
		r.mu.Lock()
		defer r.mu.Unlock()
		return st, r.err
	}
	return st, nil
}

// Wait waits until r is done (nil) or failed (its error), or ctx is done
// (ctx's error; r goes on).
func (r *XferReq) Wait(ctx context.Context) error {
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	if done == nil {
		return r.fail(fmt.Errorf("%w: waited on before it was posted", ErrBadRequest))
	}
	// Spin briefly (yielding) before sleeping: a transfer often ends
	// within microseconds, and waking a parked goroutine costs more.
	for start := time.Now(); time.Since(start) < waitSpin && ctx.Err() == nil; runtime.Gosched() {
		select {
		case <-done:
			return r.result()
		default:
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		return r.fail(fmt.Errorf("still in progress: %w", ctx.Err()))
	}
	return r.result()
}

// waitSpin is how long Wait polls before it sleeps.
const waitSpin = 50 * time.Microsecond

func (r *XferReq) result() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// ReleaseXferReq releases r; it fails with ErrInUse while r is in
// progress (Wait for it first).
func (a *Agent) ReleaseXferReq(r *XferReq) error {
	for {
		switch st := Status(r.state.Load()); {
		case st == InProgress:
			return r.fail(fmt.Errorf("%w: release while in progress", ErrInUse))
		case st == released:
			return nil
		case r.state.CompareAndSwap(int32(st), int32(released)):
			return nil
		}
	}
}
