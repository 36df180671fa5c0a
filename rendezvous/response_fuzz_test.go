package rendezvous

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// FuzzReadResponse feeds bytes to the TCP store client's response decoding
// (readResponse, and decodeLost for a lost rank): no panic; what it accepts
// has a known status and a payload within bounds and encodes back to the
// bytes it was read from; what it refuses is a malformed frame or a short
// read.
func FuzzReadResponse(f *testing.F) {
	frame := func(status byte, payload []byte) []byte {
		return append(responseHeader(status, len(payload)), payload...)
	}
	f.Add(frame(statusOK, nil))
	f.Add(frame(statusOK, []byte("10.0.0.1:29500")))
	f.Add(frame(statusErr, errorPayload(errors.New("rendezvous: key too long"))))
	f.Add(frame(statusLost, lostPayload(3, "process 21527 exited")))
	f.Add(frame(statusLost, lostPayload(-1, strings.Repeat("x", maxErrorLen+10))))
	f.Add([]byte{0, 0, 0, 2, statusLost, 1}) // a lost status without a rank
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, statusOK})
	f.Fuzz(func(t *testing.T, b []byte) {
		status, payload, err := readResponse(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			if !errors.Is(err, errMalformed) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("error %v is neither malformed nor a short read", err)
			}
			return
		}
		switch status {
		case statusOK:
			if len(payload) > MaxValueLen {
				t.Fatalf("accepted %d bytes", len(payload))
			}
		case statusErr:
			if len(payload) > 4+maxErrorLen {
				t.Fatalf("accepted an error of %d bytes", len(payload))
			}
		case statusLost:
			if len(payload) < 4 || len(payload) > 4+maxErrorLen {
				t.Fatalf("accepted a lost payload of %d bytes", len(payload))
			}
			le := decodeLost(payload)
			if again := lostPayload(le.Rank, le.Reason); !bytes.Equal(again, payload) {
				t.Fatalf("%+v encodes to %x, decoded from %x", le, again, payload)
			}
		default:
			t.Fatalf("accepted status %d", status)
		}
		if again := frame(status, payload); !bytes.HasPrefix(b, again) {
			t.Fatalf("status %d, %d bytes encode to %x, read from %x", status, len(payload), again, b)
		}
	})
}
