package rendezvous

import (
	"context"
	"fmt"
	"sync"
)

// memStore is the in-process Store returned by NewMemStore.
type memStore struct {
	kv        *kv
	closed    chan struct{}
	closeOnce sync.Once
}

// NewMemStore returns a Store kept in this process's memory, for ranks that
// are goroutines of one process (tests). Share the one instance between the
// ranks; it is safe for concurrent use, and Get and Wait block until the key
// is set, ctx is done, or the store is closed. Close affects every user of the
// instance, so only its owner should call it, once all ranks are done.
func NewMemStore() Store {
	return &memStore{kv: newKV(), closed: make(chan struct{})}
}

func (s *memStore) check(ctx context.Context, op, key string) error {
	select {
	case <-s.closed:
		return fmt.Errorf("rendezvous: mem store: %s %s: %w", op, quoteKey(key), ErrClosed)
	default:
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("rendezvous: mem store: %s %s: %w", op, quoteKey(key), err)
	}
	return nil
}

func (s *memStore) Set(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkValue(value); err != nil {
		return err
	}
	if err := s.check(ctx, "set", key); err != nil {
		return err
	}
	s.kv.set(key, append([]byte{}, value...))
	return nil
}

// Create implements Creator.
func (s *memStore) Create(ctx context.Context, key string, value []byte) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if err := checkValue(value); err != nil {
		return nil, err
	}
	if err := s.check(ctx, "create", key); err != nil {
		return nil, err
	}
	return append([]byte{}, s.kv.create(key, append([]byte{}, value...))...), nil
}

// wait blocks until key exists and returns its value.
func (s *memStore) wait(ctx context.Context, op, key string) ([]byte, error) {
	for {
		if err := s.check(ctx, op, key); err != nil {
			return nil, err
		}
		v, ok, set := s.kv.lookup(key)
		if ok {
			return v, nil
		}
		select {
		case <-set:
		case <-ctx.Done():
		case <-s.closed:
		}
	}
}

func (s *memStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	v, err := s.wait(ctx, "get", key)
	if err != nil {
		return nil, err
	}
	return append([]byte{}, v...), nil
}

func (s *memStore) Wait(ctx context.Context, keys ...string) error {
	if err := checkKeys(keys); err != nil {
		return err
	}
	if err := s.check(ctx, "wait", ""); err != nil && len(keys) == 0 {
		return err
	}
	for _, k := range keys {
		if _, err := s.wait(ctx, "wait", k); err != nil {
			return err
		}
	}
	return nil
}

func (s *memStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	if err := s.check(ctx, "add", key); err != nil {
		return 0, err
	}
	return s.kv.add(key, delta)
}

func (s *memStore) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}
