package ras

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// stallJob is a 6-rank job whose ranks all answered and are in op #9
// AllReduce: rank 0 waits on 1 and 1 on 0 (their link idle 3 s); rank 2
// waits on 3, which counted 4 KiB sent to it that 2 never received; rank
// 4 waits on 5, which went on to op #10; rank 3 waits on 0 (a wait, not a
// cause) and rank 5 has waited on 4 for only 0.2 s.
func stallJob() *Job {
	type w struct {
		on       int
		idle     float64
		seq      uint64
		sent     uint64 // to the peer waited on's rank, or received from it
		received uint64
	}
	ws := []w{{1, 3, 9, 0, 0}, {0, 3, 9, 0, 0}, {3, 2.5, 9, 0, 8192}, {0, 2.5, 9, 12288, 0}, {5, 2, 9, 0, 0}, {4, 0.2, 10, 0, 0}}
	var peers []PeerResult
	for r, x := range ws {
		c := CommReport{ID: "job", Rank: r, Size: len(ws), Status: "RUNNING", Seq: x.seq, Counts: map[string]uint64{},
			Op: &Op{Seq: x.seq, Kind: "AllReduce", WaitSec: 3.5, Wait: &Wait{Peer: x.on, IdleSec: x.idle}}}
		switch r {
		case 2:
			c.Links = []Link{{Peer: 3, Received: x.received}}
		case 3:
			c.Links = []Link{{Peer: 2, Sent: x.sent}}
		}
		peers = append(peers, PeerResult{Peer: Peer{Rank: r, Pid: 100 + r, Host: "h", HostID: "h"}, State: Answered,
			Report: &Report{Pid: 100 + r, Host: "h", HostID: "h", Comms: []CommReport{c}}})
	}
	return &Job{Version: "goccl test", JobID: "job", Time: time.Now(), Peers: peers}
}

// TestStalls: STATUS names the ends of each stalled link as not
// progressing, with the peer and how long their link moved no bytes, and
// the other long waits as waits, in text and JSON.
func TestStalls(t *testing.T) {
	j := stallJob()
	text := j.Text()
	for _, want := range []string{
		"Rank 0 entered op #9 AllReduce but is not progressing: it waits on rank 1 and rank 1 on it, and their link moved no bytes for 3.000s",
		"Rank 1 entered op #9 AllReduce but is not progressing: it waits on rank 0 and rank 0 on it",
		"Rank 2 entered op #9 AllReduce but is not progressing: it waits on rank 3, the last 4.0 KiB rank 3 sent it never arrived, and their link moved no bytes for 2.500s",
		"Rank 3 entered op #9 AllReduce but is not progressing: the last 4.0 KiB it sent rank 2 never arrived (rank 2 waits on them)",
		"Rank 4 entered op #9 AllReduce but is not progressing: it waits on rank 5, what rank 5 sent it in op #9 never arrived (rank 5 went on to op #10)",
		"Rank 5 entered op #10 AllReduce but is not progressing: what it sent rank 4 in op #9 never arrived (rank 4 waits on it)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("STATUS lacks %q:\n%s", want, text)
		}
	}
	// Rank 3's own wait on rank 0 is not what holds it up: it is an end
	// of the stalled link 2-3.
	if strings.Contains(text, "Rank 3 is waiting") {
		t.Errorf("rank 3 named as waiting, not as not progressing:\n%s", text)
	}
	j.Peers[0].Report.Comms[0].Op.Wait.IdleSec = 0.5 // rank 0's link moved: no longer a stall
	j.Peers[3].Report.Comms[0].Links[0].Sent = 8192  // all arrived
	text = j.Text()
	for _, want := range []string{"Rank 1 is waiting on rank 0 in op #9 AllReduce: its link moved no bytes for 3.000s",
		"Rank 2 is waiting on rank 3 in op #9 AllReduce: its link moved no bytes for 2.500s",
		"Rank 3 is waiting on rank 0 in op #9 AllReduce"} {
		if !strings.Contains(text, want) {
			t.Errorf("STATUS lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "Rank 0 entered") || strings.Contains(text, "Rank 3 entered") || strings.Contains(text, "Rank 0 is waiting") {
		t.Errorf("STATUS blames a rank that moves:\n%s", text)
	}

	j = stallJob()
	j.Peers[1] = PeerResult{Peer: Peer{Rank: 1, Pid: 101, Host: "h", HostID: "h"}, State: Unresponsive, Why: "no answer in 1s"}
	b, err := j.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Comms []struct {
			Ranks []struct {
				Rank           int    `json:"rank"`
				Progress       string `json:"progress"`
				NotProgressing bool   `json:"not_progressing"`
				WaitingOn      *int   `json:"waiting_on"`
				Op             *Op    `json:"operation"`
			} `json:"ranks"`
		} `json:"communicators"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range doc.Comms[0].Ranks {
		stuck := r.Rank == 2 || r.Rank == 3 || r.Rank == 4 || r.Rank == 5
		if r.NotProgressing != stuck || r.Progress == "" || r.Op == nil || r.Op.Wait == nil {
			t.Errorf("JSON rank %d: not_progressing %v, progress %q, want %v: %s", r.Rank, r.NotProgressing, r.Progress, stuck, b)
		}
		if r.Rank == 0 && (r.WaitingOn == nil || *r.WaitingOn != 1 || !strings.Contains(r.Progress, "which does not answer")) {
			t.Errorf("JSON rank 0 does not wait on rank 1, which does not answer: %+v", r)
		}
	}
}
