package tcp

import (
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// sockBufSize is the socket buffer size goccl asks for.
const sockBufSize = 4 << 20

var bufSizes struct {
	once     sync.Once
	rcv, snd int // 0: leave the kernel's default (autotuning) alone
}

// tuneConn sets TCP_NODELAY and raises the socket buffers. Failures are
// ignored: they only cost bandwidth.
func tuneConn(c *net.TCPConn) {
	_ = c.SetNoDelay(true)
	bufSizes.once.Do(func() {
		bufSizes.rcv, bufSizes.snd = sockBufSize, sockBufSize
		if runtime.GOOS == "linux" {
			bufSizes.rcv = linuxBufSize("/proc/sys/net/core/rmem_max", "/proc/sys/net/ipv4/tcp_rmem")
			bufSizes.snd = linuxBufSize("/proc/sys/net/core/wmem_max", "/proc/sys/net/ipv4/tcp_wmem")
		}
	})
	if bufSizes.rcv > 0 {
		_ = c.SetReadBuffer(bufSizes.rcv)
	}
	if bufSizes.snd > 0 {
		_ = c.SetWriteBuffer(bufSizes.snd)
	}
}

// linuxBufSize decides whether setting SO_RCVBUF/SO_SNDBUF really raises the
// buffer. On Linux an explicit size is capped at core.[rw]mem_max, doubled,
// and switches autotuning off; autotuning alone may grow the buffer up to the
// third field of tcp_[rw]mem. Setting is only worth it when it gives more.
func linuxBufSize(coreMaxFile, autoFile string) int {
	coreMax := readProcInts(coreMaxFile)
	auto := readProcInts(autoFile)
	return chooseBufSize(sockBufSize, first(coreMax), third(auto))
}

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
