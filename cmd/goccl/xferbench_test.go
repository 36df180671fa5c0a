package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/rendezvous"
)

// TestXferbench runs goccl xferbench (target in a child process) over each
// backend and memory tier with --check: every row's bytes verified, the
// table in nixlbench's columns.
func TestXferbench(t *testing.T) {
	for _, tc := range [][]string{
		{"--backend", "tcp", "--op", "WRITE"},
		{"--backend", "tcp", "--op", "READ", "--checksum", "--streams", "3"},
		{"--backend", "tcp", "--op", "WRITE", "--target-seg", "FILE"},
		{"--backend", "tcp", "--op", "READ", "--target-seg", "FILE"},
		{"--backend", "shm", "--op", "WRITE"},
		{"--backend", "shm", "--op", "READ"},
		{"--backend", "roce", "--op", "WRITE"},
		{"--backend", "roce", "--op", "READ"},
		{"--backend", "posix", "--op", "WRITE", "--target-seg", "FILE"},
		{"--backend", "posix", "--op", "READ", "--target-seg", "FILE"},
	} {
		t.Run(strings.Join(tc, " "), func(t *testing.T) {
			if testing.Short() && !shortXferbench[strings.Join(tc, " ")] {
				t.Skip("-short runs one variant per backend (the full suite runs all)")
			}
			args := append([]string{"xferbench", "-b", "4K", "-e", "256K", "--max-batch", "4", "-n", "5", "--check", "--chunk", "64K"}, tc...)
			out, errOut, code := runGoccl(t, args...)
			if code != 0 {
				t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
			}
			if !strings.Contains(out, "Block Size (B)      Batch Size     B/W (GB/Sec)   Avg Lat. (us)") {
				t.Fatalf("no nixlbench header:\n%s", out)
			}
			rows := 0
			for _, l := range strings.Split(out, "\n") {
				f := strings.Fields(l)
				if len(f) == 7 && f[0] != "Block" && !strings.HasPrefix(l, "#") {
					rows++
				}
			}
			if rows != 7*3 || !strings.Contains(out, "# check: 0 rows wrong") {
				t.Fatalf("%d rows (want 21), or a check failed:\n%s", rows, out)
			}
		})
	}
}

// shortXferbench is the variants -short runs (the race detector's pass).
var shortXferbench = map[string]bool{
	"--backend tcp --op WRITE":                     true,
	"--backend tcp --op READ --target-seg FILE":    true,
	"--backend shm --op READ":                      true,
	"--backend roce --op READ":                     true,
	"--backend posix --op WRITE --target-seg FILE": true,
}

// TestXferbenchRoles runs target and initiator as two processes that find
// each other through a goccl TCP store, as on two hosts.
func TestXferbenchRoles(t *testing.T) {
	srv, err := rendezvous.NewTCPServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	exe, _ := os.Executable()
	tgt := exec.Command(exe, "xferbench", "--role", "target", "--store", srv.Addr(), "-e", "1M")
	tgt.Env = append(os.Environ(), "GOCCL_CLI_TEST_MAIN=1")
	if err := tgt.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- tgt.Wait() }()
	defer tgt.Process.Kill()
	out, errOut, code := runGoccl(t, "xferbench", "--role", "initiator", "--store", srv.Addr(), "-b", "64K", "-e", "1M", "-n", "5", "--check")
	if code != 0 || !strings.Contains(out, "# check: 0 rows wrong") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	select {
	case err := <-exited: // the initiator's "done" notification ends it
		if err != nil {
			t.Fatalf("target: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the target did not exit after the initiator's notification")
	}
}

func TestXferbenchFlags(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--backend rdma", `--backend "rdma": want tcp, shm, roce or posix`},
		{"--backend roce --target-seg FILE", "a FILE target goes with --backend tcp or posix"},
		{"--op PUT", `--op "PUT": want WRITE or READ`},
		{"--backend shm --target-seg FILE", "a FILE target goes with --backend tcp or posix"},
		{"--backend posix", "give --target-seg FILE"},
		{"-b 1M -e 4K", "--start-block 1048576 above --max-block 4096"},
		{"--role target", "--role target needs --store"},
		{"-b x", `--start-block "x": want a positive size`},
		{"--start-batch 0", "want 1 <= start <= max"},
	} {
		_, errOut, code := runGoccl(t, append([]string{"xferbench"}, strings.Fields(tc.args)...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}
