// Package trace records a communicator's operations: as Chrome trace-event
// JSON that Perfetto (ui.perfetto.dev) and chrome://tracing open, one file per
// rank, and in a flight recorder, a ring of the last operations that the
// communicator prints when it fails (the idea of PyTorch's NCCL flight
// recorder).
//
// The file is the trace-event format's JSON Array form (Trace Event Format,
// Google, "JSON Array Format"): a '[' then one object per line, each a
// complete event ("ph":"X") with the operation's name, its start ("ts") and
// duration ("dur") in microseconds since the Unix epoch, the rank as the
// process ("pid") and a track ("tid": 0 for the operations, 1 for what the
// program adds with Span), and "args" with the sequence number, bytes,
// algorithm, outcome and, when the rank knows it, the rank that entered the
// operation last ("last_rank") and how many microseconds after the first
// ("lag_us"). Timestamps are wall-clock, so the files of ranks on
// one host line up, and `goccl trace merge` joins them onto one timeline.
// Recording allocates nothing: events are encoded into a reused buffer.
package trace

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Event is one operation (or span).
type Event struct {
	Name  string // "AllReduce", "Group", ... or the program's span name
	Track int    // 0: the communicator's operations; 1: spans the program adds
	Seq   uint64 // the operation's sequence number (0 for spans and point to point)
	Bytes int64  // bytes the operation moves per rank as the caller gave them (count x element size)
	Algo  string // the schedule ("ring", "pairwise", ...), "" if not known
	Start time.Time
	End   time.Time
	Err   string // "" on success
	// Path and Peer describe a transfer of the xfer agent: the lanes it
	// took (args "path": "rdma", "tcp", "shm", "local", joined by "+") and
	// the remote agent ("peer"); "" for a communicator's operations.
	Path, Peer string
	// KnowsLast says that this rank knows which rank entered the
	// operation last (LastRank) and how long after the first (Lag): the
	// args last_rank and lag_us.
	KnowsLast bool
	LastRank  int
	Lag       time.Duration
}

// Recorder keeps the last events in a ring and, when it has a file, writes
// every event to it. Its methods are safe for concurrent use. A nil
// *Recorder records nothing.
type Recorder struct {
	mu     sync.Mutex
	rank   int
	ring   []Event
	next   int // events recorded so far
	f      *os.File
	w      *bufio.Writer
	buf    []byte
	closed bool
}

// ExpandPath replaces %r with the rank, %p with the process id and %h with
// the host name in a GOCCL_TRACE_FILE value ("trace-%r.json").
func ExpandPath(path string, rank int) string {
	if !strings.Contains(path, "%") {
		return path
	}
	host, _ := os.Hostname()
	return strings.NewReplacer("%r", strconv.Itoa(rank), "%p", strconv.Itoa(os.Getpid()), "%h", host).Replace(path)
}

// New returns a recorder of rank's events keeping the last keep of them
// (keep >= 1), writing every event to path when path is not "" (the file is
// created or truncated).
func New(rank, keep int, path string) (*Recorder, error) {
	if keep < 1 {
		keep = 1
	}
	r := &Recorder{rank: rank, ring: make([]Event, keep), buf: make([]byte, 0, 512)}
	if path != "" {
		f, err := os.Create(path)
		if err != nil {
			return nil, fmt.Errorf("trace file: %w", err)
		}
		r.f, r.w = f, bufio.NewWriterSize(f, 64<<10)
		r.w.WriteString("[\n")
		r.meta()
	}
	return r, nil
}

// meta writes the metadata events that name the process and its tracks.
func (r *Recorder) meta() {
	pid := strconv.Itoa(r.rank)
	fmt.Fprintf(r.w, `{"name":"process_name","ph":"M","pid":%s,"tid":0,"args":{"name":"rank %s"}},`+"\n", pid, pid)
	fmt.Fprintf(r.w, `{"name":"thread_name","ph":"M","pid":%s,"tid":0,"args":{"name":"goccl operations"}},`+"\n", pid)
	fmt.Fprintf(r.w, `{"name":"thread_name","ph":"M","pid":%s,"tid":1,"args":{"name":"program"}},`+"\n", pid)
}

// Record adds e to the file and, if it is an operation (track 0), to the
// ring.
func (r *Recorder) Record(e *Event) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Track == 0 {
		r.ring[r.next%len(r.ring)] = *e
		r.next++
	}
	if r.w == nil || r.closed {
		return
	}
	b := r.buf[:0]
	b = append(b, `{"name":`...)
	b = strconv.AppendQuote(b, e.Name)
	b = append(b, `,"ph":"X","pid":`...)
	b = strconv.AppendInt(b, int64(r.rank), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendInt(b, int64(e.Track), 10)
	// ts and dur from the wall clock both, so that ts+dur is the end's wall
	// time: an event that ends when the next starts does not overlap it
	// (End.Sub(Start) reads the monotonic clock, which drifts from the wall
	// clock by some nanoseconds between readings, and viewers then see
	// spans that are not nested). A wall clock stepped back gives 0.
	start := e.Start.UnixNano()
	b = append(b, `,"ts":`...)
	b = appendMicros(b, start)
	b = append(b, `,"dur":`...)
	b = appendMicros(b, max(e.End.UnixNano()-start, 0))
	b = append(b, `,"args":{"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, e.Bytes, 10)
	if e.Algo != "" {
		b = append(b, `,"algorithm":`...)
		b = strconv.AppendQuote(b, e.Algo)
	}
	if e.KnowsLast {
		b = append(b, `,"last_rank":`...)
		b = strconv.AppendInt(b, int64(e.LastRank), 10)
		b = append(b, `,"lag_us":`...)
		b = appendMicros(b, e.Lag.Nanoseconds())
	}
	if e.Path != "" {
		b = append(b, `,"path":`...)
		b = strconv.AppendQuote(b, e.Path)
	}
	if e.Peer != "" {
		b = append(b, `,"peer":`...)
		b = strconv.AppendQuote(b, e.Peer)
	}
	if e.Err != "" {
		b = append(b, `,"error":`...)
		b = strconv.AppendQuote(b, e.Err)
	}
	b = append(b, "}},\n"...)
	r.w.Write(b)
	r.buf = b
}

// appendMicros appends ns as microseconds with three decimals.
func appendMicros(b []byte, ns int64) []byte {
	if ns < 0 {
		b = append(b, '-')
		ns = -ns
	}
	b = strconv.AppendInt(b, ns/1000, 10)
	frac := ns % 1000
	return append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}

// Last returns up to n of the most recent events, oldest first.
func (r *Recorder) Last(n int) []Event {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n = min(n, r.next, len(r.ring))
	out := make([]Event, 0, n)
	for i := r.next - n; i < r.next; i++ {
		out = append(out, r.ring[i%len(r.ring)])
	}
	return out
}

// Dump formats the last n events for a log, one line each.
func (r *Recorder) Dump(n int) string {
	var sb strings.Builder
	for _, e := range r.Last(n) {
		fmt.Fprintf(&sb, "\n  %s #%d %d bytes", e.Name, e.Seq, e.Bytes)
		if e.Algo != "" {
			fmt.Fprintf(&sb, " (%s)", e.Algo)
		}
		fmt.Fprintf(&sb, " at %s, %v", e.Start.Format("15:04:05.000000"), e.End.Sub(e.Start).Round(time.Microsecond))
		if e.KnowsLast {
			fmt.Fprintf(&sb, ", rank %d entered last (+%v)", e.LastRank, e.Lag.Round(time.Microsecond))
		}
		if e.Err != "" {
			fmt.Fprintf(&sb, ": %s", e.Err)
		}
	}
	return sb.String()
}

// Flush writes what the file's buffer holds (the communicator calls it when
// an operation fails, so the trace is complete up to the failure even if
// the process then dies).
func (r *Recorder) Flush() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil && !r.closed {
		r.w.Flush()
	}
}

// Close ends the file with a last metadata event (the rank's sort order:
// every event line ends with a comma) and the array's closing bracket, and
// closes it.
func (r *Recorder) Close() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil || r.closed {
		return nil
	}
	r.closed = true
	fmt.Fprintf(r.w, `{"name":"process_sort_index","ph":"M","pid":%d,"tid":0,"args":{"sort_index":%d}}`+"\n]\n", r.rank, r.rank)
	err := r.w.Flush()
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadFile reads the events of a trace file as raw JSON objects. It also
// reads the file of a rank that died before Close: an array without its
// closing bracket, its last line ending with a comma or cut short (the cut
// event is dropped).
func ReadFile(path string) ([]json.RawMessage, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var events []json.RawMessage
	if err := json.Unmarshal(b, &events); err == nil {
		return events, nil
	}
	// One event per line is what Recorder writes: parse line by line.
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		l = strings.TrimSuffix(strings.TrimSpace(l), ",")
		if l == "" || l == "[" || l == "]" {
			continue
		}
		if !json.Valid([]byte(l)) {
			if i >= len(lines)-2 { // the last line, cut short
				break
			}
			return nil, fmt.Errorf("%s:%d: not a trace event: %.80s", path, i+1, l)
		}
		events = append(events, json.RawMessage(l))
	}
	if len(events) == 0 {
		return nil, fmt.Errorf("%s: no trace events", path)
	}
	return events, nil
}

// Merge writes the events of several trace files (one per rank, each its own
// pid) as one trace-event JSON array to w, so that one viewer shows every
// rank on one timeline.
func Merge(w io.Writer, paths ...string) (events int, err error) {
	bw := bufio.NewWriter(w)
	bw.WriteString("[\n")
	first := true
	for _, p := range paths {
		evs, err := ReadFile(p)
		if err != nil {
			return events, err
		}
		for _, e := range evs {
			if !first {
				bw.WriteString(",\n")
			}
			first = false
			bw.Write(e)
			events++
		}
	}
	bw.WriteString("\n]\n")
	return events, bw.Flush()
}
