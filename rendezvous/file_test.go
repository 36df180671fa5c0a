package rendezvous

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestKeyFileName(t *testing.T) {
	long := strings.Repeat("x", 300)
	for key, want := range map[string]string{
		"":          "k_",
		"abc-1.2_z": "k_abc-1.2_z",
		"A":         "k_%41",
		"a/b":       "k_a%2Fb",
		"..":        "k_..",
		"%41":       "k_%2541",
		"\x00\xff":  "k_%00%FF",
	} {
		if got := keyFileName(key); got != want {
			t.Errorf("keyFileName(%q) = %q, want %q", key, got, want)
		}
	}
	h := keyFileName(long)
	if !strings.HasPrefix(h, "h_") || len(h) != 2+64 {
		t.Errorf("long key name %q", h)
	}
	if keyFileName(long+"y") == h {
		t.Error("two long keys share a file name")
	}
	if n := keyFileName(strings.Repeat("/", MaxKeyLen)); len(n) > 200 {
		t.Errorf("name of %d bytes", len(n))
	}
}

// TestFileStoreMultiProcess runs Adds from several processes (this test
// binary re-executed) on one directory.
func TestFileStoreMultiProcess(t *testing.T) {
	if dir := os.Getenv("GOCCL_TEST_FILESTORE_CHILD"); dir != "" {
		fileStoreChild(t, dir)
		return
	}
	dir := t.TempDir()
	const procs, adds = 3, 20
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFileStoreMultiProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "GOCCL_TEST_FILESTORE_CHILD="+dir, "GOCCL_TEST_ADDS="+strconv.Itoa(adds),
			"GOCCL_TEST_ID="+strconv.Itoa(i))
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("child %d output:\n%s", i, out.String())
			}
		})
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
	}
	s, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if v, err := s.Get(ctx, "ctr"); err != nil || string(v) != strconv.Itoa(procs*adds) {
		t.Fatalf("counter = %q, %v; want %d", v, err, procs*adds)
	}
	for i := range procs {
		if v, err := s.Get(ctx, fmt.Sprintf("child/%d", i)); err != nil || string(v) != "done" {
			t.Fatalf("child/%d = %q, %v", i, v, err)
		}
	}
	// Only key files, the lock file, and no leftover temporary files.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), fileTmpPrefix) {
			t.Errorf("leftover temporary file %s", e.Name())
		}
	}
}

func fileStoreChild(t *testing.T, dir string) {
	adds, _ := strconv.Atoi(os.Getenv("GOCCL_TEST_ADDS"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	for range adds {
		if _, err := s.Add(ctx, "ctr", 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Set(ctx, "child/"+os.Getenv("GOCCL_TEST_ID"), []byte("done")); err != nil {
		t.Fatal(err)
	}
}

func TestFileStoreCreatesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	s, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Set(testCtx(t), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "k_k")); err != nil || string(b) != "v" {
		t.Fatalf("key file = %q, %v", b, err)
	}
	if _, err := NewFileStore(""); err == nil {
		t.Fatal("NewFileStore(\"\") succeeded")
	}
}
