package topo

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ParseCPUList reads a kernel cpulist ("0-3,8,10-11", ranges may carry a
// ":used/group" stride as in "0-7:2/4") into sorted CPU numbers; what it
// cannot read is skipped.
func ParseCPUList(s string) []int {
	seen := map[int]bool{}
	for _, r := range strings.Split(strings.TrimSpace(s), ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		span, stride, hasStride := strings.Cut(r, ":")
		a, b, isRange := strings.Cut(span, "-")
		lo, err1 := strconv.Atoi(a)
		hi := lo
		var err2 error
		if isRange {
			hi, err2 = strconv.Atoi(b)
		}
		if err1 != nil || err2 != nil || lo < 0 || hi < lo || hi-lo > 1<<20 {
			continue
		}
		used, group := 1, 1
		if hasStride {
			u, g, ok := strings.Cut(stride, "/")
			var e1, e2 error
			used, e1 = strconv.Atoi(u)
			group, e2 = strconv.Atoi(g)
			if !ok || e1 != nil || e2 != nil || used < 1 || group < used {
				continue
			}
		}
		for c := lo; c <= hi; c++ {
			if (c-lo)%group < used {
				seen[c] = true
			}
		}
	}
	cpus := make([]int, 0, len(seen))
	for c := range seen {
		cpus = append(cpus, c)
	}
	sort.Ints(cpus)
	return cpus
}

// FormatCPUList writes sorted, distinct CPU numbers as a cpulist: "0-3,8".
func FormatCPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", cpus[i], cpus[j])
		} else {
			b.WriteString(strconv.Itoa(cpus[i]))
		}
		i = j + 1
	}
	return b.String()
}

// FormatCPUMap writes CPU numbers as the kernel's cpumap (and NCCL's
// affinity attribute): 32-bit hexadecimal words, the most significant
// first, separated by commas ("00000000,0000ffff").
func FormatCPUMap(cpus []int) string {
	words := 1
	for _, c := range cpus {
		if c/32+1 > words {
			words = c/32 + 1
		}
	}
	w := make([]uint32, words)
	for _, c := range cpus {
		if c >= 0 {
			w[c/32] |= 1 << (c % 32)
		}
	}
	parts := make([]string, words)
	for i := range w {
		parts[words-1-i] = fmt.Sprintf("%08x", w[i])
	}
	return strings.Join(parts, ",")
}
