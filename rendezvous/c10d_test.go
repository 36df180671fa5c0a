package rendezvous

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// torchPython is the interpreter with PyTorch (Debian's python3-torch);
// the python3 first in PATH may lack it.
const torchPython = "/usr/bin/python3"

// torchStoreScript serves a c10d TCPStore on 127.0.0.1 (port argv[1], 0 for
// any), prints "port N" and serves until its standard input closes.
const torchStoreScript = `
import sys, datetime
import torch, torch.distributed as dist
s = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 1, True, timeout=datetime.timedelta(seconds=60), wait_for_workers=False)
print("port", s.port, torch.__version__, flush=True)
sys.stdin.read()
`

// startTorchStore starts a PyTorch TCPStore server in a Python process,
// stopped when t ends, and returns its address and torch's version. It
// skips t when PyTorch cannot be imported.
func startTorchStore(t testing.TB) (addr, version string) {
	t.Helper()
	if out, err := exec.Command(torchPython, "-c", "import torch.distributed").CombinedOutput(); err != nil {
		t.Skipf("no PyTorch to serve a c10d TCPStore: %s -c 'import torch.distributed': %v: %s", torchPython, err, strings.TrimSpace(string(out)))
	}
	cmd := exec.Command(torchPython, "-c", torchStoreScript, "0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		var port int
		if _, err := fmt.Sscanf(l, "port %d %s", &port, &version); err != nil {
			t.Fatalf("python TCPStore server: %q: %v; stderr: %s", l, err, stderr.String())
		}
		return fmt.Sprintf("127.0.0.1:%d", port), version
	case <-time.After(60 * time.Second):
		t.Fatalf("python TCPStore server did not start in 60s; stderr: %s", stderr.String())
	}
	return "", ""
}

// TestC10dStoreConformance runs the store conformance suite against a real
// PyTorch TCPStore server: one server for the whole suite, each subtest
// under a key prefix of its own.
func TestC10dStoreConformance(t *testing.T) {
	addr, version := startTorchStore(t)
	t.Logf("torch %s serves a TCPStore at %s", version, addr)
	var n atomic.Int64
	runConformance(t, func(t *testing.T) opener {
		prefix := fmt.Sprintf("goccl-test/%d/", n.Add(1))
		return func(t *testing.T) Store {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := DialC10d(ctx, addr, prefix)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	})
	t.Run("Version", func(t *testing.T) {
		s, err := DialC10d(testCtx(t), addr, "v/")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		want := c10dVersion2
		if strings.HasPrefix(version, "1.") {
			want = c10dVersion1
		}
		if s.version != want {
			t.Fatalf("torch %s: protocol version %d, want %d", version, s.version, want)
		}
	})
}

// TestC10dStoreErrors: a server that is not there, and one that is not a
// c10d TCPStore, fail within ctx and name the address.
func TestC10dStoreErrors(t *testing.T) {
	srv, err := NewTCPServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	if _, err := DialC10d(ctx, srv.Addr(), "p/"); err == nil || !strings.Contains(err.Error(), srv.Addr()) {
		t.Fatalf("DialC10d of goccl's own TCP server: %v", err)
	} else {
		t.Logf("goccl's TCP server: %v (%v)", err, time.Since(start).Round(time.Millisecond))
	}
	srv.Close()
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if _, err := DialC10d(short, srv.Addr(), "p/"); err == nil || !strings.Contains(err.Error(), srv.Addr()) {
		t.Fatalf("DialC10d of a closed port: %v", err)
	}
}
