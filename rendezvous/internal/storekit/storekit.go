// Package storekit holds what every rendezvous Store shares: the limits on
// keys and values, the closed error, counter arithmetic and retry pacing.
// Package rendezvous and the store kinds in its subpackages
// (rendezvous/etcd) use it, so that each kind enforces the same rules.
package storekit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/goccl/goccl/internal/closed"
)

// Limits shared by every Store (and enforced on the TCP store's wire).
const (
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 4 << 10
	// MaxValueLen is the longest value, in bytes.
	MaxValueLen = 64 << 20
	// MaxWaitKeys is the most keys one Wait call may name.
	MaxWaitKeys = 1 << 16
)

// ErrClosed is wrapped by the errors of calls made on (or blocked in) a
// closed Store (rendezvous.ErrClosed).
var ErrClosed = closed.New("rendezvous: store closed")

// CheckKey validates a key against MaxKeyLen.
func CheckKey(key string) error {
	if len(key) > MaxKeyLen {
		return fmt.Errorf("rendezvous: key of %d bytes exceeds the limit of %d", len(key), MaxKeyLen)
	}
	return nil
}

// CheckKeys validates the keys of one Wait.
func CheckKeys(keys []string) error {
	if len(keys) > MaxWaitKeys {
		return fmt.Errorf("rendezvous: wait on %d keys exceeds the limit of %d", len(keys), MaxWaitKeys)
	}
	for _, k := range keys {
		if err := CheckKey(k); err != nil {
			return err
		}
	}
	return nil
}

// CheckValue validates a value against MaxValueLen.
func CheckValue(value []byte) error {
	if len(value) > MaxValueLen {
		return fmt.Errorf("rendezvous: value of %d bytes exceeds the limit of %d", len(value), MaxValueLen)
	}
	return nil
}

// QuoteKey quotes a key for an error message, shortening very long ones.
func QuoteKey(key string) string {
	const max = 64
	if len(key) > max {
		return strconv.Quote(key[:max]) + "..."
	}
	return strconv.Quote(key)
}

// AddCounter parses old (absent when !exists: counts as 0) as a decimal
// int64, adds delta and returns the new value and its encoding.
func AddCounter(key string, old []byte, exists bool, delta int64) (int64, []byte, error) {
	var n int64
	if exists {
		v, err := strconv.ParseInt(string(old), 10, 64)
		if err != nil {
			return 0, nil, fmt.Errorf("rendezvous: add %s: key holds a value that is not a decimal integer", QuoteKey(key))
		}
		n = v
	}
	if (delta > 0 && n > math.MaxInt64-delta) || (delta < 0 && n < math.MinInt64-delta) {
		return 0, nil, fmt.Errorf("rendezvous: add %s: %d%+d overflows int64", QuoteKey(key), n, delta)
	}
	n += delta
	return n, strconv.AppendInt(nil, n, 10), nil
}

// Backoff is a capped exponential delay with jitter: Next returns a random
// delay in [Cur/2, Cur] and doubles Cur up to Max, so that pollers that
// started together (many ranks, or many goroutines contending for a file
// lock) do not retry in lockstep.
type Backoff struct{ Cur, Max time.Duration }

// Next returns the next delay.
func (b *Backoff) Next() time.Duration {
	d := b.Cur
	b.Cur = min(2*b.Cur, b.Max)
	return d/2 + mrand.N(d/2+1)
}

// Sleep sleeps for d unless ctx or closed ends first; it returns ctx's
// error or ErrClosed in that case. A nil closed never ends.
func Sleep(ctx context.Context, closed <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-closed:
		return ErrClosed
	}
}

// RandomHex returns n random bytes in hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand panics rather than return an error)
	return hex.EncodeToString(b)
}
