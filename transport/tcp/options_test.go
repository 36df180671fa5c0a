package tcp

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/auth"
	"github.com/goccl/goccl/transport"
)

func listenOpts(t testing.TB, rank int, opts ...EndpointOption) *Endpoint {
	t.Helper()
	e, err := listen(rank, &net.TCPAddr{IP: loopback}, "job-1", 2*time.Second, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func jobTLS(t testing.TB, token string) EndpointOption {
	t.Helper()
	s, c, err := JobTLS([]byte(token))
	if err != nil {
		t.Fatal(err)
	}
	return WithTLS(s, c)
}

// TestLinkOptions: a link's name says which options it has. (The
// conformance suite moves messages over such links: TestLinkConformance.)
func TestLinkOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func() []EndpointOption
		tag  string
	}{
		{"checksum", func() []EndpointOption { return []EndpointOption{WithChecksum()} }, "crc32c"},
		{"tls", func() []EndpointOption { return []EndpointOption{jobTLS(t, "tok")} }, "tls"},
		{"tls+checksum", func() []EndpointOption { return []EndpointOption{jobTLS(t, "tok"), WithChecksum()} }, "tls crc32c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			la, lb := connectEndpoints(t, listenOpts(t, 0, tc.opts()...), listenOpts(t, 1, tc.opts()...), 2)
			if !strings.Contains(la.Name(), tc.tag) || !strings.Contains(lb.Name(), tc.tag) {
				t.Errorf("link names %q, %q lack %q", la.Name(), lb.Name(), tc.tag)
			}
		})
	}
}

// TestLinkOptionsMismatch: ranks that disagree on checksums or TLS get an
// error saying so, not a link that misreads frames.
func TestLinkOptionsMismatch(t *testing.T) {
	for name, opts := range map[string][2][]EndpointOption{
		"checksum on the dialer only":   {{WithChecksum()}, nil},
		"checksum on the listener only": {nil, {WithChecksum()}},
		"tls on the dialer only":        {{jobTLS(t, "tok")}, nil},
		"tls on the listener only":      {nil, {jobTLS(t, "tok")}},
	} {
		t.Run(name, func(t *testing.T) {
			ea, eb := listenOpts(t, 0, opts[0]...), listenOpts(t, 1, opts[1]...)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := ea.dial(ctx, 1, eb.Addr(), 2, 0)
			if err == nil || !strings.Contains(err.Error(), "options") {
				t.Fatalf("want a link options error, got %v", err)
			}
			t.Log(err)
		})
	}
}

// TestTLSOtherJob: a TLS peer whose certificate comes from another token is
// refused by both sides.
func TestTLSOtherJob(t *testing.T) {
	ea := listenOpts(t, 0, jobTLS(t, "job A"))
	eb := listenOpts(t, 1, jobTLS(t, "job B"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := ea.dial(ctx, 1, eb.Addr(), 2, 0)
	if !errors.Is(err, auth.ErrAuth) {
		t.Fatalf("want ErrAuth, got %v", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for eb.rejectedCount() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if eb.rejectedCount() == 0 {
		t.Error("the listener did not count the refused TLS connection")
	}
}

// TestFileTLS: certificates signed by a CA from PEM files; a certificate
// from another CA is refused.
func TestFileTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := writeCA(t, dir, "ca")
	writeLeaf(t, dir, "leaf", ca, caKey)
	other, otherKey := writeCA(t, dir, "other-ca")
	writeLeaf(t, dir, "stranger", other, otherKey)
	p := func(n string) string { return filepath.Join(dir, n) }
	s, c, err := FileTLS(p("leaf.crt"), p("leaf.key"), p("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	la, lb := connectEndpoints(t, listenOpts(t, 0, WithTLS(s, c)), listenOpts(t, 1, WithTLS(s, c)), 1)
	sendOne(t, la, lb, 100<<10)

	s2, c2, err := FileTLS(p("stranger.crt"), p("stranger.key"), p("other-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	stranger := listenOpts(t, 0, WithTLS(s2, c2))
	eb := listenOpts(t, 1, WithTLS(s, c))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := stranger.dial(ctx, 1, eb.Addr(), 2, 0); !errors.Is(err, auth.ErrAuth) {
		t.Fatalf("certificate from another CA: want ErrAuth, got %v", err)
	}
	if _, _, err := FileTLS(p("leaf.crt"), p("leaf.key"), p("leaf.key")); err == nil {
		t.Error("a CA file without certificates was accepted")
	}
}

func writeCA(t *testing.T, dir, name string) (*x509.Certificate, ed25519.PrivateKey) {
	t.Helper()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+".crt"), "CERTIFICATE", der)
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}

func writeLeaf(t *testing.T, dir, name string, ca *x509.Certificate, caKey ed25519.PrivateKey) {
	t.Helper()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, pub, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+".crt"), "CERTIFICATE", der)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+".key"), "PRIVATE KEY", kder)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// corruptingProxy forwards connections to target; on the first one it
// accepts (connection 0 of a link: dialer-to-listener data) it flips the
// byte at offset flipAt of the dialer-to-listener stream.
func corruptingProxy(t *testing.T, target string, flipAt int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for first := true; ; first = false {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				return
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			flip := -1
			if first {
				flip = flipAt
			}
			wg.Add(2)
			go func() { defer wg.Done(); copyFlip(out, in, flip); out.Close() }()
			go func() { defer wg.Done(); io.Copy(in, out); in.Close() }()
		}
	}()
	return ln.Addr().String()
}

func copyFlip(dst io.Writer, src io.Reader, flipAt int) {
	buf := make([]byte, 32<<10)
	off := 0
	for {
		n, err := src.Read(buf)
		if flipAt >= off && flipAt < off+n {
			buf[flipAt-off] ^= 0x40
		}
		off += n
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestChecksumDetectsCorruption flips one payload byte in transit: without
// checksums the receiver gets the damaged data (the flip happens), with
// them the receive fails with ErrCorrupt naming the peer, and so does a
// reducing receive.
func TestChecksumDetectsCorruption(t *testing.T) {
	const handshake = helloSize + proofSize // dialer-to-listener bytes before the first frame
	for _, tc := range []struct {
		name     string
		checksum bool
		reduce   bool
	}{{"plain", false, false}, {"checksum", true, false}, {"checksum reduce", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []EndpointOption
			if tc.checksum {
				opts = append(opts, WithChecksum())
			}
			ea, eb := listenOpts(t, 0, opts...), listenOpts(t, 1, opts...)
			proxy := corruptingProxy(t, eb.Addr(), handshake+transport.HeaderSize+300<<10)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var lb transport.Link
			var errB error
			done := make(chan struct{})
			go func() { defer close(done); lb, errB = eb.Connect(ctx, 0, ea.Addr(), 1) }()
			la, errA := ea.Connect(ctx, 1, proxy, 1)
			<-done
			if errA != nil || errB != nil {
				t.Fatalf("connect: %v / %v", errA, errB)
			}
			defer la.Close()
			defer lb.Close()
			const n = 1 << 20
			src := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8}, n/8)
			h := hdr(1, n)
			sendErr := make(chan error, 1)
			go func() { sendErr <- la.Send(ctx, &h, src) }()
			dst := make([]byte, n)
			var reduce transport.ReduceFunc
			if tc.reduce {
				reduce = func(d, s []byte) { copy(d, s) }
			}
			rh := h // Recv writes the arrival into its header; Send reads h meanwhile
			err := lb.Recv(ctx, &rh, dst, reduce)
			<-sendErr
			if !tc.checksum {
				if err != nil {
					t.Fatalf("plain link: %v", err)
				}
				if bytes.Equal(dst, src) {
					t.Fatal("the proxy did not corrupt the message")
				}
				return
			}
			var pe *transport.PeerError
			if !errors.Is(err, transport.ErrCorrupt) || !errors.As(err, &pe) || pe.Peer != 0 {
				t.Fatalf("want ErrCorrupt from peer 0, got %v", err)
			}
			if !strings.Contains(err.Error(), "peer 0") {
				t.Errorf("error does not name the peer: %v", err)
			}
			t.Log(err)
		})
	}
}
