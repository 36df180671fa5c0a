// Package rendezvous provides the key-value stores ranks use to find each other
// at Init: an embedded TCP store served by rank 0 (the default), a file store in
// a shared directory, and an in-process store for tests.
package rendezvous

import "context"

// Store is a small key-value store shared by the ranks of a job (the
// c10d::Store idea). Values are opaque bytes. Every call honours ctx: a call
// that would wait returns an error wrapping ctx.Err() once ctx is done.
type Store interface {
	// Set stores value under key, replacing any earlier value.
	Set(ctx context.Context, key string, value []byte) error
	// Get returns the value of key, waiting until some rank sets it.
	Get(ctx context.Context, key string) ([]byte, error)
	// Wait returns once every key exists.
	Wait(ctx context.Context, keys ...string) error
	// Add adds delta to the integer counter at key (created at 0) and returns
	// the new value.
	Add(ctx context.Context, key string, delta int64) (int64, error)
	// Close releases the client (and, for a serving rank, the server).
	Close() error
}
