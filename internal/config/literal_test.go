package config

import (
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNamesOnlyHere: no Go source outside this package (tests and testdata
// aside) spells a goccl variable's name in a string literal; code reads
// the declarations here, so a renamed or misspelt variable cannot hide.
func TestNamesOnlyHere(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Skipf("module root not found from %s: %v", root, err)
	}
	self, _ := filepath.Abs(".")
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == self || d.Name() == "testdata" || (strings.HasPrefix(d.Name(), ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		fset := token.NewFileSet()
		var s scanner.Scanner
		s.Init(fset.AddFile(path, -1, len(src)), src, nil, 0)
		for {
			pos, tok, lit := s.Scan()
			if tok == token.EOF {
				break
			}
			if (tok == token.STRING || tok == token.CHAR) && strings.Contains(lit, Prefix) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d: string literal %s names a goccl variable; use internal/config's declaration", rel, fset.Position(pos).Line, lit)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("only %d Go files scanned under %s", files, root)
	}
}

// TestReadmeListsEveryVar: the README's Environment section names every
// variable a user or launcher sets, and no variable goccl does not read.
func TestReadmeListsEveryVar(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Skipf("README.md not found: %v", err)
	}
	s := string(b)
	i := strings.Index(s, "\n## Environment")
	if i < 0 {
		t.Fatal("README.md has no Environment section")
	}
	sec := s[i+1:]
	if j := strings.Index(sec, "\n## "); j >= 0 {
		sec = sec[:j]
	}
	for _, v := range All() {
		if v.Group != "test" && !strings.Contains(sec, "`"+v.Name) {
			t.Errorf("README.md's Environment section does not list %s", v.Name)
		}
	}
	for _, f := range strings.FieldsFunc(sec, func(r rune) bool { return r != '_' && (r < 'A' || r > 'Z') }) {
		if strings.HasPrefix(f, Prefix) && f != Prefix && Find(f) == nil && !strings.HasPrefix(f, TestPrefix) {
			t.Errorf("README.md's Environment section lists %s, which goccl does not read", f)
		}
	}
}
