package ras

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/goccl/goccl/internal/auth"
)

// The probe protocol between the server and a process's status listener:
// the prober sends probeMagic, a fresh nonce and its MAC (auth.MAC with
// the job token, label probeLabel); the process answers with the length of
// its Report's JSON (4 bytes, big-endian), the JSON and a MAC over the
// nonce and the JSON (label reportLabel), then closes. Without a token the
// MACs are zeros and unchecked (as on goccl's links).
const (
	probeMagic     = "GOCCL-RAS-PROBE 1\n"
	probeLabel     = "goccl ras probe"
	reportLabel    = "goccl ras report"
	maxReportBytes = 16 << 20
	// answerTimeout bounds how long a listener waits for a probe and for
	// the prober to take its answer.
	answerTimeout = 5 * time.Second
)

// ErrProbe is wrapped by the errors of malformed or unauthenticated
// probes and answers.
var ErrProbe = errors.New("ras: bad status probe")

// Answer serves one probe on conn: it checks the probe against token and
// writes report()'s JSON. It closes conn.
func Answer(conn net.Conn, token []byte, report func() *Report) error {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(answerTimeout))
	nonce, err := readProbe(conn, token)
	if err != nil {
		return err
	}
	b, err := json.Marshal(report())
	if err != nil {
		return err
	}
	mac := auth.MAC(token, reportLabel, nonce[:], b)
	out := make([]byte, 4, 4+len(b)+len(mac))
	binary.BigEndian.PutUint32(out, uint32(len(b)))
	out = append(append(out, b...), mac[:]...)
	_, err = conn.Write(out)
	return err
}

// readProbe reads and checks a probe; it returns the prober's nonce.
func readProbe(r io.Reader, token []byte) (nonce [auth.NonceSize]byte, err error) {
	var buf [len(probeMagic) + auth.NonceSize + auth.MACSize]byte
	if _, err := io.ReadFull(r, buf[:]); err != nil {
		return nonce, fmt.Errorf("%w: %v", ErrProbe, err)
	}
	if string(buf[:len(probeMagic)]) != probeMagic {
		return nonce, fmt.Errorf("%w: not a goccl status probe", ErrProbe)
	}
	copy(nonce[:], buf[len(probeMagic):])
	if !auth.Check(token, buf[len(probeMagic)+auth.NonceSize:], probeLabel, nonce[:]) {
		return nonce, fmt.Errorf("%w: %w", ErrProbe, auth.ErrAuth)
	}
	return nonce, nil
}

// Probe asks the status listener at addr for its process's Report, waiting
// at most until ctx ends. A refused connection comes back as an error
// wrapping ErrRefused.
func Probe(ctx context.Context, addr string, token []byte) (*Report, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if isRefused(err) {
			return nil, fmt.Errorf("%w: %v", ErrRefused, err)
		}
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	nonce := auth.Nonce()
	mac := auth.MAC(token, probeLabel, nonce[:])
	if _, err := conn.Write(append(append([]byte(probeMagic), nonce[:]...), mac[:]...)); err != nil {
		return nil, err
	}
	return readAnswer(bufio.NewReader(conn), token, nonce)
}

// readAnswer reads and checks a listener's answer to the probe of nonce.
func readAnswer(r io.Reader, token []byte, nonce [auth.NonceSize]byte) (*Report, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxReportBytes {
		return nil, fmt.Errorf("%w: answer of %d bytes", ErrProbe, size)
	}
	b := make([]byte, int(size)+auth.MACSize)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	body := b[:size]
	if !auth.Check(token, b[size:], reportLabel, nonce[:], body) {
		return nil, fmt.Errorf("%w: answer: %w", ErrProbe, auth.ErrAuth)
	}
	var rep Report
	if err := json.Unmarshal(body, &rep); err != nil {
		return nil, fmt.Errorf("%w: answer: %v", ErrProbe, err)
	}
	return &rep, nil
}
