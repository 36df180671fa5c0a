package goccl

import (
	"context"
	"errors"
	"time"

	"github.com/goccl/goccl/rendezvous"
)

// Comm is a communicator: a group of ranks that run collectives together.
type Comm struct {
	rank, size, localRank int
	timeout               time.Duration
}

// Option configures Init.
type Option func(*config)

type config struct {
	rank, size, localRank int
	storeAddr             string
	timeout               time.Duration
	store                 rendezvous.Store
}

// WithStore makes Init rendezvous through an existing store (for example one
// shared by goroutine ranks in a test) instead of the environment's.
func WithStore(s rendezvous.Store) Option { return func(c *config) { c.store = s } }

// WithRank sets this process's rank (overrides the environment).
func WithRank(r int) Option { return func(c *config) { c.rank = r } }

// WithWorldSize sets the number of ranks (overrides the environment).
func WithWorldSize(n int) Option { return func(c *config) { c.size = n } }

// WithLocalRank sets the rank among the ranks on this host.
func WithLocalRank(r int) Option { return func(c *config) { c.localRank = r } }

// WithStoreAddr sets the host:port of the rendezvous store that rank 0 serves.
func WithStoreAddr(addr string) Option { return func(c *config) { c.storeAddr = addr } }

// WithTimeout sets the default operation timeout (GOCCL_TIMEOUT).
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// Init joins the communicator described by opts and the environment.
func Init(ctx context.Context, opts ...Option) (*Comm, error) { return nil, errors.New("TODO") }

// Rank is this process's rank in [0, Size()).
func (c *Comm) Rank() int { return c.rank }

// Size is the world size.
func (c *Comm) Size() int { return c.size }

// LocalRank is the rank among the ranks on this host.
func (c *Comm) LocalRank() int { return c.localRank }

// Close releases the communicator's links.
func (c *Comm) Close() error { return nil }

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier(ctx context.Context) error { return errors.New("TODO") }

func (c *Comm) AllReduceBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp) error {
	return errors.New("TODO")
}
func (c *Comm) BroadcastBytes(ctx context.Context, send, recv []byte, count int, dt DataType, root int) error {
	return errors.New("TODO")
}
func (c *Comm) ReduceBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp, root int) error {
	return errors.New("TODO")
}
func (c *Comm) AllGatherBytes(ctx context.Context, send, recv []byte, count int, dt DataType) error {
	return errors.New("TODO")
}
func (c *Comm) ReduceScatterBytes(ctx context.Context, send, recv []byte, count int, dt DataType, op RedOp) error {
	return errors.New("TODO")
}
func (c *Comm) AllToAllBytes(ctx context.Context, send, recv []byte, count int, dt DataType) error {
	return errors.New("TODO")
}
func (c *Comm) SendBytes(ctx context.Context, buf []byte, count int, dt DataType, peer int) error {
	return errors.New("TODO")
}
func (c *Comm) SendRecvBytes(ctx context.Context, send []byte, sendPeer int, recv []byte, recvPeer int, count int, dt DataType) error {
	return errors.New("TODO")
}
func (c *Comm) RecvBytes(ctx context.Context, buf []byte, count int, dt DataType, peer int) error {
	return errors.New("TODO")
}
