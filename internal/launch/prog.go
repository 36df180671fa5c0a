package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/build"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// resolveProg turns Config.Prog into an executable path. A Go main package (a
// directory, or an import path that is neither a file nor on PATH) is built
// into a temporary directory that cleanup removes.
func resolveProg(ctx context.Context, prog, dir string, stderr io.Writer) (path string, cleanup func(), err error) {
	nop := func() {}
	local := prog // prog as a file system path, relative to dir
	if dir != "" && !filepath.IsAbs(prog) {
		local = filepath.Join(dir, prog)
	}
	hasSep := strings.ContainsRune(prog, '/') || strings.ContainsRune(prog, filepath.Separator)

	if hasSep || prog == "." || prog == ".." {
		fi, statErr := os.Stat(local)
		switch {
		case statErr == nil && fi.IsDir():
			if err := checkMainDir(local); err != nil {
				return "", nop, err
			}
			pkg := prog
			if !isLocalPath(pkg) {
				pkg = "./" + pkg // "examples/x" would be read as an import path
			}
			return buildPackage(ctx, pkg, dir, dirBase(local), stderr)
		case statErr == nil:
			if fi.Mode()&0o111 == 0 {
				return "", nop, fmt.Errorf("launch: %s is not executable", prog)
			}
			abs, err := filepath.Abs(local)
			if err != nil {
				return "", nop, err
			}
			return abs, nop, nil
		case !isLocalPath(prog):
			// Perhaps an import path: github.com/x/y/cmd/z.
			return buildImportPath(ctx, prog, dir, stderr, statErr)
		default:
			return "", nop, fmt.Errorf("launch: %w", statErr)
		}
	}

	if p, err := exec.LookPath(prog); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		return p, nop, nil
	}
	if fi, err := os.Stat(local); err == nil && fi.IsDir() {
		if err := checkMainDir(local); err != nil {
			return "", nop, err
		}
		return buildPackage(ctx, "./"+prog, dir, dirBase(local), stderr)
	}
	if strings.Contains(prog, ".") {
		return buildImportPath(ctx, prog, dir, stderr, nil)
	}
	return "", nop, fmt.Errorf("launch: %q: executable file not found in $PATH, and it is not a Go package directory", prog)
}

func isLocalPath(p string) bool {
	return filepath.IsAbs(p) || p == "." || p == ".." ||
		strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../") ||
		strings.HasPrefix(p, "."+string(filepath.Separator)) || strings.HasPrefix(p, ".."+string(filepath.Separator))
}

func dirBase(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return filepath.Base(dir)
}

// checkMainDir reports whether dir holds a Go main package.
func checkMainDir(dir string) error {
	p, err := build.ImportDir(dir, 0)
	if err != nil {
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return fmt.Errorf("launch: %s is a directory without Go files, not a program", dir)
		}
		if p == nil || p.Name == "" {
			return fmt.Errorf("launch: %s: %w", dir, err)
		}
	}
	if p.Name != "main" {
		return fmt.Errorf("launch: %s is Go package %q, not a main package", dir, p.Name)
	}
	return nil
}

func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", errors.New("launch: the go command is needed to build a package and was not found")
}

// buildImportPath builds prog when `go list` says it is a main package.
func buildImportPath(ctx context.Context, prog, dir string, stderr io.Writer, statErr error) (string, func(), error) {
	nop := func() {}
	notFound := func() (string, func(), error) {
		if statErr != nil {
			return "", nop, fmt.Errorf("launch: %w (and not a Go package)", statErr)
		}
		return "", nop, fmt.Errorf("launch: %q is neither a file, an executable on PATH, nor a Go package", prog)
	}
	gocmd, err := goTool()
	if err != nil {
		return notFound()
	}
	cmd := exec.CommandContext(ctx, gocmd, "list", "-f", "{{.Name}}", "--", prog)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return notFound()
	}
	if name := strings.TrimSpace(out.String()); name != "main" {
		return "", nop, fmt.Errorf("launch: %s is Go package %q, not a main package", prog, name)
	}
	return buildPackage(ctx, prog, dir, pathBase(prog), stderr)
}

func pathBase(importPath string) string {
	i := strings.LastIndex(importPath, "/")
	return importPath[i+1:]
}

// buildPackage runs `go build -o TMP/name pkg` in dir.
func buildPackage(ctx context.Context, pkg, dir, name string, stderr io.Writer) (string, func(), error) {
	nop := func() {}
	gocmd, err := goTool()
	if err != nil {
		return "", nop, err
	}
	tmp, err := os.MkdirTemp("", "goccl-run-")
	if err != nil {
		return "", nop, fmt.Errorf("launch: %w", err)
	}
	cleanup := func() { os.RemoveAll(tmp) }
	if name == "" || name == "." || name == string(filepath.Separator) {
		name = "prog"
	}
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	out := filepath.Join(tmp, name)
	cmd := exec.CommandContext(ctx, gocmd, "build", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		cleanup()
		return "", nop, fmt.Errorf("launch: go build %s: %w", pkg, err)
	}
	return out, cleanup, nil
}
