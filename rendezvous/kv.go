package rendezvous

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/goccl/goccl/rendezvous/internal/storekit"
)

// Limits shared by every Store in this package and its subpackages (and
// enforced on the TCP wire).
const (
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = storekit.MaxKeyLen
	// MaxValueLen is the longest value, in bytes.
	MaxValueLen = storekit.MaxValueLen
	// MaxWaitKeys is the most keys one Wait call may name.
	MaxWaitKeys = storekit.MaxWaitKeys
)

// ErrClosed is wrapped by the errors of calls made on (or blocked in) a closed
// Store. errors.Is treats it, goccl.ErrClosed and transport.ErrClosed as one.
var ErrClosed = storekit.ErrClosed

// ErrReplaced is wrapped by the errors of TCPStore calls that had to
// reconnect and found another server instance at the store's address: the
// server this client used is gone (its rank 0 closed it, and possibly
// served a new store there), and none of what this client's job stored is
// there. The client does not go on with the new server.
var ErrReplaced = errors.New("rendezvous: the store server was replaced by another instance")

// The checks and helpers every store shares (see storekit).
func checkKey(key string) error     { return storekit.CheckKey(key) }
func checkKeys(keys []string) error { return storekit.CheckKeys(keys) }
func checkValue(value []byte) error { return storekit.CheckValue(value) }
func quoteKey(key string) string    { return storekit.QuoteKey(key) }
func randomHex(n int) string        { return storekit.RandomHex(n) }

// addCounter parses old (absent when !exists: counts as 0) as a decimal
// int64, adds delta and returns the new value and its encoding.
func addCounter(key string, old []byte, exists bool, delta int64) (int64, []byte, error) {
	return storekit.AddCounter(key, old, exists, delta)
}

// kv is the in-memory map behind MemStore and TCPServer. Values stored in it
// are never modified in place (Set and Add store fresh slices), so a value
// returned by lookup may be read without the lock.
type kv struct {
	mu      sync.Mutex
	m       map[string][]byte
	waiters map[string]chan struct{} // closed when the key is first set

	// The ranks lost so far (TCPServer), in the order they were lost, and
	// a channel closed (and replaced) at each new loss.
	losses []loss
	lost   chan struct{}
}

// loss is one lost rank and why.
type loss struct {
	rank int
	why  string
}

func newKV() *kv {
	return &kv{m: make(map[string][]byte), waiters: make(map[string]chan struct{}), lost: make(chan struct{})}
}

// markLost records that rank is gone (once per rank) and wakes every waiter.
func (k *kv) markLost(rank int, why string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, l := range k.losses {
		if l.rank == rank {
			return
		}
	}
	k.losses = append(k.losses, loss{rank, why})
	close(k.lost)
	k.lost = make(chan struct{})
}

// lossAfter returns the n-th loss (from 0) when there is one; otherwise a
// channel closed at the next loss.
func (k *kv) lossAfter(n int) (l loss, ok bool, next <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if n < len(k.losses) {
		return k.losses[n], true, nil
	}
	return loss{}, false, k.lost
}

// numLosses is how many ranks were lost.
func (k *kv) numLosses() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.losses)
}

// create stores value under key unless key holds one, and returns the value
// key holds after the call (value when created).
func (k *kv) create(key string, value []byte) []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	if v, ok := k.m[key]; ok {
		return v
	}
	k.storeLocked(key, value)
	return value
}

func (k *kv) storeLocked(key string, value []byte) {
	k.m[key] = value
	if ch, ok := k.waiters[key]; ok {
		close(ch)
		delete(k.waiters, key)
	}
}

// set stores value (which the caller must not modify afterwards).
func (k *kv) set(key string, value []byte) {
	k.mu.Lock()
	k.storeLocked(key, value)
	k.mu.Unlock()
}

// lookup returns the value of key, or, when key is absent, a channel closed
// once it is set. Keys are never deleted, so a key seen once stays.
func (k *kv) lookup(key string) (value []byte, ok bool, set <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if v, ok := k.m[key]; ok {
		return v, true, nil
	}
	ch, ok := k.waiters[key]
	if !ok {
		ch = make(chan struct{})
		k.waiters[key] = ch
	}
	return nil, false, ch
}

func (k *kv) add(key string, delta int64) (int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	old, exists := k.m[key]
	n, enc, err := addCounter(key, old, exists, delta)
	if err != nil {
		return 0, err
	}
	k.storeLocked(key, enc)
	return n, nil
}

// backoff is storekit.Backoff: a capped exponential delay with jitter.
type backoff struct{ cur, max time.Duration }

func (b *backoff) next() time.Duration {
	k := storekit.Backoff{Cur: b.cur, Max: b.max}
	d := k.Next()
	b.cur = k.Cur
	return d
}

// sleepCtx sleeps for d unless ctx or closed ends first; it returns ctx's
// error or ErrClosed in that case.
func sleepCtx(ctx context.Context, closed <-chan struct{}, d time.Duration) error {
	return storekit.Sleep(ctx, closed, d)
}

var (
	_ Store = (*memStore)(nil)
	_ Store = (*TCPStore)(nil)
	_ Store = (*FileStore)(nil)
	_ Store = (*servingStore)(nil)

	_ Creator = (*memStore)(nil)
	_ Creator = (*TCPStore)(nil)
	_ Creator = (*servingStore)(nil)
	_ Creator = (*prefixStore)(nil)
)
