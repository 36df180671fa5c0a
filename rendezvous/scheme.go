package rendezvous

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Scheme is a kind of Store that another package provides for the store
// URLs of one scheme, registered with RegisterScheme from that package's
// init: etcd:// by github.com/goccl/goccl/rendezvous/etcd, so that programs
// that never use etcd do not link its client.
type Scheme struct {
	// Open returns a client of the store url names (see Open).
	Open func(ctx context.Context, url string, opts ...Option) (Store, error)
	// Connect returns rank env.Rank's store for Connect, when url (env's
	// store URL, such as env.Etcd) has this scheme.
	Connect func(ctx context.Context, env Env, url string, opts ...Option) (Store, error)
}

// schemePackages names the package that registers each scheme, for the
// error of a program that uses a scheme without importing it.
var schemePackages = map[string]string{
	"etcd": "github.com/goccl/goccl/rendezvous/etcd",
}

var schemes struct {
	sync.RWMutex
	m map[string]Scheme
}

// RegisterScheme makes Open and Connect use s for URLs of scheme name
// (without "://", any case). It panics when name is registered already or
// s lacks a function: both are programming errors of the registering
// package.
func RegisterScheme(name string, s Scheme) {
	name = strings.ToLower(name)
	if s.Open == nil || s.Connect == nil {
		panic(fmt.Sprintf("rendezvous: RegisterScheme(%q): Open and Connect are required", name))
	}
	schemes.Lock()
	defer schemes.Unlock()
	if _, dup := schemes.m[name]; dup {
		panic(fmt.Sprintf("rendezvous: RegisterScheme(%q): registered twice", name))
	}
	if schemes.m == nil {
		schemes.m = make(map[string]Scheme)
	}
	schemes.m[name] = s
}

// lookupScheme returns the Scheme registered for url's scheme, or an error
// naming the import that registers it.
func lookupScheme(url string) (Scheme, error) {
	name, _, ok := strings.Cut(url, "://")
	if !ok {
		return Scheme{}, fmt.Errorf("store URL %q has no scheme (want scheme://...)", url)
	}
	name = strings.ToLower(name)
	schemes.RLock()
	s, ok := schemes.m[name]
	schemes.RUnlock()
	if ok {
		return s, nil
	}
	if pkg, known := schemePackages[name]; known {
		return Scheme{}, fmt.Errorf("store URL %q: the %s store is not linked into this program: add import _ %q", url, name, pkg)
	}
	return Scheme{}, fmt.Errorf("store URL %q: no store is registered for scheme %q", url, name)
}

// Open returns a client of the store url names: tcp://host:port (DialTCP),
// file:///dir (NewFileStore), or a URL of a scheme that another package
// registered (etcd://...: import _ "github.com/goccl/goccl/rendezvous/etcd";
// without that import, Open fails and names it).
func Open(ctx context.Context, url string, opts ...Option) (Store, error) {
	if rest, ok := cutScheme(url, "tcp"); ok {
		rest = strings.TrimSuffix(rest, "/")
		if err := checkHostPort(rest); err != nil {
			return nil, fmt.Errorf("rendezvous: store URL %q: %v", url, err)
		}
		return DialTCP(ctx, rest, opts...)
	}
	if dir, ok := cutScheme(url, "file"); ok {
		if !strings.HasPrefix(dir, "/") {
			return nil, fmt.Errorf("rendezvous: store URL %q: want file:///dir (an absolute directory)", url)
		}
		return NewFileStore(dir)
	}
	s, err := lookupScheme(url)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: open: %w", err)
	}
	return s.Open(ctx, url, opts...)
}

// cutScheme returns what follows scheme:// in url (scheme in any case).
func cutScheme(url, scheme string) (rest string, ok bool) {
	name, rest, ok := strings.Cut(url, "://")
	return rest, ok && strings.EqualFold(name, scheme)
}

// Settings are the values a list of Options sets, as the store kinds of
// other packages (RegisterScheme) read them.
type Settings struct {
	Rank       int           // WithRank's, -1 when not given
	Generation uint64        // WithGeneration's, 0 when not given
	LeaseTTL   time.Duration // WithLeaseTTL's, 0 when not given
	Logf       func(format string, args ...any)
}

// ResolveOptions returns the Settings opts make.
func ResolveOptions(opts ...Option) Settings {
	o := makeOptions(opts)
	return Settings{Rank: o.rank, Generation: o.generation, LeaseTTL: o.leaseTTL, Logf: o.logf}
}
