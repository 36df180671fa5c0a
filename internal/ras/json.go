package ras

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// timeLayout is RAS's timestamp format ("%F %T").
const timeLayout = "2006-01-02 15:04:05"

// The JSON reply, in RAS's shape (NCCL 2.28.7's "SET FORMAT json": the
// same keys where goccl has the fact; cuda_dev and nvml_dev are -1, a rank
// has no GPU) with goccl's additions: each rank's goccl status, error,
// operation, links and arrival skew, and each missing rank's reason.
type jsonJob struct {
	Version       string     `json:"goccl_version"`
	Protocol      int        `json:"ras_protocol"`
	Timestamp     string     `json:"timestamp"`
	Nodes         int        `json:"nodes_count"`
	Processes     int        `json:"processes_count"`
	Ranks         int        `json:"ranks_count"`
	CommsCount    int        `json:"communicators_count"`
	Comms         []jsonComm `json:"communicators"`
	DeadProcesses []jsonPeer `json:"dead_processes"`
	RAS           jsonRAS    `json:"ras"`
}

type jsonComm struct {
	Hash         string        `json:"hash"`
	ID           string        `json:"id"`
	Label        string        `json:"label"`
	Size         int           `json:"size"`
	RanksCount   int           `json:"ranks_count"`
	MissingCount int           `json:"missing_ranks_count"`
	Status       string        `json:"status"`
	Errors       string        `json:"errors"`
	Ranks        []jsonRank    `json:"ranks"`
	Missing      []jsonMissing `json:"missing_ranks"`
}

type jsonRank struct {
	Rank    int               `json:"rank"`
	Host    string            `json:"host"`
	Pid     int               `json:"pid"`
	CudaDev int               `json:"cuda_dev"`
	NvmlDev int               `json:"nvml_dev"`
	Status  jsonRankStatus    `json:"status"`
	Counts  map[string]uint64 `json:"collective_counts"`
	State   string            `json:"goccl_status"`
	Error   string            `json:"error,omitempty"`
	Seq     uint64            `json:"last_seq"`
	Op      *Op               `json:"operation"`
	IdleSec float64           `json:"idle_sec"`
	Links   []Link            `json:"links"`
	Lost    []int             `json:"lost_ranks,omitempty"`
	Skew    []Skew            `json:"arrival_skew,omitempty"`
	// Progress says what holds the rank's operation up, when it has not
	// moved for StallAfter: "entered op #N ... but is not progressing: ..."
	// (NotProgressing: an end of the link that stops the operation) or
	// "is waiting on rank R ..." (WaitingOn R).
	Progress       string `json:"progress,omitempty"`
	NotProgressing bool   `json:"not_progressing,omitempty"`
	WaitingOn      *int   `json:"waiting_on,omitempty"`
}

type jsonRankStatus struct {
	InitState      int  `json:"init_state"`
	AsyncError     int  `json:"async_error"`
	FinalizeCalled bool `json:"finalize_called"`
	DestroyFlag    bool `json:"destroy_flag"`
	AbortFlag      bool `json:"abort_flag"`
}

type jsonMissing struct {
	Rank    int               `json:"rank"`
	Host    string            `json:"host"`
	Pid     int               `json:"pid"`
	CudaDev int               `json:"cuda_dev"`
	NvmlDev int               `json:"nvml_dev"`
	Status  jsonMissingStatus `json:"status"`
	Reason  string            `json:"reason"`
}

type jsonMissingStatus struct {
	Unresponsive bool `json:"unresponsive"`
	Dead         bool `json:"considered_dead"`
}

type jsonPeer struct {
	Rank   int    `json:"rank"`
	Host   string `json:"host"`
	Pid    int    `json:"pid"`
	Reason string `json:"reason"`
}

type jsonRAS struct {
	CollectionSec float64 `json:"collection_time_sec"`
	Timeouts      int     `json:"timeouts_count"`
}

// ncclRemoteError is ncclResult_t's remote error (6), the async_error of
// a rank whose communicator failed; 7 is ncclInProgress (init_state of a
// rank still initializing).
const (
	ncclRemoteError = 6
	ncclInProgress  = 7
)

// JSON renders the job as RAS's JSON reply, indented, ending in a newline.
func (j *Job) JSON() ([]byte, error) {
	comms := j.comms()
	out := jsonJob{Version: j.Version, Protocol: ProtocolVersion, Timestamp: j.Time.Format(timeLayout),
		Processes: len(j.processes()), Ranks: len(j.Peers), CommsCount: len(comms), Comms: []jsonComm{}, DeadProcesses: []jsonPeer{},
		RAS: jsonRAS{CollectionSec: j.Elapsed.Seconds(), Timeouts: j.timeouts()}}
	hosts := map[string]bool{}
	for _, p := range j.Peers {
		hosts[p.HostID] = true
		if p.State == Dead || p.State == Unknown {
			out.DeadProcesses = append(out.DeadProcesses, jsonPeer{Rank: p.Rank, Host: p.Host, Pid: p.Pid, Reason: p.Why})
		}
	}
	out.Nodes = len(hosts)
	for _, v := range comms {
		out.Comms = append(out.Comms, j.jsonComm(comms, v))
	}
	b, err := json.MarshalIndent(out, "", "  ")
	return append(b, '\n'), err
}

func (j *Job) jsonComm(comms []*commView, v *commView) jsonComm {
	c := jsonComm{Hash: "0x" + hash(v.id), ID: v.id, Label: label(comms, v), Size: v.size, RanksCount: len(v.ranks),
		MissingCount: len(v.missing), Status: v.statusWord(), Errors: errorWords[v.errors], Ranks: []jsonRank{}, Missing: []jsonMissing{}}
	st := stalls(v)
	for _, rv := range v.ranks {
		r := rv.rep
		jr := jsonRank{Rank: r.Rank, Host: rv.proc.Report.Host, Pid: rv.proc.Report.Pid, CudaDev: -1, NvmlDev: -1,
			Counts: r.Counts, State: r.Status, Error: r.Error, Seq: r.Seq, Op: r.Op, IdleSec: r.IdleSec,
			Links: r.Links, Lost: r.Lost, Skew: r.Skew}
		if jr.Links == nil {
			jr.Links = []Link{}
		}
		switch r.Status {
		case "INIT":
			jr.Status.InitState = ncclInProgress
		case "FINALIZE":
			jr.Status.FinalizeCalled, jr.Status.DestroyFlag = true, true
		case "ABORT":
			jr.Status.AbortFlag, jr.Status.DestroyFlag = true, true
		}
		if r.Error != "" {
			jr.Status.AsyncError = ncclRemoteError
		}
		if s, ok := st[r.Rank]; ok {
			jr.Progress, jr.NotProgressing = "Rank "+strconv.Itoa(r.Rank)+" "+s.text, s.stuck
			if s.on >= 0 {
				jr.WaitingOn = &s.on
			}
		}
		c.Ranks = append(c.Ranks, jr)
	}
	for _, m := range v.missing {
		jm := jsonMissing{Rank: m, Pid: -1, CudaDev: -1, NvmlDev: -1, Reason: "process not known"}
		if p := j.peerOf(v, m); p != nil {
			jm.Host, jm.Pid, jm.Reason = p.Host, p.Pid, p.Why
			jm.Status.Unresponsive = p.State == Unresponsive
			jm.Status.Dead = p.State == Dead || p.State == Unknown
			if p.State == Answered {
				jm.Reason = "its process answered without this communicator"
			}
		}
		c.Missing = append(c.Missing, jm)
	}
	return c
}

// Event is one MONITOR notification.
type Event struct {
	Time    string // timeLayout
	Group   int    // GroupLifecycle or GroupTrace
	Name    string // PEER_DEAD, PEER_UNRESPONSIVE, PEER_RESPONSIVE, COMM_ERROR
	Peer    *PeerResult
	Details string
}

// Diff returns the events between two probes of a job: ranks that died,
// stopped answering or answer again, and communicators that failed.
func Diff(prev, cur *Job) []Event {
	var evs []Event
	now := cur.Time.Format(timeLayout)
	for i := range cur.Peers {
		if i >= len(prev.Peers) {
			break
		}
		p, c := &prev.Peers[i], &cur.Peers[i]
		switch {
		case c.State == p.State:
		case c.State == Dead:
			evs = append(evs, Event{now, GroupLifecycle, "PEER_DEAD", c, c.Why})
		case c.State == Unresponsive:
			evs = append(evs, Event{now, GroupTrace, "PEER_UNRESPONSIVE", c, c.Why})
		case c.State == Answered && p.State == Unresponsive:
			evs = append(evs, Event{now, GroupTrace, "PEER_RESPONSIVE", c, ""})
		}
		if c.Report == nil || p.Report == nil {
			continue
		}
		for _, cc := range c.Report.Comms {
			if cc.Error != "" && !failedBefore(p.Report, cc.ID, cc.Rank) {
				evs = append(evs, Event{now, GroupLifecycle, "COMM_ERROR", c, fmt.Sprintf("communicator %s rank %d: %s", cc.ID, cc.Rank, cc.Error)})
			}
		}
	}
	return evs
}

func failedBefore(r *Report, id string, rank int) bool {
	for _, c := range r.Comms {
		if c.ID == id && c.Rank == rank {
			return c.Error != ""
		}
	}
	return false
}

// Format renders the event as RAS does: one text line, or a JSON object.
func (e *Event) Format(asJSON bool) string {
	if !asJSON {
		return fmt.Sprintf("[%s] %s: %s %s\n", e.Time, e.Name, procText(e.Peer), e.Details)
	}
	group := "LIFECYCLE"
	if e.Group == GroupTrace {
		group = "TRACE"
	}
	ev := struct {
		Time    string `json:"timestamp"`
		Group   string `json:"group"`
		Event   string `json:"event"`
		Peer    any    `json:"peer"`
		Details string `json:"details"`
	}{e.Time, group, e.Name, struct {
		Host     string `json:"host"`
		Pid      int    `json:"pid"`
		Ranks    []int  `json:"ranks"`
		CudaDevs []int  `json:"cuda_devs"`
		NvmlDevs []int  `json:"nvml_devs"`
	}{e.Peer.Host, e.Peer.Pid, []int{e.Peer.Rank}, []int{}, []int{}}, e.Details}
	b, _ := json.MarshalIndent(ev, "", "  ")
	return string(b) + "\n"
}
