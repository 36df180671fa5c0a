package goccl_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSmallDevShm runs jobs whose shared-memory directory is a tmpfs too
// small for their rings (Docker's 64 MiB /dev/shm with many ranks): every
// rank that cannot create a ring warns with the size needed and the
// --shm-size fix, the pairs missing a ring use TCP, the others keep shared
// memory, and the collectives are correct. Needs root (mount); skips
// otherwise.
func TestSmallDevShm(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	for _, tc := range []struct {
		ranks   int
		size    string // tmpfs size; one ring is 4 MiB and 4.5 KiB
		someShm bool
	}{
		{2, "1m", false}, // no ring fits: all TCP
		{3, "10m", true}, // 2 of the 6 rings fit: at most one pair on shm
	} {
		t.Run(fmt.Sprintf("np%d/%s", tc.ranks, tc.size), func(t *testing.T) {
			dir := t.TempDir()
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+tc.size, "tmpfs", dir).CombinedOutput(); err != nil {
				t.Skipf("cannot mount a tmpfs (%v: %s)", err, out)
			}
			t.Cleanup(func() { exec.Command("umount", dir).Run() })
			outs := spawn(t, tc.ranks, "matrix", "GOCCL_SHM_DISABLE=0", "GOCCL_SHM_DIR="+dir,
				"GOCCL_TEST_COUNTS=0,1,7,1003", "GOCCL_DEBUG=INFO")
			warned, viaTCP, viaShm := 0, 0, 0
			for r, out := range outs {
				if !strings.Contains(out, "operations checked") {
					t.Fatalf("rank %d did not report:\n%s", r, out)
				}
				if strings.Contains(out, "--shm-size=") && strings.Contains(out, "need") {
					warned++
				}
				viaTCP += strings.Count(out, "via tcp")
				viaShm += strings.Count(out, "via shm")
			}
			t.Logf("rank 0's output:\n%s", outs[0])
			if warned == 0 {
				t.Error("no rank warned about the shared-memory size")
			}
			if viaTCP == 0 || viaTCP+viaShm != tc.ranks*(tc.ranks-1) {
				t.Errorf("%d links via tcp, %d via shm, want %d in all with some tcp", viaTCP, viaShm, tc.ranks*(tc.ranks-1))
			}
			if !tc.someShm && viaShm != 0 {
				t.Errorf("%d links via shm in a tmpfs where no ring fits", viaShm)
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 0 {
				t.Errorf("%d files left in the shared-memory directory", len(ents))
			}
		})
	}
}
