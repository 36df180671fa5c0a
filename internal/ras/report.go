// Package ras is goccl's job-wide health query in the shape of NCCL's RAS
// (reliability, availability, serviceability) subsystem: its client
// protocol (a text protocol on a TCP port: "CLIENT PROTOCOL 2", then
// STATUS, VERBOSE STATUS, SET FORMAT text|json, TIMEOUT <s>, MONITOR
// [groups]), its text and JSON replies, and its monitor events, over what
// goccl knows about a job.
//
// The pieces: every process of a job answers status probes on a listener
// of its own (Answer: one JSON Report of its communicators per
// connection, after a nonce/MAC exchange keyed by the job token); the
// server (Server, run by rank 0) probes every rank with bounded waits
// (Gather), tells a dead process (connection refused, no /proc entry on
// this host) from a silent one (no answer in time; "stopped" when /proc
// says so) and renders the result (Job.Text, Job.JSON); Dial and the
// Client methods are `goccl status`, which also works against a real NCCL
// RAS port. The package knows nothing of goccl's communicators: the root
// package fills Reports.
package ras

import (
	"time"
)

// ProtocolVersion is the RAS client protocol goccl speaks
// (NCCL_RAS_CLIENT_PROTOCOL in NCCL 2.28 and later).
const ProtocolVersion = 2

// DefaultAddr is NCCL's default RAS address (NCCL_RAS_ADDR), the client's
// default too.
const DefaultAddr = "localhost:28028"

// DefaultTimeout is how long the server waits for a rank's answer unless
// the client says otherwise (TIMEOUT): NCCL's RAS_COLLECTIVE_LEG_TIMEOUT_SEC.
const DefaultTimeout = 5 * time.Second

// MaxTimeout bounds the wait for a rank's answer; "TIMEOUT 0", which
// disables NCCL's, means this: a query never hangs.
const MaxTimeout = 60 * time.Second

// Report is one process's answer to a status probe: its live
// communicators.
type Report struct {
	Pid    int          `json:"pid"`
	Host   string       `json:"host"`    // host name
	HostID string       `json:"host_id"` // goccl's host identity (equal on one host)
	Comms  []CommReport `json:"comms"`
}

// CommReport is one rank's view of one communicator. Status is one of
// RAS's words: INIT, RUNNING, FINALIZE (closing), ABORT.
type CommReport struct {
	ID     string            `json:"id"` // the communicator's job id (unique per Init or Split)
	Rank   int               `json:"rank"`
	Size   int               `json:"size"`
	Status string            `json:"status"`
	Error  string            `json:"error,omitempty"` // the failure that made it unusable (Comm.Err)
	Counts map[string]uint64 `json:"collective_counts"`
	// Seq is the sequence number of the last collective this rank began
	// (its op #); Op the one in flight, nil when idle for IdleSec.
	Seq     uint64  `json:"last_seq"`
	Op      *Op     `json:"operation,omitempty"`
	IdleSec float64 `json:"idle_sec,omitempty"`
	Links   []Link  `json:"links,omitempty"`
	Lost    []int   `json:"lost_ranks,omitempty"` // ranks this rank knows are dead
	Skew    []Skew  `json:"arrival_skew,omitempty"`
}

// Op is the operation a rank is in: its sequence number (for point to
// point, the last collective's), kind, count and bytes, and how long it
// has been running.
type Op struct {
	Seq     uint64  `json:"seq"`
	Kind    string  `json:"kind"`
	Count   uint64  `json:"count"`
	Bytes   uint64  `json:"bytes"`
	WaitSec float64 `json:"running_sec"`
	// Wait is the peer the operation waits on now (a receive, or the end
	// of a send), nil when none.
	Wait *Wait `json:"waiting,omitempty"`
}

// Wait is what an operation waits on: the peer, and how long its link to
// that peer has moved no bytes (-1: not known).
type Wait struct {
	Peer    int     `json:"peer"`
	IdleSec float64 `json:"link_idle_sec"`
}

// Link is the state of a rank's link to one peer: what moved over it
// (transport.Counters) and whether it is closed.
type Link struct {
	Peer      int    `json:"peer"`
	Transport string `json:"transport"`
	Sent      uint64 `json:"bytes_sent"`
	Received  uint64 `json:"bytes_received"`
	Closed    bool   `json:"closed"`
}

// Skew is a rank's arrival lag over a communicator's recent collectives:
// the fraction of them it arrived at last, and its median lag behind the
// first rank to arrive.
type Skew struct {
	Rank         int     `json:"rank"`
	LastFraction float64 `json:"last_fraction"`
	MedianLagSec float64 `json:"median_lag_sec"`
	Ops          int     `json:"ops"`
}
