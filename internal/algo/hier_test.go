package algo

import (
	"context"
	"fmt"
	"testing"
)

// hostKeys lays out n ranks on hosts: layout "blocked" puts ranks
// 0..L-1 on host 0 and so on; "strided" deals them out round robin (rank r
// on host r%H), so that the host-major ring differs from the rank order.
func hostKeys(hosts, perHost int, strided bool) []string {
	keys := make([]string, hosts*perHost)
	for r := range keys {
		h := r / perHost
		if strided {
			h = r % hosts
		}
		keys[r] = fmt.Sprintf("host%d", h)
	}
	return keys
}

func TestNewHier(t *testing.T) {
	errs := runRanks(t, 6, func(g *Group) error {
		h, err := NewHier(g, hostKeys(3, 2, true)) // hosts: {0,3} {1,4} {2,5}
		if err != nil {
			return err
		}
		if h.Hosts != 3 || h.PerHost != 2 || !h.Hierarchical() {
			return fmt.Errorf("rank %d: %+v", g.Rank, h)
		}
		if want := []int{0, 1, 2, 0, 1, 2}; fmt.Sprint(h.HostOf) != fmt.Sprint(want) {
			return fmt.Errorf("HostOf %v", h.HostOf)
		}
		if want := []int{0, 0, 0, 1, 1, 1}; fmt.Sprint(h.LocalOf) != fmt.Sprint(want) {
			return fmt.Errorf("LocalOf %v", h.LocalOf)
		}
		if h.Local.Size != 2 || h.Inter.Size != 3 || h.Ring.Size != 6 {
			return fmt.Errorf("sizes %d %d %d", h.Local.Size, h.Inter.Size, h.Ring.Size)
		}
		if h.Inter.Rank != h.HostOf[g.Rank] || h.Local.Rank != h.LocalOf[g.Rank] {
			return fmt.Errorf("rank %d: inter rank %d, local rank %d", g.Rank, h.Inter.Rank, h.Local.Rank)
		}
		// The host-major ring: 0 3 1 4 2 5.
		if want := []int{0, 3, 1, 4, 2, 5}; fmt.Sprint(h.Ring.ranks) != fmt.Sprint(want) {
			return fmt.Errorf("ring order %v", h.Ring.ranks)
		}
		return nil
	})
	noErrors(t, errs)
	// Uneven hosts: no hierarchical schedules, an ordered ring still.
	errs = runRanks(t, 3, func(g *Group) error {
		h, err := NewHier(g, []string{"a", "a", "b"})
		if err != nil {
			return err
		}
		if h.Hierarchical() || h.PerHost != 0 || h.Ring == nil {
			return fmt.Errorf("%+v", h)
		}
		if err := g.AllReduceHier(context.Background(), testOp(1, 3), make([]byte, 12), make([]byte, 12), 3, h, Ring); err == nil {
			return fmt.Errorf("AllReduceHier ran on uneven hosts")
		}
		return nil
	})
	noErrors(t, errs)
	if _, err := (&Group{Rank: 0, Size: 2}).Sub([]int{1, 1}); err == nil {
		t.Error("Sub with a repeated rank")
	}
	if _, err := (&Group{Rank: 0, Size: 2}).Sub([]int{1}); err == nil {
		t.Error("Sub without this rank")
	}
}

// TestHierCollectives: the hierarchical schedules (and the flat ring over
// the host-major order) give every rank the same result as the flat
// schedules, for hosts × ranks per host of 2×2, 3×2, 2×3, 4×2, blocked and
// strided rank layouts, counts from 0 to several chunks.
func TestHierCollectives(t *testing.T) {
	// Pieces of 4 KiB: the larger counts run AllReduceHier's pipeline.
	defer func(b, c int) { hierPieceBytes, hierChainMinBytes = b, c }(hierPieceBytes, hierChainMinBytes)
	hierPieceBytes = 4 << 10
	hierChainMinBytes = 64 << 10 // the largest count broadcasts along a chain of hosts
	shapes := [][2]int{{2, 2}, {3, 2}, {2, 3}, {4, 2}}
	for _, shape := range shapes {
		H, L := shape[0], shape[1]
		n := H * L
		for _, strided := range []bool{false, true} {
			for _, count := range []int{0, 1, 5, 1000, 30011} {
				name := fmt.Sprintf("H%dxL%d/strided=%v/n%d", H, L, strided, count)
				t.Run(name, func(t *testing.T) {
					keys := hostKeys(H, L, strided)
					wantSum := make([]int32, count)
					for r := 0; r < n; r++ {
						for i := range wantSum {
							wantSum[i] += input(r, i)
						}
					}
					errs := runRanks(t, n, func(g *Group) error {
						ctx := context.Background()
						h, err := NewHier(g, keys)
						if err != nil {
							return err
						}
						seq := uint64(0)
						mk := func(f func(i int) int32, c int) []byte {
							b := make([]byte, 4*c)
							for i := 0; i < c; i++ {
								put(b, i, f(i))
							}
							return b
						}
						check := func(what string, got []byte, want func(i int) int32, c int) error {
							for i := 0; i < c; i++ {
								if get(got, i) != want(i) {
									return fmt.Errorf("rank %d %s: element %d = %d, want %d", g.Rank, what, i, get(got, i), want(i))
								}
							}
							return nil
						}
						// AllReduce, in and out of place, with the ring and RHD across hosts.
						for _, a := range []Algorithm{Ring, RHD} {
							seq++
							buf := mk(func(i int) int32 { return input(g.Rank, i) }, count)
							if err := g.AllReduceHier(ctx, testOp(seq, count), buf, buf, count, h, a); err != nil {
								return err
							}
							if err := check("AllReduceHier in place", buf, func(i int) int32 { return wantSum[i] }, count); err != nil {
								return err
							}
							seq++
							send := mk(func(i int) int32 { return input(g.Rank, i) }, count)
							out := make([]byte, 4*count)
							if err := g.AllReduceHier(ctx, testOp(seq, count), send, out, count, h, a); err != nil {
								return err
							}
							if err := check("AllReduceHier out of place", out, func(i int) int32 { return wantSum[i] }, count); err != nil {
								return err
							}
							if err := check("AllReduceHier's input", send, func(i int) int32 { return input(g.Rank, i) }, count); err != nil {
								return err
							}
						}
						// The flat ring over the host-major order.
						seq++
						buf := mk(func(i int) int32 { return input(g.Rank, i) }, count)
						if err := h.Ring.AllReduceRing(ctx, testOp(seq, count), buf, buf, count); err != nil {
							return err
						}
						if err := check("ordered ring", buf, func(i int) int32 { return wantSum[i] }, count); err != nil {
							return err
						}
						// Broadcast from every root.
						for root := 0; root < n; root++ {
							seq++
							send := mk(func(i int) int32 { return input(root, i) }, count)
							out := make([]byte, 4*count)
							if err := g.BroadcastHier(ctx, testOp(seq, count), send, out, count, root, h); err != nil {
								return err
							}
							if err := check(fmt.Sprintf("BroadcastHier root %d", root), out, func(i int) int32 { return input(root, i) }, count); err != nil {
								return err
							}
						}
						// AllGather: block r from rank r.
						seq++
						all := make([]byte, 4*count*n)
						if err := g.AllGatherHier(ctx, testOp(seq, count), mk(func(i int) int32 { return input(g.Rank, i) }, count), all, count, h); err != nil {
							return err
						}
						if err := check("AllGatherHier", all, func(i int) int32 { return input(i/max(count, 1), i%max(count, 1)) }, count*n); err != nil {
							return err
						}
						// ReduceScatter: rank r gets the sum of every rank's block r.
						seq++
						in := mk(func(i int) int32 { return input(g.Rank, i) }, count*n)
						out := make([]byte, 4*count)
						if err := g.ReduceScatterHier(ctx, testOp(seq, count), in, out, count, h); err != nil {
							return err
						}
						return check("ReduceScatterHier", out, func(i int) int32 {
							var s int32
							for q := 0; q < n; q++ {
								s += input(q, g.Rank*count+i)
							}
							return s
						}, count)
					})
					noErrors(t, errs)
				})
			}
		}
	}
}

// TestHierPipelineAbort: a rank that fails during the pipelined
// AllReduceHier makes every rank return an error (no rank waits forever on
// a piece that never comes, no goroutine is left sending).
func TestHierPipelineAbort(t *testing.T) {
	defer func(b int) { hierPieceBytes = b }(hierPieceBytes)
	hierPieceBytes = 1 << 10
	count := 20000
	errs := runRanks(t, 4, func(g *Group) error {
		h, err := NewHier(g, hostKeys(2, 2, false))
		if err != nil {
			return err
		}
		if g.Rank == 3 {
			g.Abort() // rank 3 dies before its first message
			return nil
		}
		buf := make([]byte, 4*count)
		if err := g.AllReduceHier(context.Background(), testOp(1, count), buf, buf, count, h, Ring); err == nil {
			return fmt.Errorf("rank %d: AllReduceHier succeeded without rank 3", g.Rank)
		}
		return nil
	})
	noErrors(t, errs)
}
