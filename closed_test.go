package goccl_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport"
)

// TestErrClosed: errors.Is(err, goccl.ErrClosed) holds for every way a
// communicator can find something closed: its own Close, a peer's Abort
// (over shared memory and TCP), and a closed rendezvous store (at Init and
// at Split). ErrAborted and ErrPeerLost stay apart from it.
func TestErrClosed(t *testing.T) {
	ctx := context.Background()
	if !errors.Is(transport.ErrClosed, goccl.ErrClosed) || !errors.Is(rendezvous.ErrClosed, goccl.ErrClosed) ||
		!errors.Is(goccl.ErrClosed, transport.ErrClosed) || !errors.Is(goccl.ErrClosed, rendezvous.ErrClosed) {
		t.Error("goccl, transport and rendezvous ErrClosed are not one sentinel")
	}
	for _, other := range []error{goccl.ErrAborted, goccl.ErrPeerLost, goccl.ErrMismatch, goccl.ErrInvalidArgument} {
		if errors.Is(other, goccl.ErrClosed) || errors.Is(goccl.ErrClosed, other) {
			t.Errorf("%v and ErrClosed match", other)
		}
	}

	// A peer's Abort fails this rank's pending (and later) operations with
	// ErrClosed; the aborting rank's own with ErrAborted.
	for _, shmOff := range []string{"0", "1"} {
		t.Setenv("GOCCL_SHM_DISABLE", shmOff)
		errs := goroutineRanks(t, 2, 20*time.Second, func(c *goccl.Comm) error {
			buf := make([]float32, 1024)
			if c.Rank() == 1 {
				time.Sleep(50 * time.Millisecond) // let rank 0 block
				c.Abort()
			}
			return goccl.AllReduce(ctx, c, buf, buf, len(buf), goccl.Sum)
		})
		if err := errs[0]; !errors.Is(err, goccl.ErrClosed) || errors.Is(err, goccl.ErrAborted) || errors.Is(err, goccl.ErrPeerLost) {
			t.Errorf("shm_disable=%s: peer of an aborted rank: got %v, want ErrClosed (and neither ErrAborted nor ErrPeerLost)", shmOff, err)
		}
		if err := errs[1]; !errors.Is(err, goccl.ErrAborted) || errors.Is(err, goccl.ErrClosed) {
			t.Errorf("shm_disable=%s: aborted rank: got %v, want ErrAborted only", shmOff, err)
		}
	}

	// Its own Close.
	c, err := goccl.Init(ctx, goccl.WithRank(0), goccl.WithWorldSize(1))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := goccl.AllReduce(ctx, c, []float32{1}, []float32{1}, 1, goccl.Sum); !errors.Is(err, goccl.ErrClosed) {
		t.Errorf("AllReduce after Close: got %v, want ErrClosed", err)
	}
	if _, err := c.Split(ctx, 0, 0); !errors.Is(err, goccl.ErrClosed) {
		t.Errorf("Split after Close: got %v, want ErrClosed", err)
	}

	// A closed store, at Init and at Split.
	store := rendezvous.NewMemStore()
	store.Close()
	_, err = goccl.Init(ctx, goccl.WithRank(0), goccl.WithWorldSize(2), goccl.WithStore(store), goccl.WithTimeout(5*time.Second))
	if !errors.Is(err, goccl.ErrClosed) {
		t.Errorf("Init through a closed store: got %v, want ErrClosed", err)
	}
	store = rendezvous.NewMemStore()
	comms := initComms(t, 2, store, 5*time.Second)
	store.Close()
	if _, err := comms[0].Split(ctx, 0, 0); !errors.Is(err, goccl.ErrClosed) {
		t.Errorf("Split through a closed store: got %v, want ErrClosed", err)
	}
}
