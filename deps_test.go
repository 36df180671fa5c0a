package goccl

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNoEtcd: importing goccl links neither etcd's client nor gRPC
// (the etcd store is in rendezvous/etcd, which programs import to use it),
// while rendezvous/etcd does link them, which shows the check can fail.
func TestImportsNoEtcd(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	deps := func(pkg string) []string {
		out, err := exec.Command(gobin, "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	heavy := func(p string) bool {
		return strings.HasPrefix(p, "go.etcd.io/") || p == "google.golang.org/grpc" || strings.HasPrefix(p, "google.golang.org/grpc/")
	}
	for _, p := range deps("github.com/goccl/goccl") {
		if heavy(p) {
			t.Errorf("package goccl depends on %s", p)
		}
	}
	n := 0
	for _, p := range deps("github.com/goccl/goccl/rendezvous/etcd") {
		if heavy(p) {
			n++
		}
	}
	if n == 0 {
		t.Error("rendezvous/etcd depends on no etcd or gRPC package: the check above proves nothing")
	}
}
