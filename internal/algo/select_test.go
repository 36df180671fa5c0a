package algo_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/goccl/goccl/internal/algo"
)

// The oracle: a frozen copy of the choice the communicator made before the
// schedule table (its run switch, chooseAllReduce, flatAllReduce,
// useDirect, useHier, interAlgoFor, hierCrossovers and GOCCL_ALGO's map),
// with the Comm's fields as plain ones and logAlgo recording what it was
// told. It must not follow later changes: TestChooseDifferential compares
// the Selector with it.

type oldAlgorithm uint8

const (
	oldAuto oldAlgorithm = iota
	oldRing
	oldRHD
	oldTree
	oldRD
	oldDirect
	oldHier
)

func (a oldAlgorithm) String() string {
	switch a {
	case oldRing:
		return "ring"
	case oldRHD:
		return "rhd"
	case oldTree:
		return "tree"
	case oldRD:
		return "rd"
	case oldDirect:
		return "direct"
	case oldHier:
		return "hier"
	}
	return "auto"
}

var oldAlgoFromEnv = map[string]oldAlgorithm{"": oldAuto, "ring": oldRing, "rhd": oldRHD, "tree": oldTree, "rd": oldRD, "direct": oldDirect, "hier": oldHier}

const (
	oldHierMinBytes       = 64 << 10
	oldDirectMinBytes     = 16 << 10
	oldRDMaxBytes         = 32 << 10
	oldRDMaxBytesInPlace2 = 2 << 20
	oldRHDMaxBytes        = 256 << 10
)

type oldComm struct {
	size         int
	direct       bool // c.group.Direct()
	hierarchical bool // c.hierarchical()
	collnet      bool // c.collnet != nil
	algoForced   oldAlgorithm
	directMin    int
	hierMin      [algo.NumKinds]int

	logged      string // what the last logAlgo call reported
	loggedBytes int
}

func (c *oldComm) logAlgo(_ algo.Kind, _ oldAlgorithm, name string, nbytes int) {
	c.logged, c.loggedBytes = name, nbytes
}

// run is the old run's switch for a call of kind whose largest buffer is
// n bytes (recv, or send for ReduceScatter and AllToAll) and whose per-rank
// block is block bytes (count elements).
func (c *oldComm) run(kind algo.Kind, n, block int, inPlace bool) (string, int) {
	c.logged, c.loggedBytes = "", 0
	switch kind {
	case algo.KindAllReduce:
		if c.collnet && c.algoForced == oldAuto {
			c.logAlgo(algo.KindAllReduce, 7, "collnet", n)
			break
		}
		alg := c.chooseAllReduce(n, inPlace)
		c.logAlgo(algo.KindAllReduce, alg, alg.String(), n)
	case algo.KindBroadcast:
		_ = c.useHier(algo.KindBroadcast, n, "tree") || c.useDirect(algo.KindBroadcast, n, n, "tree")
	case algo.KindReduce:
		c.logAlgo(algo.KindReduce, 0, "tree", n)
	case algo.KindAllGather:
		_ = c.useHier(algo.KindAllGather, n, "ring") || c.useDirect(algo.KindAllGather, n, block, "ring")
	case algo.KindReduceScatter:
		_ = c.useHier(algo.KindReduceScatter, n, "ring") || c.useDirect(algo.KindReduceScatter, n, block, "ring")
	case algo.KindAllToAll:
		if !inPlace && c.useDirect(algo.KindAllToAll, n, n, "pairwise") {
			break
		}
		c.logAlgo(algo.KindAllToAll, 0, "pairwise", n)
	case algo.KindGather, algo.KindScatter:
		c.logAlgo(kind, 0, "flat", block)
	}
	return c.logged, c.loggedBytes
}

func (c *oldComm) chooseAllReduce(nbytes int, inPlace bool) oldAlgorithm {
	a := c.algoForced
	if a == oldDirect && !c.direct || a == oldHier && !c.hierarchical {
		a = oldAuto
	}
	if a == oldAuto {
		switch {
		case c.direct && nbytes >= c.directMin*(c.size-1):
			a = oldDirect
		case c.hierarchical && nbytes >= c.hierMin[algo.KindAllReduce]:
			a = oldHier
		default:
			a = oldFlatAllReduce(c.size, nbytes, inPlace)
		}
	}
	return a
}

func oldFlatAllReduce(size, nbytes int, inPlace bool) oldAlgorithm {
	switch {
	case size == 2 && (!inPlace || nbytes <= oldRDMaxBytesInPlace2), nbytes <= oldRDMaxBytes:
		return oldRD
	case nbytes <= oldRHDMaxBytes:
		return oldRHD
	}
	return oldRing
}

func (c *oldComm) useDirect(kind algo.Kind, nbytes, size int, other string) bool {
	var direct bool
	switch c.algoForced {
	case oldAuto, oldDirect:
		direct = c.direct && (nbytes >= c.directMin*(c.size-1) || c.algoForced == oldDirect)
	}
	if direct {
		c.logAlgo(kind, oldDirect, "direct", size)
	} else {
		c.logAlgo(kind, 0, other, size)
	}
	return direct
}

func (c *oldComm) useHier(kind algo.Kind, nbytes int, other string) bool {
	if !c.hierarchical {
		return false
	}
	hier := c.algoForced == oldHier || c.algoForced == oldAuto && nbytes >= c.hierMin[kind]
	if hier {
		c.logAlgo(kind, oldHier, "hier", nbytes)
	}
	return hier
}

func oldInterAlgoFor(hosts, perHost, nbytes int) oldAlgorithm {
	chunk := nbytes / max(1, perHost)
	switch {
	case hosts == 2 || chunk <= oldRDMaxBytes:
		return oldRD
	case chunk <= oldRHDMaxBytes:
		return oldRHD
	}
	return oldRing
}

func oldHierCrossovers(hostOf []int, costs algo.Costs) (hierMin [4]int, ok bool) {
	if !costs.Valid() {
		for i := range hierMin {
			hierMin[i] = oldHierMinBytes
		}
		return hierMin, false
	}
	m := algo.NewCostModel(hostOf, costs)
	hierMin[0] = algo.Crossover(
		func(n int) float64 { return m.AllReduce(n, algo.Algorithm(oldFlatAllReduce(m.P, n, false).String())) },
		func(n int) float64 {
			return m.AllReduceHier(n, algo.Algorithm(oldInterAlgoFor(m.Hosts, m.PerHost, n).String()))
		})
	for i, predict := range [...]func(int, bool) float64{m.Broadcast, m.AllGather, m.ReduceScatter} {
		hierMin[i+1] = algo.Crossover(func(n int) float64 { return predict(n, false) }, func(n int) float64 { return predict(n, true) })
	}
	return hierMin, true
}

// oldHierarchical is Hierarchy.Hierarchical for ranks on hosts hostOf.
func oldHierarchical(hostOf []int) bool {
	count := map[int]int{}
	for _, h := range hostOf {
		count[h]++
	}
	per := -1
	for _, n := range count {
		if per >= 0 && n != per {
			return false
		}
		per = n
	}
	return len(count) > 1 && per > 1
}

// layouts are the hosts of P ranks the test tries: one host, one rank per
// host, every even split (H hosts of L, blocked) and an uneven one.
func layouts(P int) map[string][]int {
	out := map[string][]int{"flat": make([]int, P)}
	if P < 2 {
		return out
	}
	for H := 2; H <= P; H++ {
		if P%H != 0 {
			continue
		}
		hostOf := make([]int, P)
		for r := range hostOf {
			hostOf[r] = r / (P / H)
		}
		out[fmt.Sprintf("%dx%d", H, P/H)] = hostOf
	}
	if P >= 3 {
		hostOf := make([]int, P) // host 0 holds one more than host 1
		for r := P/2 + 1; r < P; r++ {
			hostOf[r] = 1
		}
		out["uneven"] = hostOf
	}
	return out
}

// choiceSizes are the sizes compared: 0, and 2^k-1, 2^k, 2^k+1 up to 1 GiB
// (the thresholds are powers of two, or multiples of DirectMin).
func choiceSizes() []int {
	sizes := []int{0}
	for k := 0; k <= 30; k++ {
		for _, n := range []int{1<<k - 1, 1 << k, 1<<k + 1} {
			if n > sizes[len(sizes)-1] {
				sizes = append(sizes, n)
			}
		}
	}
	return sizes
}

var choiceKinds = []algo.Kind{algo.KindAllReduce, algo.KindBroadcast, algo.KindReduce, algo.KindAllGather,
	algo.KindReduceScatter, algo.KindAllToAll, algo.KindGather, algo.KindScatter, algo.KindSendRecv}

// TestChooseDifferential: the Selector chooses what the communicator chose
// before the schedule table, and logs the same bytes, for every kind,
// world size 1-9, size, in place or not, host layout, direct or not,
// aggregation tree or not, GOCCL_ALGO value, direct threshold and set of
// crossovers (fixed, probed from a cost model, arbitrary).
func TestChooseDifferential(t *testing.T) {
	slow := algo.Costs{Intra: algo.LinkCost{Alpha: 2e-6, Beta: 1 / 5e9}, Inter: algo.LinkCost{Alpha: 50e-6, Beta: 1 / 118e6}}
	sizes := choiceSizes()
	compared, mismatches := 0, 0
	for P := 1; P <= 9; P++ {
		for lname, hostOf := range layouts(P) {
			probed, _ := algo.HierCrossovers(hostOf, slow)
			crossovers := map[string][4]int{
				"fixed":     algo.FixedTuning().HierMin,
				"probed":    probed,
				"arbitrary": {16 << 10, math.MaxInt, 64, 1 << 30},
			}
			for cname, hierMin := range crossovers {
				for _, direct := range []bool{false, true} {
					for _, collnet := range []bool{false, true} {
						for _, forced := range []string{"", "ring", "rhd", "rd", "tree", "direct", "hier"} {
							for _, dmin := range []int{algo.DirectMinBytes, 3000} {
								name := fmt.Sprintf("P%d/%s/%s/direct=%v/collnet=%v/algo=%q/directmin=%d", P, lname, cname, direct, collnet, forced, dmin)
								old := &oldComm{size: P, direct: direct, hierarchical: oldHierarchical(hostOf), collnet: collnet,
									algoForced: oldAlgoFromEnv[forced], directMin: dmin}
								for i, k := range [...]algo.Kind{algo.KindAllReduce, algo.KindBroadcast, algo.KindAllGather, algo.KindReduceScatter} {
									old.hierMin[k] = hierMin[i]
								}
								f, err := algo.ParseForced(forced)
								if err != nil {
									t.Fatalf("%s: %v", name, err)
								}
								sel := algo.NewSelector(algo.Facts{Size: P, HostOf: hostOf, Direct: direct, CollNet: collnet, Forced: f,
									DirectMin: dmin, Tuning: algo.Tuning{HierMin: hierMin}})
								for _, k := range choiceKinds {
									for _, n := range sizes {
										for _, inPlace := range []bool{false, true} {
											block := n
											switch k {
											case algo.KindAllGather, algo.KindReduceScatter, algo.KindAllToAll, algo.KindGather, algo.KindScatter:
												block = n / P
											}
											want, wantBytes := old.run(k, n, block, inPlace)
											got, gotBytes := "", 0
											if s := sel.Choose(k, n, inPlace); s != nil {
												got, gotBytes = string(s.Algo), n
												if s.PerRank {
													gotBytes = block
												}
											}
											compared++
											if got != want || gotBytes != wantBytes {
												if mismatches++; mismatches <= 20 {
													t.Errorf("%s: %v of %d bytes, in place %v: chose %q logging %d bytes, before %q logging %d",
														name, k, n, inPlace, got, gotBytes, want, wantBytes)
												}
											}
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	if mismatches > 0 {
		t.Fatalf("%d of %d choices differ", mismatches, compared)
	}
	t.Logf("%d choices identical", compared)
}

// TestHierCrossoversDifferential: the crossovers and the inter-host
// algorithm are those of before the schedule table, whose flat AllReduce
// algorithm the Selector now supplies.
func TestHierCrossoversDifferential(t *testing.T) {
	shm := algo.LinkCost{Alpha: 2e-6, Beta: 1 / 5e9}
	costs := []algo.Costs{
		{Intra: shm, Inter: algo.LinkCost{Alpha: 50e-6, Beta: 1 / 118e6}},
		{Intra: shm, Inter: shm},
		{Intra: shm, Inter: algo.LinkCost{Alpha: 5e-6, Beta: 1 / 3e9}},
		{},
	}
	for P := 1; P <= 9; P++ {
		for lname, hostOf := range layouts(P) {
			for _, c := range costs {
				got, gok := algo.HierCrossovers(hostOf, c)
				want, wok := oldHierCrossovers(hostOf, c)
				if got != want || gok != wok {
					t.Errorf("P%d %s %+v: %v %v, before %v %v", P, lname, c, got, gok, want, wok)
				}
			}
		}
	}
	for hosts := 1; hosts <= 9; hosts++ {
		for per := 0; per <= 9; per++ {
			for _, n := range choiceSizes() {
				if got, want := algo.InterAlgorithm(hosts, per, n), oldInterAlgoFor(hosts, per, n).String(); string(got) != want {
					t.Errorf("InterAlgorithm(%d, %d, %d) = %s, before %s", hosts, per, n, got, want)
				}
			}
		}
	}
}
