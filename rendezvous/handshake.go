package rendezvous

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"time"

	"github.com/goccl/goccl/internal/auth"
	"github.com/goccl/goccl/internal/config"
)

// Handshake of every TCP store connection, before its first request (all
// integers big-endian):
//
//	hello     client -> server, 32 bytes
//	  0 [8]  magic "GOCCLSTH"
//	  8 u16  protocol version (1)
//	 10 u16  flags: bit 0 = the client has a job token
//	 12 i32  the client's rank, or -1
//	 16 [16] client nonce
//	challenge server -> client, 64 bytes
//	  0 [8]  magic "GOCCLSTS"
//	  8 u16  protocol version
//	 10 u16  flags: bit 0 = the server has a job token
//	 12 u32  server instance: random, nonzero, fixed for the server's life
//	 16 [16] server nonce
//	 32 [32] server proof: HMAC-SHA256(token, "goccl store server v1" || hello || challenge[0:32])
//	proof     client -> server, 32 bytes
//	  0 [32] client proof: HMAC-SHA256(token, "goccl store client v1" || hello || challenge[0:32])
//
// Without a token the proofs are zero and nobody checks them. A server with a
// token closes, without a reply, a connection whose hello is malformed or
// whose proof is wrong (a client without the token, or of another job); a
// client with a token refuses a server that does not prove it (package auth).
// The whole handshake must complete within handshakeTimeout on the server.
//
// The server instance tells a client that redials after a lost connection
// whether it reached the same server: a store served again at the same
// address (rank 0 of a later Init) is another instance, with none of the
// keys this client's job wrote, and a client that went on there would wait
// for them forever; it fails instead (ErrReplaced).
//
// The rank in the hello lets the server tell the ranks apart: when the
// connection of a rank closes without the goodbye request (opBye) that a
// client sends before every deliberate close, the server takes that rank for
// dead and fails every request it holds, and every later one that would
// wait, with statusLost naming it (RankLostError). Only a connection that
// proved the job token can report a death this way: without a token the
// rank in the hello is a claim anybody who reaches the port can make (a
// forged hello and a reset would otherwise kill the job), so the server logs
// such a close and forgets it; the real rank may still connect, and a rank
// that never does is named by the Init timeout instead. With a token, ranks
// waiting in the store for a rank that died learn it at once. The rank
// serving the store fails too, and would take the store down with it: its
// Close first lingers (TCPServer.Linger) until every client has been
// answered with the loss or has gone, within lingerTimeout, so that no rank
// blames the serving rank for a death it only relayed.
const (
	helloMagicStore     = "GOCCLSTH"
	challengeMagicStore = "GOCCLSTS"
	storeProtoVersion   = 1
	storeHelloSize      = 32
	storeChallengeSize  = 64
	storeProofSize      = auth.MACSize
	flagHasToken        = 1

	labelStoreServer = "goccl store server v1"
	labelStoreClient = "goccl store client v1"
)

// handshakeTimeout bounds the handshake on both sides.
var handshakeTimeout = 5 * time.Second

// ErrAuth is wrapped by the errors of connections refused because the job
// tokens differ (or only one side has one).
var ErrAuth = auth.ErrAuth

// errHungUp is wrapped, beside ErrAuth, by the error of a handshake that
// the server ended by closing the connection: how a server with a token
// refuses a client, but also what a client sees when the server is closed
// during the handshake (DialTCP tries again once).
var errHungUp = errors.New("the server closed the connection")

// RankLostError is returned by store calls that waited for data while the
// connection of Rank to the TCP store, authenticated by the job token, closed
// without a goodbye: that rank's process most likely died.
type RankLostError struct {
	Rank   int
	Reason string
}

func (e *RankLostError) Error() string { return fmt.Sprintf("rank %d lost: %s", e.Rank, e.Reason) }

// Option configures a TCPServer (NewTCPServer), a TCPStore (DialTCP), an
// etcd store (package rendezvous/etcd), Open or Connect.
type Option func(*options)

type options struct {
	token      []byte
	rank       int
	logf       func(format string, args ...any)
	generation uint64        // WithGeneration's (0: none)
	instance   uint32        // a server's instance (TCPServer only)
	leaseTTL   time.Duration // WithLeaseTTL's (0: etcd.DefaultLeaseTTL)
}

func makeOptions(opts []Option) options {
	o := options{rank: -1}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WithToken makes connections prove membership of the job with token (a
// secret common to all ranks, GOCCL_JOB_TOKEN); see the handshake above.
func WithToken(token []byte) Option {
	return func(o *options) { o.token = append([]byte(nil), token...) }
}

// WithRank tells the server which rank a client is, so that it can report
// the rank's death to the others (with WithToken only: see RankLostError).
func WithRank(rank int) Option { return func(o *options) { o.rank = rank } }

// WithGeneration makes Connect tell the successive stores of one job apart
// when they are served at the same address (or address file): rank 0's
// store holds gen from its start, and every other rank uses a store only if
// it holds the same gen (or none: a store served without WithGeneration),
// closing one that holds an earlier gen (the store of a previous rendezvous
// that rank 0 has not closed yet) and trying again, and failing at once on a
// later gen. gen counts the rendezvous of this rank with the job (1, 2, ...;
// every rank makes as many): package goccl's Init passes its count of
// Inits. 0 (the default): no check. A TCPServer made with it holds gen
// from its start.
func WithGeneration(gen uint64) Option { return func(o *options) { o.generation = gen } }

// WithLeaseTTL sets the time-to-live of the lease an etcd store (package
// rendezvous/etcd) grants when it is the first client of its prefix (etcd
// rounds it up to whole seconds, and to its minimum, about 1.5 s with the
// default election timeout): the keys vanish this long after the last
// client is gone. Default etcd.DefaultLeaseTTL.
func WithLeaseTTL(ttl time.Duration) Option { return func(o *options) { o.leaseTTL = ttl } }

// WithLog gives the server a logger for rejected connections (an etcd
// store: for the loss of its lease).
func WithLog(logf func(format string, args ...any)) Option {
	return func(o *options) { o.logf = logf }
}

func hasTokenFlag(token []byte) uint16 {
	if len(token) > 0 {
		return flagHasToken
	}
	return 0
}

// clientHandshake runs the client side on c, whose deadline the caller set,
// and returns the server's instance.
func clientHandshake(c net.Conn, br *bufio.Reader, addr string, o *options) (uint32, error) {
	var hello [storeHelloSize]byte
	copy(hello[0:8], helloMagicStore)
	binary.BigEndian.PutUint16(hello[8:], storeProtoVersion)
	binary.BigEndian.PutUint16(hello[10:], hasTokenFlag(o.token))
	rank := int32(-1)
	if o.rank >= 0 && o.rank <= math.MaxInt32 {
		rank = int32(o.rank)
	}
	binary.BigEndian.PutUint32(hello[12:], uint32(rank))
	nonce := auth.Nonce()
	copy(hello[16:], nonce[:])
	if _, err := c.Write(hello[:]); err != nil {
		return 0, fmt.Errorf("handshake: %w", err)
	}
	var ch [storeChallengeSize]byte
	if _, err := io.ReadFull(br, ch[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, fmt.Errorf("handshake: %w (%w: does rank 0 use another %s?)", errHungUp, ErrAuth, config.JobToken.Name)
		}
		return 0, fmt.Errorf("handshake: %w", err)
	}
	if err := decodeChallenge(ch[:], hello[:], addr, o.token); err != nil {
		return 0, err
	}
	proof := auth.MAC(o.token, labelStoreClient, hello[:], ch[0:32])
	if _, err := c.Write(proof[:]); err != nil {
		return 0, fmt.Errorf("handshake: %w", err)
	}
	return binary.BigEndian.Uint32(ch[12:]), nil
}

// serverHandshake runs the server side on c and returns the client's rank
// (-1 when it gave none).
func serverHandshake(c net.Conn, br *bufio.Reader, o *options) (int, error) {
	var hello [storeHelloSize]byte
	if _, err := io.ReadFull(br, hello[:]); err != nil {
		return -1, fmt.Errorf("reading the hello: %w", err)
	}
	rank, err := decodeHello(hello[:])
	if err != nil {
		return -1, err
	}
	var ch [storeChallengeSize]byte
	copy(ch[0:8], challengeMagicStore)
	binary.BigEndian.PutUint16(ch[8:], storeProtoVersion)
	binary.BigEndian.PutUint16(ch[10:], hasTokenFlag(o.token))
	binary.BigEndian.PutUint32(ch[12:], o.instance)
	nonce := auth.Nonce()
	copy(ch[16:32], nonce[:])
	mac := auth.MAC(o.token, labelStoreServer, hello[:], ch[0:32])
	copy(ch[32:], mac[:])
	if _, err := c.Write(ch[:]); err != nil {
		return -1, fmt.Errorf("writing the challenge: %w", err)
	}
	var proof [storeProofSize]byte
	if _, err := io.ReadFull(br, proof[:]); err != nil {
		return -1, fmt.Errorf("reading the proof: %w", err)
	}
	if !auth.Check(o.token, proof[:], labelStoreClient, hello[:], ch[0:32]) {
		return -1, fmt.Errorf("%w (client says rank %d)", ErrAuth, rank)
	}
	return rank, nil
}

// decodeHello checks a client's hello (server side) and returns the rank it
// gives (-1 when it gives none). It does no I/O; the flags and the nonce are
// not checked here (the nonce only enters the MACs).
func decodeHello(hello []byte) (int, error) {
	if len(hello) < storeHelloSize {
		return -1, fmt.Errorf("short hello (%d bytes, want %d)", len(hello), storeHelloSize)
	}
	if string(hello[0:8]) != helloMagicStore {
		return -1, errors.New("bad hello magic (not a goccl store client)")
	}
	if v := binary.BigEndian.Uint16(hello[8:]); v != storeProtoVersion {
		return -1, fmt.Errorf("protocol version %d, want %d", v, storeProtoVersion)
	}
	rank := int(int32(binary.BigEndian.Uint32(hello[12:])))
	if rank < -1 {
		return -1, fmt.Errorf("bad rank %d", rank)
	}
	return rank, nil
}

// decodeChallenge checks the challenge ch that the store at addr answered
// to hello (client side): magic, version, that the server has a job token
// exactly when token is set, and the server's proof. It does no I/O.
func decodeChallenge(ch, hello []byte, addr string, token []byte) error {
	if len(ch) < storeChallengeSize {
		return fmt.Errorf("handshake: short challenge from %s (%d bytes, want %d)", addr, len(ch), storeChallengeSize)
	}
	if string(ch[0:8]) != challengeMagicStore {
		return fmt.Errorf("handshake: %s is not a goccl store (bad magic)", addr)
	}
	if v := binary.BigEndian.Uint16(ch[8:]); v != storeProtoVersion {
		return fmt.Errorf("handshake: the store at %s speaks protocol version %d, this build %d", addr, v, storeProtoVersion)
	}
	serverToken := binary.BigEndian.Uint16(ch[10:])&flagHasToken != 0
	switch {
	case serverToken && len(token) == 0:
		return fmt.Errorf("%w: the store at %s requires a job token (%s)", ErrAuth, addr, config.JobToken.Name)
	case !serverToken && len(token) > 0:
		return fmt.Errorf("%w: the store at %s does not check job tokens, this rank has one (%s set on some ranks only?)", ErrAuth, addr, config.JobToken.Name)
	case !auth.Check(token, ch[32:64], labelStoreServer, hello, ch[0:32]):
		return fmt.Errorf("%w: the store at %s holds a different job token", ErrAuth, addr)
	}
	return nil
}
