package goccl_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/ranktest"
)

// threadsAtNice counts this process's threads whose nice value is nice
// (field 19 of /proc/self/task/TID/stat).
func threadsAtNice(t *testing.T, nice int) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil || len(stats) == 0 {
		t.Skipf("cannot list this process's threads: %v", err)
	}
	n := 0
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread has exited
		}
		s := string(b)
		// The command name (field 2) is in parentheses and may hold spaces.
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if v, err := strconv.Atoi(f[16]); err == nil && v == nice {
			n++
		}
	}
	return n
}

// TestProgressNice: the thread running non-blocking operations takes the
// nice value of GOCCL_PROGRESS_NICE (one thread per communicator with
// non-blocking operations) and gives it back when the communicator closes;
// 0 leaves every thread alone.
func TestProgressNice(t *testing.T) {
	const nice = -7
	if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 0); err != nil {
		t.Skipf("cannot set a thread's priority here: %v", err)
	}
	for _, setting := range []int{nice, 0} {
		t.Run(fmt.Sprint(setting), func(t *testing.T) {
			if threadsAtNice(t, nice) != 0 {
				t.Fatalf("a thread is at nice %d before the communicators exist", nice)
			}
			defer func() {
				// Close waits for the worker, which puts its thread's
				// priority back (the thread may outlive it).
				if n := threadsAtNice(t, nice); n != 0 {
					t.Errorf("%d thread(s) still at nice %d after Close", n, nice)
				}
			}()
			t.Setenv("GOCCL_PROGRESS_NICE", strconv.Itoa(setting))
			ranktest.Run(t, 2, 30*time.Second, func(ctx context.Context, c *goccl.Comm) error {
				x := []float32{1}
				r, err := goccl.IAllReduce(ctx, c, x, x, 1, goccl.Sum)
				if err != nil {
					return err
				}
				if err := r.Wait(ctx); err != nil {
					return err
				}
				if c.Rank() == 0 {
					got, want := threadsAtNice(t, nice), 0
					if setting == nice {
						if os.Geteuid() != 0 {
							return nil // lowering needs privilege: INFO says so
						}
						want = 2 // one worker per communicator, both in this process
					}
					if got != want {
						return fmt.Errorf("GOCCL_PROGRESS_NICE=%d: %d thread(s) at nice %d, want %d", setting, got, nice, want)
					}
				}
				return c.Barrier(ctx)
			})
		})
	}
}
