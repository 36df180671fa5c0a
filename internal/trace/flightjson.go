package trace

import (
	"encoding/json"
	"io"
	"strconv"
	"strings"
)

// The JSON form of a dump, with PyTorch's keys (FlightRecorderDetail.hpp's
// dump_json): pg_config and pg_status hold strings, as PyTorch's JSON dump
// writes them; "rank" is goccl's own (PyTorch's fr_trace takes the rank
// from the file name, which it ignores).
type flightDump struct {
	Version        string                       `json:"version"`
	CommLibVersion string                       `json:"comm_lib_version"`
	Rank           int                          `json:"rank"`
	PGConfig       map[string]flightPGConfig    `json:"pg_config"`
	PGStatus       map[string]map[string]string `json:"pg_status"`
	Entries        []flightEntry                `json:"entries"`
}

type flightPGConfig struct {
	Name  string `json:"name"`
	Desc  string `json:"desc"`
	Ranks string `json:"ranks"` // "[0, 1, 2]", as PyTorch writes it
}

type flightEntry struct {
	RecordID        uint64    `json:"record_id"`
	PGID            int       `json:"pg_id"`
	ProcessGroup    [2]string `json:"process_group"` // name, desc
	CollectiveSeqID uint64    `json:"collective_seq_id"`
	P2PSeqID        uint64    `json:"p2p_seq_id"`
	OpID            uint64    `json:"op_id"`
	ProfilingName   string    `json:"profiling_name"`
	TimeCreatedNs   int64     `json:"time_created_ns"`
	DurationMs      *float64  `json:"duration_ms,omitempty"`
	InputSizes      [][]int64 `json:"input_sizes"`
	InputDtypes     []string  `json:"input_dtypes"`
	OutputSizes     [][]int64 `json:"output_sizes"`
	OutputDtypes    []string  `json:"output_dtypes"`
	State           string    `json:"state"`
	TimeStartedNs   int64     `json:"time_discovered_started_ns"`
	TimeCompletedNs int64     `json:"time_discovered_completed_ns"`
	Retired         bool      `json:"retired"`
	TimeoutMs       int64     `json:"timeout_ms"`
	IsP2P           bool      `json:"is_p2p"`
	Error           string    `json:"goccl_error,omitempty"`
}

// tensor is the sizes and dtypes of one tensor of n elements (none for n < 0).
func tensor(n int64, dtype string) ([][]int64, []string) {
	if n < 0 {
		return [][]int64{}, []string{}
	}
	return [][]int64{{n}}, []string{dtype}
}

// entries are op's entries in the dump: one, or two for a SendRecv with
// both halves (its send, then its receive).
func (f *Flight) entries(o *Op) []flightEntry {
	e := flightEntry{RecordID: o.id, ProcessGroup: [2]string{f.g.Name, f.g.Desc}, CollectiveSeqID: o.Seq,
		OpID: o.id, ProfilingName: o.profilingName(f.g.Rank, 0), TimeCreatedNs: o.created, State: o.state(),
		TimeStartedNs: o.started, TimeCompletedNs: o.completed, Retired: o.retired,
		TimeoutMs: f.g.Timeout.Milliseconds(), IsP2P: o.P2P, Error: o.err}
	if o.completed != 0 && o.started != 0 {
		ms := float64(o.completed-o.started) / 1e6
		e.DurationMs = &ms
	}
	e.InputSizes, e.InputDtypes = tensor(o.In, o.DType)
	e.OutputSizes, e.OutputDtypes = tensor(o.Out, o.DType)
	switch o.Name {
	case "send":
		e.P2PSeqID = o.SendSeq
	case "recv":
		e.P2PSeqID = o.RecvSeq
	case "sendrecv":
		e.P2PSeqID = o.SendSeq
		r := e
		r.ProfilingName, r.P2PSeqID = o.profilingName(f.g.Rank, 1), o.RecvSeq
		r.InputSizes, r.InputDtypes = tensor(o.Out, o.DType)
		e.OutputSizes, e.OutputDtypes = tensor(o.In, o.DType)
		return []flightEntry{e, r}
	}
	return []flightEntry{e}
}

// WriteJSON writes the operations the recorder holds, oldest first, as a
// dump in PyTorch's flight-recorder JSON schema (version FlightVersion):
// "version", "comm_lib_version", "pg_config", "pg_status" and "entries",
// each entry with PyTorch's keys (record_id, process_group,
// collective_seq_id, p2p_seq_id, profiling_name, input_sizes,
// input_dtypes, output_sizes, output_dtypes, state, the times, retired,
// timeout_ms, is_p2p, duration_ms) and goccl_error for one that failed.
func (f *Flight) WriteJSON(w io.Writer) error {
	ops, enq, start, done := f.snapshot(len(f.ring))
	d := flightDump{Version: FlightVersion, CommLibVersion: f.g.Lib, Rank: f.g.Rank,
		PGConfig: map[string]flightPGConfig{f.g.Name: {Name: f.g.Name, Desc: f.g.Desc, Ranks: ranksString(f.g.Size)}},
		PGStatus: map[string]map[string]string{"0": {
			"last_enqueued_collective":  strconv.FormatUint(enq, 10),
			"last_started_collective":   strconv.FormatUint(start, 10),
			"last_completed_collective": strconv.FormatUint(done, 10)}},
		Entries: make([]flightEntry, 0, len(ops))}
	for i := range ops {
		d.Entries = append(d.Entries, f.entries(&ops[i])...)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(d)
}

// ranksString is "[0, 1, ..., n-1]", the form of pg_config's ranks.
func ranksString(n int) string {
	var sb strings.Builder
	sb.WriteByte('[')
	for r := range n {
		if r > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(strconv.Itoa(r))
	}
	sb.WriteByte(']')
	return sb.String()
}
