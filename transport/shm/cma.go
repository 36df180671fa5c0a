package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/transport"
)

// Single-copy large messages with Cross Memory Attach (process_vm_readv).
//
// A message of at least the ring's CMA threshold does not travel through the
// slots: the sender publishes ONE slot whose metadata holds the header plus a
// descriptor {address, length} of its buffer (the sender's pid is part of the
// handshake below, fixed for the link), and the receiver copies the payload
// once, straight out of the sender's address space, with process_vm_readv:
// into the destination when it only copies, or piece by piece into a per-link
// staging buffer (cmaStageSize, cache-sized) that it then folds into the
// destination with the ReduceFunc. Releasing the slot (advancing head) is the
// completion: the sender's Send waits for it and returns only then, so the
// buffer stays untouched (and, being Go heap memory or foreign memory the
// caller owns, unmoved) while the receiver reads it. Every message says in its
// first slot whether it is copied or CMA, so both kinds interleave freely.
//
// Handshake (per direction, through the header page of that direction's ring):
//
//   - The ring's creator, the receiver, stores its CMA threshold (0: off) at
//     CreateRing (Config.CMAThreshold, GOCCL_SHM_CMA_THRESHOLD, GOCCL_SHM_CMA).
//   - At NewLink the sender, unless CMA is off on either side, stores its pid
//     and the address and (random) value of a probe word it owns, then sets
//     the offer word to "offered" (release); otherwise to "declined".
//   - The receiver probes as soon as it sees the offer (at NewLink, else in
//     its next Recv, at the latest when the sender's first message arrives):
//     it reads the probe word with
//     process_vm_readv and compares the value. Equal: it stores "verified" in
//     the CMA state word; any failure (EPERM from Yama/seccomp/another uid,
//     ESRCH from a different pid namespace, ENOSYS, a foreign value): "unusable".
//   - The sender reads the state word before each large Send: only
//     "verified" selects CMA; "unknown" and "unusable" take the copy path.
//     TrySend never waits, so it refuses ((false, nil)) any message that would
//     go by CMA: the caller sends it with Send from another goroutine.
//
// A read that fails after the handshake (a buffer in a mapping process_vm_readv
// cannot read, EFAULT; EPERM after a credential change) makes the receiver
// refuse the message: if nothing was folded into the destination yet, it sets
// the "refused" flag in the slot and releases it; the sender, seeing the flag
// after the release, sends the same message again through the slots (and on
// EPERM the receiver also marks the state "unusable"). Otherwise, and when the
// sender is gone (ESRCH), the receiver closes the link and fails.
//
// Aborts. The receiver reads in pieces (cmaDirectPiece or the staging size).
// Around each piece it raises the ring's reader-active flag and, with the flag
// up, checks the closed flag: closed means stop. It checks the closed flag once
// more after the last piece, before releasing the slot, and checks its ctx
// between pieces; an interruption in the middle of a message closes the link,
// as for the copy path. A sender whose wait ends without the release (ctx
// expired, link closed by either side) first closes the link, then waits
// (bounded by cmaAbortWait) until the reader-active flag is down, and only
// then returns. Both flags are sequentially consistent atomics, so either the
// receiver sees "closed" before starting a piece, or the sender sees
// "reader active" and waits for that piece to end: once Send has returned an
// error, the receiver never starts another read of the buffer. If the bounded
// wait runs out (a stopped receiver), the receiver may finish a piece that
// raced with the caller reusing the buffer, but then its final closed check
// fails the Recv, so it never delivers such data. When the link closes
// because a deadline expired, a Send or Recv whose own ctx has expired too
// reports the ctx error rather than ErrClosed: the close is a consequence.
//
// The sender keeps buf referenced from the link until the receiver is done
// (and runtime.KeepAlive after), which also makes buf escape to the heap: a
// goroutine stack, which may move, never holds a buffer being read.
//
// Consequence for callers: a CMA-size Send completes only once the receiver
// has received the message (rendezvous), like a message larger than the ring
// on the copy path.

// DefaultCMAThreshold is the smallest message sent by CMA when
// Config.CMAThreshold is 0.
//
// Chosen by measurement on the reference machine (2 vCPUs, Linux 6.18 VM),
// where process_vm_readv copies at 0.4x (256 KiB, cache-resident) to 0.75x
// (16 MiB) of the speed of Go's memmove, because the kernel pins and copies
// one 4 KiB page at a time: there the two copies of the ring path, done in
// parallel by sender and receiver (and inline through TrySend), are faster
// than one CMA copy plus the rendezvous for every size below 16 MiB
// (2-rank AllGather 1.3-2x, pipelined Broadcast 2-3.5x slower with a 64 KiB
// threshold). From 16 MiB on the two paths are within the run-to-run noise
// (about 10%) of each other, and CMA uses about 15% less CPU. Hosts with faster process_vm_readv (bare metal, huge
// pages) may gain from a lower GOCCL_SHM_CMA_THRESHOLD.
const DefaultCMAThreshold = 16 << 20

// CMADisabled as Config.CMAThreshold turns CMA off for a ring.
const CMADisabled = -1

// Tuning of the receiver side.
const (
	// cmaDirectPiece bounds one process_vm_readv straight into the
	// destination, so that closure is noticed between pieces and an aborting
	// sender never waits for more than one piece.
	cmaDirectPiece = 1 << 20
	// cmaStageSize is the staging buffer of a reducing receiver: the piece
	// read with process_vm_readv and then folded while still in cache.
	cmaStageSize = 256 << 10
	// cmaAbortWait bounds how long an aborting side waits for a peer in the
	// middle of a piece that reads or writes its memory (a piece takes about
	// 100 µs; the margin covers a peer descheduled mid-copy on a loaded
	// host, since a write that lands after the wait could corrupt a buffer
	// the caller has reused).
	cmaAbortWait = time.Second
)

// Values of the offer word (producer) and of the state word (consumer).
const (
	cmaOffered  = 1
	cmaDeclined = 2

	cmaOK     = 1
	cmaFailed = 2
)

// Counters and hooks for tests.
var (
	cmaRecvs      atomic.Uint64 // messages received by CMA
	cmaRefused    atomic.Uint64 // CMA messages refused by a receiver (resent by copy)
	testProbeFail atomic.Bool   // make every probe fail
	testReadFails atomic.Int32  // make that many CMA message reads fail with EFAULT
)

// cmaEnvEnabled reports whether GOCCL_SHM_CMA leaves CMA on in this process
// (a value config does not parse leaves it on; Init refuses such values).
func cmaEnvEnabled() bool {
	on, err := config.ShmCMA.Bool()
	return on || err != nil
}

// cmaThreshold is the threshold a new ring records (0: CMA off), from the
// normalized Config value and the environment.
func cmaThreshold(cfg int) (uint64, error) {
	if !cmaEnvEnabled() {
		return 0, nil
	}
	if v, ok, err := config.ShmCMAThreshold.Size(); err != nil {
		return 0, fmt.Errorf("shm: %w", err)
	} else if ok {
		cfg = int(min(v, math.MaxInt32))
	}
	if cfg <= 0 {
		return 0, nil
	}
	return uint64(cfg), nil
}

// initCMA runs the sender's half of the handshake on out and, when the peer
// already offered, the receiver's half on in.
func (l *link) initCMA() {
	le := binary.LittleEndian
	env := cmaEnvEnabled()
	out := l.out
	if th := le.Uint64(out.mem[offCMAThreshold:]); env && th > 0 && th <= math.MaxInt {
		l.cmaMin = int(th)
		l.probe = rand.Uint64() | 1
		le.PutUint64(out.mem[offCMAPid:], uint64(os.Getpid()))
		le.PutUint64(out.mem[offCMAProbeAddr:], uint64(uintptr(unsafe.Pointer(&l.probe))))
		le.PutUint64(out.mem[offCMAProbeValue:], l.probe)
		out.cmaOffer.Store(cmaOffered) // release: the fields above first
	} else {
		out.cmaOffer.Store(cmaDeclined)
	}
	if !env || le.Uint64(l.in.mem[offCMAThreshold:]) == 0 {
		l.cmaProbed = true
		l.in.cmaState.Store(cmaFailed)
		return
	}
	l.probeCMA()
}

// probeCMA verifies, once the sender has offered CMA, that this process can
// read the sender's memory, and publishes the result for the sender.
// Receiver-owned.
func (l *link) probeCMA() {
	in := l.in
	switch in.cmaOffer.Load() {
	case 0:
		return // the sender's NewLink has not run yet: try again at the next Recv
	case cmaOffered:
	default:
		l.cmaProbed = true
		in.cmaState.Store(cmaFailed)
		return
	}
	l.cmaProbed = true
	le := binary.LittleEndian
	pid := le.Uint64(in.mem[offCMAPid:])
	addr := le.Uint64(in.mem[offCMAProbeAddr:])
	want := le.Uint64(in.mem[offCMAProbeValue:])
	var got [8]byte
	ok := pid > 0 && pid <= math.MaxInt32 && !testProbeFail.Load() &&
		readRemote(int(pid), got[:], addr) == nil && le.Uint64(got[:]) == want
	if !ok {
		in.cmaState.Store(cmaFailed)
		return
	}
	l.cmaPid = int(pid)
	l.cmaOK = true
	in.cmaState.Store(cmaOK)
}

// useCMA reports whether a message of n bytes goes by CMA now. Sender-owned.
func (l *link) useCMA(n int) bool {
	return l.cmaMin > 0 && n >= l.cmaMin && l.out.cmaState.Load() == cmaOK
}

// readRemote reads len(dst) bytes at addr in process pid into dst (see
// remoteCopy).
func readRemote(pid int, dst []byte, addr uint64) error { return remoteCopy(pid, dst, addr, false) }

// remoteCopy copies between buf and addr in process pid with
// process_vm_writev (write) or process_vm_readv, looping over partial
// copies and EINTR/EAGAIN.
func remoteCopy(pid int, buf []byte, addr uint64, write bool) error {
	retries := 0
	for len(buf) > 0 {
		local := [1]unix.Iovec{{Base: &buf[0]}}
		local[0].SetLen(len(buf))
		remote := [1]unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}
		var n int
		var err error
		if write {
			n, err = unix.ProcessVMWritev(pid, local[:], remote[:], 0)
		} else {
			n, err = unix.ProcessVMReadv(pid, local[:], remote[:], 0)
		}
		if err != nil {
			if (err == unix.EINTR || err == unix.EAGAIN) && retries < 1000 {
				retries++
				continue
			}
			return err
		}
		if n <= 0 {
			return unix.EFAULT // nothing accessible at addr
		}
		buf = buf[n:]
		addr += uint64(n)
	}
	return nil
}

// sendCMA publishes buf as a CMA descriptor and waits until the receiver has
// read it (or refused it: then it goes through the slots).
func (l *link) sendCMA(ctx context.Context, h *transport.Header, buf []byte) error {
	r := l.out
	if r.closed.Load() != 0 {
		return l.errClosed("send")
	}
	if l.sTail-l.sHead >= uint64(r.slots) {
		if err := l.wait(ctx, condSlotFree); err != nil {
			return err // nothing published
		}
	}
	le := binary.LittleEndian
	meta, desc := r.slot(l.sTail)
	le.PutUint32(meta[0:], 0)
	le.PutUint32(meta[4:], flagFirst|flagCMA)
	h.Encode(meta[8:])
	le.PutUint64(desc[0:], uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))))
	le.PutUint64(desc[8:], uint64(len(buf)))
	// Held by the link until the receiver is done: keeps buf alive and makes
	// it escape, so a caller's buffer is never on a (movable) goroutine stack.
	l.pinned = buf
	l.sTail++
	r.tail.Store(l.sTail) // release: descriptor before the counter
	if r.recvWaiting.Load() != 0 && r.recvWaiting.Swap(0) != 0 {
		r.dataWord.Add(1)
		futexWake(r.dataWord, 1)
	}
	err := l.wait(ctx, condReleased)
	if err != nil {
		// The receiver may be reading buf right now: close the link so it
		// starts no other piece, and let the current one finish.
		l.shutdown(-1)
		l.waitReaderIdle()
	}
	l.pinned = nil
	runtime.KeepAlive(buf)
	if err != nil {
		return err
	}
	if le.Uint32(meta[4:])&flagCMANack != 0 {
		return l.publish(ctx, h, buf) // the receiver could not read it: copy
	}
	return nil
}

// waitReaderIdle waits, for at most cmaAbortWait, until the receiver is not
// inside a read of this side's memory. The link must already be closed, so
// that the receiver starts no further read.
func (l *link) waitReaderIdle() {
	r := l.out
	var deadline time.Time
	for i := 0; r.readerActive.Load() != 0; i++ {
		if i < spinIters {
			continue
		}
		if i == spinIters {
			deadline = time.Now().Add(cmaAbortWait)
		}
		if time.Now().After(deadline) {
			return
		}
		runtime.Gosched()
		time.Sleep(20 * time.Microsecond)
	}
}

// recvCMA receives the CMA message whose slot has metadata meta (its header
// checked by Recv) and descriptor desc (the slot's payload area) into buf.
// retry reports that it refused the message and released its slot: the
// sender now sends it again through the slots.
func (l *link) recvCMA(ctx context.Context, meta, desc, buf []byte, reduce transport.ReduceFunc) (retry bool, err error) {
	r := l.in
	le := binary.LittleEndian
	addr, length := le.Uint64(desc[0:]), le.Uint64(desc[8:])
	n := len(buf)
	if length != uint64(n) {
		l.shutdown(-1)
		return false, l.errCorrupt("CMA descriptor of %d bytes for a %d-byte message", length, n)
	}
	if !l.cmaOK {
		return true, l.refuseCMA(meta, false)
	}
	if testReadFails.Load() > 0 && testReadFails.Add(-1) >= 0 {
		return true, l.refuseCMA(meta, false)
	}
	piece := cmaDirectPiece
	if reduce != nil {
		if l.stage == nil {
			l.stage = make([]byte, cmaStageSize) // once per link
		}
		piece = len(l.stage)
	}
	for off := 0; off < n; off += piece {
		m := min(piece, n-off)
		if off > 0 && ctx.Err() != nil {
			l.shutdown(-1)
			return false, l.errCtx(ctx, "recv")
		}
		dst := buf[off : off+m]
		if reduce != nil {
			dst = l.stage[:m]
		}
		r.readerActive.Store(1)
		if r.closed.Load() != 0 {
			r.readerActive.Store(0)
			l.shutdown(-1)
			return false, l.errClosed("recv")
		}
		err := readRemote(l.cmaPid, dst, addr+uint64(off))
		r.readerActive.Store(0)
		if err != nil {
			if !errors.Is(err, unix.ESRCH) && (reduce == nil || off == 0) {
				// Nothing of the message is in buf yet (or only copied
				// bytes that the resend overwrites).
				return true, l.refuseCMA(meta, errors.Is(err, unix.EPERM))
			}
			if errors.Is(err, unix.ESRCH) {
				// The sender's process is gone.
				l.peerDead.Store(true)
				l.shutdown(l.peer)
				return false, &transport.PeerError{Peer: l.peer, Op: "recv", Err: &transport.LostError{Rank: l.peer, Via: -1,
					Cause: fmt.Errorf("process %d gone (process_vm_readv: %w)", l.cmaPid, err)}}
			}
			l.shutdown(-1)
			return false, &transport.PeerError{Peer: l.peer, Op: "recv",
				Err: fmt.Errorf("shm: reading %d bytes from pid %d with process_vm_readv: %w", m, l.cmaPid, err)}
		}
		if reduce != nil {
			reduce(buf[off:off+m], dst)
		}
	}
	if r.closed.Load() != 0 { // the sender gave up: buf may hold a torn read
		l.shutdown(-1)
		return false, l.errClosed("recv")
	}
	cmaRecvs.Add(1)
	l.release()
	return false, nil
}

// refuseCMA marks the CMA message in meta as refused and releases its slot,
// so that the sender sends it again by copy; permanent also stops the sender
// from using CMA at all. It returns nil (for recvCMA's convenience).
func (l *link) refuseCMA(meta []byte, permanent bool) error {
	if permanent {
		l.cmaOK = false
		l.in.cmaState.Store(cmaFailed)
	}
	flags := binary.LittleEndian.Uint32(meta[4:])
	binary.LittleEndian.PutUint32(meta[4:], flags|flagCMANack)
	cmaRefused.Add(1)
	l.release() // release: the flag before the counter
	return nil
}
