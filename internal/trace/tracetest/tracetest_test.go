package tracetest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// fatalTB records the first Fatalf and ends the goroutine, as testing does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fatalTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

// check runs Check on data and returns its events and its failure ("" if none).
func check(data string) (evs []Event, msg string) {
	f := &fatalTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		evs = Check(f, "t", []byte(data))
	}()
	<-done
	return evs, f.msg
}

func TestCheck(t *testing.T) {
	const meta = `{"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"rank 0"}}`
	// Nested, adjacent (the second ends where the third starts), zero
	// length, and a ts whose last digits float64 would lose.
	ok := `[` + meta + `,
{"name":"step","ph":"X","pid":0,"tid":1,"ts":1795702770000001.001,"dur":10},
{"name":"forward","ph":"X","pid":0,"tid":1,"ts":1795702770000001.001,"dur":4.5},
{"name":"backward","ph":"X","pid":0,"tid":1,"ts":1795702770000005.501,"dur":5.5},
{"name":"mark","ph":"X","pid":0,"tid":1,"ts":1795702770000011.001,"dur":0},
{"name":"AllReduce","ph":"X","pid":0,"tid":0,"ts":1795702770000003,"dur":20,"args":{"bytes":8}}]`
	evs, msg := check(ok)
	if msg != "" || len(evs) != 5 {
		t.Fatalf("%d events, %q", len(evs), msg)
	}
	if e := evs[2]; e.Name != "backward" || e.Start != 1795702770000005501 || e.End != 1795702770000011001 {
		t.Errorf("backward: %+v", e)
	}
	if evs[4].Args["bytes"] != 8.0 || evs[4].Raw["dur"] != 20.0 {
		t.Errorf("AllReduce: %+v", evs[4])
	}
	for _, tc := range []struct{ data, want string }{
		{`{"name":"x"}`, "not a JSON array"},
		{`[{"name":"x","ph":"X","tid":0,"ts":1,"dur":1}]`, "lacks name, pid or tid"},
		{`[{"name":"x","ph":"X","pid":0,"tid":0,"ts":1,"dur":-1}]`, "has ts 1, dur -1"},
		{`[{"name":"x","ph":"B","pid":0,"tid":0,"ts":1}]`, `phase "B"`},
		{`[{"name":"x","ph":"M","pid":0,"tid":0}]`, "no args"},
		// Overlapping by a nanosecond on one thread.
		{`[{"name":"a","ph":"X","pid":0,"tid":1,"ts":10,"dur":5.001},{"name":"b","ph":"X","pid":0,"tid":1,"ts":15,"dur":5}]`, `"b" [15000, 20000] ns overlaps "a" [10000, 15001] ns`},
	} {
		if _, msg := check(tc.data); !strings.Contains(msg, tc.want) {
			t.Errorf("%s: failure %q, want %q", tc.data, msg, tc.want)
		}
	}
	// The same two on different threads, or processes, are fine.
	if _, msg := check(`[{"name":"a","ph":"X","pid":0,"tid":1,"ts":10,"dur":6},{"name":"b","ph":"X","pid":1,"tid":1,"ts":15,"dur":5}]`); msg != "" {
		t.Error(msg)
	}
}
