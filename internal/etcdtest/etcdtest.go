// Package etcdtest runs etcd servers for tests: inside the test process
// (go.etcd.io/etcd/server/v3/embed, Start and Shared) or from an etcd
// binary (StartBinary). Only tests import it.
package etcdtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startTimeout bounds a server's start.
const startTimeout = 30 * time.Second

// Server is an etcd server of one member listening on 127.0.0.1.
//
// Clients of an embedded server reach it through a TCP relay in this
// process, at Endpoint: Stop cuts their connections at once, as a crash of
// the server would (embed's Close alone waits up to 7 s for the clients'
// watch and keep-alive streams to end), then closes the server; while it
// is down, connections to Endpoint are refused.
type Server struct {
	// Endpoint is the address clients dial, 127.0.0.1:port.
	Endpoint string
	// Dir is the data directory.
	Dir string

	clientPort, peerPort int
	serverAddr           string // the server's own client address (embedded: behind the relay)
	relay                *relay // nil for StartBinary's
	binPath              string // StartBinary's program; "": embedded
	mu                   sync.Mutex
	e                    *embed.Etcd // the embedded server while up
	cmd                  *exec.Cmd   // the etcd process while up (StartBinary)
	exited               chan struct{}
	log                  bytes.Buffer // the process's output (StartBinary)
}

// Start starts an etcd server in this process, with its data in a
// temporary directory of t and on free ports of 127.0.0.1 (fsync off: the
// tests' data need not survive a crash of the host); t's cleanup stops it.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{Dir: t.TempDir()}
	if err := s.startFresh(s.startEmbed); err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

var shared struct {
	sync.Mutex
	s   *Server
	err error
}

// Shared returns an embedded server shared by every test of this test
// binary that calls it, started on first use: tests keep apart by using
// prefixes of their own. The test binary's TestMain calls StopShared after
// m.Run to stop it and delete its data.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if shared.s == nil && shared.err == nil {
		dir, err := os.MkdirTemp("", "etcdtest-")
		if err != nil {
			t.Fatal(err)
		}
		s := &Server{Dir: dir}
		if shared.err = s.startFresh(s.startEmbed); shared.err != nil {
			os.RemoveAll(dir)
		} else {
			shared.s = s
		}
	}
	if shared.err != nil {
		t.Fatalf("etcdtest: shared server: %v", shared.err)
	}
	return shared.s
}

// StopShared stops the shared server, if one was started, and deletes its
// data.
func StopShared() {
	shared.Lock()
	defer shared.Unlock()
	if shared.s != nil {
		shared.s.Stop()
		os.RemoveAll(shared.s.Dir)
		shared.s = nil
	}
}

// StartBinary starts the etcd program at path (Debian's etcd-server:
// /usr/bin/etcd) as Start starts an embedded one; its output is in
// t's log if the test fails.
func StartBinary(t testing.TB, path string) *Server {
	t.Helper()
	s := &Server{Dir: t.TempDir(), binPath: path}
	if err := s.startFresh(s.startBinary); err != nil {
		t.Fatalf("etcdtest: %s: %v", path, err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			s.mu.Lock()
			t.Logf("etcd's output:\n%s", s.log.String())
			s.mu.Unlock()
		}
	})
	return s
}

// URL returns GOCCL_STORE's value for this server and prefix:
// etcd://127.0.0.1:port/prefix.
func (s *Server) URL(prefix string) string {
	return "etcd://" + s.Endpoint + "/" + strings.TrimPrefix(prefix, "/")
}

// startFresh picks free ports and starts the server, picking others when
// one was taken in between.
func (s *Server) startFresh(start func() error) error {
	var err error
	for range 5 {
		if s.clientPort, err = freePort(); err != nil {
			return err
		}
		if s.peerPort, err = freePort(); err != nil {
			return err
		}
		s.serverAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.clientPort))
		s.Endpoint = s.serverAddr
		if s.binPath == "" {
			port, err := freePort()
			if err != nil {
				return err
			}
			s.Endpoint = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			s.relay = &relay{addr: s.Endpoint, target: s.serverAddr}
		}
		if err = start(); err == nil || !addrInUse(err) {
			return err
		}
	}
	return err
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) urls() (client, peer url.URL) {
	client = url.URL{Scheme: "http", Host: s.serverAddr}
	peer = url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.peerPort))}
	return client, peer
}

func (s *Server) startEmbed() error {
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = s.Dir
	client, peer := s.urls()
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.UnsafeNoFsync = true
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(startTimeout):
		e.Close()
		return fmt.Errorf("etcd not ready after %v", startTimeout)
	}
	if err := s.relay.listen(); err != nil {
		e.Close()
		return err
	}
	s.mu.Lock()
	s.e = e
	s.mu.Unlock()
	return nil
}

func (s *Server) startBinary() error {
	client, peer := s.urls()
	cmd := exec.Command(s.binPath, "--name", "etcdtest", "--data-dir", s.Dir,
		"--listen-client-urls", client.String(), "--advertise-client-urls", client.String(),
		"--listen-peer-urls", peer.String(), "--initial-advertise-peer-urls", peer.String(),
		"--initial-cluster", "etcdtest="+peer.String(), "--log-level", "warn")
	cmd.Env = os.Environ()
	if runtime.GOARCH != "amd64" {
		// etcd 3.4 refuses to run elsewhere without this.
		cmd.Env = append(cmd.Env, "ETCD_UNSUPPORTED_ARCH="+runtime.GOARCH)
	}
	s.mu.Lock()
	cmd.Stdout, cmd.Stderr = &lockedWriter{&s.mu, &s.log}, &lockedWriter{&s.mu, &s.log}
	s.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			s.mu.Lock()
			out := s.log.String()
			s.cmd = nil
			s.mu.Unlock()
			if strings.Contains(out, "address already in use") {
				return fmt.Errorf("etcd exited: %w", syscall.EADDRINUSE)
			}
			return fmt.Errorf("etcd exited while starting: %s", lastLines(out, 10))
		case <-time.After(50 * time.Millisecond):
		}
		if healthy(s.Endpoint) {
			return nil
		}
	}
	s.Stop()
	return fmt.Errorf("etcd not healthy after %v", startTimeout)
}

// healthy asks etcd's /health endpoint.
func healthy(endpoint string) bool {
	c, err := net.DialTimeout("tcp", endpoint, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c, "GET /health HTTP/1.0\r\nHost: %s\r\n\r\n", endpoint)
	var b bytes.Buffer
	b.ReadFrom(c)
	return strings.Contains(b.String(), `"health":"true"`)
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Stop stops the server (its data stay in Dir); it does nothing when the
// server is down.
func (s *Server) Stop() {
	s.mu.Lock()
	e, cmd, exited := s.e, s.cmd, s.exited
	s.e, s.cmd = nil, nil
	s.mu.Unlock()
	if e != nil {
		s.relay.cut()
		e.Close()
	}
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
}

// Restart starts the server again on the same data and ports, stopping
// it first if it is up; it fails t when it cannot (another process took a
// port meanwhile).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	start := s.startEmbed
	if s.binPath != "" {
		start = s.startBinary
	}
	deadline := time.Now().Add(startTimeout)
	for {
		err := start()
		if err == nil {
			return
		}
		if !addrInUse(err) || time.Now().After(deadline) {
			t.Fatalf("etcdtest: restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func addrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

// relay forwards the connections it accepts at addr to target.
type relay struct {
	addr, target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// listen starts accepting at addr.
func (r *relay) listen() error {
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.ln, r.conns = ln, make(map[net.Conn]bool)
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", r.target)
			if err != nil {
				c.Close()
				continue
			}
			if !r.track(c, d) {
				return
			}
			r.wg.Add(2)
			go r.pipe(c, d)
			go r.pipe(d, c)
		}
	}()
	return nil
}

// track records c and d, or closes them and returns false after cut.
func (r *relay) track(c, d net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln == nil {
		c.Close()
		d.Close()
		return false
	}
	r.conns[c], r.conns[d] = true, true
	return true
}

func (r *relay) pipe(dst, src net.Conn) {
	defer r.wg.Done()
	io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// cut stops accepting and closes every relayed connection.
func (r *relay) cut() {
	r.mu.Lock()
	if r.ln != nil {
		r.ln.Close()
		r.ln = nil
	}
	for c := range r.conns {
		c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
}
