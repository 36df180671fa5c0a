package bootstrap

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/rendezvous"
)

// recStore fails Get of failKey and records the keys of the barrier calls
// made through it.
type recStore struct {
	rendezvous.Store
	failKey string
	mu      sync.Mutex
	barrier []string
}

func (s *recStore) note(key string) {
	if strings.HasPrefix(key, "goccl/shm-mapped") {
		s.mu.Lock()
		s.barrier = append(s.barrier, key)
		s.mu.Unlock()
	}
}

func (s *recStore) Get(ctx context.Context, key string) ([]byte, error) {
	if key == s.failKey {
		return nil, fmt.Errorf("store of an earlier Init went away: %w", io.ErrUnexpectedEOF)
	}
	s.note(key)
	return s.Store.Get(ctx, key)
}

func (s *recStore) Add(ctx context.Context, key string, d int64) (int64, error) {
	s.note(key)
	return s.Store.Add(ctx, key, d)
}

func (s *recStore) Wait(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		s.note(k)
	}
	return s.Store.Wait(ctx, keys...)
}

// TestConnectShmFailureEndsConnect: an error in the shared-memory exchange
// (a store call, or opening the peer's ring) ends Connect with that error at
// once: no barrier after it (where a rank whose store call failed could wait
// for ever on a store it reached again, another than rank 0's), and no ring
// file left behind.
func TestConnectShmFailureEndsConnect(t *testing.T) {
	for _, tc := range []struct {
		name, failKey, shm0, want string
	}{
		{"store", "goccl/shm/0", "", "waiting for rank 0's shared memory"},
		{"ring", "", "01", "shared memory with rank 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			mem := rendezvous.NewMemStore()
			defer mem.Close()
			// Rank 0, on this host, has published its job id and card
			// (and, for "ring", that it has its ring from rank 1, which
			// does not exist).
			mem.Set(ctx, "goccl/jobid", []byte("shmfail"))
			mem.Set(ctx, cardKey(0), []byte(card{Host: must(hostIdentity("")), Addr: "127.0.0.1:9", Pid: os.Getpid()}.String()))
			if tc.shm0 != "" {
				mem.Set(ctx, "goccl/shm/0", []byte(tc.shm0))
			}
			store := &recStore{Store: mem, failKey: tc.failKey}
			dir := t.TempDir()
			t.Setenv("GOCCL_SHM_DIR", dir)
			start := time.Now()
			_, err := Connect(ctx, Params{Rank: 1, Size: 2, LocalRank: -1, Store: store, Log: testLog(t)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Connect: %v, want an error containing %q", err, tc.want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("Connect took %v to fail", d)
			}
			if len(store.barrier) > 0 {
				t.Errorf("Connect went on to the barrier after the failure: %v", store.barrier)
			}
			if left, _ := os.ReadDir(dir); len(left) > 0 {
				t.Errorf("files left in the shared-memory directory: %v", left)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
