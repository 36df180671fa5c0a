package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/trace"
)

// TestTraceMerge: goccl trace merge joins two ranks' files, one of them cut
// short as by a rank that died, into one JSON array.
func TestTraceMerge(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for r := 0; r < 2; r++ {
		path := filepath.Join(dir, "trace-"+string(rune('0'+r))+".json")
		rec, err := trace.New(r, 4, path)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		rec.Record(&trace.Event{Name: "AllReduce", Seq: 1, Bytes: 8, Start: now, End: now.Add(time.Microsecond)})
		if r == 0 {
			rec.Close()
		} else {
			rec.Flush() // no Close: the file has no closing bracket
		}
		files = append(files, path)
	}
	b, _ := os.ReadFile(files[1])
	os.WriteFile(files[1], append(b, `{"name":"cut`...), 0o644) // a last line cut short
	out := filepath.Join(dir, "all.json")
	var stdout, stderr bytes.Buffer
	if code := cli(append([]string{"trace", "merge", "-o", out}, files...), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var all []map[string]any
	b, _ = os.ReadFile(out)
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatalf("merged file: %v\n%s", err, b)
	}
	ops := 0
	for _, e := range all {
		if e["name"] == "AllReduce" {
			ops++
		}
	}
	if ops != 2 {
		t.Errorf("%d AllReduce events, want 2 (one per rank)", ops)
	}
	if !strings.Contains(stderr.String(), "from 2 files") {
		t.Errorf("stderr: %q", stderr.String())
	}
	if code := cli([]string{"trace", "merge"}, &stdout, &stderr); code != 2 {
		t.Errorf("merge without files: exit %d, want 2", code)
	}
}
