package tcp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestSameHostTuning checks that loopback connections get the same-host
// congestion control and fixed buffers, in both directions.
func TestSameHostTuning(t *testing.T) {
	la, lb := connectPair(t, 0, 1, 2)
	for _, l := range []*link{la.(*link), lb.(*link)} {
		for _, s := range append(append([]*sock{}, l.tx...), l.rx...) {
			if !sameHost(s.conn) {
				t.Fatalf("%v -> %v not seen as same-host", s.conn.LocalAddr(), s.conn.RemoteAddr())
			}
			var cc string
			var rcv, snd int
			var gerr error
			s.conn.control(func(fd uintptr) {
				cc, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
				if gerr == nil {
					rcv, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
				}
				if gerr == nil {
					snd, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
				}
			})
			if gerr != nil {
				t.Fatal(gerr)
			}
			if cc != sameHostCongestion {
				t.Errorf("congestion control %q, want %q", cc, sameHostCongestion)
			}
			// The kernel doubles what was set.
			if want := bufSizes.localRcv; want > 0 && rcv != 2*want {
				t.Errorf("SO_RCVBUF %d, want %d", rcv, 2*want)
			}
			if want := bufSizes.localSnd; want > 0 && snd != 2*want {
				t.Errorf("SO_SNDBUF %d, want %d", snd, 2*want)
			}
		}
	}
}
