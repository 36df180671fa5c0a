// Package etcd is a rendezvous Store kept in an etcd cluster
// (go.etcd.io/etcd/client/v3). Importing it registers the etcd:// scheme
// with package rendezvous, so that GOCCL_STORE=etcd://host:2379/prefix
// (rendezvous.Connect, goccl.Init) and rendezvous.Open use it:
//
//	import _ "github.com/goccl/goccl/rendezvous/etcd"
//
// It lives apart so that programs that never use etcd do not link its
// client and gRPC.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/rendezvous/internal/storekit"
)

// DefaultLeaseTTL is the time-to-live of a Store's lease without
// WithLeaseTTL: the keys under the store's prefix vanish this long after
// the last client stopped keeping the lease alive.
const DefaultLeaseTTL = 60 * time.Second

// etcdMaxTxnOps bounds the receipts one Add deletes in its transaction
// (etcd refuses transactions of more than 128 operations by default).
const etcdMaxTxnOps = 32

// Store is a rendezvous.Store kept in an etcd cluster (go.etcd.io/etcd/client/v3):
// every rank is a client, nobody serves, and the store outlives any rank.
//
// Under its prefix the store keeps:
//
//	<prefix>kv/<key>          the value of each key
//	<prefix>lease             the id of the prefix's lease (hex)
//	<prefix>add/<client>/<n>  Add receipts (see Add)
//
// Every key is attached to one lease per prefix, shared by all its
// clients: the first client grants it and records its id under
// <prefix>lease (in a transaction that succeeds only while that key does
// not exist), the others read the id, and every open client keeps the lease
// alive. So the keys outlive the Close of any one client while others still
// use them, and vanish the TTL (DefaultLeaseTTL, or the first client's
// WithLeaseTTL) after the last client is gone, closed or dead. Close does
// not revoke the lease, since it cannot know whether other clients still
// need the keys; Revoke deletes them all at once when the caller knows the
// job is done (Connect's store does so on the Close of the job's last rank).
//
// Get and Wait read a key and, when it is missing, watch it from the
// revision after that read, so they wake on the Set or Add that creates it
// without polling and cannot miss it. Add is a compare-and-swap loop: it
// reads the counter and its mod revision, then writes the sum in a
// transaction that applies only if the key's mod revision is unchanged. The
// same transaction writes a receipt under a key of this call's own, so that
// an Add whose transaction's outcome was lost (etcd restarting under it)
// looks for its receipt before trying again and never adds twice.
//
// Calls survive etcd restarts and leader changes: the client reconnects and
// every call retries until it succeeds or its ctx ends; a watch resumes from
// its revision. Errors name the endpoints, the prefix and the key. etcd's
// own limits apply: a server refuses requests over --max-request-bytes
// (1.5 MiB by default), so values must stay well under that, below
// MaxValueLen. The store does not prove the job token: secure the cluster
// with etcd's own TLS and authentication.
type Store struct {
	endpoints string // for errors
	prefix    string
	cli       *clientv3.Client
	lease     clientv3.LeaseID
	id        string // this client's name in Add receipts
	seq       atomic.Uint64
	logf      func(format string, args ...any)

	closeCtx    context.Context
	cancelClose context.CancelFunc
	kaDone      chan struct{} // closed when the keep-alive loop ends
	closeOnce   sync.Once

	// addSem serializes this client's Adds: concurrent ones would only make
	// each other's transactions fail and try again.
	addSem chan struct{}

	mu       sync.Mutex
	receipts []string // receipts of finished Adds, deleted by a later Add
}

// Dial connects to the etcd cluster at endpoints (host:port each) and
// returns a Store keeping its keys under prefix (used as given: end it with
// "/" to keep it apart from longer prefixes). It joins the prefix's lease,
// or grants it (with WithLeaseTTL's TTL, else DefaultLeaseTTL), retrying
// until the cluster answers or ctx ends. WithLog receives a warning when
// the lease is lost.
func Dial(ctx context.Context, endpoints []string, prefix string, opts ...rendezvous.Option) (*Store, error) {
	o := rendezvous.ResolveOptions(opts...)
	s := &Store{endpoints: strings.Join(endpoints, ","), prefix: prefix, id: storekit.RandomHex(8), logf: o.Logf,
		kaDone: make(chan struct{}), addSem: make(chan struct{}, 1)}
	if len(endpoints) == 0 {
		return nil, errors.New("rendezvous: etcd store: no endpoints")
	}
	ttl := o.LeaseTTL
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zap.NewNop(),
		// Reconnect within a second or two of etcd's return (gRPC's
		// default backoff grows to two minutes).
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("rendezvous: etcd store %s: %w", s.endpoints, err)
	}
	s.cli = cli
	s.closeCtx, s.cancelClose = context.WithCancel(context.Background())
	start := time.Now()
	err = s.retry(ctx, func(ctx context.Context) error {
		var err error
		s.lease, err = s.joinLease(ctx, int64(math.Ceil(ttl.Seconds())))
		return err
	})
	if err != nil {
		s.cancelClose()
		cli.Close()
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return nil, fmt.Errorf("rendezvous: cannot reach etcd at %s (prefix %q) after %v: %w",
				s.endpoints, prefix, time.Since(start).Round(time.Millisecond), err)
		}
		return nil, fmt.Errorf("rendezvous: etcd store %s (prefix %q): joining the prefix's lease: %w", s.endpoints, prefix, err)
	}
	go s.keepAlive()
	return s, nil
}

// joinLease returns the prefix's lease: the one recorded under
// <prefix>lease, or a new one of ttl seconds that this client records
// there.
func (s *Store) joinLease(ctx context.Context, ttl int64) (clientv3.LeaseID, error) {
	key := s.prefix + "lease"
	for {
		g, err := s.cli.Grant(ctx, ttl)
		if err != nil {
			return 0, err
		}
		t, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, strconv.FormatInt(int64(g.ID), 16), clientv3.WithLease(g.ID))).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			s.cli.Revoke(ctx, g.ID)
			return 0, err
		}
		if t.Succeeded {
			return g.ID, nil
		}
		s.cli.Revoke(ctx, g.ID)
		kvs := t.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // expired just now
		}
		id, err := strconv.ParseInt(string(kvs[0].Value), 16, 64)
		if err != nil {
			return 0, permanent(fmt.Errorf("key %q holds %q, not a lease id", key, kvs[0].Value))
		}
		// The record lives on the lease, so the lease existed when it was
		// read; it may expire before this keep-alive (its clients all gone).
		if _, err := s.cli.KeepAliveOnce(ctx, clientv3.LeaseID(id)); err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				continue
			}
			return 0, err
		}
		return clientv3.LeaseID(id), nil
	}
}

// keepAlive keeps the lease alive until Close. The client gives up on a
// lease that got no answer for its TTL (etcd down that long), though etcd
// extends every lease when it comes back: so this starts again until the
// lease is found gone.
func (s *Store) keepAlive() {
	defer close(s.kaDone)
	bo := storekit.Backoff{Cur: 100 * time.Millisecond, Max: 2 * time.Second}
	for {
		ch, err := s.cli.KeepAlive(s.closeCtx, s.lease)
		if err == nil {
			for range ch {
				bo.Cur = 100 * time.Millisecond
			}
		}
		if s.closeCtx.Err() != nil {
			return
		}
		if ttl, err := s.cli.TimeToLive(s.closeCtx, s.lease); err == nil && ttl.TTL <= 0 {
			if s.logf != nil {
				s.logf("rendezvous: etcd store %s: the lease of prefix %q expired or was revoked: its keys are gone", s.endpoints, s.prefix)
			}
			return
		}
		if storekit.Sleep(s.closeCtx, nil, bo.Next()) != nil {
			return
		}
	}
}

// Endpoints returns the endpoints this client dials, comma-separated.
func (s *Store) Endpoints() string { return s.endpoints }

// Prefix returns the prefix of the store's keys.
func (s *Store) Prefix() string { return s.prefix }

// Lease returns the id of the lease the store's keys live on.
func (s *Store) Lease() clientv3.LeaseID { return s.lease }

func (s *Store) dataKey(key string) string { return s.prefix + "kv/" + key }

// permanentError marks an error that retrying cannot cure.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return &permanentError{err} }

// etcdRetryable reports whether a call that failed with err may succeed
// when tried again: etcd unreachable or restarting, no leader, a request
// timed out inside etcd, a watch cut off.
func etcdRetryable(err error) bool {
	var p *permanentError
	if errors.As(err, &p) {
		return false
	}
	if errors.Is(err, errWatchClosed) || errors.Is(err, rpctypes.ErrCompacted) {
		return true
	}
	code := status.Code(err)
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted:
		return true
	}
	return false
}

var errWatchClosed = errors.New("watch closed")

// retry runs op until it succeeds, fails for good, or ctx or Close ends
// it. op gets a context that Close cancels too.
func (s *Store) retry(ctx context.Context, op func(context.Context) error) error {
	if s.closeCtx.Err() != nil {
		return rendezvous.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.closeCtx, cancel)
	defer stop()
	bo := storekit.Backoff{Cur: 20 * time.Millisecond, Max: time.Second}
	var last error
	stopped := func() error {
		switch {
		case s.closeCtx.Err() != nil:
			return rendezvous.ErrClosed
		case ctx.Err() != nil && last != nil:
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		}
		return ctx.Err()
	}
	for {
		err := op(cctx)
		if err == nil {
			return nil
		}
		if serr := stopped(); serr != nil {
			return serr
		}
		if !etcdRetryable(err) {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				err = fmt.Errorf("%w: the lease of the store's keys expired (no client kept it alive for its TTL) or was revoked, and the keys with it", err)
			}
			return err
		}
		last = err
		if storekit.Sleep(cctx, nil, bo.Next()) != nil {
			return stopped()
		}
	}
}

// fail wraps err with the store, the call and the key.
func (s *Store) fail(what string, err error) error {
	return fmt.Errorf("rendezvous: etcd store %s (prefix %q): %s: %w", s.endpoints, s.prefix, what, err)
}

// Set implements Store.
func (s *Store) Set(ctx context.Context, key string, value []byte) error {
	if err := storekit.CheckKey(key); err != nil {
		return err
	}
	if err := storekit.CheckValue(value); err != nil {
		return err
	}
	k := s.dataKey(key)
	err := s.retry(ctx, func(ctx context.Context) error {
		_, err := s.cli.Put(ctx, k, string(value), clientv3.WithLease(s.lease))
		return err
	})
	if err != nil {
		return s.fail("set "+storekit.QuoteKey(key), err)
	}
	return nil
}

// Get implements Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := storekit.CheckKey(key); err != nil {
		return nil, err
	}
	var v []byte
	err := s.retry(ctx, func(ctx context.Context) (err error) {
		v, err = s.await(ctx, s.dataKey(key))
		return err
	})
	if err != nil {
		return nil, s.fail("get "+storekit.QuoteKey(key), err)
	}
	return v, nil
}

// await returns the value of k once it exists: a read, then, when k is
// missing, a watch from the revision after the read's.
func (s *Store) await(ctx context.Context, k string) ([]byte, error) {
	r, err := s.cli.Get(ctx, k)
	if err != nil {
		return nil, err
	}
	if len(r.Kvs) > 0 {
		return append([]byte{}, r.Kvs[0].Value...), nil
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.cli.Watch(wctx, k, clientv3.WithRev(r.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return nil, fmt.Errorf("%w: %w", errWatchClosed, err)
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.PUT {
				return append([]byte{}, ev.Kv.Value...), nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errWatchClosed
}

// Wait implements Store.
func (s *Store) Wait(ctx context.Context, keys ...string) error {
	if err := storekit.CheckKeys(keys); err != nil {
		return err
	}
	for _, key := range keys {
		err := s.retry(ctx, func(ctx context.Context) error {
			_, err := s.await(ctx, s.dataKey(key))
			return err
		})
		if err != nil {
			return s.fail(fmt.Sprintf("wait %s (one of %d keys)", storekit.QuoteKey(key), len(keys)), err)
		}
	}
	if len(keys) == 0 {
		// Still fail after Close or with a done ctx, as the other stores do.
		if err := s.retry(ctx, func(context.Context) error { return nil }); err != nil {
			return s.fail("wait", err)
		}
	}
	return nil
}

// Add implements Store (see Store for how it stays atomic and
// exactly-once).
func (s *Store) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := storekit.CheckKey(key); err != nil {
		return 0, err
	}
	what := "add " + storekit.QuoteKey(key)
	select {
	case s.addSem <- struct{}{}:
		defer func() { <-s.addSem }()
	case <-ctx.Done():
		return 0, s.fail(what, ctx.Err())
	case <-s.closeCtx.Done():
		return 0, s.fail(what, rendezvous.ErrClosed)
	}
	k := s.dataKey(key)
	receipt := fmt.Sprintf("%sadd/%s/%d", s.prefix, s.id, s.seq.Add(1))
	var n int64
	err := s.retry(ctx, func(ctx context.Context) (err error) {
		n, err = s.addOnce(ctx, key, k, receipt, delta)
		return err
	})
	if err != nil {
		var p *permanentError
		if errors.As(err, &p) {
			return 0, fmt.Errorf("%w (etcd store %s, prefix %q)", p.err, s.endpoints, s.prefix)
		}
		return 0, s.fail(what, err)
	}
	s.mu.Lock()
	s.receipts = append(s.receipts, receipt)
	s.mu.Unlock()
	return n, nil
}

// addOnce reads the counter and this call's receipt, then tries
// compare-and-swap transactions until one applies; an error leaves the
// outcome of the last one unknown, so the caller calls again, which finds
// the receipt if it applied.
func (s *Store) addOnce(ctx context.Context, key, k, receipt string, delta int64) (int64, error) {
	read := []clientv3.Op{clientv3.OpGet(k), clientv3.OpGet(receipt)}
	t, err := s.cli.Txn(ctx).Then(read...).Commit()
	if err != nil {
		return 0, err
	}
	for {
		if r := t.Responses[1].GetResponseRange().Kvs; len(r) > 0 {
			return strconv.ParseInt(string(r[0].Value), 10, 64)
		}
		var old []byte
		var rev int64
		cur := t.Responses[0].GetResponseRange().Kvs
		if len(cur) > 0 {
			old, rev = cur[0].Value, cur[0].ModRevision
		}
		n, enc, err := storekit.AddCounter(key, old, len(cur) > 0, delta)
		if err != nil {
			return 0, permanent(err)
		}
		done := s.takeReceipts()
		ops := []clientv3.Op{clientv3.OpPut(k, string(enc), clientv3.WithLease(s.lease)), clientv3.OpPut(receipt, string(enc), clientv3.WithLease(s.lease))}
		for _, d := range done {
			ops = append(ops, clientv3.OpDelete(d))
		}
		t, err = s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(ops...).Else(read...).Commit()
		if err != nil || !t.Succeeded {
			s.returnReceipts(done)
		}
		if err != nil {
			return 0, err
		}
		if t.Succeeded {
			return n, nil
		}
	}
}

func (s *Store) takeReceipts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(len(s.receipts), etcdMaxTxnOps)
	done := s.receipts[len(s.receipts)-n:]
	s.receipts = s.receipts[: len(s.receipts)-n : len(s.receipts)-n]
	return done
}

func (s *Store) returnReceipts(done []string) {
	if len(done) == 0 {
		return
	}
	s.mu.Lock()
	s.receipts = append(s.receipts, done...)
	s.mu.Unlock()
}

// Revoke revokes the store's lease: every key under the prefix is deleted
// at once, for every client. Call it when the job is done with the keys;
// later writes through any client of the prefix fail.
func (s *Store) Revoke(ctx context.Context) error {
	err := s.retry(ctx, func(ctx context.Context) error {
		_, err := s.cli.Revoke(ctx, s.lease)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return s.fail("revoke the lease", err)
	}
	return nil
}

// Close stops keeping the lease alive and closes the client; calls in
// flight return errors wrapping ErrClosed, as do later calls. The keys stay
// while other clients keep the lease alive, and vanish its TTL after the
// last one stops (see Store).
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.cancelClose()
		<-s.kaDone
		s.cli.Close()
	})
	return nil
}

var _ rendezvous.Store = (*Store)(nil)
