// Package shm implements transport.Link between two ranks on the same host over
// shared memory: each direction is a single-producer/single-consumer ring of
// fixed-size slots in a file under /dev/shm that both processes map.
//
// The receiving rank creates its inbound ring with CreateRing and passes the
// ring's path (Ring.Path) to the peer out of band, e.g. through the rendezvous
// store; the sending rank maps it with OpenRing. Once both sides have mapped a
// ring, either side may Unlink it so that nothing is left in /dev/shm if a
// process dies (Link.Close also unlinks the rings its side opened). NewLink
// then pairs a rank's outbound and inbound ring into a transport.Link.
//
// Waiting: a blocked Send (ring full) or Recv (ring empty) polls the shared
// counter for about a microsecond, yields a few times, then sleeps on a futex
// word in the mapping (shared FUTEX_WAIT, 10 ms timeout so ctx cancellation and
// closure are noticed). The other side issues FUTEX_WAKE only when the
// waiter's flag is set, so no system call is made while neither side sleeps.
//
// A ReduceFunc given to Recv runs directly on the ring's memory (or, for a
// message that came by Cross Memory Attach, on a per-link staging buffer): it
// must not keep src after it returns.
//
// Large messages (Config.CMAThreshold, DefaultCMAThreshold by default) skip the ring when
// the kernel lets the receiver read the sender's memory: the receiver copies
// them once, straight from the sender's buffer, with process_vm_readv, and
// Send returns only after that. See cma.go.
//
// Ring file layout (all integers little-endian, offsets in bytes):
//
//	header page (4096 bytes)
//	  0   magic "GOCCLSHM" (uint64, stored last by the creator)
//	  8   layout version (uint32)
//	  12  SlotSize (uint32)
//	  16  Slots (uint32)
//	  20  slot metadata size (uint32, 64)
//	  24  header page size (uint32, 4096)
//	  32  total file size (uint64)
//	  128 tail: slots published by the producer (uint64, own cache line pair)
//	  256 head: slots released by the consumer (uint64, own cache line pair)
//	  384 closed flag (uint32)
//	  512 data futex word (uint32): the consumer sleeps on it
//	  516 consumer-waiting flag (uint32)
//	  640 space futex word (uint32): the producer sleeps on it
//	  644 producer-waiting flag (uint32)
//	  768 CMA threshold (uint64, written by the creator): smallest message
//	      sent into this ring by Cross Memory Attach; 0 = never
//	  832 CMA offer (uint32, producer): 0 not yet, 1 offered, 2 declined
//	  840 producer's pid (uint64, producer)
//	  848 address of the producer's probe word (uint64, producer)
//	  856 value of the probe word (uint64, producer)
//	  896 CMA state (uint32, consumer): 0 unknown, 1 verified, 2 unusable
//	  1024 reader-active flag (uint32, consumer): inside process_vm_readv
//	Slots slots, slot i at 4096 + i*(64+SlotSize):
//	  0   payload length in this slot (uint32)
//	  4   flags (uint32): bit 0 = first slot of a message, bit 1 = CMA
//	      descriptor (no payload in the ring), bit 2 = CMA refused by the
//	      consumer (set by the consumer: the producer resends by copy)
//	  8   encoded transport.Header (56 bytes, first slot of a message only)
//	  64  payload (SlotSize bytes, 64-byte aligned); in a CMA slot, the
//	      CMA descriptor instead: address (uint64) and length (uint64) of
//	      the producer's buffer in the producer's process
//
// A copied message occupies max(1, ceil(Bytes/SlotSize)) consecutive slots;
// its header travels in the first one. A CMA message occupies one slot (see
// cma.go for that protocol). Counters only grow; slot index = counter % Slots.
package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Defaults used for zero fields of Config.
const (
	DefaultDir      = "/dev/shm"
	DefaultSlotSize = 512 << 10
	DefaultSlots    = 8
)

// Config sizes a ring.
type Config struct {
	Dir      string // directory for ring files; default "/dev/shm"
	SlotSize int    // payload bytes per slot, multiple of 64; default 512 KiB
	Slots    int    // slots per ring; default 8

	// CMAThreshold is the size from which a message sent INTO this ring
	// (the ring's creator is the receiver) goes by single-copy Cross Memory
	// Attach (process_vm_readv) instead of through the slots, when both
	// processes can use it (see cma.go). 0 means DefaultCMAThreshold; a
	// negative value (CMADisabled) turns CMA off for this ring. The
	// environment variable GOCCL_SHM_CMA_THRESHOLD (bytes, K/M/G suffixes
	// allowed) overrides it, and GOCCL_SHM_CMA=0 turns CMA off in the
	// process whatever the Config says.
	CMAThreshold int
}

const (
	ringMagic   = 0x4d48534c43434f47 // "GOCCLSHM" little-endian
	ringVersion = 3                  // 2: CMA fields and slot descriptors; 3: 56-byte message headers, CMA descriptors in the payload area

	headerPage = 4096
	slotMeta   = 64

	maxSlotSize = 1 << 30
	maxSlots    = 1 << 16

	offMagic       = 0
	offVersion     = 8
	offSlotSize    = 12
	offSlots       = 16
	offSlotMeta    = 20
	offHeaderPage  = 24
	offTotal       = 32
	offTail        = 128
	offHead        = 256
	offClosed      = 384
	offDataWord    = 512
	offRecvWaiting = 516
	offSpaceWord   = 640
	offSendWaiting = 644

	offCMAThreshold  = 768
	offCMAOffer      = 832
	offCMAPid        = 840
	offCMAProbeAddr  = 848
	offCMAProbeValue = 856
	offCMAState      = 896
	offReaderActive  = 1024
	offCloseLost     = 1088 // u32 written before the closed flag: lost rank + 1, or 0
	offConsumerCPU   = 1152 // u64 the consumer writes: where it last waited (colocation.go)

	flagFirst   = 1
	flagCMA     = 2
	flagCMANack = 4
)

func (c Config) normalize() (Config, error) {
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	if c.SlotSize == 0 {
		c.SlotSize = DefaultSlotSize
	}
	if c.Slots == 0 {
		c.Slots = DefaultSlots
	}
	if c.SlotSize < 0 || c.SlotSize%64 != 0 || c.SlotSize > maxSlotSize {
		return c, fmt.Errorf("shm: SlotSize %d must be a positive multiple of 64 up to %d", c.SlotSize, maxSlotSize)
	}
	if c.Slots < 0 || c.Slots > maxSlots {
		return c, fmt.Errorf("shm: Slots %d must be between 1 and %d", c.Slots, maxSlots)
	}
	if c.CMAThreshold == 0 {
		c.CMAThreshold = DefaultCMAThreshold
	}
	return c, nil
}

// RingBytes is the size of one ring file with this configuration (the
// shared memory it takes).
func (c Config) RingBytes() (int64, error) {
	c, err := c.normalize()
	if err != nil {
		return 0, err
	}
	return ringSize(c.SlotSize, c.Slots), nil
}

func ringSize(slotSize, slots int) int64 {
	return headerPage + int64(slots)*int64(slotMeta+slotSize)
}

// Ring is one mapped single-producer/single-consumer ring. A Ring is handed to
// NewLink, which then owns it and unmaps it when the Link is closed.
type Ring struct {
	path     string
	dev, ino uint64 // identity of the file, so Unlink never removes a newer file of the same name
	opened   bool   // mapped by OpenRing (else created by CreateRing)
	mem      []byte
	slotSize int
	slots    int
	stride   int

	tail        *atomic.Uint64
	head        *atomic.Uint64
	closed      *atomic.Uint32
	dataWord    *atomic.Uint32
	recvWaiting *atomic.Uint32
	spaceWord   *atomic.Uint32
	sendWaiting *atomic.Uint32

	cmaOffer     *atomic.Uint32 // producer: cmaOffered / cmaDeclined
	cmaState     *atomic.Uint32 // consumer: cmaOK / cmaFailed
	readerActive *atomic.Uint32 // consumer: inside process_vm_readv on the producer's buffer
	closeLost    *atomic.Uint32 // lost rank + 1 of the side that closed, or 0
	consumerCPU  *atomic.Uint64 // the consumer's CPU when it last waited, and when (colocation.go)

	owned    atomic.Bool // handed to NewLink
	closing  atomic.Bool // Ring.Close called
	unmapped atomic.Bool
}

func resolve(path, dir string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

// CreateRing creates (O_EXCL) and maps a single-producer/single-consumer ring file at path.
// The RECEIVING rank creates its inbound rings. Errors name the path and the size needed.
//
// A relative path is taken relative to cfg.Dir (default /dev/shm). The file's
// memory is reserved up front (fallocate), so a full /dev/shm is reported here
// instead of as a SIGBUS later.
func CreateRing(path string, cfg Config) (*Ring, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	cmaMin, err := cmaThreshold(cfg.CMAThreshold)
	if err != nil {
		return nil, err
	}
	path = resolve(path, cfg.Dir)
	size := ringSize(cfg.SlotSize, cfg.Slots)
	what := func() string {
		return fmt.Sprintf("%d bytes needed: %d slots of %d+%d bytes plus a %d-byte header", size, cfg.Slots, cfg.SlotSize, slotMeta, headerPage)
	}
	mem, st, err := createMapped(path, size, "create ring "+path, what)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	le.PutUint32(mem[offVersion:], ringVersion)
	le.PutUint32(mem[offSlotSize:], uint32(cfg.SlotSize))
	le.PutUint32(mem[offSlots:], uint32(cfg.Slots))
	le.PutUint32(mem[offSlotMeta:], slotMeta)
	le.PutUint32(mem[offHeaderPage:], headerPage)
	le.PutUint64(mem[offTotal:], uint64(size))
	le.PutUint64(mem[offCMAThreshold:], cmaMin)
	r := newRing(path, mem, cfg.SlotSize, cfg.Slots)
	r.dev, r.ino = uint64(st.Dev), st.Ino
	// Publish: the opener checks the magic last-written word (release store).
	(*atomic.Uint64)(unsafe.Pointer(&mem[offMagic])).Store(ringMagic)
	return r, nil
}

// createMapped creates (O_EXCL) the file path of size bytes, reserved up
// front (fallocate) so that a full file system is reported here and not
// as a SIGBUS later, and maps it shared. Errors begin "shm: op" and say
// what the size is for.
func createMapped(path string, size int64, op string, what func() string) ([]byte, unix.Stat_t, error) {
	var st unix.Stat_t
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, st, fmt.Errorf("shm: %s (%s): %w", op, what(), err)
	}
	defer f.Close()
	fail := func(err error) ([]byte, unix.Stat_t, error) {
		os.Remove(path)
		return nil, st, err
	}
	fd := int(f.Fd())
	if err := unix.Fallocate(fd, 0, 0, size); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
			return fail(fmt.Errorf("shm: %s: cannot reserve %s (is %s large enough?): %w", op, what(), filepath.Dir(path), err))
		}
		if err := f.Truncate(size); err != nil {
			return fail(fmt.Errorf("shm: %s: cannot size it (%s): %w", op, what(), err))
		}
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return fail(fmt.Errorf("shm: %s: %w", op, err))
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("shm: %s: mmap (%s): %w", op, what(), err))
	}
	return mem, st, nil
}

// OpenRing maps an existing ring created by the peer (the sender opens its outbound ring).
//
// A relative path is taken relative to DefaultDir (/dev/shm); pass Ring.Path()
// of the creator's ring when it was created elsewhere.
func OpenRing(path string) (*Ring, error) {
	path = resolve(path, DefaultDir)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: open ring: %w", err)
	}
	defer f.Close()
	fd := int(f.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: open ring %s: %w", path, err)
	}
	if st.Size < headerPage {
		return nil, fmt.Errorf("shm: open ring %s: file is %d bytes, not an initialized goccl ring", path, st.Size)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: open ring %s: mmap %d bytes: %w", path, st.Size, err)
	}
	bad := func(format string, args ...any) (*Ring, error) {
		unix.Munmap(mem)
		return nil, fmt.Errorf("shm: open ring %s: "+format, append([]any{path}, args...)...)
	}
	if m := (*atomic.Uint64)(unsafe.Pointer(&mem[offMagic])).Load(); m != ringMagic {
		return bad("not an initialized goccl ring (magic %#x)", m)
	}
	le := binary.LittleEndian
	if v := le.Uint32(mem[offVersion:]); v != ringVersion {
		return bad("ring layout version %d, this build speaks %d", v, ringVersion)
	}
	slotSize := int(le.Uint32(mem[offSlotSize:]))
	slots := int(le.Uint32(mem[offSlots:]))
	if _, err := (Config{SlotSize: slotSize, Slots: slots}).normalize(); err != nil || slotSize == 0 || slots == 0 {
		return bad("bad geometry: %d slots of %d bytes", slots, slotSize)
	}
	if le.Uint32(mem[offSlotMeta:]) != slotMeta || le.Uint32(mem[offHeaderPage:]) != headerPage {
		return bad("unexpected layout")
	}
	size := ringSize(slotSize, slots)
	if int64(le.Uint64(mem[offTotal:])) != size || st.Size != size {
		return bad("file is %d bytes, geometry (%d slots of %d bytes) needs %d", st.Size, slots, slotSize, size)
	}
	r := newRing(path, mem, slotSize, slots)
	r.dev, r.ino = uint64(st.Dev), st.Ino
	r.opened = true
	return r, nil
}

func newRing(path string, mem []byte, slotSize, slots int) *Ring {
	u64 := func(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&mem[off])) }
	u32 := func(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&mem[off])) }
	return &Ring{
		path:        path,
		mem:         mem,
		slotSize:    slotSize,
		slots:       slots,
		stride:      slotMeta + slotSize,
		tail:        u64(offTail),
		head:        u64(offHead),
		closed:      u32(offClosed),
		dataWord:    u32(offDataWord),
		recvWaiting: u32(offRecvWaiting),
		spaceWord:   u32(offSpaceWord),
		sendWaiting: u32(offSendWaiting),

		cmaOffer:     u32(offCMAOffer),
		cmaState:     u32(offCMAState),
		readerActive: u32(offReaderActive),
		closeLost:    u32(offCloseLost),
		consumerCPU:  u64(offConsumerCPU),
	}
}

// Path is the ring file's absolute path (what the peer passes to OpenRing).
func (r *Ring) Path() string { return r.path }

// Unlink removes the file name (mappings stay valid) so nothing leaks in /dev/shm if a process dies.
//
// Call it once both sides have mapped the ring. It is a no-op when the name is
// already gone or now names a different file.
func (r *Ring) Unlink() error {
	var st unix.Stat_t
	if err := unix.Stat(r.path, &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("shm: unlink ring %s: %w", r.path, err)
	}
	if uint64(st.Dev) != r.dev || st.Ino != r.ino {
		return nil
	}
	if err := os.Remove(r.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("shm: unlink ring: %w", err)
	}
	return nil
}

// Close marks a ring that was never handed to NewLink as closed (so a peer
// using it fails instead of waiting) and unmaps it. It does not unlink the
// file. Rings owned by a Link are released by the Link's Close instead.
func (r *Ring) Close() error {
	if r.owned.Load() {
		return fmt.Errorf("shm: ring %s belongs to a Link; close the Link", r.path)
	}
	if !r.closing.CompareAndSwap(false, true) {
		return nil
	}
	r.markClosed(-1)
	return r.unmap()
}

// markClosed sets the shared closed flag and wakes any waiter, in any process.
// lost (>= 0) is the rank the closing side lost, passed on to the peer.
func (r *Ring) markClosed(lost int) {
	if lost >= 0 {
		r.closeLost.CompareAndSwap(0, uint32(lost)+1)
	}
	r.closed.Store(1)
	r.dataWord.Add(1)
	r.spaceWord.Add(1)
	futexWake(r.dataWord, wakeAll)
	futexWake(r.spaceWord, wakeAll)
}

func (r *Ring) unmap() error {
	if !r.unmapped.CompareAndSwap(false, true) {
		return nil
	}
	return unix.Munmap(r.mem)
}

// slot returns the metadata and payload of slot number n (a counter value).
func (r *Ring) slot(n uint64) (meta, payload []byte) {
	off := headerPage + int(n%uint64(r.slots))*r.stride
	return r.mem[off : off+slotMeta], r.mem[off+slotMeta : off+r.stride]
}
