package rendezvous

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
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

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// result runs f in a goroutine and returns a channel with its error.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func mustBlock(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned early: %v", what, err)
	case <-time.After(60 * time.Millisecond):
	}
}

func mustReturn(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(3 * time.Second):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

func runConformance(t *testing.T, newStore newStoreFunc) {
	t.Run("SetGet", func(t *testing.T) {
		ctx := testCtx(t)
		open := newStore(t)
		a, b := open(t), open(t)
		if err := a.Set(ctx, "k", []byte("v1")); err != nil {
			t.Fatal(err)
		}
		if v, err := b.Get(ctx, "k"); err != nil || string(v) != "v1" {
			t.Fatalf("Get = %q, %v; want v1", v, err)
		}
		if err := b.Set(ctx, "k", []byte("v2")); err != nil {
			t.Fatal(err)
		}
		if v, err := a.Get(ctx, "k"); err != nil || string(v) != "v2" {
			t.Fatalf("Get after overwrite = %q, %v; want v2", v, err)
		}
		// Empty value, binary value, odd and maximal keys.
		bin := []byte{0, 1, 2, 255, '\n', 0}
		long := strings.Repeat("K", MaxKeyLen)
		cases := map[string][]byte{"empty": {}, "bin": bin, "": []byte("empty key"), "a/b/../c": []byte("slash"),
			"Key": []byte("upper"), "key": []byte("lower"), long: []byte("long")}
		for k, v := range cases {
			if err := a.Set(ctx, k, v); err != nil {
				t.Fatalf("Set %q: %v", k, err)
			}
		}
		for k, v := range cases {
			got, err := b.Get(ctx, k)
			if err != nil || !bytes.Equal(got, v) || got == nil {
				t.Fatalf("Get %.20q = %q, %v; want %q", k, got, err, v)
			}
		}
		// The returned slice belongs to the caller.
		got, _ := a.Get(ctx, "bin")
		got[0] = 99
		if again, _ := b.Get(ctx, "bin"); !bytes.Equal(again, bin) {
			t.Fatalf("value changed through a returned slice: %q", again)
		}
		if err := a.Set(ctx, long+"x", nil); err == nil {
			t.Fatal("Set with an oversized key succeeded")
		}
		// The client still works after a rejected call.
		if v, err := a.Get(ctx, "k"); err != nil || string(v) != "v2" {
			t.Fatalf("Get after rejected call = %q, %v", v, err)
		}
	})

	t.Run("GetBlocksUntilSet", func(t *testing.T) {
		ctx := testCtx(t)
		open := newStore(t)
		getter, setter := open(t), open(t)
		var got []byte
		ch := async(func() (err error) { got, err = getter.Get(ctx, "late"); return err })
		mustBlock(t, ch, "Get of a missing key")
		if err := setter.Set(ctx, "late", []byte("here")); err != nil {
			t.Fatal(err)
		}
		if err := mustReturn(t, ch, "Get"); err != nil || string(got) != "here" {
			t.Fatalf("Get = %q, %v", got, err)
		}
	})

	t.Run("WaitSeveralKeys", func(t *testing.T) {
		ctx := testCtx(t)
		open := newStore(t)
		waiter, setter := open(t), open(t)
		if err := waiter.Wait(ctx); err != nil {
			t.Fatalf("Wait with no keys: %v", err)
		}
		ch := async(func() error { return waiter.Wait(ctx, "w1", "w2", "w3") })
		setter.Set(ctx, "w3", nil)
		setter.Set(ctx, "w1", []byte("x"))
		mustBlock(t, ch, "Wait with one key missing")
		if _, err := setter.Add(ctx, "w2", 5); err != nil { // a counter key counts as set
			t.Fatal(err)
		}
		if err := mustReturn(t, ch, "Wait"); err != nil {
			t.Fatal(err)
		}
		if err := waiter.Wait(ctx, "w1", "w2", "w3"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("AddConcurrent", func(t *testing.T) {
		ctx := testCtx(t)
		open := newStore(t)
		const goroutines, clients = 100, 10
		var cl [clients]Store
		for i := range cl {
			cl[i] = open(t)
		}
		var mu sync.Mutex
		seen := make(map[int64]bool)
		var wg sync.WaitGroup
		errs := make(chan error, goroutines)
		for i := range goroutines {
			wg.Go(func() {
				n, err := cl[i%clients].Add(ctx, "ctr", 1)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				seen[n] = true
				mu.Unlock()
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for i := int64(1); i <= goroutines; i++ {
			if !seen[i] {
				t.Fatalf("no Add returned %d (results %v)", i, seen)
			}
		}
		if v, err := cl[0].Get(ctx, "ctr"); err != nil || string(v) != "100" {
			t.Fatalf("Get counter = %q, %v; want 100", v, err)
		}
		if n, err := cl[1].Add(ctx, "ctr", -150); err != nil || n != -50 {
			t.Fatalf("Add -150 = %d, %v; want -50", n, err)
		}
		if n, err := cl[1].Add(ctx, "fresh", 0); err != nil || n != 0 {
			t.Fatalf("Add 0 to a new key = %d, %v", n, err)
		}
		cl[2].Set(ctx, "text", []byte("abc"))
		if _, err := cl[2].Add(ctx, "text", 1); err == nil || !strings.Contains(err.Error(), "not a decimal integer") {
			t.Fatalf("Add to a non-integer value: %v", err)
		}
		cl[2].Set(ctx, "big", []byte("9223372036854775807"))
		if _, err := cl[2].Add(ctx, "big", 1); err == nil || !strings.Contains(err.Error(), "overflow") {
			t.Fatalf("Add overflowing int64: %v", err)
		}
		// The client still works after server-side errors.
		if n, err := cl[2].Add(ctx, "ctr", 50); err != nil || n != 0 {
			t.Fatalf("Add after error = %d, %v", n, err)
		}
	})

	t.Run("DeadlineOnMissingKey", func(t *testing.T) {
		open := newStore(t)
		s := open(t)
		for _, op := range []string{"Get", "Wait"} {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			start := time.Now()
			var err error
			if op == "Get" {
				_, err = s.Get(ctx, "missing")
			} else {
				err = s.Wait(ctx, "missing", "missing2")
			}
			cancel()
			if el := time.Since(start); el > time.Second {
				t.Fatalf("%s took %v past a 100ms deadline", op, el)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s error %v does not wrap context.DeadlineExceeded", op, err)
			}
		}
		// The store is usable after an abandoned wait; a late Set of the
		// abandoned key must not be delivered as the answer to a later call.
		ctx := testCtx(t)
		other := open(t)
		if err := other.Set(ctx, "missing", []byte("late")); err != nil {
			t.Fatal(err)
		}
		if err := s.Set(ctx, "after", []byte("fine")); err != nil {
			t.Fatalf("Set after a timed-out Get: %v", err)
		}
		if v, err := s.Get(ctx, "after"); err != nil || string(v) != "fine" {
			t.Fatalf("Get after a timed-out Get = %q, %v", v, err)
		}
		// An already expired ctx fails at once, even for a key that exists.
		dead, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		if _, err := s.Get(dead, "after"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get with an expired ctx: %v", err)
		}
	})

	t.Run("CancelOnMissingKey", func(t *testing.T) {
		open := newStore(t)
		s := open(t)
		ctx, cancel := context.WithCancel(context.Background())
		ch := async(func() error { _, err := s.Get(ctx, "missing"); return err })
		mustBlock(t, ch, "Get")
		cancel()
		if err := mustReturn(t, ch, "cancelled Get"); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Get: %v", err)
		}
		ctx2 := testCtx(t)
		if _, err := s.Add(ctx2, "n", 2); err != nil {
			t.Fatalf("Add after a cancelled Get: %v", err)
		}
	})

	t.Run("Close", func(t *testing.T) {
		ctx := testCtx(t)
		open := newStore(t)
		s := open(t)
		if err := s.Set(ctx, "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		ch := async(func() error { _, err := s.Get(ctx, "never"); return err })
		mustBlock(t, ch, "Get")
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := mustReturn(t, ch, "Get blocked across Close"); !errors.Is(err, ErrClosed) {
			t.Fatalf("Get blocked across Close: %v, want ErrClosed", err)
		}
		if _, err := s.Get(ctx, "k"); !errors.Is(err, ErrClosed) {
			t.Fatalf("Get after Close: %v", err)
		}
		if err := s.Set(ctx, "k", nil); !errors.Is(err, ErrClosed) {
			t.Fatalf("Set after Close: %v", err)
		}
		if _, err := s.Add(ctx, "n", 1); !errors.Is(err, ErrClosed) {
			t.Fatalf("Add after Close: %v", err)
		}
		if err := s.Wait(ctx, "k"); !errors.Is(err, ErrClosed) {
			t.Fatalf("Wait after Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})

	t.Run("Barrier", func(t *testing.T) {
		ctx := testCtx(t)
		open := newStore(t)
		const n = 4
		errs := make(chan error, n)
		for range n {
			s := open(t)
			go func() { errs <- Barrier(ctx, s, "b1", n) }()
		}
		for range n {
			if err := mustReturn(t, errs, "Barrier"); err != nil {
				t.Fatal(err)
			}
		}
		if err := Barrier(ctx, open(t), "b1", n); err == nil {
			t.Fatal("reused barrier key accepted")
		}
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := Barrier(short, open(t), "b2", 2); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("barrier missing a rank: %v", err)
		}
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
