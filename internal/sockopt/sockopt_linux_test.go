package sockopt

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestKeepAlive checks that the socket carries the keep-alive settings and
// the user timeout asked for, and that a zero user timeout leaves the
// kernel's default (0).
func TestKeepAlive(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, tc := range []struct {
		ka   net.KeepAliveConfig
		user time.Duration
	}{
		{net.KeepAliveConfig{Enable: true, Idle: 3 * time.Second, Interval: time.Second, Count: 7}, 10 * time.Second},
		{net.KeepAliveConfig{Enable: true, Idle: 2 * time.Second, Interval: 2 * time.Second, Count: 5}, 0},
	} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		KeepAlive(c.(*net.TCPConn), tc.ka, tc.user)
		got := map[string]int{}
		rc, _ := c.(*net.TCPConn).SyscallConn()
		var gerr error
		rc.Control(func(fd uintptr) {
			for name, opt := range map[string][2]int{
				"SO_KEEPALIVE":     {unix.SOL_SOCKET, unix.SO_KEEPALIVE},
				"TCP_KEEPIDLE":     {unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
				"TCP_KEEPINTVL":    {unix.IPPROTO_TCP, unix.TCP_KEEPINTVL},
				"TCP_KEEPCNT":      {unix.IPPROTO_TCP, unix.TCP_KEEPCNT},
				"TCP_USER_TIMEOUT": {unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT},
			} {
				v, err := unix.GetsockoptInt(int(fd), opt[0], opt[1])
				if err != nil {
					gerr = err
				}
				got[name] = v
			}
		})
		c.Close()
		if gerr != nil {
			t.Fatal(gerr)
		}
		want := map[string]int{"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": int(tc.ka.Idle / time.Second),
			"TCP_KEEPINTVL": int(tc.ka.Interval / time.Second), "TCP_KEEPCNT": tc.ka.Count,
			"TCP_USER_TIMEOUT": int(tc.user.Milliseconds())}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%+v, user timeout %v: %s = %d, want %d", tc.ka, tc.user, k, got[k], v)
			}
		}
	}
}
