package xfer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rendezvous"
)

// metadata is what an agent tells others about itself: LocalMetadata's
// blob, JSON (version 1).
type metadata struct {
	Version int          `json:"v"`
	Name    string       `json:"name"`
	Host    string       `json:"host"`           // topo.HostID: equal means the same host and /dev/shm
	PID     int          `json:"pid"`            // for /proc/PID/fd/N of Alloc memory
	Addrs   []string     `json:"addrs"`          // host:port to dial, in order of preference
	RDMA    bool         `json:"rdma,omitempty"` // has a RoCE device: DRAM regions carry rkeys
	Regions []regionInfo `json:"regions"`
}

type regionInfo struct {
	Type  MemType `json:"t"`
	Addr  uint64  `json:"a"`
	Len   uint64  `json:"n"`
	Dev   uint64  `json:"d,omitempty"`
	MemFD int     `json:"fd,omitempty"`   // Alloc memory's memfd in the owner, 0: none
	RKey  uint32  `json:"rkey,omitempty"` // the region's rkey (RDMA), 0: none
	Ino   uint64  `json:"ino,omitempty"`  // Alloc memory's memfd inode: a mapping is of this region, not of an earlier one at the same address
	Off   int64   `json:"off,omitempty"`  // MapFile: the offset in the file
}

const metadataVersion = 1

// LocalMetadata returns this agent's metadata: its name, where to connect,
// and its registered regions. Another agent loads it with
// LoadRemoteMetadata; it must be sent again after registrations change.
func (a *Agent) LocalMetadata() []byte {
	md := metadata{Version: metadataVersion, Name: a.name, Host: a.hostID, PID: os.Getpid(), Addrs: a.addrs, RDMA: a.pd != nil}
	a.mu.RLock()
	for _, r := range a.reg.regs {
		ri := regionInfo{Type: r.typ, Addr: r.addr, Len: r.len, Dev: r.dev}
		if r.memfd >= 0 {
			ri.MemFD, ri.Ino, ri.Off = r.memfd, r.ino, r.mapOff
		}
		if r.mr != nil {
			ri.RKey = r.mr.RKey()
		}
		md.Regions = append(md.Regions, ri)
	}
	a.mu.RUnlock()
	b, _ := json.Marshal(&md) // cannot fail: plain types
	return b
}

func decodeMetadata(b []byte) (*metadata, error) {
	var md metadata
	if err := json.Unmarshal(b, &md); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMetadata, err)
	}
	switch {
	case md.Version != metadataVersion:
		return nil, fmt.Errorf("%w: version %d, this agent reads %d", ErrMetadata, md.Version, metadataVersion)
	case md.Name == "":
		return nil, fmt.Errorf("%w: no agent name", ErrMetadata)
	case len(md.Addrs) == 0:
		return nil, fmt.Errorf("%w: agent %q has no address", ErrMetadata, md.Name)
	}
	for _, r := range md.Regions {
		if (r.Type != DRAM && r.Type != FILE) || r.Len == 0 || r.Addr+r.Len < r.Addr {
			return nil, fmt.Errorf("%w: agent %q: bad region %s {addr %#x, len %d}", ErrMetadata, md.Name, r.Type, r.Addr, r.Len)
		}
	}
	return &md, nil
}

// LoadRemoteMetadata loads another agent's metadata blob and returns its
// name. Loading an agent already known replaces its regions; its
// connections are kept when its addresses are the same (a re-registration),
// else they are closed, failing its requests in flight (a restarted agent).
func (a *Agent) LoadRemoteMetadata(blob []byte) (string, error) {
	md, err := decodeMetadata(blob)
	if err != nil {
		return "", fmt.Errorf("xfer: agent %q: load remote metadata: %w", a.name, err)
	}
	if md.Name == a.name {
		return "", fmt.Errorf("xfer: agent %q: load remote metadata: the blob is this agent's own", a.name)
	}
	if err := a.loadPeer(md); err != nil {
		return "", err
	}
	return md.Name, nil
}

// InvalidateRemote forgets agent name's metadata: its requests in flight
// fail with ErrInvalidated naming it, its connections and mappings are
// closed, and new requests to it need its metadata loaded (or fetched)
// again.
func (a *Agent) InvalidateRemote(name string) error {
	a.pmu.Lock()
	p := a.peers[name]
	delete(a.peers, name)
	a.pmu.Unlock()
	if p == nil {
		return fmt.Errorf("xfer: agent %q: invalidate %q: %w", a.name, name, ErrUnknownAgent)
	}
	p.fail(fmt.Errorf("%w: agent %q", ErrInvalidated, name))
	return nil
}

// mdKey is the store key of an agent's metadata.
func mdKey(name string) string { return "xfer/md/" + name }

// tombstone is the value InvalidateLocalMD leaves (keys are never deleted).
var tombstone = []byte("invalid")

// SendLocalMD publishes this agent's metadata in its store
// (Options.Store), where FetchRemoteMD, or the first request to this agent
// by name, finds it.
func (a *Agent) SendLocalMD(ctx context.Context) error {
	st, err := a.store(ctx)
	if err != nil {
		return fmt.Errorf("xfer: agent %q: send metadata: %w", a.name, err)
	}
	if err := st.Set(ctx, mdKey(a.name), a.LocalMetadata()); err != nil {
		return fmt.Errorf("xfer: agent %q: send metadata: %w", a.name, err)
	}
	return nil
}

// InvalidateLocalMD withdraws this agent's metadata from the store: agents
// fetching it later get ErrInvalidated.
func (a *Agent) InvalidateLocalMD(ctx context.Context) error {
	st, err := a.store(ctx)
	if err != nil {
		return fmt.Errorf("xfer: agent %q: invalidate metadata: %w", a.name, err)
	}
	return st.Set(ctx, mdKey(a.name), tombstone)
}

// FetchRemoteMD loads agent name's metadata from the store, waiting until
// it is published or ctx is done.
func (a *Agent) FetchRemoteMD(ctx context.Context, name string) error {
	st, err := a.store(ctx)
	if err != nil {
		return fmt.Errorf("xfer: agent %q: fetch metadata of %q: %w", a.name, name, err)
	}
	b, err := st.Get(ctx, mdKey(name))
	if err != nil {
		return fmt.Errorf("xfer: agent %q: fetch metadata of %q: %w", a.name, name, err)
	}
	if string(b) == string(tombstone) {
		return fmt.Errorf("xfer: agent %q: fetch metadata of %q: %w", a.name, name, ErrInvalidated)
	}
	got, err := a.LoadRemoteMetadata(b)
	if err == nil && got != name {
		err = fmt.Errorf("xfer: agent %q: fetch metadata of %q: the store holds agent %q's", a.name, name, got)
	}
	return err
}

// store is Options.Store, or the store GOCCL_XFER_STORE names, opened on
// first use (and closed by Close).
func (a *Agent) store(ctx context.Context) (rendezvous.Store, error) {
	if a.o.Store != nil {
		return a.o.Store, nil
	}
	a.smu.Lock()
	defer a.smu.Unlock()
	if a.ownStore != nil {
		return a.ownStore, nil
	}
	url := config.XferStore.Get()
	if url == "" {
		return nil, ErrNoStore
	}
	st, err := OpenStore(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", config.XferStore.Name, url, err)
	}
	if a.isClosed() {
		st.Close()
		return nil, ErrClosed
	}
	a.ownStore = st
	return st, nil
}

// OpenStore connects to a store for metadata by URL: etcd://host:2379[,host:2379]/prefix
// (keys under prefix, on a lease that ends with the client; the program
// imports _ "github.com/goccl/goccl/rendezvous/etcd" for it) or
// tcp://host:port / host:port (goccl's TCP store, rendezvous.TCPServer).
func OpenStore(ctx context.Context, url string) (rendezvous.Store, error) {
	if len(url) > 7 && url[:7] == "etcd://" {
		return rendezvous.Open(ctx, url)
	}
	addr := url
	if len(addr) > 6 && addr[:6] == "tcp://" {
		addr = addr[6:]
	}
	if addr == "" {
		return nil, errors.New("xfer: empty store URL")
	}
	return rendezvous.DialTCP(ctx, addr)
}
