package algo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/goccl/goccl/internal/memlink"
	"github.com/goccl/goccl/transport"
)

// arrivalCase is one schedule run by TestArrivalTravels: its name, world
// sizes, and whether rank r of n ends knowing every rank's entry.
type arrivalCase struct {
	name   string
	kind   Kind
	sizes  []int
	root   int
	learns func(r int) bool
	// emptyUnknown: with count 0 nothing crosses the hosts (AllReduceHier
	// skips the empty inter-host step), so no rank learns every entry.
	emptyUnknown bool
	run          func(ctx context.Context, g *Group, op *Op, count int) error
}

// arrivalCases are every row of the schedule table but CollNet's (its
// reduction goes through the aggregation tree, not the links), the
// Barrier and AllToAllv, each with the ranks that learn every entry: all
// of them for the kinds whose result depends on every rank, the root of
// Reduce and Gather, nobody in particular for Broadcast and Scatter.
func arrivalCases() []arrivalCase {
	var cases []arrivalCase
	for i := range schedules {
		row := &schedules[i]
		if row.Algo == CollNet {
			continue
		}
		c := arrivalCase{name: fmt.Sprintf("%d/%s", row.Kind, row.Algo), kind: row.Kind, sizes: []int{2, 3, 5, 8}, root: 1,
			learns: func(int) bool { return true }}
		if row.Algo == Hier {
			c.sizes = []int{4, 6}
			c.emptyUnknown = row.Kind == KindAllReduce
		}
		switch row.Kind {
		case KindBroadcast, KindScatter:
			c.learns = func(int) bool { return false }
		case KindReduce, KindGather:
			c.learns = func(r int) bool { return r == c.root }
		}
		c.run = func(ctx context.Context, g *Group, op *Op, count int) error {
			ns, nr := count, count
			switch row.Kind {
			case KindAllGather, KindGather:
				nr *= g.Size
			case KindReduceScatter, KindScatter:
				ns *= g.Size
			case KindAllToAll:
				ns, nr = ns*g.Size, nr*g.Size
			}
			return row.Run(ctx, g, op, Args{Send: make([]byte, 4*ns), Recv: make([]byte, 4*nr), Count: count, Root: c.root})
		}
		cases = append(cases, c)
	}
	all := func(int) bool { return true }
	cases = append(cases,
		arrivalCase{name: "barrier", kind: KindBarrier, sizes: []int{2, 3, 5, 8}, learns: all,
			run: func(ctx context.Context, g *Group, op *Op, _ int) error { return g.Barrier(ctx, op) }},
		arrivalCase{name: "alltoallv", kind: KindAllToAllv, sizes: []int{2, 3, 5, 8}, learns: all,
			run: func(ctx context.Context, g *Group, op *Op, count int) error {
				counts, displs := make([]int, g.Size), make([]int, g.Size)
				for p := range counts {
					counts[p], displs[p] = count, p*count
				}
				buf := make([]byte, 4*count*g.Size)
				return g.AllToAllv(ctx, op, buf, counts, displs, make([]byte, len(buf)), counts, displs)
			}})
	return cases
}

// TestArrivalTravels: every rank starts an operation with its own entry in
// op.Header.Arrival; when it ends, each rank whose result depends on every
// rank knows the last entry of all (rank, time, spread from the first).
// Whatever a rank ends with is an entry some rank made. (An empty
// hierarchical AllReduce is the exception the communicator knows of.)
func TestArrivalTravels(t *testing.T) {
	const base, ms = int64(1_767_225_600) * 1e9, int64(1e6)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range arrivalCases() {
		for _, n := range c.sizes {
			for _, count := range []int{0, 1, 1000} {
				t.Run(fmt.Sprintf("%s/P%d/n%d", c.name, n, count), func(t *testing.T) {
					order := rng.Perm(n) // rank r enters order[r] ms after the first
					last := 0
					for r := range n {
						if order[r] > order[last] {
							last = r
						}
					}
					want := transport.Arrival{Rank: int32(last), Spread: uint32((n - 1) * 1000), At: base + int64(n-1)*ms}
					got := make([]transport.Arrival, n)
					mesh := memlink.Mesh(n, 4)
					if c.name == fmt.Sprintf("%d/%s", c.kind, Direct) {
						mesh = memlink.MeshDirect(n, 4)
					}
					noErrors(t, runRanksOn(t, mesh, func(g *Group) error {
						ctx := context.Background()
						if c.name == fmt.Sprintf("%d/%s", c.kind, Direct) {
							if err := agree(g, true); err != nil {
								return err
							}
						}
						if c.name == fmt.Sprintf("%d/%s", c.kind, Hier) {
							h, err := NewHier(g, hostKeys(n/2, 2, false))
							if err != nil {
								return err
							}
							g.SetHier(h)
						}
						op := testOp(1, count)
						op.Header.Op = uint8(c.kind)
						if c.kind == KindBroadcast || c.kind == KindReduce || c.kind == KindGather || c.kind == KindScatter {
							op.Header.Root = int32(c.root)
						}
						op.Header.Arrival = transport.Arrival{Rank: int32(g.Rank), At: base + int64(order[g.Rank])*ms}
						err := c.run(ctx, g, op, count)
						got[g.Rank] = op.Header.Arrival
						return err
					}))
					for r, a := range got {
						if c.learns(r) && !(c.emptyUnknown && count == 0) && a != want {
							t.Errorf("rank %d knows %+v, want %+v (entries %v ms)", r, a, want, order)
						}
						if q := a.Rank; q < 0 || int(q) >= n || a.At != base+int64(order[q])*ms {
							t.Errorf("rank %d knows %+v, an entry nobody made (entries %v ms)", r, a, order)
						}
					}
				})
			}
		}
	}
}
