package rendezvous

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseEtcdURL(t *testing.T) {
	for _, tt := range []struct {
		url       string
		endpoints []string
		prefix    string
		err       string
	}{
		{url: "etcd://h1:2379", endpoints: []string{"h1:2379"}, prefix: DefaultEtcdPrefix},
		{url: "etcd://h1:2379/", endpoints: []string{"h1:2379"}, prefix: DefaultEtcdPrefix},
		{url: "ETCD://h1:2379,10.0.0.2:2380/some/prefix", endpoints: []string{"h1:2379", "10.0.0.2:2380"}, prefix: "/some/prefix/"},
		{url: "etcd://[fd00::1]:2379/p/", endpoints: []string{"[fd00::1]:2379"}, prefix: "/p/"},
		{url: "etcd:///p", err: "no endpoint"},
		{url: "etcd://h1/p", err: `endpoint "h1"`},
		{url: "etcd://h1:2379,/p", err: `endpoint ""`},
		{url: "etcd://:2379/p", err: "no host"},
		{url: "etcd://h1:99999/p", err: "port"},
		{url: "etcd://h1:2379/p?ttl=3", err: "no query"},
		{url: "etcd://user@h1:2379/p", err: "user"},
		{url: "http://h1:2379", err: "not an etcd:// URL"},
		{url: "h1:2379", err: "not an etcd:// URL"},
	} {
		eps, prefix, err := ParseEtcdURL(tt.url)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseEtcdURL(%q) = %v, %q, %v; want an error containing %q", tt.url, eps, prefix, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(eps, tt.endpoints) || prefix != tt.prefix {
			t.Errorf("ParseEtcdURL(%q) = %q, %q, %v; want %q, %q", tt.url, eps, prefix, err, tt.endpoints, tt.prefix)
		}
	}
}

// TestSchemeNotLinked: this package's tests do not import rendezvous/etcd,
// so an etcd:// store is not registered: Connect and Open fail at once and
// name the import to add.
func TestSchemeNotLinked(t *testing.T) {
	const url = "etcd://127.0.0.1:2379/p"
	const want = `add import _ "github.com/goccl/goccl/rendezvous/etcd"`
	ctx := testCtx(t)
	env := Env{Rank: 1, WorldSize: 2, Etcd: url}
	if s, err := Connect(ctx, env, ""); err == nil || !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "GOCCL_STORE") {
		t.Fatalf("Connect with GOCCL_STORE=%s: %v, %v; want an error naming rank 1, GOCCL_STORE and %s", url, s, err, want)
	}
	if s, err := Open(ctx, url); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), url) {
		t.Fatalf("Open(%s): %v, %v; want an error naming the URL and %s", url, s, err, want)
	}
	if _, err := Open(ctx, "zk://h:1/p"); err == nil || !strings.Contains(err.Error(), `no store is registered for scheme "zk"`) {
		t.Fatalf("Open of an unknown scheme: %v", err)
	}
	if _, err := Open(ctx, "h:1"); err == nil || !strings.Contains(err.Error(), "no scheme") {
		t.Fatalf("Open without a scheme: %v", err)
	}
}

// TestOpenBuiltin: Open's tcp:// and file:// URLs reach the same stores
// as DialTCP and NewFileStore.
func TestOpenBuiltin(t *testing.T) {
	ctx := testCtx(t)
	srv, err := NewTCPServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := t.TempDir()
	for _, url := range []string{"tcp://" + srv.Addr(), "TCP://" + srv.Addr() + "/", "file://" + dir} {
		a, err := Open(ctx, url)
		if err != nil {
			t.Fatalf("Open(%s): %v", url, err)
		}
		if _, err := a.Add(ctx, "n", 1); err != nil {
			t.Fatalf("Add through Open(%s): %v", url, err)
		}
		a.Close()
	}
	cl, err := DialTCP(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if n, err := cl.Add(ctx, "n", 0); err != nil || n != 2 {
		t.Fatalf("counter through DialTCP = %d, %v; want 2 (both tcp:// Opens)", n, err)
	}
	fs, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	if n, err := fs.Add(ctx, "n", 0); err != nil || n != 1 {
		t.Fatalf("counter through NewFileStore = %d, %v; want 1", n, err)
	}
	for _, url := range []string{"tcp://h", "file://rel/dir"} {
		if s, err := Open(ctx, url); err == nil {
			s.Close()
			t.Fatalf("Open(%s) succeeded", url)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(dir)); len(entries) == 0 {
		t.Fatal("file:// store wrote nothing in its directory")
	}
}

// TestRegisterScheme: a registered scheme serves Open and Connect with
// the URL and options given; registering a name twice panics.
func TestRegisterScheme(t *testing.T) {
	const name = "testscheme"
	var gotURL string
	var gotGen uint64
	mem := NewMemStore()
	defer mem.Close()
	RegisterScheme(name, Scheme{
		Open: func(ctx context.Context, url string, opts ...Option) (Store, error) {
			gotURL = url
			return mem, nil
		},
		Connect: func(ctx context.Context, env Env, url string, opts ...Option) (Store, error) {
			gotURL, gotGen = url, ResolveOptions(opts...).Generation
			return mem, nil
		},
	})
	t.Cleanup(func() {
		schemes.Lock()
		delete(schemes.m, name)
		schemes.Unlock()
	})
	ctx := testCtx(t)
	if s, err := Open(ctx, "TestScheme://x/y"); err != nil || s != Store(mem) || gotURL != "TestScheme://x/y" {
		t.Fatalf("Open = %v, %v (url %q)", s, err, gotURL)
	}
	if s, err := Connect(ctx, Env{WorldSize: 1, Etcd: name + "://z"}, "", WithGeneration(3)); err != nil || s != Store(mem) ||
		gotURL != name+"://z" || gotGen != 3 {
		t.Fatalf("Connect = %v, %v (url %q, generation %d)", s, err, gotURL, gotGen)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("registering a scheme twice did not panic")
		}
	}()
	RegisterScheme(name, Scheme{Open: func(context.Context, string, ...Option) (Store, error) { return nil, nil },
		Connect: func(context.Context, Env, string, ...Option) (Store, error) { return nil, nil }})
}
