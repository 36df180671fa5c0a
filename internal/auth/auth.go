// Package auth proves membership of a job on goccl's connections (the
// rendezvous store and the TCP links between ranks) with a shared secret,
// the job token (GOCCL_JOB_TOKEN; goccl run makes a random one per job).
//
// Each side of a connection sends a fresh random nonce and answers the
// other's with HMAC-SHA256(token, label || transcript) (RFC 2104), where the
// label names the protocol and the direction, and the transcript holds both
// nonces and the identities exchanged. Neither the token nor anything that
// can be replayed on another connection crosses the wire. Without a token
// both sides send zero MACs and check nothing; a side that has a token
// refuses a peer that does not prove it has the same one.
package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
)

// ErrAuth is wrapped by the errors of connections refused because the two
// sides do not hold the same job token (or only one holds one).
var ErrAuth = errors.New("job token authentication failed")

// NonceSize and MACSize are the sizes of a nonce and of a MAC on the wire.
const (
	NonceSize = 16
	MACSize   = sha256.Size
)

// Nonce returns a fresh random nonce.
func Nonce() [NonceSize]byte {
	var n [NonceSize]byte
	rand.Read(n[:]) // never fails (crypto/rand panics rather than return an error)
	return n
}

// MAC is HMAC-SHA256 keyed with token over label and parts, in order. With
// an empty token it is all zeros (no authentication).
func MAC(token []byte, label string, parts ...[]byte) [MACSize]byte {
	var out [MACSize]byte
	if len(token) == 0 {
		return out
	}
	m := hmac.New(sha256.New, token)
	m.Write([]byte(label))
	for _, p := range parts {
		m.Write(p)
	}
	copy(out[:], m.Sum(nil))
	return out
}

// Check reports whether got is the MAC token gives for label and parts. With
// an empty token it accepts anything.
func Check(token []byte, got []byte, label string, parts ...[]byte) bool {
	if len(token) == 0 {
		return true
	}
	want := MAC(token, label, parts...)
	return hmac.Equal(got, want[:])
}
