package ras

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrRefused is wrapped by Probe's error when nothing listens at the
// address: on a host that answers, the process is gone.
var ErrRefused = errors.New("connection refused")

func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// Peer is one rank of the job as the server knows it: where its process's
// status listener is, and which process it is (from the card the rank
// published in the store at Init).
type Peer struct {
	Rank   int    `json:"rank"`
	Addr   string `json:"addr"`
	Pid    int    `json:"pid"`
	Host   string `json:"host"`
	HostID string `json:"host_id"`
}

// State is what a probe found of a rank's process.
type State int

const (
	Answered     State = iota
	Unresponsive       // no answer in time (stopped, hung, or its host unreachable)
	Dead               // the process is gone
	Unknown            // the rank never said where it answers
)

func (s State) String() string {
	return [...]string{"answered", "not answering", "dead", "unknown"}[s]
}

// PeerResult is the outcome of probing one rank.
type PeerResult struct {
	Peer
	State  State
	Why    string  // for a rank that did not answer: what was seen
	Report *Report // the answer (State Answered)
}

// Gather probes every peer at once, waiting at most timeout for each
// answer, and never longer in all. localHostID is the prober's host
// identity: a silent or refusing peer on this host is looked up in /proc
// (procRoot, normally "/proc") to tell dead from stopped.
func Gather(ctx context.Context, peers []Peer, token []byte, timeout time.Duration, localHostID, procRoot string) []PeerResult {
	res := make([]PeerResult, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		res[i].Peer = p
		if p.Addr == "" {
			res[i].State, res[i].Why = Unknown, "it never published a status address"
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			rep, err := Probe(pctx, p.Addr, token)
			res[i] = classify(p, rep, err, timeout, localHostID, procRoot)
		}()
	}
	wg.Wait()
	return res
}

// classify turns a probe's outcome into a PeerResult.
func classify(p Peer, rep *Report, err error, timeout time.Duration, localHostID, procRoot string) PeerResult {
	r := PeerResult{Peer: p, Report: rep}
	if err == nil {
		return r
	}
	local := p.HostID != "" && p.HostID == localHostID && p.Pid > 0
	switch {
	case errors.Is(err, ErrRefused):
		r.State, r.Why = Dead, "its status port refuses connections (process exited)"
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		r.State, r.Why = Unresponsive, fmt.Sprintf("no answer in %v", timeout)
	default:
		r.State, r.Why = Unresponsive, err.Error()
	}
	if local {
		switch st := procState(procRoot, p.Pid); st {
		case "":
			r.State, r.Why = Dead, fmt.Sprintf("process %d is gone", p.Pid)
		case "Z", "X":
			r.State, r.Why = Dead, fmt.Sprintf("process %d exited (zombie)", p.Pid)
		case "T", "t":
			r.Why += fmt.Sprintf("; process %d is stopped (SIGSTOP or a debugger)", p.Pid)
		}
	}
	return r
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// procState is the state letter of process pid in procRoot/PID/stat (R, S,
// D, T, t, Z, X), or "" when there is no such process.
func procState(procRoot string, pid int) string {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+3 > len(s) {
		return "?"
	}
	return s[i+2 : i+3]
}
