package rendezvous

import (
	"context"
	"testing"
	"time"
)

func TestPrefixStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	base := NewMemStore()
	a, b := PrefixStore(base, "a/"), PrefixStore(base, "b/")
	if err := a.Set(ctx, "k", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := b.Set(ctx, "k", []byte("2")); err != nil {
		t.Fatal(err)
	}
	for s, want := range map[Store]string{a: "1", b: "2", base: ""} {
		if s == base {
			if v, err := base.Get(ctx, "a/k"); err != nil || string(v) != "1" {
				t.Fatalf("base a/k = %q, %v", v, err)
			}
			continue
		}
		if v, err := s.Get(ctx, "k"); err != nil || string(v) != want {
			t.Fatalf("Get = %q, %v; want %q", v, err, want)
		}
	}
	if n, err := a.Add(ctx, "n", 3); err != nil || n != 3 {
		t.Fatalf("Add = %d, %v", n, err)
	}
	if err := a.Wait(ctx, "k", "n"); err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel2()
	if err := b.Wait(short, "n"); err == nil {
		t.Fatal("b sees a's key")
	}
	a.Close()
	if _, err := b.Get(ctx, "k"); err != nil {
		t.Fatalf("closing a view closed the store: %v", err)
	}
}
