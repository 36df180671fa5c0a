package rdma

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"reflect"
	"testing"
	"time"
)

// lineConn is a connection whose peer sent in; what is written to it is
// kept.
type lineConn struct {
	r *bytes.Reader
	w bytes.Buffer
}

func (c *lineConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *lineConn) Write(b []byte) (int, error)      { return c.w.Write(b) }
func (c *lineConn) Close() error                     { return nil }
func (c *lineConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *lineConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *lineConn) SetDeadline(time.Time) error      { return nil }
func (c *lineConn) SetReadDeadline(time.Time) error  { return nil }
func (c *lineConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzExchangeConnInfo feeds a peer's line to ExchangeConnInfo: no panic;
// it reads no further than the first newline; an accepted description
// survives encoding and decoding again unchanged, and the line this side
// sent decodes to its own description.
func FuzzExchangeConnInfo(f *testing.F) {
	local := ConnInfo{QPN: 17, PSN: 0xabcdef, GID: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}, Port: 4791, MTU: 4096,
		RKey: 5, Addr: 0x7f0000001000, Len: 1 << 20}
	for _, ci := range []ConnInfo{local, {QPN: 1, PSN: 2, Port: 4791}} {
		b, _ := json.Marshal(ci)
		f.Add(append(b, '\n'))
	}
	f.Add([]byte(`{"qpn":-1}` + "\n"))
	f.Add([]byte(`{"gid":[1,2,3]}` + "\n" + "trailing"))
	f.Add(bytes.Repeat([]byte("x"), 5000))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &lineConn{r: bytes.NewReader(in)}
		remote, err := ExchangeConnInfo(context.Background(), c, local)
		var mine ConnInfo
		if jerr := json.Unmarshal(bytes.TrimSuffix(c.w.Bytes(), []byte("\n")), &mine); jerr != nil || mine != local {
			t.Fatalf("sent %q: %+v, %v", c.w.Bytes(), mine, jerr)
		}
		if nl := bytes.IndexByte(in, '\n'); nl >= 0 && nl < 4096 && c.r.Len() != len(in)-nl-1 {
			t.Fatalf("read %d bytes past the newline", len(in)-nl-1-c.r.Len())
		}
		if err != nil {
			return
		}
		b, err := json.Marshal(remote)
		if err != nil {
			t.Fatal(err)
		}
		var back ConnInfo
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, remote) {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", remote, back, err)
		}
	})
}
