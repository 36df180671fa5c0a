package roce

import (
	"bytes"
	"testing"

	"github.com/goccl/goccl/rdma"
)

// FuzzSetup: the ring setup message a peer sends over the control link
// (setup.decode) never panics, refuses a ring whose size does not add up,
// and what it accepts encodes back to the same bytes it covers.
func FuzzSetup(f *testing.F) {
	good := setup{hasDev: true, slots: 4, per: 16 << 10,
		info: rdma.ConnInfo{QPN: 17, PSN: 0x123456, Port: 4791, MTU: 4096, RKey: 0x1234, Addr: 1 << 40}}
	good.info.GID[15] = 1
	good.info.Len = good.slots*good.per + fifoBytes
	for _, s := range []setup{good, {}} {
		var b [setupSize]byte
		s.encode(b[:])
		f.Add(b[:])
	}
	bad := good
	bad.slots = 1
	var b [setupSize]byte
	bad.encode(b[:])
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, in []byte) {
		var msg [setupSize]byte
		copy(msg[:], in)
		var s setup
		err := s.decode(msg[:])
		if err != nil {
			if msg[0] != 1 {
				t.Fatalf("a message without a device was refused: %v", err)
			}
			return
		}
		if s.hasDev != (msg[0] == 1) {
			t.Fatalf("hasDev %v for first byte %d", s.hasDev, msg[0])
		}
		if !s.hasDev {
			return
		}
		if s.slots < 2 || s.per%64 != 0 || s.info.Len != s.slots*s.per+fifoBytes {
			t.Fatalf("accepted a ring of %d slots of %d bytes in %d bytes", s.slots, s.per, s.info.Len)
		}
		var again [setupSize]byte
		s.encode(again[:])
		if !bytes.Equal(again[:55], msg[:55]) {
			t.Fatalf("re-encoded\n%x\nfrom\n%x", again[:55], msg[:55])
		}
	})
}
