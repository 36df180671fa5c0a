// Package storetest is the conformance suite of rendezvous stores, shared
// by package rendezvous's tests and the store kinds of its subpackages
// (rendezvous/etcd). It does not import rendezvous, so that rendezvous's
// own tests can use it.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/rendezvous/internal/storekit"
)

// Store is rendezvous.Store's method set.
type Store interface {
	Set(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
	Wait(ctx context.Context, keys ...string) error
	Add(ctx context.Context, key string, delta int64) (int64, error)
	Close() error
}

// Opener returns a new client of one shared store each time it is called.
// Clients are closed by t.Cleanup unless a test closes them itself.
type Opener func(t *testing.T) Store

// Kind is a kind of store under test.
type Kind struct {
	// New creates a fresh, empty store for one subtest.
	New func(t *testing.T) Opener
	// Barrier is rendezvous.Barrier.
	Barrier func(ctx context.Context, s Store, key string, worldSize int) error
}

// Ctx returns a context that ends after 10 s or with t.
func Ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Async runs f in a goroutine and returns a channel with its error.
func Async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// MustBlock fails t when ch delivers within 60 ms.
func MustBlock(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned early: %v", what, err)
	case <-time.After(60 * time.Millisecond):
	}
}

// MustReturn returns what ch delivers, failing t when that takes over 3 s.
func MustReturn(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(3 * time.Second):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

// Conformance runs the suite every Store passes (the rules of
// rendezvous.Store) on the stores that k makes.
func Conformance(t *testing.T, k Kind) {
	t.Run("SetGet", func(t *testing.T) { testSetGet(t, k) })
	t.Run("GetBlocksUntilSet", func(t *testing.T) { testGetBlocksUntilSet(t, k) })
	t.Run("WaitSeveralKeys", func(t *testing.T) { testWaitSeveralKeys(t, k) })
	t.Run("AddConcurrent", func(t *testing.T) { testAddConcurrent(t, k) })
	t.Run("DeadlineOnMissingKey", func(t *testing.T) { testDeadlineOnMissingKey(t, k) })
	t.Run("CancelOnMissingKey", func(t *testing.T) { testCancelOnMissingKey(t, k) })
	t.Run("Close", func(t *testing.T) { testClose(t, k) })
	t.Run("Barrier", func(t *testing.T) { testBarrier(t, k) })
}

func testSetGet(t *testing.T, k Kind) {
	ctx := Ctx(t)
	open := k.New(t)
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
	long := strings.Repeat("K", storekit.MaxKeyLen)
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
}

func testGetBlocksUntilSet(t *testing.T, k Kind) {
	ctx := Ctx(t)
	open := k.New(t)
	getter, setter := open(t), open(t)
	var got []byte
	ch := Async(func() (err error) { got, err = getter.Get(ctx, "late"); return err })
	MustBlock(t, ch, "Get of a missing key")
	if err := setter.Set(ctx, "late", []byte("here")); err != nil {
		t.Fatal(err)
	}
	if err := MustReturn(t, ch, "Get"); err != nil || string(got) != "here" {
		t.Fatalf("Get = %q, %v", got, err)
	}
}

func testWaitSeveralKeys(t *testing.T, k Kind) {
	ctx := Ctx(t)
	open := k.New(t)
	waiter, setter := open(t), open(t)
	if err := waiter.Wait(ctx); err != nil {
		t.Fatalf("Wait with no keys: %v", err)
	}
	ch := Async(func() error { return waiter.Wait(ctx, "w1", "w2", "w3") })
	setter.Set(ctx, "w3", nil)
	setter.Set(ctx, "w1", []byte("x"))
	MustBlock(t, ch, "Wait with one key missing")
	if _, err := setter.Add(ctx, "w2", 5); err != nil { // a counter key counts as set
		t.Fatal(err)
	}
	if err := MustReturn(t, ch, "Wait"); err != nil {
		t.Fatal(err)
	}
	if err := waiter.Wait(ctx, "w1", "w2", "w3"); err != nil {
		t.Fatal(err)
	}
}

func testAddConcurrent(t *testing.T, k Kind) {
	ctx := Ctx(t)
	open := k.New(t)
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
}

func testDeadlineOnMissingKey(t *testing.T, k Kind) {
	open := k.New(t)
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
	ctx := Ctx(t)
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
}

func testCancelOnMissingKey(t *testing.T, k Kind) {
	open := k.New(t)
	s := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch := Async(func() error { _, err := s.Get(ctx, "missing"); return err })
	MustBlock(t, ch, "Get")
	cancel()
	if err := MustReturn(t, ch, "cancelled Get"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Get: %v", err)
	}
	ctx2 := Ctx(t)
	if _, err := s.Add(ctx2, "n", 2); err != nil {
		t.Fatalf("Add after a cancelled Get: %v", err)
	}
}

func testClose(t *testing.T, k Kind) {
	ctx := Ctx(t)
	open := k.New(t)
	s := open(t)
	if err := s.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	ch := Async(func() error { _, err := s.Get(ctx, "never"); return err })
	MustBlock(t, ch, "Get")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := MustReturn(t, ch, "Get blocked across Close"); !errors.Is(err, storekit.ErrClosed) {
		t.Fatalf("Get blocked across Close: %v, want storekit.ErrClosed", err)
	}
	if _, err := s.Get(ctx, "k"); !errors.Is(err, storekit.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if err := s.Set(ctx, "k", nil); !errors.Is(err, storekit.ErrClosed) {
		t.Fatalf("Set after Close: %v", err)
	}
	if _, err := s.Add(ctx, "n", 1); !errors.Is(err, storekit.ErrClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
	if err := s.Wait(ctx, "k"); !errors.Is(err, storekit.ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func testBarrier(t *testing.T, k Kind) {
	ctx := Ctx(t)
	open := k.New(t)
	const n = 4
	errs := make(chan error, n)
	for range n {
		s := open(t)
		go func() { errs <- k.Barrier(ctx, s, "b1", n) }()
	}
	for range n {
		if err := MustReturn(t, errs, "Barrier"); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.Barrier(ctx, open(t), "b1", n); err == nil {
		t.Fatal("reused barrier key accepted")
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := k.Barrier(short, open(t), "b2", 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("barrier missing a rank: %v", err)
	}
}
