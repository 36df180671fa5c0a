package rendezvous

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
)

// fakeC10dV2 is a stand-in for a PyTorch 2.x TCPStore server, written from
// a reading of its protocol (no 2.x server is at hand here): a connection
// must start with VALIDATE and the magic number; queries are numbered
// VALIDATE=0, SET=1, GET=3, ADD=4, CHECK=5, WAIT=6, GETNUMKEYS=7, PING=13;
// a GET of a missing key or an ADD to a non-integer closes the connection.
type fakeC10dV2 struct {
	ln      net.Listener
	mu      sync.Mutex
	m       map[string][]byte
	changed chan struct{} // closed and replaced on every change
	done    chan struct{}
}

func startFakeC10dV2(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeC10dV2{ln: ln, m: map[string][]byte{}, changed: make(chan struct{}), done: make(chan struct{})}
	var conns sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { f.serve(c) })
		}
	}()
	t.Cleanup(func() { close(f.done); ln.Close(); conns.Wait() })
	return ln.Addr().String()
}

func (f *fakeC10dV2) serve(c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(doneCtx(f.done), func() { c.Close() })
	defer stop()
	br := bufio.NewReader(c)
	var rerr error // the first read error; reads after it return zeros
	u64 := func() uint64 {
		var b [8]byte
		if rerr == nil {
			_, rerr = io.ReadFull(br, b[:])
		}
		return binary.LittleEndian.Uint64(b[:])
	}
	str := func() string {
		n := u64()
		if rerr != nil || n > 1<<30 {
			rerr = io.ErrUnexpectedEOF
			return ""
		}
		b := make([]byte, n)
		_, rerr = io.ReadFull(br, b)
		return string(b)
	}
	u32 := func() []byte {
		b := make([]byte, 4)
		if rerr == nil {
			_, rerr = io.ReadFull(br, b)
		}
		return b
	}
	// change records a change and wakes the waits; f.mu is held.
	change := func() {
		close(f.changed)
		f.changed = make(chan struct{})
	}
	// have reports whether every key exists, and a channel closed at the
	// next change.
	have := func(keys []string) (bool, chan struct{}) {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, k := range keys {
			if _, ok := f.m[k]; !ok {
				return false, f.changed
			}
		}
		return true, f.changed
	}
	if q, err := br.ReadByte(); err != nil || q != 0 || binary.LittleEndian.Uint32(u32()) != c10dValidateMagic || rerr != nil {
		return // a connection must start with VALIDATE
	}
	for {
		q, err := br.ReadByte()
		if err != nil {
			return
		}
		var reply []byte
		switch q {
		case 1: // SET
			k, v := str(), str()
			if rerr != nil {
				return
			}
			f.mu.Lock()
			f.m[k] = []byte(v)
			change()
			f.mu.Unlock()
		case 3: // GET
			k := str()
			f.mu.Lock()
			v, ok := f.m[k]
			f.mu.Unlock()
			if rerr != nil || !ok {
				return
			}
			reply = append(binary.LittleEndian.AppendUint64(nil, uint64(len(v))), v...)
		case 4: // ADD
			k, d := str(), int64(u64())
			if rerr != nil {
				return
			}
			f.mu.Lock()
			old, ok := f.m[k]
			n, err := strconv.ParseInt(string(old), 10, 64)
			if ok && err != nil {
				f.mu.Unlock()
				return
			}
			d += n
			f.m[k] = strconv.AppendInt(nil, d, 10)
			change()
			f.mu.Unlock()
			reply = binary.LittleEndian.AppendUint64(nil, uint64(d))
		case 5, 6: // CHECK, WAIT
			keys := make([]string, min(u64(), 1<<16))
			for i := range keys {
				keys[i] = str()
			}
			if rerr != nil {
				return
			}
			for {
				ok, ch := have(keys)
				if ok || q == 5 {
					reply = []byte{0}
					if !ok {
						reply[0] = 1
					}
					break
				}
				select {
				case <-ch:
				case <-f.done:
					return
				}
			}
		case 7: // GETNUMKEYS
			f.mu.Lock()
			reply = binary.LittleEndian.AppendUint64(nil, uint64(len(f.m)))
			f.mu.Unlock()
		case 13: // PING
			reply = u32()
			if rerr != nil {
				return
			}
		default:
			return
		}
		if _, err := c.Write(reply); err != nil {
			return
		}
	}
}

func doneCtx(done chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-done; cancel() }()
	return ctx
}

// TestC10dStoreFakeV2 runs the conformance suite against fakeC10dV2: it
// checks the 2.x handshake and numbering as understood from PyTorch's
// source, not against a real 2.x server.
func TestC10dStoreFakeV2(t *testing.T) {
	addr := startFakeC10dV2(t)
	n := 0
	runConformance(t, func(t *testing.T) opener {
		n++
		prefix := "t" + strconv.Itoa(n) + "/"
		return func(t *testing.T) Store {
			s, err := DialC10d(testCtx(t), addr, prefix)
			if err != nil {
				t.Fatal(err)
			}
			if s.version != c10dVersion2 {
				t.Fatalf("version %d, want 2", s.version)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	})
}
