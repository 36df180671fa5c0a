package tcp

import (
	"encoding/binary"
	"io"
	"net"
	"testing"

	"github.com/goccl/goccl/internal/auth"
)

func fuzzEndpoint(self int, token []byte) *Endpoint {
	return &Endpoint{self: self, jobID: "job-1", token: token}
}

// FuzzHello feeds arbitrary hellos to a listener's checks: never a panic,
// and an accepted hello always describes a valid connection of a link.
func FuzzHello(f *testing.F) {
	var b [helloSize]byte
	encodeHello(&b, "job-1", 0, 3, 1, 4, flagToken, 0)
	f.Add(b[:])
	encodeHello(&b, "job-1", 2, 3, 0, 2, flagChecksum, 0)
	f.Add(b[:])
	encodeHello(&b, "other", 5, 3, 9, 4, 0, 0)
	f.Add(b[:])
	f.Add(make([]byte, helloSize))
	e := fuzzEndpoint(3, nil)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < helloSize {
			in = append(in, make([]byte, helloSize-len(in))...)
		}
		var b [helloSize]byte
		copy(b[:], in)
		h, status, why, err := e.checkHello(&b)
		if err != nil {
			return
		}
		if status != ackOK {
			if why == nil {
				t.Fatalf("status %d without a reason", status)
			}
			return
		}
		if h.from < 0 || int(h.from) >= e.self || int(h.to) != e.self || h.nsocks < 2 || h.nsocks%2 != 0 ||
			h.nsocks > maxConns || h.index >= h.nsocks || string(b[24:24+int(h.jobLen)]) != e.jobID {
			t.Fatalf("accepted an invalid hello %+v", h)
		}
	})
}

// FuzzAck feeds arbitrary acks to a dialer holding a token: never a panic,
// and nothing but the listener's genuine ack is accepted.
func FuzzAck(f *testing.F) {
	token := []byte("fuzz token")
	var hello [helloSize]byte
	encodeHello(&hello, "job-1", 0, 1, 0, 2, flagToken, 0)
	genuine := func(status uint16, rank int32, flags uint16) [ackSize]byte {
		var a [ackSize]byte
		copy(a[0:4], ackMagic)
		binary.LittleEndian.PutUint16(a[4:], helloVersion)
		binary.LittleEndian.PutUint16(a[6:], status)
		binary.LittleEndian.PutUint32(a[8:], uint32(rank))
		binary.LittleEndian.PutUint16(a[12:], flags)
		mac := auth.MAC(token, labelTCPServer, hello[:], a[0:32])
		copy(a[32:], mac[:])
		return a
	}
	valid := genuine(ackOK, 1, flagToken)
	f.Add(valid[:])
	for _, a := range [][ackSize]byte{genuine(ackBadJob, 1, flagToken), genuine(ackOK, 2, flagToken), genuine(ackOK, 1, 0), genuine(ackOK, 1, flagToken|flagTLS)} {
		f.Add(a[:])
	}
	f.Add(make([]byte, ackSize))
	e := fuzzEndpoint(0, token)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < ackSize {
			in = append(in, make([]byte, ackSize-len(in))...)
		}
		var a [ackSize]byte
		copy(a[:], in)
		if err := e.checkAck(&a, hello[:], 1); err == nil && a != valid {
			t.Fatalf("accepted a forged ack %x", a)
		}
	})
}

// TestCheckAckAcceptsGenuine keeps FuzzAck honest: the genuine ack passes.
func TestCheckAckAcceptsGenuine(t *testing.T) {
	ea := listenOpts(t, 0, WithToken([]byte("t")))
	eb := listenOpts(t, 1, WithToken([]byte("t")))
	c, err := net.Dial("tcp", eb.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var hello [helloSize]byte
	encodeHello(&hello, "job-1", 0, 1, 0, 2, flagToken, 0)
	if _, err := c.Write(hello[:]); err != nil {
		t.Fatal(err)
	}
	var a [ackSize]byte
	if _, err := io.ReadFull(c, a[:]); err != nil {
		t.Fatal(err)
	}
	if err := ea.checkAck(&a, hello[:], 1); err != nil {
		t.Fatalf("genuine ack refused: %v", err)
	}
}
