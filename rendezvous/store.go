package rendezvous

import "context"

// Store is a small key-value store shared by the ranks of a job (the
// c10d::Store idea). Values are opaque bytes. Every call honours ctx: a call
// that would wait returns an error wrapping ctx.Err() once ctx is done.
//
// All implementations in this package share these rules: keys are at most
// MaxKeyLen bytes and values at most MaxValueLen bytes; keys are never deleted;
// Add keeps its counter as a decimal ASCII integer under the same key, so Get
// of a counter returns e.g. "3" and Wait on a counter key returns once any Add
// has created it; calls after Close (and calls blocked when Close is called)
// fail with an error wrapping ErrClosed.
type Store interface {
	// Set stores value under key, replacing any earlier value, and wakes every
	// Get or Wait blocked on key.
	Set(ctx context.Context, key string, value []byte) error
	// Get returns the value of key, waiting until some rank sets it. The
	// returned slice belongs to the caller.
	Get(ctx context.Context, key string) ([]byte, error)
	// Wait returns once every key exists (immediately when keys is empty).
	Wait(ctx context.Context, keys ...string) error
	// Add adds delta to the integer counter at key (created at 0) and returns
	// the new value. It fails when key holds a value that is not a decimal
	// integer or when the sum overflows int64.
	Add(ctx context.Context, key string, delta int64) (int64, error)
	// Close releases the client (and, for a serving rank, the server).
	Close() error
}

// Creator is a Store that can also store a value only where none is: the
// first Create of a key wins, atomically, and every Create returns the
// value the key then holds. It is consensus: ranks that each propose a
// value under one key all learn the same one, whichever of them die
// (goccl's Comm.Agree decides through it). MemStore, TCPStore (and rank 0's
// store) and PrefixStore over a Creator implement it.
type Creator interface {
	Store
	// Create stores value under key unless key already holds a value, and
	// returns the value key holds after the call: value when this call
	// stored it, else the earlier one. The returned slice belongs to the
	// caller.
	Create(ctx context.Context, key string, value []byte) ([]byte, error)
}
