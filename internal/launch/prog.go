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

// resolver turns the programs of a job (Config.Prog, App.Prog) into
// executable paths. A Go main package is built once, however many apps
// name it (by the same or another spelling: ./x, x/, its import path).
type resolver struct {
	dir    string            // Config.Dir
	stderr io.Writer         // build output
	progs  map[string]string // Prog as given -> executable
	built  map[string]string // a package's source directory -> executable
	tmps   []string          // the build directories, removed by cleanup
}

func newResolver(dir string, stderr io.Writer) *resolver {
	return &resolver{dir: dir, stderr: stderr, progs: map[string]string{}, built: map[string]string{}}
}

// cleanup removes the executables built.
func (rv *resolver) cleanup() {
	for _, tmp := range rv.tmps {
		os.RemoveAll(tmp)
	}
	rv.tmps = nil
}

// resolve returns the executable of prog, building it when it is a Go
// package not built yet.
func (rv *resolver) resolve(ctx context.Context, prog string) (string, error) {
	if path, ok := rv.progs[prog]; ok {
		return path, nil
	}
	path, err := rv.resolveProg(ctx, prog)
	if err != nil {
		return "", err
	}
	rv.progs[prog] = path
	return path, nil
}

// resolveProg turns prog into an executable path. A Go main package (a
// directory, or an import path that is neither a file nor on PATH) is built
// into a temporary directory that cleanup removes.
func (rv *resolver) resolveProg(ctx context.Context, prog string) (path string, err error) {
	dir := rv.dir
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
				return "", err
			}
			pkg := prog
			if !isLocalPath(pkg) {
				pkg = "./" + pkg // "examples/x" would be read as an import path
			}
			return rv.build(ctx, pkg, local, dirBase(local))
		case statErr == nil:
			if fi.Mode()&0o111 == 0 {
				return "", fmt.Errorf("launch: %s is not executable", prog)
			}
			return filepath.Abs(local)
		case !isLocalPath(prog):
			// Perhaps an import path: github.com/x/y/cmd/z.
			return rv.buildImportPath(ctx, prog, statErr)
		default:
			return "", fmt.Errorf("launch: %w", statErr)
		}
	}

	if p, err := exec.LookPath(prog); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		return p, nil
	}
	if fi, err := os.Stat(local); err == nil && fi.IsDir() {
		if err := checkMainDir(local); err != nil {
			return "", err
		}
		return rv.build(ctx, "./"+prog, local, dirBase(local))
	}
	if strings.Contains(prog, ".") {
		return rv.buildImportPath(ctx, prog, nil)
	}
	return "", fmt.Errorf("launch: %q: executable file not found in $PATH, and it is not a Go package directory", prog)
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
func (rv *resolver) buildImportPath(ctx context.Context, prog string, statErr error) (string, error) {
	notFound := func() (string, error) {
		if statErr != nil {
			return "", fmt.Errorf("launch: %w (and not a Go package)", statErr)
		}
		return "", fmt.Errorf("launch: %q is neither a file, an executable on PATH, nor a Go package", prog)
	}
	gocmd, err := goTool()
	if err != nil {
		return notFound()
	}
	cmd := exec.CommandContext(ctx, gocmd, "list", "-f", "{{.Name}} {{.Dir}}", "--", prog)
	cmd.Dir = rv.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return notFound()
	}
	name, srcDir, _ := strings.Cut(strings.TrimSpace(out.String()), " ")
	if name != "main" {
		return "", fmt.Errorf("launch: %s is Go package %q, not a main package", prog, name)
	}
	return rv.build(ctx, prog, srcDir, pathBase(prog))
}

func pathBase(importPath string) string {
	i := strings.LastIndex(importPath, "/")
	return importPath[i+1:]
}

// build runs `go build -o TMP/name pkg` in the resolver's directory,
// unless the package in srcDir (its source directory) was built already.
func (rv *resolver) build(ctx context.Context, pkg, srcDir, name string) (string, error) {
	key := srcDir
	if abs, err := filepath.Abs(srcDir); err == nil {
		key = abs
	}
	if exe, ok := rv.built[key]; ok {
		return exe, nil
	}
	gocmd, err := goTool()
	if err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp("", "goccl-run-")
	if err != nil {
		return "", fmt.Errorf("launch: %w", err)
	}
	rv.tmps = append(rv.tmps, tmp)
	if name == "" || name == "." || name == string(filepath.Separator) {
		name = "prog"
	}
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	out := filepath.Join(tmp, name)
	cmd := exec.CommandContext(ctx, gocmd, "build", "-o", out, pkg)
	cmd.Dir = rv.dir
	cmd.Stdout, cmd.Stderr = rv.stderr, rv.stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("launch: go build %s: %w", pkg, err)
	}
	rv.built[key] = out
	return out, nil
}
