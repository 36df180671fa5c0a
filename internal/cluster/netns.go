package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// SetLink takes host i's link down (up false: its port on the bridge goes
// down, as if its cable were pulled or its switch port failed: packets to
// and from it vanish, nothing is refused) or back up.
func (c *Cluster) SetLink(ctx context.Context, i int, up bool) error {
	if i < 0 || i >= len(c.Hosts) {
		return fmt.Errorf("cluster %s: no host %d (it has %d)", c.Name, i, len(c.Hosts))
	}
	r, err := newRunner(ctx)
	if err != nil {
		return err
	}
	state := "down"
	if up {
		state = "up"
	}
	return r.ipCmd("-n", c.Switch, "link", "set", c.Hosts[i].Port, state)
}

// netnsDir is where ip netns keeps the named namespaces.
const netnsDir = "/run/netns"

// Listen opens a TCP listener at addr in host i's network namespace from
// this process (which stays where it is): connections to it come from the
// cluster's hosts, and what this process does with them, such as relaying
// them to a server on its own loopback, happens outside. It is how a test
// gives the hosts a server that runs in the test process.
func (c *Cluster) Listen(i int, addr string) (net.Listener, error) {
	if i < 0 || i >= len(c.Hosts) {
		return nil, fmt.Errorf("cluster %s: no host %d (it has %d)", c.Name, i, len(c.Hosts))
	}
	return listenIn(filepath.Join(netnsDir, c.Hosts[i].Name), addr)
}

// listenIn listens at addr in the network namespace at nsPath. A socket
// belongs to the namespace of the thread that creates it, so a goroutine
// locks itself to a thread, moves that thread into the namespace and
// creates the listener there; the thread is never unlocked, so it ends
// with the goroutine instead of going back to the pool in the wrong
// namespace.
func listenIn(nsPath, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := os.Open(nsPath)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("entering network namespace %s: %w", nsPath, err)}
			return
		}
		ln, err := net.Listen("tcp", addr)
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}
