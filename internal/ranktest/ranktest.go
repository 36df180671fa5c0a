// Package ranktest runs a communicator's ranks as goroutines of one test
// process, joined through an in-memory rendezvous store: the harness of the
// tests of package ddp and of the examples.
package ranktest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
)

// Run runs fn on n goroutine ranks that form one communicator, with a
// context that ends after timeout or as soon as a rank fails (so ranks
// waiting on it are released), and fails the test with every rank's error.
func Run(t testing.TB, n int, timeout time.Duration, fn func(ctx context.Context, c *goccl.Comm) error) {
	t.Helper()
	RunWith(t, n, timeout, nil, fn)
}

// RunWith is Run with more options for every rank's Init.
func RunWith(t testing.TB, n int, timeout time.Duration, opts []goccl.Option, fn func(ctx context.Context, c *goccl.Comm) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	store := rendezvous.NewMemStore()
	defer store.Close()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			c, err := goccl.Init(ctx, append([]goccl.Option{goccl.WithRank(r), goccl.WithWorldSize(n), goccl.WithStore(store)}, opts...)...)
			if err != nil {
				errs[r] = fmt.Errorf("rank %d: goccl.Init: %w", r, err)
				cancel()
				return
			}
			defer c.Close()
			if err := fn(ctx, c); err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
				cancel()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}
