package trace

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// event is what the analyses keep of a trace event: the GPU-side events
// (a stream other than -1) whole, the host side only as the launches'
// correlation ids and the profiler steps.
type event struct {
	ts, end     float64 // µs, rounded as HTA rounds sub-µs traces
	correlation int64
	name        string // host events and goccl's; "" for Kineto's GPU events (kind and flags kept instead)
	// goccl operations: the sequence number and, when the communicator
	// knew it, the rank that entered last and how long after the first
	// (lastRank -1: not known).
	seq       int64
	lag       float32 // µs
	lastRank  int32
	kind      Kind
	p2p, dtoh bool // a point-to-point NCCL kernel; a device-to-host copy
}

// Rank is one trace file read: its rank and the events the analyses use.
type Rank struct {
	File  string // as given
	Rank  int    // distributedInfo.rank, 0 when the trace has none (as HTA)
	gpu   []event
	steps []event // ProfilerStep#N on the host; goccl: ddp's steps (steps.go)
	// syncs are the host events that block on the GPU (syncKind), loader
	// the data loader's (names holding "DataLoader"): what the per-step
	// figures count.
	syncs  []event
	loader []event
	// transfers are an xfer agent's requests (goccl traces with "path");
	// serving the inference requests of serving spans (serving.go).
	transfers []transfer
	serving   map[int64]*servingReq
	// launches are the host events' correlation ids (the launches) with
	// the earliest start among the host events carrying each, sorted by id
	// once read (launchAt); noCorr is the earliest host event without one.
	launches []launch
	noCorr   float64
	anyNo    bool
	hostAny  bool    // any host event at all
	hostMin  float64 // earliest host event start
	events   int     // trace events read
	floatTS  bool    // some ts is not a whole number (HTA then rounds every event)
	goccl    bool    // a goccl trace (GOCCL_TRACE_FILE), not Kineto's
	// Truncated says a goccl trace ended without its closing ']' (its
	// process was killed): what it holds up to the cut is read.
	Truncated bool
}

// rawEvent is a trace event as JSON (Chrome trace format, as Kineto writes
// it).
type rawEvent struct {
	Name string          `json:"name"`
	Cat  *string         `json:"cat"`
	Ph   string          `json:"ph"`
	Pid  json.RawMessage `json:"pid"` // Kineto's may be strings
	Tid  json.RawMessage `json:"tid"`
	Ts   json.Number     `json:"ts"`
	Dur  json.Number     `json:"dur"`
	Args json.RawMessage `json:"args"`
}

type rawArgs struct {
	Stream      json.RawMessage `json:"stream"`
	Correlation json.RawMessage `json:"correlation"`
}

// Read reads one Kineto (PyTorch profiler) trace, JSON or gzipped JSON,
// streaming its events: memory grows with the GPU events and launches it
// holds, not with the file.
func Read(r io.Reader, file string) (*Rank, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 1<<16)
	}
	dec := json.NewDecoder(br)
	dec.UseNumber()
	rk := &Rank{File: file}
	t, err := dec.Token()
	if err == nil && t == json.Delim('[') {
		return rk, rk.readGoccl(dec)
	}
	if err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("%s: not a Chrome trace (a JSON object with traceEvents, or goccl's array): %v", file, tokenOrErr(t, err))
	}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		key, _ := kt.(string)
		switch key {
		case "traceEvents":
			if t, err := dec.Token(); err != nil || t != json.Delim('[') {
				return nil, fmt.Errorf("%s: traceEvents is not an array: %v", file, tokenOrErr(t, err))
			}
			for dec.More() {
				var e rawEvent
				if err := dec.Decode(&e); err != nil {
					return nil, fmt.Errorf("%s: trace event %d: %w", file, rk.events, err)
				}
				rk.events++
				if err := rk.add(&e); err != nil {
					return nil, fmt.Errorf("%s: trace event %d: %w", file, rk.events-1, err)
				}
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
		case "distributedInfo":
			var di struct {
				Rank *json.Number `json:"rank"`
			}
			if err := dec.Decode(&di); err != nil {
				return nil, fmt.Errorf("%s: distributedInfo: %w", file, err)
			}
			if di.Rank != nil {
				n, err := strconv.Atoi(di.Rank.String())
				if err != nil || n < 0 {
					return nil, fmt.Errorf("%s: distributedInfo.rank %q: want a rank ≥ 0", file, di.Rank.String())
				}
				rk.Rank = n
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, fmt.Errorf("%s: %q: %w", file, key, err)
			}
		}
	}
	rk.sortLaunches()
	rk.round()
	return rk, nil
}

func tokenOrErr(t json.Token, err error) any {
	if err != nil {
		return err
	}
	return t
}

// add keeps what the analyses need of e. Like HTA, only events with both
// dur and cat count (complete events: ph X), and not cat "Trace".
func (rk *Rank) add(e *rawEvent) error {
	if e.Ts == "" {
		rk.floatTS = true // pandas makes the column float when a ts is missing
	} else if strings.ContainsAny(string(e.Ts), ".eE") {
		rk.floatTS = true
	}
	if e.Dur == "" || e.Cat == nil || *e.Cat == "Trace" {
		return nil
	}
	ts, err := e.Ts.Float64()
	if err != nil {
		return fmt.Errorf("ts %q: %w", e.Ts, err)
	}
	dur, err := e.Dur.Float64()
	if err != nil {
		return fmt.Errorf("dur %q: %w", e.Dur, err)
	}
	stream, corr := int64(-1), int64(-1)
	if len(e.Args) > 0 && e.Args[0] == '{' {
		var a rawArgs
		if json.Unmarshal(e.Args, &a) == nil {
			stream, corr = intArg(a.Stream), intArg(a.Correlation)
		}
	}
	ev := event{ts: ts, end: ts + dur, correlation: corr}
	switch {
	case isGPU(stream, corr, e.Name):
		if stream != -1 {
			rk.gpu = append(rk.gpu, gpuEvent(ev, e.Name))
		}
	default:
		if !rk.hostAny || ts < rk.hostMin {
			rk.hostMin = ts
		}
		rk.hostAny = true
		named := ev
		named.name = e.Name
		switch {
		case isStep(e.Name):
			rk.steps = append(rk.steps, named)
		case syncKind(e.Name) != "":
			rk.syncs = append(rk.syncs, named)
		case strings.Contains(e.Name, "DataLoader"):
			rk.loader = append(rk.loader, named)
		}
		if corr >= 0 {
			rk.launches = append(rk.launches, launch{corr, ts})
		} else if !rk.anyNo || ts < rk.noCorr {
			rk.noCorr, rk.anyNo = ts, true
		}
		if stream != -1 {
			// A host event with a stream (Triton's cpu_op on stream 0)
			// counts in the breakdown like a GPU one.
			ev.correlation = -2 // never filtered by launch
			rk.gpu = append(rk.gpu, gpuEvent(ev, e.Name))
		}
	}
	return nil
}

// intArg reads a stream or correlation argument as pandas' to_numeric
// would: a number, or a numeric string; anything else (absent, "0x0") is
// -1.
func intArg(raw json.RawMessage) int64 {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return -1
	}
	if s[0] == '"' {
		var str string
		if json.Unmarshal(raw, &str) != nil {
			return -1
		}
		s = strings.TrimSpace(str)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return -1
	}
	return int64(f)
}

// isGPU is HTA's GPU-event predicate: on a stream with a launch's
// correlation, or a device-wide synchronization.
func isGPU(stream, corr int64, name string) bool {
	return stream >= 0 && corr >= 0 || name == "Event Sync" || name == "Context Sync"
}

// gpuEvent is ev as a Kineto GPU event keeps it: its kind and flags from
// name, not the name (whose copies took most of the memory of a large
// trace).
func gpuEvent(ev event, name string) event {
	ev.kind = kindOf(name)
	ev.p2p = ev.kind == Communication && pointToPoint(name)
	ev.dtoh = strings.HasPrefix(name, "Memcpy DtoH")
	return ev
}

// launch is a correlation id and the earliest host event carrying it.
type launch struct {
	corr int64
	ts   float64
}

// sortLaunches sorts the launches by id and keeps the earliest of each.
func (rk *Rank) sortLaunches() {
	l := rk.launches
	sort.Slice(l, func(i, j int) bool { return l[i].corr < l[j].corr || l[i].corr == l[j].corr && l[i].ts < l[j].ts })
	out := l[:0]
	for i, x := range l {
		if i == 0 || x.corr != l[i-1].corr {
			out = append(out, x)
		}
	}
	rk.launches = slices.Clip(out)
}

// launchAt is the start of the earliest host event with correlation id
// corr (-1: those with none).
func (rk *Rank) launchAt(corr int64) (float64, bool) {
	if corr < 0 {
		return rk.noCorr, rk.anyNo && corr == -1
	}
	i := sort.Search(len(rk.launches), func(i int) bool { return rk.launches[i].corr >= corr })
	if i < len(rk.launches) && rk.launches[i].corr == corr {
		return rk.launches[i].ts, true
	}
	return 0, false
}

// isStep reports whether name is a profiler step, ProfilerStep#N.
func isStep(name string) bool {
	n, ok := strings.CutPrefix(name, "ProfilerStep#")
	if !ok || n == "" {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// round applies HTA's rounding of sub-µs traces: where any ts is not a
// whole number, every event's start rounds up and its end down.
func (rk *Rank) round() {
	if !rk.floatTS {
		return
	}
	for _, s := range [][]event{rk.gpu, rk.steps, rk.syncs, rk.loader} {
		for i := range s {
			s[i].ts, s[i].end = math.Ceil(s[i].ts), math.Floor(s[i].end)
		}
	}
	for i := range rk.launches {
		rk.launches[i].ts = math.Ceil(rk.launches[i].ts)
	}
	rk.noCorr = math.Ceil(rk.noCorr)
	rk.hostMin = math.Ceil(rk.hostMin)
}

// ErrNoGPU is returned for a trace with no GPU events to analyse.
var ErrNoGPU = errors.New("no GPU events (kernels, memory copies) in the trace")

// readGoccl reads the rest of a goccl trace (GOCCL_TRACE_FILE: the JSON
// array form, one complete event per operation on track 0 and per span the
// program adds on track 1, the rank as pid; µs since the epoch). Its
// operations are the communication; the program's spans (forward,
// backward, optimizer, ddp's "ddp compute") the computation, except spans
// that wait on communication (names ending in "wait", ddp's "ddp wait").
// There are no streams: the window is that of everything recorded.
func (rk *Rank) readGoccl(dec *json.Decoder) error {
	rankSet := false
	for dec.More() {
		var e rawEvent
		if err := dec.Decode(&e); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				rk.Truncated = true // cut in an event: a killed process's file
				break
			}
			return fmt.Errorf("%s: trace event %d: %w", rk.File, rk.events, err)
		}
		rk.events++
		if e.Ph != "X" {
			continue
		}
		ts, err1 := e.Ts.Float64()
		dur, err2 := e.Dur.Float64()
		pid, err3 := strconv.Atoi(string(e.Pid))
		if err := errors.Join(err1, err2, err3); err != nil || pid < 0 {
			return fmt.Errorf("%s: trace event %d (%s): ts %q, dur %q, pid %q: want numbers", rk.File, rk.events-1, e.Name, e.Ts, e.Dur, e.Pid)
		}
		if !rankSet {
			rk.Rank, rankSet = pid, true
		} else if pid != rk.Rank {
			return fmt.Errorf("%s: events of ranks %d and %d: give one rank's trace per file (goccl trace merge joins them for viewing)", rk.File, rk.Rank, pid)
		}
		ev := event{name: e.Name, ts: ts, end: ts + dur, correlation: -2, lastRank: -1}
		if string(e.Tid) != "0" && servingSpan[e.Name] {
			rk.addServing(e.Name, ts, dur, e.Args)
		}
		switch {
		case string(e.Tid) == "0":
			ev.kind = Communication
			var a struct {
				Seq      int64    `json:"seq"`
				LastRank *int     `json:"last_rank"`
				Lag      *float64 `json:"lag_us"`
				Bytes    int64    `json:"bytes"`
				Path     string   `json:"path"`
				Peer     string   `json:"peer"`
				Error    string   `json:"error"`
			}
			if len(e.Args) > 0 && json.Unmarshal(e.Args, &a) == nil {
				ev.seq = a.Seq
				if a.LastRank != nil && a.Lag != nil {
					ev.lastRank, ev.lag = int32(*a.LastRank), float32(*a.Lag)
				}
				if a.Path != "" { // an xfer agent's request (xfer.Options.TraceFile)
					ev.seq = 0 // numbered per agent, not a collective
					rk.transfers = append(rk.transfers, transfer{op: e.Name, path: a.Path, peer: a.Peer, bytes: a.Bytes, ts: ts, dur: dur, failed: a.Error != ""})
				}
			}
		case strings.HasSuffix(e.Name, "wait"):
			ev.kind = Other
		default:
			ev.kind = Computation
		}
		rk.gpu = append(rk.gpu, ev)
	}
	rk.goccl = true
	if rk.Truncated {
		return nil
	}
	if _, err := dec.Token(); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			rk.Truncated = true // no closing ']': the recorder never closed the file
			return nil
		}
		return fmt.Errorf("%s: %w", rk.File, err)
	}
	return nil
}
