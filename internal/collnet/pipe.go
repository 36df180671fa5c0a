package collnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// pipe moves one job's operations through this node: per child a reader
// filling chunk buffers, a reducer folding chunk k of every child as soon
// as all have arrived, an up writer (leaf) or the result itself (root),
// and per child a writer of the result frames. Buffers are allocated once
// per job: window chunks per child, window results, window down chunks.
type pipe struct {
	j     *job
	names []string
	free  []chan []byte // per child: empty chunk buffers
	res   chan []byte   // empty result buffers
	down  chan []byte   // empty buffers for the parent's result frames (leaf)
}

func newPipe(j *job) *pipe {
	p := &pipe{j: j, free: make([]chan []byte, j.group), res: make(chan []byte, window), down: make(chan []byte, window)}
	for i := range p.free {
		p.free[i] = make(chan []byte, window)
		for range window {
			p.free[i] <- make([]byte, ChunkBytes)
		}
	}
	for range window {
		p.res <- make([]byte, ChunkBytes)
		if j.upGroup > 0 {
			p.down <- make([]byte, ChunkBytes)
		}
	}
	j.mu.Lock()
	p.names = append([]string(nil), j.names...)
	j.mu.Unlock()
	return p
}

// readHeaders reads every child's next operation header; done when every
// child closed its stream at this boundary (the communicator closed).
func (p *pipe) readHeaders() (opHeader, bool, error) {
	var first opHeader
	var closed []string
	firstFrom := -1
	var b [opSize]byte
	for i, c := range p.j.children {
		if _, err := io.ReadFull(c, b[:]); err != nil {
			if errors.Is(err, io.EOF) {
				closed = append(closed, p.names[i])
				continue
			}
			return first, false, fmt.Errorf("%s: %w", p.names[i], err)
		}
		var h opHeader
		h.decode(b[:])
		if firstFrom < 0 {
			first, firstFrom = h, i
		} else if h != first {
			return first, false, fmt.Errorf("operations differ: %s sent %v, %s sent %v", p.names[firstFrom], first, p.names[i], h)
		}
	}
	switch len(closed) {
	case 0:
		return first, false, nil
	case len(p.j.children):
		return first, true, nil
	}
	return first, false, fmt.Errorf("%s closed (gone) while the others started %v", strings.Join(closed, ", "), first)
}

// chunk is a result chunk on its way down to the children.
type chunk struct {
	buf  []byte
	home chan []byte // the pool it returns to
	refs atomic.Int32
}

func (c *chunk) done() {
	if c.refs.Add(-1) == 0 {
		c.home <- c.buf[:cap(c.buf)]
	}
}

// pipeOp is one operation's state while run moves it: the goroutines'
// channels and the failure that ends it.
type pipeOp struct {
	p      *pipe
	hdr    opHeader
	nk     int // chunks
	f2     func(acc, b []byte)
	f3     func(acc, a, b []byte)
	wg     sync.WaitGroup
	errMu  sync.Mutex
	best   error // the failure to report: another node's account beats this node's view
	abort  chan struct{}
	closed bool          // abort is closed
	down   chan struct{} // closed when the leaf's reader of the root's frames has returned

	full      []chan []byte // per child: its chunks, read
	outs      []chan *chunk // per child: result chunks to send
	completed []bool        // per child: its writer sent the whole result
	reduced   chan []byte   // partial results to send up (leaf)
}

// run moves one operation of hdr.bytes bytes. On failure the children
// that are between frames get an error frame naming what failed, the
// others see their connection end; run returns the failure.
func (p *pipe) run(hdr opHeader) error {
	f2, f3, err := reduceFunc(hdr)
	if err != nil {
		return fmt.Errorf("%v: %w", hdr, err)
	}
	j := p.j
	if j.parent != nil {
		var b [opSize]byte
		hdr.encode(b[:])
		if _, err := j.parent.Write(b[:]); err != nil {
			return fmt.Errorf("parent %s: %w", j.n.cfg.Parent, err)
		}
	}
	n := len(j.children)
	o := &pipeOp{p: p, hdr: hdr, nk: chunks(hdr.bytes), f2: f2, f3: f3, abort: make(chan struct{}), down: make(chan struct{}),
		full: make([]chan []byte, n), outs: make([]chan *chunk, n), completed: make([]bool, n), reduced: make(chan []byte, window)}
	if j.parent == nil {
		close(o.down)
	}
	for i, c := range j.children {
		o.full[i] = make(chan []byte, window)
		o.wg.Add(1)
		go o.readChild(i, c)
	}
	for i, c := range j.children {
		o.outs[i] = make(chan *chunk, 2*window)
		o.wg.Add(1)
		go o.writeChild(i, c)
	}
	o.wg.Add(1)
	go o.reduce()
	if j.parent != nil {
		// Leaf: partial results up; the root's result frames down.
		o.wg.Add(2)
		go o.sendUp()
		go o.receiveDown()
	}
	o.wg.Wait()
	err = o.failure()
	if err != nil {
		for i, c := range j.children {
			if o.completed[i] {
				p.sendError(c, err)
			}
		}
	}
	return err
}

// fail records err and, the first time, aborts the operation.
func (o *pipeOp) fail(err error) {
	o.errMu.Lock()
	defer o.errMu.Unlock()
	var fw *forwarded
	if o.best == nil || errors.As(err, &fw) && !errors.As(o.best, &fw) {
		o.best = err
	}
	if o.closed {
		return
	}
	o.closed = true
	close(o.abort)
	// Unblock the reads from children; let writes to them finish the
	// frame in progress (the children are reading) so that an error
	// frame can follow; stop writing up, but read what the root says.
	j := o.p.j
	now := time.Now()
	for _, c := range j.children {
		c.SetReadDeadline(now)
		c.SetWriteDeadline(now.Add(2 * time.Second))
	}
	if j.parent != nil {
		j.parent.SetWriteDeadline(now)
		j.parent.SetReadDeadline(now.Add(time.Second))
	}
}

func (o *pipeOp) failure() error {
	o.errMu.Lock()
	defer o.errMu.Unlock()
	return o.best
}

// readChild reads chunk k of child i into one of its buffers, for every k.
func (o *pipeOp) readChild(i int, c net.Conn) {
	defer o.wg.Done()
	p := o.p
	for k := range o.nk {
		var buf []byte
		select {
		case buf = <-p.free[i]:
		case <-o.abort:
			return
		}
		buf = buf[:chunkLen(o.hdr.bytes, k)]
		if _, err := io.ReadFull(c, buf); err != nil {
			o.fail(fmt.Errorf("%s: reading %v: %w", p.names[i], o.hdr, err))
			return
		}
		o.full[i] <- buf
	}
}

// writeChild sends the result frames to child i. A child whose writer sent
// the whole result (completed) is past this operation when another
// child's failure ends it: it learns of it from an error frame as the
// first frame of its next operation's result, sent by run.
func (o *pipeOp) writeChild(i int, c net.Conn) {
	defer o.wg.Done()
	var fh [frameSize]byte
	binary.LittleEndian.PutUint32(fh[:], frameData)
	for range o.nk {
		var ck *chunk
		select {
		case ck = <-o.outs[i]:
		case <-o.abort:
			<-o.down
			o.p.sendError(c, o.failure())
			return
		}
		binary.LittleEndian.PutUint32(fh[4:], uint32(len(ck.buf)))
		err := writeFrame(c, fh[:], ck.buf)
		ck.done()
		if err != nil {
			o.fail(fmt.Errorf("%s: sending the result of %v: %w", o.p.names[i], o.hdr, err))
			return
		}
	}
	o.completed[i] = true
}

// multicast hands buf (from pool home) to every child's writer.
func (o *pipeOp) multicast(buf []byte, home chan []byte) {
	ck := &chunk{buf: buf, home: home}
	ck.refs.Store(int32(len(o.outs)))
	for _, out := range o.outs {
		out <- ck
	}
}

// take returns child i's next chunk, nil once the operation aborted.
func (o *pipeOp) take(i int) []byte {
	select {
	case b := <-o.full[i]:
		return b
	case <-o.abort:
		return nil
	}
}

// reduce folds chunk k of every child into a result buffer, for every k:
// the result itself at the root, a partial result for the parent at a
// leaf.
func (o *pipeOp) reduce() {
	defer o.wg.Done()
	p := o.p
	for k := range o.nk {
		var acc []byte
		select {
		case acc = <-p.res:
		case <-o.abort:
			return
		}
		acc = acc[:chunkLen(o.hdr.bytes, k)]
		if !o.fold(acc) {
			return
		}
		if p.j.parent == nil {
			o.multicast(acc, p.res) // the root: this is the result
		} else {
			o.reduced <- acc
		}
	}
}

// fold reduces the children's next chunks into acc and returns their
// buffers; false once the operation aborted.
func (o *pipeOp) fold(acc []byte) bool {
	p := o.p
	b0 := o.take(0)
	if b0 == nil {
		return false
	}
	if len(o.full) == 1 {
		copy(acc, b0)
	} else {
		b1 := o.take(1)
		if b1 == nil {
			return false
		}
		o.f3(acc, b0, b1)
		p.free[1] <- b1[:cap(b1)]
		for i := 2; i < len(o.full); i++ {
			b := o.take(i)
			if b == nil {
				return false
			}
			o.f2(acc, b)
			p.free[i] <- b[:cap(b)]
		}
	}
	p.free[0] <- b0[:cap(b0)]
	return true
}

// sendUp writes the leaf's partial results to the parent.
func (o *pipeOp) sendUp() {
	defer o.wg.Done()
	p, j := o.p, o.p.j
	for range o.nk {
		var acc []byte
		select {
		case acc = <-o.reduced:
		case <-o.abort:
			return
		}
		_, err := j.parent.Write(acc)
		p.res <- acc[:cap(acc)]
		if err != nil {
			o.fail(fmt.Errorf("parent %s: sending %v: %w", j.n.cfg.Parent, o.hdr, err))
			return
		}
	}
}

// receiveDown reads the root's result frames from the parent and hands
// them to the children's writers; an error frame fails the operation with
// the root's account.
func (o *pipeOp) receiveDown() {
	defer o.wg.Done()
	defer close(o.down)
	p, j, hdr := o.p, o.p.j, o.hdr
	var fh [frameSize]byte
	for got := 0; got < int(hdr.bytes); {
		if _, err := io.ReadFull(j.parent, fh[:]); err != nil {
			o.fail(fmt.Errorf("parent %s: receiving the result of %v: %w", j.n.cfg.Parent, hdr, err))
			return
		}
		kind, n := binary.LittleEndian.Uint32(fh[:]), int(binary.LittleEndian.Uint32(fh[4:]))
		if kind == frameError {
			msg := make([]byte, min(n, 4096))
			io.ReadFull(j.parent, msg)
			o.fail(&forwarded{string(msg)})
			return
		}
		if kind != frameData || n > ChunkBytes || n > int(hdr.bytes)-got {
			o.fail(fmt.Errorf("parent %s: bad frame (kind %d, %d bytes) in the result of %v", j.n.cfg.Parent, kind, n, hdr))
			return
		}
		var buf []byte
		select {
		case buf = <-p.down:
		case <-o.abort:
			// Skip the data: the root's account may follow.
			if _, err := io.CopyN(io.Discard, j.parent, int64(n)); err != nil {
				return
			}
			got += n
			continue
		}
		if _, err := io.ReadFull(j.parent, buf[:n]); err != nil {
			o.fail(fmt.Errorf("parent %s: receiving the result of %v: %w", j.n.cfg.Parent, hdr, err))
			return
		}
		o.multicast(buf[:n], p.down)
		got += n
	}
}

// vectorWriter is a connection that writes two buffers as one message
// (transport/roce.Stream).
type vectorWriter interface {
	Writev(a, b []byte) (int, error)
}

// writeFrame writes a frame header and its bytes: as one message on a
// RoCE stream (one slot, one RDMA WRITE), gathered on a socket.
func writeFrame(c net.Conn, fh, data []byte) error {
	if v, ok := c.(vectorWriter); ok {
		_, err := v.Writev(fh, data)
		return err
	}
	bufs := net.Buffers{fh, data}
	_, err := bufs.WriteTo(c)
	return err
}

// forwarded is a failure another node reported (its message names it).
type forwarded struct{ msg string }

func (f *forwarded) Error() string { return f.msg }

// sendError writes an error frame for err to c (a child between frames).
func (p *pipe) sendError(c net.Conn, err error) {
	msg := err.Error()
	var fw *forwarded
	if !errors.As(err, &fw) {
		msg = fmt.Sprintf("aggregation node %s: %s", p.j.n.cfg.Name, msg)
	}
	var fh [frameSize]byte
	binary.LittleEndian.PutUint32(fh[:], frameError)
	binary.LittleEndian.PutUint32(fh[4:], uint32(len(msg)))
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write(append(fh[:], msg...))
}
