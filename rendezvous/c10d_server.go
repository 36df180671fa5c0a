package rendezvous

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"sync"
)

// C10dServer serves the c10d TCPStore wire protocol (see C10dStore), the
// role torchrun's agent plays on MASTER_PORT: `goccl run` starts one so
// that PyTorch programs it launches find a store with
// init_process_group(init_method="env://"). It speaks both numberings, per
// connection: a connection that opens with 2.x's VALIDATE and magic number
// is a 2.x client, any other a 1.x client (a 1.x SET whose key length has
// the magic number in its low half would be a 1 GB key). Queries served:
// SET, COMPARE_SET, GET (held until the key exists), ADD, CHECK, WAIT,
// GETNUMKEYS, DELETE_KEY, and 2.x's PING. Anything else closes the
// connection, as PyTorch's server does with a query it cannot serve. Like
// that server it keeps every key for its lifetime, checks no identity and
// knows no ranks.
type C10dServer struct {
	ln      net.Listener
	mu      sync.Mutex
	m       map[string][]byte
	changed chan struct{} // closed and replaced on every change
	ctx     context.Context
	cancel  context.CancelFunc
	conns   sync.WaitGroup
}

// c10d query numbers of the 1.x protocol beyond those C10dStore uses.
const (
	c10dCompareSet = 1
	c10dDeleteKey  = 8
)

// ServeC10d serves the protocol on ln until Close.
func ServeC10d(ln net.Listener) *C10dServer {
	s := &C10dServer{ln: ln, m: map[string][]byte{}, changed: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Go(func() { s.serve(c) })
		}
	})
	return s
}

// Addr is the address the server listens on.
func (s *C10dServer) Addr() string { return s.ln.Addr().String() }

// Close stops the server and ends every connection.
func (s *C10dServer) Close() error {
	s.cancel()
	err := s.ln.Close()
	s.conns.Wait()
	return err
}

// c10dConn is one client connection's reader and writer.
type c10dConn struct {
	br  *bufio.Reader
	w   net.Conn
	err error // the first read or write error; later reads return zeros
}

// read reads n bytes; memory grows with the bytes that arrive (readN), so a
// client announcing a large vector and sending little costs little. After
// an error it returns zeros, enough for a query byte or an integer.
func (c *c10dConn) read(n int) []byte {
	if c.err == nil {
		b, err := readN(c.br, n)
		if err == nil {
			return b
		}
		c.err = err
	}
	return make([]byte, min(n, 8))
}

func (c *c10dConn) u64() uint64 { return binary.LittleEndian.Uint64(c.read(8)) }

// vec reads a length-prefixed byte vector (at most 1 GiB).
func (c *c10dConn) vec() []byte {
	n := c.u64()
	if c.err == nil && n > 1<<30 {
		c.err = errors.New("c10d: vector longer than 1 GiB")
	}
	if c.err != nil {
		return nil
	}
	return c.read(int(n))
}

func (c *c10dConn) keys() []string {
	n := c.u64()
	if c.err == nil && n > 1<<20 {
		c.err = errors.New("c10d: more than 1M keys")
	}
	var ks []string
	for i := uint64(0); i < n && c.err == nil; i++ {
		ks = append(ks, string(c.vec()))
	}
	return ks
}

func (c *c10dConn) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

func (c *c10dConn) writeVec(v []byte) {
	b := binary.LittleEndian.AppendUint64(make([]byte, 0, 8+len(v)), uint64(len(v)))
	c.write(append(b, v...))
}

func (c *c10dConn) writeI64(v int64) { c.write(binary.LittleEndian.AppendUint64(nil, uint64(v))) }

// serve answers one connection's queries until it ends or the server closes.
func (s *C10dServer) serve(nc net.Conn) {
	defer nc.Close()
	stop := context.AfterFunc(s.ctx, func() { nc.Close() })
	defer stop()
	c := &c10dConn{br: bufio.NewReader(nc), w: nc}
	shift := byte(0) // 1 for a 2.x client: its queries are numbered one higher
	first := true
	for c.err == nil {
		q := c.read(1)[0]
		if c.err != nil {
			return
		}
		if first {
			first = false
			if q == c10dV2Validate {
				if peek, err := c.br.Peek(4); err == nil && binary.LittleEndian.Uint32(peek) == c10dValidateMagic {
					c.read(4)
					shift = 1
					continue
				}
			}
		}
		if shift == 1 && q == c10dV2Ping {
			c.write(c.read(4))
			continue
		}
		if q < shift {
			return // VALIDATE again, or out of place
		}
		if !s.query(c, q-shift) {
			return
		}
	}
}

// query serves one 1.x-numbered query; false: unknown, close the connection.
func (s *C10dServer) query(c *c10dConn, q byte) bool {
	switch q {
	case c10dSet:
		k, v := string(c.vec()), c.vec()
		if c.err == nil {
			s.set(k, v)
		}
	case c10dCompareSet:
		k, expected, desired := string(c.vec()), c.vec(), c.vec()
		if c.err != nil {
			return false
		}
		s.mu.Lock()
		cur, ok := s.m[k]
		switch {
		case !ok && len(expected) == 0:
			s.m[k] = desired
			s.notify()
			cur = desired
		case ok && string(cur) == string(expected):
			s.m[k] = desired
			s.notify()
			cur = desired
		case !ok:
			cur = expected // PyTorch answers with the expected value when the key is missing
		}
		s.mu.Unlock()
		c.writeVec(cur)
	case c10dGet:
		k := string(c.vec())
		if c.err != nil || !s.waitKeys([]string{k}) {
			return false
		}
		s.mu.Lock()
		v := s.m[k]
		s.mu.Unlock()
		c.writeVec(v)
	case c10dAdd:
		k := string(c.vec())
		delta := int64(c.u64())
		if c.err != nil {
			return false
		}
		s.mu.Lock()
		n, err := strconv.ParseInt(string(s.m[k]), 10, 64)
		if _, ok := s.m[k]; !ok {
			n, err = 0, nil
		}
		if err == nil {
			n += delta
			s.m[k] = []byte(strconv.FormatInt(n, 10))
			s.notify()
		}
		s.mu.Unlock()
		if err != nil {
			return false // not an integer: PyTorch's server drops the connection too
		}
		c.writeI64(n)
	case c10dCheck:
		ks := c.keys()
		if c.err != nil {
			return false
		}
		s.mu.Lock()
		ready := byte(c10dReady)
		for _, k := range ks {
			if _, ok := s.m[k]; !ok {
				ready = 1
			}
		}
		s.mu.Unlock()
		c.write([]byte{ready})
	case c10dWait:
		ks := c.keys()
		if c.err != nil || !s.waitKeys(ks) {
			return false
		}
		c.write([]byte{c10dStopWaiting})
	case c10dGetNumKeys:
		s.mu.Lock()
		n := len(s.m)
		s.mu.Unlock()
		c.writeI64(int64(n))
	case c10dDeleteKey:
		k := string(c.vec())
		if c.err != nil {
			return false
		}
		s.mu.Lock()
		_, ok := s.m[k]
		delete(s.m, k)
		s.mu.Unlock()
		n := int64(0)
		if ok {
			n = 1
		}
		c.writeI64(n)
	default:
		return false
	}
	return c.err == nil
}

func (s *C10dServer) set(k string, v []byte) {
	s.mu.Lock()
	s.m[k] = v
	s.notify()
	s.mu.Unlock()
}

// notify wakes the waiters (s.mu held).
func (s *C10dServer) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitKeys blocks until every key exists (true) or the server closes.
func (s *C10dServer) waitKeys(ks []string) bool {
	for {
		s.mu.Lock()
		missing := false
		for _, k := range ks {
			if _, ok := s.m[k]; !ok {
				missing = true
				break
			}
		}
		ch := s.changed
		s.mu.Unlock()
		if !missing {
			return true
		}
		select {
		case <-ch:
		case <-s.ctx.Done():
			return false
		}
	}
}
