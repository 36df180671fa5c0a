// Package topotest materializes the fake sysfs and procfs trees of
// topo/testdata for tests (topo's own and the CLI's).
package topotest

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FakeRoot copies the tree in directory dir (topo/testdata/two-socket,
// say) into a new temporary directory, makes there the symbolic links that
// dir+".links" lists ("LINK -> TARGET" per line, the target relative as
// sysfs writes it; # starts a comment), and returns the copy. The links
// are kept in a list rather than in the tree because Go module archives
// drop symbolic links.
func FakeRoot(tb testing.TB, dir string) string {
	tb.Helper()
	root := tb.TempDir()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(root, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		tb.Fatal(err)
	}
	f, err := os.Open(dir + ".links")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		link, target, ok := strings.Cut(line, " -> ")
		if !ok {
			tb.Fatalf("%s.links:%d: want LINK -> TARGET, have %q", dir, n, line)
		}
		p := filepath.Join(root, filepath.FromSlash(strings.TrimSpace(link)))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.Symlink(filepath.FromSlash(strings.TrimSpace(target)), p); err != nil {
			tb.Fatal(err)
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return root
}
