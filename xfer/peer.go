package xfer

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/goccl/goccl/internal/config"
	"golang.org/x/sys/unix"
)

// peer is a remote agent as this agent knows it: its metadata, its
// lanes (TCP streams, dialed on first use; the RDMA queue pair, connected
// on first use) and its Alloc regions mapped here when it is on this host.
type peer struct {
	a       *Agent
	name    string
	streams []*stream
	rdma    *rdmaLane

	mu   sync.Mutex
	md   *metadata
	err  error // set once: lost, invalidated, agent closed
	maps map[mapKey]*mapping
}

func (a *Agent) newPeer(md *metadata) *peer {
	p := &peer{a: a, name: md.Name, md: md, maps: map[mapKey]*mapping{}}
	p.streams = make([]*stream, a.o.Streams)
	for i := range p.streams {
		p.streams[i] = &stream{p: p, idx: i, wake: make(chan struct{}, 1), pending: map[uint64]*chunk{}}
	}
	p.rdma = &rdmaLane{p: p}
	return p
}

func (a *Agent) loadPeer(md *metadata) error {
	a.pmu.Lock()
	if a.isClosed() {
		a.pmu.Unlock()
		return fmt.Errorf("xfer: agent %q: load metadata of %q: %w", a.name, md.Name, ErrClosed)
	}
	old := a.peers[md.Name]
	if old != nil && old.usable() == nil && slices.Equal(old.metadata().Addrs, md.Addrs) && old.metadata().PID == md.PID {
		// A re-registration: the connections stay; mappings of regions
		// the new metadata no longer has go (once no request holds them).
		keep := map[mapKey]bool{}
		for _, ri := range md.Regions {
			keep[keyOf(&ri)] = true
		}
		var gone []*mapping
		old.mu.Lock()
		old.md = md
		for k, m := range old.maps {
			if !keep[k] {
				delete(old.maps, k)
				gone = append(gone, m)
			}
		}
		old.mu.Unlock()
		a.pmu.Unlock()
		for _, m := range gone {
			m.kill()
		}
		return nil
	}
	a.peers[md.Name] = a.newPeer(md)
	a.pmu.Unlock()
	if old != nil {
		old.fail(fmt.Errorf("%w: agent %q loaded again with other addresses", ErrInvalidated, md.Name))
	}
	return nil
}

// peerFor returns the peer named name, fetching its metadata from the
// store when it is not loaded.
func (a *Agent) peerFor(ctx context.Context, name string) (*peer, error) {
	a.pmu.Lock()
	p := a.peers[name]
	a.pmu.Unlock()
	if p != nil {
		return p, nil
	}
	if a.o.Store == nil && config.XferStore.Get() == "" {
		return nil, fmt.Errorf("xfer: agent %q: %w %q (load its metadata, or give Options.Store or %s)", a.name, ErrUnknownAgent, name, config.XferStore.Name)
	}
	if err := a.FetchRemoteMD(ctx, name); err != nil {
		return nil, err
	}
	a.pmu.Lock()
	p = a.peers[name]
	a.pmu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("xfer: agent %q: %w %q", a.name, ErrUnknownAgent, name)
	}
	return p, nil
}

func (p *peer) metadata() *metadata {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.md
}

func (p *peer) usable() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// fail ends the peer: its lanes fail what is queued or unanswered with
// err and close, the mappings go once no request holds them.
func (p *peer) fail(err error) {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return
	}
	p.err = err
	maps := p.maps
	p.maps = nil
	p.mu.Unlock()
	p.rdma.fail(err)
	for _, s := range p.streams {
		s.fail(err)
	}
	for _, m := range maps {
		m.kill()
	}
}

// control queues a message (a notification, a queue pair's description)
// on stream 0, never blocking; the stream dials on first use.
func (p *peer) control(c *chunk) {
	p.streams[0].enqueue(c)
}

// mapped maps the peer's Alloc region ri here when the peer is on this
// host (and Options.NoSHM is off); nil when it cannot be.
func (p *peer) mapped(ri *regionInfo) *mapping {
	if ri.Type != DRAM || ri.MemFD <= 0 || p.a.o.NoSHM {
		return nil
	}
	k := keyOf(ri)
	p.mu.Lock()
	if p.err != nil || p.md.Host != p.a.hostID {
		p.mu.Unlock()
		return nil
	}
	if m := p.maps[k]; m != nil {
		p.mu.Unlock()
		return m
	}
	pid := p.md.PID
	p.mu.Unlock()
	m, err := mapRemote(pid, ri) // mmap with MAP_POPULATE: not under p.mu
	if err != nil {
		return nil // TCP then
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if other := p.maps[k]; other != nil || p.err != nil || !p.md.announces(k) {
		m.kill()
		return other // nil when the peer failed or dropped the region meanwhile
	}
	p.maps[k] = m
	// Copies into the mapping need no connection, but the first stream
	// is how this agent notices the peer is gone.
	p.streams[0].start()
	return m
}

// mapKey names a peer's Alloc region: address, size and memfd inode (a
// region deregistered and allocated again may get the same address).
type mapKey struct {
	addr, len, ino uint64
	off            int64
}

func keyOf(ri *regionInfo) mapKey { return mapKey{ri.Addr, ri.Len, ri.Ino, ri.Off} }

// announces reports whether md still has the region k names.
func (md *metadata) announces(k mapKey) bool {
	for i := range md.Regions {
		if keyOf(&md.Regions[i]) == k {
			return true
		}
	}
	return false
}

// mapping is a peer's Alloc memory mapped into this process.
type mapping struct {
	addr, len uint64 // in the peer
	mem       []byte
	mu        sync.Mutex
	holds     int
	dead      bool
}

func mapRemote(pid int, ri *regionInfo) (*mapping, error) {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", pid, ri.MemFD), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Size < ri.Off || uint64(st.Size-ri.Off) < ri.Len || st.Ino != ri.Ino {
		return nil, fmt.Errorf("not the region: %d bytes, inode %d", st.Size, st.Ino)
	}
	mem, err := unix.Mmap(int(f.Fd()), ri.Off, int(ri.Len), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	return &mapping{addr: ri.Addr, len: ri.Len, mem: mem}, nil
}

func (m *mapping) bytes(d Desc) []byte {
	o := d.Addr - m.addr
	return m.mem[o : o+d.Len : o+d.Len]
}

func (m *mapping) hold() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead {
		return false
	}
	m.holds++
	return true
}

func (m *mapping) drop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.holds--
	if m.dead && m.holds == 0 && m.mem != nil {
		unix.Munmap(m.mem)
		m.mem = nil
	}
}

func (m *mapping) kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dead = true
	if m.holds == 0 && m.mem != nil {
		unix.Munmap(m.mem)
		m.mem = nil
	}
}
