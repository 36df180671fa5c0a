package algo

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/goccl/goccl/internal/memlink"
	"github.com/goccl/goccl/transport"
)

// p2pMsg is a Msg of n int32 elements whose values encode (from, to, k).
func p2pMsg(peer int, seq uint64, n int, fill func(i int) int32) Msg {
	b := make([]byte, 4*n)
	if fill != nil {
		for i := 0; i < n; i++ {
			put(b, i, fill(i))
		}
	}
	return Msg{Peer: peer, Seq: seq, DType: 1, Count: uint64(n), Buf: b}
}

func p2pValue(from, to, k, i int) int32 { return int32(from*100003 + to*1009 + k*101 + i) }

// TestP2PGroupPatterns runs, over links whose Send waits for the receiver
// (depth 0: every send is a rendezvous), patterns that deadlock when each
// rank sends before it receives one message at a time: a ring shift, an
// all-pairs exchange (with messages to self), and several messages to the
// same peer, which must arrive in order.
func TestP2PGroupPatterns(t *testing.T) {
	patterns := map[string]func(r, n int) (to, from []int){
		"ring": func(r, n int) ([]int, []int) { return []int{(r + 1) % n}, []int{(r + n - 1) % n} },
		"allpairs": func(r, n int) ([]int, []int) {
			var to, from []int
			for p := 0; p < n; p++ {
				to, from = append(to, p), append(from, p)
			}
			return to, from
		},
		"repeat": func(r, n int) ([]int, []int) {
			a, b := (r+1)%n, (r+n-1)%n
			return []int{a, a, a}, []int{b, b, b}
		},
	}
	for name, pattern := range patterns {
		for _, n := range []int{2, 3, 5, 8} {
			for _, elems := range []int{0, 1, 70001} {
				t.Run(fmt.Sprintf("%s/P%d/n%d", name, n, elems), func(t *testing.T) {
					recvd := make([][]Msg, n)
					noErrors(t, runRanksOn(t, memlink.Mesh(n, 0), func(g *Group) error {
						r := g.Rank
						to, from := pattern(r, n)
						var sends, recvs []Msg
						seqTo, seqFrom := map[int]int{}, map[int]int{}
						for _, p := range to {
							k := seqTo[p]
							seqTo[p]++
							sends = append(sends, p2pMsg(p, uint64(k+1), elems, func(i int) int32 { return p2pValue(r, p, k, i) }))
						}
						for _, p := range from {
							seqFrom[p]++
							recvs = append(recvs, p2pMsg(p, uint64(seqFrom[p]), elems, func(int) int32 { return -1 }))
						}
						recvd[r] = recvs
						op := testOp(0, 0)
						return g.P2P(context.Background(), op, sends, recvs)
					}))
					for r := 0; r < n; r++ {
						k := map[int]int{}
						for _, m := range recvd[r] {
							for i := 0; i < elems; i++ {
								if got, want := get(m.Buf, i), p2pValue(m.Peer, r, k[m.Peer], i); got != want {
									t.Fatalf("rank %d: message %d from %d, element %d: got %d, want %d", r, k[m.Peer], m.Peer, i, got, want)
								}
							}
							k[m.Peer]++
						}
					}
				})
			}
		}
	}
}

// TestP2PGroupMismatch: a receive expecting more elements than the peer
// sends fails on that rank with a MismatchError, and the abort it causes
// fails the sender instead of leaving it blocked.
func TestP2PGroupMismatch(t *testing.T) {
	errs := runRanksOn(t, memlink.Mesh(2, 0), func(g *Group) error {
		op := testOp(0, 0)
		if g.Rank == 0 {
			return g.P2P(context.Background(), op, []Msg{p2pMsg(1, 1, 5, nil), p2pMsg(1, 2, 5, nil)}, nil)
		}
		return g.P2P(context.Background(), op, nil, []Msg{p2pMsg(0, 1, 6, nil)})
	})
	var mm *transport.MismatchError
	if !errors.As(errs[1], &mm) {
		t.Fatalf("receiver: got %v, want a *transport.MismatchError", errs[1])
	}
	if errs[0] == nil {
		t.Fatalf("sender: got nil, want an error after the receiver's abort")
	}
}
