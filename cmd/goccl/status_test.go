package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
)

// ncclLikeServer answers one connection as NCCL's RAS thread does and
// records the command lines it got.
func ncclLikeServer(t *testing.T) (addr string, got chan []string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got = make(chan []string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		var lines []string
		defer func() { got <- lines }()
		r := bufio.NewReader(conn)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSpace(line)
			lines = append(lines, line)
			switch u := strings.ToUpper(line); {
			case strings.HasPrefix(u, "CLIENT PROTOCOL "):
				io.WriteString(conn, "SERVER PROTOCOL 2\n")
			case strings.HasPrefix(u, "TIMEOUT "), strings.HasPrefix(u, "SET FORMAT "):
				io.WriteString(conn, "OK\n")
			case u == "STATUS", u == "VERBOSE STATUS":
				io.WriteString(conn, "NCCL version 2.29.1\n\nJob summary\n")
				return
			case strings.HasPrefix(u, "MONITOR"):
				io.WriteString(conn, "OK\n[2026-01-02 03:04:05] PEER_DEAD: Process 7 on node h managing GPU 1 \n")
				return
			}
		}
	}()
	return ln.Addr().String(), got
}

// TestStatusCommand: goccl status sends ncclras's commands for its flags
// and prints the server's reply; a port nobody serves is an error.
func TestStatusCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
		out  string
	}{
		{nil, []string{"CLIENT PROTOCOL 2", "STATUS"}, "Job summary"},
		{[]string{"--json", "-t", "3", "-v"}, []string{"CLIENT PROTOCOL 2", "TIMEOUT 3", "SET FORMAT json", "VERBOSE STATUS"}, "NCCL version"},
		{[]string{"--monitor"}, []string{"CLIENT PROTOCOL 2", "MONITOR lifecycle"}, "PEER_DEAD: Process 7"},
		{[]string{"-m=all"}, []string{"CLIENT PROTOCOL 2", "MONITOR all"}, "PEER_DEAD"},
	} {
		addr, got := ncclLikeServer(t)
		var out, errb bytes.Buffer
		if rc := cli(append([]string{"status", "--addr", addr}, tc.args...), &out, &errb); rc != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, rc, errb.String())
		}
		if lines := <-got; strings.Join(lines, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%v: server got %q, want %q", tc.args, lines, tc.want)
		}
		if !strings.Contains(out.String(), tc.out) {
			t.Errorf("%v: printed %q", tc.args, out.String())
		}
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	var out, errb bytes.Buffer
	if rc := cli([]string{"status", "--addr", addr}, &out, &errb); rc != 1 || !strings.Contains(errb.String(), "connection refused") {
		t.Errorf("status of a closed port: exit %d, %q", rc, errb.String())
	}
}
