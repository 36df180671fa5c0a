// Package symm is symmetric memory: a window of the same size allocated
// collectively on every rank, which any rank reads and writes one-sidedly
// (the NVSHMEM / torch SymmetricMemory idea). Each rank's window is a data
// area and a signal pad of 64-bit words; a rank puts bytes into a peer's
// data area, gets bytes from it, and sets or adds to a peer's signal word,
// and waits on its own signal words.
//
// The path to a peer follows the communicator's link to it:
//   - on one host (a shared-memory link) every rank maps every other rank's
//     window, a file in /dev/shm: a put or a get is a copy, a signal a CPU
//     atomic on the peer's word followed by a futex wake-up;
//   - across hosts over soft RoCE (GOCCL_NET=roce) the window is a memory
//     region with remote write, read and atomic access, and each pair of
//     ranks has a queue pair for it: a put is RDMA WRITE (staged, returns
//     once posted), a get RDMA READ, a SET signal an aligned 8-byte WRITE
//     and an ADD signal an atomic FETCH_ADD, all executed at the peer in
//     posting order;
//   - a peer reached over TCP only has no one-sided path: New fails
//     naming it.
//
// Ordering: a rank's puts and signals to one peer land in the order issued
// (copies in program order on one host; one RC queue pair across hosts), so
// a consumer that sees a signal sees the puts issued before it. Quiet waits
// until everything this rank issued has landed at every peer.
package symm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/transport/roce"
	"github.com/goccl/goccl/transport/shm"
)

// Path is how this rank reaches a peer's window.
type Path uint8

const (
	PathNone Path = iota // no one-sided path (TCP)
	PathSelf             // this rank
	PathShm              // mapped: same host
	PathRoCE             // queue pair: soft RoCE
)

func (p Path) String() string {
	return [...]string{"none", "self", "shm", "roce"}[p]
}

// SignalOp is what a signal does to the peer's word.
type SignalOp uint8

const (
	SignalSet SignalOp = iota // the word becomes the value (NVSHMEM_SIGNAL_SET)
	SignalAdd                 // the value is added to the word (NVSHMEM_SIGNAL_ADD)
)

// Cmp is WaitSignal's comparison of the word with the value
// (NVSHMEM_CMP_*).
type Cmp uint8

const (
	CmpEQ Cmp = iota
	CmpNE
	CmpGT
	CmpGE
	CmpLT
	CmpLE
)

func (c Cmp) holds(v, x uint64) bool {
	switch c {
	case CmpEQ:
		return v == x
	case CmpNE:
		return v != x
	case CmpGT:
		return v > x
	case CmpGE:
		return v >= x
	case CmpLT:
		return v < x
	case CmpLE:
		return v <= x
	}
	return false
}

// Valid reports whether c is one of the comparisons.
func (c Cmp) Valid() bool { return c <= CmpLE }

// Params are what New needs from the communicator.
type Params struct {
	Rank, Size int
	Bytes      int // data bytes per rank (> 0)
	Signals    int // signal words per rank (> 0)
	Paths      []Path
	// PeerExited, when set for a shared-memory peer, reports that its
	// process is gone (waits check it before they sleep).
	PeerExited []func() bool
	ShmDir     string       // "": /dev/shm
	Dom        *roce.Domain // the RoCE domain (RoCE peers)
	// AllGather returns every rank's mine (all the same length), in rank
	// order; Barrier returns once every rank has called it. Both are
	// collectives of the communicator.
	AllGather func(ctx context.Context, mine []byte) ([]byte, error)
	Barrier   func(ctx context.Context) error
	// Failed returns why the communicator can no longer be used (a lost
	// rank, an abort), or nil: a wait gives up with it.
	Failed func() error
}

// Layout of a rank's window: a 64-byte header (the doorbell a waiter
// sleeps on, the count of sleepers), the signal words, then the data, each
// part 64-byte aligned.
const (
	offDoorbell = 0
	offSleepers = 4
	headerBytes = 64
)

// Window is one rank's view of a symmetric-memory window.
type Window struct {
	p        Params
	sigOff   int // offset of the signal words
	dataOff  int // offset of the data
	total    int // bytes of one rank's window
	mem      []byte
	seg      *shm.Segment   // this rank's (when any peer maps it)
	peerSeg  []*shm.Segment // mapped windows of shared-memory peers
	mr       *rdma.MR       // this rank's window as a region (RoCE peers)
	qps      []*roce.OneSided
	raddr    []uint64
	rkey     []uint32
	notify   <-chan struct{} // the device's notice of remote writes (RoCE peers, no shared-memory ones)
	waiters  atomic.Int32    // WaitSignal calls sleeping on notify
	done     chan struct{}
	wg       sync.WaitGroup
	freeOnce sync.Once
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// record is what each rank publishes: its segment's path, its region, and
// per peer the queue pair the peer connects to.
const (
	pathMax   = 160
	recHead   = pathMax + 16
	recPerQP  = 32
	noPathLen = 0xff
)

func recordSize(size int) int { return recHead + recPerQP*size }

// New makes this rank's window and joins the others' (a collective: every
// rank calls it with the same sizes). On failure it releases what it made.
func New(ctx context.Context, p Params) (w *Window, err error) {
	if p.Bytes <= 0 || p.Signals <= 0 {
		return nil, fmt.Errorf("window of %d bytes and %d signals: both must be positive", p.Bytes, p.Signals)
	}
	w = &Window{p: p, sigOff: headerBytes, done: make(chan struct{})}
	w.dataOff = w.sigOff + roundUp(8*p.Signals, 64)
	w.total = w.dataOff + roundUp(p.Bytes, 64)
	w.peerSeg = make([]*shm.Segment, p.Size)
	w.qps = make([]*roce.OneSided, p.Size)
	w.raddr = make([]uint64, p.Size)
	w.rkey = make([]uint32, p.Size)
	defer func() {
		if err != nil {
			w.release()
		}
	}()
	var shmPeers, rocePeers bool
	for r, path := range p.Paths {
		switch {
		case path == PathNone:
			return nil, fmt.Errorf("no one-sided path to peer %d (its link is neither shared memory nor RoCE)", r)
		case path == PathShm:
			shmPeers = true
		case path == PathRoCE:
			rocePeers = true
			if p.Dom == nil {
				return nil, fmt.Errorf("peer %d is over RoCE but this rank has no RoCE domain", r)
			}
		}
	}
	if shmPeers {
		var id [8]byte
		rand.Read(id[:])
		name := fmt.Sprintf("goccl-win-%d-%s", p.Rank, hex.EncodeToString(id[:]))
		if w.seg, err = shm.CreateSegment(p.ShmDir, name, int64(w.total)); err != nil {
			return nil, err
		}
		w.mem = w.seg.Bytes()
	} else {
		w.mem = alignedBytes(w.total)
	}
	rec := make([]byte, recordSize(p.Size))
	if w.seg != nil {
		path := w.seg.Path()
		if len(path) >= pathMax {
			return nil, fmt.Errorf("shared-memory path %q is longer than %d bytes", path, pathMax-1)
		}
		rec[0] = byte(len(path))
		copy(rec[1:], path)
	} else {
		rec[0] = noPathLen
	}
	var infos []rdma.ConnInfo
	if rocePeers {
		if w.mr, err = p.Dom.Expose(w.mem); err != nil {
			return nil, err
		}
		binary.LittleEndian.PutUint64(rec[pathMax:], w.mr.Addr())
		binary.LittleEndian.PutUint32(rec[pathMax+8:], w.mr.RKey())
		infos = make([]rdma.ConnInfo, p.Size)
		for r, path := range p.Paths {
			if path != PathRoCE {
				continue
			}
			if w.qps[r], err = p.Dom.NewOneSided(r, 1<<20); err != nil {
				return nil, err
			}
			infos[r] = w.qps[r].Info()
			putConnInfo(rec[recHead+recPerQP*r:], infos[r])
		}
	}
	all, err := p.AllGather(ctx, rec)
	if err != nil {
		return nil, err
	}
	if len(all) != len(rec)*p.Size {
		return nil, fmt.Errorf("window exchange returned %d bytes, want %d", len(all), len(rec)*p.Size)
	}
	for r, path := range p.Paths {
		theirs := all[r*len(rec) : (r+1)*len(rec)]
		switch path {
		case PathShm:
			n := int(theirs[0])
			if n == noPathLen || n >= pathMax {
				return nil, fmt.Errorf("peer %d published no shared-memory window", r)
			}
			if w.peerSeg[r], err = shm.OpenSegment(string(theirs[1:1+n]), int64(w.total)); err != nil {
				return nil, fmt.Errorf("peer %d's window: %w", r, err)
			}
		case PathRoCE:
			w.raddr[r] = binary.LittleEndian.Uint64(theirs[pathMax:])
			w.rkey[r] = binary.LittleEndian.Uint32(theirs[pathMax+8:])
			remote := getConnInfo(theirs[recHead+recPerQP*p.Rank:])
			if remote.QPN == 0 && w.rkey[r] == 0 {
				return nil, fmt.Errorf("peer %d published no RoCE queue pair for rank %d", r, p.Rank)
			}
			if err := w.qps[r].Connect(infos[r], remote); err != nil {
				return nil, fmt.Errorf("peer %d's window: %w", r, err)
			}
		}
	}
	// Every peer has mapped this rank's segment and brought its queue
	// pairs to RTR once everyone is past this barrier.
	if err := p.Barrier(ctx); err != nil {
		return nil, err
	}
	if w.seg != nil {
		w.seg.Unlink()
	}
	switch {
	case w.mr != nil && w.seg != nil:
		// Peers of both kinds: the device's notices ring the doorbell the
		// shared-memory peers ring, and waits sleep on it.
		notify := w.mr.Notify()
		w.wg.Add(1)
		go w.forward(notify)
	case w.mr != nil:
		// RoCE peers only: waits sleep on the device's notice itself.
		w.notify = w.mr.Notify()
	}
	return w, nil
}

// alignedBytes returns n zeroed bytes starting at a 64-byte boundary.
func alignedBytes(n int) []byte {
	b := make([]byte, n+64)
	off := (64 - int(uintptr(unsafe.Pointer(&b[0]))%64)) % 64
	return b[off : off+n : off+n]
}

func putConnInfo(b []byte, ci rdma.ConnInfo) {
	binary.LittleEndian.PutUint32(b, ci.QPN)
	binary.LittleEndian.PutUint32(b[4:], ci.PSN)
	copy(b[8:24], ci.GID[:])
	binary.LittleEndian.PutUint16(b[24:], ci.Port)
	binary.LittleEndian.PutUint32(b[26:], uint32(ci.MTU))
}

func getConnInfo(b []byte) rdma.ConnInfo {
	var ci rdma.ConnInfo
	ci.QPN = binary.LittleEndian.Uint32(b)
	ci.PSN = binary.LittleEndian.Uint32(b[4:])
	copy(ci.GID[:], b[8:24])
	ci.Port = binary.LittleEndian.Uint16(b[24:])
	ci.MTU = int(binary.LittleEndian.Uint32(b[26:]))
	return ci
}

// forward turns the device's notice that a peer wrote into this window
// into a doorbell ring, so one kind of wait serves both kinds of peer.
func (w *Window) forward(notify <-chan struct{}) {
	defer w.wg.Done()
	for {
		select {
		case <-notify:
			ring(w.mem)
		case <-w.done:
			return
		}
	}
}

func u32(mem []byte, off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&mem[off])) }
func u64(mem []byte, off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&mem[off])) }

// ring bumps the doorbell of the window in mem and wakes its sleepers.
func ring(mem []byte) {
	u32(mem, offDoorbell).Add(1)
	if u32(mem, offSleepers).Load() != 0 {
		shm.FutexWake(u32(mem, offDoorbell))
	}
}

// Local is this rank's data area.
func (w *Window) Local() []byte { return w.mem[w.dataOff : w.dataOff+w.p.Bytes : w.dataOff+w.p.Bytes] }

// Bytes is the size of each rank's data area.
func (w *Window) Bytes() int { return w.p.Bytes }

// Signals is the number of signal words per rank.
func (w *Window) Signals() int { return w.p.Signals }

// PathTo is how this rank reaches peer.
func (w *Window) PathTo(peer int) Path { return w.p.Paths[peer] }

// ErrRange is wrapped by the errors of calls whose peer, offset, length or
// signal index is out of range.
var ErrRange = errors.New("out of range")

func (w *Window) checkPeer(peer int) error {
	if peer < 0 || peer >= w.p.Size {
		return fmt.Errorf("peer %d: %w (world size %d)", peer, ErrRange, w.p.Size)
	}
	return nil
}

func (w *Window) checkSpan(peer, off, n int) error {
	if err := w.checkPeer(peer); err != nil {
		return err
	}
	if off < 0 || n < 0 || off > w.p.Bytes || n > w.p.Bytes-off {
		return fmt.Errorf("peer %d: [%d, +%d) is %w of a %d-byte window", peer, off, n, ErrRange, w.p.Bytes)
	}
	return nil
}

func (w *Window) checkSignal(sig int) error {
	if sig < 0 || sig >= w.p.Signals {
		return fmt.Errorf("signal %d: %w (window has %d)", sig, ErrRange, w.p.Signals)
	}
	return nil
}

// peerMem is the mapped window of a peer on this host, or this rank's.
func (w *Window) peerMem(peer int) []byte {
	if peer == w.p.Rank {
		return w.mem
	}
	return w.peerSeg[peer].Bytes()
}

// Put copies src into peer's data area at off. It returns when src may be
// reused; the bytes land at the peer before any later signal to it.
func (w *Window) Put(ctx context.Context, peer, off int, src []byte) error {
	if err := w.checkSpan(peer, off, len(src)); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	if w.p.Paths[peer] == PathRoCE {
		return w.qps[peer].Write(ctx, w.raddr[peer]+uint64(w.dataOff+off), w.rkey[peer], src)
	}
	copy(w.peerMem(peer)[w.dataOff+off:], src)
	return nil
}

// Get copies peer's data area at off into dst and returns when dst is
// filled.
func (w *Window) Get(ctx context.Context, peer, off int, dst []byte) error {
	if err := w.checkSpan(peer, off, len(dst)); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	if w.p.Paths[peer] == PathRoCE {
		return w.qps[peer].Read(ctx, w.raddr[peer]+uint64(w.dataOff+off), w.rkey[peer], dst)
	}
	copy(dst, w.peerMem(peer)[w.dataOff+off:])
	return nil
}

// Signal sets or adds value to peer's signal word sig, after the puts to
// peer issued before it.
func (w *Window) Signal(ctx context.Context, peer, sig int, op SignalOp, value uint64) error {
	if err := w.checkPeer(peer); err != nil {
		return err
	}
	if err := w.checkSignal(sig); err != nil {
		return err
	}
	off := w.sigOff + 8*sig
	if w.p.Paths[peer] == PathRoCE {
		addr := w.raddr[peer] + uint64(off)
		if op == SignalAdd {
			return w.qps[peer].FetchAdd(ctx, addr, w.rkey[peer], value)
		}
		return w.qps[peer].WriteWord(ctx, addr, w.rkey[peer], value)
	}
	mem := w.peerMem(peer)
	if op == SignalAdd {
		u64(mem, off).Add(value)
	} else {
		u64(mem, off).Store(value)
	}
	ring(mem)
	return nil
}

// SignalValue reads this rank's signal word sig.
func (w *Window) SignalValue(sig int) (uint64, error) {
	if err := w.checkSignal(sig); err != nil {
		return 0, err
	}
	return u64(w.mem, w.sigOff+8*sig).Load(), nil
}

// spin is how long WaitSignal polls before it sleeps.
const spin = 20 * time.Microsecond

// sleepMax bounds each sleep, so that ctx, the communicator's failure and
// exited peers are noticed.
const sleepMax = 5 * time.Millisecond

// WaitSignal waits until this rank's signal word sig compares to value as
// cmp says and returns the word. It gives up when ctx ends, at deadline
// (zero: none; a deadline exceeded is reported as context.DeadlineExceeded),
// when the communicator fails, or when a shared-memory peer's process
// exits.
func (w *Window) WaitSignal(ctx context.Context, deadline time.Time, sig int, cmp Cmp, value uint64) (uint64, error) {
	if err := w.checkSignal(sig); err != nil {
		return 0, err
	}
	if !cmp.Valid() {
		return 0, fmt.Errorf("comparison %d: %w", cmp, ErrRange)
	}
	word := u64(w.mem, w.sigOff+8*sig)
	bell, sleepers := u32(w.mem, offDoorbell), u32(w.mem, offSleepers)
	start := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		d := bell.Load()
		if v := word.Load(); cmp.holds(v, value) {
			return v, nil
		}
		if time.Since(start) < spin {
			runtime.Gosched()
			continue
		}
		if err := w.stopped(ctx, deadline); err != nil {
			return word.Load(), err
		}
		if w.notify != nil {
			w.sleep(word, cmp, value, &timer)
			continue
		}
		sleepers.Add(1)
		shm.FutexWait(bell, d, sleepMax)
		sleepers.Add(^uint32(0))
	}
}

// sleep waits for the device's next notice of a remote write (at most
// sleepMax) unless the word already holds. Of several waiters one takes a
// notice and passes it on.
func (w *Window) sleep(word *atomic.Uint64, cmp Cmp, value uint64, timer **time.Timer) {
	w.waiters.Add(1)
	defer w.waiters.Add(-1)
	if cmp.holds(word.Load(), value) {
		return
	}
	if *timer == nil {
		*timer = time.NewTimer(sleepMax)
	} else {
		(*timer).Reset(sleepMax)
	}
	select {
	case <-w.notify:
		if w.waiters.Load() > 1 {
			w.pass()
		}
	case <-(*timer).C:
	}
	(*timer).Stop()
}

// pass hands a notice on to another waiter.
func (w *Window) pass() {
	// The channel is the device's; it has room for one notice.
	w.mr.Pass()
}

// stopped is why a wait must give up, or nil.
func (w *Window) stopped(ctx context.Context, deadline time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !deadline.IsZero() && time.Now().After(deadline) {
		return context.DeadlineExceeded
	}
	if w.p.Failed != nil {
		if err := w.p.Failed(); err != nil {
			return err
		}
	}
	var gone []string
	for r, exited := range w.p.PeerExited {
		if exited != nil && exited() {
			gone = append(gone, strconv.Itoa(r))
		}
	}
	switch len(gone) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("peer %s: process exited", gone[0])
	}
	return fmt.Errorf("peers %s: processes exited", strings.Join(gone, ", "))
}

// Quiet waits until every put and signal this rank issued has landed at
// its peer.
func (w *Window) Quiet(ctx context.Context) error {
	for _, q := range w.qps {
		if q != nil {
			if err := q.Quiet(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// Free waits for this rank's operations to land, waits for every rank
// (a collective), and releases the window; it must not be used afterwards.
func (w *Window) Free(ctx context.Context) error {
	err := w.Quiet(ctx)
	if berr := w.p.Barrier(ctx); err == nil {
		err = berr
	}
	w.release()
	return err
}

func (w *Window) release() {
	w.freeOnce.Do(func() {
		close(w.done)
		w.wg.Wait()
		for _, q := range w.qps {
			if q != nil {
				q.Close()
			}
		}
		if w.mr != nil {
			w.mr.Dereg()
		}
		for _, s := range w.peerSeg {
			if s != nil {
				s.Close()
			}
		}
		if w.seg != nil {
			w.seg.Unlink()
			w.seg.Close()
		}
	})
}
