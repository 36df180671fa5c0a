package xfer

import (
	"sync"
	"sync/atomic"

	"github.com/goccl/goccl/internal/memcpy"
)

// The memory lane: copies done in this process, between this agent's own
// registrations (memory and files) or into and out of a same-host peer's
// Alloc memory mapped here, by a few worker goroutines, or by PostXferReq
// itself when they are small.

// inlineMax: memory copies of at most this many bytes in all are done in
// PostXferReq, no worker woken.
const inlineMax = 2 << 20

// helpMax is the most bytes of memory copies PostXferReq does itself
// after queueing a request's pieces for the workers, taking them off the
// queue as the workers do (UCX's shared-memory put copies in the caller
// too): waking a worker costs more than copying a megabyte on a small
// machine, and the poster's core is free. Post returns Done when it did
// everything.
const helpMax = 4 << 20

// memLane is the agent's workers seen from one kind of copy: its own
// memory, or peers' mapped memory (each counted in its own Stats field).
type memLane struct {
	w    *workQueue
	ctr  *atomic.Uint64
	name string // "local" or "shm"
}

func (l *memLane) inline() bool   { return true }
func (l *memLane) count(n uint64) { l.ctr.Add(n) }
func (l *memLane) path() string   { return l.name }

// fail closes the work queue, which both memory lanes (a.local, a.shm)
// share, so it ends both; unlike the network lanes' fail, what is queued is
// still copied, and only later posts finish with err. Only Agent.Close
// ends the queue (a.work.close), once the peers have failed.
func (l *memLane) fail(err error) { l.w.close(err) }

// post copies a request's pieces: here when they are all of the request,
// memory to memory and at most inlineMax bytes; else by the workers, this
// goroutine helping with up to helpMax bytes when they are memory to
// memory (no file I/O in the caller).
func (l *memLane) post(cs []*chunk) {
	var n uint64
	mem := true
	for _, c := range cs {
		n += c.r.d.Len
		mem = mem && c.l.mem != nil && c.r.mem != nil
	}
	switch {
	case mem && len(cs) == len(cs[0].req.chunks) && n <= inlineMax: // no worker woken
		for _, c := range cs {
			c.finish(c.run())
		}
	case mem:
		l.w.pushAll(cs)
		l.w.help(helpMax)
	default:
		l.w.pushAll(cs)
	}
}

// side is one end of a chunk's copy: DRAM bytes, or a file range.
type side struct {
	mem []byte
	reg *region // FILE
	d   Desc
}

// copySides copies src to dst (equal lengths).
func copySides(dst, src side) error {
	switch {
	case dst.mem != nil && src.mem != nil:
		memcpy.Copy(dst.mem, src.mem)
		return nil
	case dst.mem != nil:
		return fileIO(src.reg, src.d, dst.mem, false)
	case src.mem != nil:
		return fileIO(dst.reg, dst.d, src.mem, true)
	}
	b := alignedBuf(int(src.d.Len))
	if err := fileIO(src.reg, src.d, b, false); err != nil {
		return err
	}
	return fileIO(dst.reg, dst.d, b, true)
}

// run does a memory lane's chunk.
func (c *chunk) run() error {
	if c.req.op == WRITE {
		return copySides(c.r, c.l)
	}
	return copySides(c.l, c.r)
}

// workQueue runs copy chunks (own memory, file I/O, a same-host peer's
// mapped memory) on a few goroutines.
type workQueue struct {
	mu   sync.Mutex
	cond *sync.Cond
	q    []*chunk
	head int
	err  error // closed: later pushes finish with it
}

func newWorkQueue(n int, wg *sync.WaitGroup) *workQueue {
	w := &workQueue{}
	w.cond = sync.NewCond(&w.mu)
	wg.Add(n)
	for range n {
		go func() {
			defer wg.Done()
			w.loop()
		}()
	}
	return w
}

// pushAll queues cs in one go (one wake-up for all).
func (w *workQueue) pushAll(cs []*chunk) {
	w.mu.Lock()
	if err := w.err; err != nil {
		w.mu.Unlock()
		for _, c := range cs {
			c.finish(err)
		}
		return
	}
	w.q = append(w.q, cs...)
	w.mu.Unlock()
	if len(cs) == 1 {
		w.cond.Signal()
	} else {
		w.cond.Broadcast()
	}
}

func (w *workQueue) loop() {
	for c := w.next(); c != nil; c = w.next() {
		c.finish(c.run())
	}
}

// help runs queued chunks in the caller until the queue is empty or about
// max bytes are copied.
func (w *workQueue) help(max uint64) {
	for done := uint64(0); done < max; {
		c := w.nextMemory()
		if c == nil {
			return
		}
		c.finish(c.run())
		done += c.r.d.Len
	}
}

// nextMemory takes the head chunk when it is a memory-to-memory copy (no
// file I/O in the caller's help), nil otherwise.
func (w *workQueue) nextMemory() *chunk {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.head == len(w.q) || w.q[w.head].l.mem == nil || w.q[w.head].r.mem == nil {
		return nil
	}
	return w.take()
}

// next takes the head chunk, waiting for one until the queue is closed.
func (w *workQueue) next() *chunk {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.head == len(w.q) && w.err == nil {
		w.cond.Wait()
	}
	if w.head == len(w.q) {
		return nil
	}
	return w.take()
}

// take removes the head chunk; w.mu held, queue not empty.
func (w *workQueue) take() *chunk {
	c := w.q[w.head]
	w.q[w.head] = nil
	w.head++
	if w.head == len(w.q) {
		w.q, w.head = w.q[:0], 0
	}
	return c
}

// close lets the workers finish what is queued, then stop; later pushes
// finish with err.
func (w *workQueue) close(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.cond.Broadcast()
}
