//go:build !linux

package topo

import "runtime"

// schedAffinity is every CPU where sched_getaffinity(2) does not exist.
func schedAffinity() ([]int, error) {
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus, nil
}
