package algo

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/memlink"
	"github.com/goccl/goccl/transport"
)

// vcount is how many elements rank src sends rank dst in the AllToAllv
// tests: uneven, and zero for some pairs.
func vcount(src, dst, base int) int { return (base*(src+1) + 3*dst) % (base + 2) }

// vlayout lays out n blocks of sizes cnt(p) in reverse peer order with a
// one-element gap before each (so displacements are neither sorted by peer
// nor contiguous); it returns the displacements and the elements spanned.
func vlayout(n int, cnt func(p int) int) (displs []int, span int) {
	displs = make([]int, n)
	for p := n - 1; p >= 0; p-- {
		span++
		displs[p] = span
		span += cnt(p)
	}
	return displs, span
}

func TestAllToAllv(t *testing.T) {
	for _, n := range sizes {
		for _, base := range []int{0, 1, 5, 1000, 70001} {
			for _, inline := range []bool{false, true} {
				t.Run(fmt.Sprintf("P%d/base%d/inline=%v", n, base, inline), func(t *testing.T) {
					mesh := memlink.Mesh(n, 4)
					if inline {
						mesh = memlink.MeshInline(n, 4)
					}
					recvs := make([][]byte, n)
					rdispls := make([][]int, n)
					noErrors(t, runRanksOn(t, mesh, func(g *Group) error {
						r := g.Rank
						sc := make([]int, n)
						rc := make([]int, n)
						for p := 0; p < n; p++ {
							sc[p], rc[p] = vcount(r, p, base), vcount(p, r, base)
						}
						sd, sspan := vlayout(n, func(p int) int { return sc[p] })
						rd, rspan := vlayout(n, func(p int) int { return rc[p] })
						send := make([]byte, 4*sspan)
						for i := 0; i < sspan; i++ {
							put(send, i, input(r, i))
						}
						recv := make([]byte, 4*rspan)
						for i := 0; i < rspan; i++ {
							put(recv, i, -1)
						}
						recvs[r], rdispls[r] = recv, rd
						op := testOp(1, 0)
						if err := g.AllToAllv(context.Background(), op, send, sc, sd, recv, rc, rd); err != nil {
							return err
						}
						if op.Header.Count != 0 {
							return fmt.Errorf("header count left at %d", op.Header.Count)
						}
						return nil
					}))
					for r := 0; r < n; r++ {
						for q := 0; q < n; q++ {
							// What q sent r: q's send block r.
							sd, _ := vlayout(n, func(p int) int { return vcount(q, p, base) })
							for i := 0; i < vcount(q, r, base); i++ {
								if got, want := get(recvs[r], rdispls[r][q]+i), input(q, sd[r]+i); got != want {
									t.Fatalf("rank %d from %d elem %d: got %d want %d", r, q, i, got, want)
								}
							}
							if gap := get(recvs[r], rdispls[r][q]-1); gap != -1 {
								t.Fatalf("rank %d: gap before peer %d's block overwritten (%d)", r, q, gap)
							}
						}
					}
				})
			}
		}
	}
}

// TestAllToAllvCountMismatch: a rank that sends a peer another count than
// the peer expects makes the peer fail on "count" with both values, and no
// rank hangs (the sender may finish first: its message was taken).
func TestAllToAllvCountMismatch(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		errs := runRanks(t, n, func(g *Group) error {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sc, rc, d := make([]int, n), make([]int, n), make([]int, n)
			for p := range sc {
				sc[p], rc[p], d[p] = 4, 4, 4*p
			}
			if g.Rank == 0 {
				sc[1] = 3 // rank 1 expects 4
			}
			buf := make([]byte, 4*4*n)
			out := make([]byte, 4*4*n)
			return g.AllToAllv(ctx, testOp(1, 0), buf, sc, d, out, rc, d)
		})
		var mm *transport.MismatchError
		if !errors.As(errs[1], &mm) || mm.Field != "count" || mm.Want != 4 || mm.Got != 3 || mm.Peer != 0 {
			t.Fatalf("P%d: rank 1 got %v, want a count mismatch with peer 0 (want 4, got 3)", n, errs[1])
		}
	}
}

func TestGatherScatter(t *testing.T) {
	for _, n := range sizes {
		for _, count := range []int{0, 1, 7, 1000, 300007} {
			for root := 0; root < n; root++ {
				if count > 1000 && root > 1 || raceTrim(n, count) {
					continue
				}
				for _, inPlace := range []bool{false, true} {
					name := fmt.Sprintf("P%d/n%d/root%d/inplace=%v", n, count, root, inPlace)
					var gathered []byte
					scattered := make([][]byte, n)
					noErrors(t, runRanksOn(t, memlink.Mesh(n, 4), func(g *Group) error {
						r := g.Rank
						ctx := context.Background()
						// Gather
						send := make([]byte, 4*count)
						var recv []byte
						if r == root {
							recv = make([]byte, 4*count*n)
							gathered = recv
							if inPlace {
								send = recv[4*count*r : 4*count*(r+1)]
							}
						}
						for i := 0; i < count; i++ {
							put(send, i, input(r, i))
						}
						op := testOp(1, count)
						op.Header.Root = int32(root)
						if err := g.Gather(ctx, op, send, recv, count, root); err != nil {
							return fmt.Errorf("gather: %w", err)
						}
						// Scatter
						var ssend []byte
						srecv := make([]byte, 4*count)
						if r == root {
							ssend = make([]byte, 4*count*n)
							for i := 0; i < count*n; i++ {
								put(ssend, i, input(r, i))
							}
							if inPlace {
								srecv = ssend[4*count*r : 4*count*(r+1)]
							}
						}
						scattered[r] = srecv
						op.Header.Seq = 2
						if err := g.Scatter(ctx, op, ssend, srecv, count, root); err != nil {
							return fmt.Errorf("scatter: %w", err)
						}
						return nil
					}))
					for q := 0; q < n; q++ {
						for i := 0; i < count; i++ {
							if got, want := get(gathered, q*count+i), input(q, i); got != want {
								t.Fatalf("%s: gather block %d elem %d: got %d want %d", name, q, i, got, want)
							}
							if got, want := get(scattered[q], i), input(root, q*count+i); got != want {
								t.Fatalf("%s: scatter rank %d elem %d: got %d want %d", name, q, i, got, want)
							}
						}
					}
				}
			}
		}
	}
}

// TestGatherScatterMismatch: a count disagreement fails the receiving rank
// (the root of a Gather, the rank of a Scatter) with a count mismatch naming
// both values, and no rank hangs. (A root disagreement can leave ranks
// waiting on a peer that never sends, as for Broadcast: GOCCL_DEBUG_CHECK
// catches it.)
func TestGatherScatterMismatch(t *testing.T) {
	for _, gather := range []bool{true, false} {
		const n = 3
		errs := runRanks(t, n, func(g *Group) error {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			count := 8
			if g.Rank == 2 {
				count = 9
			}
			op := testOp(1, count)
			op.Header.Root = 0
			big := make([]byte, 4*9*n)
			small := make([]byte, 4*9)
			if gather {
				return g.Gather(ctx, op, small, big, count, 0)
			}
			return g.Scatter(ctx, op, big, small, count, 0)
		})
		detector, want, got := 2, uint64(9), uint64(8)
		if gather {
			detector, want, got = 0, 8, 9
		}
		var mm *transport.MismatchError
		if !errors.As(errs[detector], &mm) || mm.Field != "count" || mm.Want != want || mm.Got != got {
			t.Errorf("gather=%v: rank %d got %v, want a count mismatch (%d against %d)", gather, detector, errs[detector], want, got)
		}
	}
}
