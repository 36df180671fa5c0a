package rendezvous

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Wire format of the TCP store. All integers are big-endian. Every frame is a
// uint32 length N followed by N bytes; N is bounded (maxRequestLen,
// maxResponseLen) before anything is allocated.
//
//	request  = len:u32  op:u8  body
//	  Set  (op 1): klen:u16 key value      (value = rest of the frame)
//	  Get  (op 2): klen:u16 key
//	  Wait (op 3): n:u32 n*(klen:u16 key)  (n <= MaxWaitKeys)
//	  Add  (op 4): klen:u16 key delta:i64
//	  Bye  (op 5): empty; the client closes deliberately (no reply)
//	  Create (op 6): klen:u16 key value    (as Set; stored only if key is absent)
//	response = len:u32  status:u8  payload
//	  status 0 (ok):    Set, Wait: empty; Get: value; Add: new value i64;
//	                    Create: the value key holds after it
//	  status 1 (error): UTF-8 message (<= maxErrorLen), e.g. a non-integer counter
//	  status 2 (lost):  rank:i32 reason (UTF-8, <= maxErrorLen): a Get or Wait
//	                    could not complete because that rank is gone
//
// Every connection starts with the handshake of handshake.go.
//
// klen <= MaxKeyLen, value <= MaxValueLen; a frame must be consumed exactly
// (no trailing bytes). A frame that breaks any rule is malformed: the server
// closes that connection without a reply.

const (
	opSet  byte = 1
	opGet  byte = 2
	opWait byte = 3
	opAdd  byte = 4
	opBye  byte = 5
	// opCreate sets a key only when it is absent (Creator).
	opCreate byte = 6

	statusOK   byte = 0
	statusErr  byte = 1
	statusLost byte = 2

	frameHeaderLen = 4
	maxErrorLen    = 1 << 10
	// maxRequestLen bounds a request frame's length field: the largest
	// request is a Set of a maximal key and value.
	maxRequestLen = 1 + 2 + MaxKeyLen + MaxValueLen
	// maxResponseLen bounds a response frame's length field.
	maxResponseLen = 1 + MaxValueLen
)

// request is one decoded request. Set, Get and Add have exactly one key.
type request struct {
	op    byte
	keys  []string
	value []byte // Set
	delta int64  // Add
}

var errMalformed = errors.New("rendezvous: malformed frame")

// malformedError is a decoding error; it wraps errMalformed. Its reasons are
// constant strings: decoding garbage allocates and formats nothing, which
// keeps rejecting it cheap.
type malformedError string

func (e malformedError) Error() string { return errMalformed.Error() + ": " + string(e) }
func (e malformedError) Unwrap() error { return errMalformed }

func malformed(reason string) error { return malformedError(reason) }

// appendRequest appends the frame of r to dst. It fails, appending nothing,
// when r breaks a limit.
func appendRequest(dst []byte, r request) ([]byte, error) {
	switch r.op {
	case opSet, opGet, opAdd, opCreate:
		if len(r.keys) != 1 {
			return dst, fmt.Errorf("rendezvous: op %d needs exactly one key, got %d", r.op, len(r.keys))
		}
	case opWait:
		if len(r.keys) > MaxWaitKeys {
			return dst, fmt.Errorf("rendezvous: wait on %d keys exceeds the limit of %d", len(r.keys), MaxWaitKeys)
		}
	case opBye:
		if len(r.keys) != 0 {
			return dst, fmt.Errorf("rendezvous: bye takes no key")
		}
	default:
		return dst, fmt.Errorf("rendezvous: unknown op %d", r.op)
	}
	n := 1
	for _, k := range r.keys {
		if err := checkKey(k); err != nil {
			return dst, err
		}
		n += 2 + len(k)
	}
	switch r.op {
	case opSet, opCreate:
		if err := checkValue(r.value); err != nil {
			return dst, err
		}
		n += len(r.value)
	case opWait:
		n += 4
	case opAdd:
		n += 8
	}
	if n > maxRequestLen { // unreachable for valid keys and values; kept as a guard
		return dst, fmt.Errorf("rendezvous: request of %d bytes exceeds the limit of %d", n, maxRequestLen)
	}
	dst = slices.Grow(dst, frameHeaderLen+n)
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst = append(dst, r.op)
	if r.op == opWait {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(r.keys)))
	}
	for _, k := range r.keys {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(k)))
		dst = append(dst, k...)
	}
	switch r.op {
	case opSet, opCreate:
		dst = append(dst, r.value...)
	case opAdd:
		dst = binary.BigEndian.AppendUint64(dst, uint64(r.delta))
	}
	return dst, nil
}

// decodeRequest decodes one complete request frame (length field included).
// It never panics; every error wraps errMalformed. A Set's value aliases
// frame.
func decodeRequest(frame []byte) (request, error) {
	if len(frame) < frameHeaderLen {
		return request{}, malformed("short frame header")
	}
	n := binary.BigEndian.Uint32(frame)
	if err := checkRequestLen(n); err != nil {
		return request{}, err
	}
	if uint64(n) != uint64(len(frame)-frameHeaderLen) {
		return request{}, malformed("length field does not match the frame")
	}
	return decodeRequestBody(frame[frameHeaderLen:])
}

func checkRequestLen(n uint32) error {
	if n == 0 || n > maxRequestLen {
		return malformed("request length out of range")
	}
	return nil
}

// decodeRequestBody decodes the bytes of a request frame after its length
// field.
func decodeRequestBody(b []byte) (request, error) {
	if len(b) == 0 {
		return request{}, malformed("empty request")
	}
	r := request{op: b[0]}
	b = b[1:]
	key := func() (string, error) {
		if len(b) < 2 {
			return "", malformed("truncated key length")
		}
		kl := int(binary.BigEndian.Uint16(b))
		if kl > MaxKeyLen {
			return "", malformed("key length over MaxKeyLen")
		}
		if len(b)-2 < kl {
			return "", malformed("truncated key")
		}
		k := string(b[2 : 2+kl])
		b = b[2+kl:]
		return k, nil
	}
	switch r.op {
	case opSet, opGet, opAdd, opCreate:
		k, err := key()
		if err != nil {
			return request{}, err
		}
		r.keys = []string{k}
	case opWait:
		if len(b) < 4 {
			return request{}, malformed("truncated wait key count")
		}
		cnt := binary.BigEndian.Uint32(b)
		b = b[4:]
		// Each key takes at least 2 bytes, which bounds cnt by the frame size
		// before anything is allocated for it.
		if cnt > MaxWaitKeys || uint64(cnt)*2 > uint64(len(b)) {
			return request{}, malformed("wait key count over MaxWaitKeys or the frame size")
		}
		r.keys = make([]string, 0, cnt)
		for range cnt {
			k, err := key()
			if err != nil {
				return request{}, err
			}
			r.keys = append(r.keys, k)
		}
	case opBye:
	default:
		return request{}, malformed("unknown op")
	}
	switch r.op {
	case opSet, opCreate:
		if len(b) > MaxValueLen {
			return request{}, malformed("value over MaxValueLen")
		}
		r.value = b
		b = nil
	case opAdd:
		if len(b) < 8 {
			return request{}, malformed("truncated add delta")
		}
		r.delta = int64(binary.BigEndian.Uint64(b))
		b = b[8:]
	}
	if len(b) != 0 {
		return request{}, malformed("trailing bytes")
	}
	return r, nil
}

// readRequest reads and decodes one request frame (pass a buffered reader).
// io.EOF means the peer closed cleanly between frames.
func readRequest(r io.Reader) (request, error) {
	var hdr [frameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return request{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if err := checkRequestLen(n); err != nil {
		return request{}, err
	}
	body, err := readN(r, int(n))
	if err != nil {
		return request{}, err
	}
	return decodeRequestBody(body)
}

// readN reads exactly n bytes. Memory grows with the bytes that actually
// arrive, so a peer announcing a large frame and sending little costs little.
func readN(r io.Reader, n int) ([]byte, error) {
	const chunk = 64 << 10
	if n <= chunk {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, unexpected(err)
		}
		return b, nil
	}
	b := make([]byte, 0, chunk)
	for len(b) < n {
		step := min(n-len(b), max(cap(b)-len(b), chunk))
		b = slices.Grow(b, step)
		m, err := io.ReadFull(r, b[len(b):len(b)+step])
		b = b[:len(b)+m]
		if err != nil {
			return nil, unexpected(err)
		}
	}
	return b, nil
}

// unexpected turns a clean EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// responseHeader returns the length field and status byte of a response whose
// payload has n bytes.
func responseHeader(status byte, n int) []byte {
	h := binary.BigEndian.AppendUint32(make([]byte, 0, frameHeaderLen+1), uint32(1+n))
	return append(h, status)
}

// errorPayload renders err for a status 1 response, within maxErrorLen.
func errorPayload(err error) []byte {
	msg := err.Error()
	if len(msg) > maxErrorLen {
		msg = msg[:maxErrorLen]
	}
	return []byte(msg)
}

// readResponse reads one response frame.
func readResponse(r *bufio.Reader) (status byte, payload []byte, err error) {
	var hdr [frameHeaderLen + 1]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, unexpected(err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > maxResponseLen {
		return 0, nil, malformed("response length out of range")
	}
	status = hdr[frameHeaderLen]
	if status != statusOK && status != statusErr && status != statusLost {
		return 0, nil, malformed("unknown response status")
	}
	if status != statusOK && n-1 > 4+maxErrorLen {
		return 0, nil, malformed("error message too long")
	}
	if status == statusLost && n-1 < 4 {
		return 0, nil, malformed("lost status without a rank")
	}
	payload, err = readN(r, int(n-1))
	if err != nil {
		return 0, nil, err
	}
	return status, payload, nil
}

// lostPayload is the payload of a statusLost response.
func lostPayload(rank int, reason string) []byte {
	if len(reason) > maxErrorLen {
		reason = reason[:maxErrorLen]
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(int32(rank))), reason...)
}

// decodeLost reads a statusLost payload (at least 4 bytes, checked by
// readResponse).
func decodeLost(p []byte) *RankLostError {
	return &RankLostError{Rank: int(int32(binary.BigEndian.Uint32(p))), Reason: string(p[4:])}
}
