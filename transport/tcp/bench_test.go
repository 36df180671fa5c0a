package tcp

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/goccl/goccl/internal/reduce"
	"github.com/goccl/goccl/transport"
)

// BenchmarkSendRecv streams messages one way and reports bandwidth.
func BenchmarkSendRecv(b *testing.B) {
	for _, size := range []int{1 << 20, 64 << 20} {
		for _, nsocks := range []int{1, 4} {
			b.Run(fmt.Sprintf("%dMiB/socks%d", size>>20, nsocks), func(b *testing.B) {
				la, lb := connectPair(b, 0, 1, nsocks)
				src, dst := make([]byte, size), make([]byte, size)
				h := hdr(1, size)
				errc := make(chan error, 1)
				n := b.N
				go func() {
					for range n {
						if err := lb.Recv(context.Background(), &h, dst, nil); err != nil {
							errc <- err
							return
						}
					}
					errc <- nil
				}()
				b.SetBytes(int64(size))
				b.ResetTimer()
				for range n {
					if err := la.Send(context.Background(), &h, src); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkPingPong8B measures the round trip of an 8-byte message.
func BenchmarkPingPong8B(b *testing.B) {
	la, lb := connectPair(b, 0, 1, 1)
	h := hdr(1, 8)
	n := b.N
	errc := make(chan error, 1)
	go func() {
		buf := make([]byte, 8)
		for range n {
			if err := lb.Recv(context.Background(), &h, buf, nil); err != nil {
				errc <- err
				return
			}
			if err := lb.Send(context.Background(), &h, buf); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	buf := make([]byte, 8)
	b.ResetTimer()
	for range n {
		if err := la.Send(context.Background(), &h, buf); err != nil {
			b.Fatal(err)
		}
		if err := la.Recv(context.Background(), &h, buf, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(n), "µs/roundtrip")
}

var _ transport.Link = (*link)(nil)

// addFloat32 is a plain float32 Sum ReduceFunc (dst[i] += src[i]), as a
// collective would pass to Recv.
func addFloat32(dst, src []byte) {
	n := len(dst) / 4
	if n == 0 {
		return
	}
	d := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(dst))), n)
	s := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(src))), n)[:len(d)]
	i := 0
	for ; i+4 <= len(d); i += 4 {
		d[i] += s[i]
		d[i+1] += s[i+1]
		d[i+2] += s[i+2]
		d[i+3] += s[i+3]
	}
	for ; i < len(d); i++ {
		d[i] += s[i]
	}
}

// gocclSumFloat32 is goccl's own (vectorized) float32 Sum kernel, what
// collectives pass to Recv.
var gocclSumFloat32 = func() transport.ReduceFunc {
	f, err := reduce.Func(reduce.Float32, reduce.Sum)
	if err != nil {
		panic(err)
	}
	return f
}()

// BenchmarkExchange reproduces one step of a 2-rank collective: both ends of
// a link send N bytes to each other at the same time, each rank with its Send
// in one goroutine and its Recv in another, and the next step starting only
// when both are done. Recv copies (copy), or folds in with the simple float32
// sum above (sum) or with goccl's vectorized kernel (sumgoccl, what goccl's
// AllReduce uses; the simple one runs at about 5 GB/s and dominates). It
// reports the bandwidth of one direction and the CPU time per MiB moved.
func BenchmarkExchange(b *testing.B) {
	for _, size := range []int{256 << 10, 1 << 20, 8 << 20, 64 << 20} {
		for _, nsocks := range []int{1, 2, 4} {
			for _, red := range []string{"copy", "sum", "sumgoccl"} {
				name := fmt.Sprintf("%s/socks%d/%s", sizeName(size), nsocks, red)
				b.Run(name, func(b *testing.B) {
					var f transport.ReduceFunc
					switch red {
					case "sum":
						f = addFloat32
					case "sumgoccl":
						f = gocclSumFloat32
					}
					benchExchange(b, size, nsocks, f)
				})
			}
		}
	}
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

func benchExchange(b *testing.B, size, nsocks int, f transport.ReduceFunc) {
	la, lb := connectPair(b, 0, 1, nsocks)
	n := b.N
	// Buffers of each rank, allocated (and touched) once.
	var bufs [2][2][]byte
	for i := range bufs {
		for j := range bufs[i] {
			bufs[i][j] = make([]byte, size)
			for k := range bufs[i][j] {
				bufs[i][j][k] = byte(k)
			}
		}
	}
	rank := func(l transport.Link, errc chan<- error) {
		src, dst := bufs[l.Peer()][0], bufs[l.Peer()][1]
		sh, rh := hdr(1, size), hdr(1, size)
		sendErr := make(chan error, 1)
		next := make(chan struct{}, 1)
		go func() { // the rank's background sender
			for range next {
				sendErr <- l.Send(context.Background(), &sh, src)
			}
		}()
		defer close(next)
		for range n {
			next <- struct{}{}
			rerr := l.Recv(context.Background(), &rh, dst, f)
			serr := <-sendErr
			if rerr != nil || serr != nil {
				errc <- errors.Join(rerr, serr)
				la.Close()
				lb.Close()
				return
			}
		}
		errc <- nil
	}
	// Warm up (connection, buffers) outside the timed region.
	n = 2
	errc := make(chan error, 2)
	go rank(la, errc)
	go rank(lb, errc)
	if err := errors.Join(<-errc, <-errc); err != nil {
		b.Fatal(err)
	}
	n = b.N
	b.SetBytes(int64(size))
	cpu0 := cpuTime()
	b.ResetTimer()
	go rank(la, errc)
	go rank(lb, errc)
	if err := errors.Join(<-errc, <-errc); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
	// CPU time (user+system, all threads) per MiB moved, both directions
	// counted: less sensitive than GB/s to other load on the machine.
	b.ReportMetric((cpuTime()-cpu0).Seconds()*1e6/(2*float64(size)*float64(b.N)/(1<<20)), "cpu-µs/MiB")
}
