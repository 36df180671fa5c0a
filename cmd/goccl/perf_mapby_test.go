package main

import (
	"slices"
	"strings"
	"testing"
)

func TestNodeKeys(t *testing.T) {
	for _, tc := range []struct {
		first []int64
		order []int // world ranks in the new order
	}{
		{[]int64{0, 0, 2, 2}, []int{0, 2, 1, 3}},
		{[]int64{0, 0, 0, 3, 3, 3}, []int{0, 3, 1, 4, 2, 5}},
		{[]int64{0, 0, 0, 3}, []int{0, 3, 1, 2}}, // uneven: the small host drops out
		{[]int64{0, 1, 2}, []int{0, 1, 2}},       // a rank per host
		{[]int64{0, 0, 0, 0}, []int{0, 1, 2, 3}}, // one host
	} {
		keys, err := nodeKeys(tc.first)
		if err != nil {
			t.Fatalf("%v: %v", tc.first, err)
		}
		order := make([]int, len(keys))
		for r := range order {
			order[r] = r
		}
		slices.SortFunc(order, func(a, b int) int { return keys[a] - keys[b] })
		if !slices.Equal(order, tc.order) {
			t.Errorf("%v: new order %v (keys %v), want %v", tc.first, order, keys, tc.order)
		}
	}
	if _, err := nodeKeys([]int64{0, 0, 1, 1}); err == nil || !strings.Contains(err.Error(), "not consecutive") {
		t.Errorf("hosts overlapping: %v", err)
	}
	if _, err := parsePerfArgs([]string{"all_reduce", "--map-by", "core"}, &strings.Builder{}); err == nil {
		t.Error("--map-by core: no error")
	}
}
