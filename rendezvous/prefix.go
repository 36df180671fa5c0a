package rendezvous

import (
	"context"
	"fmt"
)

// PrefixStore returns a view of s in which every key is prefixed with prefix
// (the c10d PrefixStore idea): communicators made from one job's store
// (goccl's Comm.Split) keep their keys apart. Close on the view does nothing;
// the underlying store stays open and must outlive the view's use.
func PrefixStore(s Store, prefix string) Store { return &prefixStore{s: s, prefix: prefix} }

type prefixStore struct {
	s      Store
	prefix string
}

func (p *prefixStore) Set(ctx context.Context, key string, value []byte) error {
	return p.s.Set(ctx, p.prefix+key, value)
}

func (p *prefixStore) Get(ctx context.Context, key string) ([]byte, error) {
	return p.s.Get(ctx, p.prefix+key)
}

func (p *prefixStore) Wait(ctx context.Context, keys ...string) error {
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = p.prefix + k
	}
	return p.s.Wait(ctx, full...)
}

func (p *prefixStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	return p.s.Add(ctx, p.prefix+key, delta)
}

func (p *prefixStore) Close() error { return nil }

// Create implements Creator when the underlying store does.
func (p *prefixStore) Create(ctx context.Context, key string, value []byte) ([]byte, error) {
	c, ok := p.s.(Creator)
	if !ok {
		return nil, fmt.Errorf("rendezvous: create %s: the store (%T) cannot create keys atomically", quoteKey(p.prefix+key), p.s)
	}
	return c.Create(ctx, p.prefix+key, value)
}
