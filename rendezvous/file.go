package rendezvous

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FileStore is a Store kept as files in a directory that every rank can see
// (a local directory for ranks on one host, or a shared file system such as
// NFS or Lustre across hosts). Each key is one file, named by escaping the key
// (see keyFileName). Set writes a temporary file and renames it over the key's
// file, so readers see either nothing or the whole value. Get and Wait poll
// for the file with backoff (1 ms doubling to 50 ms, jittered). Add takes an
// exclusive flock(2) on the directory's lock file ".lock" (polled with the same
// backoff, so that ctx is honoured) and does a read-modify-write, so it is
// atomic across processes; Adds from one process queue in memory first, so
// only one of them polls the lock. On NFS this needs working flock, which
// Linux emulates with fcntl locks.
//
// Many FileStores (in one or several processes) may use the same directory
// concurrently. The directory is not cleaned up: use a fresh one per job.
type FileStore struct {
	dir       string
	closed    chan struct{}
	closeOnce sync.Once
}

const (
	fileLockName  = ".lock"
	fileTmpPrefix = ".tmp-"
	filePollMin   = time.Millisecond
	filePollMax   = 50 * time.Millisecond
)

// NewFileStore returns a FileStore in dir, creating the directory if needed.
func NewFileStore(dir string) (*FileStore, error) {
	if dir == "" {
		return nil, errors.New("rendezvous: file store: empty directory name")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("rendezvous: file store: %w", err)
	}
	return &FileStore{dir: dir, closed: make(chan struct{})}, nil
}

// Dir returns the store's directory.
func (s *FileStore) Dir() string { return s.dir }

// escapeName maps s injectively to a portable file name component: bytes
// [a-z0-9._-] are kept, every other byte (upper case included, so that
// case-insensitive file systems cannot merge two names) becomes %XX. Results
// longer than 200 bytes are replaced by "h_" and the SHA-256 of s, which
// cannot collide with a short result (those start with prefix).
func escapeName(prefix, s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.WriteString(prefix)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
		if b.Len() > 200 {
			sum := sha256.Sum256([]byte(s))
			return "h_" + hex.EncodeToString(sum[:])
		}
	}
	return b.String()
}

// keyFileName is the name of key's file: "k_" + the escaped key, or "h_" +
// SHA-256 hex for long keys. It never starts with "." (which is reserved for
// the lock and temporary files).
func keyFileName(key string) string { return escapeName("k_", key) }

func (s *FileStore) path(key string) string { return filepath.Join(s.dir, keyFileName(key)) }

func (s *FileStore) errf(op, key string, err error) error {
	return fmt.Errorf("rendezvous: file store %s: %s %s: %w", s.dir, op, quoteKey(key), err)
}

func (s *FileStore) check(ctx context.Context, op, key string) error {
	select {
	case <-s.closed:
		return s.errf(op, key, ErrClosed)
	default:
	}
	if err := ctx.Err(); err != nil {
		return s.errf(op, key, err)
	}
	return nil
}

// writeFileAtomic writes data to dir/name through a temporary file and a
// rename, so that no reader sees a partial file.
func writeFileAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, fileTmpPrefix+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// Set implements Store.
func (s *FileStore) Set(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkValue(value); err != nil {
		return err
	}
	if err := s.check(ctx, "set", key); err != nil {
		return err
	}
	if err := writeFileAtomic(s.dir, keyFileName(key), value); err != nil {
		return s.errf("set", key, err)
	}
	return nil
}

// poll calls try until it reports done, sleeping with backoff between calls,
// until ctx ends or s closes.
func (s *FileStore) poll(ctx context.Context, op, key string, try func() (bool, error)) error {
	bo := backoff{cur: filePollMin, max: filePollMax}
	for {
		if err := s.check(ctx, op, key); err != nil {
			return err
		}
		done, err := try()
		if err != nil {
			return s.errf(op, key, err)
		}
		if done {
			return nil
		}
		if err := sleepCtx(ctx, s.closed, bo.next()); err != nil {
			return s.errf(op, key, err)
		}
	}
}

// Get implements Store.
func (s *FileStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	p := s.path(key)
	var v []byte
	err := s.poll(ctx, "get", key, func() (bool, error) {
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		v = b
		return err == nil, err
	})
	if v == nil && err == nil {
		v = []byte{}
	}
	return v, err
}

// Wait implements Store.
func (s *FileStore) Wait(ctx context.Context, keys ...string) error {
	if err := checkKeys(keys); err != nil {
		return err
	}
	if len(keys) == 0 {
		return s.check(ctx, "wait", "")
	}
	for _, key := range keys {
		p := s.path(key)
		err := s.poll(ctx, "wait", key, func() (bool, error) {
			_, err := os.Stat(p)
			if errors.Is(err, fs.ErrNotExist) {
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Add implements Store.
func (s *FileStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	if err := s.check(ctx, "add", key); err != nil {
		return 0, err
	}
	// Goroutines of this process queue on a channel (cancellable, no
	// polling); only the head of the queue competes for the flock with other
	// processes.
	sem := dirSemaphore(s.dir)
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return 0, s.errf("add", key, ctx.Err())
	case <-s.closed:
		return 0, s.errf("add", key, ErrClosed)
	}
	defer func() { <-sem }()
	lf, err := os.OpenFile(filepath.Join(s.dir, fileLockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, s.errf("add", key, err)
	}
	defer lf.Close() // also releases the lock
	err = s.poll(ctx, "add", key, func() (bool, error) { return tryLock(lf) })
	if err != nil {
		return 0, err
	}
	defer unlock(lf)
	name := keyFileName(key)
	old, err := os.ReadFile(filepath.Join(s.dir, name))
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, s.errf("add", key, err)
	}
	n, enc, err := addCounter(key, old, exists, delta)
	if err != nil {
		return 0, err
	}
	if err := writeFileAtomic(s.dir, name, enc); err != nil {
		return 0, s.errf("add", key, err)
	}
	return n, nil
}

// dirSemaphores maps a store directory (absolute, cleaned) to a channel of
// capacity 1 that serializes the Adds of this process on it.
var dirSemaphores sync.Map

func dirSemaphore(dir string) chan struct{} {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	sem, _ := dirSemaphores.LoadOrStore(dir, make(chan struct{}, 1))
	return sem.(chan struct{})
}

// Close makes later calls, and calls blocked in Get or Wait, fail with
// ErrClosed. The directory is left as it is.
func (s *FileStore) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

// TokenFilePath returns the job token file that ranks rendezvousing through
// the address file share when the launcher gives no token:
// <dir>/goccl-store-<JobID>.token, next to AddrFilePath(env).
func TokenFilePath(env Env) string {
	return strings.TrimSuffix(AddrFilePath(env), ".addr") + ".token"
}

// DirToken returns the job token of env: env.Token when the launcher gave
// one, else, when the ranks find each other through the address file (no
// StoreAddr, a JobID, more than one rank), a random token shared through
// the token file (TokenFilePath) in the same directory: the first rank to
// get there creates it, readable by its owner only (0600), and the others
// read it. Connect uses it, so that such a job's store and links are
// authenticated without any setting; Init passes it to the TCP endpoints.
//
// A token file that is not a regular file, whose mode allows more than 0600
// or that another user owns is refused: anybody who can write the directory
// (the system temporary directory, for one) could have planted it. The
// file is left in place; rank 0 removes it when its store closes. Otherwise
// (a TCP or etcd store, one rank, no job id) DirToken returns env.Token and
// no error: ranks of an etcd job need not share a directory, so a token
// file would give each host its own token.
func DirToken(env Env) (string, error) {
	if env.Token != "" || env.StoreAddr != "" || env.Etcd != "" || env.JobID == "" || env.WorldSize < 2 {
		return env.Token, nil
	}
	path := TokenFilePath(env)
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("rendezvous: job token file: %w", err)
	}
	for range 5 {
		tok, err := readTokenFile(path)
		if !errors.Is(err, fs.ErrNotExist) {
			return tok, err
		}
		// Nobody was first yet: write a complete file under a temporary name
		// and link it into place, which fails if another rank was quicker.
		if err := createTokenFile(dir, path); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("rendezvous: creating the job token file: %w", err)
		}
	}
	return "", fmt.Errorf("rendezvous: job token file %s: keeps disappearing", path)
}

// tokenFileMax bounds what readTokenFile reads.
const tokenFileMax = 1 << 10

// readTokenFile reads the token in path, checking that it is a regular
// file of this user with mode 0600 or narrower; fs.ErrNotExist when there
// is none.
func readTokenFile(path string) (string, error) {
	fail := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("rendezvous: job token file %s: "+format+
			"; remove it, or give every rank the same job token or another store directory", append([]any{path}, args...)...)
	}
	lst, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", err
	case err != nil:
		return fail("%v", err)
	case !lst.Mode().IsRegular():
		return fail("not a regular file")
	}
	// Non-blocking: a FIFO swapped in after Lstat must not hang the open.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fail("%v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return fail("%v", err)
	case !os.SameFile(lst, fi):
		return fail("replaced while being read")
	case fi.Mode().Perm()&^0o600 != 0:
		return fail("mode %v allows more than 0600", fi.Mode().Perm())
	case !ownedByMe(fi):
		return fail("owned by another user")
	}
	b := make([]byte, tokenFileMax)
	n, err := io.ReadFull(f, b)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return fail("%v", err)
	}
	tok := strings.TrimSpace(string(b[:n]))
	if tok == "" || n == tokenFileMax {
		return fail("malformed")
	}
	return tok, nil
}

// createTokenFile writes a fresh random token to path, which must not
// exist (an error wrapping fs.ErrExist when it does).
func createTokenFile(dir, path string) error {
	f, err := os.CreateTemp(dir, fileTmpPrefix+"*") // mode 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.WriteString(randomHex(32) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp, path)
	}
	return err
}
