package exmain

import (
	"os"
	"testing"

	"github.com/goccl/goccl/internal/config"
)

// TestEpochBarRank0: only rank 0 draws epoch bars, even where
// GOCCL_PROGRESS=1 forces them.
func TestEpochBarRank0(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stderr := os.Stderr
	os.Stderr = f
	defer func() { os.Stderr = stderr }()
	t.Setenv(config.Progress.Name, "1")
	t.Setenv(config.ProgressFD.Name, "")
	if b := EpochBar(1, 1, 3, 10); b != nil {
		t.Error("rank 1 got a bar")
	}
	b := EpochBar(0, 2, 3, 10)
	if b == nil {
		t.Fatal("rank 0 got no bar with GOCCL_PROGRESS=1")
	}
	b.Increment()
	b.Done()
	got, err := os.ReadFile(f.Name())
	if err != nil || len(got) == 0 || string(got[:10]) != "\repoch 2/3" {
		t.Errorf("stderr: %q, %v", got, err)
	}
}
