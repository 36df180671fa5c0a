package shm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSegment: a segment created by one mapping is seen by another; opening
// it with the wrong size, by a relative path or after unlink fails saying
// so; creating it twice fails (O_EXCL).
func TestSegment(t *testing.T) {
	dir := t.TempDir()
	s, err := CreateSegment(dir, "seg", 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Path() != filepath.Join(dir, "seg") || len(s.Bytes()) != 8192 {
		t.Fatalf("path %s, %d bytes", s.Path(), len(s.Bytes()))
	}
	o, err := OpenSegment(s.Path(), 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	s.Bytes()[100] = 42
	if o.Bytes()[100] != 42 {
		t.Fatal("the second mapping does not see the first's write")
	}
	if _, err := CreateSegment(dir, "seg", 8192); err == nil || !strings.Contains(err.Error(), "8192 bytes") {
		t.Errorf("second create: %v", err)
	}
	if _, err := OpenSegment(s.Path(), 4096); err == nil || !strings.Contains(err.Error(), "8192 bytes, want 4096") {
		t.Errorf("wrong size: %v", err)
	}
	if _, err := OpenSegment("seg", 8192); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Errorf("relative path: %v", err)
	}
	if _, err := CreateSegment(dir, "empty", 0); err == nil {
		t.Error("a segment of 0 bytes was made")
	}
	if err := s.Unlink(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path()); !os.IsNotExist(err) {
		t.Errorf("after Unlink: %v", err)
	}
	if _, err := OpenSegment(s.Path(), 8192); err == nil {
		t.Error("opened after Unlink")
	}
	if o.Bytes()[100] != 42 {
		t.Error("the mapping did not outlive the unlink")
	}
}
