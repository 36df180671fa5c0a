package nccltests

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/goccl/goccl/doctor/internal/doctortest"
)

// repeatReader reads text n times over without holding the repetitions in
// memory, and samples the heap every sampleEvery bytes it hands out.
type repeatReader struct {
	text        string
	n           int // repetitions left, the current one included
	off         int // offset in the current repetition
	read        int64
	nextSample  int64
	sampleEvery int64
	peakHeap    uint64 // largest HeapAlloc sampled
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		r.sample()
		return 0, io.EOF
	}
	k := copy(p, r.text[r.off:])
	r.off += k
	if r.off == len(r.text) {
		r.off = 0
		r.n--
	}
	r.read += int64(k)
	if r.read >= r.nextSample {
		r.nextSample += r.sampleEvery
		r.sample()
	}
	return k, nil
}

func (r *repeatReader) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.peakHeap = max(r.peakHeap, ms.HeapAlloc)
}

// countWriter counts the bytes written to it.
type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// TestNCCLTestsBigInputBounded: tens of MB of tables (a real all_reduce run
// pasted over and over, as a burn-in loop's log is) are read as a stream:
// the heap does not grow with the input, and the report, as text or JSON,
// stays small because repeated findings are folded into one with a count
// and the first and last line. Before the fix a 48 MB input held every row
// (hundreds of MB of heap) and printed a finding per table and finding kind.
func TestNCCLTestsBigInputBounded(t *testing.T) {
	table := doctortest.RealInput(t, "nccl-tests-01.txt")
	size := 48 << 20
	if doctortest.RaceEnabled {
		size = 4 << 20 // the race detector makes the reader ten times slower
	}
	n := size/len(table) + 1
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	in := &repeatReader{text: table, n: n, sampleEvery: 2 << 20}
	rep, err := Read(in, Options{ExpectBusBW: 400})
	if err != nil {
		t.Fatal(err)
	}
	in.sample() // the report itself, still referenced
	var text, js countWriter
	var head strings.Builder
	if err := rep.WriteText(io.MultiWriter(&text, &headWriter{b: &head, max: 1 << 20})); err != nil {
		t.Fatal(err)
	}
	if err := json.NewEncoder(&js).Encode(rep); err != nil {
		t.Fatal(err)
	}
	growth := int64(in.peakHeap) - int64(base.HeapAlloc)
	t.Logf("input %d bytes (%d tables): %d findings, text %d bytes, JSON %d bytes, peak heap growth %d bytes (%.2f per input byte)",
		in.read, n, len(rep.Findings), text.n, js.n, growth, float64(growth)/float64(in.read))

	// (a) A bounded report: the two findings each table gets (its average
	// and its sizes below the expected bandwidth) once each, folded, plus
	// the note that most tables are not listed.
	if len(rep.Findings) > 8 {
		t.Errorf("%d findings, want a handful", len(rep.Findings))
	}
	if text.n > 1<<20 || js.n > 4<<20 {
		t.Errorf("text %d bytes, JSON %d bytes: want at most 1 MiB and 4 MiB", text.n, js.n)
	}
	if len(rep.Tests) != maxListedTables || rep.TablesNotListed != n-maxListedTables {
		t.Errorf("%d tables listed, %d not, want %d and %d", len(rep.Tests), rep.TablesNotListed, maxListedTables, n-maxListedTables)
	}
	// The first table's rows start at line 32 and every repetition is
	// lines(table) further on.
	lines := strings.Count(table, "\n")
	want := fmt.Sprintf("avg-busbw: table 1 (all_reduce, line 32): avg bus bandwidth 70.742 GB/s (footer); peak 338.82 GB/s at 8589934592 B (×%d, lines 32–%d)", n, 32+(n-1)*lines)
	if !strings.Contains(head.String(), want) {
		t.Errorf("no folded finding %q in\n%s", want, lastLines(head.String(), 12))
	}
	if !strings.Contains(head.String(), fmt.Sprintf("busbw-below-expected: table 1 (all_reduce, line 32): 6 of 8 sizes >= 64 MiB below 80%% of the expected 400 GB/s (67108864 B: 99.74, 134217728 B: 153.76, 268435456 B: 213.28, 536870912 B: 263.69, 1073741824 B: 298.82, 2147483648 B: 318.52) (×%d,", n)) {
		t.Errorf("no folded busbw-below-expected in\n%s", lastLines(head.String(), 12))
	}

	// (b) Memory independent of the input's size: what the reader keeps (a
	// bounded number of tables) plus the garbage a GC cycle leaves, far
	// below the input itself. The race detector allocates on its own.
	if doctortest.RaceEnabled {
		t.Log("heap bound not checked under the race detector")
		return
	}
	if limit := int64(32 << 20); growth > limit {
		t.Errorf("peak heap grew by %d bytes reading %d bytes, want at most %d", growth, in.read, limit)
	}
}

// headWriter keeps the first max bytes written to it.
type headWriter struct {
	b   *strings.Builder
	max int
}

func (w *headWriter) Write(p []byte) (int, error) {
	if room := w.max - w.b.Len(); room > 0 {
		w.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// TestNCCLTestsListedTables: the first table is listed whatever its size;
// after a table that does not fit, none is, and the note says which were
// left out.
func TestNCCLTestsListedTables(t *testing.T) {
	const header = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
	var big strings.Builder
	big.WriteString("# Collective test starting: broadcast_perf\n" + header)
	for i := 0; i < maxListedRows+10; i++ {
		fmt.Fprintf(&big, "%d %d float sum 0 10.0 1.00 1.00 0 10.0 1.00 1.00 0\n", 4*(i+1), i+1)
	}
	small := "# Collective test starting: broadcast_perf\n" + header + "8 2 float sum 0 10.0 1.00 1.00 0 10.0 1.00 1.00 0\n"
	rep := testsRead(t, big.String()+small+small, Options{})
	if len(rep.Tests) != 1 || len(rep.Tests[0].Rows) != maxListedRows+10 || rep.TablesNotListed != 2 {
		t.Fatalf("%d tables listed (%d rows), %d not", len(rep.Tests), len(rep.Tests[0].Rows), rep.TablesNotListed)
	}
	first := maxListedRows + 10 + 5 // the second table's row: after the big one and two lines of its own
	want := fmt.Sprintf("tables 2 to 3 (lines %d to %d) were checked but are not listed: the report keeps the first 1 tables (%d rows)", first, first+3, maxListedRows+10)
	if _, ok := doctortest.FindingWith(rep.Findings, "tables-not-listed", want); !ok {
		t.Errorf("findings %v, want %q", rep.Findings, want)
	}
	// The folded peak-busbw finding stands for the three tables.
	if f, ok := doctortest.FindingWith(rep.Findings, "peak-busbw", "table 1 "); !ok || f.Count != 3 || f.FirstLine != 3 || f.LastLine != first+3 {
		t.Errorf("peak-busbw %+v", f)
	}
}
