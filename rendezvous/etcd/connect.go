package etcd

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rendezvous"
)

func init() {
	rendezvous.RegisterScheme("etcd", rendezvous.Scheme{Open: open, Connect: connect})
}

// open is rendezvous.Open of an etcd:// URL: a client under the URL's
// prefix (rendezvous.ParseEtcdURL).
func open(ctx context.Context, u string, opts ...rendezvous.Option) (rendezvous.Store, error) {
	endpoints, prefix, err := rendezvous.ParseEtcdURL(u)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: open %q: %w", u, err)
	}
	return Dial(ctx, endpoints, prefix, opts...)
}

// Keys of the store Connect makes on etcd: every rank adds 1 to
// joinedKey when it connects and to closedKey when it closes.
const (
	joinedKey = "goccl/etcd/joined"
	closedKey = "goccl/etcd/closed"
	// closeTimeout bounds the last rank's bookkeeping in Close.
	closeTimeout = 2 * time.Second
)

// JobPrefix returns the prefix under which rendezvous.Connect keeps a
// job's keys in etcd: the URL's prefix, then the job id (path-escaped,
// "default" when there is none), the attempt (TORCHELASTIC_RESTART_COUNT,
// 0 when unset) and the generation (rendezvous.WithGeneration: the count
// of this process's rendezvous), each followed by "/", as in
// /goccl/<job id>/<attempt>/<generation>/.
func JobPrefix(urlPrefix string, env rendezvous.Env, generation uint64) string {
	job := env.JobID
	if job == "" {
		job = "default"
	}
	attempt := env.Attempt
	if attempt == "" {
		attempt = "0"
	}
	return fmt.Sprintf("%s%s/%s/%d/", urlPrefix, url.PathEscape(job), url.PathEscape(attempt), generation)
}

// connect is rendezvous.Connect with an etcd:// store URL: this rank
// becomes a client of the cluster the URL names, under JobPrefix. Keys of
// an earlier run with the same job id (which crashed, since a job that
// ends cleanly deletes its keys) stay until its lease expires: the ranks
// find the world already joined and fail, naming the prefix, rather than
// use them.
func connect(ctx context.Context, env rendezvous.Env, u string, opts ...rendezvous.Option) (rendezvous.Store, error) {
	endpoints, urlPrefix, err := rendezvous.ParseEtcdURL(u)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: connect: %s=%q: %w", config.Store.Name, u, err)
	}
	o := rendezvous.ResolveOptions(opts...)
	prefix := JobPrefix(urlPrefix, env, o.Generation)
	s, err := Dial(ctx, endpoints, prefix, opts...)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: connect: rank %d: %w", env.Rank, err)
	}
	n, err := s.Add(ctx, joinedKey, 1)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("rendezvous: connect: rank %d: %w", env.Rank, err)
	}
	if n > int64(env.WorldSize) {
		s.Close()
		ttl := o.LeaseTTL
		if ttl <= 0 {
			ttl = DefaultLeaseTTL
		}
		return nil, fmt.Errorf("rendezvous: connect: rank %d: etcd at %s already holds a rendezvous under %q (%d ranks joined, world size %d): "+
			"the keys of an earlier run with the same job id, which vanish %v after its last rank stopped (or of a job still running); "+
			"give each run its own %s (or another prefix in %s)",
			env.Rank, s.Endpoints(), prefix, n-1, env.WorldSize, ttl, config.JobID.Name, config.Store.Name)
	}
	return &jobStore{Store: s, world: env.WorldSize}, nil
}

// jobStore is the store rendezvous.Connect makes on etcd.
type jobStore struct {
	*Store
	world     int
	closeOnce sync.Once
}

// Close counts this rank out; the last of the world's ranks to close
// revokes the lease, deleting the job's keys at once (otherwise they vanish
// with the lease, its TTL after the last rank stopped keeping it alive).
func (s *jobStore) Close() error {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if n, err := s.Add(ctx, closedKey, 1); err == nil && n == int64(s.world) {
			s.Revoke(ctx)
		}
	})
	return s.Store.Close()
}
