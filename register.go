package goccl

import (
	"errors"
	"fmt"
	"sync"

	"github.com/goccl/goccl/internal/bootstrap"
)

// Registration is a buffer registered with a communicator (the handle of
// NCCL's ncclCommRegister). Operations whose buffers lie inside a
// registered buffer skip the staging copies where the transport can: on
// RoCE links (GOCCL_NET=roce) a message of 64 KiB or more is sent by RDMA
// WRITEs straight from the registered buffer instead of being copied into
// the link's registered staging slots first, and a receive of 64 KiB or
// more into a registered buffer (one that does not reduce) advertises the
// buffer to the sender, who then writes the payload straight into it
// instead of into the link's receive ring (NCCL's receive FIFO): with both
// ends registered a message is copied by neither. Shared-memory links need
// no registration (their single-copy schedules read and write peers'
// buffers through Cross Memory Attach whatever the buffer), nor do TCP
// links (the kernel copies): there it is accepted and changes nothing.
// Unregistered buffers keep working everywhere.
type Registration struct {
	c      *Comm
	region bootstrap.Region // nil: no transport registers memory
	bytes  int
	mu     sync.Mutex
	done   bool
}

// Register registers buf (len(buf) elements, not empty) with c. buf must
// stay referenced and keep its length until Deregister; registrations may
// not overlap. Errors wrap ErrInvalidArgument (an empty buffer, an overlap)
// or ErrClosed.
func Register[T Element](c *Comm, buf []T) (*Registration, error) {
	return c.register(asBytes(buf))
}

// Alloc allocates n elements of T and registers them with c (NCCL's
// ncclMemAlloc followed by ncclCommRegister). Free them with Deregister.
func Alloc[T Element](c *Comm, n int) ([]T, *Registration, error) {
	if c == nil {
		return nil, nil, nilComm("Alloc")
	}
	if n <= 0 {
		return nil, nil, c.regErr("Alloc", fmt.Errorf("%w: %d elements", ErrInvalidArgument, n))
	}
	buf := make([]T, n)
	r, err := Register(c, buf)
	if err != nil {
		return nil, nil, err
	}
	return buf, r, nil
}

func (c *Comm) register(b []byte) (*Registration, error) {
	if c == nil {
		return nil, nilComm("Register")
	}
	if len(b) == 0 {
		return nil, c.regErr("Register", fmt.Errorf("%w: empty buffer", ErrInvalidArgument))
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, c.regErr("Register", ErrClosed)
	}
	r := &Registration{c: c, bytes: len(b)}
	if reg, ok := bootstrap.Cap[bootstrap.Registrar](c.caps); ok {
		region, err := reg.Register(b)
		if err != nil {
			if errors.Is(err, bootstrap.ErrOverlap) {
				err = fmt.Errorf("%w: %v", ErrInvalidArgument, err)
			}
			return nil, c.regErr("Register", err)
		}
		r.region = region
	}
	return r, nil
}

// Bytes is the registered buffer's length in bytes.
func (r *Registration) Bytes() int { return r.bytes }

// Deregister ends the registration (ncclCommDeregister). It fails, and the
// buffer stays registered, while an operation is sending from it or
// receiving into it (an error wrapping ErrInUse); a second Deregister fails
// with ErrInvalidArgument.
func (r *Registration) Deregister() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return r.c.regErr("Deregister", fmt.Errorf("%w: already deregistered", ErrInvalidArgument))
	}
	if r.region != nil {
		if err := r.region.Deregister(); err != nil {
			if errors.Is(err, bootstrap.ErrInUse) {
				err = fmt.Errorf("%w: %v", ErrInUse, err)
			}
			return r.c.regErr("Deregister", err)
		}
	}
	r.done = true
	return nil
}

// ErrInUse is wrapped by Deregister's error for a buffer an operation is
// still sending from or receiving into.
var ErrInUse = errors.New("buffer in use")

func (c *Comm) regErr(op string, err error) error { return &Error{Rank: c.rank, Op: op, Err: err} }
