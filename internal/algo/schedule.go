package algo

import (
	"context"
	"fmt"
	"strings"
)

// Algorithm is an algorithm's name: GOCCL_ALGO's word for AllReduce's, and
// what the "X uses Y" log line and the trace report.
type Algorithm string

// The algorithms the code refers to by name (a row may name a new one
// without a constant).
const (
	Ring     Algorithm = "ring"     // ring steps (AllReduce: reduce-scatter then all-gather)
	RHD      Algorithm = "rhd"      // recursive halving-doubling (Rabenseifner)
	Tree     Algorithm = "tree"     // binomial trees
	RD       Algorithm = "rd"       // recursive doubling: log2 P exchanges of the whole vector
	Direct   Algorithm = "direct"   // single-copy reads and writes of the peers' buffers (direct.go)
	Hier     Algorithm = "hier"     // within each host, among the hosts, within each host (hier.go)
	CollNet  Algorithm = "collnet"  // in-network aggregation (Aggregator)
	Pairwise Algorithm = "pairwise" // P-1 pairwise exchanges
	Flat     Algorithm = "flat"     // the root exchanges with every rank
)

// Args are a begun call's buffers, count and root, as a schedule runs them.
type Args struct {
	Send, Recv []byte
	Count      int // elements
	Root       int // rooted kinds only
}

// Schedule is one row of the schedule table: one algorithm of one kind of
// collective, where it can run, when the tuner takes it and how it runs.
type Schedule struct {
	Kind Kind
	Algo Algorithm
	// Usable reports whether the row can run on the communicator s
	// describes (nil: always); Needs says what it checks, for the warning
	// about a GOCCL_ALGO that cannot run.
	Usable func(s *Selector) bool
	Needs  string
	// Pick is the tuner's test for a call whose largest buffer is nbytes:
	// the tuner runs the kind's first usable row that picks the call (nil:
	// every call, so that rows after it run only when forced).
	Pick func(s *Selector, nbytes int, inPlace bool) bool
	// OutOfPlace: the row never runs in place, not even when forced.
	OutOfPlace bool
	// PerRank: the log line reports one rank's block (count elements),
	// not the largest buffer.
	PerRank bool
	// Run runs a begun call on g.
	Run func(ctx context.Context, g *Group, op *Op, a Args) error

	bit int // the row's index among its kind's
}

// Bit is the row's index among its kind's rows (below 8): what a log that
// reports each algorithm once per kind keeps.
func (r *Schedule) Bit() int { return r.bit }

// Aggregator reduces in the network (CollNet): every attached rank's send
// goes up once and the reduction over them comes down into recv. op says
// what is reduced (Header: Seq, DType, RedOp; ElemSize).
type Aggregator interface {
	AllReduce(ctx context.Context, op *Op, send, recv []byte) error
}

// SetAggregator gives the group the aggregation tree the collnet schedule
// runs through (nil: none).
func (g *Group) SetAggregator(a Aggregator) { g.agg = a }

const (
	needsDirect  = "every rank to read every peer's memory (one host, Cross Memory Attach allowed)"
	needsHier    = "several hosts with the same number of ranks, more than one, on each"
	needsCollNet = "an attached aggregation tree (CollNet enabled and a goccl aggd to attach to)"
)

// schedules is the table: per kind, the rows in the tuner's order of
// preference. A kind's first row with no Pick is its flat schedule, what
// runs when no other row does. (Filled by init: AllReduceHier looks rows
// up.)
var schedules []Schedule

func init() {
	schedules = []Schedule{
		{Kind: KindAllReduce, Algo: CollNet, Usable: collNetAttached, Needs: needsCollNet, Pick: unforced, Run: runCollNet},
		{Kind: KindAllReduce, Algo: Direct, Usable: direct, Needs: needsDirect, Pick: overDirectMin,
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.AllReduceDirect(ctx, op, a.Send, a.Recv, a.Count)
			}},
		{Kind: KindAllReduce, Algo: Hier, Usable: hierarchical, Needs: needsHier, Pick: overHierMin(KindAllReduce),
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				h := g.hier
				return g.AllReduceHier(ctx, op, a.Send, a.Recv, a.Count, h, InterAlgorithm(h.Hosts, h.PerHost, a.Count*op.ElemSize))
			}},
		{Kind: KindAllReduce, Algo: RD,
			Pick: func(s *Selector, n int, inPlace bool) bool {
				return s.f.Size == 2 && (!inPlace || n <= rdMaxBytesInPlace2) || n <= rdMaxBytes
			},
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.AllReduceRD(ctx, op, a.Send, a.Recv, a.Count)
			}},
		{Kind: KindAllReduce, Algo: RHD, Pick: func(_ *Selector, n int, _ bool) bool { return n <= rhdMaxBytes },
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.AllReduceRHD(ctx, op, a.Send, a.Recv, a.Count)
			}},
		{Kind: KindAllReduce, Algo: Ring,
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				if g.hier != nil && g.hier.Ring != nil {
					g = g.hier.Ring // host-major: the ring enters and leaves each host once
				}
				return g.AllReduceRing(ctx, op, a.Send, a.Recv, a.Count)
			}},
		{Kind: KindAllReduce, Algo: Tree,
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.AllReduceTree(ctx, op, a.Send, a.Recv, a.Count)
			}},

		{Kind: KindBroadcast, Algo: Hier, Usable: hierarchical, Needs: needsHier, Pick: overHierMin(KindBroadcast),
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.BroadcastHier(ctx, op, a.Send, a.Recv, a.Count, a.Root, g.hier)
			}},
		{Kind: KindBroadcast, Algo: Direct, Usable: direct, Needs: needsDirect, Pick: overDirectMin,
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.BroadcastDirect(ctx, op, a.Send, a.Recv, a.Count, a.Root)
			}},
		{Kind: KindBroadcast, Algo: Tree,
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.Broadcast(ctx, op, a.Send, a.Recv, a.Count, a.Root)
			}},

		{Kind: KindReduce, Algo: Tree,
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.Reduce(ctx, op, a.Send, a.Recv, a.Count, a.Root)
			}},

		{Kind: KindAllGather, Algo: Hier, Usable: hierarchical, Needs: needsHier, Pick: overHierMin(KindAllGather),
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.AllGatherHier(ctx, op, a.Send, a.Recv, a.Count, g.hier)
			}},
		{Kind: KindAllGather, Algo: Direct, Usable: direct, Needs: needsDirect, Pick: overDirectMin, PerRank: true,
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.AllGatherDirect(ctx, op, a.Send, a.Recv, a.Count)
			}},
		{Kind: KindAllGather, Algo: Ring, PerRank: true,
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.AllGather(ctx, op, a.Send, a.Recv, a.Count)
			}},

		{Kind: KindReduceScatter, Algo: Hier, Usable: hierarchical, Needs: needsHier, Pick: overHierMin(KindReduceScatter),
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.ReduceScatterHier(ctx, op, a.Send, a.Recv, a.Count, g.hier)
			}},
		{Kind: KindReduceScatter, Algo: Direct, Usable: direct, Needs: needsDirect, Pick: overDirectMin, PerRank: true,
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.ReduceScatterDirect(ctx, op, a.Send, a.Recv, a.Count)
			}},
		{Kind: KindReduceScatter, Algo: Ring, PerRank: true,
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.ReduceScatter(ctx, op, a.Send, a.Recv, a.Count)
			}},

		// In place, the pairwise exchange from a copy was faster than writing
		// into peers that have just read their own buffers (2 ranks, 128 KiB:
		// 11.8 against 16.5 µs).
		{Kind: KindAllToAll, Algo: Direct, Usable: direct, Needs: needsDirect, Pick: overDirectMin, OutOfPlace: true,
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.AllToAllDirect(ctx, op, a.Send, a.Recv, a.Count)
			}},
		{Kind: KindAllToAll, Algo: Pairwise,
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				send := a.Send
				if sameStart(a.Send, a.Recv) && len(send) > 0 {
					send = g.Scratch(len(a.Send)) // AllToAll uses no scratch of its own
					copy(send, a.Send)
				}
				return g.AllToAll(ctx, op, send, a.Recv, a.Count)
			}},

		{Kind: KindGather, Algo: Flat, PerRank: true,
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.Gather(ctx, op, a.Send, a.Recv, a.Count, a.Root)
			}},
		{Kind: KindScatter, Algo: Flat, PerRank: true,
			Run: func(ctx context.Context, g *Group, op *Op, a Args) error {
				return g.Scatter(ctx, op, a.Send, a.Recv, a.Count, a.Root)
			}},
	}
	var n [NumKinds]int
	for i := range schedules {
		r := &schedules[i]
		r.bit = n[r.Kind]
		n[r.Kind]++
	}
}

// The rows' tests.
func direct(s *Selector) bool          { return s.f.Direct }
func hierarchical(s *Selector) bool    { return s.Hierarchical() }
func collNetAttached(s *Selector) bool { return s.f.CollNet }

func unforced(s *Selector, _ int, _ bool) bool { return s.f.Forced == "" }

func overDirectMin(s *Selector, n int, _ bool) bool { return n >= s.f.DirectMin*(s.f.Size-1) }

func overHierMin(k Kind) func(*Selector, int, bool) bool {
	return func(s *Selector, n int, _ bool) bool { return n >= s.hierMin[k] }
}

// runCollNet reduces through the aggregation tree: on several hosts of
// several ranks, NCCL's CollNet chain (within the host over the links, each
// local index's share through the tree), else every rank's whole buffer.
func runCollNet(ctx context.Context, g *Group, op *Op, a Args) error {
	if g.agg == nil {
		return fmt.Errorf("algo: no aggregation tree attached")
	}
	if h := g.hier; h.Hierarchical() {
		return g.AllReduceHierVia(ctx, op, a.Send, a.Recv, a.Count, h, func(ctx context.Context, _ *Op, chunk []byte, _ int) error {
			return g.agg.AllReduce(ctx, op, chunk, chunk)
		})
	}
	return g.agg.AllReduce(ctx, op, a.Send, a.Recv)
}

// Lookup is the table's row of algorithm a for kind k (nil: none).
func Lookup(k Kind, a Algorithm) *Schedule {
	for i := range schedules {
		if r := &schedules[i]; r.Kind == k && r.Algo == a {
			return r
		}
	}
	return nil
}

// ParseForced is the AllReduce algorithm GOCCL_ALGO's word names ("": none
// forced); an error when no AllReduce row has that name.
func ParseForced(word string) (Algorithm, error) {
	if word == "" || Lookup(KindAllReduce, Algorithm(word)) != nil {
		return Algorithm(word), nil
	}
	var names []string
	for _, r := range schedules {
		if r.Kind == KindAllReduce {
			names = append(names, string(r.Algo))
		}
	}
	return "", fmt.Errorf("no AllReduce algorithm %q (have %s)", word, strings.Join(names, ", "))
}
