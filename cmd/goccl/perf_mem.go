package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/goccl/goccl"
)

// perfRankOverhead is what a rank uses besides its buffers: the Go runtime,
// the transports' rings and staging buffers, the checker's patterns. A
// 2-rank all_reduce of 8 bytes holds about 17 MiB resident per rank; this
// leaves room to spare.
const perfRankOverhead = 64 << 20

// memLimit is how much memory this host lets us allocate, and why.
type memLimit struct {
	bytes int64
	from  string // where the figure comes from, for messages
}

// perfMemory reports the memory available to the ranks; a variable so that
// tests can pretend to be a small machine.
var perfMemory = func() (memLimit, bool) { return availableMemory("/") }

// rankBuffers returns how many buffers of cfg.maxBytes (plus guards) one
// rank allocates: a send and a receive buffer, and for alltoall the copy
// goccl makes of a send buffer that is also the receive buffer (in place).
func (cfg *perfConfig) rankBuffers() int {
	if cfg.coll.kind == collAllToAll {
		return 3
	}
	return 2
}

// checkMemory returns an error when localRanks ranks of cfg on one host need
// more memory than mem allows (float64: -e near 1<<62 times -np overflows).
func (cfg *perfConfig) checkMemory(localRanks int, mem memLimit) error {
	nbuf := cfg.rankBuffers()
	perRank := float64(nbuf)*float64(cfg.maxBytes+guardBytes+8*int64(cfg.unalign)) + perfRankOverhead // -u pads each buffer
	need := float64(localRanks) * perRank
	if need <= float64(mem.bytes) {
		return nil
	}
	ranks := "1 rank"
	if localRanks != 1 {
		ranks = strconv.Itoa(localRanks) + " local ranks"
	}
	return fmt.Errorf("not enough memory for -e %s: %s × (%d buffers of %s + %s) = %s, but %s is available (%s); lower -e or -np",
		formatBytes(float64(cfg.maxBytes)), ranks, nbuf, formatBytes(float64(cfg.maxBytes)), formatBytes(perfRankOverhead),
		formatBytes(need), formatBytes(float64(mem.bytes)), mem.from)
}

// checkMemoryAll runs checkMemory on every rank before any of them allocates
// its buffers, with the ranks that share this rank's host (from devs), and
// makes them agree: when one rank lacks memory, every rank returns an error.
func checkMemoryAll(ctx context.Context, cfg *perfConfig, c benchComm, devs []deviceInfo) error {
	mem, ok := perfMemory()
	var mine error
	if ok {
		local := 0
		for _, d := range devs {
			if d.Host == devs[c.Rank()].Host {
				local++
			}
		}
		mine = cfg.checkMemory(local, mem)
	}
	// One int64 per rank, summed: how many ranks lack memory.
	var flags [16]byte
	if mine != nil {
		binary.NativeEndian.PutUint64(flags[:8], 1)
	}
	if err := c.AllReduceBytes(ctx, flags[:8], flags[8:], 1, goccl.Int64, goccl.Sum); err != nil {
		return fmt.Errorf("rank %d: agreeing on the memory check: %w", c.Rank(), err)
	}
	short := binary.NativeEndian.Uint64(flags[8:])
	switch {
	case mine != nil:
		return fmt.Errorf("rank %d: %w", c.Rank(), mine)
	case short != 0:
		return fmt.Errorf("rank %d: stopping: %d rank(s) lack the memory for the buffers (see their message)", c.Rank(), short)
	}
	return nil
}

// availableMemory reads MemAvailable from root/proc/meminfo and lowers it
// to what the memory limits of this process's cgroup and of its ancestors
// leave (limit minus usage, page cache that can be dropped not counted as
// usage), for cgroup v2 and v1. ok is false when nothing could be read.
func availableMemory(root string) (mem memLimit, ok bool) {
	mem.bytes = 1<<63 - 1
	if kb, found := readKeyed(filepath.Join(root, "proc/meminfo"), "MemAvailable:"); found {
		mem, ok = memLimit{kb * 1024, "MemAvailable in /proc/meminfo"}, true
	}
	cg, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return mem, ok
	}
	for _, line := range strings.Split(string(cg), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		// v2: "0::/path". v1: "4:memory:/path" (controllers may be a list).
		mount, limitFile, usageFile, cacheKey := "", "", "", ""
		switch {
		case f[0] == "0" && f[1] == "":
			mount, limitFile, usageFile, cacheKey = "sys/fs/cgroup", "memory.max", "memory.current", "inactive_file"
		case hasWord(f[1], "memory"):
			mount, limitFile, usageFile, cacheKey = "sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"
		default:
			continue
		}
		base := filepath.Join(root, mount)
		for dir := filepath.Join(base, filepath.Clean("/"+f[2])); ; dir = filepath.Dir(dir) {
			limit, lok := readNumber(filepath.Join(dir, limitFile))
			usage, uok := readNumber(filepath.Join(dir, usageFile))
			if lok && uok && limit < 1<<62 { // v1 writes a huge number for "no limit"
				cache, _ := readKeyed(filepath.Join(dir, "memory.stat"), cacheKey)
				left := limit - max(usage-cache, 0)
				if left < mem.bytes {
					shown, _ := filepath.Rel(root, filepath.Join(dir, limitFile))
					mem = memLimit{max(left, 0), fmt.Sprintf("the cgroup limit /%s of %s, %s in use",
						shown, formatBytes(float64(limit)), formatBytes(float64(max(usage-cache, 0))))}
					ok = true
				}
			}
			if dir == base || len(dir) < len(base) {
				break
			}
		}
	}
	return mem, ok
}

// readNumber reads a file holding one decimal number ("max" is not one).
func readNumber(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// readKeyed returns the number after key in a "key value" file (meminfo,
// memory.stat).
func readKeyed(path, key string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == key {
			v, err := strconv.ParseInt(fields[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

func hasWord(list, word string) bool {
	for _, w := range strings.Split(list, ",") {
		if w == word {
			return true
		}
	}
	return false
}

// formatBytes prints n with a 1024-based unit: "512 B", "1.5 GiB".
func formatBytes(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	u := 0
	for n >= 1024 && u < len(units)-1 {
		n /= 1024
		u++
	}
	if u == 0 {
		return strconv.FormatFloat(n, 'f', 0, 64) + " B"
	}
	return strconv.FormatFloat(n, 'f', 1, 64) + " " + units[u]
}
