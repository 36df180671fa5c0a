package goccl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/goccl/goccl/internal/bootstrap"
	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/symm"
)

// Window is symmetric memory (the NVSHMEM / torch SymmetricMemory idea): a
// data area of the same size on every rank of a communicator, allocated
// collectively by NewWindow, that any rank reads and writes one-sidedly —
// the peer's CPU takes no part — plus a pad of 64-bit signal words per rank
// for notification.
//
// Paths: ranks on one host map each other's windows (files in
// GOCCL_SHM_DIR, /dev/shm by default), so Put and Get are copies and a
// signal is a CPU atomic on the peer's word with a futex wake-up. Across
// hosts with GOCCL_NET=roce each pair of ranks has an RC queue pair and the
// windows are memory regions with remote access: Put is RDMA WRITE, Get
// RDMA READ, SignalSet an aligned 8-byte WRITE and SignalAdd an atomic
// FETCH_ADD. A communicator whose ranks on different hosts are joined by
// TCP links has no one-sided path: NewWindow fails naming the peer.
//
// Ordering and completion: Put returns as soon as src may be reused; a
// rank's puts and signals to one peer land in the order issued, so a
// consumer that sees a signal (WaitSignal) sees the bytes put before it
// (NVSHMEM's put-with-signal; no fence is needed between them). Quiet waits
// until everything this rank issued has landed at every peer. Reading a
// window's bytes while a peer puts into them is a race the program must
// avoid with signals, as with any shared memory.
//
// A Window may be used from several goroutines; its operations do not
// involve the communicator's collective ordering (they may run while it
// runs collectives). Free it (a collective) before closing the
// communicator.
type Window struct {
	c  *Comm
	w  *symm.Window
	mu sync.RWMutex // held for reading by operations, for writing by Free
	ok bool         // not freed
}

// SignalOp is what Signal does to the peer's signal word.
type SignalOp uint8

const (
	SignalSet SignalOp = SignalOp(symm.SignalSet) // the word becomes the value (NVSHMEM_SIGNAL_SET)
	SignalAdd SignalOp = SignalOp(symm.SignalAdd) // the value is added to the word (NVSHMEM_SIGNAL_ADD)
)

// Cmp is how WaitSignal compares the signal word with the value
// (NVSHMEM_CMP_EQ ... NVSHMEM_CMP_LE).
type Cmp uint8

const (
	CmpEQ Cmp = Cmp(symm.CmpEQ)
	CmpNE Cmp = Cmp(symm.CmpNE)
	CmpGT Cmp = Cmp(symm.CmpGT)
	CmpGE Cmp = Cmp(symm.CmpGE)
	CmpLT Cmp = Cmp(symm.CmpLT)
	CmpLE Cmp = Cmp(symm.CmpLE)
)

// DefaultWindowSignals is the number of signal words per rank of a window
// made without WindowSignals.
const DefaultWindowSignals = 64

// WindowOption configures NewWindow.
type WindowOption func(*windowConfig)

type windowConfig struct{ signals int }

// WindowSignals sets the number of signal words per rank (> 0).
func WindowSignals(n int) WindowOption { return func(c *windowConfig) { c.signals = n } }

// NewWindow allocates a window of bytes bytes (> 0) on every rank of c: a
// collective, every rank passes the same size and options. Errors wrap
// ErrInvalidArgument (a size or signal count that is not positive, a peer
// without a one-sided path) or the failure of the exchange.
func NewWindow(ctx context.Context, c *Comm, bytes int, opts ...WindowOption) (*Window, error) {
	if c == nil {
		return nil, nilComm("NewWindow")
	}
	cfg := windowConfig{signals: DefaultWindowSignals}
	for _, o := range opts {
		o(&cfg)
	}
	fail := func(err error) (*Window, error) { return nil, &Error{Rank: c.rank, Op: "NewWindow", Err: err} }
	if bytes <= 0 || cfg.signals <= 0 {
		return fail(fmt.Errorf("%w: %d bytes and %d signal words: both must be positive", ErrInvalidArgument, bytes, cfg.signals))
	}
	one, _ := bootstrap.Cap[*bootstrap.OneSided](c.caps)
	p := symm.Params{Rank: c.rank, Size: c.size, Bytes: bytes, Signals: cfg.signals,
		Paths: make([]symm.Path, c.size), PeerExited: make([]func() bool, c.size),
		ShmDir: config.ShmDir.Get(),
		AllGather: func(ctx context.Context, mine []byte) ([]byte, error) {
			all := make([]byte, len(mine)*c.size)
			return all, c.AllGatherBytes(ctx, mine, all, len(mine), Uint8)
		},
		Barrier: c.Barrier,
		Failed:  c.windowFailed,
	}
	if one != nil {
		p.Dom = one.Domain
	}
	for r := range p.Paths {
		p.Paths[r] = symm.PathSelf
		if r == c.rank {
			continue
		}
		switch l := c.group.Link(r); {
		case one != nil && one.Peers[r]:
			p.Paths[r] = symm.PathRoCE
		case l.Name() == "shm":
			p.Paths[r] = symm.PathShm
			if e, ok := l.(interface{ PeerExited() bool }); ok {
				p.PeerExited[r] = e.PeerExited
			}
		default:
			return fail(fmt.Errorf("%w: no one-sided path to peer %d: its link is %s (symmetric memory needs shared memory on one host or %s=roce across hosts)",
				ErrInvalidArgument, r, l.Name(), config.Net.Name))
		}
	}
	w, err := symm.New(ctx, p)
	if err != nil {
		return fail(err)
	}
	return &Window{c: c, w: w, ok: true}, nil
}

// windowFailed is why c can no longer serve a window's waits, or nil.
func (c *Comm) windowFailed() error {
	if c.aborted.Load() {
		return ErrAborted
	}
	if c.group != nil {
		if err := c.group.LostErr(); err != nil {
			return err
		}
	}
	return c.Err()
}

// Local is this rank's data area (Bytes long): peers put into it and get
// from it.
func (w *Window) Local() []byte { return w.w.Local() }

// Bytes is the size of each rank's data area in bytes.
func (w *Window) Bytes() int { return w.w.Bytes() }

// Signals is the number of signal words per rank.
func (w *Window) Signals() int { return w.w.Signals() }

// Path names how this rank reaches peer's window: "self", "shm" or "roce".
func (w *Window) Path(peer int) string {
	if peer < 0 || peer >= w.c.size {
		return "none"
	}
	return w.w.PathTo(peer).String()
}

// enter starts an operation: it fails once the window is freed.
func (w *Window) enter(op string) error {
	w.mu.RLock()
	if !w.ok {
		w.mu.RUnlock()
		return &Error{Rank: w.c.rank, Op: op, Err: fmt.Errorf("%w: window freed", ErrInvalidArgument)}
	}
	return nil
}

// leave ends an operation, wrapping its error.
func (w *Window) leave(op string, peer int, err error) error {
	w.mu.RUnlock()
	if err == nil {
		return nil
	}
	if errors.Is(err, symm.ErrRange) {
		err = fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	} else if peer >= 0 {
		err = fmt.Errorf("peer %d: %w", peer, err)
	}
	return &Error{Rank: w.c.rank, Op: op, Err: err}
}

// Put copies src into peer's data area at byte offset off. It returns when
// src may be reused (across hosts the bytes may still be in flight: Quiet
// waits for them). Errors wrap ErrInvalidArgument for a peer or span out of
// range.
func (w *Window) Put(ctx context.Context, peer, off int, src []byte) error {
	if err := w.enter("Put"); err != nil {
		return err
	}
	return w.leave("Put", peer, w.w.Put(ctx, peer, off, src))
}

// Get copies len(dst) bytes of peer's data area from byte offset off into
// dst, and returns when dst is filled.
func (w *Window) Get(ctx context.Context, peer, off int, dst []byte) error {
	if err := w.enter("Get"); err != nil {
		return err
	}
	return w.leave("Get", peer, w.w.Get(ctx, peer, off, dst))
}

// Signal applies op with value to peer's signal word sig, after the puts to
// peer issued before it.
func (w *Window) Signal(ctx context.Context, peer, sig int, op SignalOp, value uint64) error {
	if err := w.enter("Signal"); err != nil {
		return err
	}
	if op != SignalSet && op != SignalAdd {
		return w.leave("Signal", peer, fmt.Errorf("signal op %d: %w", op, symm.ErrRange))
	}
	return w.leave("Signal", peer, w.w.Signal(ctx, peer, sig, symm.SignalOp(op), value))
}

// PutSignal is Put followed by Signal to the same peer (NVSHMEM's
// putmem_signal): the consumer that sees the signal sees the bytes.
func (w *Window) PutSignal(ctx context.Context, peer, off int, src []byte, sig int, op SignalOp, value uint64) error {
	if err := w.Put(ctx, peer, off, src); err != nil {
		return err
	}
	return w.Signal(ctx, peer, sig, op, value)
}

// WaitSignal waits until this rank's signal word sig compares to value as
// cmp says, and returns the word. It spins briefly, then sleeps; it gives
// up when ctx ends (or, when ctx has no deadline, after the communicator's
// timeout), when the communicator fails (a lost rank, Abort), or when a
// peer on this host exits.
func (w *Window) WaitSignal(ctx context.Context, sig int, cmp Cmp, value uint64) (uint64, error) {
	if err := w.enter("WaitSignal"); err != nil {
		return 0, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	var deadline time.Time // the communicator's timeout when ctx has no deadline
	if _, ok := ctx.Deadline(); !ok && w.c.timeout > 0 {
		deadline = time.Now().Add(w.c.timeout)
	}
	v, err := w.w.WaitSignal(ctx, deadline, sig, symm.Cmp(cmp), value)
	if err != nil {
		err = fmt.Errorf("signal %d (word %d, waiting for %s %d): %w", sig, v, cmpNames[cmp%6], value, err)
	}
	return v, w.leave("WaitSignal", -1, err)
}

var cmpNames = [...]string{"==", "!=", ">", ">=", "<", "<="}

// SignalValue reads this rank's signal word sig.
func (w *Window) SignalValue(sig int) (uint64, error) {
	if err := w.enter("SignalValue"); err != nil {
		return 0, err
	}
	v, err := w.w.SignalValue(sig)
	return v, w.leave("SignalValue", -1, err)
}

// Quiet waits until every put and signal this rank issued on the window
// has landed at its peer (nvshmem_quiet).
func (w *Window) Quiet(ctx context.Context) error {
	if err := w.enter("Quiet"); err != nil {
		return err
	}
	return w.leave("Quiet", -1, w.w.Quiet(ctx))
}

// Free releases the window on every rank (a collective): it waits for this
// rank's operations to land and for every rank to call Free, then unmaps
// and deregisters the memory. Local must not be used afterwards; other
// calls fail with ErrInvalidArgument.
func (w *Window) Free(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ok {
		return &Error{Rank: w.c.rank, Op: "FreeWindow", Err: fmt.Errorf("%w: window freed twice", ErrInvalidArgument)}
	}
	w.ok = false
	if err := w.w.Free(ctx); err != nil {
		return &Error{Rank: w.c.rank, Op: "FreeWindow", Err: err}
	}
	return nil
}
