package topo

import (
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// HostID is equal for two processes exactly when they run on the same host,
// can share memory through the same /dev/shm and share a network stack: the
// kernel boot id, the host name, the device number of the /dev/shm mount
// (containers on one host differ) and, on the live system, the network
// namespace (the "hosts" of a network-namespace cluster on one machine
// differ, as pods do), under root ("" or "/": the live system). internal/bootstrap
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
	id := strings.TrimSpace(string(boot)) + "/" + hostname(root) + "/" + strconv.FormatUint(dev, 16)
	if root == "/" {
		if netns, err := os.Readlink("/proc/self/ns/net"); err == nil { // "net:[4026531840]"
			id += "/" + netns
		}
	}
	return id
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
