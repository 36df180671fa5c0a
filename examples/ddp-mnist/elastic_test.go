package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/examples/internal/exmain"
)

// TestMain makes the test binary the ddp-mnist program when
// DDP_MNIST_ARGS is set (the arguments, space-separated), for the tests
// that run it as several processes.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv("DDP_MNIST_ARGS"); ok {
		os.Args = append([]string{"ddp-mnist"}, strings.Fields(args)...)
		exmain.Main("ddp-mnist", run) // exits on failure
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestElasticChaos runs 4 processes with -kill-rank 2 -kill-at-epoch 2 on
// a small model (batches of 1,024: 59 steps an epoch); once rank 2 has
// killed itself the test starts a replacement with -join. The survivors
// must shrink, redo the step, grow the replacement back in and end with
// identical parameters on all 4 ranks.
func TestElasticChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	const args = "-batch 1024 -hidden 64 -steps 300 -lr 0.003"
	env := append(os.Environ(), "GOCCL_STORE_ADDR="+addr, "GOCCL_JOB_TOKEN=chaos test", "GOCCL_WORLD_SIZE=4", "GOCCL_TIMEOUT=60s")
	start := func(extra []string, progArgs string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(append([]string{}, env...), extra...), "DDP_MNIST_ARGS="+progArgs)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd, &out
	}
	cmds := make([]*exec.Cmd, 4)
	outs := make([]*bytes.Buffer, 4)
	for r := range 4 {
		cmds[r], outs[r] = start([]string{"GOCCL_RANK=" + strconv.Itoa(r), "GOCCL_LOCAL_RANK=" + strconv.Itoa(r)}, args+" -kill-rank 2 -kill-at-epoch 2")
	}
	done := make(chan error, 5)
	for r, c := range cmds {
		if r != 2 {
			go func() { done <- c.Wait() }()
		}
	}
	if err := cmds[2].Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("rank 2 ended with %v, want killed:\n%s", err, outs[2])
	}
	joiner, jout := start(nil, args+" -join")
	go func() { done <- joiner.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for range 4 {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("a process failed: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("the job did not end within 3 minutes")
		}
	}
	out := outs[0].String()
	for _, want := range []string{"failure at epoch 2", "rank(s) [2] lost; 3 ranks go on", "1 rank(s) joined", "parameters identical on all 4 ranks: yes", "failures survived: 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("rank 0's output lacks %q", want)
		}
	}
	if t.Failed() {
		for r, o := range outs {
			t.Logf("rank %d:\n%s", r, o)
		}
		t.Logf("joiner:\n%s", jout)
	} else {
		t.Logf("rank 0:\n%s", out)
	}
}
