package tcp

import (
	"context"
	"fmt"
	"testing"

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
