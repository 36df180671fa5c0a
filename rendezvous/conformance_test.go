package rendezvous

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/rendezvous/internal/storetest"
)

// opener returns a new client of one shared store each time it is called.
// Clients are closed by t.Cleanup unless a test closes them itself.
type opener func(t *testing.T) Store

// newStoreFunc creates a fresh, empty store for one subtest.
type newStoreFunc func(t *testing.T) opener

func TestMemStoreConformance(t *testing.T) {
	runConformance(t, func(t *testing.T) opener {
		s := NewMemStore()
		t.Cleanup(func() { s.Close() })
		return func(t *testing.T) Store { return s }
	})
}

func TestTCPStoreConformance(t *testing.T) {
	runConformance(t, func(t *testing.T) opener {
		srv, err := NewTCPServer("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		return func(t *testing.T) Store {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := DialTCP(ctx, srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
	})
}

func TestFileStoreConformance(t *testing.T) {
	runConformance(t, func(t *testing.T) opener {
		dir := t.TempDir()
		return func(t *testing.T) Store {
			s, err := NewFileStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	})
}

func testCtx(t *testing.T) context.Context { return storetest.Ctx(t) }

func async(f func() error) <-chan error { return storetest.Async(f) }

func mustBlock(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	storetest.MustBlock(t, ch, what)
}

func mustReturn(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	return storetest.MustReturn(t, ch, what)
}

// runConformance runs storetest's suite on the stores newStore makes.
func runConformance(t *testing.T, newStore newStoreFunc) {
	storetest.Conformance(t, storetest.Kind{
		New: func(t *testing.T) storetest.Opener {
			open := newStore(t)
			return func(t *testing.T) storetest.Store { return open(t) }
		},
		Barrier: func(ctx context.Context, s storetest.Store, key string, worldSize int) error {
			return Barrier(ctx, s, key, worldSize)
		},
	})
}

func ExampleBarrier() {
	s := NewMemStore()
	defer s.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	for rank := range 3 {
		wg.Go(func() {
			s.Set(ctx, fmt.Sprintf("addr/%d", rank), []byte("..."))
			Barrier(ctx, s, "init", 3)
		})
	}
	wg.Wait()
	err := s.Wait(ctx, "addr/0", "addr/1", "addr/2")
	fmt.Println(err)
	// Output: <nil>
}
