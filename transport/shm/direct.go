package shm

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// One-sided reads and writes of the peer's memory (transport.PeerMemory) with
// Cross Memory Attach. They reuse the CMA handshake of cma.go: a link can read its
// peer's memory when the peer offered CMA on this direction's ring and this
// side's probe read of the peer's probe word succeeded (the verified pid is
// the one read from). A Region is the buffer's virtual address and length in
// the exposing process.
//
// Aborts follow the protocol of CMA messages: the accessing side raises the
// ring's reader-active flag around every piece (read or write) and checks the
// closed flag with it up;
// the exposing side, when it gives up (Abort, Close), sets the closed flag and
// then waits up to cmaAbortWait (1 s) for the flag to drop. A read that
// overlapped a close may be torn: the access checks the closed flag after its
// last piece and fails then. A write can only land after the exposing side
// gave up if the writing process stalled inside one piece (about 100 µs of
// copying) for longer than cmaAbortWait.

var _ transport.PeerMemory = (*link)(nil)

// PeerReadable reports whether this side verified that it can read the
// peer's memory. It runs the probe if the peer's offer has arrived and the
// probe has not run yet (receiver-owned state: not concurrently with Recv).
func (l *link) PeerReadable() bool {
	if !l.enter() {
		return false
	}
	defer l.leave()
	if !l.cmaProbed {
		l.probeCMA()
	}
	return l.cmaOK
}

// Expose returns buf's address and length in this process.
func (l *link) Expose(buf []byte) transport.Region {
	return transport.Region{Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), Len: uint64(len(buf))}
}

// ReadPeer copies len(dst) bytes at offset off of the peer's region reg into
// dst with process_vm_readv, in pieces of at most cmaDirectPiece bytes.
func (l *link) ReadPeer(ctx context.Context, reg transport.Region, off int, dst []byte) error {
	err := l.access(ctx, "read", reg, off, dst, false)
	if err == nil {
		l.counters.AddReceived(len(dst))
	}
	return err
}

// WritePeer copies src into the peer's region reg at offset off with
// process_vm_writev, in pieces of at most cmaDirectPiece bytes.
func (l *link) WritePeer(ctx context.Context, reg transport.Region, off int, src []byte) error {
	err := l.access(ctx, "write", reg, off, src, true)
	if err == nil {
		l.counters.AddSent(len(src))
	}
	return err
}

// access reads (write false) or writes the peer's memory; see the file
// comment for the abort protocol.
func (l *link) access(ctx context.Context, what string, reg transport.Region, off int, buf []byte, write bool) error {
	if off < 0 || uint64(off) > reg.Len || uint64(len(buf)) > reg.Len-uint64(off) {
		return &transport.PeerError{Peer: l.peer, Op: what, Err: fmt.Errorf("shm: %s of %d bytes at offset %d is outside the peer's %d-byte region", what, len(buf), off, reg.Len)}
	}
	if !l.enter() {
		return l.errClosed(what)
	}
	defer l.leave()
	if !l.cmaOK {
		return &transport.PeerError{Peer: l.peer, Op: what, Err: errors.New("shm: the peer's memory is not accessible on this link (Cross Memory Attach off or refused)")}
	}
	r := l.in
	for o := 0; o < len(buf); o += cmaDirectPiece {
		m := min(cmaDirectPiece, len(buf)-o)
		if o > 0 && ctx.Err() != nil {
			l.shutdown(-1)
			return l.errCtx(ctx, what)
		}
		r.readerActive.Store(1)
		if r.closed.Load() != 0 {
			r.readerActive.Store(0)
			l.shutdown(-1)
			return l.errClosed(what)
		}
		addr := reg.Addr + uint64(off+o)
		var err error
		if write {
			err = writeRemote(l.cmaPid, buf[o:o+m], addr)
		} else {
			err = readRemote(l.cmaPid, buf[o:o+m], addr)
		}
		r.readerActive.Store(0)
		if err != nil {
			if errors.Is(err, unix.ESRCH) {
				l.peerDead.Store(true)
				l.shutdown(l.peer)
				return &transport.PeerError{Peer: l.peer, Op: what, Err: &transport.LostError{Rank: l.peer, Via: -1,
					Cause: fmt.Errorf("process %d gone (process_vm_%sv: %w)", l.cmaPid, what, err)}}
			}
			l.shutdown(-1)
			return &transport.PeerError{Peer: l.peer, Op: what,
				Err: fmt.Errorf("shm: %s of %d bytes at %#x in pid %d (process_vm_%sv): %w", what, m, addr, l.cmaPid, what, err)}
		}
	}
	if r.closed.Load() != 0 { // the peer gave up during the access: a read may be torn
		l.shutdown(-1)
		if ctx.Err() != nil {
			return l.errCtx(ctx, what)
		}
		return l.errClosed(what)
	}
	return nil
}

// writeRemote writes src at addr in process pid (see remoteCopy).
func writeRemote(pid int, src []byte, addr uint64) error { return remoteCopy(pid, src, addr, true) }
