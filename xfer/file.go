package xfer

import (
	"fmt"
	"hash/crc32"
	"net"
	"time"

	"github.com/goccl/goccl/internal/sockopt"
	"golang.org/x/sys/unix"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crc is the CRC-32C of b (SSE4.2 / ARMv8 CRC instructions in hash/crc32).
func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// alignedBuf returns n bytes whose address is a multiple of DirectAlignment.
func alignedBuf(n int) []byte {
	b := make([]byte, n+DirectAlignment)
	off := (DirectAlignment - int(addrOf(b)%DirectAlignment)) % DirectAlignment
	return b[off : off+n : off+n]
}

// checkDirect reports a FILE descriptor an O_DIRECT region cannot serve.
func checkDirect(r *region, d Desc) error {
	if r.direct && (d.Addr%DirectAlignment != 0 || d.Len%DirectAlignment != 0) {
		return fmt.Errorf("%w: %s on an O_DIRECT file: offset and length must be multiples of %d", ErrBadRequest, d, DirectAlignment)
	}
	return nil
}

// fileIO reads (write false) or writes buf at d's offset in r's file, all
// of it: pread/pwrite, repeated for short transfers. O_DIRECT files get an
// aligned bounce buffer when buf is not aligned.
func fileIO(r *region, d Desc, buf []byte, write bool) error {
	if err := checkDirect(r, d); err != nil {
		return err
	}
	if r.direct && addrOf(buf)%DirectAlignment != 0 {
		b := alignedBuf(len(buf))
		if write {
			copy(b, buf)
			return fileIO(r, d, b, true)
		}
		if err := fileIO(r, d, b, false); err != nil {
			return err
		}
		copy(buf, b)
		return nil
	}
	fd := int(r.dev)
	off := int64(d.Addr)
	for len(buf) > 0 {
		var n int
		var err error
		if write {
			n, err = unix.Pwrite(fd, buf, off)
		} else {
			n, err = unix.Pread(fd, buf, off)
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("xfer: %s %s: %w", map[bool]string{true: "pwrite", false: "pread"}[write], r.file.Name(), err)
		}
		if n == 0 {
			if write {
				return fmt.Errorf("xfer: pwrite %s at %d: wrote nothing", r.file.Name(), off)
			}
			clear(buf) // past the end of the file: zeros, as a sparse file reads
			return nil
		}
		buf, off = buf[n:], off+int64(n)
	}
	return nil
}

// tuneConn sets what a transfer connection needs: no Nagle delay, and
// keep-alives plus a user timeout so a silent peer fails its requests
// within about timeout.
func tuneConn(c net.Conn, timeout time.Duration) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	tc.SetNoDelay(true)
	if timeout <= 0 {
		return
	}
	iv := max(timeout/5, time.Second)
	sockopt.KeepAlive(tc, net.KeepAliveConfig{Enable: true, Idle: iv, Interval: iv, Count: 5}, timeout)
}
