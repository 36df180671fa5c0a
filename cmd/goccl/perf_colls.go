package main

import (
	"fmt"

	"github.com/goccl/goccl/doctor/nccltests"
)

// collKind identifies a benchmarked collective.
type collKind int

const (
	collAllReduce collKind = iota
	collAllGather
	collReduceScatter
	collBroadcast
	collReduce
	collAllToAll
	collSendRecv
)

// coll describes one collective as nccl-tests benchmarks it.
type coll struct {
	kind collKind
	name string // nccl-tests name without "_perf": "all_reduce"
	// reduces: the op matters; ops are iterated and printed in the redop
	// column (avg is skipped for integer types).
	reduces bool
	// opColumn: the redop column shows the op even without a reduction
	// (sendrecv, as nccl-tests prints it); otherwise "none".
	opColumn bool
	rooted   bool // broadcast, reduce: the root column is the root
	// inPlaceChecked: in-place results are verified; false prints "N/A" in
	// the in-place #wrong column (sendrecv, as nccl-tests).
	inPlaceChecked bool
}

var colls = []*coll{
	{kind: collAllReduce, name: "all_reduce", reduces: true, inPlaceChecked: true},
	{kind: collAllGather, name: "all_gather", inPlaceChecked: true},
	{kind: collReduceScatter, name: "reduce_scatter", reduces: true, inPlaceChecked: true},
	{kind: collBroadcast, name: "broadcast", rooted: true, inPlaceChecked: true},
	{kind: collReduce, name: "reduce", reduces: true, rooted: true, inPlaceChecked: true},
	{kind: collAllToAll, name: "alltoall", inPlaceChecked: true},
	{kind: collSendRecv, name: "sendrecv", opColumn: true},
}

// lookupColl accepts "all_reduce", "all_reduce_perf", "allreduce", "AllReduce".
func lookupColl(name string) (*coll, error) {
	norm := func(s string) string {
		b := make([]byte, 0, len(s))
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c == '_' || c == '-' {
				continue
			}
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			b = append(b, c)
		}
		return string(b)
	}
	n := norm(name)
	if len(n) > 4 && n[len(n)-4:] == "perf" {
		n = n[:len(n)-4]
	}
	for _, c := range colls {
		if norm(c.name) == n {
			return c, nil
		}
	}
	return nil, fmt.Errorf("unknown collective %q (want all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall or sendrecv)", name)
}

// layout is how one benchmark size maps onto buffers, in elements, following
// nccl-tests' getCollByteCount: the op is called with paramCount; sendCount
// and recvCount are the extents of the out-of-place buffers; in place, the
// send and receive pointers are recvbuff + rank*sendInplaceOff and
// recvbuff + rank*recvInplaceOff.
type layout struct {
	sendCount, recvCount, paramCount int
	sendInplaceOff, recvInplaceOff   int
}

// layoutFor computes the layout for count = size/eltSize elements on nranks.
// Like nccl-tests, the per-rank block of all_gather, reduce_scatter and
// alltoall is count/nranks rounded down to a multiple of 16 bytes.
func (c *coll) layoutFor(count, eltSize, nranks int) layout {
	switch c.kind {
	case collAllGather:
		base := alignedBlock(count, eltSize, nranks)
		return layout{sendCount: base, recvCount: base * nranks, paramCount: base, sendInplaceOff: base}
	case collReduceScatter:
		base := alignedBlock(count, eltSize, nranks)
		return layout{sendCount: base * nranks, recvCount: base, paramCount: base, recvInplaceOff: base}
	case collAllToAll:
		base := alignedBlock(count, eltSize, nranks)
		return layout{sendCount: base * nranks, recvCount: base * nranks, paramCount: base}
	}
	return layout{sendCount: count, recvCount: count, paramCount: count}
}

// alignedBlock is (count/nranks) & -(16/eltSize).
func alignedBlock(count, eltSize, nranks int) int {
	per := 16 / eltSize
	if per < 1 {
		per = 1
	}
	return (count / nranks) &^ (per - 1)
}

// printedSize is nccl-tests' size column: the larger buffer extent in bytes.
func (l layout) printedSize(eltSize int) int64 {
	return int64(max(l.sendCount, l.recvCount)) * int64(eltSize)
}

// inplaceRegion is the extent, in elements from recvbuff, that the in-place
// operation of rank touches (its send and receive areas).
func (l layout) inplaceRegion(rank int) int {
	return max(l.sendInplaceOff*rank+l.sendCount, l.recvInplaceOff*rank+l.recvCount)
}

// busFactor converts algorithm bandwidth to bus bandwidth with nccl-tests'
// factors (nccltests.BusBWFactor, which goccl doctor nccl-tests checks tables
// against).
func (c *coll) busFactor(nranks int) float64 {
	f, ok := nccltests.BusBWFactor(c.name, nranks)
	if !ok {
		return 1
	}
	return f
}

// algBytes is the byte count nccl-tests divides by the time for algbw: the
// per-rank block times nranks for all_gather, reduce_scatter and alltoall,
// the buffer size otherwise.
func (c *coll) algBytes(paramCount, eltSize, nranks int) float64 {
	b := float64(paramCount) * float64(eltSize)
	switch c.kind {
	case collAllGather, collReduceScatter, collAllToAll:
		b *= float64(nranks)
	}
	return b
}

// bandwidth returns algbw and busbw in GB/s (1e9 bytes) for a time in seconds.
func (c *coll) bandwidth(paramCount, eltSize, nranks int, sec float64) (algbw, busbw float64) {
	if sec <= 0 {
		return 0, 0
	}
	algbw = c.algBytes(paramCount, eltSize, nranks) / 1e9 / sec
	return algbw, algbw * c.busFactor(nranks)
}
