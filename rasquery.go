package goccl

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/ras"
	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/tcp"
)

// The job-wide health query (GOCCL_RAS_ADDR; docs/design.md, "Health
// query"): every process answers status probes on a listener of its own,
// whose address each rank publishes in its communicator's store at Init;
// rank 0 of the job serves NCCL RAS's client protocol on GOCCL_RAS_ADDR
// and probes every rank when asked (internal/ras).

// rasState is what a communicator's status answer reads without c.mu (an
// operation holds c.mu from begin to end): the operation in flight and the
// counts, stored by begin and end with a few atomic stores. nil: the
// health query is off (one nil check per operation).
type rasState struct {
	seq     atomic.Uint64 // the last collective begun
	opSeq   atomic.Uint64 // the operation in flight's (point to point: the last collective's)
	opKind  atomic.Uint32 // its kind; 0: idle
	opCount atomic.Uint64
	opBytes atomic.Uint64
	opStart atomic.Int64 // rasNow at begin
	lastEnd atomic.Int64 // rasNow at the last end (Init's end at first)
	counts  [numOpKinds]atomic.Uint64
	closing atomic.Bool

	hostID string // this rank's host identity (the bootstrap's)
	token  []byte
}

// rasEpoch makes rasNow monotonic and cheap to store.
var rasEpoch = time.Now()

func rasNow() int64 { return int64(time.Since(rasEpoch)) }

// begin records that an operation starts (c.mu held).
func (h *rasState) begin(kind opKind, seq uint64, count, bytes int64) {
	if kind != opSendRecv {
		h.seq.Store(seq)
	}
	h.counts[kind].Add(1)
	h.opSeq.Store(seq)
	h.opCount.Store(uint64(count))
	h.opBytes.Store(uint64(bytes))
	h.opStart.Store(rasNow())
	h.opKind.Store(uint32(kind))
}

// end records that the operation ended (c.mu held).
func (h *rasState) end() {
	h.opKind.Store(0)
	h.lastEnd.Store(rasNow())
}

// rasProc is the process's part: its status listener, the communicators
// it reports, and the RAS server when this process serves the job.
var rasProc struct {
	mu      sync.Mutex
	comms   []*Comm
	ln      net.Listener // status listener (nil until the first communicator)
	token   []byte
	server  *ras.Server
	serving *Comm // the communicator whose ranks the server probes
}

// rasKey is the store key of rank r's status card.
func rasKey(r int) string { return "goccl/ras/" + strconv.Itoa(r) }

// setupRAS joins the health query when GOCCL_RAS_ADDR is set: the
// process's status listener (started once), this rank's card in the store,
// and the server if this rank is the job's rank 0. Failures only warn: the
// health query must not stop a job.
func (c *Comm) setupRAS(ctx context.Context, store rendezvous.Store, hostID, token string) {
	addr := config.RASAddr.Get()
	if addr == "" || c.size < 2 {
		return
	}
	h := &rasState{hostID: hostID, token: []byte(token)}
	h.lastEnd.Store(rasNow())
	laddr, err := rasListen(h.token)
	if err != nil {
		c.log.Warnf(subInit, "%s: no status listener: %v", config.RASAddr.Name, err)
		return
	}
	host, _ := os.Hostname()
	card, _ := json.Marshal(ras.Peer{Rank: c.rank, Addr: laddr, Pid: os.Getpid(), Host: host, HostID: hostID})
	if err := store.Set(ctx, rasKey(c.rank), card); err != nil {
		c.log.Warnf(subInit, "%s: publishing this rank's status address: %v", config.RASAddr.Name, err)
		return
	}
	c.ras = h
	rasProc.mu.Lock()
	rasProc.comms = append(rasProc.comms, c)
	rasProc.mu.Unlock()
	rasElect(addr)
}

// rasListen starts the process's status listener (once) on the address
// TCP links use, and returns its address.
func rasListen(token []byte) (string, error) {
	rasProc.mu.Lock()
	defer rasProc.mu.Unlock()
	if rasProc.ln != nil {
		return rasProc.ln.Addr().String(), nil
	}
	ip := net.IPv4(127, 0, 0, 1)
	if iface, err := tcp.SelectInterface(config.SocketIfname.Get()); err == nil {
		ip = iface.IP
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		return "", err
	}
	rasProc.ln, rasProc.token = ln, token
	go func() { // for the life of the process, as the metrics server
		for {
			conn, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			go ras.Answer(conn, token, rasReport)
		}
	}()
	return ln.Addr().String(), nil
}

// rasElect starts the server on addr if none runs in this process and one
// of its communicators qualifies: size > 1, this process its rank 0, and
// its rank 0 the job's first rank 0 (the world, or what a Shrink or Split
// kept of it), so that a job has one server.
func rasElect(addr string) {
	rasProc.mu.Lock()
	defer rasProc.mu.Unlock()
	if rasProc.server != nil {
		return
	}
	i := slices.IndexFunc(rasProc.comms, func(c *Comm) bool {
		return c.rank == 0 && !c.ras.closing.Load() && len(c.rootRanks) > 0 && c.rootRanks[0] == 0
	})
	if i < 0 {
		return
	}
	c := rasProc.comms[i]
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		c.log.Warnf(subInit, "%s=%s: not serving the job's health query: %v", config.RASAddr.Name, addr, err)
		return
	}
	rasProc.server = ras.Serve(ln, &rasSource{c: c}, libVersion())
	rasProc.serving = c
	c.log.Infof(subInit, "serving the job's health query (NCCL RAS protocol) on %s: goccl status --addr %s", ln.Addr(), ln.Addr())
}

// closeRAS leaves the health query (Close): the communicator is no longer
// reported; a server that probes its ranks stops, and another of this
// process's communicators may take over.
func (c *Comm) closeRAS() {
	if c.ras == nil {
		return
	}
	c.ras.closing.Store(true)
	rasProc.mu.Lock()
	rasProc.comms = slices.DeleteFunc(rasProc.comms, func(o *Comm) bool { return o == c })
	srv := rasProc.server
	mine := rasProc.serving == c
	if mine {
		rasProc.server, rasProc.serving = nil, nil
	}
	rasProc.mu.Unlock()
	if mine {
		srv.Close()
		rasElect(config.RASAddr.Get())
	}
}

// rasReport is this process's answer to a status probe.
func rasReport() *ras.Report {
	host, _ := os.Hostname()
	r := &ras.Report{Pid: os.Getpid(), Host: host, Comms: []ras.CommReport{}}
	rasProc.mu.Lock()
	comms := slices.Clone(rasProc.comms)
	rasProc.mu.Unlock()
	for _, c := range comms {
		r.HostID = c.ras.hostID
		r.Comms = append(r.Comms, c.rasComm())
	}
	return r
}

// rasSkew is a communicator's arrival skew for its status
// (Comm.Stragglers): the ranks that entered last at least once.
func rasSkew(c *Comm) []ras.Skew {
	st := c.Stragglers()
	var out []ras.Skew
	for _, r := range st.Ranks {
		if r.Last > 0 {
			out = append(out, ras.Skew{Rank: r.Rank, LastFraction: r.Fraction, MedianLagSec: r.Median.Seconds(), Ops: st.Ops})
		}
	}
	return out
}

// rasComm is this rank's report of c, read without c.mu.
func (c *Comm) rasComm() ras.CommReport {
	h := c.ras
	now := rasNow()
	r := ras.CommReport{ID: c.jobID, Rank: c.rank, Size: c.size, Status: "RUNNING", Seq: h.seq.Load(), Counts: map[string]uint64{}}
	switch {
	case c.aborted.Load():
		r.Status = "ABORT"
	case h.closing.Load():
		r.Status = "FINALIZE"
	}
	// RAS always lists its five collectives; goccl adds the kinds it ran.
	for _, k := range []opKind{opBroadcast, opReduce, opAllGather, opReduceScatter, opAllReduce} {
		r.Counts[k.String()] = 0
	}
	for k := opKind(1); k < numOpKinds; k++ {
		if n := h.counts[k].Load(); n > 0 {
			r.Counts[k.String()] = n
		}
	}
	if k := opKind(h.opKind.Load()); k != 0 {
		r.Op = &ras.Op{Seq: h.opSeq.Load(), Kind: k.String(), Count: h.opCount.Load(), Bytes: h.opBytes.Load(),
			WaitSec: time.Duration(now - h.opStart.Load()).Seconds()}
		if p := c.waitingOn(); p >= 0 {
			r.Op.Wait = &ras.Wait{Peer: p, IdleSec: -1}
			if c.health != nil {
				r.Op.Wait.IdleSec = c.health.linkIdle(p).Seconds()
			}
		}
	} else {
		r.IdleSec = time.Duration(now - h.lastEnd.Load()).Seconds()
	}
	err := c.Err()
	if err != nil {
		r.Error = err.Error()
	}
	if c.group != nil {
		if lost := transport.LostRank(c.group.LostErr()); lost >= 0 {
			r.Lost = append(r.Lost, lost)
		} else if lost := transport.LostRank(err); lost >= 0 {
			r.Lost = append(r.Lost, lost)
		}
	}
	// After a failure or an abort this rank has closed every link.
	closed := err != nil || c.aborted.Load() || h.closing.Load()
	for p, l := range c.links() {
		if l != nil {
			k := l.Counters()
			r.Links = append(r.Links, ras.Link{Peer: p, Transport: l.Name(), Sent: k.Sent(), Received: k.Received(), Closed: closed})
		}
	}
	r.Skew = rasSkew(c)
	return r
}

// waitingOn is the rank the collective in flight waits on now, -1 if none
// (or point to point, whose sends and receives run side by side).
func (c *Comm) waitingOn() int {
	if c.group == nil || opKind(c.ras.opKind.Load()) == opSendRecv {
		return -1
	}
	if p := c.group.WaitingOn(); p >= 0 && p < c.size && p != c.rank {
		return p
	}
	return -1
}

// rasSource is the server's view of the job: the ranks of the serving
// communicator, found through the cards in its store.
type rasSource struct {
	c     *Comm
	mu    sync.Mutex
	peers []ras.Peer // by rank; Addr "" until the card is read
}

// cardWait bounds the read of a rank's card (all ranks publish theirs
// before Init's barrier, so only a rank that died early lacks one).
const cardWait = time.Second

// Status probes every rank, waiting at most timeout for each.
func (s *rasSource) Status(ctx context.Context, timeout time.Duration) *ras.Job {
	start := time.Now()
	peers := s.cards(ctx)
	res := ras.Gather(ctx, peers, s.c.ras.token, timeout, s.c.ras.hostID, "/proc")
	// A rank this rank's links saw die is dead, whatever its port says
	// (a stopped host keeps no port open, but does not refuse either).
	if s.c.group != nil {
		if lost := transport.LostRank(s.c.group.LostErr()); lost >= 0 && lost < len(res) && res[lost].State == ras.Unresponsive {
			res[lost].State, res[lost].Why = ras.Dead, "lost: "+s.c.group.LostErr().Error()
		}
	}
	return &ras.Job{Version: libVersion(), JobID: s.c.jobID, Time: start, Elapsed: time.Since(start), Peers: res}
}

// cards returns every rank's card, reading from the store those not read
// yet (at once, each for at most cardWait).
func (s *rasSource) cards(ctx context.Context) []ras.Peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.peers == nil {
		s.peers = make([]ras.Peer, s.c.size)
		for r := range s.peers {
			s.peers[r].Rank = r
		}
	}
	var wg sync.WaitGroup
	for r := range s.peers {
		if s.peers[r].Addr != "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, cardWait)
			defer cancel()
			b, err := s.c.rdv.Get(cctx, rasKey(r))
			var p ras.Peer
			if err == nil && json.Unmarshal(b, &p) == nil && p.Rank == r {
				s.peers[r] = p
			}
		}()
	}
	wg.Wait()
	return slices.Clone(s.peers)
}
