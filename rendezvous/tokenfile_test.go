package rendezvous

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDirToken: ranks that meet through the address file share one token
// through a 0600 file, whoever comes first; the launcher's token, a store
// address, no job id or a single rank bypass it.
func TestDirToken(t *testing.T) {
	env := Env{Rank: 1, WorldSize: 4, JobID: "job 7", StoreDir: t.TempDir()}
	toks := make([]string, 8)
	var wg sync.WaitGroup
	for i := range toks {
		wg.Go(func() {
			var err error
			if toks[i], err = DirToken(env); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, tok := range toks {
		if len(tok) != 64 || tok != toks[0] {
			t.Fatalf("tokens %q", toks)
		}
	}
	fi, err := os.Stat(TokenFilePath(env))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi, err)
	}
	if filepath.Dir(TokenFilePath(env)) != env.StoreDir {
		t.Errorf("token file %s is not in %s", TokenFilePath(env), env.StoreDir)
	}
	for _, e := range []Env{
		{Rank: 1, WorldSize: 4, JobID: "job 7", StoreDir: env.StoreDir, Token: "from the launcher"},
		{Rank: 1, WorldSize: 4, JobID: "job 8", StoreDir: env.StoreDir, StoreAddr: "127.0.0.1:1"},
		{Rank: 1, WorldSize: 4, JobID: "job 10", StoreDir: env.StoreDir, Etcd: "etcd://127.0.0.1:2379/goccl"},
		{Rank: 1, WorldSize: 4, StoreDir: env.StoreDir},
		{WorldSize: 1, JobID: "job 9", StoreDir: env.StoreDir},
	} {
		if tok, err := DirToken(e); tok != e.Token || err != nil {
			t.Errorf("DirToken(%+v) = %q, %v", e, tok, err)
		}
	}
	if n, _ := filepath.Glob(filepath.Join(env.StoreDir, "*")); len(n) != 1 {
		t.Errorf("files in the store directory: %q", n)
	}
}

// TestDirTokenRefused: a token file that someone else could have planted
// or read is refused.
func TestDirTokenRefused(t *testing.T) {
	env := Env{WorldSize: 2, JobID: "j", StoreDir: t.TempDir()}
	path := TokenFilePath(env)
	check := func(what, want string) {
		t.Helper()
		_, err := DirToken(env)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming %s and saying %q", what, err, path, want)
		}
		os.Remove(path)
	}
	os.WriteFile(path, []byte("planted\n"), 0o644)
	os.Chmod(path, 0o644) // whatever the umask
	check("mode 0644", "allows more than 0600")
	os.WriteFile(path, []byte("planted\n"), 0o600)
	os.Chmod(path, 0o640)
	check("mode 0640", "allows more than 0600")
	other := filepath.Join(env.StoreDir, "elsewhere")
	os.WriteFile(other, []byte("planted\n"), 0o600)
	os.Symlink(other, path)
	check("symbolic link", "not a regular file")
	os.Mkdir(path, 0o700)
	check("directory", "not a regular file")
	os.WriteFile(path, nil, 0o600)
	check("empty", "malformed")
	if os.Getuid() == 0 {
		os.WriteFile(path, []byte("planted\n"), 0o600)
		os.Chown(path, 12345, 12345)
		check("another user's", "owned by another user")
	}
}

// TestConnectAddrFileToken: without a token from the launcher, ranks that
// meet through the address file authenticate with the token file's token:
// a client without it is refused by rank 0's store. Rank 0 removes the
// token file when its store closes.
func TestConnectAddrFileToken(t *testing.T) {
	ctx := testCtx(t)
	env := Env{WorldSize: 2, JobID: "tokened", StoreDir: t.TempDir()}
	s0, err := Connect(ctx, env, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(AddrFilePath(env))
	if err != nil {
		t.Fatal(err)
	}
	addr, _, _ := strings.Cut(string(b), "\n")
	if _, err := DialTCP(ctx, addr); !errors.Is(err, ErrAuth) {
		t.Errorf("a client without the token: %v, want ErrAuth", err)
	}
	env.Rank = 1
	s1, err := Connect(ctx, env, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := Barrier(ctx, s1, "b", 1); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	s0.Close()
	time.Sleep(10 * time.Millisecond)
	if left, _ := filepath.Glob(filepath.Join(env.StoreDir, "*")); len(left) != 0 {
		t.Errorf("left in the store directory: %q", left)
	}
}
