package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestPerfTooLarge: sizes that do not fit in memory are refused before any
// rank allocates (it used to die of a Go out-of-memory crash).
func TestPerfTooLarge(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"perf", "all_reduce", "-np", "2", "-b", "8", "-e", "1024G"},
			"not enough memory for -e 1.0 TiB: 2 local ranks × (2 buffers of 1.0 TiB + 64.0 MiB) = 4.0 TiB, but "},
		// A world of 1 (no -np), and alltoall's third buffer.
		{[]string{"perf", "alltoall", "-b", "8", "-e", "4T"},
			"not enough memory for -e 4.0 TiB: 1 rank × (3 buffers of 4.0 TiB + 64.0 MiB) = 12.0 TiB, but "},
	} {
		stdout, stderr, code := runGoccl(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, " is available (") ||
			strings.Contains(stderr, "goroutine") || strings.Count(stderr, "\n") > 2 || stdout != "" {
			t.Errorf("%q: exit %d, want 2 and %q\nstdout:\n%s\nstderr:\n%s", tc.args, code, tc.want, stdout, stderr)
		}
	}
}

func TestCheckMemory(t *testing.T) {
	cfg, err := parsePerfArgs([]string{"all_reduce", "-e", "1G"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	need := int64(4*(1<<30+guardBytes) + 2*perfRankOverhead)
	if err := cfg.checkMemory(2, memLimit{need, "test"}); err != nil {
		t.Errorf("exactly enough: %v", err)
	}
	err = cfg.checkMemory(2, memLimit{need - 1, "the test's limit"})
	if want := "not enough memory for -e 1.0 GiB: 2 local ranks × (2 buffers of 1.0 GiB + 64.0 MiB) = 4.1 GiB, but 4.1 GiB is available (the test's limit); lower -e or -np"; err == nil || err.Error() != want {
		t.Errorf("one byte short: %v\nwant %s", err, want)
	}
	// -e near the parser's limit times many ranks must not overflow.
	cfg.maxBytes = 1 << 62
	if err := cfg.checkMemory(1<<20, memLimit{1<<63 - 1, "test"}); err == nil {
		t.Error("2^62 bytes × 2 buffers × 2^20 ranks fit in 2^63")
	}
}

// TestPerfMemoryAgreement: when one rank lacks memory, every rank stops
// before allocating, with status 2; none waits for the others forever.
func TestPerfMemoryAgreement(t *testing.T) {
	var calls atomic.Int32
	defer func(f func() (memLimit, bool)) { perfMemory = f }(perfMemory)
	perfMemory = func() (memLimit, bool) {
		if calls.Add(1) == 1 {
			return memLimit{1 << 20, "a small test machine"}, true
		}
		return memLimit{1 << 40, "test"}, true
	}
	cfg, err := parsePerfArgs([]string{"all_reduce", "-e", "1M"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	comms := newFakeWorld(n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	status := make([]int, n)
	var out bytes.Buffer
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := io.Discard
			if r == 0 {
				w = &out
			}
			status[r], errs[r] = perfRank(context.Background(), cfg, comms[r], w, io.Discard)
		}()
	}
	wg.Wait()
	short := 0
	for r := 0; r < n; r++ {
		switch {
		case status[r] != 2 || errs[r] == nil:
			t.Errorf("rank %d: status %d, %v", r, status[r], errs[r])
		case strings.Contains(errs[r].Error(), "(a small test machine)"):
			short++
		case !strings.Contains(errs[r].Error(), "stopping: 1 rank(s) lack the memory"):
			t.Errorf("rank %d: %v", r, errs[r])
		}
	}
	if short != 1 || out.Len() != 0 {
		t.Errorf("%d ranks short of memory, want 1; report %q", short, out.String())
	}
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAvailableMemory(t *testing.T) {
	const meminfo = "MemTotal:       16384000 kB\nMemFree:         1000 kB\nMemAvailable:    8388608 kB\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		bytes int64
		from  string
		ok    bool
	}{
		{"meminfo only", map[string]string{"proc/meminfo": meminfo}, 8 << 30, "MemAvailable in /proc/meminfo", true},
		{"nothing", nil, 0, "", false},
		{"cgroup v2, limit on the parent", map[string]string{
			"proc/meminfo":                          meminfo,
			"proc/self/cgroup":                      "0::/job/rank\n",
			"sys/fs/cgroup/job/rank/memory.max":     "max\n",
			"sys/fs/cgroup/job/rank/memory.current": "4096\n",
			"sys/fs/cgroup/job/memory.max":          "4294967296\n",
			"sys/fs/cgroup/job/memory.current":      "3221225472\n",
			"sys/fs/cgroup/job/memory.stat":         "anon 2147483648\nfile 1073741824\ninactive_file 1073741824\n",
		}, 2 << 30, "the cgroup limit /sys/fs/cgroup/job/memory.max of 4.0 GiB, 2.0 GiB in use", true},
		{"cgroup v2 above MemAvailable", map[string]string{
			"proc/meminfo":                 meminfo,
			"proc/self/cgroup":             "0::/\n",
			"sys/fs/cgroup/memory.max":     "68719476736\n",
			"sys/fs/cgroup/memory.current": "0\n",
		}, 8 << 30, "MemAvailable in /proc/meminfo", true},
		{"cgroup v1", map[string]string{
			"proc/self/cgroup": "5:pids:/a\n4:cpu,memory:/a\n0::/\n",
			"sys/fs/cgroup/memory/a/memory.limit_in_bytes": "9223372036854771712\n",
			"sys/fs/cgroup/memory/a/memory.usage_in_bytes": "100\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":   "1073741824\n",
			"sys/fs/cgroup/memory/memory.usage_in_bytes":   "536870912\n",
		}, 512 << 20, "the cgroup limit /sys/fs/cgroup/memory/memory.limit_in_bytes of 1.0 GiB, 512.0 MiB in use", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, tc.files)
			mem, ok := availableMemory(root)
			if ok != tc.ok || ok && (mem.bytes != tc.bytes || mem.from != tc.from) {
				t.Errorf("availableMemory = %+v, %v; want %d (%s), %v", mem, ok, tc.bytes, tc.from, tc.ok)
			}
		})
	}
	if mem, ok := availableMemory("/"); ok && mem.bytes <= 0 {
		t.Errorf("this machine: %+v", mem)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[float64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 64 << 20: "64.0 MiB", 1 << 40: "1.0 TiB", 1 << 62: "4.0 EiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%v) = %q, want %q", n, got, want)
		}
	}
}
