package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

// TestRegister: buffers from Alloc (registered) carry collectives and
// point-to-point messages over RoCE links with right results; Register
// and Deregister refuse misuse with clear errors: an empty buffer, a
// second Deregister, and a Deregister while a Send is reading the buffer
// (the peer not receiving yet), which leaves it registered. On links that
// need no registration (shared memory), Register is accepted and changes
// nothing.
func TestRegister(t *testing.T) {
	for _, net := range []string{"roce", "socket"} {
		t.Run(net, func(t *testing.T) {
			t.Setenv("GOCCL_NET", net)
			t.Setenv("GOCCL_SHM_DISABLE", map[string]string{"roce": "1", "socket": "0"}[net])
			tried := make(chan struct{})
			done := sync.OnceFunc(func() { close(tried) })
			errs := goroutineRanks(t, 2, 60*time.Second, func(c *goccl.Comm) error { return registerRank(c, tried, done) })
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// registerRank runs rank c's part; rank 0 calls done (which closes tried)
// when it is done trying to deregister during its Send, or returns, and
// rank 1 receives only then.
func registerRank(c *goccl.Comm, tried chan struct{}, done func()) error {
	ctx := context.Background()
	if c.Rank() == 0 {
		defer done()
	}
	const n = 1 << 20
	buf, reg, err := goccl.Alloc[float32](c, n)
	if err != nil {
		return err
	}
	if reg.Bytes() != 4*n {
		return fmt.Errorf("registration of %d bytes, want %d", reg.Bytes(), 4*n)
	}
	for i := range buf {
		buf[i] = float32(c.Rank()*n + i%1000)
	}
	if err := goccl.AllReduce(ctx, c, buf, buf, n, goccl.Sum); err != nil {
		return err
	}
	for i, v := range buf {
		if want := float32(n + 2*(i%1000)); v != want {
			return fmt.Errorf("AllReduce element %d: %v, want %v", i, v, want)
		}
	}
	// Over RoCE the AllReduce's sends came straight from the registered
	// buffer: at least the half it sends of 4 MiB.
	if zc := goccl.ZeroCopied(c); goccl.HasRoCE(c) != (zc >= 2*n) {
		return fmt.Errorf("%d bytes sent without staging (RoCE: %v)", zc, goccl.HasRoCE(c))
	}
	if _, err := goccl.Register(c, buf[:0]); !errors.Is(err, goccl.ErrInvalidArgument) {
		return fmt.Errorf("empty buffer: %v", err)
	}
	if _, _, err := goccl.Alloc[int32](c, 0); !errors.Is(err, goccl.ErrInvalidArgument) {
		return fmt.Errorf("Alloc of 0 elements: %v", err)
	}
	// Deregister while a Send reads the buffer: rank 1 receives (into its
	// own registered buffer) only once rank 0 has tried, during its Send
	// (a registered Send holds the buffer from its start, waiting for the
	// receiver's slots).
	if c.Rank() == 1 {
		<-tried
		before := goccl.DirectReceived(c)
		if err := goccl.Recv(ctx, c, buf, n, 0); err != nil {
			return err
		}
		// The receive advertised buf, registered, to the waiting Send,
		// which wrote the rest of the message straight into it.
		if d := goccl.DirectReceived(c) - before; goccl.HasRoCE(c) != (d > 0) {
			return fmt.Errorf("%d bytes written straight into the registered receive buffer (RoCE: %v)", d, goccl.HasRoCE(c))
		}
	} else {
		sent := make(chan error, 1)
		go func() { sent <- goccl.Send(ctx, c, buf, n, 1) }()
		inUse := false
		time.Sleep(200 * time.Millisecond) // the Send looks its buffer up first
		// Over RoCE until the Send holds the buffer (it cannot end before
		// rank 1 receives); otherwise a while, to see it never does.
		window := 600 * time.Millisecond
		if goccl.HasRoCE(c) {
			window = 20 * time.Second
		}
		for deadline := time.Now().Add(window); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			err := reg.Deregister()
			if errors.Is(err, goccl.ErrInUse) {
				inUse = true
				break
			}
			if err != nil {
				return fmt.Errorf("Deregister during the Send: %v", err)
			}
			// Deregistered before the Send began reading: again.
			if reg, err = goccl.Register(c, buf); err != nil {
				return err
			}
		}
		done()
		if err := <-sent; err != nil {
			return err
		}
		if goccl.HasRoCE(c) && !inUse {
			return errors.New("Deregister never reported the buffer in use during a registered Send over RoCE")
		}
		if !goccl.HasRoCE(c) && inUse {
			return errors.New("Deregister reported a buffer in use on a communicator without RoCE links")
		}
	}
	if err := reg.Deregister(); err != nil {
		return fmt.Errorf("Deregister after the Send: %v", err)
	}
	if err := reg.Deregister(); !errors.Is(err, goccl.ErrInvalidArgument) {
		return fmt.Errorf("second Deregister: %v", err)
	}
	return nil
}
