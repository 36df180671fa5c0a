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

// TestEnvironmentDoc: docs/environment.md is what Markdown renders from
// the declarations, and lists every variable.
func TestEnvironmentDoc(t *testing.T) {
	b, err := os.ReadFile("../../docs/environment.md")
	if err != nil {
		t.Fatalf("%v (create it: go generate ./internal/config)", err)
	}
	want := Markdown()
	if string(b) != want {
		t.Errorf("docs/environment.md is not what internal/config declares; regenerate it: go generate ./internal/config")
	}
	for _, v := range All() {
		if !strings.Contains(want, "| `"+v.Name+"` |") {
			t.Errorf("Markdown does not list %s", v.Name)
		}
	}
}

// TestDocsNameOnlyKnownVars: the README and the pages under docs/ name no
// goccl variable that goccl does not read (a renamed or removed variable
// left behind in prose).
func TestDocsNameOnlyKnownVars(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md", "../../CONTRIBUTING.md")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, f := range strings.FieldsFunc(line, func(r rune) bool { return r != '_' && (r < 'A' || r > 'Z') && (r < '0' || r > '9') }) {
				if strings.HasPrefix(f, Prefix) && f != Prefix && Find(f) == nil && !strings.HasPrefix(f, TestPrefix) {
					t.Errorf("%s:%d names %s, which goccl does not read", strings.TrimPrefix(name, "../../"), i+1, f)
				}
			}
		}
	}
}
