package goccl

import (
	"log/slog"

	"github.com/goccl/goccl/internal/algo"
)

// The tuner, measured with 2 and (oversubscribed) 4 ranks on a 2-core host
// over shared memory (docs/benchmarks.md, "tuner"):
//   - every collective but Reduce runs a direct (single-copy) schedule when
//     the group allows it (Group.Direct) from directMinBytes*(P-1) bytes of
//     the operation's largest buffer: with 2 ranks the direct schedules won
//     from 16 KiB on (at 16 KiB 1.5-2.6 against 1.8-2.9 µs, at 256 KiB 8-22
//     against 16-26 µs) and lost below; with 4 ranks they lost at 16 KiB
//     (24-32 against 16-17 µs) and won from 128 KiB (AllReduce at 1 MiB 293
//     against 533 µs). Their control rounds grow with P-1.
//
// The AllReduce algorithms below it:
//   - 2 ranks: recursive doubling, one exchange of the whole vector, where
//     ring and halving-doubling are two exchanges of halves: the same bytes
//     moved and one synchronisation fewer (8-byte latency 0.59 µs median
//     against 1.15 µs; equal or better bandwidth from 64 KiB to 64 MiB out
//     of place). In place it folds into the buffer it sends, which is only
//     free once the link has taken the whole message; above
//     rdMaxBytesInPlace2 it then needs a scratch pass and the ring wins
//     (3.4 against 5.5 GB/s at 4 MiB).
//   - more ranks: recursive doubling up to rdMaxBytes (it moves log2 P whole
//     vectors, so it loses once bandwidth dominates), halving-doubling
//     (log2 P latency terms) up to rhdMaxBytes, the ring (P-1 latency terms,
//     no rank sends more than 2n(P-1)/P) above.
//
// Across hosts (several hosts with the same number of ranks each, more
// than one, from the host identities of Init): the hierarchical schedules
// (internal/algo/hier.go), which cross the network once per host instead of
// once per rank, from a size per operation (hierMin), below it the flat
// algorithms (the ring in host-major order). Init measures the links
// (GOCCL_TUNER_PROBE, tunerprobe.go): rank 0 times round trips and
// transfers within its host and to the next host, and the Hockney
// (alpha-beta) cost model of algo.CostModel — the per-algorithm costs of
// Thakur, Rabenseifner and Gropp, "Optimization of Collective
// Communication Operations in MPICH" (IJHPCA, 2005), round by round, a
// round taking its slowest message, the messages that leave one host at
// once sharing its link — predicts the flat and the hierarchical schedule
// of AllReduce, Broadcast, AllGather and ReduceScatter at every power of
// two; the crossover is the size from which the hierarchical one is
// predicted faster at every larger size (never, if not at 1 GiB). Rank 0
// broadcasts measurements and crossovers, so every rank decides alike, and
// a collective compares its size with one number. Without the probe (0,
// GOCCL_ALGO set, unusable measurements) the crossover is hierMinBytes for
// all four. Among the hosts, AllReduceHier reduces each rank's chunk with
// recursive doubling up to rdMaxBytes, halving-doubling up to rhdMaxBytes
// and the ring above, as for a flat group.
const (
	hierMinBytes       = 64 << 10
	directMinBytes     = 16 << 10
	rdMaxBytes         = 32 << 10
	rdMaxBytesInPlace2 = 2 << 20
	rhdMaxBytes        = 256 << 10
)

// chooseAllReduce picks the AllReduce algorithm for an nbytes vector: the
// one GOCCL_ALGO forces (if the group can run it), else the tuner's choice.
func (c *Comm) chooseAllReduce(nbytes int, inPlace bool) algo.Algorithm {
	a := c.algoForced
	if a == algo.Direct && !c.group.Direct() || a == algo.Hier && !c.hierarchical() {
		a = algo.Auto
	}
	if a == algo.Auto {
		switch {
		case c.group.Direct() && nbytes >= c.directMin*(c.size-1):
			a = algo.Direct
		case c.hierarchical() && nbytes >= c.hierMin[opAllReduce]:
			a = algo.Hier
		default:
			a = flatAllReduce(c.size, nbytes, inPlace)
		}
	}
	return a
}

// flatAllReduce is the tuner's AllReduce algorithm for size ranks when
// neither the direct nor the hierarchical schedule runs.
func flatAllReduce(size, nbytes int, inPlace bool) algo.Algorithm {
	switch {
	case size == 2 && (!inPlace || nbytes <= rdMaxBytesInPlace2), nbytes <= rdMaxBytes:
		return algo.RD
	case nbytes <= rhdMaxBytes:
		return algo.RHD
	}
	return algo.Ring
}

// useDirect reports whether an operation of kind whose largest buffer is
// nbytes runs its direct (single-copy) schedule rather than the one named
// other, and logs which (once; size is the bytes the log reports).
func (c *Comm) useDirect(kind opKind, nbytes, size int, other string) bool {
	var direct bool
	switch c.algoForced {
	case algo.Auto, algo.Direct:
		direct = c.group.Direct() && (nbytes >= c.directMin*(c.size-1) || c.algoForced == algo.Direct)
	}
	if direct {
		c.logAlgo(kind, algo.Direct, "direct", size)
	} else {
		c.logAlgo(kind, 0, other, size)
	}
	return direct
}

// logAlgo reports, once per operation kind and algorithm, which algorithm ran
// (GOCCL_DEBUG=INFO).
func (c *Comm) logAlgo(kind opKind, a algo.Algorithm, name string, nbytes int) {
	c.recAlgo = name
	if bit := uint8(1) << a; c.loggedOp[kind]&bit == 0 && c.log.on(slog.LevelInfo, subColl) {
		c.loggedOp[kind] |= bit
		c.log.log(slog.LevelInfo, subColl, []slog.Attr{slog.String("op", kind.String())},
			"%v uses %s (first use: %d bytes, %d ranks)", kind, name, nbytes, c.size)
	}
}

// hierarchical reports whether the ranks span several hosts with the same
// number of ranks, more than one, on each: the hierarchical schedules apply.
func (c *Comm) hierarchical() bool { return c.group != nil && c.group.Hierarchy().Hierarchical() }

// useHier reports whether an operation of kind whose largest buffer is
// nbytes runs its hierarchical schedule (GOCCL_ALGO=hier forces it where
// the ranks allow), and logs which (once).
func (c *Comm) useHier(kind opKind, nbytes int, other string) bool {
	if !c.hierarchical() {
		return false
	}
	hier := c.algoForced == algo.Hier || c.algoForced == algo.Auto && nbytes >= c.hierMin[kind]
	if hier {
		c.logAlgo(kind, algo.Hier, "hier", nbytes)
	}
	return hier
}

// interAlgo is the algorithm AllReduceHier runs among the hosts for an
// AllReduce of nbytes (each rank's chunk is nbytes/PerHost).
func (c *Comm) interAlgo(nbytes int) algo.Algorithm {
	h := c.group.Hierarchy()
	return interAlgoFor(h.Hosts, h.PerHost, nbytes)
}

// interAlgoFor is interAlgo for hosts hosts of perHost ranks.
func interAlgoFor(hosts, perHost, nbytes int) algo.Algorithm {
	chunk := nbytes / max(1, perHost)
	switch {
	case hosts == 2 || chunk <= rdMaxBytes:
		return algo.RD
	case chunk <= rhdMaxBytes:
		return algo.RHD
	}
	return algo.Ring
}

// setupHier gives the group its hierarchy from the ranks' host identities
// (nothing when every rank is on one host).
func (c *Comm) setupHier(hostKeys []string) error {
	h, err := algo.NewHier(c.group, hostKeys)
	if err != nil {
		return err
	}
	for _, k := range hierKinds {
		c.hierMin[k] = hierMinBytes
	}
	if h.Hosts > 1 {
		c.group.SetHier(h, c.interAlgo)
		c.log.Infof(subInit, "init: %d hosts, %d ranks per host (0: uneven); this rank is local rank %d of host %d", h.Hosts, h.PerHost, h.LocalOf[c.rank], h.HostOf[c.rank])
	}
	return nil
}
