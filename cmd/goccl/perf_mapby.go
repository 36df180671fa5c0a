package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/goccl/goccl"
)

// mapByNode returns c's ranks renumbered round-robin over their hosts
// (goccl perf --map-by node): a communicator split from c with one color
// and the keys of nodeKeys. A host's ranks are found as launchers place
// them, consecutive from the rank minus its local rank.
func mapByNode(ctx context.Context, c *goccl.Comm) (*goccl.Comm, error) {
	first := make([]int64, c.Size())
	mine := []int64{int64(c.Rank() - c.LocalRank())}
	if err := goccl.AllGather(ctx, c, mine, first, 1); err != nil {
		return nil, fmt.Errorf("gathering the hosts' first ranks: %w", err)
	}
	keys, err := nodeKeys(first)
	if err != nil {
		return nil, err
	}
	return c.Split(ctx, 0, keys[c.Rank()])
}

// mapByNodeBanner is the comment line rank 0 prints before the table:
// the world ranks in the new order.
func mapByNodeBanner(ctx context.Context, world, c *goccl.Comm) (string, error) {
	order := make([]int64, c.Size())
	if err := goccl.AllGather(ctx, c, []int64{int64(world.Rank())}, order, 1); err != nil {
		return "", fmt.Errorf("gathering the new order: %w", err)
	}
	return fmt.Sprintf("# --map-by node: ranks round-robin over the hosts; rank i is launched rank %v[i]", order), nil
}

// nodeKeys are the Split keys that deal ranks round-robin over hosts:
// first[r] is the first rank of rank r's host (hosts hold consecutive
// ranks); rank r, the l-th of host h of H, gets key l*H + h, so the new
// order takes one rank of each host in turn (hosts with fewer ranks drop
// out of the later rounds).
func nodeKeys(first []int64) ([]int, error) {
	hosts := slices.Compact(slices.Sorted(slices.Values(first)))
	keys := make([]int, len(first))
	for r, f := range first {
		if f < 0 || f > int64(r) || (r > 0 && f != first[r-1] && f != int64(r)) {
			return nil, fmt.Errorf("rank %d: its host starts at rank %d: the hosts' ranks are not consecutive", r, f)
		}
		h, _ := slices.BinarySearch(hosts, f)
		keys[r] = (r-int(f))*len(hosts) + h
	}
	return keys, nil
}
