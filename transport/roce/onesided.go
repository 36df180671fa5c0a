package roce

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/rdma/qp"
	"github.com/goccl/goccl/transport"
)

// OneSided is an RC queue pair for one-sided operations on memory a peer
// exposed (a symmetric-memory window): RDMA WRITE for puts, READ for gets,
// FETCH_ADD and aligned 8-byte WRITEs for signals. The peer's CPU takes no
// part. Operations execute at the peer in the order they were posted (RC
// delivers and executes requests in PSN order), so a signal posted after a
// put lands after the put's bytes.
//
// Writes are staged: the source is copied into a registered staging ring
// and the call returns (the source may be reused at once); Quiet waits
// until the peer has acknowledged everything posted. A OneSided is safe
// for use by several goroutines; they are serialized.
type OneSided struct {
	dom   *Domain
	peer  int
	qp    *rdma.QP
	cq    *rdma.CQ
	stage *rdma.MR

	opMu   sync.Mutex // one operation allocates and posts at a time
	mu     sync.Mutex
	head   uint64   // staging bytes allocated (monotonic; position head % len)
	tail   uint64   // staging bytes free again
	ends   []uint64 // per posted WR, in order: head after its allocation
	posted uint64   // WRs posted
	done   uint64   // WRs completed
	err    error    // why the queue pair failed
	wcs    [32]rdma.WC
}

// StageChunk is the largest piece one WRITE or READ WR moves; larger
// transfers are split.
const StageChunk = 256 << 10

// NewOneSided makes a queue pair towards peer with a staging ring of
// stage bytes (at least 2 × StageChunk).
func (d *Domain) NewOneSided(peer, stage int) (*OneSided, error) {
	stage = max(stage, 2*StageChunk)
	o := &OneSided{dom: d, peer: peer, cq: d.dev.CreateCQ()}
	var err error
	if o.qp, err = d.pd.CreateQP(o.cq, o.cq); err != nil {
		return nil, err
	}
	if o.stage, err = d.pd.RegMR(make([]byte, stage), rdma.AccessLocalWrite); err != nil {
		o.qp.Destroy()
		return nil, err
	}
	return o, nil
}

// Info describes this side for the peer's Connect.
func (o *OneSided) Info() rdma.ConnInfo { return o.qp.LocalInfo(nil) }

// Connect brings the queue pair to RTS towards remote (local is Info's
// result), with the domain's Timeout and RetryCnt. The peer's queue pair
// must reach RTR before the first operation: connect both sides, then
// synchronize.
func (o *OneSided) Connect(local, remote rdma.ConnInfo) error {
	return o.qp.Connect(local, remote, rdma.ConnectOptions{Timeout: o.dom.Timeout, RetryCnt: o.dom.RetryCnt,
		Access: rdma.AccessRemoteWrite | rdma.AccessRemoteRead | rdma.AccessRemoteAtomic})
}

// Expose registers buf for the peers' one-sided operations (remote write,
// read and atomic access) in d; the returned region's Addr and RKey go to
// the peers.
func (d *Domain) Expose(buf []byte) (*rdma.MR, error) {
	return d.pd.RegMR(buf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead|rdma.AccessRemoteAtomic)
}

// Write copies src into staging and posts RDMA WRITEs of it to the peer's
// [addr, addr+len(src)) under rkey. It returns once posted.
func (o *OneSided) Write(ctx context.Context, addr uint64, rkey uint32, src []byte) error {
	o.opMu.Lock()
	defer o.opMu.Unlock()
	for len(src) > 0 {
		n := min(len(src), StageChunk)
		off, err := o.alloc(ctx, n)
		if err != nil {
			return err
		}
		copy(o.stage.Bytes()[off:off+n], src[:n])
		if err := o.post(rdma.SendWR{Opcode: qp.WRWrite, MR: o.stage, Offset: off, Length: n, RemoteAddr: addr, RKey: rkey}); err != nil {
			return err
		}
		src, addr = src[n:], addr+uint64(n)
	}
	return nil
}

// WriteWord writes the 8-byte little-endian v to the peer's aligned word
// at addr, atomically (as an aligned 8-byte WRITE is on a NIC).
func (o *OneSided) WriteWord(ctx context.Context, addr uint64, rkey uint32, v uint64) error {
	o.opMu.Lock()
	defer o.opMu.Unlock()
	off, err := o.alloc(ctx, 8)
	if err != nil {
		return err
	}
	b := o.stage.Bytes()[off : off+8]
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return o.post(rdma.SendWR{Opcode: qp.WRWrite, MR: o.stage, Offset: off, Length: 8, RemoteAddr: addr, RKey: rkey})
}

// FetchAdd posts an atomic FETCH_ADD of add to the peer's aligned word at
// addr (the old value is not returned).
func (o *OneSided) FetchAdd(ctx context.Context, addr uint64, rkey uint32, add uint64) error {
	o.opMu.Lock()
	defer o.opMu.Unlock()
	off, err := o.alloc(ctx, 8)
	if err != nil {
		return err
	}
	return o.post(rdma.SendWR{Opcode: qp.WRFetchAdd, MR: o.stage, Offset: off, Length: 8, RemoteAddr: addr, RKey: rkey, SwapAdd: add})
}

// Read fills dst from the peer's [addr, addr+len(dst)) by RDMA READs and
// returns when it is filled.
func (o *OneSided) Read(ctx context.Context, addr uint64, rkey uint32, dst []byte) error {
	o.opMu.Lock()
	defer o.opMu.Unlock()
	for len(dst) > 0 {
		n := min(len(dst), StageChunk)
		off, err := o.alloc(ctx, n)
		if err != nil {
			return err
		}
		if err := o.post(rdma.SendWR{Opcode: qp.WRRead, MR: o.stage, Offset: off, Length: n, RemoteAddr: addr, RKey: rkey}); err != nil {
			return err
		}
		o.mu.Lock()
		id := o.posted
		o.mu.Unlock()
		if err := o.wait(ctx, "get", func() bool { return o.done >= id }); err != nil {
			return err
		}
		copy(dst[:n], o.stage.Bytes()[off:off+n])
		dst, addr = dst[n:], addr+uint64(n)
	}
	return nil
}

// Quiet waits until the peer has acknowledged every operation posted so
// far (NVSHMEM's quiet: the puts' bytes and the signals are in its memory).
func (o *OneSided) Quiet(ctx context.Context) error {
	o.mu.Lock()
	id := o.posted
	o.mu.Unlock()
	return o.wait(ctx, "quiet", func() bool { return o.done >= id })
}

// Close destroys the queue pair and frees the staging ring.
func (o *OneSided) Close() {
	o.qp.Destroy()
	o.stage.Dereg()
}

// alloc reserves n bytes of staging (8-aligned, contiguous) once the WRs
// using them before have completed, and returns their offset.
func (o *OneSided) alloc(ctx context.Context, n int) (int, error) {
	size := uint64(len(o.stage.Bytes()))
	n = (n + 7) &^ 7
	var off uint64
	fits := func() bool {
		pos := o.head % size
		skip := uint64(0)
		if pos+uint64(n) > size {
			skip = size - pos // wrap: the rest of the ring stays unused this round
		}
		if o.head+skip+uint64(n)-o.tail > size {
			return false
		}
		o.head += skip
		off = o.head % size
		o.head += uint64(n)
		return true
	}
	if err := o.wait(ctx, "staging", fits); err != nil {
		return 0, err
	}
	return int(off), nil
}

// post posts wr (signaled), recording where its staging ends.
func (o *OneSided) post(wr rdma.SendWR) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return o.err
	}
	wr.ID = o.posted
	if err := o.qp.PostSend(wr); err != nil {
		o.err = &transport.PeerError{Peer: o.peer, Op: "RDMA post", Err: err}
		return o.err
	}
	o.posted++
	o.ends = append(o.ends, o.head)
	return nil
}

// progressLocked takes the completions there are.
func (o *OneSided) progressLocked() {
	for {
		n := o.cq.PollInto(o.wcs[:])
		if n == 0 {
			return
		}
		for i := range o.wcs[:n] {
			wc := &o.wcs[i]
			if wc.Status != qp.StatusSuccess && o.err == nil {
				o.err = &transport.LostError{Rank: o.peer, Via: -1,
					Cause: fmt.Errorf("RoCE queue pair %#x: %v (the peer's device stopped acknowledging)", o.qp.QPN(), wc.Status)}
			}
			o.done++
			o.tail, o.ends = o.ends[0], o.ends[1:]
		}
	}
}

// wait calls ready (with o.mu held) until it returns true, the queue pair
// fails, or ctx ends: spinning briefly, then sleeping on the completion
// queue.
func (o *OneSided) wait(ctx context.Context, op string, ready func() bool) error {
	start := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		o.mu.Lock()
		o.progressLocked()
		ok, err := ready(), o.err
		o.mu.Unlock()
		switch {
		case err != nil:
			return err
		case ok:
			return nil
		}
		if err := ctx.Err(); err != nil {
			return &transport.PeerError{Peer: o.peer, Op: op, Err: err}
		}
		if time.Since(start) < spin {
			runtime.Gosched()
			continue
		}
		// Another goroutine may take the CQ's signal: look again after 1 ms.
		if timer == nil {
			timer = time.NewTimer(time.Millisecond)
		} else {
			timer.Reset(time.Millisecond)
		}
		select {
		case <-o.cq.Ready():
		case <-ctx.Done():
		case <-timer.C:
		}
	}
}
