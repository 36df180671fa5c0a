package rendezvous

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestCreate: the first Create of a key wins and every Create returns the
// winner, with 16 goroutines racing (MemStore, TCPStore, and a PrefixStore
// over each); Get sees it too, and a Create never replaces a Set value.
func TestCreate(t *testing.T) {
	srv, err := NewTCPServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mem := NewMemStore()
	defer mem.Close()
	stores := map[string]func() Creator{
		"mem": func() Creator { return mem.(Creator) },
		"tcp": func() Creator {
			c, err := DialTCP(ctx, srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		},
	}
	for name, open := range stores {
		for _, prefixed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/prefix=%v", name, prefixed), func(t *testing.T) {
				const n = 16
				got := make([]string, n)
				var wg sync.WaitGroup
				for i := range n {
					s := open()
					if prefixed {
						s = PrefixStore(s, "p/").(Creator)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						v, err := s.Create(ctx, t.Name()+"/k", []byte(fmt.Sprint("proposal ", i)))
						if err != nil {
							t.Error(err)
						}
						got[i] = string(v)
					}()
				}
				wg.Wait()
				for i := range got {
					if got[i] != got[0] || got[i] == "" {
						t.Fatalf("Create results differ: %q", got)
					}
				}
				s := open()
				if prefixed {
					s = PrefixStore(s, "p/").(Creator)
				}
				if v, err := s.Get(ctx, t.Name()+"/k"); err != nil || string(v) != got[0] {
					t.Fatalf("Get after Create: %q %v, want %q", v, err, got[0])
				}
				if err := s.Set(ctx, t.Name()+"/set", []byte("first")); err != nil {
					t.Fatal(err)
				}
				if v, err := s.Create(ctx, t.Name()+"/set", []byte("second")); err != nil || string(v) != "first" {
					t.Fatalf("Create over a Set value: %q %v", v, err)
				}
			})
		}
	}
}

// TestPrefixCreateNeedsCreator: a PrefixStore over a store that cannot
// create atomically says so.
func TestPrefixCreateNeedsCreator(t *testing.T) {
	fs, err := NewFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	_, err = PrefixStore(fs, "p/").(Creator).Create(context.Background(), "k", []byte("v"))
	if err == nil {
		t.Fatal("Create through a FileStore worked")
	}
	t.Log(err)
}
