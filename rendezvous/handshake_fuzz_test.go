package rendezvous

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/auth"
)

// memConn is a net.Conn that reads from r and records what is written, with
// no I/O and no goroutines, so that the handshakes can run on fuzz input
// without deadlines.
type memConn struct {
	r io.Reader
	w bytes.Buffer
}

func (c *memConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *memConn) Write(p []byte) (int, error)      { return c.w.Write(p) }
func (c *memConn) Close() error                     { return nil }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }
func newMemConn(in []byte) (*memConn, *bufio.Reader) {
	c := &memConn{r: bytes.NewReader(in)}
	return c, bufio.NewReader(c)
}

var fuzzToken = []byte("fuzz job token")

func fuzzTokenIf(with bool) []byte {
	if with {
		return fuzzToken
	}
	return nil
}

// clientHello is the hello clientHandshake sends with options o, its nonce
// zeroed so that seeds are reproducible.
func clientHello(t testing.TB, o options) []byte {
	c, br := newMemConn(nil)
	clientHandshake(c, br, "seed", &o) // fails reading the challenge
	hello := c.w.Bytes()
	if len(hello) != storeHelloSize {
		t.Fatalf("client wrote %d bytes, want a %d-byte hello", len(hello), storeHelloSize)
	}
	clear(hello[16:32])
	return hello
}

// serverChallenge is the challenge serverHandshake answers hello with.
func serverChallenge(t testing.TB, hello []byte, token []byte) []byte {
	c, br := newMemConn(hello)
	serverHandshake(c, br, &options{token: token}) // fails reading the proof
	ch := c.w.Bytes()
	if len(ch) != storeChallengeSize {
		t.Fatalf("server wrote %d bytes, want a %d-byte challenge", len(ch), storeChallengeSize)
	}
	return ch
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// FuzzStoreHello feeds arbitrary bytes to the server side of the store
// handshake as what a client sends (hello, then proof): decodeHello and
// serverHandshake must never panic, must accept exactly the well-formed
// hellos, must not answer a malformed one, must answer a well-formed one
// with a challenge an honest client accepts, and, with a job token set,
// must never accept a connection (the fuzzer cannot prove a fresh nonce).
func FuzzStoreHello(f *testing.F) {
	for _, s := range storeHelloSeeds(f) {
		f.Add(s.in, s.withToken)
	}
	f.Fuzz(func(t *testing.T, in []byte, withToken bool) {
		token := fuzzTokenIf(withToken)
		rank, herr := decodeHello(in)
		wellFormed := len(in) >= storeHelloSize &&
			string(in[0:8]) == helloMagicStore &&
			binary.BigEndian.Uint16(in[8:]) == storeProtoVersion &&
			int32(binary.BigEndian.Uint32(in[12:])) >= -1
		if wellFormed != (herr == nil) {
			t.Fatalf("decodeHello(%x) = %d, %v; well-formed: %v", in, rank, herr, wellFormed)
		}
		if herr != nil && rank != -1 {
			t.Fatalf("decodeHello failed (%v) but gave rank %d", herr, rank)
		}
		if herr == nil && rank != int(int32(binary.BigEndian.Uint32(in[12:]))) {
			t.Fatalf("decodeHello gave rank %d, hello says %d", rank, int32(binary.BigEndian.Uint32(in[12:])))
		}

		c, br := newMemConn(in)
		got, err := serverHandshake(c, br, &options{token: token})
		answer := c.w.Bytes()
		if err != nil && got != -1 {
			t.Fatalf("serverHandshake failed (%v) but gave rank %d", err, got)
		}
		if herr != nil {
			if err == nil {
				t.Fatalf("serverHandshake accepted a hello decodeHello refuses (%v)", herr)
			}
			if len(answer) != 0 {
				t.Fatalf("the server answered a malformed hello with %d bytes", len(answer))
			}
			return
		}
		if len(answer) != storeChallengeSize {
			t.Fatalf("the server answered a well-formed hello with %d bytes, want %d", len(answer), storeChallengeSize)
		}
		if cerr := decodeChallenge(answer, in[:storeHelloSize], "server", token); cerr != nil {
			t.Fatalf("a client with the same token refuses the server's challenge: %v", cerr)
		}
		hasProof := len(in) >= storeHelloSize+storeProofSize
		switch {
		case withToken && err == nil:
			t.Fatalf("serverHandshake with a token accepted fuzz input %x (rank %d)", in, got)
		case withToken && hasProof && !errors.Is(err, ErrAuth):
			t.Fatalf("a wrong proof gave %v, want ErrAuth", err)
		case !withToken && hasProof && err != nil:
			t.Fatalf("serverHandshake without a token refused a well-formed hello and proof: %v", err)
		case !hasProof && err == nil:
			t.Fatalf("serverHandshake accepted a connection without a proof")
		case err == nil && got != rank:
			t.Fatalf("serverHandshake gave rank %d, the hello says %d", got, rank)
		}
	})
}

// FuzzStoreChallenge feeds arbitrary bytes to the client side of the store
// handshake as the server's answer: decodeChallenge must never panic and
// must accept exactly the challenges with the right magic, version and token
// flag and (with a token) the right server proof for the hello; the full
// clientHandshake must never panic, must never accept with a token set (the
// hello's nonce is fresh), and without a token must accept exactly the
// well-formed challenges and then send a zero proof.
func FuzzStoreChallenge(f *testing.F) {
	hello := storeChallengeHello(f)
	for _, s := range storeChallengeSeeds(f) {
		f.Add(s.in, s.withToken)
	}
	f.Fuzz(func(t *testing.T, in []byte, withToken bool) {
		token := fuzzTokenIf(withToken)
		err := decodeChallenge(in, hello, "fuzz", token)
		framed := len(in) >= storeChallengeSize &&
			string(in[0:8]) == challengeMagicStore &&
			binary.BigEndian.Uint16(in[8:]) == storeProtoVersion
		tokenAgrees := framed && (binary.BigEndian.Uint16(in[10:])&flagHasToken != 0) == withToken
		proved := tokenAgrees
		if withToken && tokenAgrees {
			want := auth.MAC(token, labelStoreServer, hello, in[0:32])
			proved = hmac.Equal(in[32:64], want[:])
		}
		if proved != (err == nil) {
			t.Fatalf("decodeChallenge(%x, token %v) = %v; framed %v, token flag agrees %v, proved %v", in, withToken, err, framed, tokenAgrees, proved)
		}
		if framed && !proved && !errors.Is(err, ErrAuth) {
			t.Fatalf("a token refusal gave %v, want ErrAuth", err)
		}

		// The whole client side, with a fresh nonce in its hello.
		c, br := newMemConn(in)
		_, err = clientHandshake(c, br, "fuzz", &options{token: token, rank: 7})
		out := c.w.Bytes()
		if len(out) < storeHelloSize {
			t.Fatalf("the client wrote %d bytes, want a %d-byte hello first", len(out), storeHelloSize)
		}
		if r, herr := decodeHello(out[:storeHelloSize]); herr != nil || r != 7 {
			t.Fatalf("the server side reads the client's hello as rank %d, %v", r, herr)
		}
		if flags := binary.BigEndian.Uint16(out[10:]); flags != hasTokenFlag(token) {
			t.Fatalf("the client's hello has flags %#x with token %v", flags, withToken)
		}
		switch {
		case withToken && err == nil:
			t.Fatalf("clientHandshake with a token accepted fuzz input %x", in)
		case !withToken && tokenAgrees && err != nil:
			t.Fatalf("clientHandshake without a token refused a well-formed challenge: %v", err)
		case !tokenAgrees && err == nil:
			t.Fatalf("clientHandshake accepted %x", in)
		case len(in) < storeChallengeSize && !errors.Is(err, ErrAuth):
			t.Fatalf("a server that hung up gave %v, want ErrAuth", err)
		}
		if err == nil {
			if !bytes.Equal(out[storeHelloSize:], make([]byte, storeProofSize)) {
				t.Fatalf("the client without a token sent proof %x, want zeros", out[storeHelloSize:])
			}
		} else if len(out) != storeHelloSize {
			t.Fatalf("the client refused the server (%v) but sent %d bytes after its hello", err, len(out)-storeHelloSize)
		}
	})
}

// handshakeSeed is a named seed of FuzzStoreHello or FuzzStoreChallenge;
// testdata/fuzz holds the same inputs as files, and more that the fuzzer
// found.
type handshakeSeed struct {
	name      string
	in        []byte
	withToken bool
}

func storeHelloSeeds(t testing.TB) []handshakeSeed {
	hello := clientHello(t, options{rank: 5})
	anon := clientHello(t, options{rank: -1})
	withTok := clientHello(t, options{rank: 0, token: fuzzToken})
	zeroProof := make([]byte, storeProofSize)
	badMagic := cat([]byte("GOCCLSTX"), hello[8:])
	badVersion := cat(hello[:8], []byte{0, 2}, hello[10:])
	badRank := cat(hello[:12], []byte{0xff, 0xff, 0xff, 0xfe}, hello[16:]) // -2
	maxRank := cat(hello[:12], []byte{0x7f, 0xff, 0xff, 0xff}, hello[16:])
	return []handshakeSeed{
		{"valid-rank5", cat(hello, zeroProof), false},
		{"valid-no-rank", cat(anon, zeroProof), false},
		{"token-forged-proof", cat(withTok, bytes.Repeat([]byte{0x5a}, storeProofSize)), true},
		{"valid-max-rank-trailing", cat(maxRank, zeroProof, []byte("GET trailing")), false},
		{"no-proof", hello, false},
		{"short-proof", cat(hello, zeroProof[:31]), true},
		{"bad-magic", cat(badMagic, zeroProof), false},
		{"bad-version", cat(badVersion, zeroProof), false},
		{"bad-rank", cat(badRank, zeroProof), false},
		{"http", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), true},
		{"short-hello", hello[:storeHelloSize-1], false},
		{"empty", []byte{}, false},
	}
}

// storeChallengeHello is the hello FuzzStoreChallenge checks challenges
// against (decodeChallenge; clientHandshake makes its own).
func storeChallengeHello(t testing.TB) []byte { return clientHello(t, options{rank: 2}) }

func storeChallengeSeeds(t testing.TB) []handshakeSeed {
	hello := storeChallengeHello(t)
	plain := serverChallenge(t, hello, nil)
	signed := serverChallenge(t, hello, fuzzToken)
	wrongKey := serverChallenge(t, hello, []byte("another job"))
	badProof := cat(signed[:32], bytes.Repeat([]byte{0x5a}, 32))
	badMagic := cat([]byte(helloMagicStore), plain[8:]) // the client's magic
	badVersion := cat(plain[:8], []byte{0x01, 0x00}, plain[10:])
	return []handshakeSeed{
		{"valid-no-token", plain, false},
		{"valid-token", signed, true},
		{"valid-trailing", cat(plain, []byte("trailing request bytes")), false},
		{"server-token-only", signed, false}, // the server wants a token the client lacks
		{"client-token-only", plain, true},   // the client has a token the server does not check
		{"other-job", wrongKey, true},
		{"forged-proof", badProof, true},
		{"bad-magic", badMagic, false}, // not a goccl store
		{"bad-version", badVersion, false},
		{"short", plain[:storeChallengeSize-1], false},
		{"http", []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), false},
		{"empty", []byte{}, true},
	}
}
