package goccl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/doctor"
	"github.com/goccl/goccl/doctor/flightrec"
	"github.com/goccl/goccl/rendezvous"
)

func init() {
	extraWorkers["frhang"] = frHangWorker
	extraWorkers["frcount"] = frCountWorker
}

// frEntry is the part of a dump's entry the tests check.
type frEntry struct {
	RecordID      int64     `json:"record_id"`
	ProcessGroup  []string  `json:"process_group"`
	Seq           int64     `json:"collective_seq_id"`
	P2PSeq        int64     `json:"p2p_seq_id"`
	Name          string    `json:"profiling_name"`
	InputSizes    [][]int64 `json:"input_sizes"`
	InputDtypes   []string  `json:"input_dtypes"`
	OutputSizes   [][]int64 `json:"output_sizes"`
	OutputDtypes  []string  `json:"output_dtypes"`
	State         string    `json:"state"`
	Created       int64     `json:"time_created_ns"`
	Started       int64     `json:"time_discovered_started_ns"`
	Completed     int64     `json:"time_discovered_completed_ns"`
	Retired       bool      `json:"retired"`
	TimeoutMs     int64     `json:"timeout_ms"`
	IsP2P         bool      `json:"is_p2p"`
	DurationMs    *float64  `json:"duration_ms"`
	GocclError    string    `json:"goccl_error"`
	OpID          *int64    `json:"op_id"`
	PGID          *int64    `json:"pg_id"`
	ThreadIgnored string    `json:"-"`
}

type frDump struct {
	Version  string                       `json:"version"`
	Lib      string                       `json:"comm_lib_version"`
	Rank     int                          `json:"rank"`
	PGConfig map[string]map[string]string `json:"pg_config"`
	PGStatus map[string]map[string]string `json:"pg_status"`
	Entries  []frEntry                    `json:"entries"`
}

func dumpOf(t *testing.T, c *goccl.Comm) (frDump, []byte) {
	t.Helper()
	var b bytes.Buffer
	if err := c.DumpFlightRecorder(&b); err != nil {
		t.Fatal(err)
	}
	var d frDump
	if err := json.Unmarshal(b.Bytes(), &d); err != nil {
		t.Fatalf("dump is not JSON: %v\n%s", err, b.String())
	}
	return d, b.Bytes()
}

// TestFlightRecorderDump: each kind of operation is recorded with
// PyTorch's keys and values (profiling name, sizes as PyTorch records its
// tensors, dtype names, per-pair p2p numbers, states and times), and the
// two ranks' dumps match in the doctor's analysis.
func TestFlightRecorderDump(t *testing.T) {
	t.Setenv("GOCCL_FLIGHT_RECORDER", "32")
	comms := initComms(t, 2, rendezvous.NewMemStore(), time.Minute)
	defer closeAll(comms)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r, c := range comms {
		wg.Go(func() { errs[r] = frOps(c) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	var raws [][]byte
	for r, c := range comms {
		d, raw := dumpOf(t, c)
		raws = append(raws, raw)
		if d.Version != "2.10" || !strings.HasPrefix(d.Lib, "goccl") || d.Rank != r {
			t.Errorf("rank %d: version %q, comm_lib_version %q, rank %d", r, d.Version, d.Lib, d.Rank)
		}
		if cfg := d.PGConfig["0"]; cfg["name"] != "0" || cfg["desc"] != "default_pg" || cfg["ranks"] != "[0, 1]" {
			t.Errorf("rank %d: pg_config %v", r, d.PGConfig)
		}
		checkEntries(t, r, d)
	}
	var dumps []*flightrec.Dump
	for _, raw := range raws {
		d, err := flightrec.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		dumps = append(dumps, d)
	}
	rep := flightrec.Analyze(dumps)
	if doctor.HasErrors(rep.Findings) || len(rep.Findings) != 1 || rep.Findings[0].Code != "fr-all-matched" {
		t.Errorf("findings on matching dumps: %+v", rep.Findings)
	}
}

// frOps runs one operation of each kind the test checks.
func frOps(c *goccl.Comm) error {
	ctx := context.Background()
	buf, big := make([]float32, 5), make([]float32, 6)
	peer := 1 - c.Rank()
	steps := []func() error{
		func() error { return goccl.AllReduce(ctx, c, buf, buf, 5, goccl.Sum) },
		func() error { return goccl.AllGather(ctx, c, buf[:3], big, 3) },
		func() error { return goccl.ReduceScatter(ctx, c, big[:4], buf, 2, goccl.Sum) },
		func() error {
			if c.Rank() == 0 {
				return goccl.Send(ctx, c, buf, 4, peer)
			}
			return goccl.Recv(ctx, c, buf, 4, peer)
		},
		func() error { return goccl.SendRecv(ctx, c, buf, peer, big, peer, 2) },
		func() error { return c.Barrier(ctx) },
		func() error { return goccl.Broadcast(ctx, c, buf, buf, 5, 0) },
	}
	for i, s := range steps {
		if err := s(); err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
	}
	return nil
}

func checkEntries(t *testing.T, r int, d frDump) {
	t.Helper()
	byName := map[string][]frEntry{}
	var names []string
	for _, e := range d.Entries {
		byName[e.Name] = append(byName[e.Name], e)
		names = append(names, e.Name)
		if e.State != "completed" || !e.Retired || e.Completed < e.Started || e.Started < e.Created || e.Created == 0 ||
			e.DurationMs == nil || e.TimeoutMs != 60000 || e.OpID == nil || e.PGID == nil || len(e.ProcessGroup) != 2 {
			t.Errorf("rank %d: entry %+v", r, e)
		}
	}
	one := func(name string) frEntry { // Init's barriers come first: the last
		es := byName[name]
		if len(es) != 1 && (name != "nccl:barrier" || len(es) == 0) {
			t.Fatalf("rank %d: %d entries %q in %v", r, len(es), name, names)
		}
		return es[len(es)-1]
	}
	sizes := func(name string, in, out string) {
		e := one(name)
		if got := fmt.Sprint(e.InputSizes, e.OutputSizes); got != in+" "+out {
			t.Errorf("rank %d: %s sizes %s, want %s %s", r, name, got, in, out)
		}
		if len(e.InputSizes) > 0 && !slices.Equal(e.InputDtypes, []string{"Float"}) {
			t.Errorf("rank %d: %s dtypes %v", r, name, e.InputDtypes)
		}
	}
	sizes("nccl:all_reduce", "[[5]]", "[[5]]")
	sizes("nccl:all_gather", "[[3]]", "[[6]]")
	sizes("nccl:reduce_scatter", "[[4]]", "[[2]]")
	sizes("nccl:broadcast", "[[5]]", "[[5]]")
	sizes("nccl:barrier", "[]", "[]")
	ar, bc := one("nccl:all_reduce"), one("nccl:broadcast")
	if ar.IsP2P || ar.Seq < 1 || bc.Seq != ar.Seq+4 || d.PGStatus["0"]["last_completed_collective"] != fmt.Sprint(bc.Seq) {
		t.Errorf("rank %d: all_reduce #%d, broadcast #%d, pg_status %v", r, ar.Seq, bc.Seq, d.PGStatus)
	}
	// Point to point, numbered per pair: the Send/Recv is message 1 from 0
	// to 1, the SendRecv message 2 from 0 to 1 and message 1 from 1 to 0.
	send, recv := fmt.Sprintf("nccl:send %d->%d", r, 1-r), fmt.Sprintf("nccl:recv %d<-%d", r, 1-r)
	var got []string
	for _, e := range append(byName[send], byName[recv]...) {
		if !e.IsP2P || e.Seq != 0 {
			t.Errorf("rank %d: p2p entry %+v", r, e)
		}
		got = append(got, fmt.Sprintf("%s #%d %v", e.Name, e.P2PSeq, e.InputSizes))
	}
	want := map[int][]string{
		0: {"nccl:send 0->1 #1 [[4]]", "nccl:send 0->1 #2 [[2]]", "nccl:recv 0<-1 #1 [[2]]"},
		1: {"nccl:send 1->0 #1 [[2]]", "nccl:recv 1<-0 #1 [[4]]", "nccl:recv 1<-0 #2 [[2]]"},
	}[r]
	if !slices.Equal(got, want) {
		t.Errorf("rank %d: point to point %q, want %q", r, got, want)
	}
}

func closeAll(comms []*goccl.Comm) {
	for _, c := range comms {
		c.Close()
	}
}

// TestFlightRecorderStates: non-blocking operations issued while the peer
// has not joined are one "started" (the first, entered) and "scheduled"
// (queued behind it, with the sequence numbers they will have); once the
// peer joins they are "completed" under the same numbers.
func TestFlightRecorderStates(t *testing.T) {
	t.Setenv("GOCCL_FLIGHT_RECORDER", "16")
	comms := initComms(t, 2, rendezvous.NewMemStore(), time.Minute)
	defer closeAll(comms)
	ctx := context.Background()
	bufs := [2][3][]float32{}
	for r := range bufs {
		for i := range bufs[r] {
			bufs[r][i] = make([]float32, 8+i)
		}
	}
	var reqs []goccl.Request
	for i := range 3 {
		req, err := goccl.IAllReduce(ctx, comms[0], bufs[0][i], bufs[0][i], 8+i, goccl.Sum)
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, req)
	}
	var last3 []frEntry
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, _ := dumpOf(t, comms[0])
		last3 = d.Entries[len(d.Entries)-3:]
		if last3[0].State == "started" || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for i, want := range []string{"started", "scheduled", "scheduled"} {
		e := last3[i]
		if e.State != want || e.Name != "nccl:all_reduce" || e.Seq != last3[0].Seq+int64(i) ||
			fmt.Sprint(e.InputSizes) != fmt.Sprintf("[[%d]]", 8+i) || e.Retired || e.Completed != 0 {
			t.Errorf("operation %d while the peer is away: %+v, want %s", i, e, want)
		}
	}
	for i := range 3 {
		if err := goccl.AllReduce(ctx, comms[1], bufs[1][i], bufs[1][i], 8+i, goccl.Sum); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range reqs {
		if err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	d, _ := dumpOf(t, comms[0])
	done := d.Entries[len(d.Entries)-3:]
	for i, e := range done {
		if e.State != "completed" || e.Seq != last3[i].Seq || e.RecordID != last3[i].RecordID {
			t.Errorf("operation %d after the peer joined: %+v, was %+v", i, e, last3[i])
		}
	}
}

// frHangWorker: ranks 0 and 2 run three AllReduces (the third and a fourth
// issued non-blocking); rank 1 skips the third, waits until the others
// have written their dumps on their timeout and writes its own on demand.
func frHangWorker(ctx context.Context, c *goccl.Comm) int {
	buf, buf2 := make([]float32, 1000), make([]float32, 500)
	for range 2 {
		if err := goccl.AllReduce(ctx, c, buf, buf, len(buf), goccl.Sum); err != nil {
			fmt.Println("unexpected:", err)
			return 1
		}
	}
	dir := os.Getenv("GOCCL_TEST_FR_DIR")
	if c.Rank() == 1 {
		for _, r := range []int{0, 2} {
			if !waitFile(filepath.Join(dir, fmt.Sprintf("fr-%d.json", r)), time.Minute) {
				fmt.Printf("rank %d's dump did not come\n", r)
				return 1
			}
		}
		f, err := os.Create(filepath.Join(dir, "fr-1.json"))
		if err == nil {
			err = c.DumpFlightRecorder(f)
			f.Close()
		}
		if err != nil {
			fmt.Println("dump:", err)
			return 1
		}
		return 0
	}
	r1, err1 := goccl.IAllReduce(ctx, c, buf, buf, len(buf), goccl.Sum)
	r2, err2 := goccl.IAllReduce(ctx, c, buf2, buf2, len(buf2), goccl.Sum)
	if err1 != nil || err2 != nil {
		fmt.Println("issue:", err1, err2)
		return 1
	}
	err := r1.Wait(ctx)
	r2.Wait(ctx)
	if err == nil {
		fmt.Println("the AllReduce rank 1 skipped succeeded")
		return 1
	}
	fmt.Println("expected failure:", err)
	return 0
}

func waitFile(path string, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return true
		}
	}
	return false
}

// frCountWorker: three AllReduces of 1,000 elements, but rank 1 passes 999
// to the second; every rank must fail there.
func frCountWorker(ctx context.Context, c *goccl.Comm) int {
	buf := make([]float32, 1000)
	for i := range 3 {
		n := len(buf)
		if i == 1 && c.Rank() == 1 {
			n = 999
		}
		err := goccl.AllReduce(ctx, c, buf, buf, n, goccl.Sum)
		switch {
		case i == 0 && err != nil:
			fmt.Println("unexpected:", err)
			return 1
		case i == 1 && err == nil:
			fmt.Println("the AllReduce with a different count succeeded")
			return 1
		case i == 1:
			fmt.Println("expected failure:", err)
			return 0
		}
	}
	return 1
}

// frSpawn runs 3 ranks of worker mode with GOCCL_FLIGHT_RECORDER_DUMP in a
// fresh folder and returns the doctor's report on the dumps there.
func frSpawn(t *testing.T, mode string) *flightrec.Report {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	dir := t.TempDir()
	outs := spawn(t, 3, mode, "GOCCL_TIMEOUT=3s", "GOCCL_TEST_FR_DIR="+dir,
		"GOCCL_FLIGHT_RECORDER_DUMP="+filepath.Join(dir, "fr-%r.json"))
	dumps, err := flightrec.ReadPaths([]string{dir})
	if err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(outs, "\n"))
	}
	rep := flightrec.Analyze(dumps)
	var text bytes.Buffer
	rep.WriteText(&text)
	t.Logf("goccl doctor flight-recorder %s:\n%s", dir, text.String())
	return rep
}

// TestFlightRecorderHang: rank 1 skips a collective; ranks 0 and 2 time out
// in it and write their dumps (the AllReduce they are in "started", the one
// issued behind it "scheduled"), rank 1 writes its dump on demand, and the
// doctor names rank 1 as the rank missing from that collective.
func TestFlightRecorderHang(t *testing.T) {
	rep := frSpawn(t, "frhang")
	g := rep.Groups[0]
	if m := g.Mismatch; m == nil || m.Kind != "MISSING_RANKS" || !slices.Equal(m.Culprits, []int{1}) || m.Op != "all_reduce" {
		t.Fatalf("mismatch %+v, want rank 1 missing from an all_reduce", g.Mismatch)
	}
	if rep.Findings[0].Code != "fr-missing-rank" || !strings.Contains(rep.Findings[0].Message, "rank 1 never reached it") {
		t.Errorf("first finding %+v", rep.Findings[0])
	}
	for _, d := range rep.Dumps {
		if d.Rank == 1 {
			continue
		}
		n := len(d.Entries)
		hung, queued := d.Entries[n-2], d.Entries[n-1]
		if hung.State != "started" || !hung.Retired || hung.Error == "" || hung.CollectiveSeqID != g.Mismatch.Seq ||
			queued.State != "scheduled" || queued.CollectiveSeqID != g.Mismatch.Seq+1 || fmt.Sprint(queued.InputSizes) != "[[500]]" {
			t.Errorf("rank %d's last entries: %+v, %+v", d.Rank, hung, queued)
		}
	}
}

// TestFlightRecorderCountMismatch: rank 1 passes a different count; the
// doctor names it with a size mismatch at that collective.
func TestFlightRecorderCountMismatch(t *testing.T) {
	rep := frSpawn(t, "frcount")
	m := rep.Groups[0].Mismatch
	if m == nil || m.Kind != "SIZE_OR_SYNTAX_MISMATCH" || !slices.Equal(m.Culprits, []int{1}) ||
		!strings.Contains(m.Detail, "rank(s) 1 have input sizes [[999]]") {
		t.Fatalf("mismatch %+v, want rank 1's size", m)
	}
	if rep.Findings[0].Code != "fr-size-mismatch" {
		t.Errorf("first finding %+v", rep.Findings[0])
	}
}

// TestFlightRecorderAllocations: with the flight recorder on (and a dump
// file set), blocking and non-blocking collectives and point to point
// still allocate nothing per operation.
func TestFlightRecorderAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are checked by the full suite (the race detector allocates)")
	}
	t.Setenv("GOCCL_FLIGHT_RECORDER", "64")
	t.Setenv("GOCCL_FLIGHT_RECORDER_DUMP", filepath.Join(t.TempDir(), "fr-%r.json"))
	var allocs float64
	errs := goroutineRanks(t, 2, time.Minute, func(c *goccl.Comm) error {
		ctx := context.Background()
		buf, out := make([]float32, 256), make([]float32, 512)
		peer := 1 - c.Rank()
		round := func() {
			must := func(err error) {
				if err != nil {
					panic(err)
				}
			}
			must(goccl.AllReduce(ctx, c, buf, buf, len(buf), goccl.Sum))
			must(goccl.AllGather(ctx, c, buf, out, len(buf)))
			r1, err := goccl.IAllReduce(ctx, c, buf, buf, len(buf), goccl.Sum)
			must(err)
			r2, err := goccl.IBroadcast(ctx, c, buf, buf, len(buf), 0)
			must(err)
			must(r1.Wait(ctx))
			must(r2.Wait(ctx))
			must(goccl.SendRecv(ctx, c, buf, peer, out, peer, len(buf)))
		}
		for range 5 {
			round()
		}
		if c.Rank() == 0 {
			allocs = testing.AllocsPerRun(20, round)
		} else {
			for range 21 {
				round()
			}
		}
		// Neither rank closes (Close publishes a report, which allocates)
		// while the other still counts.
		return c.Barrier(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if allocs != 0 {
		t.Errorf("%.1f allocations per round with the flight recorder on, want 0", allocs)
	}
}
