package xfer

import (
	"fmt"
	"os"
	"sort"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/rdma"
	"golang.org/x/sys/unix"
)

// MemType is the kind of memory a descriptor names (nixl_mem_t).
type MemType uint8

const (
	// DRAM is host memory: a registered Go slice, or Agent.Alloc memory.
	DRAM MemType = 1
	// FILE is a byte range of a registered file.
	FILE MemType = 2
)

func (t MemType) String() string {
	switch t {
	case DRAM:
		return "DRAM"
	case FILE:
		return "FILE"
	}
	return fmt.Sprintf("MemType(%d)", uint8(t))
}

// Desc names Len bytes of registered memory, as a NIXL descriptor
// (nixlBlobDesc without metadata): for DRAM, Addr is the virtual address of
// the first byte in its agent's process and DevID is 0; for FILE, Addr is
// the offset in the file and DevID the file's descriptor number in its
// agent's process (NIXL's POSIX backend convention).
type Desc struct {
	Addr  uint64
	Len   uint64
	DevID uint64
}

// Sub returns the descriptor of bytes [off, off+n) of d.
func (d Desc) Sub(off, n uint64) Desc {
	return Desc{Addr: d.Addr + off, Len: n, DevID: d.DevID}
}

func (d Desc) String() string {
	return fmt.Sprintf("{addr %#x, len %d, dev %d}", d.Addr, d.Len, d.DevID)
}

// addrOf is the virtual address of b's first byte.
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// region is one registration.
type region struct {
	typ       MemType
	addr, len uint64 // DRAM: virtual address; FILE: file offset
	dev       uint64
	mem       []byte   // DRAM
	file      *os.File // FILE
	direct    bool     // FILE opened with O_DIRECT
	memfd     int      // Alloc, MapFile: the file behind mem (peers on the host map /proc/PID/fd/N); -1 if none
	ino       uint64   // Alloc, MapFile: the file's inode
	mapOff    int64    // MapFile: the offset mapped
	mr        *rdma.MR // DRAM with a RoCE device: the memory region peers' RDMA names by rkey
	busy      atomic.Int32
	dead      bool // deregistered (under Agent.mu)
}

func (r *region) contains(typ MemType, d Desc) bool {
	return r.typ == typ && r.dev == d.DevID && d.Addr >= r.addr && d.Len <= r.len && d.Addr-r.addr <= r.len-d.Len
}

// bytes is the DRAM memory of d, which r contains.
func (r *region) bytes(d Desc) []byte {
	o := d.Addr - r.addr
	return r.mem[o : o+d.Len : o+d.Len]
}

func (r *region) desc() Desc { return Desc{Addr: r.addr, Len: r.len, DevID: r.dev} }

// registry holds an agent's registrations, sorted by (type, dev, addr).
type registry struct {
	regs []*region
}

func less(a, b *region) bool {
	if a.typ != b.typ {
		return a.typ < b.typ
	}
	if a.dev != b.dev {
		return a.dev < b.dev
	}
	return a.addr < b.addr
}

// find returns the region containing d, or nil.
func (g *registry) find(typ MemType, d Desc) *region {
	i := sort.Search(len(g.regs), func(i int) bool {
		r := g.regs[i]
		return !less(r, &region{typ: typ, dev: d.DevID, addr: d.Addr + 1})
	})
	if i > 0 && g.regs[i-1].contains(typ, d) {
		return g.regs[i-1]
	}
	return nil
}

func (g *registry) add(r *region) error {
	for _, o := range g.regs {
		if o.typ == r.typ && o.dev == r.dev && r.addr < o.addr+o.len && o.addr < r.addr+r.len {
			return fmt.Errorf("%w: %s %s overlaps the registered %s", ErrRegistration, r.typ, r.desc(), o.desc())
		}
	}
	g.regs = append(g.regs, r)
	sort.Slice(g.regs, func(i, j int) bool { return less(g.regs[i], g.regs[j]) })
	return nil
}

func (g *registry) remove(r *region) {
	for i, o := range g.regs {
		if o == r {
			g.regs = append(g.regs[:i], g.regs[i+1:]...)
			return
		}
	}
}

// RegisterDRAM registers buf for transfers and returns its descriptor. The
// agent keeps buf alive until DeregisterMem. Agents on other hosts reach it
// over TCP; for copies by peers on the same host, allocate with Alloc.
func (a *Agent) RegisterDRAM(buf []byte) (Desc, error) {
	if len(buf) == 0 {
		return Desc{}, fmt.Errorf("%w: agent %q: empty DRAM buffer", ErrRegistration, a.name)
	}
	return a.register(&region{typ: DRAM, addr: addrOf(buf), len: uint64(len(buf)), mem: buf, memfd: -1})
}

// Alloc allocates n bytes of DRAM in a shared-memory mapping (memfd) and
// registers them. Agents on the same host map it and copy in and out
// directly, with no connection in the data path. DeregisterMem unmaps it.
func (a *Agent) Alloc(n int) ([]byte, Desc, error) {
	if n <= 0 {
		return nil, Desc{}, fmt.Errorf("%w: agent %q: Alloc of %d bytes", ErrRegistration, a.name, n)
	}
	fd, err := unix.MemfdCreate("goccl-xfer-"+a.name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, Desc{}, fmt.Errorf("xfer: agent %q: Alloc %d bytes: memfd_create: %w", a.name, n, err)
	}
	if err := unix.Fallocate(fd, 0, 0, int64(n)); err != nil {
		unix.Close(fd)
		return nil, Desc{}, fmt.Errorf("xfer: agent %q: Alloc %d bytes: %w", a.name, n, err)
	}
	// MAP_POPULATE: the pages exist before the first transfer, as a
	// NIC's pinned registration would have them (no fault per page in it).
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Close(fd)
		return nil, Desc{}, fmt.Errorf("xfer: agent %q: Alloc %d bytes: mmap: %w", a.name, n, err)
	}
	return a.registerMapped(fd, 0, mem, "Alloc")
}

// MapFile maps bytes [offset, offset+n) of f (offset a multiple of the
// page size) shared and registers them as DRAM, like Alloc's memory:
// agents on the same host map the same file pages and copy directly, and
// what they write is in the file (an mmap'ed file shared between
// processes). DeregisterMem unmaps it; the agent keeps a duplicate of f's
// descriptor until then.
func (a *Agent) MapFile(f *os.File, offset int64, n int) ([]byte, Desc, error) {
	if n <= 0 || offset < 0 || offset%int64(os.Getpagesize()) != 0 {
		return nil, Desc{}, fmt.Errorf("%w: agent %q: MapFile %s: offset %d (a multiple of %d), %d bytes", ErrRegistration, a.name, f.Name(), offset, os.Getpagesize(), n)
	}
	if st, err := f.Stat(); err != nil || st.Size() < offset+int64(n) {
		return nil, Desc{}, fmt.Errorf("%w: agent %q: MapFile %s: [%d, +%d) is past the file's end", ErrRegistration, a.name, f.Name(), offset, n)
	}
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, Desc{}, fmt.Errorf("xfer: agent %q: MapFile %s: %w", a.name, f.Name(), err)
	}
	mem, err := unix.Mmap(fd, offset, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Close(fd)
		return nil, Desc{}, fmt.Errorf("xfer: agent %q: MapFile %s: mmap: %w", a.name, f.Name(), err)
	}
	return a.registerMapped(fd, offset, mem, "MapFile")
}

// registerMapped registers mem, a shared mapping of fd at offset, that
// peers on the host map again (/proc/PID/fd/FD); it owns fd and mem.
func (a *Agent) registerMapped(fd int, offset int64, mem []byte, what string) ([]byte, Desc, error) {
	var st unix.Stat_t
	err := unix.Fstat(fd, &st)
	var d Desc
	if err == nil {
		d, err = a.register(&region{typ: DRAM, addr: addrOf(mem), len: uint64(len(mem)), mem: mem, memfd: fd, mapOff: offset, ino: st.Ino})
	}
	if err != nil {
		unix.Munmap(mem)
		unix.Close(fd)
		return nil, Desc{}, fmt.Errorf("xfer: agent %q: %s %d bytes: %w", a.name, what, len(mem), err)
	}
	return mem, d, nil
}

// RegisterFile registers bytes [offset, offset+length) of f as FILE memory;
// the descriptor's DevID is f's descriptor number. A file opened with
// O_DIRECT (OpenFile with direct) is read and written with O_DIRECT: its
// descriptors' offsets and lengths must then be multiples of
// DirectAlignment. The agent does not close f.
func (a *Agent) RegisterFile(f *os.File, offset, length int64) (Desc, error) {
	if offset < 0 || length <= 0 {
		return Desc{}, fmt.Errorf("%w: agent %q: file %s: offset %d, length %d", ErrRegistration, a.name, f.Name(), offset, length)
	}
	fd := int(f.Fd())
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return Desc{}, fmt.Errorf("xfer: agent %q: file %s: %w", a.name, f.Name(), err)
	}
	return a.register(&region{typ: FILE, addr: uint64(offset), len: uint64(length), dev: uint64(fd), file: f,
		direct: fl&unix.O_DIRECT != 0, memfd: -1})
}

// DirectAlignment is the alignment O_DIRECT transfers keep: file offsets,
// lengths and memory (bounce buffers are used for unaligned memory).
const DirectAlignment = 4096

// OpenFile opens (creating if needed) path for reading and writing, with
// O_DIRECT when direct is set, and makes it at least size bytes long.
func OpenFile(path string, size int64, direct bool) (*os.File, error) {
	flag := os.O_RDWR | os.O_CREATE
	if direct {
		flag |= unix.O_DIRECT
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, fmt.Errorf("xfer: open %s: %w", path, err)
	}
	if st, err := f.Stat(); err == nil && st.Size() < size {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, fmt.Errorf("xfer: open %s: size %d: %w", path, size, err)
		}
	}
	return f, nil
}

func (a *Agent) register(r *region) (Desc, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.isClosed() {
		return Desc{}, fmt.Errorf("xfer: agent %q: register: %w", a.name, ErrClosed)
	}
	if err := a.reg.add(r); err != nil {
		return Desc{}, fmt.Errorf("xfer: agent %q: %w", a.name, err)
	}
	if a.pd != nil && r.typ == DRAM {
		mr, err := a.pd.RegMR(r.mem, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
		if err != nil {
			a.reg.remove(r)
			return Desc{}, fmt.Errorf("xfer: agent %q: register %s as a memory region: %w", a.name, r.desc(), err)
		}
		r.mr = mr
	}
	a.regGen++
	return r.desc(), nil
}

// DeregisterMem removes the registration that starts at d (a descriptor
// returned by RegisterDRAM, Alloc or RegisterFile) and, for Alloc memory,
// unmaps it. It fails with ErrInUse while a transfer of this agent or a
// peer's is copying into or out of it. Peers that loaded this agent's
// metadata earlier keep it: transfers they make into the region later fail
// at this agent (TCP), or land in memory this agent no longer uses (a
// same-host peer's mapping of Alloc memory); InvalidateRemote on them ends that.
func (a *Agent) DeregisterMem(typ MemType, d Desc) error {
	a.mu.Lock()
	r := a.reg.find(typ, Desc{Addr: d.Addr, Len: 1, DevID: d.DevID})
	if r == nil || r.addr != d.Addr {
		a.mu.Unlock()
		return fmt.Errorf("%w: agent %q: deregister %s %s: not the start of a registration", ErrRegistration, a.name, typ, d)
	}
	if n := r.busy.Load(); n > 0 {
		a.mu.Unlock()
		return fmt.Errorf("%w: agent %q: deregister %s %s: %d transfers copying", ErrInUse, a.name, typ, d, n)
	}
	a.reg.remove(r)
	r.dead = true
	a.regGen++
	a.mu.Unlock()
	r.free()
	return nil
}

func (r *region) free() {
	if r.mr != nil {
		r.mr.Dereg()
		r.mr = nil
	}
	if r.memfd >= 0 {
		unix.Munmap(r.mem)
		unix.Close(r.memfd)
		r.memfd = -1
	}
	r.mem = nil
}

// acquire finds the registration containing d and marks it busy; release
// with r.busy.Add(-1).
func (a *Agent) acquire(typ MemType, d Desc) *region {
	a.mu.RLock()
	r := a.reg.find(typ, d)
	if r != nil {
		r.busy.Add(1)
	}
	a.mu.RUnlock()
	return r
}
