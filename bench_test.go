package goccl_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
)

// BenchmarkAllReduce times an in-place float32 sum AllReduce between two
// goroutine ranks of this process, over shared memory and over TCP. Besides
// the mean (ns/op) it reports rank 0's median operation time (p50-ns), which
// a few descheduled iterations do not move:
//
//	go test -run XXX -bench 'AllReduce/shm/8B' -count 5 .
//
// shm+metrics and shm+flight measure the cost of Prometheus metrics
// (GOCCL_METRICS_ADDR) and of the flight recorder (GOCCL_FLIGHT_RECORDER).
func BenchmarkAllReduce(b *testing.B) {
	for _, tr := range []struct{ name, shmOff, key, value string }{
		{"shm", "0", "", ""}, {"tcp", "1", "", ""},
		{"shm+metrics", "0", "GOCCL_METRICS_ADDR", "127.0.0.1:0"},
		{"shm+flight", "0", "GOCCL_FLIGHT_RECORDER", "64"},
	} {
		for _, size := range []int{8, 64 << 10} {
			b.Run(fmt.Sprintf("%s/%dB", tr.name, size), func(b *testing.B) {
				b.Setenv("GOCCL_SHM_DISABLE", tr.shmOff)
				if tr.key != "" {
					b.Setenv(tr.key, tr.value)
				}
				benchAllReduce(b, size/4, false)
			})
		}
	}
}

// BenchmarkIAllReduce is BenchmarkAllReduce with the non-blocking form: each
// operation is issued (IAllReduce) and waited for (Request.Wait), so it
// times the queue and the worker's hand-offs on top of the operation:
//
//	go test -run XXX -bench 'IAllReduce/shm/8B' -count 5 .
func BenchmarkIAllReduce(b *testing.B) {
	for _, tr := range []struct{ name, shmOff string }{{"shm", "0"}, {"tcp", "1"}} {
		for _, size := range []int{8, 64 << 10} {
			b.Run(fmt.Sprintf("%s/%dB", tr.name, size), func(b *testing.B) {
				b.Setenv("GOCCL_SHM_DISABLE", tr.shmOff)
				benchAllReduce(b, size/4, true)
			})
		}
	}
}

// BenchmarkArrivalSkew times BenchmarkAllReduce's operation with the
// arrival-skew record on (the default) and off (GOCCL_ARRIVAL_SKEW=0), at
// 8 B and 1 MiB, over shared memory and TCP, in one run:
//
//	go test -run XXX -bench 'ArrivalSkew' -count 10 .
func BenchmarkArrivalSkew(b *testing.B) {
	for _, tr := range []struct{ name, shmOff string }{{"shm", "0"}, {"tcp", "1"}} {
		for _, size := range []int{8, 1 << 20} {
			for _, skew := range []string{"1", "0"} {
				b.Run(fmt.Sprintf("%s/%dB/skew=%s", tr.name, size, skew), func(b *testing.B) {
					b.Setenv("GOCCL_SHM_DISABLE", tr.shmOff)
					b.Setenv("GOCCL_ARRIVAL_SKEW", skew)
					benchAllReduce(b, size/4, false)
				})
			}
		}
	}
}

func benchAllReduce(b *testing.B, count int, nonBlocking bool) {
	ctx := context.Background()
	comms := initComms(b, 2, rendezvous.NewMemStore(), time.Minute)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	bufs := [2][]float32{make([]float32, count), make([]float32, count)}
	loop := func(r, n int, times []time.Duration) error {
		for i := 0; i < n; i++ {
			t0 := time.Now()
			if nonBlocking {
				req, err := goccl.IAllReduce(ctx, comms[r], bufs[r], bufs[r], count, goccl.Sum)
				if err == nil {
					err = req.Wait(ctx)
				}
				if err != nil {
					return err
				}
			} else if err := goccl.AllReduce(ctx, comms[r], bufs[r], bufs[r], count, goccl.Sum); err != nil {
				return err
			}
			if times != nil {
				times[i] = time.Since(t0)
			}
		}
		return nil
	}
	const warmup = 1000
	times := make([]time.Duration, b.N)
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs[1] = loop(1, warmup+b.N, nil)
	}()
	if errs[0] = loop(0, warmup, nil); errs[0] == nil {
		b.ResetTimer()
		errs[0] = loop(0, b.N, times)
		b.StopTimer()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "p50-ns")
}
