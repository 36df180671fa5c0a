package topo

import (
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// HostID is equal for two processes exactly when they run on the same host
// and can share memory through the same /dev/shm: the kernel boot id, the
// host name and the device number of the /dev/shm mount (containers on one
// host differ), under root ("" or "/": the live system). internal/bootstrap
// compares these in the ranks' address cards to choose shared memory or
// TCP, so a Job groups ranks exactly as their links do.
func HostID(root string) string {
	if root == "" {
		root = "/"
	}
	boot, _ := os.ReadFile(filepath.Join(root, "proc/sys/kernel/random/boot_id"))
	var dev uint64
	var st syscall.Stat_t
	if syscall.Stat(filepath.Join(root, "dev/shm"), &st) == nil {
		dev = uint64(st.Dev)
	}
	return strings.TrimSpace(string(boot)) + "/" + hostname(root) + "/" + strconv.FormatUint(dev, 16)
}

// hostHash is the 64-bit FNV-1a hash of a host ID, NCCL's host_hash
// attribute in goccl's dumps (NCCL hashes its own host string, so the
// values differ from NCCL's for the same machine; equal values still mean
// one host).
func hostHash(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}
