package roce

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/rdma"
)

// Domain is one device's protection domain shared by a rank's links, and
// the memory registered in it (ncclCommRegister's registrations): a Send
// whose buffer lies inside a registered region posts its RDMA WRITEs
// straight from that buffer, skipping the copy into the staging slots, and
// returns once the peer has acknowledged them (the buffer is read until
// then).
type Domain struct {
	dev *rdma.Device
	pd  *rdma.PD

	// Timeout and RetryCnt are the ACK timeout exponent and retry count of
	// the queue pairs made outside Dial (OneSided); 0: the defaults.
	Timeout, RetryCnt uint8

	mu   sync.RWMutex
	regs []*Region // sorted by address, not overlapping
}

// NewDomain makes dev's domain.
func NewDomain(dev *rdma.Device) *Domain { return &Domain{dev: dev, pd: dev.AllocPD()} }

// Device is the domain's device.
func (d *Domain) Device() *rdma.Device { return d.dev }

// Region is a registered buffer.
type Region struct {
	d      *Domain
	mr     *rdma.MR
	lo, hi uintptr
	users  atomic.Int64 // sends reading it and receives it is advertised for, now
	gone   atomic.Bool
}

// ErrRegistered and ErrInUse are wrapped by Register's and Deregister's
// errors.
var (
	ErrOverlap = errors.New("overlaps a registered buffer")
	ErrInUse   = errors.New("in use by a send or receive in progress")
	ErrDereg   = errors.New("already deregistered")
)

// Register registers buf (not empty; it must stay referenced and keep its
// size until Deregister). Buffers may not overlap.
func (d *Domain) Register(buf []byte) (*Region, error) {
	if len(buf) == 0 {
		return nil, errors.New("roce: register: empty buffer")
	}
	lo := uintptr(unsafe.Pointer(&buf[0]))
	hi := lo + uintptr(len(buf))
	d.mu.Lock()
	defer d.mu.Unlock()
	i := sort.Search(len(d.regs), func(i int) bool { return d.regs[i].hi > lo })
	if i < len(d.regs) && d.regs[i].lo < hi {
		r := d.regs[i]
		return nil, fmt.Errorf("roce: register [%#x, +%d): %w [%#x, +%d)", lo, len(buf), ErrOverlap, r.lo, r.hi-r.lo)
	}
	mr, err := d.pd.RegMR(buf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite) // peers write received messages into it
	if err != nil {
		return nil, err
	}
	r := &Region{d: d, mr: mr, lo: lo, hi: hi}
	d.regs = append(d.regs, nil)
	copy(d.regs[i+1:], d.regs[i:])
	d.regs[i] = r
	return r, nil
}

// Len is the registered buffer's length in bytes.
func (r *Region) Len() int { return int(r.hi - r.lo) }

// Deregister removes the registration. It fails, leaving it in place, while
// a send reads from the buffer or a receive into it is under way, and for a region already deregistered.
func (r *Region) Deregister() error {
	d := r.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if r.gone.Load() {
		return fmt.Errorf("roce: deregister [%#x, +%d): %w", r.lo, r.hi-r.lo, ErrDereg)
	}
	if n := r.users.Load(); n > 0 {
		return fmt.Errorf("roce: deregister [%#x, +%d): %w (%d)", r.lo, r.hi-r.lo, ErrInUse, n)
	}
	r.gone.Store(true)
	i := sort.Search(len(d.regs), func(i int) bool { return d.regs[i].lo >= r.lo })
	d.regs = append(d.regs[:i], d.regs[i+1:]...)
	r.mr.Dereg()
	return nil
}

// acquire returns the region holding all of buf and its offset there,
// counted as used until release; nil when buf is not registered.
func (d *Domain) acquire(buf []byte) (*Region, int) {
	if d == nil || len(buf) == 0 {
		return nil, 0
	}
	lo := uintptr(unsafe.Pointer(&buf[0]))
	hi := lo + uintptr(len(buf))
	d.mu.RLock()
	defer d.mu.RUnlock()
	i := sort.Search(len(d.regs), func(i int) bool { return d.regs[i].hi > lo })
	if i == len(d.regs) || d.regs[i].lo > lo || d.regs[i].hi < hi {
		return nil, 0
	}
	r := d.regs[i]
	r.users.Add(1)
	return r, int(lo - r.lo)
}

func (r *Region) release() { r.users.Add(-1) }
