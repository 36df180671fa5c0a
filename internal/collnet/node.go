package collnet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/goccl/goccl/internal/reduce"
	"github.com/goccl/goccl/transport/roce"
)

// Config configures an aggregation node.
type Config struct {
	// Name names the node in errors and logs (default: its address).
	Name string
	// Fanin is the most children one job may attach here (default 8).
	Fanin int
	// Parent is the root this node registers with as a leaf ("": this node
	// is a root).
	Parent string
	// Advertise is the address the root redirects ranks to (default: the
	// listener's address; a leaf listening on an unspecified address uses
	// the one it reaches its parent from).
	Advertise string
	// AttachTimeout bounds how long a job waits for all its children to
	// attach (default 2 minutes).
	AttachTimeout time.Duration
	// RoCE, when set, carries the data path to children and parent that
	// have a RoCE device too over RC queue pairs in this domain (see
	// flagRoCE); the others stay on TCP.
	RoCE *roce.Domain
	Log  *slog.Logger // nil: discard
}

// Node is an aggregation node.
type Node struct {
	cfg Config
	ln  net.Listener

	mu         sync.Mutex
	leaves     []leafInfo // registered leaves (root), in registration order
	jobs       map[JobID]*job
	plans      map[JobID]*plan
	conns      map[net.Conn]bool
	closed     bool
	registered bool // Register ran
}

type leafInfo struct {
	addr  string
	fanin int
	conn  net.Conn
}

// plan is the root's placement of a job's ranks.
type plan struct {
	flat  bool
	per   int
	size  int
	addrs []string // leaf addresses
}

// NewNode makes a node serving ln (closed by Close).
func NewNode(ln net.Listener, cfg Config) *Node {
	if cfg.Fanin <= 0 {
		cfg.Fanin = 8
	}
	if cfg.Advertise == "" {
		cfg.Advertise = ln.Addr().String()
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Advertise
	}
	if cfg.AttachTimeout <= 0 {
		cfg.AttachTimeout = 2 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Node{cfg: cfg, ln: ln, jobs: map[JobID]*job{}, plans: map[JobID]*plan{}, conns: map[net.Conn]bool{}}
}

// Serve registers with the parent, if any, and accepts children until ctx
// ends or Close; it returns why it stopped (nil after Close).
func (n *Node) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { n.Close() })
	defer stop()
	if err := n.Register(ctx); err != nil {
		n.Close()
		return err
	}
	for {
		c, err := n.ln.Accept()
		if err != nil {
			n.mu.Lock()
			closed := n.closed
			n.mu.Unlock()
			if closed {
				return ctx.Err()
			}
			return err
		}
		go n.handle(c)
	}
}

// Name is the node's name (its address by default).
func (n *Node) Name() string { return n.cfg.Name }

// Leaves is the number of leaves registered with this node.
func (n *Node) Leaves() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.leaves)
}

// Close stops the node: the listener and every connection close, so every
// job in progress fails at its ranks naming this node.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	conns := n.conns
	n.conns = map[net.Conn]bool{}
	n.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	return n.ln.Close()
}

func (n *Node) track(c net.Conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		c.Close()
		return false
	}
	n.conns[c] = true
	return true
}

func (n *Node) untrack(c net.Conn) {
	n.mu.Lock()
	delete(n.conns, c)
	n.mu.Unlock()
	c.Close()
}

// advertiseDialed makes a leaf listening on an unspecified address (all
// interfaces) and told no --advertise advertise the address it reached its
// parent from, with its listener's port: the root would otherwise send
// ranks to 0.0.0.0, which is every host's own machine.
func (n *Node) advertiseDialed(parent net.Conn) {
	host, port, err := net.SplitHostPort(n.cfg.Advertise)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsUnspecified() {
		return
	}
	la, ok := parent.LocalAddr().(*net.TCPAddr)
	if !ok {
		return
	}
	old := n.cfg.Advertise
	n.cfg.Advertise = net.JoinHostPort(la.IP.String(), port)
	if n.cfg.Name == old {
		n.cfg.Name = n.cfg.Advertise
	}
}

// Register connects a leaf to its parent (once; Serve calls it too) and
// returns when the parent has it on its list of leaves. The connection
// stays open: the root drops the leaf when it closes, and this node stops
// when the parent goes away. A root has nothing to do.
func (n *Node) Register(ctx context.Context) error {
	n.mu.Lock()
	done := n.registered || n.cfg.Parent == ""
	n.registered = true
	n.mu.Unlock()
	if done {
		return nil
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", n.cfg.Parent)
	if err != nil {
		return fmt.Errorf("aggregation node %s: registering with parent %s: %w", n.cfg.Name, n.cfg.Parent, err)
	}
	if !n.track(c) {
		return nil
	}
	n.advertiseDialed(c)
	err = writeHello(c, &hello{kind: kindRegister, rank: -1, fanin: uint32(n.cfg.Fanin), addr: n.cfg.Advertise})
	var r hello
	if err == nil {
		r, err = readHello(c) // the root has the leaf on its list
	}
	if err == nil && r.status != replyOK {
		err = fmt.Errorf("refused: %s", r.addr)
	}
	if err != nil {
		n.untrack(c)
		return fmt.Errorf("aggregation node %s: registering with parent %s: %w", n.cfg.Name, n.cfg.Parent, err)
	}
	go func() {
		io.Copy(io.Discard, c)
		n.cfg.Log.Warn("parent gone; stopping", "parent", n.cfg.Parent)
		n.Close()
	}()
	return nil
}

func (n *Node) handle(c net.Conn) {
	if !n.track(c) {
		return
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	h, err := readHello(c)
	c.SetDeadline(time.Time{})
	if err != nil {
		n.cfg.Log.Warn("bad hello", "from", c.RemoteAddr(), "err", err)
		n.untrack(c)
		return
	}
	switch h.kind {
	case kindRegister:
		n.mu.Lock()
		n.leaves = append(n.leaves, leafInfo{addr: h.addr, fanin: int(h.fanin), conn: c})
		n.mu.Unlock()
		writeHello(c, &hello{status: replyOK})
		n.cfg.Log.Info("leaf registered", "leaf", h.addr, "fanin", h.fanin)
		io.Copy(io.Discard, c) // until it goes away
		n.mu.Lock()
		for i, l := range n.leaves {
			if l.conn == c {
				n.leaves = append(n.leaves[:i], n.leaves[i+1:]...)
				break
			}
		}
		n.mu.Unlock()
		n.untrack(c)
	case kindAttach:
		n.attach(c, h)
	default:
		n.reject(c, fmt.Sprintf("unknown hello kind %d", h.kind))
	}
}

func (n *Node) reject(c net.Conn, msg string) {
	writeHello(c, &hello{status: replyError, addr: msg})
	n.untrack(c)
}

// attach places a child in its job: the root first decides where a rank
// goes (group 0).
func (n *Node) attach(c net.Conn, h hello) {
	if h.group == 0 {
		if h.rank < 0 || h.size == 0 || uint32(h.rank) >= h.size {
			n.reject(c, fmt.Sprintf("rank %d of %d", h.rank, h.size))
			return
		}
		p, err := n.place(h.job, int(h.size))
		if err != nil {
			n.reject(c, err.Error())
			return
		}
		r := int(h.rank)
		if !p.flat {
			l := r / p.per
			g := min(p.per, p.size-l*p.per)
			writeHello(c, &hello{status: replyRedirect, addr: p.addrs[l], index: uint32(r - l*p.per), group: uint32(g),
				upIndex: uint32(l), upGroup: uint32(len(p.addrs))})
			n.untrack(c)
			return
		}
		h.index, h.group = uint32(r), h.size
	}
	if int(h.group) > n.cfg.Fanin || h.index >= h.group {
		n.reject(c, fmt.Sprintf("child %d of %d: this node's fan-in is %d", h.index, h.group, n.cfg.Fanin))
		return
	}
	if h.upGroup > 0 && n.cfg.Parent == "" {
		n.reject(c, "a leaf's place given to a root")
		return
	}
	n.mu.Lock()
	j := n.jobs[h.job]
	if j == nil {
		j = newJob(n, h)
		n.jobs[h.job] = j
	}
	n.mu.Unlock()
	if err := j.reserve(h); err != nil {
		n.reject(c, err.Error())
		return
	}
	reply := hello{status: replyOK}
	if h.flags&flagRoCE != 0 && n.cfg.RoCE != nil {
		reply.flags = flagRoCE
	}
	if err := writeHello(c, &reply); err != nil {
		n.untrack(c)
		j.fail(fmt.Sprintf("child %d: %v", h.index, err))
		return
	}
	if reply.flags&flagRoCE != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, _, err := roce.Upgrade(ctx, c, int(h.index), n.cfg.RoCE, roce.Options{})
		cancel()
		if err != nil {
			n.untrack(c)
			j.fail(fmt.Sprintf("child %d: moving to RoCE: %v", h.index, err))
			return
		}
		n.retrack(c, s)
		c = s
		n.cfg.Log.Info("child on RoCE", "child", h.index, "of", h.group)
	}
	j.fill(c, h)
}

// retrack replaces a tracked connection by the one carried over it.
func (n *Node) retrack(old, c net.Conn) {
	n.mu.Lock()
	delete(n.conns, old)
	n.conns[c] = true
	n.mu.Unlock()
}

// place is the root's placement of a job of size ranks (made once per job).
func (n *Node) place(id JobID, size int) (*plan, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.plans[id]; p != nil {
		if p.size != size {
			return nil, fmt.Errorf("job of %d ranks, but a rank said %d", p.size, size)
		}
		return p, nil
	}
	p := &plan{size: size}
	if size <= n.cfg.Fanin || len(n.leaves) == 0 {
		if size > n.cfg.Fanin {
			return nil, fmt.Errorf("job of %d ranks: this root's fan-in is %d and no leaf aggregation node registered", size, n.cfg.Fanin)
		}
		p.flat = true
	} else {
		fan := n.leaves[0].fanin
		for _, l := range n.leaves {
			fan = min(fan, l.fanin)
		}
		need := (size + fan - 1) / fan
		if need > len(n.leaves) || need > n.cfg.Fanin {
			return nil, fmt.Errorf("job of %d ranks needs %d leaf aggregation nodes of fan-in %d; %d registered, root fan-in %d",
				size, need, fan, len(n.leaves), n.cfg.Fanin)
		}
		p.per = (size + need - 1) / need
		need = (size + p.per - 1) / p.per
		for _, l := range n.leaves[:need] {
			p.addrs = append(p.addrs, l.addr)
		}
	}
	n.plans[id] = p
	return p, nil
}

func (n *Node) dropJob(id JobID, j *job) {
	n.mu.Lock()
	if n.jobs[id] == j {
		delete(n.jobs, id)
		delete(n.plans, id)
	}
	n.mu.Unlock()
}

// job is one communicator's state at this node.
type job struct {
	n        *Node
	id       JobID
	group    int
	upIndex  int
	upGroup  int
	children []net.Conn
	names    []string // the children, for errors: "rank 3", "leaf aggregation node ADDR"
	arrived  int
	parent   net.Conn
	mu       sync.Mutex
	started  bool
	ended    bool // fail or close ran: fill takes no more children
}

func newJob(n *Node, h hello) *job {
	return &job{n: n, id: h.job, group: int(h.group), upIndex: int(h.upIndex), upGroup: int(h.upGroup),
		children: make([]net.Conn, h.group), names: make([]string, h.group)}
}

// reserve takes the child's place in the job (fill gives it its
// connection once the reply is out).
func (j *job) reserve(h hello) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case int(h.group) != j.group || int(h.upIndex) != j.upIndex || int(h.upGroup) != j.upGroup:
		return fmt.Errorf("child %d says the job has %d children here (place %d of %d above); another said %d (%d of %d)",
			h.index, h.group, h.upIndex, h.upGroup, j.group, j.upIndex, j.upGroup)
	case j.names[h.index] != "":
		return fmt.Errorf("child %d attached twice", h.index)
	}
	j.names[h.index] = fmt.Sprintf("rank %d", h.rank)
	if h.rank < 0 {
		j.names[h.index] = fmt.Sprintf("leaf aggregation node %s", h.addr)
	}
	return nil
}

// fill gives a reserved child its connection; the job starts when every
// child has one.
func (j *job) fill(c net.Conn, h hello) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ended {
		// The job failed while this child's reply or upgrade was under
		// way: its end is all it hears.
		go j.n.untrack(c)
		return
	}
	j.children[h.index] = c
	j.arrived++
	if j.arrived == 1 {
		time.AfterFunc(j.n.cfg.AttachTimeout, j.attachTimeout)
	}
	if j.arrived == j.group {
		j.started = true
		go j.run()
	}
}

func (j *job) attachTimeout() {
	j.mu.Lock()
	started := j.started
	j.mu.Unlock()
	if !started {
		j.fail(fmt.Sprintf("only %d of %d children attached within %v", j.arrived, j.group, j.n.cfg.AttachTimeout))
	}
}

// fail ends the job: an error frame to every child (best effort), and every
// connection closed.
func (j *job) fail(msg string) {
	j.n.cfg.Log.Warn("job failed", "err", msg)
	var hdr [frameSize]byte
	binary.LittleEndian.PutUint32(hdr[:], frameError)
	text := []byte(fmt.Sprintf("aggregation node %s: %s", j.n.cfg.Name, msg))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(len(text)))
	j.mu.Lock()
	children := append([]net.Conn(nil), j.children...)
	j.mu.Unlock()
	for _, c := range children {
		if c != nil {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			c.Write(append(hdr[:], text...))
		}
	}
	j.close()
}

// close ends the job without a word (its children are gone or were told):
// each child's connection is shut for writing, then drained until the
// child closes it (at most 2 s) — closing a socket with unread data
// resets it, and the reset can destroy the error frame just sent.
func (j *job) close() {
	j.mu.Lock()
	j.ended = true
	children, parent := append([]net.Conn(nil), j.children...), j.parent
	j.mu.Unlock()
	for _, c := range children {
		if c == nil {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite()
			go func() {
				tc.SetDeadline(time.Now().Add(2 * time.Second))
				io.Copy(io.Discard, tc)
				j.n.untrack(c)
			}()
			continue
		}
		j.n.untrack(c)
	}
	if parent != nil {
		j.n.untrack(parent)
	}
	j.n.dropJob(j.id, j)
}

// run serves the job's operations until the children close their streams.
func (j *job) run() {
	if j.upGroup > 0 {
		if err := j.dialParent(); err != nil {
			j.fail(err.Error())
			return
		}
	}
	p := newPipe(j)
	for {
		hdr, done, err := p.readHeaders()
		if done {
			j.n.cfg.Log.Debug("job done")
			j.close()
			return
		}
		if err != nil {
			j.fail(err.Error())
			return
		}
		if err := p.run(hdr); err != nil {
			// The children between frames were told; end the job.
			j.n.cfg.Log.Warn("operation failed", "err", err)
			j.close()
			return
		}
	}
}

// dialParent attaches this leaf to the root for the job.
func (j *job) dialParent() error {
	c, err := net.DialTimeout("tcp", j.n.cfg.Parent, 30*time.Second)
	if err != nil {
		return fmt.Errorf("parent %s: %w", j.n.cfg.Parent, err)
	}
	if !j.n.track(c) {
		return errors.New("closing")
	}
	h := hello{kind: kindAttach, job: j.id, rank: -1, index: uint32(j.upIndex), group: uint32(j.upGroup), addr: j.n.cfg.Advertise}
	if j.n.cfg.RoCE != nil {
		h.flags = flagRoCE
	}
	if err := writeHello(c, &h); err != nil {
		return fmt.Errorf("parent %s: %w", j.n.cfg.Parent, err)
	}
	r, err := readHello(c)
	if err == nil && r.status != replyOK {
		err = fmt.Errorf("refused: %s", r.addr)
	}
	if err == nil && r.flags&flagRoCE != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var s net.Conn
		s, _, err = roce.Upgrade(ctx, c, 0, j.n.cfg.RoCE, roce.Options{})
		cancel()
		if err == nil {
			j.n.retrack(c, s)
			c = s
			j.n.cfg.Log.Info("parent on RoCE", "parent", j.n.cfg.Parent)
		}
	}
	if err != nil {
		return fmt.Errorf("parent %s: %w", j.n.cfg.Parent, err)
	}
	j.mu.Lock()
	j.parent = c
	j.mu.Unlock()
	return nil
}

// reduceFunc is the reduction kernel of an operation header.
func reduceFunc(h opHeader) (func(dst, src []byte), func(dst, a, b []byte), error) {
	f2, err := reduce.Func(reduce.DType(h.dtype), reduce.Op(h.op))
	if err != nil {
		return nil, nil, err
	}
	f3, err := reduce.Func3(reduce.DType(h.dtype), reduce.Op(h.op))
	return f2, f3, err
}
