package bootstrap

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport"
)

// testLog logs Connect's warnings through t.
func testLog(t *testing.T) func(slog.Level, string, []slog.Attr, string, ...any) {
	return func(level slog.Level, sub string, _ []slog.Attr, format string, args ...any) {
		if level >= slog.LevelWarn {
			t.Logf("%s "+format, append([]any{sub}, args...)...)
		}
	}
}

// connectAll runs Connect for n goroutine ranks sharing one in-memory store,
// with one socket per TCP link.
func connectAll(t *testing.T, n int, tweak func(p *Params)) ([]*Result, []error) {
	t.Helper()
	t.Setenv("GOCCL_NSOCKS_PERPEER", "1")
	store := rendezvous.NewMemStore()
	t.Cleanup(func() { store.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := make([]*Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			p := Params{Rank: r, Size: n, LocalRank: -1, Store: store, Log: testLog(t)}
			if tweak != nil {
				tweak(&p)
			}
			res[r], errs[r] = Connect(ctx, p)
		}(r)
	}
	wg.Wait()
	return res, errs
}

func release(res []*Result) {
	for _, r := range res {
		if r == nil {
			continue
		}
		for _, l := range r.Links {
			if l != nil {
				l.Close()
			}
		}
		r.Release()
	}
}

// TestConnect links 3 ranks over shared memory and over TCP: every pair can
// exchange a message, the ranks agree on the job id, local ranks follow the
// ranks on this host, and no ring file is left in the shared-memory
// directory.
func TestConnect(t *testing.T) {
	for _, shmOff := range []bool{false, true} {
		dir := t.TempDir()
		t.Setenv("GOCCL_SHM_DIR", dir)
		t.Setenv("GOCCL_SHM_DISABLE", strconv.FormatBool(shmOff))
		res, errs := connectAll(t, 3, nil)
		defer release(res)
		for r, err := range errs {
			if err != nil {
				t.Fatalf("shm disabled %v: rank %d: %v", shmOff, r, err)
			}
		}
		for r, x := range res {
			if x.JobID == "" || x.JobID != res[0].JobID {
				t.Errorf("rank %d: job id %q, rank 0 has %q", r, x.JobID, res[0].JobID)
			}
			if x.LocalRank != r {
				t.Errorf("rank %d: local rank %d", r, x.LocalRank)
			}
			for p, l := range x.Links {
				switch {
				case p == r && l != nil, p != r && l == nil:
					t.Fatalf("rank %d: link to %d is %v", r, p, l)
				case p != r && (l.Name() == "shm") == shmOff:
					t.Errorf("shm disabled %v: rank %d reaches %d via %s", shmOff, r, p, l.Name())
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var wg sync.WaitGroup
		for a := range res {
			for b := range res {
				if a == b {
					continue
				}
				wg.Add(1)
				go func(a, b int) {
					defer wg.Done()
					h := transport.Header{Seq: 1, Root: -1, Count: 1, Bytes: 1}
					if err := res[a].Links[b].Send(ctx, &h, []byte{byte(a)}); err != nil {
						t.Errorf("send %d->%d: %v", a, b, err)
					}
					got := make([]byte, 1)
					if err := res[b].Links[a].Recv(ctx, &h, got, nil); err != nil || got[0] != byte(a) {
						t.Errorf("recv %d->%d: %v %v", a, b, got, err)
					}
				}(a, b)
			}
		}
		wg.Wait()
		cancel()
		if left, _ := os.ReadDir(dir); len(left) > 0 {
			t.Errorf("files left in the shared-memory directory: %v", left)
		}
	}
}

// TestConnectMissingRank: a rank that never comes is named once ctx ends.
func TestConnectMissingRank(t *testing.T) {
	store := rendezvous.NewMemStore()
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := Connect(ctx, Params{Rank: 0, Size: 2, LocalRank: -1, Store: store})
	if err == nil || !strings.Contains(err.Error(), "no word from rank(s) 1") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error naming rank 1", err)
	}
}

// TestCardRails: a card carries the rails' endpoints after rail 0's, and
// reads back as written; one without rails keeps the three-field form.
func TestCardRails(t *testing.T) {
	for _, c := range []card{
		{Host: "h", Addr: "10.200.0.1:4000", Pid: 7},
		{Host: "h", Addr: "10.200.0.1:4000", Pid: 7, Rails: []string{"10.200.1.1:4001", "10.200.2.1:4002"}},
	} {
		s := c.String()
		got, err := parseCard(s)
		if err != nil {
			t.Fatalf("parseCard(%q): %v", s, err)
		}
		if got.String() != s || len(got.Rails) != len(c.Rails) {
			t.Errorf("parseCard(%q) = %+v", s, got)
		}
	}
	if strings.Count((card{Host: "h", Addr: "a:1", Pid: 1}).String(), "|") != 2 {
		t.Error("a card without rails has more than 3 fields")
	}
	if _, err := parseCard("h|10.0.0.1:1|7|10.0.1.1"); err == nil {
		t.Error("parseCard accepted a rail address without a port")
	}
}
