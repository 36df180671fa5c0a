package roce

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"
)

// tcpConns connects two TCP sockets over loopback.
func tcpConns(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	if a, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if b = <-acc; b == nil {
		t.Fatal("accept failed")
	}
	return a, b
}

// upgradePair upgrades both ends of a TCP connection at once.
func upgradePair(t *testing.T, da, db *Domain) (a, b net.Conn, fallback [2]bool) {
	t.Helper()
	ca, cb := tcpConns(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		c   net.Conn
		fb  bool
		err error
	}
	done := make(chan res, 1)
	go func() {
		c, fb, err := Upgrade(ctx, cb, 1, db, Options{})
		done <- res{c, fb, err}
	}()
	a, fb, err := Upgrade(ctx, ca, 0, da, Options{})
	r := <-done
	if err != nil || r.err != nil {
		t.Fatalf("Upgrade: %v / %v", err, r.err)
	}
	return a, r.c, [2]bool{fb, r.fb}
}

// TestStream: bytes written in pieces of any size come out in order, read
// in pieces of any size, both ways at once; deadlines end a waiting Read
// and can be extended while it waits; the peer's Close reads as io.EOF.
func TestStream(t *testing.T) {
	a, b, fb := upgradePair(t, NewDomain(device(t)), NewDomain(device(t)))
	defer a.Close()
	if fb[0] || fb[1] {
		t.Fatalf("fallback %v with devices on both ends", fb)
	}
	if _, ok := a.(*Stream); !ok {
		t.Fatalf("Upgrade returned %T", a)
	}
	const total = 3<<20 + 12345
	data := [2][]byte{make([]byte, total), make([]byte, total)}
	for i := range data {
		for j := range data[i] {
			data[i][j] = byte(j*13 + i + j>>11)
		}
	}
	errc := make(chan error, 4)
	write := func(c net.Conn, src []byte, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 1))
		for off := 0; off < len(src); {
			n := min(len(src)-off, []int{1, 7, 64, 4096, StreamMessage - 1, StreamMessage + 3, 1 << 20}[r.IntN(7)])
			if _, err := c.Write(src[off : off+n]); err != nil {
				errc <- err
				return
			}
			off += n
		}
		errc <- nil
	}
	read := func(c net.Conn, want []byte, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 2))
		got := make([]byte, len(want))
		for off := 0; off < len(got); {
			n := min(len(got)-off, []int{1, 32, 5000, StreamMessage, 1 << 20}[r.IntN(5)])
			if _, err := io.ReadFull(c, got[off:off+n]); err != nil {
				errc <- err
				return
			}
			off += n
		}
		if !bytes.Equal(got, want) {
			errc <- errors.New("the bytes read differ from those written")
			return
		}
		errc <- nil
	}
	go write(a, data[0], 1)
	go write(b, data[1], 2)
	go read(b, data[0], 3)
	go read(a, data[1], 4)
	for range 4 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}

	// Writev: a frame header and its payload in one message (or two, when
	// they do not fit a slot), read back in the same pieces.
	for _, m := range []int{1, StreamMessage, streamSlot - hdrRoom - 8, streamSlot} {
		fh := []byte{1, 2, 3, 4, 5, 6, 7, byte(m)}
		payload := data[0][:m]
		sentBefore := a.(*Stream).Link().sentMsgs
		go func() {
			_, err := a.(*Stream).Writev(fh, payload)
			errc <- err
		}()
		got := make([]byte, 8+m)
		if _, err := io.ReadFull(b, got[:8]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(b, got[8:]); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:8], fh) || !bytes.Equal(got[8:], payload) {
			t.Fatalf("Writev of 8+%d bytes read back wrong", m)
		}
		msgs := a.(*Stream).Link().sentMsgs - sentBefore
		want := uint64(1)
		if 8+m > streamSlot-hdrRoom {
			want = 1 + uint64((m+StreamMessage-1)/StreamMessage) // the header, then the payload as Write cuts it
		}
		if msgs != want {
			t.Fatalf("Writev of 8+%d bytes took %d messages, want %d", m, msgs, want)
		}
	}

	// A deadline ends a Read with nothing to read; the stream goes on.
	var one [1]byte
	b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := b.Read(one[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline: %v", err)
	}
	// A Read waiting under a near deadline that is lifted meanwhile
	// goes on until the data comes, after the first deadline (490 ms
	// of slack for the lifting goroutine on a loaded machine).
	b.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	go func() {
		time.Sleep(10 * time.Millisecond)
		b.SetReadDeadline(time.Time{})
		time.Sleep(700 * time.Millisecond)
		a.Write([]byte{42})
	}()
	if _, err := io.ReadFull(b, one[:]); err != nil || one[0] != 42 {
		t.Fatalf("Read whose deadline was lifted: %v, %d", err, one[0])
	}
	// The peer's Close: EOF.
	a.Close()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := b.Read(one[:]); err != io.EOF {
		t.Fatalf("Read after the peer closed: %v, want io.EOF", err)
	}
	b.Close()
	// After Close: net.ErrClosed, not a deadline.
	if _, err := b.Read(one[:]); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := b.Write(one[:]); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v, want net.ErrClosed", err)
	}
}

// TestStreamCloseWhileReading: a Read waiting when its own stream closes
// returns net.ErrClosed.
func TestStreamCloseWhileReading(t *testing.T) {
	a, b, _ := upgradePair(t, NewDomain(device(t)), NewDomain(device(t)))
	defer a.Close()
	errc := make(chan error, 1)
	go func() {
		var one [1]byte
		_, err := b.Read(one[:])
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	b.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read when its stream closed: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read still waiting 5 s after Close")
	}
}

// TestUpgradeFallback: without a device on one end both ends keep the TCP
// connection, which still works.
func TestUpgradeFallback(t *testing.T) {
	a, b, fb := upgradePair(t, NewDomain(device(t)), nil)
	defer a.Close()
	defer b.Close()
	if !fb[0] || !fb[1] {
		t.Fatalf("fallback %v with one device", fb)
	}
	if _, ok := a.(*net.TCPConn); !ok {
		t.Fatalf("fallback returned %T", a)
	}
	go a.Write([]byte("ok"))
	var got [2]byte
	if _, err := io.ReadFull(b, got[:]); err != nil || string(got[:]) != "ok" {
		t.Fatalf("over the kept connection: %v %q", err, got)
	}
}
