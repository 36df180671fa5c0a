package goccl_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
)

// TestSendRecvInPlace: two ranks swap 2 MiB through one buffer each
// (sendbuf == recvbuf, as goccl perf's in-place sendrecv and
// MPI_Sendrecv_replace): each ends with the peer's data. (Between
// processes the race detector also watches it: cmd/goccl's
// TestPerfSendRecvInPlace.)
func TestSendRecvInPlace(t *testing.T) {
	comms := initComms(t, 2, rendezvous.NewMemStore(), 30*time.Second)
	const n = 512 << 10 // float32s: 2 MiB
	var wg sync.WaitGroup
	errs := make([]error, 2)
	bufs := make([][]float32, 2)
	for r, c := range comms {
		bufs[r] = make([]float32, n)
		for i := range bufs[r] {
			bufs[r][i] = float32(r*n + i)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 { // back and forth: each round the data swaps again
				if errs[r] = goccl.SendRecv(context.Background(), c, bufs[r], 1-r, bufs[r], 1-r, n); errs[r] != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	for r := range comms {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for i, v := range bufs[r] { // three swaps: the peer's data
			if want := float32((1-r)*n + i); v != want {
				t.Fatalf("rank %d: element %d is %v, want %v (the peer's)", r, i, v, want)
			}
		}
	}
}
