package ras

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/auth"
)

// fakeJob is a 4-rank job on two hosts: ranks 0-2 in op #7 AllReduce,
// rank 3 idle after op #6 (it never entered #7), rank 1's communicator
// failed, and a fifth process (rank 4 of a 5-rank world) is dead.
func fakeJob() *Job {
	counts := func(n uint64) map[string]uint64 { return map[string]uint64{"AllReduce": n, "Broadcast": 0} }
	rep := func(rank int, host string, op *Op, seq uint64, err string) *Report {
		c := CommReport{ID: "job", Rank: rank, Size: 5, Status: "RUNNING", Counts: counts(seq), Seq: seq, Op: op, Error: err,
			Links: []Link{{Peer: (rank + 1) % 5, Transport: "tcp", Sent: 3 << 20, Received: 2 << 20}}}
		if op == nil {
			c.IdleSec = 2.5
		}
		return &Report{Pid: 100 + rank, Host: host, HostID: host, Comms: []CommReport{c}}
	}
	in := func(s float64) *Op { return &Op{Seq: 7, Kind: "AllReduce", Count: 1 << 20, Bytes: 4 << 20, WaitSec: s} }
	peers := []PeerResult{
		{Peer: Peer{Rank: 0, Pid: 100, Host: "a", HostID: "a"}, Report: rep(0, "a", in(2.5), 7, "")},
		{Peer: Peer{Rank: 1, Pid: 101, Host: "a", HostID: "a"}, Report: rep(1, "a", in(2.4), 7, "goccl: rank 1: AllReduce (op #7): boom")},
		{Peer: Peer{Rank: 2, Pid: 102, Host: "b", HostID: "b"}, Report: rep(2, "b", in(2.3), 7, "")},
		{Peer: Peer{Rank: 3, Pid: 103, Host: "b", HostID: "b"}, Report: rep(3, "b", nil, 6, "")},
		{Peer: Peer{Rank: 4, Pid: 104, Host: "b", HostID: "b"}, State: Dead, Why: "process 104 is gone"},
	}
	return &Job{Version: "goccl test", JobID: "job", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Elapsed: 12 * time.Millisecond, Peers: peers}
}

// TestJobText: the text reply names what each rank does and who holds the
// others up, in RAS's sections.
func TestJobText(t *testing.T) {
	j := fakeJob()
	text := j.Text()
	for _, want := range []string{
		"      2        2-3            1          5        5\n", // nodes, processes per node, ranks per process, processes, ranks
		"    0         1         2         2         5         4   RUNNING  INCOMPLETE,ERROR,MISMATCH\n",
		"DEAD\n  1 job process is considered dead\n  Process 104 on node b managing rank 4: process 104 is gone\n",
		"The missing rank: 4\n",
		"  Rank 1 reported: goccl: rank 1: AllReduce (op #7): boom\n",
		"  Communicator ranks have different AllReduce operation counts\n  3 ranks have launched up to operation 7\n" +
			"  Rank 3 has launched up to operation 6 -- Process 103 on node b managing rank 3\n",
		"  3 ranks are in op #7 AllReduce (count 1048576, 4.0 MiB) for 2.300-2.500s: ranks 0, 1, 2\n",
		"  Rank 3 has not entered op #7: idle for 2.500s after op #6 -- Process 103 on node b managing rank 3\n",
		"  Rank 4 is dead: dead (process 104 is gone) -- Process 104 on node b managing rank 4\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "peer 1 tcp") {
		t.Errorf("links printed without VERBOSE:\n%s", text)
	}
	j.Verbose = true
	if text := j.Text(); !strings.Contains(text, "    peer 1 tcp: sent 3.0 MiB, received 2.0 MiB, open\n") {
		t.Errorf("VERBOSE STATUS lacks rank 0's link:\n%s", text)
	}
}

// TestJobJSON: the JSON reply parses, in RAS's shape.
func TestJobJSON(t *testing.T) {
	b, err := fakeJob().JSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	comms := doc["communicators"].([]any)
	c := comms[0].(map[string]any)
	if c["size"] != 5.0 || c["ranks_count"] != 4.0 || c["missing_ranks_count"] != 1.0 || doc["timestamp"] != "2026-01-02 03:04:05" {
		t.Fatalf("%s", b)
	}
	r1 := c["ranks"].([]any)[1].(map[string]any)
	if st := r1["status"].(map[string]any); st["async_error"] != 6.0 || st["init_state"] != 0.0 {
		t.Errorf("rank 1's status: %v", st)
	}
	if _, ok := r1["collective_counts"].(map[string]any)["AllReduce"]; !ok {
		t.Errorf("rank 1: no collective_counts: %v", r1)
	}
	m := c["missing_ranks"].([]any)[0].(map[string]any)
	if m["rank"] != 4.0 || m["status"].(map[string]any)["considered_dead"] != true {
		t.Errorf("missing rank: %v", m)
	}
}

// TestDiff: the monitor's events between two probes.
func TestDiff(t *testing.T) {
	prev, cur := fakeJob(), fakeJob()
	prev.Peers[4].State, prev.Peers[4].Report = Answered, prev.Peers[3].Report
	cur.Peers[2].State, cur.Peers[2].Report, cur.Peers[2].Why = Unresponsive, nil, "no answer in 1s"
	prev.Peers[1].Report = &Report{Pid: 101, Comms: []CommReport{{ID: "job", Rank: 1}}}
	var got []string
	for _, e := range Diff(prev, cur) {
		got = append(got, strings.TrimSpace(e.Format(false)))
	}
	want := []string{
		"[2026-01-02 03:04:05] COMM_ERROR: Process 101 on node a managing rank 1 communicator job rank 1: goccl: rank 1: AllReduce (op #7): boom",
		"[2026-01-02 03:04:05] PEER_UNRESPONSIVE: Process 102 on node b managing rank 2 no answer in 1s",
		"[2026-01-02 03:04:05] PEER_DEAD: Process 104 on node b managing rank 4 process 104 is gone",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var ev map[string]any
	e := Diff(prev, cur)[2]
	if err := json.Unmarshal([]byte(e.Format(true)), &ev); err != nil || ev["event"] != "PEER_DEAD" || ev["group"] != "LIFECYCLE" {
		t.Errorf("JSON event %v: %s", err, e.Format(true))
	}
}

// TestCommands: the server's replies to each command, as NCCL's
// (client_support.cc): case-insensitive, errors as "ERROR: ...".
func TestCommands(t *testing.T) {
	for _, tc := range []struct {
		line, reply string
		next        next
	}{
		{"CLIENT PROTOCOL 2", "SERVER PROTOCOL 2\n", doNothing},
		{"client protocol 1", "SERVER PROTOCOL 2\n", doNothing},
		{"TIMEOUT 3", "OK\n", doNothing},
		{"timeout -1", "ERROR: Invalid timeout value -1\n", doNothing},
		{"TIMEOUT x", "ERROR: Invalid timeout value x\n", doNothing},
		{"SET FORMAT json", "OK\n", doNothing},
		{"set format TEXT", "OK\n", doNothing},
		{"SET FORMAT xml", "ERROR: Invalid format xml\n", doNothing},
		{"STATUS", "", doStatus},
		{"Verbose Status", "", doStatus},
		{"MONITOR", "OK\n", doMonitor},
		{"MONITOR lifecycle,trace", "OK\n", doMonitor},
		{"MONITOR bogus", "ERROR: Invalid event group 'bogus'\n", doNothing},
		{"HELLO", "ERROR: Unknown command HELLO\n", doNothing},
	} {
		st := sessionState{}
		reply, nx := st.command(tc.line)
		if reply != tc.reply || nx != tc.next {
			t.Errorf("%q: %q, %v; want %q, %v", tc.line, reply, nx, tc.reply, tc.next)
		}
	}
	st := sessionState{}
	st.command("TIMEOUT 0")
	if st.timeout != MaxTimeout {
		t.Errorf("TIMEOUT 0 gives %v, want %v", st.timeout, MaxTimeout)
	}
}

// staticSource answers every status with the same job.
type staticSource struct{ job *Job }

func (s staticSource) Status(ctx context.Context, timeout time.Duration) *Job {
	j := *s.job
	return &j
}

// TestServerSessions: the byte streams NCCL's ncclras sends (handshake,
// TIMEOUT, SET FORMAT, STATUS, one line each, possibly in one write) and
// `echo verbose status | nc` (no handshake) get RAS's replies, and the
// connection closes after STATUS.
func TestServerSessions(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(ln, staticSource{fakeJob()}, "goccl test")
	defer s.Close()
	for _, tc := range []struct{ in, prefix, contains string }{
		{"CLIENT PROTOCOL 2\nTIMEOUT 5\nSET FORMAT json\nSTATUS\n", "SERVER PROTOCOL 2\nOK\nOK\n{\n", `"communicators_count": 1`},
		{"verbose status\r\n", "goccl test (NCCL RAS client protocol 2)\n\nJob summary\n", "peer 1 tcp: sent"},
		{"BOGUS\nSTATUS\n", "ERROR: Unknown command BOGUS\ngoccl test", "Operations\n"},
	} {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, tc.in)
		out, err := io.ReadAll(conn)
		conn.Close()
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if !strings.HasPrefix(string(out), tc.prefix) || !strings.Contains(string(out), tc.contains) {
			t.Errorf("%q: got\n%s", tc.in, out)
		}
	}
}

// fakeNCCL serves one connection the way NCCL's RAS thread does
// (client_support.cc): SERVER PROTOCOL 2 to the handshake, OK to TIMEOUT
// and SET FORMAT, the status text for STATUS and then close.
func fakeNCCL(t *testing.T, ln net.Listener, status string) {
	conn, err := ln.Accept()
	if err != nil {
		return
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.ToUpper(strings.TrimSpace(line))
		switch {
		case strings.HasPrefix(line, "CLIENT PROTOCOL "):
			io.WriteString(conn, "SERVER PROTOCOL 2\n")
		case strings.HasPrefix(line, "TIMEOUT "), strings.HasPrefix(line, "SET FORMAT "):
			io.WriteString(conn, "OK\n")
		case line == "STATUS", line == "VERBOSE STATUS":
			io.WriteString(conn, status)
			return
		default:
			io.WriteString(conn, "ERROR: Unknown command "+line+"\n")
		}
	}
}

// TestClientAgainstNCCL: the client's session with a server that answers
// as NCCL's RAS does.
func TestClientAgainstNCCL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const status = "NCCL version 2.29.1+cuda13.0\n\nJob summary\n===========\n"
	go fakeNCCL(t, ln, status)
	c, err := Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.ServerProtocol != 2 {
		t.Errorf("server protocol %d", c.ServerProtocol)
	}
	if err := c.SetTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.SetFormat("text"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := c.Status(&out, false); err != nil || out.String() != status {
		t.Fatalf("status %v: %q", err, out.String())
	}
}

// TestProbe: a status listener answers a prober with the job's token, and
// refuses (or is refused by) one without it.
func TestProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	token := []byte("secret")
	errs := make(chan error, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { errs <- Answer(c, token, func() *Report { return &Report{Pid: 7, Comms: []CommReport{}} }) }()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := Probe(ctx, ln.Addr().String(), token)
	if err != nil || rep.Pid != 7 {
		t.Fatalf("probe: %v, %+v", err, rep)
	}
	if <-errs != nil {
		t.Fatal("answer failed")
	}
	if _, err := Probe(ctx, ln.Addr().String(), []byte("other")); err == nil {
		t.Error("a probe with another token got an answer")
	}
	if err := <-errs; !errors.Is(err, auth.ErrAuth) {
		t.Errorf("listener: %v, want ErrAuth", err)
	}
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l2.Addr().String()
	l2.Close()
	if _, err := Probe(ctx, addr, token); !errors.Is(err, ErrRefused) {
		t.Errorf("probe of a closed port: %v, want ErrRefused", err)
	}
}

// TestGatherBounded: a listener that accepts and never answers (a stopped
// process: the kernel accepts for it) costs the timeout, no more, and is
// reported as not answering; a closed port as dead.
func TestGatherBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // never accepted: the kernel completes the handshakes
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l2.Addr().String()
	l2.Close()
	start := time.Now()
	res := Gather(context.Background(), []Peer{{Rank: 0, Addr: ln.Addr().String()}, {Rank: 1, Addr: closed}, {Rank: 2}}, nil,
		300*time.Millisecond, "", "/proc")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Gather took %v with a 300 ms timeout", d)
	}
	if res[0].State != Unresponsive || res[1].State != Dead || res[2].State != Unknown {
		t.Errorf("states %v %v %v, want not answering, dead, unknown", res[0].State, res[1].State, res[2].State)
	}
}

// FuzzProbe: no input panics the listener's probe reader; without the
// token's MAC nothing passes.
func FuzzProbe(f *testing.F) {
	token := []byte("t")
	n := auth.Nonce()
	mac := auth.MAC(token, probeLabel, n[:])
	f.Add(append(append([]byte(probeMagic), n[:]...), mac[:]...))
	f.Add([]byte("GOCCL-RAS-PROBE 1\nshort"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := readProbe(bytes.NewReader(b), token)
		if err == nil && !auth.Check(token, b[len(probeMagic)+auth.NonceSize:len(probeMagic)+auth.NonceSize+auth.MACSize], probeLabel, got[:]) {
			t.Fatal("accepted a probe without the token's MAC")
		}
	})
}

// FuzzAnswer: no input panics the prober's answer reader; what it accepts
// carries the token's MAC over the nonce and the JSON.
func FuzzAnswer(f *testing.F) {
	token := []byte("t")
	var nonce [auth.NonceSize]byte
	body := []byte(`{"pid":1,"host":"h","host_id":"h","comms":[]}`)
	mac := auth.MAC(token, reportLabel, nonce[:], body)
	f.Add(append(append([]byte{0, 0, 0, byte(len(body))}, body...), mac[:]...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := readAnswer(bytes.NewReader(b), token, nonce)
		if err == nil && rep == nil {
			t.Fatal("nil report without an error")
		}
	})
}

// FuzzCommand: no command line panics the server, and every reply is one
// line.
func FuzzCommand(f *testing.F) {
	for _, s := range []string{"CLIENT PROTOCOL 2", "TIMEOUT 5", "SET FORMAT json", "MONITOR lifecycle,trace", "MONITOR ,", "STATUS"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if strings.ContainsAny(line, "\n") {
			return
		}
		st := sessionState{}
		reply, _ := st.command(line)
		if reply != "" && (!strings.HasSuffix(reply, "\n") || strings.Count(reply, "\n") != 1) {
			t.Fatalf("reply %q is not one line", reply)
		}
		if st.timeout < 0 || st.timeout > MaxTimeout {
			t.Fatalf("timeout %v", st.timeout)
		}
	})
}
