package xfer

import "sync"

// workQueue runs copy chunks (own memory, file I/O, a same-host peer's
// mapped memory) on a few goroutines.
type workQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	q      []*chunk
	head   int
	closed bool
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

func (w *workQueue) push(c *chunk) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		c.finish(ErrClosed)
		return
	}
	w.q = append(w.q, c)
	w.mu.Unlock()
	w.cond.Signal()
}

// pushAll queues cs in one go (one wake-up for all).
func (w *workQueue) pushAll(cs []*chunk) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		for _, c := range cs {
			c.finish(ErrClosed)
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
	for w.head == len(w.q) && !w.closed {
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

// close lets the workers finish what is queued, then stop.
func (w *workQueue) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cond.Broadcast()
}
