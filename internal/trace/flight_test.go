package trace

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFlightRing: the ring keeps the last operations with their record ids;
// scheduled operations get the sequence numbers after the last, are taken
// over by the operation that starts, and are retired when stopped; an
// operation that fails stays "started", retired, with its error.
func TestFlightRing(t *testing.T) {
	f := NewFlight(FlightGroup{Rank: 1, Size: 3, Name: "0", Desc: "default_pg", Timeout: 2 * time.Second, Lib: "goccl"}, 4)
	ar := func(seq uint64, n int64) Op {
		return Op{Name: "all_reduce", Kind: 1, Seq: seq, SendPeer: -1, RecvPeer: -1, In: n, Out: n, DType: "Float"}
	}
	for s := uint64(1); s <= 3; s++ {
		f.End(f.Start(ar(s, 8)), "")
	}
	f.Schedule(ar(0, 16))   // #4
	f.Schedule(ar(0, 32))   // #5
	id := f.Start(ar(4, 0)) // sizes known later (an AllToAllv's): Amend
	f.Amend(id, ar(4, 16))
	f.End(id, "rank 2 never came")
	f.RetireScheduled("communicator closed")
	var b bytes.Buffer
	if err := f.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var d struct {
		Rank     int                          `json:"rank"`
		PGStatus map[string]map[string]string `json:"pg_status"`
		Entries  []struct {
			RecordID int64  `json:"record_id"`
			Seq      int64  `json:"collective_seq_id"`
			State    string `json:"state"`
			Retired  bool   `json:"retired"`
			Err      string `json:"goccl_error"`
			Timeout  int64  `json:"timeout_ms"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(b.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range d.Entries {
		got = append(got, strings.Join([]string{itoa(e.RecordID), itoa(e.Seq), e.State, e.Err}, " "))
		if !e.Retired || e.Timeout != 2000 {
			t.Errorf("entry %+v", e)
		}
	}
	want := []string{"1 2 completed ", "2 3 completed ", "3 4 started rank 2 never came", "4 5 scheduled communicator closed"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("entries %q, want %q", got, want)
	}
	if st := d.PGStatus["0"]; st["last_enqueued_collective"] != "5" || st["last_started_collective"] != "4" || st["last_completed_collective"] != "3" || d.Rank != 1 {
		t.Errorf("pg_status %v, rank %d", d.PGStatus, d.Rank)
	}
	if txt := f.Text(2); !strings.Contains(txt, "nccl:all_reduce #4 16/16 Float started") || !strings.Contains(txt, "#5 32/32 Float scheduled") {
		t.Errorf("text:%s", txt)
	}
	var nilF *Flight
	nilF.Schedule(Op{})
	nilF.End(nilF.Start(Op{}), "")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
