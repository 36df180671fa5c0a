// Package tracetest checks trace files against the trace-event format, for
// the tests of package trace, of the communicator and of the examples.
package tracetest

import (
	"cmp"
	"encoding/json"
	"math/big"
	"os"
	"slices"
	"strconv"
	"testing"
)

// Event is a complete event ("ph":"X") of a checked trace.
type Event struct {
	Name       string
	Pid, Tid   int
	Start, End int64          // nanoseconds: ts and ts+dur, read exactly from the JSON numbers (microseconds)
	Args       map[string]any // nil when the event has none
	Raw        map[string]any // the whole event as encoding/json decodes it (numbers as float64)
}

// CheckFile reads a trace file and checks it with Check.
func CheckFile(t testing.TB, path string) []Event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return Check(t, path, b)
}

// Check parses data (a trace named name) and checks it against the
// trace-event format (Trace Event Format, Google, JSON Array Format): every
// element an object with a string name, a phase, integer pid and tid;
// complete events ("X") with a positive numeric ts and a non-negative dur;
// metadata events ("M") with args; and on each thread (pid, tid) complete
// events properly nested, each either inside an earlier one or after its
// end, as the viewers build their slices. It returns the complete events in
// file order.
func Check(t testing.TB, name string, data []byte) []Event {
	t.Helper()
	var all []map[string]any
	if err := json.Unmarshal(data, &all); err != nil {
		t.Fatalf("%s is not a JSON array of objects: %v\n%.2000s", name, err, data)
	}
	var exact []struct {
		Ts, Dur json.Number
	}
	if err := json.Unmarshal(data, &exact); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var events []Event
	for i, e := range all {
		evName, _ := e["name"].(string)
		ph, _ := e["ph"].(string)
		pid, okPid := e["pid"].(float64)
		tid, okTid := e["tid"].(float64)
		if evName == "" || !okPid || !okTid || pid != float64(int(pid)) || tid != float64(int(tid)) {
			t.Fatalf("%s: event %d lacks name, pid or tid: %v", name, i, e)
		}
		switch ph {
		case "X":
			ts, okTs := e["ts"].(float64)
			dur, okDur := e["dur"].(float64)
			if !okTs || !okDur || dur < 0 || ts <= 0 {
				t.Fatalf("%s: complete event %d has ts %v, dur %v", name, i, e["ts"], e["dur"])
			}
			start, d := nanos(t, exact[i].Ts), nanos(t, exact[i].Dur)
			args, _ := e["args"].(map[string]any)
			events = append(events, Event{Name: evName, Pid: int(pid), Tid: int(tid), Start: start, End: start + d, Args: args, Raw: e})
		case "M":
			if _, ok := e["args"].(map[string]any); !ok {
				t.Fatalf("%s: metadata event %d has no args: %v", name, i, e)
			}
		default:
			t.Fatalf("%s: event %d has phase %q", name, i, ph)
		}
	}
	checkNesting(t, name, events)
	return events
}

// nanos converts a JSON number of microseconds to nanoseconds, rounded:
// exactly, where float64 would lose the last digits of a wall-clock ts.
func nanos(t testing.TB, n json.Number) int64 {
	t.Helper()
	r, ok := new(big.Rat).SetString(n.String())
	if !ok {
		t.Fatalf("number %q", n)
	}
	ns, err := strconv.ParseInt(r.Mul(r, big.NewRat(1000, 1)).FloatString(0), 10, 64)
	if err != nil {
		t.Fatalf("number %q: %v", n, err)
	}
	return ns
}

// checkNesting fails the test when two complete events of one thread
// overlap without one containing the other.
func checkNesting(t testing.TB, name string, events []Event) {
	t.Helper()
	type thread struct{ pid, tid int }
	byThread := map[thread][]Event{}
	for _, e := range events {
		k := thread{e.Pid, e.Tid}
		byThread[k] = append(byThread[k], e)
	}
	for k, evs := range byThread {
		// Parents before their children: by start, the longer first.
		slices.SortStableFunc(evs, func(a, b Event) int {
			return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(b.End, a.End))
		})
		var open []Event // the enclosing events, outermost first
		for _, e := range evs {
			for len(open) > 0 && open[len(open)-1].End <= e.Start {
				open = open[:len(open)-1]
			}
			if len(open) > 0 && e.End > open[len(open)-1].End {
				p := open[len(open)-1]
				t.Fatalf("%s: pid %d tid %d: %q [%d, %d] ns overlaps %q [%d, %d] ns without nesting in it",
					name, k.pid, k.tid, e.Name, e.Start, e.End, p.Name, p.Start, p.End)
			}
			open = append(open, e)
		}
	}
}
