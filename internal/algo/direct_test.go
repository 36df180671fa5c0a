package algo

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/memlink"
	"github.com/goccl/goccl/transport"
)

// agree runs AgreeDirect and fails unless it gives want.
func agree(g *Group, want bool) error {
	op := testOp(100, 1)
	got, err := g.AgreeDirect(context.Background(), op)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("rank %d: AgreeDirect = %v, want %v", g.Rank, got, want)
	}
	return nil
}

// hidden hides a link's PeerMemory methods.
type hidden struct{ transport.Link }

func TestAgreeDirect(t *testing.T) {
	for _, n := range []int{2, 3, 5, 8} {
		noErrors(t, runRanksOn(t, memlink.MeshDirect(n, 4), func(g *Group) error { return agree(g, true) }))
		noErrors(t, runRanksOn(t, memlink.MeshInline(n, 4), func(g *Group) error { return agree(g, false) }))
		// One link of one rank without peer memory access: nobody uses it.
		mesh := memlink.MeshDirect(n, 4)
		mesh[n-1][0] = hidden{mesh[n-1][0]}
		noErrors(t, runRanksOn(t, mesh, func(g *Group) error { return agree(g, false) }))
	}
	// A direct schedule on a group that did not agree is an error, not a hang.
	errs := runRanksOn(t, memlink.MeshInline(2, 4), func(g *Group) error {
		return g.AllReduceDirect(context.Background(), testOp(1, 4), make([]byte, 16), make([]byte, 16), 4)
	})
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: direct AllReduce without AgreeDirect succeeded", r)
		}
	}
}

func TestAllReduceDirect(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5, 7, 8} {
		for _, count := range []int{0, 1, 7, 13, 1000, 300007} {
			if raceTrim(n, count) {
				continue
			}
			testAllReduceDirect(t, n, count)
		}
	}
}

func testAllReduceDirect(t *testing.T, n, count int) {
	t.Run(fmt.Sprintf("P%d/n%d", n, count), func(t *testing.T) {
		bufs := make([][]byte, n)
		outs := make([][]byte, n)
		sends := make([][]byte, n)
		noErrors(t, runRanksOn(t, memlink.MeshDirect(n, 4), func(g *Group) error {
			if err := agree(g, true); err != nil {
				return err
			}
			buf := make([]byte, 4*count)
			send := make([]byte, 4*count)
			for i := 0; i < count; i++ {
				put(buf, i, input(g.Rank, i))
				put(send, i, input(g.Rank, i))
			}
			bufs[g.Rank], sends[g.Rank] = buf, send
			op := testOp(1, count)
			if err := g.AllReduceDirect(context.Background(), op, buf, buf, count); err != nil {
				return err
			}
			out := make([]byte, 4*count)
			outs[g.Rank] = out
			op.Header.Seq = 2
			if g.Rank%2 == 0 {
				op.Reduce3 = sum3Int32
			}
			return g.AllReduceDirect(context.Background(), op, send, out, count)
		}))
		for r := 0; r < n; r++ {
			for i := 0; i < count; i++ {
				var want int32
				for q := 0; q < n; q++ {
					want += input(q, i)
				}
				if got := get(bufs[r], i); got != want {
					t.Fatalf("in place: rank %d elem %d: got %d want %d", r, i, got, want)
				}
				if got := get(outs[r], i); got != want {
					t.Fatalf("out of place: rank %d elem %d: got %d want %d", r, i, got, want)
				}
				if get(sends[r], i) != input(r, i) {
					t.Fatalf("out of place: rank %d's send buffer was modified", r)
				}
			}
		}
	})
}

func TestDataMovementDirect(t *testing.T) {
	for _, n := range []int{2, 3, 4, 6} {
		for _, count := range []int{0, 1, 7, 70001} {
			if raceTrim(n, count) {
				continue
			}
			t.Run(fmt.Sprintf("P%d/n%d", n, count), func(t *testing.T) {
				ag := make([][]byte, n)
				rs := make([][]byte, n)
				rsIn := make([][]byte, n)
				a2a := make([][]byte, n)
				bc := make([][]byte, n)
				noErrors(t, runRanksOn(t, memlink.MeshDirect(n, 4), func(g *Group) error {
					if err := agree(g, true); err != nil {
						return err
					}
					ctx := context.Background()
					r := g.Rank
					buf := make([]byte, 4*count*n)
					for i := 0; i < count; i++ {
						put(buf[4*count*r:], i, input(r, i))
					}
					ag[r] = buf
					if err := g.AllGatherDirect(ctx, testOp(1, count), buf[4*count*r:4*count*(r+1)], buf, count); err != nil {
						return err
					}
					send := make([]byte, 4*count*n)
					for i := 0; i < count*n; i++ {
						put(send, i, input(r, i))
					}
					recv := make([]byte, 4*count)
					rs[r] = recv
					if err := g.ReduceScatterDirect(ctx, testOp(2, count), send, recv, count); err != nil {
						return err
					}
					for i := 0; i < count*n; i++ {
						if get(send, i) != input(r, i) {
							return errors.New("reduce-scatter modified send")
						}
					}
					rsIn[r] = send
					if err := g.ReduceScatterDirect(ctx, testOp(3, count), send, send[4*count*r:4*count*(r+1)], count); err != nil {
						return err
					}
					in := make([]byte, 4*count*n)
					for i := 0; i < count*n; i++ {
						put(in, i, input(r, i))
					}
					a2a[r] = make([]byte, 4*count*n)
					if err := g.AllToAllDirect(ctx, testOp(4, count), in, a2a[r], count); err != nil {
						return err
					}
					// Broadcast from every root in turn, out of place on the root.
					bc[r] = make([]byte, 4*count*n)
					for root := 0; root < n; root++ {
						op := testOp(uint64(5+root), count)
						op.Header.Root = int32(root)
						var src []byte
						dst := bc[r][4*count*root:]
						if r == root {
							src = in[4*count*root : 4*count*(root+1)]
							if root%2 == 1 { // in place on odd roots
								copy(dst, src)
								src = dst
							}
						}
						if err := g.BroadcastDirect(ctx, op, src, dst, count, root); err != nil {
							return err
						}
					}
					return nil
				}))
				for r := 0; r < n; r++ {
					for q := 0; q < n; q++ {
						for i := 0; i < count; i++ {
							if got := get(ag[r], q*count+i); got != input(q, i) {
								t.Fatalf("allgather rank %d block %d elem %d: got %d", r, q, i, got)
							}
							if got, want := get(a2a[r], q*count+i), input(q, r*count+i); got != want {
								t.Fatalf("alltoall rank %d block %d elem %d: got %d want %d", r, q, i, got, want)
							}
							if got, want := get(bc[r], q*count+i), input(q, q*count+i); got != want {
								t.Fatalf("broadcast root %d rank %d elem %d: got %d want %d", q, r, i, got, want)
							}
						}
					}
					for i := 0; i < count; i++ {
						var want int32
						for q := 0; q < n; q++ {
							want += input(q, r*count+i)
						}
						if got := get(rs[r], i); got != want {
							t.Fatalf("reducescatter rank %d elem %d: got %d want %d", r, i, got, want)
						}
						if got := get(rsIn[r], r*count+i); got != want {
							t.Fatalf("in-place reducescatter rank %d elem %d: got %d want %d", r, i, got, want)
						}
					}
				}
			})
		}
	}
}

// TestDirectMismatchFailsEverywhere: ranks that disagree on the count fail
// on every rank (the control messages carry the header), never hang.
func TestDirectMismatchFailsEverywhere(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		errs := runRanksOn(t, memlink.MeshDirect(n, 4), func(g *Group) error {
			if err := agree(g, true); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			count := 1000
			if g.Rank == n-1 {
				count = 1001
			}
			buf := make([]byte, 4*count)
			return g.AllReduceDirect(ctx, testOp(1, count), buf, buf, count)
		})
		for r, err := range errs {
			if err == nil {
				t.Fatalf("P%d rank %d: mismatched counts gave no error", n, r)
			}
		}
	}
}

func sumFloat32(dst, src []byte) {
	for i := 0; i+4 <= len(dst); i += 4 {
		a := math.Float32frombits(binary.LittleEndian.Uint32(dst[i:]))
		b := math.Float32frombits(binary.LittleEndian.Uint32(src[i:]))
		binary.LittleEndian.PutUint32(dst[i:], math.Float32bits(a+b))
	}
}

// TestAllReduceDirectBitIdentical: float sums depend on the order of the
// additions; every rank must still end with the same bits.
func TestAllReduceDirectBitIdentical(t *testing.T) {
	for _, inPlace := range []bool{false, true} {
		for _, n := range []int{2, 3, 5, 8} {
			count := 100003
			outs := make([][]byte, n)
			noErrors(t, runRanksOn(t, memlink.MeshDirect(n, 4), func(g *Group) error {
				if err := agree(g, true); err != nil {
					return err
				}
				send := make([]byte, 4*count)
				for i := 0; i < count; i++ {
					// Magnitudes from 1e-3 to 1e5: sums round differently by order.
					v := float32(input(g.Rank, i)%1000) * float32(math.Pow(10, float64((g.Rank+i)%9-3)))
					binary.LittleEndian.PutUint32(send[4*i:], math.Float32bits(v))
				}
				outs[g.Rank] = make([]byte, 4*count)
				if inPlace {
					copy(outs[g.Rank], send)
					send = outs[g.Rank]
				}
				op := &Op{Header: transport.Header{Seq: 1, Count: uint64(count), Root: -1}, ElemSize: 4, Reduce: sumFloat32}
				return g.AllReduceDirect(context.Background(), op, send, outs[g.Rank], count)
			}))
			for r := 1; r < n; r++ {
				if !bytes.Equal(outs[r], outs[0]) {
					t.Fatalf("in place %v, P%d: rank %d's result differs from rank 0's", inPlace, n, r)
				}
			}
		}
	}
}
