package rendezvous

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// feedConn is a client connection as C10dServer.serve sees it: its bytes
// come from a buffer, its answers go to another.
type feedConn struct {
	r *bytes.Reader
	w bytes.Buffer
}

func (c *feedConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *feedConn) Write(b []byte) (int, error)      { return c.w.Write(b) }
func (c *feedConn) Close() error                     { return nil }
func (c *feedConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *feedConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *feedConn) SetDeadline(time.Time) error      { return nil }
func (c *feedConn) SetReadDeadline(time.Time) error  { return nil }
func (c *feedConn) SetWriteDeadline(time.Time) error { return nil }

// c10dFeed serves one connection that sends in and returns what the server
// answered. The server is already closing, so a GET or WAIT of a missing
// key ends the connection instead of waiting for another client.
func c10dFeed(s *C10dServer, in []byte) []byte {
	c := &feedConn{r: bytes.NewReader(in)}
	s.serve(c)
	return c.w.Bytes()
}

func closingC10dServer() *C10dServer {
	s := &C10dServer{m: map[string][]byte{}, changed: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.cancel()
	return s
}

// c10dSession encodes, as C10dStore does, a client's queries about key:
// SET, CHECK, GET, ADD of delta to key+"#n", GETNUMKEYS, DELETE_KEY,
// CHECK; v2 numbers them as PyTorch 2.x, after VALIDATE.
func c10dSession(key string, value []byte, delta int64, v2 bool) []byte {
	var b []byte
	q := func(n byte) {
		if v2 {
			n++
		}
		b = append(b, n)
	}
	if v2 {
		b = binary.LittleEndian.AppendUint32([]byte{c10dV2Validate}, c10dValidateMagic)
	}
	check := func() {
		q(c10dCheck)
		b = binary.LittleEndian.AppendUint64(b, 1)
		b = appendC10dString(b, key)
	}
	q(c10dSet)
	b = appendC10dBytes(appendC10dString(b, key), value)
	check()
	q(c10dGet)
	b = appendC10dString(b, key)
	q(c10dAdd)
	b = binary.LittleEndian.AppendUint64(appendC10dString(b, key+"#n"), uint64(delta))
	q(c10dGetNumKeys)
	q(c10dDeleteKey)
	b = appendC10dString(b, key)
	check()
	return b
}

// FuzzC10dServer feeds byte streams to the c10d server's query decoding:
// no panic and no hang; a stream whose first byte is no query (in either
// numbering) is refused before anything is stored or answered.
func FuzzC10dServer(f *testing.F) {
	f.Add(c10dSession("k", []byte("v"), 3, false))
	f.Add(c10dSession("/torch/rank0", []byte("10.0.0.1:29500"), -1, true))
	f.Add(append(binary.LittleEndian.AppendUint32([]byte{c10dV2Validate}, c10dValidateMagic), c10dV2Ping, 1, 2, 3, 4))
	f.Add([]byte{c10dGet, 1, 0, 0, 0, 0, 0, 0, 0, 'x'})                    // a missing key
	f.Add([]byte{c10dSet, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) // a vector of 2^64-1 bytes
	f.Add([]byte{c10dWait, 0, 0, 0, 0, 0, 1, 0, 0})                        // 2^40 keys
	f.Add([]byte{7})
	f.Add([]byte{200})
	f.Fuzz(func(t *testing.T, in []byte) {
		s := closingC10dServer()
		out := c10dFeed(s, in)
		if len(in) == 0 {
			return
		}
		switch in[0] {
		case c10dSet, c10dCompareSet, c10dGet, c10dAdd, c10dCheck, c10dWait, c10dGetNumKeys, c10dDeleteKey:
		default:
			if len(out) != 0 || len(s.m) != 0 {
				t.Fatalf("query %d: answered %x, stored %d keys", in[0], out, len(s.m))
			}
		}
	})
}

// FuzzC10dQueries encodes a client's queries about a fuzzed key, value and
// delta as C10dStore does, in both numberings, and checks the server
// decoded each: every answer is the one the query asks for.
func FuzzC10dQueries(f *testing.F) {
	f.Add("k", []byte("v"), int64(1), false)
	f.Add("/torch/store/rank_0", []byte{}, int64(-1<<63), true)
	f.Add("", []byte("\x00\xff"), int64(1<<62), false)
	f.Fuzz(func(t *testing.T, key string, value []byte, delta int64, v2 bool) {
		s := closingC10dServer()
		br := bufio.NewReader(bytes.NewReader(c10dFeed(s, c10dSession(key, value, delta, v2))))
		i64 := func() int64 {
			var b [8]byte
			if _, err := io.ReadFull(br, b[:]); err != nil {
				t.Fatalf("key %q: %v", key, err)
			}
			return int64(binary.LittleEndian.Uint64(b[:]))
		}
		if st, err := readStatus(br, c10dReady, "check after set"); err != nil {
			t.Fatalf("key %q: %v (%d)", key, err, st)
		}
		if v, err := readC10dVector(br); err != nil || !bytes.Equal(v, value) {
			t.Fatalf("key %q: get %q, %v; set %q", key, v, err, value)
		}
		if n := i64(); n != delta {
			t.Fatalf("key %q: add %d gave %d", key, delta, n)
		}
		if got := string(s.m[key+"#n"]); got != strconv.FormatInt(delta, 10) {
			t.Fatalf("key %q: counter holds %q after adding %d", key, got, delta)
		}
		if n := i64(); n != 2 {
			t.Fatalf("key %q: %d keys, want 2", key, n)
		}
		if n := i64(); n != 1 {
			t.Fatalf("key %q: delete answered %d, want 1", key, n)
		}
		if st, err := readStatus(br, 1, "check after delete"); err != nil {
			t.Fatalf("key %q: %v (%d)", key, err, st)
		}
		if rest, _ := io.ReadAll(br); len(rest) != 0 {
			t.Fatalf("key %q: %d bytes more than the queries asked for", key, len(rest))
		}
	})
}

// TestC10dServerShortVector: a query announcing a vector of 512 MiB and
// sending 3 bytes costs the server memory for what arrived, not for what
// was announced.
func TestC10dServerShortVector(t *testing.T) {
	in := binary.LittleEndian.AppendUint64([]byte{c10dSet}, 512<<20)
	in = append(in, "abc"...)
	s := closingC10dServer()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c10dFeed(s, in)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("a 12-byte query made the server allocate %d bytes", got)
	}
	if len(s.m) != 0 {
		t.Fatalf("a cut query stored %d keys", len(s.m))
	}
}
