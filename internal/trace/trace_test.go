package trace

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/trace/tracetest"
)

func TestFileFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.json")
	r, err := New(3, 4, path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1700000000, 123456789)
	r.Record(&Event{Name: "AllReduce", Seq: 1, Bytes: 4096, Algo: "ring", Start: t0, End: t0.Add(1500 * time.Nanosecond),
		KnowsLast: true, LastRank: 5, Lag: 3200 * time.Microsecond})
	r.Record(&Event{Name: `odd "name"`, Track: 1, Start: t0, End: t0.Add(time.Millisecond)})
	r.Record(&Event{Name: "Broadcast", Seq: 2, Start: t0, End: t0, Err: "peer 1 lost"})
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	evs := tracetest.CheckFile(t, path)
	if len(evs) != 3 {
		t.Fatalf("%d complete events, want 3", len(evs))
	}
	if evs[0].Start != t0.UnixNano() || evs[0].End != t0.UnixNano()+1500 {
		t.Errorf("first event from %d to %d ns, want %d + 1500", evs[0].Start, evs[0].End, t0.UnixNano())
	}
	ev := []map[string]any{evs[0].Raw, evs[1].Raw, evs[2].Raw}
	e := ev[0]
	if e["name"] != "AllReduce" || e["pid"] != 3.0 || e["tid"] != 0.0 || e["ts"] != 1700000000123456.789 || e["dur"] != 1.5 {
		t.Errorf("first event: %v", e)
	}
	args := e["args"].(map[string]any)
	if args["seq"] != 1.0 || args["bytes"] != 4096.0 || args["algorithm"] != "ring" || args["last_rank"] != 5.0 || args["lag_us"] != 3200.0 {
		t.Errorf("first event's args: %v", args)
	}
	if _, ok := ev[2]["args"].(map[string]any)["last_rank"]; ok {
		t.Errorf("an event whose last arrival is not known has a last_rank: %v", ev[2])
	}
	if ev[1]["name"] != `odd "name"` || ev[1]["tid"] != 1.0 {
		t.Errorf("span: %v", ev[1])
	}
	if ev[2]["args"].(map[string]any)["error"] != "peer 1 lost" {
		t.Errorf("failed event: %v", ev[2])
	}
}

// TestRing: the ring keeps the last operations (not the spans), oldest
// first, and Dump names them.
func TestRing(t *testing.T) {
	r, err := New(0, 3, "")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for i := 1; i <= 5; i++ {
		r.Record(&Event{Name: "AllReduce", Seq: uint64(i), Start: t0, End: t0, KnowsLast: i == 5, LastRank: 2, Lag: 2 * time.Millisecond})
		r.Record(&Event{Name: "span", Track: 1, Start: t0, End: t0})
	}
	last := r.Last(10)
	if len(last) != 3 || last[0].Seq != 3 || last[2].Seq != 5 {
		t.Fatalf("Last: %+v", last)
	}
	if d := r.Dump(2); !strings.Contains(d, "AllReduce #4") || !strings.Contains(d, "AllReduce #5") || strings.Contains(d, "#3") ||
		strings.Count(d, "rank 2 entered last (+2ms)") != 1 {
		t.Errorf("Dump(2): %q", d)
	}
	var nilRec *Recorder
	nilRec.Record(&Event{})
	if nilRec.Last(1) != nil || nilRec.Close() != nil {
		t.Error("a nil Recorder records something")
	}
}

// TestRecordAllocs: recording an operation allocates nothing, with or
// without a file.
func TestRecordAllocs(t *testing.T) {
	for _, path := range []string{"", filepath.Join(t.TempDir(), "a.json")} {
		r, err := New(0, 8, path)
		if err != nil {
			t.Fatal(err)
		}
		e := &Event{Name: "AllReduce", Seq: 1, Bytes: 8, Algo: "ring", Start: time.Now(), End: time.Now(), KnowsLast: true, LastRank: 3, Lag: time.Millisecond}
		if n := testing.AllocsPerRun(1000, func() { r.Record(e) }); n != 0 {
			t.Errorf("file %q: %v allocations per Record", path, n)
		}
		r.Close()
	}
}

func TestExpandPath(t *testing.T) {
	host, _ := os.Hostname()
	got := ExpandPath("/tmp/t-%r-%p-%h.json", 7)
	want := "/tmp/t-7-" + strconv.Itoa(os.Getpid()) + "-" + host + ".json"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if ExpandPath("plain.json", 1) != "plain.json" {
		t.Error("a path without % changed")
	}
}
