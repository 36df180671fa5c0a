package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/transport"
)

// lossPollEvery is how often the loss watcher polls.
const lossPollEvery = 200 * time.Millisecond

// losses is the process's loss watcher: it polls, every lossPollEvery, the
// first sending connection of every link that asked (WatchLoss) for what
// its peer sends back on it. Normally nothing: the reverse direction of a
// sending connection carries only the goodbye (Abort). A goodbye naming a
// lost rank means the peer gave up on the job; an error means the kernel
// gave up on the peer (setDeadPeerTimeout: its host or the path to it is
// gone). Polling with poll(2) and a timeout of 0, and peeking (MSG_PEEK)
// instead of reading, leaves the data path alone: one system call per
// interval serves every link of the process, and the goroutine runs only
// while some link is watched.
var losses = lossWatcher{links: map[*link]*lossEntry{}}

type lossWatcher struct {
	mu      sync.Mutex
	links   map[*link]*lossEntry
	running bool
}

type lossEntry struct {
	fd  int
	tls bool // the goodbye is inside TLS records: only errors count
	f   func(error)
}

// WatchLoss implements transport.LossWatcher.
func (l *link) WatchLoss(f func(error)) {
	e := &lossEntry{fd: -1, f: f}
	_, e.tls = l.tx[0].conn.(*tlsStream)
	if err := l.tx[0].conn.control(func(fd uintptr) { e.fd = int(fd) }); err != nil || e.fd < 0 {
		return
	}
	losses.mu.Lock()
	defer losses.mu.Unlock()
	if l.closed.Load() {
		return
	}
	losses.links[l] = e
	if !losses.running {
		losses.running = true
		go losses.loop()
	}
}

// unwatch stops watching l; after it returns the watcher no longer uses l's
// descriptor, so it may be closed.
func (w *lossWatcher) unwatch(l *link) {
	w.mu.Lock()
	delete(w.links, l)
	w.mu.Unlock()
}

func (w *lossWatcher) loop() {
	var (
		fds     []pollFd
		watched []*link
		fire    []func()
	)
	for {
		time.Sleep(lossPollEvery)
		w.mu.Lock()
		if len(w.links) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		fds, watched, fire = fds[:0], watched[:0], fire[:0]
		for l, e := range w.links {
			fds = append(fds, pollFd{fd: e.fd, tls: e.tls})
			watched = append(watched, l)
		}
		if pollNow(fds) {
			for i, l := range watched {
				if !fds[i].ready {
					continue
				}
				err, done := l.lossEvent(fds[i])
				f := w.links[l].f
				if done {
					delete(w.links, l)
				}
				if err != nil {
					fire = append(fire, func() {
						if !l.closed.Load() {
							f(err)
						}
					})
				}
			}
		}
		w.mu.Unlock()
		for _, f := range fire {
			f() // outside the lock: it aborts links, which unwatch them
		}
	}
}

// lossEvent reads what poll(2) found on l's watched connection: err is the
// loss to report (nil: none), done whether to stop watching.
func (l *link) lossEvent(p pollFd) (err error, done bool) {
	var b [goodbyeSize]byte
	n, perr := peek(p.fd, b[:], p.tls)
	lost := func(rank, via int, cause error) error {
		return &transport.PeerError{Peer: l.peer, Op: "link", Err: &transport.LostError{Rank: rank, Via: via, Cause: cause}}
	}
	switch {
	case perr != nil && isUnreachableErr(perr):
		return lost(l.peer, -1, unreachable(perr)), true
	case perr != nil:
		// A TLS connection is polled for errors and hang-ups only: without
		// an error it has ended. A plain one woke for nothing (EAGAIN) is
		// still watched.
		return nil, p.tls || !errors.Is(perr, syscall.EAGAIN)
	case p.tls:
		return nil, false // data inside TLS records: not ours to read
	case n == 0:
		return nil, true // the peer's process closed or ended: its next call says which
	case n < goodbyeSize:
		return nil, false // the rest of the goodbye is on its way
	case string(b[:8]) != goodbyeMagic:
		return nil, true
	}
	r := int(int32(binary.LittleEndian.Uint32(b[8:])))
	if r < 0 || r == l.self {
		return nil, true // closed without a loss
	}
	return lost(r, l.peer, nil), true
}

// unreachable is the cause of a loss found by the kernel giving up on the
// peer.
func unreachable(err error) error {
	return fmt.Errorf("unreachable: its host stopped answering (nothing acknowledged for %v, %s): %w", socketTimeout(), config.SocketTimeout.Name, err)
}
