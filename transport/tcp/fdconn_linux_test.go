package tcp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fdPair returns two connected fdConns over loopback.
func fdPair(t *testing.T) (a, b *fdConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan *net.TCPConn, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			acc <- nil
			return
		}
		acc <- c
	}()
	c1, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	c2 := <-acc
	if c2 == nil {
		t.Fatal("accept failed")
	}
	s1, ok1 := newTCPStream(c1).(*fdConn)
	s2, ok2 := newTCPStream(c2).(*fdConn)
	if !ok1 || !ok2 {
		t.Fatal("newStream did not give an fdConn on Linux")
	}
	t.Cleanup(func() { s1.Close(); s2.Close() })
	return s1, s2
}

func TestFDConnReadWrite(t *testing.T) {
	a, b := fdPair(t)
	// More than the socket buffers hold, so that writes block and resume.
	msg := bytes.Repeat([]byte("goccl fdConn "), 3<<20)
	hdr := []byte("header:")
	errc := make(chan error, 1)
	go func() {
		_, err := a.writev2(hdr, msg)
		errc <- err
	}()
	got := make([]byte, len(hdr)+len(msg))
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:len(hdr)], hdr) || !bytes.Equal(got[len(hdr):], msg) {
		t.Fatal("bytes differ")
	}
	if _, err := a.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	a.Close()
	one := make([]byte, 2)
	if n, err := b.Read(one); n != 1 || err != nil {
		t.Fatalf("read before EOF: %d %v", n, err)
	}
	if _, err := b.Read(one); err != io.EOF {
		t.Fatalf("read after the peer closed: want EOF, got %v", err)
	}
}

func TestFDConnDeadline(t *testing.T) {
	_, b := fdPair(t)
	b.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	start := time.Now()
	_, err := b.Read(make([]byte, 8))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("want ErrDeadlineExceeded, got %v", err)
	}
	if d := time.Since(start); d < 30*time.Millisecond || d > time.Second {
		t.Fatalf("deadline of 30 ms fired after %v", d)
	}
	// A deadline moved into the past while a read sleeps (a cancelled
	// context) ends it within a poll slice.
	b.SetReadDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, err := b.Read(make([]byte, 8))
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	b.SetReadDeadline(aLongTimeAgo)
	select {
	case err := <-errc:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("want ErrDeadlineExceeded, got %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("a deadline moved into the past did not end the read")
	}
}

// Close wakes a blocked read at once, later calls fail with net.ErrClosed,
// and the descriptor is closed.
func TestFDConnClose(t *testing.T) {
	// Slices far longer than the wait below: only the shutdown can wake
	// the read in time (a bound on the wake-up itself would fail on a
	// loaded machine, not on a missing shutdown).
	_, b := fdPair(t)
	b.slice = time.Minute
	fd := b.fd
	errc := make(chan error, 1)
	go func() {
		_, err := b.Read(make([]byte, 8))
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond) // past the spin, asleep in poll(2)
	b.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("blocked read after Close: want net.ErrClosed, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wake a read asleep in poll(2)")
	}
	if _, err := b.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close: want net.ErrClosed, got %v", err)
	}
	b.Close() // idempotent
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
		t.Fatalf("descriptor %d still open after Close (fcntl: %v)", fd, err)
	}
}
