package shm

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Segment is a shared-memory file mapped into this process: the memory of
// a symmetric-memory window, which every rank on the host maps (one-sided
// puts and gets are then plain copies into and out of the peer's mapping).
type Segment struct {
	path string
	mem  []byte
}

// CreateSegment creates (O_EXCL) and maps a segment of size bytes at
// name in dir (default /dev/shm), zeroed and reserved up front: a full
// file system fails here, naming the size, instead of as a SIGBUS later.
func CreateSegment(dir, name string, size int64) (*Segment, error) {
	if size <= 0 {
		return nil, fmt.Errorf("shm: create segment %s: %d bytes", name, size)
	}
	path := resolve(name, dir)
	what := func() string { return fmt.Sprintf("%d bytes", size) }
	mem, _, err := createMapped(path, size, "create segment "+path, what)
	if err != nil {
		return nil, err
	}
	return &Segment{path: path, mem: mem}, nil
}

// OpenSegment maps the segment another process created at path, which
// must be size bytes.
func OpenSegment(path string, size int64) (*Segment, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("shm: open segment %q: not an absolute path", path)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: open segment: %w", err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("shm: open segment %s: %w", path, err)
	}
	if st.Size != size {
		return nil, fmt.Errorf("shm: open segment %s: %d bytes, want %d", path, st.Size, size)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: open segment %s: mmap %d bytes: %w", path, size, err)
	}
	return &Segment{path: path, mem: mem}, nil
}

// Path is the segment's file.
func (s *Segment) Path() string { return s.path }

// Bytes is the mapped memory (page-aligned).
func (s *Segment) Bytes() []byte { return s.mem }

// Unlink removes the file; the mappings stay valid.
func (s *Segment) Unlink() error {
	if err := os.Remove(s.path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("shm: unlink segment: %w", err)
	}
	return nil
}

// Close unmaps the segment; its memory must not be used afterwards.
func (s *Segment) Close() error {
	if s.mem == nil {
		return nil
	}
	err := unix.Munmap(s.mem)
	s.mem = nil
	return err
}

// FutexWait sleeps while *w == val, at most d; it may return early (a
// wake-up, a signal): callers check their condition again. w may lie in a
// segment another process wakes.
func FutexWait(w *atomic.Uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), opFutexWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// FutexWake wakes every process and thread sleeping in FutexWait on w.
func FutexWake(w *atomic.Uint32) { futexWake(w, wakeAll) }
