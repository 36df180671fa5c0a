// Package clustertest gives tests a cluster of network namespaces
// (package cluster) that is removed when the test ends, or skips the test
// with the reason it cannot be made here.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/cluster"
)

var seq atomic.Int64

// Name is a cluster name no other process uses: "gct<pid>-<n>" (parallel
// test processes, other engineers' included, never collide).
func Name() string {
	return fmt.Sprintf("gct%d-%d", os.Getpid(), seq.Add(1))
}

// Skip is why cfg's cluster cannot be built on this machine, before
// trying ("" when it may be): -short, not root, no ip or tc.
func Skip() string {
	switch {
	case testing.Short():
		return "network namespace cluster; skipped with -short"
	case os.Geteuid() != 0:
		return "network namespace cluster: needs root"
	}
	for _, prog := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(prog); err != nil {
			return "network namespace cluster: no " + prog + " command (iproute2)"
		}
	}
	return ""
}

// New builds cfg's cluster for t, with a name of Name's (unless cfg names
// one) and its state file in a temporary directory (unless cfg gives
// one), and removes it when t ends, failing t if anything of it is left.
// It skips t, saying why, where the cluster cannot be made: see Skip, a
// kernel without netem (for a delay or loss) or tbf (for a rate), or
// namespaces refused (a container without CAP_SYS_ADMIN).
func New(t testing.TB, cfg cluster.Config) *cluster.Cluster {
	t.Helper()
	if why := Skip(); why != "" {
		t.Skip(why)
	}
	if cfg.Name == "" {
		cfg.Name = Name()
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, cfg)
	if err != nil {
		if why := SkipReason(err); why != "" {
			t.Skip(why)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(t, c.Name, c.Config.StateDir) })
	return c
}

// SkipReason is why a test should skip after Up failed with err, or ""
// when err is a failure: the kernel lacks a qdisc, or namespaces cannot be
// made here.
func SkipReason(err error) string {
	switch {
	case errors.Is(err, cluster.ErrNoNetem), errors.Is(err, cluster.ErrNoTBF), errors.Is(err, cluster.ErrNotRoot), errors.Is(err, cluster.ErrNoNft):
		return fmt.Sprintf("network namespace cluster: %v", err)
	}
	var ce *cluster.CommandError
	if errors.As(err, &ce) && len(ce.Args) == 4 && strings.Join(ce.Args[:3], " ") == "ip netns add" {
		return fmt.Sprintf("network namespace cluster: cannot create network namespaces: %v", err)
	}
	return ""
}

// Remove takes cluster name down and fails t if anything of it is left:
// a namespace, or its state file.
func Remove(t testing.TB, name, stateDir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cluster.Down(ctx, name, stateDir); err != nil {
		t.Errorf("cluster down: %v", err)
	}
	if left, err := cluster.Leftovers(ctx, name); err != nil || len(left) > 0 {
		t.Errorf("cluster %s: namespaces left after Down: %v %v", name, left, err)
	}
	if _, err := os.Stat(cluster.StateFile(name, stateDir)); err == nil {
		t.Errorf("cluster %s: state file left after Down", name)
	}
}

// Forward makes a server of this process that listens at target (on its
// loopback, in the test's own namespace, such as an embedded etcd) reachable
// from c's hosts: it listens on host i's address, at a free port, and
// relays each connection to target. It returns the address the hosts dial;
// t's cleanup stops it and its connections.
func Forward(t testing.TB, c *cluster.Cluster, i int, target string) string {
	t.Helper()
	ln, err := c.Listen(i, net.JoinHostPort(c.Hosts[i].Addr.String(), "0"))
	if err != nil {
		t.Fatalf("cluster %s: listening on host %d: %v", c.Name, i, err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	track := func(cs ...net.Conn) {
		mu.Lock()
		conns = append(conns, cs...)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			track(in, out)
			for _, p := range [][2]net.Conn{{in, out}, {out, in}} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					io.Copy(p[0], p[1])
					p[0].(*net.TCPConn).CloseWrite()
				}()
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}
