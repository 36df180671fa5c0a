package etcd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/goccl/goccl/internal/etcdtest"
	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/rendezvous/internal/storekit"
	"github.com/goccl/goccl/rendezvous/internal/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	etcdtest.StopShared()
	os.Exit(code)
}

// etcdPrefix returns a prefix of t's own on a shared server.
func etcdPrefix(t *testing.T) string {
	return "/test/" + strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + "-" + storekit.RandomHex(4) + "/"
}

func dialEtcd(t *testing.T, srv *etcdtest.Server, prefix string, opts ...rendezvous.Option) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Dial(ctx, []string{srv.Endpoint}, prefix, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// etcdKeys returns the keys under prefix, read with a client of its own.
func etcdKeys(t *testing.T, srv *etcdtest.Server, prefix string) []string {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range r.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

func etcdConformance(t *testing.T, srv *etcdtest.Server) {
	storetest.Conformance(t, storetest.Kind{
		New: func(t *testing.T) storetest.Opener {
			prefix := etcdPrefix(t)
			return func(t *testing.T) storetest.Store { return dialEtcd(t, srv, prefix) }
		},
		Barrier: func(ctx context.Context, s storetest.Store, key string, worldSize int) error {
			return rendezvous.Barrier(ctx, s, key, worldSize)
		},
	})
}

func TestEtcdStoreConformance(t *testing.T) {
	etcdConformance(t, etcdtest.Shared(t))
}

// TestEtcdStoreBinaryConformance runs the suite against the etcd program
// (Debian's etcd-server, 3.4), when installed.
func TestEtcdStoreBinaryConformance(t *testing.T) {
	path, err := exec.LookPath("etcd")
	if err != nil {
		t.Skipf("no etcd program (Debian: apt-get install etcd-server): %v", err)
	}
	if testing.Short() {
		t.Skip("-short: the embedded server's suite covers the store")
	}
	out, _ := exec.Command(path, "--version").CombinedOutput()
	t.Logf("%s: %s", path, strings.SplitN(string(out), "\n", 2)[0])
	etcdConformance(t, etcdtest.StartBinary(t, path))
}

// TestEtcdRestart stops etcd while clients wait in Get and while others
// call Add and Set, starts it again on the same data and ports, and checks
// that every call completes, each Add counted exactly once.
func TestEtcdRestart(t *testing.T) {
	srv := etcdtest.Start(t)
	testEtcdRestart(t, srv)
}

func testEtcdRestart(t *testing.T, srv *etcdtest.Server) {
	prefix := etcdPrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b, c := dialEtcd(t, srv, prefix), dialEtcd(t, srv, prefix), dialEtcd(t, srv, prefix)
	if err := a.Set(ctx, "before", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Add(ctx, "ctr", 1); err != nil || n != 1 {
		t.Fatalf("Add = %d, %v", n, err)
	}

	const getters, adders = 4, 6
	gets := make(chan error, getters)
	for i := range getters {
		s := []*Store{a, b}[i%2]
		go func() {
			v, err := s.Get(ctx, "late")
			if err == nil && string(v) != "here" {
				err = fmt.Errorf("Get = %q", v)
			}
			gets <- err
		}()
	}
	storetest.MustBlock(t, gets, "Get of a missing key")

	t0 := time.Now()
	srv.Stop()
	t.Logf("stopped in %v", time.Since(t0))
	var mu sync.Mutex
	var got []int64
	adds := make(chan error, adders+1)
	for i := range adders {
		s := []*Store{a, b, c}[i%3]
		go func() {
			n, err := s.Add(ctx, "ctr", 1)
			mu.Lock()
			got = append(got, n)
			mu.Unlock()
			adds <- err
		}()
	}
	go func() { adds <- c.Set(ctx, "during", []byte("d")) }()
	time.Sleep(300 * time.Millisecond)
	storetest.MustBlock(t, adds, "Add with etcd down")
	storetest.MustBlock(t, gets, "Get with etcd down")

	t1 := time.Now()
	srv.Restart(t)
	t.Logf("restarted in %v", time.Since(t1))
	for range adders + 1 {
		select {
		case err := <-adds:
			if err != nil {
				t.Fatalf("Add or Set across the restart: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("Add or Set did not complete after etcd came back")
		}
	}
	t.Logf("adds done %v after restart", time.Since(t1))
	if err := c.Set(ctx, "late", []byte("here")); err != nil {
		t.Fatal(err)
	}
	for range getters {
		select {
		case err := <-gets:
			if err != nil {
				t.Fatalf("Get across the restart: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("Get did not complete after etcd came back")
		}
	}
	slices.Sort(got)
	for i, n := range got {
		if n != int64(i+2) {
			t.Fatalf("Adds across the restart returned %v, want 2..%d once each", got, adders+1)
		}
	}
	for k, want := range map[string]string{"ctr": fmt.Sprint(adders + 1), "before": "v", "during": "d"} {
		if v, err := b.Get(ctx, k); err != nil || string(v) != want {
			t.Fatalf("Get %s = %q, %v; want %q", k, v, err, want)
		}
	}
}

// TestEtcdAddAcrossRestarts: clients call Add in a loop while etcd
// restarts three times under them (a restart may cut a transaction's
// answer, leaving its outcome unknown to the client): every Add returns,
// and the returned values are 1..N, each once, N the final count.
func TestEtcdAddAcrossRestarts(t *testing.T) {
	srv := etcdtest.Start(t)
	prefix := etcdPrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clients := []*Store{dialEtcd(t, srv, prefix), dialEtcd(t, srv, prefix), dialEtcd(t, srv, prefix)}
	stop := make(chan struct{})
	var mu sync.Mutex
	var got []int64
	errs := make(chan error, 2*len(clients))
	var wg sync.WaitGroup
	for i := range 2 * len(clients) {
		s := clients[i%len(clients)]
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n, err := s.Add(ctx, "ctr", 1)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				got = append(got, n)
				mu.Unlock()
			}
		})
	}
	for range 3 {
		time.Sleep(150 * time.Millisecond)
		srv.Stop()
		time.Sleep(100 * time.Millisecond)
		srv.Restart(t)
	}
	time.Sleep(150 * time.Millisecond)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(got)
	for i, n := range got {
		if n != int64(i+1) {
			t.Fatalf("Add results are not 1..%d once each: at %d: %d (all: %v)", len(got), i, n, got)
		}
	}
	if n, err := clients[0].Add(ctx, "ctr", 0); err != nil || n != int64(len(got)) {
		t.Fatalf("final count %d, %v; want %d", n, err, len(got))
	}
	t.Logf("%d Adds across 3 restarts", len(got))
}

// TestEtcdDialRestart: a client that dials while etcd is down connects once
// it is up.
func TestEtcdDialRestart(t *testing.T) {
	srv := etcdtest.Start(t)
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch := make(chan error, 1)
	var s *Store
	go func() {
		var err error
		s, err = Dial(ctx, []string{srv.Endpoint}, etcdPrefix(t))
		ch <- err
	}()
	storetest.MustBlock(t, ch, "Dial with etcd down")
	srv.Restart(t)
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := s.Add(ctx, "x", 3); err != nil || n != 3 {
		t.Fatalf("Add = %d, %v", n, err)
	}
}

// TestEtcdLease: the keys outlive the Close of one client while another is
// open, vanish the TTL after the last one closes (without revoking), and
// Revoke deletes them at once.
func TestEtcdLease(t *testing.T) {
	srv := etcdtest.Shared(t)
	prefix := etcdPrefix(t)
	ctx := storetest.Ctx(t)
	const ttl = 2 * time.Second
	a := dialEtcd(t, srv, prefix, rendezvous.WithLeaseTTL(ttl))
	b := dialEtcd(t, srv, prefix, rendezvous.WithLeaseTTL(time.Hour)) // joins a's lease
	if a.Lease() != b.Lease() {
		t.Fatalf("two clients of one prefix have leases %x and %x", a.Lease(), b.Lease())
	}
	if err := a.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Add(ctx, "n", 1); err != nil {
		t.Fatal(err)
	}
	a.Close()
	time.Sleep(ttl + time.Second)
	if v, err := b.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get %v after the writer's Close, another client open: %q, %v", ttl+time.Second, v, err)
	}
	b.Close()
	closed := time.Now()
	if keys := etcdKeys(t, srv, prefix); len(keys) == 0 {
		t.Fatal("the keys vanished at the last Close")
	}
	for len(etcdKeys(t, srv, prefix)) > 0 {
		if time.Since(closed) > ttl+5*time.Second {
			t.Fatalf("keys still there %v after the last Close: %q", time.Since(closed), etcdKeys(t, srv, prefix))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("keys gone %v after the last Close (TTL %v)", time.Since(closed).Round(10*time.Millisecond), ttl)

	// A new client of the prefix starts afresh.
	c := dialEtcd(t, srv, prefix, rendezvous.WithLeaseTTL(ttl))
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Get(short, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get of an expired key: %v", err)
	}
	if err := c.Set(ctx, "k2", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := etcdKeys(t, srv, prefix); len(keys) > 0 {
		t.Fatalf("keys left after Revoke: %q", keys)
	}
	if err := c.Set(ctx, "k3", nil); err == nil || !strings.Contains(err.Error(), "lease") {
		t.Fatalf("Set after Revoke: %v", err)
	}
}

// TestEtcdErrors: errors name the endpoint, the prefix and the key, and
// wrap the cause.
func TestEtcdErrors(t *testing.T) {
	// Nothing listens on port 1 of 127.0.0.1.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, []string{"127.0.0.1:1"}, "/x/")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Dial of a dead endpoint: %v", err)
	}
	if _, err := Dial(context.Background(), nil, "/x/"); err == nil {
		t.Fatal("Dial with no endpoints succeeded")
	}

	srv := etcdtest.Shared(t)
	prefix := etcdPrefix(t)
	s := dialEtcd(t, srv, prefix)
	ctx2, cancel2 := context.WithCancel(context.Background())
	ch := storetest.Async(func() error { _, err := s.Get(ctx2, "missing/key"); return err })
	storetest.MustBlock(t, ch, "Get")
	cancel2()
	err = storetest.MustReturn(t, ch, "cancelled Get")
	for _, want := range []string{srv.Endpoint, prefix, `"missing/key"`} {
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), want) {
			t.Fatalf("cancelled Get: %v; want it to wrap context.Canceled and name %s", err, want)
		}
	}
	s.Set(storetest.Ctx(t), "text", []byte("x"))
	if _, err := s.Add(storetest.Ctx(t), "text", 1); err == nil || !strings.Contains(err.Error(), srv.Endpoint) {
		t.Fatalf("Add to text: %v", err)
	}
	s.Close()
	if err := s.Set(storetest.Ctx(t), "k", nil); !errors.Is(err, rendezvous.ErrClosed) || !strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("Set after Close: %v", err)
	}
}

// TestConnectEtcd: ranks that Connect with GOCCL_STORE=etcd://... meet
// under the job's prefix; a rank beyond the world size (an earlier run's
// keys) is refused; the last rank's Close deletes the keys.
func TestConnectEtcd(t *testing.T) {
	srv := etcdtest.Shared(t)
	url := srv.URL(etcdPrefix(t))
	_, urlPrefix, err := rendezvous.ParseEtcdURL(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := storetest.Ctx(t)
	const world = 3
	env := rendezvous.Env{WorldSize: world, Etcd: url, JobID: "job/1"}
	prefix := JobPrefix(urlPrefix, env, 1)
	if want := urlPrefix + "job%2F1/0/1/"; prefix != want {
		t.Fatalf("JobPrefix = %q, want %q", prefix, want)
	}
	stores := make([]rendezvous.Store, world)
	errs := make(chan error, world)
	for r := range world {
		go func() {
			e := env
			e.Rank = r
			s, err := rendezvous.Connect(ctx, e, "", rendezvous.WithGeneration(1))
			if err == nil {
				stores[r] = s
				err = rendezvous.Barrier(ctx, s, "b", world)
			}
			errs <- err
		}()
	}
	for range world {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	extra := env
	if _, err := rendezvous.Connect(ctx, extra, "", rendezvous.WithGeneration(1)); err == nil || !strings.Contains(err.Error(), "already holds") ||
		!strings.Contains(err.Error(), prefix) {
		t.Fatalf("Connect of a 4th rank to a world of 3: %v", err)
	}
	for r, s := range stores {
		s.Close()
		s.Close() // counted once
		keys := etcdKeys(t, srv, prefix)
		if r < world-1 && len(keys) == 0 {
			t.Fatalf("keys gone after %d of %d Closes", r+1, world)
		}
		if r == world-1 && len(keys) > 0 {
			t.Fatalf("keys left after the last rank's Close: %q", keys)
		}
	}
}
