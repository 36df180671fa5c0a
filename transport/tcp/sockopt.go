package tcp

import (
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/sockopt"
)

// sockBufSize is the socket buffer size goccl asks for.
const sockBufSize = 4 << 20

// sameHostMinBuf is the smallest fixed buffer worth setting on a same-host
// connection (below it, autotuning does better).
const sameHostMinBuf = 1 << 20

// sameHostCongestion is the congestion control of same-host connections.
// Loopback has no queue to protect and never loses a packet, but the pacing
// of a BBR default costs timers and wake-ups: on a 2-core host reno moves
// 1.3-1.6x the data of bbr in a simultaneous exchange (BenchmarkExchange).
// Reno is built into every Linux kernel and allowed to unprivileged sockets.
const sameHostCongestion = "reno"

var bufSizes struct {
	once sync.Once
	// 0: leave the kernel's default (autotuning) alone.
	rcv, snd           int // connections to another host
	localRcv, localSnd int // connections within this host
}

// tuneConn sets TCP_NODELAY and raises the socket buffers; on a connection
// within this host it also fixes the buffer sizes and picks the congestion
// control (sameHostCongestion). Failures are ignored: they only cost
// bandwidth.
func tuneConn(c *net.TCPConn) {
	_ = c.SetNoDelay(true)
	bufSizes.once.Do(func() {
		bufSizes.rcv, bufSizes.snd = sockBufSize, sockBufSize
		bufSizes.localRcv, bufSizes.localSnd = sockBufSize, sockBufSize
		if runtime.GOOS == "linux" {
			rmax, wmax := first(readProcInts("/proc/sys/net/core/rmem_max")), first(readProcInts("/proc/sys/net/core/wmem_max"))
			bufSizes.rcv = chooseBufSize(sockBufSize, rmax, third(readProcInts("/proc/sys/net/ipv4/tcp_rmem")))
			bufSizes.snd = chooseBufSize(sockBufSize, wmax, third(readProcInts("/proc/sys/net/ipv4/tcp_wmem")))
			bufSizes.localRcv = chooseLocalBufSize(sockBufSize, rmax)
			bufSizes.localSnd = chooseLocalBufSize(sockBufSize, wmax)
		}
	})
	rcv, snd := bufSizes.rcv, bufSizes.snd
	if sameHost(c) {
		rcv, snd = bufSizes.localRcv, bufSizes.localSnd
		setCongestion(c, sameHostCongestion)
	} else {
		setDeadPeerTimeout(c, socketTimeout())
	}
	if rcv > 0 {
		_ = c.SetReadBuffer(rcv)
	}
	if snd > 0 {
		_ = c.SetWriteBuffer(snd)
	}
}

// socketTimeout is GOCCL_SOCKET_TIMEOUT (0: the kernel's defaults), read
// once.
var socketTimeout = sync.OnceValue(func() time.Duration {
	d, _, err := config.SocketTimeout.Duration()
	if err != nil || d < 0 {
		d, _ = config.ParseDuration(config.SocketTimeout.Default)
	}
	return d
})

// setDeadPeerTimeout makes c fail within about d once its peer stops
// answering (its host is down, or the path to it): keep-alive probes from
// d/5 of silence, a second apart, find an idle connection's peer gone, and
// TCP_USER_TIMEOUT (Linux) ends a connection whose sent data stays
// unacknowledged for d. A live peer's kernel answers both even while its
// process is busy, and a full receive window does not count (its window
// probes are answered), so only an unreachable peer trips it; a broken
// connection then reports the peer lost, like one that was reset. d = 0
// leaves the kernel's defaults (keep-alive after Go's 15 s, retransmission
// for many minutes).
func setDeadPeerTimeout(c *net.TCPConn, d time.Duration) {
	if d <= 0 {
		return
	}
	idle := max(d/5, time.Second)
	sockopt.KeepAlive(c, net.KeepAliveConfig{Enable: true, Idle: idle, Interval: time.Second, Count: max(1, int((d-idle)/time.Second))}, d)
}

// sameHost reports whether c connects two sockets of this host: to a
// loopback address, or from an address to itself.
func sameHost(c interface {
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
}) bool {
	la, ok1 := c.LocalAddr().(*net.TCPAddr)
	ra, ok2 := c.RemoteAddr().(*net.TCPAddr)
	return ok1 && ok2 && (ra.IP.IsLoopback() || ra.IP.Equal(la.IP))
}

// chooseBufSize decides, for a connection to another host, whether setting
// SO_RCVBUF/SO_SNDBUF really raises the buffer. On Linux an explicit size is
// capped at core.[rw]mem_max, doubled, and switches autotuning off;
// autotuning alone may grow the buffer up to the third field of
// tcp_[rw]mem. Setting is only worth it when it gives more.
func chooseBufSize(want, coreMax, autoMax int) int {
	if coreMax <= 0 || autoMax <= 0 {
		return want // unknown limits: just ask
	}
	set := min(want, coreMax)
	if 2*set <= autoMax {
		return 0
	}
	return set
}

// chooseLocalBufSize decides the buffer of a same-host connection. There a
// fixed buffer does better than autotuning (which lets tens of MiB pile up
// in flight, out of the caches): 8 MiB (4 MiB asked, doubled) moves 1.1-1.2x
// the data of autotuning up to 32 MiB at 256 KiB-8 MiB messages, and 2 MiB
// (1 MiB asked) is already worse. So it is set unless core.[rw]mem_max
// (coreMax) caps it below sameHostMinBuf.
func chooseLocalBufSize(want, coreMax int) int {
	if coreMax <= 0 {
		return want // unknown limit: just ask
	}
	set := min(want, coreMax)
	if set < sameHostMinBuf {
		return 0
	}
	return set
}

func readProcInts(path string) []int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var v []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil
		}
		v = append(v, n)
	}
	return v
}

func first(v []int) int {
	if len(v) < 1 {
		return 0
	}
	return v[0]
}

func third(v []int) int {
	if len(v) < 3 {
		return 0
	}
	return v[2]
}
